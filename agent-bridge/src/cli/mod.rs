//! The `moor` command line: flags and environment variables, and one function per subcommand.
//! `main.rs` only parses [`Cli`] and calls [`Cli::run`]; everything a subcommand does lives here
//! or below, so it can be embedded and tested without the binary.
//!
//! Errors end here: a subcommand returns `anyhow`, and [`Cli::run`] prints it once and maps it
//! to an exit code like a shell would.

mod checkpoints;
mod export;
mod host;
mod recover;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use self::checkpoints::CheckpointsCommand;
use self::export::ExportArgs;
use self::host::HostArgs;
use self::recover::RecoverArgs;
use self::run::RunArgs;
use crate::adapter::AdapterError;
use crate::error::BridgeError;

/// Writes a subcommand's output, a line, on stdout. Unlike `println!`, it does not panic when
/// stdout is a pipe whose reader has gone (`moor recover | head -3`): the rest is lost, and the
/// subcommand, whose work is done, exits with its own status.
fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(line).and_then(|()| out.write_all(b"\n"));
}

/// `moor`'s command line.
#[derive(Debug, Parser)]
#[command(
    name = "moor",
    version,
    about = "Keep a coding agent's session reachable through moord",
    long_about = None
)]
pub struct Cli {
    /// Also trust the CA certificates in this PEM file for moord's TLS (HTTPS and WSS), e.g. a
    /// moord serving a certificate of a private CA.
    #[arg(long, env = "MOOR_CA_FILE", global = true)]
    ca_file: Option<PathBuf>,
    /// Log lines (stderr, filtered by RUST_LOG) as text or as JSON objects, one a line.
    #[arg(
        long,
        env = "MOOR_LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true
    )]
    pub log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields` (with `message`).
    Json,
}

impl LogFormat {
    /// Installs the log subscriber: `RUST_LOG`, else `warn`, on stderr, in this format.
    pub fn init(self) {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            // A failed write is reported with `eprintln!`, which panics when stderr is closed
            // (the terminal went away), killing whichever task logged; the line is lost either
            // way.
            .log_internal_errors(false);
        match self {
            Self::Text => builder.init(),
            Self::Json => builder.json().init(),
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an agent and stream its session to moord: `moor run -- claude`.
    Run(RunArgs),
    /// Print what was in flight when a session was interrupted, checked against the files here.
    Recover(RecoverArgs),
    /// Restart Claude Code on an interrupted session's own agent session, in its directory, with
    /// the recovery brief as its first prompt.
    Resume(RecoverArgs),
    /// Download a session's log as JSONL (every entry) or Markdown (the transcript).
    Export(ExportArgs),
    /// Checkpoints of this git work tree: list, show, diff, restore (here or from the server).
    #[command(subcommand)]
    Checkpoints(CheckpointsCommand),
    /// Start, stop and resume sessions on this machine when asked through moord, from what
    /// its configuration file allows (`moor host install` writes a service that runs it).
    Host(HostArgs),
    /// Log this device in to moord: shows a code and a QR code to approve while logged in;
    /// `moor run` then needs no token.
    Login {
        /// moord base URL.
        #[arg(env = "MOOR_SERVER", default_value = crate::config::DEFAULT_SERVER)]
        server: String,
    },
}

/// How long `moor` waits at exit for its status lines to reach stderr.
const STATUS_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

impl Cli {
    /// Runs the subcommand to its end: its exit code, or the error printed on stderr and mapped
    /// to one (127 for an agent command that does not exist, 126 for one that cannot run).
    pub fn run(self) -> ExitCode {
        if let Some(path) = &self.ca_file {
            if let Err(e) = crate::tls::trust_ca_file(path) {
                eprintln!("moor: {e}");
                return ExitCode::from(2);
            }
        }
        let result = match self.command {
            Command::Run(args) => run::run(args),
            Command::Recover(args) => recover::recover(args),
            Command::Resume(args) => recover::resume(args),
            Command::Checkpoints(cmd) => checkpoints::run(cmd),
            Command::Export(args) => export::export(args),
            Command::Host(args) => host::host(args),
            Command::Login { server } => run::login(&server),
        };
        // The last status lines ("everything was delivered") are worth a short wait, and come
        // before the error, if any.
        crate::status::flush(STATUS_FLUSH);
        match result {
            Ok(code) => ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(1)),
            Err(err) => ExitCode::from(report(&err)),
        }
    }
}

/// Prints a failed subcommand's error (unless the status line already explained it) and picks
/// its exit code.
fn report(err: &anyhow::Error) -> u8 {
    let bridge_err = err.downcast_ref::<BridgeError>();
    // A link that stopped for good was already explained in plain words by the status line.
    if !matches!(bridge_err, Some(BridgeError::Link(_))) {
        eprintln!("moor: {err:#}");
    }
    // Like a shell: 127 for a command that does not exist, 126 for one that cannot run.
    match bridge_err {
        Some(BridgeError::Adapter(AdapterError::Spawn { source, .. })) => match source.kind() {
            std::io::ErrorKind::NotFound => 127,
            std::io::ErrorKind::PermissionDenied => 126,
            _ => 1,
        },
        _ => 1,
    }
}

/// A runtime for one subcommand.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context;
    tokio::runtime::Runtime::new().context("start the async runtime")
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_the_agent_command_after_the_double_dash() {
        let cli =
            Cli::try_parse_from(["moor", "run", "--session", "s1", "--", "claude", "-p"]).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run: {cli:?}")
        };
        assert_eq!(args.command, ["claude", "-p"]);
    }
}
