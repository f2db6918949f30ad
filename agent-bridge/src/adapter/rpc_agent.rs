//! What the adapters of JSON-RPC agents (`acp`, `codex`) share around their protocol: the run
//! loop ([`run`]), spooling with the terminal's rendering, the stall watchdog, the prompts
//! waiting for the running turn, the requests in flight, how a remote permission decision names
//! its request and is recorded, and what is left to do once the agent is gone.
//!
//! Protocol-free: the adapters ([`Protocol`]) own their requests, their mapping and their
//! answers.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use moor_protocol::payload::{
    self, AgentActive, AgentOutput, AgentRestart, OutputStream, Resolution,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::acp::rpc;
use super::claude::decide::resolved;
use super::claude::map::{bounded, error, Signal, RAW_CHARS};
use super::claude::process::{Out, Process};
use super::claude::render::Renderer;
use super::claude::sleep_until;
use super::claude::watchdog::Watchdog;
use super::{
    settle, signal_agent, terminal, tree, AdapterDone, AdapterError, AdapterIo, AgentExit,
    AgentSignal, AgentSpec,
};
use crate::inputs::{Inputs, PendingInput};
use crate::spool::{Draft, Spool};
use crate::status::Status;

/// One JSON-RPC agent protocol, as the shared loop drives it.
pub(crate) trait Protocol {
    /// The protocol-free state.
    fn core(&mut self) -> &mut Core;
    /// The agent was started: the first entries and the first requests.
    async fn started(&mut self, process: &mut Process) -> Result<(), AdapterError>;
    /// Whether remote inputs can be applied yet (the agent's session exists).
    fn ready(&self) -> bool;
    /// A line from the agent, mapped into `drafts` (and answered when it asks).
    async fn output(&mut self, process: &mut Process, out: Out, drafts: &mut Vec<Draft>);
    /// A remote input, applied or failed.
    async fn remote(&mut self, process: &mut Process, input: PendingInput);
    /// Interrupts the running turn; `false` when none runs or it cannot be interrupted.
    async fn interrupt_turn(&mut self, process: &mut Process) -> bool;
    /// Whether a turn runs.
    fn in_turn(&self) -> bool;
    /// The log's ids of the permission requests still pending, forgotten.
    fn take_pending(&mut self) -> Vec<String>;
}

/// The I/O of a run besides what [`Core`] holds.
#[derive(Debug)]
pub(crate) struct Channels {
    inputs: Inputs,
    signals: mpsc::UnboundedReceiver<AgentSignal>,
    screen_thread: Option<std::thread::JoinHandle<()>>,
}

/// Runs `protocol` on `process` until the agent exits and `agent.exit` is spooled.
pub(crate) async fn run<P: Protocol>(
    mut protocol: P,
    mut process: Process,
    channels: Channels,
) -> Result<AdapterDone, AdapterError> {
    let Channels {
        mut inputs,
        mut signals,
        screen_thread,
    } = channels;
    protocol.started(&mut process).await?;
    let exit = loop {
        let deadline = protocol.core().watchdog.deadline();
        let ready = protocol.ready();
        tokio::select! {
            out = process.out.recv(), if !process.out_closed => match out {
                Some(out) => output_burst(&mut protocol, &mut process, out).await?,
                None => process.out_closed = true,
            },
            status = process.child.wait() => break AgentExit::from_status(status?),
            next = inputs.next(), if ready => match next {
                Ok(Some(input)) => protocol.remote(&mut process, input).await,
                Ok(None) => {}
                Err(e) => tracing::error!(error = %e, "cannot record remote inputs"),
            },
            Some(signal) = signals.recv() => forward(&mut protocol, &mut process, signal).await,
            _ = sleep_until(deadline) => protocol.core().deadline().await?,
        }
    };
    let ended = gone(&mut protocol, &mut process, exit).await?;
    protocol
        .core()
        .spool
        .append(vec![Draft::new(ended)])
        .await?;
    // The terminal writer ends when the last sender (the core's) is gone.
    drop(protocol);
    if let Some(thread) = screen_thread {
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    }
    Ok(AdapterDone { exit, inputs })
}

/// The first line and what else the agent printed meanwhile, mapped and spooled with one fsync.
async fn output_burst<P: Protocol>(
    protocol: &mut P,
    process: &mut Process,
    first: Out,
) -> Result<(), AdapterError> {
    let mut drafts = Vec::new();
    protocol.output(process, first, &mut drafts).await;
    while drafts.len() < BURST {
        match process.out.try_recv() {
            Ok(out) => protocol.output(process, out, &mut drafts).await,
            Err(_) => break,
        }
    }
    protocol.core().record(drafts).await
}

/// A signal for the agent: an interrupt stops the running turn when there is one; otherwise
/// the agent is stopped (SIGTERM for an interrupt).
async fn forward<P: Protocol>(protocol: &mut P, process: &mut Process, signal: AgentSignal) {
    if signal == AgentSignal::Interrupt
        && protocol.in_turn()
        && protocol.interrupt_turn(process).await
    {
        return;
    }
    protocol.core().stopping = true;
    let signal = match signal {
        AgentSignal::Interrupt => AgentSignal::Terminate,
        other => other,
    };
    if let Err(e) = signal_agent(process.pid, signal) {
        tracing::warn!(error = %e, ?signal, "could not signal the agent");
    }
}

