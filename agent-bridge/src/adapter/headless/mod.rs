//! The headless adapters (`gemini-headless`, `codex-exec`): one agent process per turn, its
//! JSON lines mapped to typed entries, for agents whose interactive protocol is unavailable.
//!
//! This module drives the processes: each prompt runs `Dialect::argv` (the person's command
//! with the prompt, and the agent's own session to continue from the second turn on), prompts
//! sent during a turn wait (as for the JSON-RPC adapters), an interrupt stops the turn's process
//! group (SIGINT, then SIGTERM and SIGKILL, each after `--stop-grace`). A headless agent cannot
//! ask for permission: it runs what its own approval mode allows and refuses the rest, so an
//! `input.permission` fails, saying so. What is not a process (spooling, the watchdog, the prompt
//! queue, the continuation brief) is `rpc_agent`'s [`Core`]; the mapping is the dialects'.

pub mod codex_exec;
pub mod gemini;

use std::process::ExitStatus;

use moor_protocol::payload;
use moor_protocol::{kinds, BodyError, EntryBody};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::acp::map::Mapped;
use super::claude::map::{error, raw_event};
use super::claude::process::{Out, Process};
use super::claude::sleep_until;
use super::rpc_agent::{drained, Channels, Core, BURST, PIPE_DRAIN};
use super::{
    settle, signal_agent, tree, AdapterDone, AdapterError, AdapterIo, AdapterKind, AgentExit,
    AgentPid, AgentSignal, AgentSpec,
};
use crate::inputs::PendingInput;
use crate::spool::Draft;

/// One agent's headless JSON-lines output: how to run a turn and what its events mean.
pub trait Dialect: Default + std::fmt::Debug {
    /// The adapter's name (`agent.start`'s `adapter`, `--mode`).
    const ADAPTER: &'static str;
    /// The agent's name on the terminal.
    const AGENT: &'static str;
    /// The command line of one turn: the person's `command` with `prompt`, continuing the
    /// agent's session `resume` when given.
    fn argv(command: &[String], prompt: &str, resume: Option<&str>) -> Vec<String>;
    /// The agent's own session (thread) id, once it named one.
    fn session_id(&self) -> Option<&str>;
    /// A turn's process was started.
    fn turn_started(&mut self);
    /// One JSON event of the running turn.
    fn event(&mut self, event: &Value) -> Mapped;
    /// The turn's final event was mapped.
    fn turn_over(&self) -> bool;
    /// The turn's process ended before its final event: interrupted by a person, or not (`why`).
    fn cut_short(&mut self, interrupted: bool, why: &str) -> Mapped;
}

/// A headless agent: nothing runs until the first prompt.
#[derive(Debug)]
pub struct HeadlessAgent {
    kind: AdapterKind,
    spec: AgentSpec,
    pid: AgentPid,
}

impl HeadlessAgent {
    /// The agent `spec` under the headless adapter `kind`; its processes start with the turns.
    pub fn start(kind: AdapterKind, spec: &AgentSpec) -> Result<Self, AdapterError> {
        if spec.command.is_empty() {
            return Err(AdapterError::Spawn {
                command: String::new(),
                source: std::io::Error::other("no command"),
            });
        }
        Ok(Self {
            kind,
            spec: spec.clone(),
            pid: AgentPid::new(0),
        })
    }

    /// The running turn's process id (0 between turns).
    pub fn pid(&self) -> AgentPid {
        self.pid.clone()
    }

    /// Runs turns until `moor` stops the agent, then spools `agent.exit`.
    pub async fn run(self, io: AdapterIo) -> Result<AdapterDone, AdapterError> {
        match self.kind {
            AdapterKind::CodexExec => self.run_dialect::<codex_exec::CodexExecMapper>(io).await,
            _ => self.run_dialect::<gemini::GeminiMapper>(io).await,
        }
    }

    async fn run_dialect<D: Dialect>(self, io: AdapterIo) -> Result<AdapterDone, AdapterError> {
        let (core, channels) = Core::start(self.spec, io, D::AGENT);
        let run = Run {
            core,
            dialect: D::default(),
            turn: None,
            pid: self.pid,
            kind: self.kind,
            last_exit: AgentExit::default(),
        };
        run.run(channels).await
    }
}

/// The running turn's process.
#[derive(Debug)]
struct Turn {
    process: Process,
    /// A person interrupted it.
    interrupted: bool,
    /// The next signal to send, and when, once it was asked to stop.
    escalate: Option<(Instant, AgentSignal)>,
}

#[derive(Debug)]
struct Run<D> {
    core: Core,
    dialect: D,
    turn: Option<Turn>,
    pid: AgentPid,
    kind: AdapterKind,
    last_exit: AgentExit,
}

