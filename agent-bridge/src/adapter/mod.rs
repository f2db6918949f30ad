//! The local agent side: an adapter starts the agent, turns what it does into spooled entries,
//! and applies remote inputs to it.
//!
//! The boundary is deliberately small: an adapter (`lines`, `pty`, `claude`) gets an
//! [`AdapterIo`] (the spool to append to, the queue of inputs, the signals to forward, the
//! status line printer) and returns an [`AdapterDone`] once the agent is gone and its last entry
//! is spooled. It never touches the network, and input accounting is done for it by
//! [`crate::inputs`]: it only says applied or failed.

pub mod acp;
#[cfg(test)]
mod capture_tests;
pub mod chunks;
pub mod claude;
pub mod codex;
pub mod foreground;
pub mod headless;
pub mod lines;
mod process;
pub mod pty;
mod rpc_agent;
pub use rpc_agent::RpcAgent;
pub mod terminal;
pub mod tree;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use moor_protocol::payload;
use rustix::process::{kill_process_group, Pid, Signal};
use tokio::sync::mpsc;

use crate::inputs::{Inputs, LedgerError, PendingInput};
use crate::spool::{Spool, SpoolError};
use crate::status::Status;

/// Which adapter runs the agent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AdapterKind {
    /// Piped stdin/stdout/stderr, one entry per output line.
    #[default]
    Lines,
    /// A pseudo-terminal, mirrored byte for byte.
    Pty,
    /// Claude Code's stream-json mode, as typed entries.
    Claude,
    /// An Agent Client Protocol agent (JSON-RPC over stdio), as typed entries.
    Acp,
    /// The Codex CLI's `codex app-server` (JSON-RPC over stdio), as typed entries.
    Codex,
    /// Gemini CLI headless, one `gemini -p … --output-format stream-json` per turn.
    GeminiHeadless,
    /// `codex exec --json`, one process per turn.
    CodexExec,
}

impl AdapterKind {
    /// The name sent in `AgentInfo.adapter`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lines => "lines",
            Self::Pty => "pty",
            Self::Claude => "claude",
            Self::Acp => "acp",
            Self::Codex => "codex",
            Self::GeminiHeadless => "gemini-headless",
            Self::CodexExec => "codex-exec",
        }
    }
}

impl AdapterKind {
    /// What this adapter can know about its agent (`agent.start`'s `capabilities`): only Claude
    /// Code, ACP agents, Codex and the headless adapters report turns; the others see output as it comes and nothing of what
    /// it means.
    pub fn capabilities(self) -> payload::AgentCapabilities {
        payload::AgentCapabilities {
            turns: self.structured(),
            output_activity: true,
            terminal_wait: false,
        }
    }
}

impl AdapterKind {
    /// Whether the adapter understands turns, tools and permissions (and can continue the
    /// agent's own conversation after a crash).
    pub fn structured(self) -> bool {
        matches!(
            self,
            Self::Claude | Self::Acp | Self::Codex | Self::GeminiHeadless | Self::CodexExec
        )
    }
}

/// What `--mode` asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AdapterMode {
    /// `claude` when the command is `claude`, `codex` when it is `codex` running its app-server
    /// (no subcommand, or `app-server`), `acp` when it is `gemini` or `codex-acp`, else `pty` when
    /// stdin is a terminal, else `lines`.
    #[default]
    Auto,
    /// This adapter, whatever the command.
    Fixed(AdapterKind),
}

impl AdapterMode {
    /// The adapter for `command`, given whether a person is at `moor`'s terminal.
    pub fn resolve(self, command: &[String], stdin_is_terminal: bool) -> AdapterKind {
        match self {
            Self::Fixed(kind) => kind,
            Self::Auto if command.first().is_some_and(|c| is_claude(c)) => AdapterKind::Claude,
            Self::Auto if codex::runs_app_server(command) => AdapterKind::Codex,
            Self::Auto if command.first().is_some_and(|c| acp::is_acp_agent(c)) => AdapterKind::Acp,
            Self::Auto if stdin_is_terminal => AdapterKind::Pty,
            Self::Auto => AdapterKind::Lines,
        }
    }
}

