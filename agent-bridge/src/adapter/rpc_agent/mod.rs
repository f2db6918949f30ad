//! What the adapters of JSON-RPC agents (`acp`, `codex`) share around their protocol: the
//! started process ([`RpcAgent`]), the run loop ([`run`]) with remote input and signals, the
//! requests in flight ([`Calls`]), and what is left to do once the agent is gone; the
//! protocol-free state is [`Core`].
//!
//! Protocol-free: the adapters ([`Protocol`]) own their requests, their mapping and their
//! answers.

mod state;

use std::collections::BTreeMap;

use moor_protocol::payload;
use moor_protocol::{kinds, BodyError, EntryBody};
use serde_json::Value;
use tokio::time::Instant;

pub(crate) use self::state::{drained, Channels, Core, BURST, PIPE_DRAIN};
use super::acp::rpc;
use super::claude::decide::{withdrawn, Decision};
use super::claude::map::error;
use super::claude::process::{Out, Process};
use super::claude::sleep_until;
use super::{
    settle, signal_agent, tree, AdapterDone, AdapterError, AdapterIo, AgentExit, AgentPid,
    AgentSignal, AgentSpec,
};
use crate::inputs::PendingInput;
use crate::spool::Draft;

/// One JSON-RPC agent protocol, as the shared loop drives it.
pub(crate) trait Protocol {
    /// The adapter's name, for the person whose input it does not take.
    const ADAPTER: &'static str;
    /// The protocol-free state.
    fn core(&mut self) -> &mut Core;
    /// The agent was started: the first entries and the first requests.
    async fn started(&mut self, process: &mut Process) -> Result<(), AdapterError>;
    /// Whether remote inputs can be applied yet (the agent's session exists).
    fn ready(&self) -> bool;
    /// A line from the agent, mapped into `drafts` (and answered when it asks).
    async fn output(&mut self, process: &mut Process, out: Out, drafts: &mut Vec<Draft>);
    /// Sends `text` as the next turn.
    async fn prompt(&mut self, process: &mut Process, text: &str) -> Result<(), String>;
    /// Answers the pending permission request a person's `decision` is for, and records it.
    async fn decide(&mut self, process: &mut Process, decision: &Decision) -> Result<(), String>;
    /// Interrupts the running turn (pending requests are answered "cancelled" first).
    async fn interrupt(&mut self, process: &mut Process) -> Result<(), String>;
    /// Whether a turn runs.
    fn in_turn(&self) -> bool;
    /// The log's ids of the permission requests still pending.
    fn pending(&self) -> Vec<String>;
    /// The log's ids of the permission requests still pending, forgotten.
    fn take_pending(&mut self) -> Vec<String>;
}

/// A JSON-RPC agent's process (of the `acp` or the `codex` adapter), started and ready to run
/// the adapter's protocol.
#[derive(Debug)]
pub struct RpcAgent {
    process: Process,
    pid: AgentPid,
    spec: AgentSpec,
}

impl RpcAgent {
    /// Starts `argv` as `spec`'s agent.
    pub(crate) fn start(spec: &AgentSpec, argv: Vec<String>) -> Result<Self, AdapterError> {
        let process = Process::spawn_argv(spec, argv)?;
        Ok(Self {
            pid: AgentPid::new(process.pid),
            process,
            spec: spec.clone(),
        })
    }

    /// The process id.
    pub fn pid(&self) -> AgentPid {
        self.pid.clone()
    }

    /// Runs the protocol `protocol` makes of the run's core until the agent exits and
    /// `agent.exit` is spooled; `agent` names the agent on the terminal.
    pub(crate) async fn run<P: Protocol>(
        self,
        io: AdapterIo,
        agent: &str,
        protocol: impl FnOnce(Core) -> P,
    ) -> Result<AdapterDone, AdapterError> {
        let (core, channels) = Core::start(self.spec, io, agent);
        run(protocol(core), self.process, channels).await
    }
}

