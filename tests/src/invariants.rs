//! The soak's invariant checker: what a run observed (the final logs, snapshots taken before
//! crashes, everything each viewer received, the inputs posted) against the guarantees of
//! DESIGN.md. It never panics; it returns the violations, each with the entries involved.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine;
use moor_protocol::state::SessionState;
use moor_protocol::web::Reset;
use moor_protocol::{kinds, Entry};
use serde_json::Value;

use crate::assert::{agent_texts, input_seq};
use crate::sse::ViewerState;

/// How an agent's output reaches the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// `agent.output` lines.
    Lines,
    /// `agent.pty.output` bytes.
    Pty,
}

/// One agent run of a bridge: it printed `<prefix>1` … `<prefix><planned>`.
#[derive(Debug, Clone)]
pub struct Run {
    /// Its line prefix (unique in the session).
    pub prefix: String,
    /// How many lines it was to print.
    pub planned: u64,
    /// False when its `moor` was killed: lines still in the pipe may be lost, at the end only.
    pub complete: bool,
}

/// Everything a viewer received.
#[derive(Debug, Clone)]
pub struct ViewerRecord {
    /// Who it was (`sse#3 after 120 via node 0`).
    pub label: String,
    /// Its first cursor.
    pub after: u64,
    /// What it received.
    pub state: ViewerState,
}

/// An input posted with an idempotency key (possibly several times).
#[derive(Debug, Clone)]
pub struct InputRecord {
    /// The key.
    pub client_msg_id: String,
    /// The text (the agent echoes `got: <text>`).
    pub text: String,
    /// The seqs the server answered with, one per accepted post.
    pub accepted: Vec<u64>,
    /// Posts that failed (refused, reset, timed out, 5xx).
    pub failed_posts: u32,
}

/// What the run observed of one session.
#[derive(Debug, Clone)]
pub struct SessionObs {
    /// Its name.
    pub name: String,
    /// How its output is recorded.
    pub output: Output,
    /// Its agent runs, in order.
    pub runs: Vec<Run>,
    /// The log as read at the end.
    pub log: Vec<Entry>,
    /// The state the server reports at the end.
    pub state: Option<SessionState>,
    /// Logs read while the run went on (before crashes): each must be a prefix of the final log.
    pub snapshots: Vec<(String, Vec<Entry>)>,
    /// Viewers of the session.
    pub viewers: Vec<ViewerRecord>,
    /// Inputs posted to it.
    pub inputs: Vec<InputRecord>,
}

/// A broken guarantee.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The session.
    pub session: String,
    /// Which invariant.
    pub invariant: &'static str,
    /// What is wrong, with the entries involved.
    pub detail: String,
    /// Commit time of the first entry involved, when one is (to cut the schedule there).
    pub at_ms: Option<i64>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}] session {}: {}",
            self.invariant, self.session, self.detail
        )
    }
}

/// The checker's result.
#[derive(Debug, Clone, Default)]
pub struct Verdict {
    /// Individual checks made (entries compared, lines counted, viewers replayed…).
    pub checks: u64,
    /// What failed.
    pub violations: Vec<Violation>,
}

struct Ctx<'a> {
    obs: &'a SessionObs,
    verdict: &'a mut Verdict,
}

impl Ctx<'_> {
    fn check(&mut self, ok: bool, invariant: &'static str, detail: impl FnOnce() -> String) {
        self.check_at(ok, invariant, None, detail);
    }

    fn check_at(
        &mut self,
        ok: bool,
        invariant: &'static str,
        at_ms: Option<i64>,
        detail: impl FnOnce() -> String,
    ) {
        self.verdict.checks += 1;
        // A broken log can break thousands of checks: keep the first few of each kind.
        let same = self
            .verdict
            .violations
            .iter()
            .filter(|v| v.invariant == invariant && v.session == self.obs.name)
            .count();
        if !ok && same < 5 {
            self.verdict.violations.push(Violation {
                session: self.obs.name.clone(),
                invariant,
                detail: detail(),
                at_ms,
            });
        }
    }
}