/// Whether `program` is Claude Code's CLI (`claude`, by any path).
pub fn is_claude(program: &str) -> bool {
    Path::new(program)
        .file_name()
        .is_some_and(|n| n == "claude")
}

/// Knobs of the adapters beyond the command line. `Default` is what `moor run` uses.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// A person is at `moor`'s terminal: mirror output there and take its keystrokes.
    pub interactive: bool,
    /// Silence while a model response streams that counts as a stall.
    pub stall_timeout: Duration,
    /// Silence while a tool runs that counts as a stall.
    pub tool_timeout: Duration,
    /// Restart a stalled or crashed Claude Code on the same agent session.
    pub auto_resume: bool,
    /// Most restarts in a row without a finished turn in between.
    pub max_restarts: u32,
    /// How long the agent, and what it left running when it ended, get between SIGTERM and
    /// SIGKILL.
    pub stop_grace: Duration,
    /// Continue an earlier conversation of the agent instead of starting a new one (Claude
    /// Code: `--resume <id>`), as `moor run --session X` does after a crash.
    pub continuation: Option<Continuation>,
}

/// An earlier agent conversation to continue, and what to tell the agent first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuation {
    /// The agent's own session id (Claude Code's `session_id`).
    pub agent_session_id: String,
    /// The recovery prompt, when work was cut off; none when the last run ended cleanly.
    pub prompt: Option<String>,
}

