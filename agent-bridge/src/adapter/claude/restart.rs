//! Stalls and exits: report a stall, and with `--auto-resume` stop the agent and start it again
//! on the same agent session with the recovery prompt; tell a crash from a requested stop.

use std::time::Duration;

use tokio::time::Instant;

use super::process::Process;
use super::recovery::{Interruption, RestartReason};
use super::{map, watchdog, Run, PIPE_DRAIN};
use crate::adapter::{signal_agent, tree, AdapterError, AgentExit, AgentSignal};
use crate::spool::Draft;
use moor_protocol::payload::{self, AgentRestart};

impl Run {
    /// The watchdog's deadline passed: report the stall, and restart if asked to.
    pub(super) async fn deadline(&mut self, process: &mut Process) -> Result<(), AdapterError> {
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
        self.record(vec![Draft::new(stall.payload())]).await?;
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

    /// The process exited. `Some` (its exit and the `agent.exit` payload) ends the run; `None`
    /// means it was restarted.
    pub(super) async fn after_exit(
        &mut self,
        process: &mut Process,
        exit: AgentExit,
    ) -> Result<Option<(AgentExit, payload::AgentExit)>, AdapterError> {
        let ended = self.gone(process, exit).await?;
        self.cancel_pending("the agent exited").await?;
        let crashed = !self.stopping && (exit.code != Some(0) || self.watchdog.in_turn());
        if crashed && self.spec.options.auto_resume {
            let silent = self.watchdog.silent(Self::now());
            if self
                .restart(
                    process,
                    RestartReason::Crashed,
                    None,
                    silent,
                    Some(ended.clone()),
                )
                .await?
            {
                return Ok(None);
            }
        }
        Ok(Some((exit, ended)))
    }

    /// The process is gone (and reaped): stop what it left running, read what is left in its
    /// pipes, and name the tool calls it had under way.
    pub(super) async fn gone(
        &mut self,
        process: &mut Process,
        exit: AgentExit,
    ) -> Result<payload::AgentExit, AdapterError> {
        let stopped = tree::stop_leftovers(self.spec.options.stop_grace).await;
        self.drain(process).await?;
        Ok(payload::AgentExit {
            stopped_tools: self.watchdog.open_tools(),
            stopped_processes: stopped,
            ..exit.payload()
        })
    }

    /// Map what is left in the pipes of a process that is going away.
    pub(super) async fn drain(&mut self, process: &mut Process) -> Result<(), AdapterError> {
        let deadline = Instant::now() + PIPE_DRAIN;
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

    /// Stop the process (SIGTERM, then SIGKILL) and wait for it.
    pub(super) async fn stop(&mut self, process: &mut Process) -> Option<AgentExit> {
        let _ = signal_agent(process.pid, AgentSignal::Terminate);
        let grace = self.spec.options.stop_grace;
        let status = match tokio::time::timeout(grace, process.child.wait()).await {
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
    pub(super) async fn restart(
        &mut self,
        process: &mut Process,
        reason: RestartReason,
        open_tool: Option<(String, String)>,
        silent: Duration,
        exit: Option<payload::AgentExit>,
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
            None => match self.stop(process).await {
                Some(exit) => Some(self.gone(process, exit).await?),
                None => {
                    self.drain(process).await?;
                    None
                }
            },
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
        let entry = AgentRestart {
            reason: reason.name().into(),
            agent_session_id: session_id.clone(),
            attempt: self.restarts,
            prompt: prompt.clone(),
            previous_exit: previous,
        };
        self.record(vec![Draft::new(entry)]).await?;
        *process = Process::spawn(&self.spec, Some(&session_id))?;
        self.pid.set(process.pid);
        self.watchdog.reset(Self::now());
        self.started(process).await?;
        if let Err(e) = self.prompt(process, &prompt).await {
            self.record(vec![map::error(&e, None)]).await?;
        }
        Ok(true)
    }
}
