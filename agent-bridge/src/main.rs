//! `moor`: parses the command line and runs it; every subcommand lives in
//! [`moor_bridge::cli`].

use std::process::ExitCode;

use clap::Parser;
use moor_bridge::cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli.log_format.init();
    cli.run()
}