/// Entries around index `i`, for a violation's message.
pub fn around(log: &[Entry], i: usize) -> String {
    log[i.saturating_sub(2)..(i + 3).min(log.len())]
        .iter()
        .map(short)
        .collect::<Vec<_>>()
        .join("; ")
}

/// One entry in a line.
pub fn short(e: &Entry) -> String {
    let mut p = e.payload.to_string();
    if p.len() > 120 {
        let mut cut = 120;
        while !p.is_char_boundary(cut) {
            cut -= 1;
        }
        p.truncate(cut);
        p.push('…');
    }
    format!("#{} {} {} {p}", e.seq.0, e.kind, e.author)
}

/// Checks every session; returns the number of checks and the violations.
pub fn check(sessions: &[SessionObs]) -> Verdict {
    let mut verdict = Verdict::default();
    for obs in sessions {
        let mut cx = Ctx {
            obs,
            verdict: &mut verdict,
        };
        contiguous(&mut cx);
        producers(&mut cx);
        snapshots(&mut cx);
        viewers(&mut cx);
        inputs(&mut cx);
        fold(&mut cx);
    }
    verdict
}

fn contiguous(cx: &mut Ctx<'_>) {
    let log = &cx.obs.log;
    for (i, e) in log.iter().enumerate() {
        let want = i as u64 + 1;
        cx.check_at(e.seq.0 == want, "log contiguous", Some(e.ts), || {
            format!(
                "index {i} holds seq {}, expected {want}: {}",
                e.seq.0,
                around(log, i)
            )
        });
    }
    // `session.ended` once; after it only the server's record of the last link closing.
    let ended: Vec<usize> = log
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == kinds::SESSION_ENDED)
        .map(|(i, _)| i)
        .collect();
    let after_end_ok = ended.first().is_some_and(|&i| {
        log[i + 1..]
            .iter()
            .all(|e| e.kind == kinds::BRIDGE_DISCONNECTED && e.author == kinds::AUTHOR_SERVER)
    });
    cx.check(ended.len() == 1 && after_end_ok, "session ended", || {
        format!(
            "session.ended at indexes {ended:?}; the log ends: {}",
            log.len()
                .checked_sub(1)
                .map_or(String::new(), |i| around(log, i))
        )
    });
}

/// The agent's printed lines, with the index of the entry each (first) came from.
fn printed_lines(obs: &SessionObs) -> Vec<(String, usize)> {
    match obs.output {
        Output::Lines => {
            let mut out = Vec::new();
            for (i, e) in obs.log.iter().enumerate() {
                if e.kind == kinds::AGENT_OUTPUT
                    && e.payload.get("stream").and_then(Value::as_str) == Some("stdout")
                {
                    let text = agent_texts(std::slice::from_ref(e), "stdout");
                    out.extend(text.into_iter().map(|t| (t, i)));
                }
            }
            out
        }
        Output::Pty => {
            let b64 = base64::engine::general_purpose::STANDARD;
            let mut bytes = Vec::new();
            let mut origin = Vec::new();
            for (i, e) in obs.log.iter().enumerate() {
                if e.kind != kinds::AGENT_PTY_OUTPUT {
                    continue;
                }
                let data = e.payload.get("data").and_then(Value::as_str).unwrap_or("");
                let chunk = b64.decode(data).unwrap_or_default();
                origin.extend(std::iter::repeat_n(i, chunk.len()));
                bytes.extend(chunk);
            }
            let mut out = Vec::new();
            let mut start = 0;
            for (pos, b) in bytes.iter().enumerate() {
                if *b == b'\n' {
                    let line = String::from_utf8_lossy(&bytes[start..pos]);
                    out.push((
                        line.trim_end_matches('\r').to_owned(),
                        origin[start.min(pos)],
                    ));
                    start = pos + 1;
                }
            }
            out
        }
    }
}

/// `<prefix><n>[ filler]` → n.
fn line_number(line: &str, prefix: &str) -> Option<u64> {
    let rest = line.strip_prefix(prefix)?;
    rest.split(' ').next()?.parse().ok()
}