impl Default for AgentOptions {
    fn default() -> Self {
        Self {
            interactive: false,
            stall_timeout: Duration::from_secs(60),
            tool_timeout: Duration::from_secs(600),
            auto_resume: false,
            max_restarts: 3,
            stop_grace: Duration::from_secs(5),
            continuation: None,
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
    /// Adapter knobs.
    pub options: AgentOptions,
}

impl AgentSpec {
    /// The `agent.start` entry of this agent, started as `pid` by the adapter `kind`.
    pub fn start_entry(&self, pid: u32, kind: AdapterKind) -> payload::AgentStart {
        payload::AgentStart {
            command: self.command.clone(),
            cwd: Some(self.cwd.display().to_string()),
            pid: Some(pid),
            adapter: Some(kind.name().into()),
            capabilities: Some(kind.capabilities()),
            ..payload::AgentStart::default()
        }
    }
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
    pub fn payload(&self) -> payload::AgentExit {
        payload::AgentExit {
            code: self.code,
            signal: self.signal,
            ..payload::AgentExit::default()
        }
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

/// Record an input's outcome (applied, or failed with its reason) and tell the person at the
/// terminal. A ledger that cannot record it is logged: the input then stays in flight, and the
/// next start of `moor` reports it as uncertain.
pub(crate) async fn settle(input: PendingInput, status: &Status, result: Result<(), String>) {
    status.input_outcome(&input, result.as_ref().err());
    let recorded = match result {
        Ok(()) => input.applied().await,
        Err(reason) => input.failed(reason).await,
    };
    if let Err(e) = recorded {
        tracing::error!(error = %e, "could not record an input's outcome");
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
    /// Lines for the person at the terminal (receipts, stalls).
    pub status: Status,
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

/// The agent's current process id. The Claude adapter replaces its process when it resumes the
/// agent after a crash or a stall, so whoever signals the agent reads this, not the first pid.
#[derive(Debug, Clone)]
pub struct AgentPid(Arc<AtomicU32>);

impl AgentPid {
    /// A cell holding `pid`.
    pub fn new(pid: u32) -> Self {
        Self(Arc::new(AtomicU32::new(pid)))
    }

    /// The pid of the process running now.
    pub fn get(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }

    /// Records the replacement process.
    pub(crate) fn set(&self, pid: u32) {
        self.0.store(pid, Ordering::Release);
    }
}

/// A started agent, of whichever adapter.
#[derive(Debug)]
pub enum Agent {
    /// The `lines` adapter.
    Lines(lines::LinesAgent),
    /// The `pty` adapter.
    Pty(pty::PtyAgent),
    /// The `claude` adapter.
    Claude(claude::ClaudeAgent),
    /// The `acp` adapter.
    Acp(RpcAgent),
    /// The `codex` adapter.
    Codex(RpcAgent),
    /// The `gemini-headless` and `codex-exec` adapters.
    Headless(headless::HeadlessAgent),
}

impl Agent {
    /// Start the agent described by `spec` with the adapter `kind`.
    pub fn start(kind: AdapterKind, spec: &AgentSpec) -> Result<Self, AdapterError> {
        match kind {
            AdapterKind::Lines => lines::LinesAgent::start(spec).map(Self::Lines),
            AdapterKind::Pty => pty::PtyAgent::start(spec).map(Self::Pty),
            AdapterKind::Claude => claude::ClaudeAgent::start(spec).map(Self::Claude),
            AdapterKind::Acp => acp::start(spec).map(Self::Acp),
            AdapterKind::Codex => codex::start(spec).map(Self::Codex),
            AdapterKind::GeminiHeadless | AdapterKind::CodexExec => {
                headless::HeadlessAgent::start(kind, spec).map(Self::Headless)
            }
        }
    }

    /// The agent's process id, kept current across automatic restarts.
    pub fn pid(&self) -> AgentPid {
        match self {
            Self::Lines(agent) => AgentPid::new(agent.pid()),
            Self::Pty(agent) => AgentPid::new(agent.pid()),
            Self::Claude(agent) => agent.pid(),
            Self::Acp(agent) | Self::Codex(agent) => agent.pid(),
            Self::Headless(agent) => agent.pid(),
        }
    }

    /// Run until the agent is gone and `agent.exit` is spooled.
    pub async fn run(self, io: AdapterIo) -> Result<AdapterDone, AdapterError> {
        match self {
            Self::Lines(agent) => agent.run(io).await,
            Self::Pty(agent) => agent.run(io).await,
            Self::Claude(agent) => agent.run(io).await,
            Self::Acp(agent) => acp::run(agent, io).await,
            Self::Codex(agent) => codex::run(agent, io).await,
            Self::Headless(agent) => agent.run(io).await,
        }
    }
}

/// A command line's words, split at white space (for tests of command lines).
#[cfg(test)]
pub(crate) fn argv(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_owned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_mode_picks_claude_by_name_then_pty_for_a_terminal() {
        let cmd = |c: &str| vec![c.to_owned(), "-x".to_owned()];
        let auto = AdapterMode::Auto;
        assert_eq!(auto.resolve(&cmd("claude"), false), AdapterKind::Claude);
        assert_eq!(
            auto.resolve(&cmd("/opt/bin/claude"), true),
            AdapterKind::Claude
        );
        assert_eq!(auto.resolve(&cmd("gemini"), false), AdapterKind::Acp);
        assert_eq!(auto.resolve(&["/x/codex".into()], true), AdapterKind::Codex);
        let exec = ["codex".to_owned(), "exec".to_owned()];
        assert_eq!(auto.resolve(&exec, true), AdapterKind::Pty);
        assert_eq!(auto.resolve(&cmd("codex-acp"), false), AdapterKind::Acp);
        assert_eq!(auto.resolve(&cmd("bash"), true), AdapterKind::Pty);
        assert_eq!(auto.resolve(&cmd("bash"), false), AdapterKind::Lines);
        let pty = AdapterMode::Fixed(AdapterKind::Pty);
        assert_eq!(pty.resolve(&cmd("claude"), false), AdapterKind::Pty);
    }

    #[test]
    fn headless_adapters_are_asked_for_never_picked_by_name() {
        let auto = AdapterMode::Auto;
        assert_eq!(auto.resolve(&["gemini".into()], false), AdapterKind::Acp);
        assert_eq!(auto.resolve(&["codex".into()], false), AdapterKind::Codex);
        let headless = AdapterMode::Fixed(AdapterKind::GeminiHeadless);
        assert_eq!(
            headless.resolve(&["gemini".into()], false),
            AdapterKind::GeminiHeadless
        );
        assert_eq!(AdapterKind::GeminiHeadless.name(), "gemini-headless");
        assert_eq!(AdapterKind::CodexExec.name(), "codex-exec");
        assert!(AdapterKind::CodexExec.capabilities().turns);
    }

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
            payload::AgentExit {
                code: None,
                signal: Some(9),
                ..payload::AgentExit::default()
            }
        );
    }
}
