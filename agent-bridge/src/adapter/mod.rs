//! The local agent side: an adapter starts the agent, turns what it does into spooled entries,
//! and applies remote inputs to it.
//!
//! The boundary is deliberately small so other adapters (`pty`, `claude`) can sit next to
//! `lines`: an adapter gets an [`AdapterIo`] (the spool to append to, the queue of inputs, the
//! signals to forward) and returns an [`AdapterDone`] once the agent is gone and its last entry
//! is spooled. It never touches the network, and input accounting is done for it by
//! [`crate::inputs`]: it only says applied or failed.

pub mod lines;

use std::io;
use std::path::PathBuf;

use rustix::process::{kill_process_group, Pid, Signal};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::inputs::{Inputs, LedgerError};
use crate::spool::{Spool, SpoolError};

/// Which adapter runs the agent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AdapterKind {
    /// Piped stdin/stdout/stderr, one entry per output line.
    #[default]
    Lines,
}

impl AdapterKind {
    /// The name sent in `AgentInfo.adapter`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lines => "lines",
        }
    }
}

/// What to run and where.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    /// Command and arguments.
    pub command: Vec<String>,
    /// Working directory.
    pub cwd: PathBuf,
}

/// A signal to pass on to the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentSignal {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM.
    Terminate,
    /// SIGKILL.
    Kill,
}

impl AgentSignal {
    fn raw(self) -> Signal {
        match self {
            Self::Interrupt => Signal::INT,
            Self::Terminate => Signal::TERM,
            Self::Kill => Signal::KILL,
        }
    }
}

/// Send `signal` to the agent's process group (the agent runs in its own group, so its
/// children get it too, as they would from a terminal).
pub fn signal_agent(pid: u32, signal: AgentSignal) -> io::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::other("invalid pid"))?;
    kill_process_group(pid, signal.raw()).map_err(io::Error::from)
}

/// How the agent process ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentExit {
    /// Exit code, if it exited.
    pub code: Option<i32>,
    /// Signal number, if a signal killed it.
    pub signal: Option<i32>,
}

impl AgentExit {
    /// From the OS's status.
    pub fn from_status(status: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        Self {
            code: status.code(),
            signal: status.signal(),
        }
    }

    /// The `agent.exit` payload.
    pub fn payload(&self) -> Value {
        json!({ "code": self.code, "signal": self.signal })
    }

    /// The exit code `moor` passes on: the agent's, or 128 + signal like a shell.
    pub fn exit_code(&self) -> i32 {
        match (self.code, self.signal) {
            (Some(code), _) => code,
            (None, Some(signal)) => 128 + signal,
            (None, None) => 1,
        }
    }
}

/// What an adapter works with.
#[derive(Debug)]
pub struct AdapterIo {
    /// Append entries here; they are durable when the call returns.
    pub spool: Spool,
    /// Remote inputs, already deduplicated and marked in flight.
    pub inputs: Inputs,
    /// Signals to forward to the agent.
    pub signals: mpsc::UnboundedReceiver<AgentSignal>,
}

/// An adapter's result once the agent is gone.
#[derive(Debug)]
pub struct AdapterDone {
    /// How it ended (already spooled as `agent.exit`).
    pub exit: AgentExit,
    /// The input queue, handed back so later inputs can be failed as "agent has exited".
    pub inputs: Inputs,
}

/// Adapter failures.
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    /// The agent could not be started.
    #[error("cannot start {command:?}: {source}")]
    Spawn {
        /// The program.
        command: String,
        /// Why.
        source: io::Error,
    },
    /// Entries could not be spooled.
    #[error("spool: {0}")]
    Spool(#[from] SpoolError),
    /// Inputs could not be accounted for.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// Talking to the agent process failed.
    #[error("agent process: {0}")]
    Io(#[from] io::Error),
}

/// A started agent, of whichever adapter.
#[derive(Debug)]
pub enum Agent {
    /// The `lines` adapter.
    Lines(lines::LinesAgent),
}

impl Agent {
    /// Start the agent described by `spec` with the adapter `kind`.
    pub fn start(kind: AdapterKind, spec: &AgentSpec) -> Result<Self, AdapterError> {
        match kind {
            AdapterKind::Lines => lines::LinesAgent::start(spec).map(Self::Lines),
        }
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        match self {
            Self::Lines(agent) => agent.pid(),
        }
    }

    /// Run until the agent is gone and `agent.exit` is spooled.
    pub async fn run(self, io: AdapterIo) -> Result<AdapterDone, AdapterError> {
        match self {
            Self::Lines(agent) => agent.run(io).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_shell_conventions() {
        assert_eq!(
            AgentExit {
                code: Some(3),
                signal: None
            }
            .exit_code(),
            3
        );
        assert_eq!(
            AgentExit {
                code: None,
                signal: Some(15)
            }
            .exit_code(),
            143
        );
        assert_eq!(
            AgentExit {
                code: None,
                signal: Some(9)
            }
            .payload(),
            json!({"code": null, "signal": 9})
        );
    }
}