/// What the running turn's process did.
enum TurnEvent {
    Out(Out),
    OutClosed,
    Exited(std::io::Result<ExitStatus>),
}

async fn turn_event(turn: &mut Option<Turn>) -> TurnEvent {
    let Some(t) = turn.as_mut() else {
        return std::future::pending().await;
    };
    let p = &mut t.process;
    tokio::select! {
        out = p.out.recv(), if !p.out_closed => match out {
            Some(out) => TurnEvent::Out(out),
            None => TurnEvent::OutClosed,
        },
        status = p.child.wait() => TurnEvent::Exited(status),
    }
}

impl<D: Dialect> Run<D> {
    async fn run(mut self, channels: Channels) -> Result<AdapterDone, AdapterError> {
        let Channels {
            mut inputs,
            mut signals,
            screen_thread,
        } = channels;
        let start = payload::AgentStart {
            pid: None,
            ..self.core.spec.start_entry(0, self.kind)
        };
        let drafts = self.core.start_entries(start);
        self.core.record(drafts).await?;
        if let Some(brief) = self.core.brief() {
            if let Err(e) = self.prompt(&brief).await {
                self.core.record(vec![error(&e, None)]).await?;
            }
        }
        loop {
            let deadline = self.core.watchdog.deadline();
            let escalate = self
                .turn
                .as_ref()
                .and_then(|t| t.escalate)
                .map(|(at, _)| at);
            tokio::select! {
                event = turn_event(&mut self.turn) => match event {
                    TurnEvent::Out(out) => self.output_burst(out).await?,
                    TurnEvent::OutClosed => {
                        if let Some(t) = self.turn.as_mut() {
                            t.process.out_closed = true;
                        }
                    }
                    TurnEvent::Exited(status) => {
                        if self.turn_exited(AgentExit::from_status(status?)).await? {
                            break;
                        }
                    }
                },
                next = inputs.next() => match next {
                    Ok(Some(input)) => self.remote(input).await,
                    Ok(None) => {}
                    Err(e) => tracing::error!(error = %e, "cannot record remote inputs"),
                },
                Some(signal) = signals.recv() => {
                    if self.forward(signal) {
                        break;
                    }
                }
                _ = sleep_until(deadline) => self.core.deadline().await?,
                _ = sleep_until(escalate) => self.escalate(),
            }
        }
        let stopped = tree::stop_leftovers(self.core.spec.options.stop_grace).await;
        self.core.gone(false, self.last_exit).await?;
        let exit = payload::AgentExit {
            stopped_processes: stopped,
            ..self.last_exit.payload()
        };
        self.core.spool.append(vec![Draft::new(exit)]).await?;
        let exit = self.last_exit;
        drop(self);
        if let Some(thread) = screen_thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        Ok(AdapterDone { exit, inputs })
    }

    /// Starts a turn running `text`.
    async fn prompt(&mut self, text: &str) -> Result<(), String> {
        let resume = self
            .dialect
            .session_id()
            .map(str::to_owned)
            .or_else(|| self.core.continued_session());
        let argv = D::argv(&self.core.spec.command, text, resume.as_deref());
        let mut process = Process::spawn_argv(&self.core.spec, argv)
            .map_err(|e| format!("could not start the agent: {e}"))?;
        // The prompt is on the command line; an open stdin would be read as more of it.
        process.close_stdin();
        self.pid.set(process.pid);
        self.dialect.turn_started();
        self.core.watchdog.turn_started(Instant::now());
        let started = raw_event(
            Some("headless".into()),
            Some("turn_started".into()),
            &json!({"pid": process.pid, "resume": resume}),
            None,
        );
        self.turn = Some(Turn {
            process,
            interrupted: false,
            escalate: None,
        });
        self.core
            .record(vec![started])
            .await
            .map_err(|e| format!("started, but could not record it: {e}"))
    }

    /// The first line and what else the turn printed meanwhile, mapped and spooled with one
    /// fsync.
    async fn output_burst(&mut self, first: Out) -> Result<(), AdapterError> {
        let mut drafts = Vec::new();
        self.output(first, &mut drafts);
        while drafts.len() < BURST {
            let Some(t) = self.turn.as_mut() else { break };
            match t.process.out.try_recv() {
                Ok(out) => self.output(out, &mut drafts),
                Err(_) => break,
            }
        }
        self.core.record(drafts).await
    }

    fn output(&mut self, out: Out, drafts: &mut Vec<Draft>) {
        let Some(line) = Core::stdout(out, drafts) else {
            return;
        };
        match serde_json::from_str::<Value>(&line) {
            Ok(event) if event.is_object() => {
                let mapped = self.dialect.event(&event);
                self.core.observe(mapped, drafts);
            }
            _ => drafts.push(error(
                "the agent printed a line that is not a JSON event",
                Some(&line),
            )),
        }
    }