/// Runs `protocol` on `process` until the agent exits and `agent.exit` is spooled.
async fn run<P: Protocol>(
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
                Ok(Some(input)) => remote(&mut protocol, &mut process, input).await,
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
        && protocol.interrupt(process).await.is_ok()
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

/// A remote input: a prompt (queued while a turn runs), an interrupt, or a permission decision;
/// applied or failed.
async fn remote<P: Protocol>(protocol: &mut P, process: &mut Process, input: PendingInput) {
    let by = input.author.clone();
    let result = match input.body() {
        Ok(EntryBody::InputText(prompt)) if protocol.in_turn() => {
            // Applied when it is sent, after the running turn.
            return protocol.core().queue(input, prompt.text).await;
        }
        Ok(EntryBody::InputText(prompt)) => protocol.prompt(process, &prompt.text).await,
        Ok(EntryBody::InputInterrupt(_)) => protocol.interrupt(process).await,
        Ok(EntryBody::InputPermission(answer)) => {
            let pending = protocol.pending();
            match Decision::remote(answer, pending.iter(), &by, Some(input.seq.0)) {
                Ok(decision) => protocol.decide(process, &decision).await,
                Err(e) => Err(e),
            }
        }
        Err(BodyError::Malformed(e)) if kinds::is_input(&input.kind) => {
            Err(format!("malformed {} payload: {e}", input.kind))
        }
        Ok(_) | Err(_) => Err(format!(
            "the {} adapter takes input.text (prompts), input.interrupt and input.permission, not {}",
            P::ADAPTER,
            input.kind
        )),
    };
    settle(input, &protocol.core().status, result).await;
}

/// The turn ended: the next queued prompt, if any, is sent (and its input settled).
pub(crate) async fn next_queued<P: Protocol>(
    protocol: &mut P,
    process: &mut Process,
    drafts: &mut Vec<Draft>,
) {
    let Some((input, text)) = protocol.core().queued.pop_front() else {
        return;
    };
    let result = protocol.prompt(process, &text).await;
    if let Some(input) = input {
        settle(input, &protocol.core().status, result).await;
    } else if let Err(e) = result {
        drafts.push(error(&e, None));
    }
}

/// The turn ended: the questions the agent no longer waits for are withdrawn and the next
/// queued prompt is sent.
pub(crate) async fn turn_over<P: Protocol>(
    protocol: &mut P,
    process: &mut Process,
    drafts: &mut Vec<Draft>,
) {
    drafts.extend(withdrawn(protocol.take_pending(), "the turn ended"));
    next_queued(protocol, process, drafts).await;
}

/// The agent's session exists: a continued conversation's recovery brief is sent as its first
/// prompt.
pub(crate) async fn send_brief<P: Protocol>(
    protocol: &mut P,
    process: &mut Process,
    drafts: &mut Vec<Draft>,
) {
    let Some(prompt) = protocol.core().brief() else {
        return;
    };
    if let Err(e) = protocol.prompt(process, &prompt).await {
        drafts.push(error(&e, None));
    }
}

/// Answers the agent's request `method` with "method not found", so it does not wait for
/// what `moor` does not serve.
pub(crate) async fn refuse(
    process: &mut Process,
    id: &Value,
    method: &str,
    drafts: &mut Vec<Draft>,
) {
    let why = format!("moor does not serve {method}");
    if let Err(e) = process
        .send(&rpc::error(id, rpc::METHOD_NOT_FOUND, &why))
        .await
    {
        drafts.push(error(&e, None));
    }
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

    /// [`send`](Self::send), noting in `drafts` a request that could not be sent.
    pub(crate) async fn send_or_note(
        &mut self,
        process: &mut Process,
        call: C,
        method: &str,
        params: Value,
        drafts: &mut Vec<Draft>,
    ) {
        if let Err(e) = self.send(process, call, method, params).await {
            drafts.push(error(&e, None));
        }
    }

    /// The request that the answer `id` (the agent's `line`) is for, forgotten; `None`, and
    /// an error entry, when `moor` made no such request.
    pub(crate) fn answered(&mut self, id: u64, line: &str, drafts: &mut Vec<Draft>) -> Option<C> {
        let call = self.open.remove(&id);
        if call.is_none() {
            drafts.push(error(
                "the agent answered a request moor never made",
                Some(line),
            ));
        }
        call
    }
}
