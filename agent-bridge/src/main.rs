//! `moor`: parses the command line and runs it; every subcommand lives in
//! [`moor_bridge::cli`].

use std::process::ExitCode;

use clap::Parser;
use moor_bridge::cli::Cli;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    Cli::parse().run()
}