fn producers(cx: &mut Ctx<'_>) {
    let obs = cx.obs;
    let lines = printed_lines(obs);
    // Per run: the numbers in log order, and where each came from.
    let mut seen: Vec<Vec<(u64, usize)>> = vec![Vec::new(); obs.runs.len()];
    let mut last_run = 0usize;
    for (line, at) in &lines {
        if line.starts_with("got: ") {
            continue;
        }
        let run = obs
            .runs
            .iter()
            .enumerate()
            .find_map(|(r, run)| line_number(line, &run.prefix).map(|n| (r, n)));
        let e = &obs.log[*at];
        match run {
            Some((r, n)) => {
                cx.check_at(r >= last_run, "producer order", Some(e.ts), || {
                    format!(
                        "line {line:?} of run {r} after a line of run {last_run}: {}",
                        around(&obs.log, *at)
                    )
                });
                last_run = last_run.max(r);
                seen[r].push((n, *at));
            }
            None => cx.check_at(
                // The terminal may print other things (a shell prompt, echo); lines mode may not.
                obs.output == Output::Pty,
                "producer exactly once",
                Some(e.ts),
                || {
                    format!(
                        "a line no agent printed: {line:?}: {}",
                        around(&obs.log, *at)
                    )
                },
            ),
        }
    }
    for (r, run) in obs.runs.iter().enumerate() {
        for (k, (n, at)) in seen[r].iter().enumerate() {
            let want = k as u64 + 1;
            cx.check_at(*n == want, "producer exactly once, in order", Some(obs.log[*at].ts), || {
                format!(
                    "run {} ({}): line {k} is number {n}, expected {want} (a loss, duplicate or reorder): {}",
                    r, run.prefix, around(&obs.log, *at)
                )
            });
        }
        let got = seen[r].len() as u64;
        if run.complete {
            cx.check(got == run.planned, "every produced entry stored", || {
                format!(
                    "run {r} ({}) printed {} lines, the log holds {got}",
                    run.prefix, run.planned
                )
            });
        } else {
            cx.check(got <= run.planned, "producer exactly once", || {
                format!(
                    "killed run {r} ({}) holds {got} lines, more than the {} planned",
                    run.prefix, run.planned
                )
            });
        }
    }
}

fn snapshots(cx: &mut Ctx<'_>) {
    let obs = cx.obs;
    for (label, snap) in &obs.snapshots {
        let first_diff = snap
            .iter()
            .zip(&obs.log)
            .position(|(a, b)| a != b)
            .or((snap.len() > obs.log.len()).then_some(obs.log.len()));
        cx.verdict.checks += snap.len() as u64;
        cx.check_at(
            first_diff.is_none(),
            "acknowledged entries survive crashes",
            first_diff.and_then(|i| snap.get(i)).map(|e| e.ts),
            || {
                let i = first_diff.unwrap_or(0);
                format!(
                    "the log read {label} ({} entries) differs from the final log at index {i}: then {} / now {}",
                    snap.len(),
                    snap.get(i).map_or("-".into(), short),
                    obs.log.get(i).map_or("missing".into(), short)
                )
            },
        );
    }
}

/// A reset is justified when the viewer's cursor was ahead of the head the server reports.
fn justified(reset: &Reset, cursor: u64) -> bool {
    cursor > reset.head_seq.0
}

fn viewers(cx: &mut Ctx<'_>) {
    let obs = cx.obs;
    for v in &obs.viewers {
        let mut cursor = v.after;
        for e in &v.state.entries {
            let seq = e.seq.0;
            let at = Some(e.ts);
            cx.check_at(
                seq == cursor + 1,
                "viewer saw a gap-free prefix",
                at,
                || {
                    format!(
                        "{} got seq {seq} after seq {cursor} (gap, duplicate or reorder): {}",
                        v.label,
                        short(e)
                    )
                },
            );
            let stored = seq.checked_sub(1).and_then(|i| obs.log.get(i as usize));
            cx.check_at(stored == Some(e), "viewer saw the log", at, || {
                format!(
                    "{} got {} but the log holds {}",
                    v.label,
                    short(e),
                    stored.map_or("nothing".into(), short)
                )
            });
            cursor = cursor.max(seq);
        }
        for r in &v.state.resets {
            cx.check(justified(r, cursor), "resets are justified", || {
                format!(
                    "{} was reset ({}, head {}) at cursor {cursor}, which the server could honour",
                    v.label, r.reason, r.head_seq.0
                )
            });
        }
    }
}

