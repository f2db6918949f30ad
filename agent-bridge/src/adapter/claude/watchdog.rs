//! The stall watchdog: knows what the agent should be doing (waiting for the model, running a
//! tool, waiting for a person, idle) and when its silence stops being normal.
//!
//! Pure and clock-injected: the adapter feeds it signals with the time they happened on tokio's
//! clock and sleeps until the next deadline, so tests run it on paused time without sleeping. A running tool gets the (longer) tool limit,
//! a pending permission request none at all (a person is deciding), an idle agent none either.

use std::collections::BTreeMap;
use std::time::Duration;

use moor_protocol::payload::{AgentStalled, StalledTool};
use tokio::time::Instant;

use super::map::Signal;

/// What the agent is doing, as far as its output tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No turn in progress.
    Idle,
    /// A turn is in progress and no tool runs: the model should be streaming.
    Streaming,
    /// A tool runs.
    Tool,
    /// A permission request waits for a person.
    Permission,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Streaming => "streaming",
            Self::Tool => "tool",
            Self::Permission => "permission",
        }
    }
}

/// A stall, as reported in `agent.stalled`.
#[derive(Debug, Clone, PartialEq)]
pub struct Stall {
    /// The phase the agent went silent in.
    pub phase: Phase,
    /// How long it has been silent.
    pub silent: Duration,
    /// The limit it passed.
    pub timeout: Duration,
    /// The running tool (id, name), when one runs.
    pub tool: Option<(String, String)>,
}

impl Stall {
    /// The `agent.stalled` payload.
    pub fn payload(&self) -> AgentStalled {
        AgentStalled {
            phase: self.phase.name().into(),
            silent_ms: self.silent.as_millis() as u64,
            timeout_ms: self.timeout.as_millis() as u64,
            tool: self.tool.as_ref().map(|(id, name)| StalledTool {
                id: id.clone(),
                name: name.clone(),
            }),
        }
    }
}

/// Phase tracking and deadlines.
#[derive(Debug)]
pub struct Watchdog {
    stall_timeout: Duration,
    tool_timeout: Duration,
    in_turn: bool,
    tools: BTreeMap<String, String>,
    permissions: usize,
    last_activity: Instant,
    stalled: bool,
}

impl Watchdog {
    /// A watchdog with these limits, idle at `now`.
    pub fn new(stall_timeout: Duration, tool_timeout: Duration, now: Instant) -> Self {
        Self {
            stall_timeout,
            tool_timeout,
            in_turn: false,
            tools: BTreeMap::new(),
            permissions: 0,
            last_activity: now,
            stalled: false,
        }
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        match (self.in_turn, self.permissions > 0, self.tools.is_empty()) {
            (false, _, _) => Phase::Idle,
            (true, true, _) => Phase::Permission,
            (true, false, false) => Phase::Tool,
            (true, false, true) => Phase::Streaming,
        }
    }

    /// The tool calls running now, by id.
    pub fn open_tools(&self) -> Vec<StalledTool> {
        self.tools
            .iter()
            .map(|(id, name)| StalledTool {
                id: id.clone(),
                name: name.clone(),
            })
            .collect()
    }

    /// Whether a turn is in progress.
    pub fn in_turn(&self) -> bool {
        self.in_turn
    }

    /// A prompt was sent: a turn starts (or continues) now.
    pub fn turn_started(&mut self, now: Instant) -> bool {
        self.in_turn = true;
        self.active(now)
    }

    /// The agent process is gone or replaced: nothing is in flight any more.
    pub fn reset(&mut self, now: Instant) {
        self.in_turn = false;
        self.tools.clear();
        self.permissions = 0;
        self.stalled = false;
        self.last_activity = now;
    }

    /// A permission request was answered (or withdrawn).
    pub fn permission_done(&mut self, now: Instant) {
        self.permissions = self.permissions.saturating_sub(1);
        self.active(now);
    }

    /// The agent printed something at `now`. Returns true when this ends a reported stall.
    pub fn observe(&mut self, signals: &[Signal], now: Instant) -> bool {
        for signal in signals {
            match signal {
                Signal::ToolStarted { id, name } => {
                    self.in_turn = true;
                    self.tools.insert(id.clone(), name.clone());
                }
                Signal::ToolFinished { id } => {
                    self.tools.remove(id);
                }
                Signal::Permission(_) => self.permissions += 1,
                Signal::PermissionCancelled { .. } => {
                    self.permissions = self.permissions.saturating_sub(1)
                }
                Signal::TurnEnded { .. } => {
                    self.in_turn = false;
                    self.tools.clear();
                    self.permissions = 0;
                }
                Signal::Model => self.in_turn = true,
                Signal::Alive
                | Signal::ControlResponse { .. }
                | Signal::UnsupportedControl { .. } => {}
            }
        }
        self.active(now)
    }