    /// The turn's process exited: what is left in its pipes, the turn's end when it printed
    /// none, then the next queued prompt. Returns whether the run ends (`moor` stopped it).
    async fn turn_exited(&mut self, exit: AgentExit) -> Result<bool, AdapterError> {
        let deadline = Instant::now() + PIPE_DRAIN;
        while let Some(t) = self.turn.as_mut() {
            match drained(&mut t.process, deadline).await {
                Some(out) => self.output_burst(out).await?,
                None => break,
            }
        }
        let interrupted = self.turn.take().is_some_and(|t| t.interrupted);
        self.pid.set(0);
        self.last_exit = exit;
        if !self.dialect.turn_over() {
            let why = format!(
                "the agent exited without ending its turn (exit code {:?}, signal {:?})",
                exit.code, exit.signal
            );
            let mapped = self
                .dialect
                .cut_short(interrupted || self.core.stopping, &why);
            let mut drafts = Vec::new();
            self.core.observe(mapped, &mut drafts);
            self.core.record(drafts).await?;
        }
        if self.core.stopping {
            return Ok(true);
        }
        if let Some((input, text)) = self.core.queued.pop_front() {
            let result = self.prompt(&text).await;
            match input {
                Some(input) => settle(input, &self.core.status, result).await,
                None => {
                    if let Err(e) = result {
                        self.core.record(vec![error(&e, None)]).await?;
                    }
                }
            }
        }
        Ok(false)
    }

    /// A remote input: a prompt (queued while a turn runs), an interrupt, or a permission
    /// decision (refused: nothing asks); applied or failed.
    async fn remote(&mut self, input: PendingInput) {
        let result = match input.body() {
            Ok(EntryBody::InputText(prompt)) if self.turn.is_some() => {
                // Applied when it is sent, after the running turn.
                return self.core.queue(input, prompt.text).await;
            }
            Ok(EntryBody::InputText(prompt)) => self.prompt(&prompt.text).await,
            Ok(EntryBody::InputInterrupt(_)) => self.interrupt(),
            Ok(EntryBody::InputPermission(_)) => Err(format!(
                "the {} adapter runs the agent headless (one process per turn), which cannot ask \
                 for permission: its tools run or are refused by the agent's own approval mode",
                D::ADAPTER
            )),
            Err(BodyError::Malformed(e)) if kinds::is_input(&input.kind) => {
                Err(format!("malformed {} payload: {e}", input.kind))
            }
            Ok(_) | Err(_) => Err(format!(
                "the {} adapter takes input.text (prompts) and input.interrupt, not {}",
                D::ADAPTER,
                input.kind
            )),
        };
        settle(input, &self.core.status, result).await;
    }

    /// SIGINT to the running turn's process group; SIGTERM and SIGKILL follow if it stays.
    fn interrupt(&mut self) -> Result<(), String> {
        let grace = self.core.spec.options.stop_grace;
        let Some(t) = self.turn.as_mut() else {
            return Err("no turn is running".into());
        };
        t.interrupted = true;
        signal_agent(t.process.pid, AgentSignal::Interrupt)
            .map_err(|e| format!("could not interrupt the agent: {e}"))?;
        t.escalate = Some((Instant::now() + grace, AgentSignal::Terminate));
        Ok(())
    }

    /// The next, stronger signal to a turn that was asked to stop and still runs.
    fn escalate(&mut self) {
        let grace = self.core.spec.options.stop_grace;
        let Some(t) = self.turn.as_mut() else { return };
        let Some((_, signal)) = t.escalate.take() else {
            return;
        };
        if let Err(e) = signal_agent(t.process.pid, signal) {
            tracing::warn!(error = %e, ?signal, "could not signal the agent");
        }
        if signal == AgentSignal::Terminate {
            t.escalate = Some((Instant::now() + grace, AgentSignal::Kill));
        }
    }

    /// A signal for the agent: an interrupt stops the running turn; otherwise (or with no turn)
    /// the agent stops. Returns whether the run ends now (no turn to wait for).
    fn forward(&mut self, signal: AgentSignal) -> bool {
        if signal == AgentSignal::Interrupt && self.interrupt().is_ok() {
            return false;
        }
        self.core.stopping = true;
        let Some(t) = self.turn.as_mut() else {
            return true;
        };
        let signal = match signal {
            AgentSignal::Interrupt => AgentSignal::Terminate,
            other => other,
        };
        if let Err(e) = signal_agent(t.process.pid, signal) {
            tracing::warn!(error = %e, ?signal, "could not signal the agent");
        }
        if signal == AgentSignal::Terminate {
            let grace = self.core.spec.options.stop_grace;
            t.escalate = Some((Instant::now() + grace, AgentSignal::Kill));
        }
        false
    }
}

#[cfg(test)]
#[path = "map_tests.rs"]
mod tests;
