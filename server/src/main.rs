//! `moord`: parse flags and environment, then run the library (`moor_server::cli`): serve until
//! SIGTERM/SIGINT, or run an administration command (users, keys, `migrate-store`).

use clap::Parser;
use moor_server::cli::{init_tracing, Config, Signals};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // First of all: a SIGTERM from here on stops the server cleanly, even during its start.
    let signals = Signals::install()?;
    let config = Config::parse();
    init_tracing(std::io::stderr, config.log_format);
    config.run(signals).await
}
