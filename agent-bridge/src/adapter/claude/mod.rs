//! The `claude` adapter: Claude Code in stream-json mode, its output as typed entries, remote
//! prompts, interrupts and permission decisions going back in, and the stall watchdog that can
//! restart it on the same agent session.
//!
//! [`map`] turns output lines into entries (pure), [`control`] builds what goes to stdin,
//! [`watchdog`] decides when silence is a stall, [`recovery`] writes the restart prompt, and
//! this module runs the loop that ties them to one (or, after restarts, several) processes.
//! Permission requests are never answered by default: a request nobody decides stays pending.

pub mod control;
pub(crate) mod decide;
pub mod intent;
mod local;
pub mod map;
pub(crate) mod process;
pub mod recovery;
pub(crate) mod render;
mod restart;
pub mod watchdog;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use moor_protocol::kinds;
use moor_protocol::payload::{AgentActive, AgentOutput, AgentRestart, OutputStream, Resolution};
use moor_protocol::{BodyError, EntryBody};
use tokio::sync::mpsc;
use tokio::time::Instant;

use self::decide::resolved;
use self::local::{next_local, LocalLines};
use self::map::{Mapper, PermissionRequest, Signal};
use self::process::{Out, Process};
use self::recovery::{RecoveryBrief, ShortBrief};
use self::render::Renderer;
use self::watchdog::Watchdog;
use super::terminal;
use super::{
    settle, signal_agent, AdapterDone, AdapterError, AdapterIo, AgentExit, AgentPid, AgentSignal,
    AgentSpec, Continuation,
};
use crate::inputs::PendingInput;
use crate::spool::{Draft, Spool};
use crate::status::Status;

/// How long the pipes of an exited agent may stay open before they are no longer read.
const PIPE_DRAIN: Duration = Duration::from_secs(5);
/// Most entries spooled with one fsync.
const BURST_ENTRIES: usize = 1024;

/// Claude Code, started and ready to run.
#[derive(Debug)]
pub struct ClaudeAgent {
    process: Process,
    pid: AgentPid,
    spec: AgentSpec,
    brief: Arc<dyn RecoveryBrief>,
}

impl ClaudeAgent {
    /// Start Claude Code in structured mode with the short built-in recovery prompt.
    pub fn start(spec: &AgentSpec) -> Result<Self, AdapterError> {
        Self::start_with_brief(spec, Arc::new(ShortBrief))
    }

    /// Start it with `brief` writing the prompt after an automatic restart.
    pub fn start_with_brief(
        spec: &AgentSpec,
        brief: Arc<dyn RecoveryBrief>,
    ) -> Result<Self, AdapterError> {
        let resume = spec.options.continuation.as_ref();
        let process = Process::spawn(spec, resume.map(|c| c.agent_session_id.as_str()))?;
        Ok(Self {
            pid: AgentPid::new(process.pid),
            process,
            spec: spec.clone(),
            brief,
        })
    }

    /// The running process's id, updated when an automatic restart replaces the process.
    pub fn pid(&self) -> AgentPid {
        self.pid.clone()
    }