/// The process is gone: stop what it left running, read what is left in its pipes, withdraw
/// its questions, fail the prompts it will never take, and name the tool calls under way.
async fn gone<P: Protocol>(
    protocol: &mut P,
    process: &mut Process,
    exit: AgentExit,
) -> Result<payload::AgentExit, AdapterError> {
    let stopped = tree::stop_leftovers(protocol.core().spec.options.stop_grace).await;
    let deadline = Instant::now() + PIPE_DRAIN;
    while let Some(out) = drained(process, deadline).await {
        output_burst(protocol, process, out).await?;
    }
    let withdrawn = withdrawn(protocol.take_pending(), "the agent exited");
    let in_turn = protocol.in_turn();
    let core = protocol.core();
    core.record(withdrawn).await?;
    core.gone(in_turn, exit).await?;
    Ok(payload::AgentExit {
        stopped_tools: core.watchdog.open_tools(),
        stopped_processes: stopped,
        ..exit.payload()
    })
}

/// `agent.permission.resolved` "cancelled" for each of `ids`, saying `why`.
pub(crate) fn withdrawn(ids: impl IntoIterator<Item = String>, why: &str) -> Vec<Draft> {
    ids.into_iter()
        .map(|id| resolved(&id, Resolution::Cancelled, None, None, Some(why)))
        .collect()
}

/// Our requests in flight, by JSON-RPC id, each with what it was (`C`).
#[derive(Debug)]
pub(crate) struct Calls<C> {
    next_id: u64,
    open: BTreeMap<u64, C>,
}

impl<C> Default for Calls<C> {
    fn default() -> Self {
        Self {
            next_id: 0,
            open: BTreeMap::new(),
        }
    }
}

impl<C> Calls<C> {
    /// Sends the request `method` and remembers it as `call`.
    pub(crate) async fn send(
        &mut self,
        process: &mut Process,
        call: C,
        method: &str,
        params: Value,
    ) -> Result<(), String> {
        let id = self.next_id;
        self.next_id += 1;
        process.send(&rpc::request(id, method, params)).await?;
        self.open.insert(id, call);
        Ok(())
    }

    /// The request that the answer `id` is for, forgotten.
    pub(crate) fn answered(&mut self, id: u64) -> Option<C> {
        self.open.remove(&id)
    }
}

/// How long the pipes of an exited agent may stay open before they are no longer read.
pub(crate) const PIPE_DRAIN: Duration = Duration::from_secs(5);
/// Most messages spooled with one fsync.
pub(crate) const BURST: usize = 1024;
/// Most prompts waiting for the running turn to end.
pub(crate) const MAX_QUEUED_PROMPTS: usize = 32;

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
        let mut text = String::new();
        for d in &drafts {
            text.extend(self.renderer.render(d));
        }
        if !text.is_empty() {
            let _ = self.screen.try_send(text.into_bytes());
        }
        self.spool.append(drafts).await?;
        Ok(())
    }

    /// Feeds `signals` to the watchdog (an `agent.active` first when they end a stall), then
    /// `entries` into `drafts`.
    pub(crate) fn observe(
        &mut self,
        signals: &[Signal],
        entries: Vec<Draft>,
        drafts: &mut Vec<Draft>,
    ) {
        if self.watchdog.observe(signals, Self::now()) {
            drafts.push(Draft::new(AgentActive {
                after: "stall".into(),
            }));
            self.status.note("the agent is producing output again");
        }
        drafts.extend(entries);
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

    /// The recovery brief to send as the first prompt of a continued conversation.
    pub(crate) fn brief(&self) -> Option<String> {
        self.spec
            .options
            .continuation
            .as_ref()
            .and_then(|c| c.prompt.clone())
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
    pub(crate) async fn decided(
        &mut self,
        request_id: &str,
        allow: bool,
        message: Option<&str>,
        by: &str,
        input_seq: Option<u64>,
    ) -> Result<(), String> {
        self.watchdog.permission_done(Self::now());
        let decision = if allow {
            Resolution::Allow
        } else {
            Resolution::Deny
        };
        let entry = resolved(request_id, decision, Some(by), input_seq, message);
        self.record(vec![entry])
            .await
            .map_err(|e| format!("decided, but could not record it: {e}"))
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

/// The request a remote `input.permission` answers: the one it names, else the only pending
/// one.
pub(crate) fn request_to_answer<'a>(
    named: Option<String>,
    mut pending: impl Iterator<Item = &'a String>,
) -> Result<String, String> {
    match (named, pending.next(), pending.next()) {
        (Some(id), _, _) => Ok(id),
        (None, Some(only), None) => Ok(only.clone()),
        _ => Err("input.permission needs \"request_id\"".to_owned()),
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
