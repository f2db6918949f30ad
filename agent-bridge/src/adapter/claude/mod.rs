//! The `claude` adapter: Claude Code in stream-json mode, its output as typed entries, remote
//! prompts, interrupts and permission decisions going back in, and the stall watchdog that can
//! restart it on the same agent session.
//!
//! [`map`] turns output lines into entries (pure), [`control`] builds what goes to stdin,
//! [`watchdog`] decides when silence is a stall, [`recovery`] writes the restart prompt, and
//! this module runs the loop that ties them to one (or, after restarts, several) processes.
//! Permission requests are never answered by default: a request nobody decides stays pending.

pub mod control;
pub mod intent;
pub mod map;
mod process;
pub mod recovery;
mod render;
pub mod watchdog;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use moor_protocol::kinds;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;

use self::map::{Mapper, PermissionRequest, Signal};
use self::process::{Out, Process};
use self::recovery::{Interruption, RecoveryBrief, RestartReason, ShortBrief};
use self::render::Renderer;
use self::watchdog::Watchdog;
use super::terminal;
use super::{
    signal_agent, AdapterDone, AdapterError, AdapterIo, AgentExit, AgentSignal, AgentSpec,
};
use crate::inputs::PendingInput;
use crate::spool::{Draft, Spool};
use crate::status::Status;

/// How long a stopped agent gets between SIGTERM and SIGKILL, and its pipes after it exited.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Most entries spooled with one fsync.
const BURST_ENTRIES: usize = 1024;

