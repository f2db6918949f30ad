//! The protocol-free state of a JSON-RPC agent's run: spooling with the terminal's rendering,
//! the stall watchdog, the prompts waiting for the running turn, how a remote permission
//! decision names its request and is recorded, and what is left when the agent exits.

use std::collections::VecDeque;
use std::time::Duration;

use moor_protocol::payload::{
    self, AgentActive, AgentOutput, AgentRestart, OutputStream, Resolution,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::adapter::acp::map::Mapped;
use crate::adapter::claude::decide::{not_recorded, resolved, Decision};
use crate::adapter::claude::map::{bounded, error, RAW_CHARS};
use crate::adapter::claude::process::{Out, Process};
use crate::adapter::claude::render::Renderer;
use crate::adapter::claude::watchdog::Watchdog;
use crate::adapter::{
    settle, signal_agent, terminal, AdapterError, AdapterIo, AdapterKind, AgentExit, AgentSignal,
    AgentSpec,
};
use crate::inputs::{Inputs, PendingInput};
use crate::spool::{Draft, Spool};
use crate::status::Status;

/// How long the pipes of an exited agent may stay open before they are no longer read.
pub(crate) const PIPE_DRAIN: Duration = Duration::from_secs(5);
/// Most messages spooled with one fsync.
pub(crate) const BURST: usize = 1024;
/// Most prompts waiting for the running turn to end.
pub(crate) const MAX_QUEUED_PROMPTS: usize = 32;

/// The I/O of a run besides what [`Core`] holds.
#[derive(Debug)]
pub(crate) struct Channels {
    pub(crate) inputs: Inputs,
    pub(crate) signals: mpsc::UnboundedReceiver<AgentSignal>,
    pub(crate) screen_thread: Option<std::thread::JoinHandle<()>>,
}

/// The protocol-free half of a JSON-RPC agent's run.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) spec: AgentSpec,
    pub(crate) spool: Spool,
    pub(crate) status: Status,
    screen: mpsc::Sender<Vec<u8>>,
    renderer: Renderer,
    pub(crate) watchdog: Watchdog,
    /// Prompts waiting for the turn to end (`None`: not a remote input, e.g. the brief).
    pub(crate) queued: VecDeque<(Option<PendingInput>, String)>,
    /// `moor` is stopping the agent: its exit is not a crash.
    pub(crate) stopping: bool,
}

impl Core {
    /// A run of `spec` with `io`; `agent` names the agent on the terminal.
    pub(crate) fn start(spec: AgentSpec, io: AdapterIo, agent: &str) -> (Self, Channels) {
        let AdapterIo {
            spool,
            inputs,
            signals,
            status,
        } = io;
        let (screen, screen_thread) = terminal::spawn_stdout_writer(256);
        let core = Self {
            watchdog: Watchdog::new(
                spec.options.stall_timeout,
                spec.options.tool_timeout,
                Instant::now(),
            ),
            spec,
            spool,
            status,
            screen,
            renderer: Renderer::for_agent(agent),
            queued: VecDeque::new(),
            stopping: false,
        };
        let channels = Channels {
            inputs,
            signals,
            screen_thread,
        };
        (core, channels)
    }

    pub(crate) fn now() -> Instant {
        Instant::now()
    }

    /// Shows `drafts` on the terminal and spools them.
    pub(crate) async fn record(&mut self, drafts: Vec<Draft>) -> Result<(), AdapterError> {
        if drafts.is_empty() {
            return Ok(());
        }
        self.renderer.show(&drafts, &self.screen);
        self.spool.append(drafts).await?;
        Ok(())
    }

    /// Feeds `mapped`'s signals to the watchdog (an `agent.active` first when they end a
    /// stall), then its entries into `drafts`.
    pub(crate) fn observe(&mut self, mapped: Mapped, drafts: &mut Vec<Draft>) {
        if self.watchdog.observe(&mapped.signals, Self::now()) {
            drafts.push(Draft::new(AgentActive {
                after: "stall".into(),
            }));
            self.status.note("the agent is producing output again");
        }
        drafts.extend(mapped.drafts);
    }

    /// The first entries of the run: `agent.start`, after an `agent.restart` when an earlier
    /// conversation is continued.
    pub(crate) fn start_entries(&self, start: payload::AgentStart) -> Vec<Draft> {
        let mut drafts = vec![Draft::new(start)];
        if let Some(c) = &self.spec.options.continuation {
            self.status.note(format!(
                "continuing the agent's conversation {} (moor run --fresh starts a new one)",
                c.agent_session_id
            ));
            drafts.insert(
                0,
                Draft::new(AgentRestart {
                    reason: "continued".into(),
                    agent_session_id: c.agent_session_id.clone(),
                    attempt: 1,
                    prompt: c.prompt.clone().unwrap_or_default(),
                    previous_exit: None,
                }),
            );
        }
        drafts
    }