    /// Run until Claude Code exits for good and `agent.exit` is spooled.
    pub async fn run(self, io: AdapterIo) -> Result<AdapterDone, AdapterError> {
        let AdapterIo {
            spool,
            mut inputs,
            mut signals,
            status,
        } = io;
        let (screen, screen_thread) = terminal::spawn_stdout_writer(256);
        let mut run = Run {
            watchdog: Watchdog::new(
                self.spec.options.stall_timeout,
                self.spec.options.tool_timeout,
                Instant::now(),
            ),
            spec: self.spec,
            pid: self.pid,
            brief: self.brief,
            spool,
            status,
            screen,
            mapper: Mapper::new(),
            intents: intent::Intents::default(),
            renderer: Renderer::default(),
            pending: BTreeMap::new(),
            agent_session_id: None,
            restarts: 0,
            stopping: false,
            control_seq: 0,
        };
        let mut process = self.process;
        let continuation = run.spec.options.continuation.clone();
        if let Some(c) = &continuation {
            run.continued(c).await?;
        }
        run.started(&mut process).await?;
        if let Some(prompt) = continuation.and_then(|c| c.prompt) {
            if let Err(e) = run.prompt(&mut process, &prompt).await {
                run.record(vec![map::error(&e, None)]).await?;
            }
        }
        let mut local = match run.spec.options.interactive {
            true => Some(LocalLines::new()),
            false => None,
        };
        let (exit, ended) = loop {
            let deadline = run.watchdog.deadline();
            tokio::select! {
                out = process.out.recv(), if !process.out_closed => match out {
                    Some(out) => run.output_burst(&mut process, out).await?,
                    // Both pipes closed: the process is exiting; the wait arm takes it from here.
                    None => process.out_closed = true,
                },
                status = process.child.wait() => {
                    let exit = AgentExit::from_status(status?);
                    match run.after_exit(&mut process, exit).await? {
                        Some(ended) => break ended,
                        None => continue,
                    }
                },
                next = inputs.next() => match next {
                    Ok(Some(input)) => run.remote(&mut process, input).await,
                    Ok(None) => {}
                    Err(e) => tracing::error!(error = %e, "cannot record remote inputs"),
                },
                line = next_local(&mut local) => run.local(&mut process, line).await?,
                Some(signal) = signals.recv() => run.signal(&mut process, signal).await,
                _ = sleep_until(deadline) => run.deadline(&mut process).await?,
            }
        };
        run.spool.append(vec![Draft::new(ended)]).await?;
        drop(run.screen);
        if let Some(thread) = screen_thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        Ok(AdapterDone { exit, inputs })
    }
}

/// The state of one adapter run across restarts.
#[derive(Debug)]
struct Run {
    spec: AgentSpec,
    /// Shared with the bridge, which signals the agent when its link ends for good.
    pid: AgentPid,
    brief: Arc<dyn RecoveryBrief>,
    spool: Spool,
    status: Status,
    screen: mpsc::Sender<Vec<u8>>,
    mapper: Mapper,
    /// Hashes of files that running mutation calls target.
    intents: intent::Intents,
    renderer: Renderer,
    watchdog: Watchdog,
    pending: BTreeMap<String, PermissionRequest>,
    agent_session_id: Option<String>,
    restarts: u32,
    /// The person (or a signal) asked the agent to stop: its exit is the end, not a crash.
    stopping: bool,
    control_seq: u64,
}

impl Run {
    /// Tokio's clock, the one the loop sleeps on (paused and advanced in tests).
    fn now() -> Instant {
        Instant::now()
    }

    fn next_control_id(&mut self, what: &str) -> String {
        self.control_seq += 1;
        format!("moor-{what}-{}", self.control_seq)
    }

    /// Spool entries and show them on the terminal.
    async fn record(&mut self, drafts: Vec<Draft>) -> Result<(), AdapterError> {
        if drafts.is_empty() {
            return Ok(());
        }
        self.renderer.show(&drafts, &self.screen);
        self.spool.append(drafts).await?;
        Ok(())
    }

    /// Records that this run continues an earlier conversation (`agent.restart`, reason
    /// `continued`), before its `agent.start`.
    async fn continued(&mut self, c: &Continuation) -> Result<(), AdapterError> {
        self.agent_session_id = Some(c.agent_session_id.clone());
        self.status.note(format!(
            "continuing Claude Code conversation {} (moor run --fresh starts a new one)",
            c.agent_session_id
        ));
        let entry = AgentRestart {
            reason: "continued".into(),
            agent_session_id: c.agent_session_id.clone(),
            attempt: 1,
            prompt: c.prompt.clone().unwrap_or_default(),
            previous_exit: None,
        };
        self.record(vec![Draft::new(entry)]).await
    }

    async fn started(&mut self, process: &mut Process) -> Result<(), AdapterError> {
        let start = moor_protocol::payload::AgentStart {
            command: process.argv.clone(),
            ..self
                .spec
                .start_entry(process.pid, super::AdapterKind::Claude)
        };
        self.record(vec![Draft::new(start)]).await?;
        let id = self.next_control_id("init");
        if let Err(e) = process.send(&control::initialize(&id)).await {
            self.record(vec![map::error(&e, None)]).await?;
        }
        Ok(())
    }