/// Claude Code, started and ready to run.
#[derive(Debug)]
pub struct ClaudeAgent {
    process: Process,
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
        Ok(Self {
            process: Process::spawn(spec, None)?,
            spec: spec.clone(),
            brief,
        })
    }

    /// The first process's id.
    pub fn pid(&self) -> u32 {
        self.process.pid
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
                Instant::now().into_std(),
            ),
            spec: self.spec,
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
        run.started(&mut process).await?;
        let mut local = match run.spec.options.interactive {
            true => Some(LocalLines::new()),
            false => None,
        };
        let exit = loop {
            let deadline = run.watchdog.deadline().map(Instant::from_std);
            tokio::select! {
                out = process.out.recv(), if !process.out_closed => match out {
                    Some(out) => run.output_burst(&mut process, out).await?,
                    // Both pipes closed: the process is exiting; the wait arm takes it from here.
                    None => process.out_closed = true,
                },
                status = process.child.wait() => {
                    let exit = AgentExit::from_status(status?);
                    match run.after_exit(&mut process, exit).await? {
                        Some(exit) => break exit,
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
        run.spool
            .append(vec![Draft::new(kinds::AGENT_EXIT, exit.payload())])
            .await?;
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
    fn now() -> std::time::Instant {
        std::time::Instant::now()
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
        let mut text = String::new();
        for d in &drafts {
            text.extend(self.renderer.render(d));
        }
        if !text.is_empty() {
            // Informational: a terminal nobody reads must not hold up the log.
            let _ = self.screen.try_send(text.into_bytes());
        }
        self.spool.append(drafts).await?;
        Ok(())
    }

    async fn started(&mut self, process: &mut Process) -> Result<(), AdapterError> {
        let start = json!({
            "command": self.spec.command, "cwd": self.spec.cwd.display().to_string(),
            "pid": process.pid, "adapter": "claude",
        });
        self.record(vec![Draft::new(kinds::AGENT_START, start)])
            .await?;
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
                let entry = json!({"stream": "stderr", "text": text});
                return drafts.push(Draft::new(kinds::AGENT_OUTPUT, entry));
            }
        };
        let mapped = self.mapper.map_line(&line);
        if let Some(id) = mapped.session_id {
            self.agent_session_id = Some(id);
        }
        let revived = self.watchdog.observe(&mapped.signals, Self::now());
        if revived {
            let silent = json!({"after": "stall"});
            drafts.push(Draft::new(kinds::AGENT_ACTIVE, silent));
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
                Signal::PermissionCancelled { request_id } => {
                    if self.pending.remove(request_id).is_some() {
                        drafts.push(resolved(request_id, "cancelled", None, None, None));
                    }
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
        let result = match input.kind.as_str() {
            kinds::INPUT_TEXT => match input.payload.get("text").and_then(|t| t.as_str()) {
                Some(text) => self.prompt(process, text).await,
                None => Err("input.text payload has no \"text\" string".into()),
            },
            kinds::INPUT_INTERRUPT => {
                let id = self.next_control_id("interrupt");
                process.send(&control::interrupt(&id)).await
            }
            kinds::INPUT_PERMISSION => {
                let seq = Some(input.seq.0);
                self.permission_input(process, &input.payload, &by, seq)
                    .await
            }
            kind => Err(format!(
                "the claude adapter takes input.text (prompts), input.interrupt and input.permission, not {kind}"
            )),
        };
        self.status.input_outcome(&input, result.as_ref().err());
        let recorded = match result {
            Ok(()) => input.applied().await,
            Err(reason) => input.failed(reason).await,
        };
        if let Err(e) = recorded {
            tracing::error!(error = %e, "could not record an input's outcome");
        }
    }

    async fn prompt(&mut self, process: &mut Process, text: &str) -> Result<(), String> {
        process.send(&control::user_message(text)).await?;
        self.watchdog.turn_started(Self::now());
        Ok(())
    }

    async fn permission_input(
        &mut self,
        process: &mut Process,
        payload: &serde_json::Value,
        by: &str,
        input_seq: Option<u64>,
    ) -> Result<(), String> {
        let request_id = match payload.get("request_id").and_then(|r| r.as_str()) {
            Some(id) => id.to_owned(),
            None if self.pending.len() == 1 => {
                self.pending.keys().next().cloned().unwrap_or_default()
            }
            None => return Err("input.permission needs \"request_id\"".into()),
        };
        let allow = match payload.get("decision").and_then(|d| d.as_str()) {
            Some("allow") => true,
            Some("deny") => false,
            _ => return Err("input.permission needs \"decision\": \"allow\" or \"deny\"".into()),
        };
        let message = payload.get("message").and_then(|m| m.as_str());
        self.decide(process, &request_id, allow, message, by, input_seq)
            .await
    }

    /// Answer a pending permission request and record who decided.
    async fn decide(
        &mut self,
        process: &mut Process,
        request_id: &str,
        allow: bool,
        message: Option<&str>,
        by: &str,
        input_seq: Option<u64>,
    ) -> Result<(), String> {
        let Some(request) = self.pending.get(request_id) else {
            return Err(format!(
                "no pending permission request {request_id} (already decided, withdrawn, or the agent restarted)"
            ));
        };
        let who = by.strip_prefix("user:").unwrap_or(by);
        let answer = match allow {
            true => control::allow(request_id, &request.input),
            false => {
                let default = format!("{who} denied this through moor");
                control::deny(request_id, message.unwrap_or(&default))
            }
        };
        process.send(&answer).await?;
        self.pending.remove(request_id);
        self.watchdog.permission_done(Self::now());
        let decision = if allow { "allow" } else { "deny" };
        let entry = resolved(request_id, decision, Some(by), input_seq, message);
        self.record(vec![entry])
            .await
            .map_err(|e| format!("decided, but could not record it: {e}"))
    }

    /// A line typed at `moor`'s terminal: y/n for a pending request, else a prompt. `None`
    /// means EOF: the person is done, let the agent finish and exit.
    async fn local(
        &mut self,
        process: &mut Process,
        line: Option<String>,
    ) -> Result<(), AdapterError> {
        let Some(line) = line else {
            self.stopping = true;
            process.close_stdin();
            return Ok(());
        };
        let text = line.trim();
        let answer = match text.to_ascii_lowercase().as_str() {
            "y" | "yes" => Some(true),
            "n" | "no" => Some(false),
            _ => None,
        };
        let first = self.pending.keys().next().cloned();
        let result = match (answer, first) {
            (Some(allow), Some(id)) => self.decide(process, &id, allow, None, "local", None).await,
            _ if text.is_empty() => Ok(()),
            _ => {
                let entry = json!({"text": text, "source": "local"});
                self.record(vec![Draft::new(kinds::AGENT_USER, entry)])
                    .await?;
                self.prompt(process, text).await
            }
        };
        if let Err(e) = result {
            self.status.note(e);
        }
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

    /// The watchdog's deadline passed: report the stall, and restart if asked to.
    async fn deadline(&mut self, process: &mut Process) -> Result<(), AdapterError> {
        let Some(stall) = self.watchdog.check(Self::now()) else {
            return Ok(());
        };
        self.status.note(format!(
            "Claude Code has been silent for {} s while {}; reported as stalled",
            stall.silent.as_secs(),
            if stall.phase == watchdog::Phase::Tool {
                "a tool runs"
            } else {
                "the model responds"
            }
        ));
        self.record(vec![Draft::new(kinds::AGENT_STALLED, stall.payload())])
            .await?;
        if self.spec.options.auto_resume {
            let open_tool = stall.tool.clone();
            self.restart(
                process,
                RestartReason::Stalled,
                open_tool,
                stall.silent,
                None,
            )
            .await?;
        }
        Ok(())
    }

    /// The process exited. `Some(exit)` ends the run; `None` means it was restarted.
    async fn after_exit(
        &mut self,
        process: &mut Process,
        exit: AgentExit,
    ) -> Result<Option<AgentExit>, AdapterError> {
        self.drain(process).await?;
        self.cancel_pending("the agent exited").await?;
        let crashed = !self.stopping && (exit.code != Some(0) || self.watchdog.in_turn());
        if crashed && self.spec.options.auto_resume {
            let silent = self.watchdog.silent(Self::now());
            if self
                .restart(process, RestartReason::Crashed, None, silent, Some(exit))
                .await?
            {
                return Ok(None);
            }
        }
        Ok(Some(exit))
    }

    /// Map what is left in the pipes of a process that is going away.
    async fn drain(&mut self, process: &mut Process) -> Result<(), AdapterError> {
        let deadline = Instant::now() + STOP_GRACE;
        while !process.out_closed {
            match tokio::time::timeout_at(deadline, process.out.recv()).await {
                Ok(Some(out)) => self.output_burst(process, out).await?,
                Ok(None) => process.out_closed = true,
                // A grandchild keeps the pipes open; what it writes later is not this agent's.
                Err(_) => break,
            }
        }
        Ok(())
    }

    async fn cancel_pending(&mut self, why: &str) -> Result<(), AdapterError> {
        let drafts: Vec<Draft> = std::mem::take(&mut self.pending)
            .into_keys()
            .map(|id| resolved(&id, "cancelled", None, None, Some(why)))
            .collect();
        self.record(drafts).await
    }

    /// Stop the process (SIGTERM, then SIGKILL) and wait for it.
    async fn stop(&mut self, process: &mut Process) -> Option<AgentExit> {
        let _ = signal_agent(process.pid, AgentSignal::Terminate);
        let status = match tokio::time::timeout(STOP_GRACE, process.child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                let _ = signal_agent(process.pid, AgentSignal::Kill);
                process.child.wait().await
            }
        };
        status.ok().map(AgentExit::from_status)
    }

    /// Replace the process with `claude --resume <id>` and send the recovery prompt. Returns
    /// false (after saying why in the log) when it cannot or may not.
    async fn restart(
        &mut self,
        process: &mut Process,
        reason: RestartReason,
        open_tool: Option<(String, String)>,
        silent: Duration,
        exit: Option<AgentExit>,
    ) -> Result<bool, AdapterError> {
        let Some(session_id) = self.agent_session_id.clone() else {
            let why = "cannot restart Claude Code: it never reported its session id";
            self.record(vec![map::error(why, None)]).await?;
            return Ok(false);
        };
        if self.restarts >= self.spec.options.max_restarts {
            let why = format!(
                "not restarting Claude Code again: {} restarts in a row without a finished turn",
                self.restarts
            );
            self.status.note(&why);
            self.record(vec![map::error(&why, None)]).await?;
            return Ok(false);
        }
        self.restarts += 1;
        let previous = match exit {
            Some(exit) => Some(exit),
            None => {
                let exit = self.stop(process).await;
                self.drain(process).await?;
                exit
            }
        };
        self.cancel_pending("the agent is being restarted").await?;
        let interruption = Interruption {
            reason,
            agent_session_id: session_id.clone(),
            attempt: self.restarts,
            open_tool,
            silent,
        };
        let prompt = self.brief.prompt(&interruption);
        self.status.note(format!(
            "Claude Code {}; restarting it on session {session_id} (attempt {})",
            reason.name(),
            self.restarts
        ));
        let entry = json!({
            "reason": reason.name(), "agent_session_id": session_id, "attempt": self.restarts,
            "prompt": prompt, "previous_exit": previous.map(|e| e.payload()),
        });
        self.record(vec![Draft::new(kinds::AGENT_RESTART, entry)])
            .await?;
        *process = Process::spawn(&self.spec, Some(&session_id))?;
        self.watchdog.reset(Self::now());
        self.started(process).await?;
        if let Err(e) = self.prompt(process, &prompt).await {
            self.record(vec![map::error(&e, None)]).await?;
        }
        Ok(true)
    }
}

/// An `agent.permission.resolved` entry.
fn resolved(
    request_id: &str,
    decision: &str,
    by: Option<&str>,
    input_seq: Option<u64>,
    reason: Option<&str>,
) -> Draft {
    Draft::new(
        kinds::AGENT_PERMISSION_RESOLVED,
        json!({"request_id": request_id, "decision": decision, "by": by,
               "input_seq": input_seq, "reason": reason}),
    )
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Lines typed at `moor`'s terminal (cooked mode: the terminal does the line editing).
#[derive(Debug)]
struct LocalLines {
    rx: mpsc::Receiver<Vec<u8>>,
    buf: Vec<u8>,
    eof: bool,
}

impl LocalLines {
    fn new() -> Self {
        Self {
            rx: terminal::spawn_stdin_reader(16),
            buf: Vec::new(),
            eof: false,
        }
    }

    /// The next line, `None` once at EOF (reported once), pending after that.
    async fn next(&mut self) -> Option<String> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Some(String::from_utf8_lossy(&line).into_owned());
            }
            if self.eof {
                return std::future::pending().await;
            }
            match self.rx.recv().await {
                Some(chunk) => self.buf.extend_from_slice(&chunk),
                None => {
                    self.eof = true;
                    return None;
                }
            }
        }
    }
}

async fn next_local(local: &mut Option<LocalLines>) -> Option<String> {
    match local {
        Some(lines) => lines.next().await,
        None => std::future::pending().await,
    }
}