    /// The agent was started: `agent.start` for `kind` (after an `agent.restart` when an
    /// earlier conversation is continued), spooled.
    pub(crate) async fn started(
        &mut self,
        process: &Process,
        kind: AdapterKind,
    ) -> Result<(), AdapterError> {
        let start = payload::AgentStart {
            command: process.argv.clone(),
            ..self.spec.start_entry(process.pid, kind)
        };
        let drafts = self.start_entries(start);
        self.record(drafts).await
    }

    /// The agent refused what its run needs (`why` says what): it is stopped, and its exit is
    /// not a crash.
    pub(crate) fn give_up(&mut self, process: &Process, why: &str, drafts: &mut Vec<Draft>) {
        drafts.push(error(why, None));
        self.stopping = true;
        let _ = signal_agent(process.pid, AgentSignal::Terminate);
    }

    /// The running turn was interrupted with the permission request `request_id` pending (and
    /// answered "cancelled" to the agent): the watchdog stops waiting for a person.
    pub(crate) fn interrupted(&mut self, request_id: &str) -> Draft {
        self.watchdog.permission_done(Self::now());
        let why = Some("the turn was interrupted");
        resolved(request_id, Resolution::Cancelled, None, None, why)
    }

    /// The recovery brief to send as the first prompt of a continued conversation.
    pub(crate) fn brief(&self) -> Option<String> {
        self.spec
            .options
            .continuation
            .as_ref()
            .and_then(|c| c.prompt.clone())
    }

    /// The agent's own id of the conversation to continue, when one is continued.
    pub(crate) fn continued_session(&self) -> Option<String> {
        let c = self.spec.options.continuation.as_ref();
        c.map(|c| c.agent_session_id.clone())
    }

    /// A stderr line as an entry; `None` for a stdout line, returned to be parsed.
    pub(crate) fn stdout(out: Out, drafts: &mut Vec<Draft>) -> Option<String> {
        match out {
            Out::Stdout(line) if line.trim().is_empty() => None,
            Out::Stdout(line) => Some(line),
            Out::Stderr(text) => {
                drafts.push(Draft::new(AgentOutput {
                    stream: OutputStream::Stderr,
                    text,
                }));
                None
            }
            Out::Skipped(why) => {
                drafts.push(error(&why, None));
                None
            }
        }
    }

    /// Queues a prompt sent while a turn runs (applied when it is sent); fails it when too
    /// many wait.
    pub(crate) async fn queue(&mut self, input: PendingInput, text: String) {
        if self.queued.len() >= MAX_QUEUED_PROMPTS {
            let why = format!("{MAX_QUEUED_PROMPTS} prompts already wait for the running turn");
            return settle(input, &self.status, Err(why)).await;
        }
        self.queued.push_back((Some(input), text));
    }

    /// A person decided a permission request (already answered to the agent): the watchdog
    /// stops waiting for a person, and who decided is recorded.
    pub(crate) async fn decided(&mut self, decision: &Decision) -> Result<(), String> {
        self.watchdog.permission_done(Self::now());
        let entry = decision.entry();
        self.record(vec![entry]).await.map_err(not_recorded)
    }

    /// The silence deadline passed: a stall, if the watchdog says so.
    pub(crate) async fn deadline(&mut self) -> Result<(), AdapterError> {
        let Some(stall) = self.watchdog.check(Self::now()) else {
            return Ok(());
        };
        self.status.note(format!(
            "the agent has been silent for {} s in a turn; reported as stalled (interrupt it, or wait)",
            stall.silent.as_secs()
        ));
        self.record(vec![Draft::new(stall.payload())]).await
    }

    /// The agent is gone: fails the prompts it will never take, and says so when it died
    /// during a turn `moor` did not stop.
    pub(crate) async fn gone(
        &mut self,
        in_turn: bool,
        exit: AgentExit,
    ) -> Result<(), AdapterError> {
        for (input, _) in std::mem::take(&mut self.queued) {
            if let Some(input) = input {
                let why = Err("the agent exited before taking it".into());
                settle(input, &self.status, why).await;
            }
        }
        if !self.stopping && in_turn {
            let what = format!(
                "the agent exited during a turn ({})",
                bounded(&format!("{exit:?}"), RAW_CHARS).0
            );
            self.record(vec![error(&what, None)]).await?;
        }
        Ok(())
    }
}

/// The next line the exited agent's pipes still hold, until they close or [`PIPE_DRAIN`] has
/// passed since `deadline` was set.
pub(crate) async fn drained(process: &mut Process, deadline: Instant) -> Option<Out> {
    if process.out_closed {
        return None;
    }
    match tokio::time::timeout_at(deadline, process.out.recv()).await {
        Ok(Some(out)) => Some(out),
        Ok(None) => {
            process.out_closed = true;
            None
        }
        Err(_) => None,
    }
}