    /// Map `first` and every line already queued behind it, then spool them with one fsync.
    async fn output_burst(
        &mut self,
        process: &mut Process,
        first: Out,
    ) -> Result<(), AdapterError> {
        let mut drafts = Vec::new();
        self.output(process, first, &mut drafts).await;
        while drafts.len() < BURST_ENTRIES {
            match process.out.try_recv() {
                Ok(out) => self.output(process, out, &mut drafts).await,
                Err(_) => break,
            }
        }
        self.record(drafts).await
    }

    /// Map one line into `drafts`, acting on what it asks for.
    async fn output(&mut self, process: &mut Process, out: Out, drafts: &mut Vec<Draft>) {
        let line = match out {
            Out::Stdout(line) => line,
            Out::Stderr(text) => {
                let entry = AgentOutput {
                    stream: OutputStream::Stderr,
                    text,
                };
                return drafts.push(Draft::new(entry));
            }
            Out::Skipped(why) => return drafts.push(map::error(&why, None)),
        };
        let mapped = self.mapper.map_line(&line);
        if let Some(id) = mapped.session_id {
            self.agent_session_id = Some(id);
        }
        let revived = self.watchdog.observe(&mapped.signals, Self::now());
        if revived {
            let active = AgentActive {
                after: "stall".into(),
            };
            drafts.push(Draft::new(active));
            self.status.note("Claude Code is producing output again");
        }
        let mut mapped_drafts = mapped.drafts;
        self.intents.observe(&mut mapped_drafts, &self.spec.cwd);
        drafts.extend(mapped_drafts);
        for signal in &mapped.signals {
            match signal {
                Signal::Permission(request) => {
                    self.pending
                        .insert(request.request_id.clone(), request.clone());
                }
                Signal::PermissionCancelled { request_id }
                    if self.pending.remove(request_id).is_some() =>
                {
                    drafts.push(resolved(
                        request_id,
                        Resolution::Cancelled,
                        None,
                        None,
                        None,
                    ));
                }
                Signal::ControlResponse {
                    request_id,
                    error: Some(error),
                } => drafts.push(map::error(
                    &format!("Claude Code refused control request {request_id}: {error}"),
                    None,
                )),
                Signal::UnsupportedControl {
                    request_id,
                    subtype,
                } => {
                    if let Err(e) = process
                        .send(&control::unsupported(request_id, subtype))
                        .await
                    {
                        drafts.push(map::error(&e, None));
                    }
                }
                Signal::TurnEnded { success: true } => self.restarts = 0,
                _ => {}
            }
        }
    }

    /// Apply a remote input and report it.
    async fn remote(&mut self, process: &mut Process, input: PendingInput) {
        let by = input.author.clone();
        let result = match input.body() {
            Ok(EntryBody::InputText(prompt)) => self.prompt(process, &prompt.text).await,
            Ok(EntryBody::InputInterrupt(_)) => {
                let id = self.next_control_id("interrupt");
                process.send(&control::interrupt(&id)).await
            }
            Ok(EntryBody::InputPermission(decision)) => {
                let seq = Some(input.seq.0);
                self.permission_input(process, decision, &by, seq).await
            }
            Err(BodyError::Malformed(e)) if kinds::is_input(&input.kind) => {
                Err(format!("malformed {} payload: {e}", input.kind))
            }
            Ok(_) | Err(_) => Err(format!(
                "the claude adapter takes input.text (prompts), input.interrupt and input.permission, not {}",
                input.kind
            )),
        };
        settle(input, &self.status, result).await;
    }

    async fn prompt(&mut self, process: &mut Process, text: &str) -> Result<(), String> {
        process.send(&control::user_message(text)).await?;
        self.watchdog.turn_started(Self::now());
        Ok(())
    }

    async fn signal(&mut self, process: &mut Process, signal: AgentSignal) {
        if signal == AgentSignal::Interrupt && self.watchdog.in_turn() {
            let id = self.next_control_id("interrupt");
            if process.send(&control::interrupt(&id)).await.is_ok() {
                return;
            }
        }
        self.stopping = true;
        let signal = match signal {
            AgentSignal::Interrupt => AgentSignal::Terminate,
            other => other,
        };
        if let Err(e) = signal_agent(process.pid, signal) {
            tracing::warn!(error = %e, ?signal, "could not signal the agent");
        }
    }
}

/// Sleeps until `deadline`; forever without one (an adapter loop's watchdog arm).
pub(crate) async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