fn inputs(cx: &mut Ctx<'_>) {
    let obs = cx.obs;
    let echoed = agent_texts(&obs.log, "stdout");
    let mut receipts: BTreeMap<u64, Vec<&Entry>> = BTreeMap::new();
    for e in &obs.log {
        if let Some(seq) = input_seq(e) {
            receipts.entry(seq).or_default().push(e);
        }
    }
    let stored_inputs = obs
        .log
        .iter()
        .filter(|e| e.kind == kinds::INPUT_TEXT)
        .count();
    cx.check(
        stored_inputs <= obs.inputs.len(),
        "inputs stored once",
        || {
            format!(
                "{stored_inputs} input.text entries for {} keys posted",
                obs.inputs.len()
            )
        },
    );
    for input in &obs.inputs {
        let Some(&seq) = input.accepted.first() else {
            // Never accepted: whether it was stored is unknown to the client; the log must hold
            // it at most once, which the count above covers.
            continue;
        };
        let id = &input.client_msg_id;
        cx.check(
            input.accepted.iter().all(|s| *s == seq),
            "inputs stored once",
            || {
                format!(
                    "{id}: retries were answered with different seqs {:?}",
                    input.accepted
                )
            },
        );
        let entry = obs.log.get(seq as usize - 1);
        cx.check(
            entry.is_some_and(|e| {
                e.kind == kinds::INPUT_TEXT
                    && e.payload.get("text").and_then(Value::as_str) == Some(input.text.as_str())
            }),
            "inputs stored once",
            || format!("{id}: seq {seq} holds {:?}", entry.map(short)),
        );
        let rs = receipts.get(&seq).cloned().unwrap_or_default();
        let count = |kind: &str| rs.iter().filter(|e| e.kind == kind).count();
        let applied = count(kinds::INPUT_APPLIED);
        let unsure = count(kinds::INPUT_UNCERTAIN) + count(kinds::INPUT_FAILED);
        let times = echoed
            .iter()
            .filter(|t| **t == format!("got: {}", input.text))
            .count();
        cx.check(
            (applied == 1 && times == 1) || (applied == 0 && unsure >= 1 && times <= 1),
            "input applied exactly once or recorded uncertain",
            || {
                format!(
                    "{id} (seq {seq}): {applied} applied receipts, {unsure} uncertain/failed, echoed {times} times; receipts: {}",
                    rs.iter().map(|e| short(e)).collect::<Vec<_>>().join("; ")
                )
            },
        );
    }
}

fn fold(cx: &mut Ctx<'_>) {
    let obs = cx.obs;
    let folded = SessionState::from_entries(&obs.log);
    match &obs.state {
        Some(state) => cx.check(*state == folded, "state fold equals the log's", || {
            let a = serde_json::to_string(state).unwrap_or_default();
            let b = serde_json::to_string(&folded).unwrap_or_default();
            let at = a
                .bytes()
                .zip(b.bytes())
                .position(|(x, y)| x != y)
                .unwrap_or(a.len().min(b.len()));
            let from = at.saturating_sub(80);
            format!(
                "the server's state differs from the fold of the log near byte {at}: server …{}… / fold …{}…",
                a.get(from..(at + 80).min(a.len())).unwrap_or(""),
                b.get(from..(at + 80).min(b.len())).unwrap_or("")
            )
        }),
        None => cx.check(false, "state fold equals the log's", || {
            "the server reported no state".into()
        }),
    }
}