    fn active(&mut self, now: Instant) -> bool {
        self.last_activity = now;
        std::mem::take(&mut self.stalled)
    }

    /// How long the agent has been silent at `now`.
    pub fn silent(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.last_activity)
    }

    /// When the current silence becomes a stall; `None` when it never does (idle, waiting for a
    /// person, or already reported).
    pub fn deadline(&self) -> Option<Instant> {
        if self.stalled {
            return None;
        }
        let limit = match self.phase() {
            Phase::Streaming => self.stall_timeout,
            Phase::Tool => self.tool_timeout,
            Phase::Idle | Phase::Permission => return None,
        };
        Some(self.last_activity + limit)
    }

    /// The stall at `now`, if the deadline has passed; reported once per silence.
    pub fn check(&mut self, now: Instant) -> Option<Stall> {
        let deadline = self.deadline()?;
        if now < deadline {
            return None;
        }
        self.stalled = true;
        let phase = self.phase();
        Some(Stall {
            phase,
            silent: self.silent(now),
            timeout: match phase {
                Phase::Tool => self.tool_timeout,
                _ => self.stall_timeout,
            },
            tool: self
                .tools
                .iter()
                .next()
                .map(|(id, name)| (id.clone(), name.clone())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STALL: Duration = Duration::from_secs(60);
    const TOOL: Duration = Duration::from_secs(600);

    fn at(t0: Instant, secs: u64) -> Instant {
        t0 + Duration::from_secs(secs)
    }

    #[test]
    fn silence_while_streaming_is_a_stall_once_past_the_limit() {
        let t0 = Instant::now();
        let mut w = Watchdog::new(STALL, TOOL, t0);
        assert_eq!(w.deadline(), None, "idle never stalls");
        w.turn_started(t0);
        assert!(w.check(at(t0, 59)).is_none());
        let stall = w.check(at(t0, 61)).unwrap();
        assert_eq!(stall.phase, Phase::Streaming);
        assert_eq!(stall.payload().silent_ms, 61_000);
        assert!(w.check(at(t0, 500)).is_none(), "reported once");
        assert!(w.observe(&[Signal::Model], at(t0, 501)), "activity ends it");
        assert_eq!(w.deadline(), Some(at(t0, 561)));
    }

    #[test]
    fn a_running_tool_gets_the_tool_limit_and_a_pending_permission_none() {
        let t0 = Instant::now();
        let mut w = Watchdog::new(STALL, TOOL, t0);
        w.turn_started(t0);
        let tool = Signal::ToolStarted {
            id: "t1".into(),
            name: "Bash".into(),
        };
        w.observe(&[tool], t0);
        assert_eq!(w.phase(), Phase::Tool);
        assert!(w.check(at(t0, 300)).is_none(), "a long tool is not a stall");
        let stall = w.check(at(t0, 601)).unwrap();
        assert_eq!(stall.tool, Some(("t1".into(), "Bash".into())));
        w.observe(&[Signal::ToolFinished { id: "t1".into() }], at(t0, 602));
        assert_eq!(w.phase(), Phase::Streaming);
        let permission = Signal::Permission(super::super::map::PermissionRequest {
            request_id: "r".into(),
            tool_name: "Bash".into(),
            input: serde_json::Value::Null,
        });
        w.observe(&[permission], at(t0, 603));
        assert_eq!(w.deadline(), None, "a person is deciding");
        w.permission_done(at(t0, 700));
        assert_eq!(w.deadline(), Some(at(t0, 760)));
        w.observe(&[Signal::TurnEnded { success: true }], at(t0, 701));
        assert_eq!(w.phase(), Phase::Idle);
        assert_eq!(w.deadline(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn sleeping_until_the_deadline_finds_a_stall_only_once_the_model_went_silent_for_the_limit(
    ) {
        // arrange: a turn whose tool runs longer than the stall limit
        let mut w = Watchdog::new(STALL, TOOL, Instant::now());
        w.turn_started(Instant::now());
        let tool = Signal::ToolStarted {
            id: "t1".into(),
            name: "Bash".into(),
        };
        w.observe(&[tool], Instant::now());
        tokio::time::advance(STALL * 2).await;
        assert!(
            w.check(Instant::now()).is_none(),
            "a long tool is not a stall"
        );
        w.observe(&[Signal::ToolFinished { id: "t1".into() }], Instant::now());
        let tool_done = Instant::now();
        // act: what the adapter's loop does, on tokio's clock
        tokio::time::sleep_until(w.deadline().unwrap()).await;
        let stall = w.check(Instant::now());
        // assert
        let stall = stall.expect("the model stream went silent for the stall limit");
        assert_eq!(stall.phase, Phase::Streaming);
        assert_eq!(Instant::now() - tool_done, STALL);
        assert_eq!(stall.silent, STALL);
        assert_eq!(
            w.deadline(),
            None,
            "reported once, then no deadline until activity"
        );
    }
}
