//! What to send for a batch of claimed outbox rows: pure decisions, no I/O.
//!
//! Rows of one session and class coalesce into one notification ("3 turns finished"); each
//! permission request keeps its own (it carries its own buttons); a resolution retracts its
//! request's notification (same tag), or, when the request was not sent yet, cancels both;
//! rows older than the stale age (an outage) fold into one summary per session.

use std::collections::{BTreeMap, HashMap};

use moor_protocol::notify::NotifyClass;
use moor_protocol::payload::EntryBody;
use moor_protocol::{Entry, Seq, SessionId};

use crate::store::notify::OutboxRow;

/// Longest title sent, in characters.
const MAX_TITLE_CHARS: usize = 120;
/// Longest body sent, in characters (a push payload holds at most 4 KiB).
const MAX_BODY_CHARS: usize = 400;

/// One notification to send to the session's people.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Draft {
    pub(crate) session: SessionId,
    pub(crate) class: NotifyClass,
    pub(crate) tag: String,
    pub(crate) seq: Seq,
    pub(crate) count: u32,
    pub(crate) title: String,
    pub(crate) body: String,
    pub(crate) request_id: Option<String>,
    pub(crate) close: bool,
    /// The outbox rows it settles once delivered.
    pub(crate) rows: Vec<i64>,
}

/// The decisions for one batch.
#[derive(Debug, Default)]
pub(crate) struct Composed {
    /// Notifications to send.
    pub(crate) drafts: Vec<Draft>,
    /// Rows settled without a notification of their own, with the reason.
    pub(crate) dropped: Vec<(i64, &'static str)>,
    /// Rows not due yet: `(row, due at)`.
    pub(crate) deferred: Vec<(i64, i64)>,
}

/// Timings the decisions depend on (ms).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ages {
    pub(crate) now: i64,
    /// Rows older than this fold into a summary; zero: never.
    pub(crate) stale_after: i64,
    /// A lost bridge notifies once it has been gone this long.
    pub(crate) bridge_lost_after: i64,
}

/// What one row says, before coalescing.
struct Item {
    row: i64,
    session: SessionId,
    seq: Seq,
    class: NotifyClass,
    title: String,
    body: String,
    request_id: Option<String>,
    resolves: Option<String>,
}

/// Decides what `rows` (each with its entry, if it could be read) turn into.
pub(crate) fn compose(rows: &[(OutboxRow, Option<Entry>)], ages: Ages) -> Composed {
    let mut out = Composed::default();
    let mut items = Vec::new();
    let mut stale: BTreeMap<SessionId, Vec<(i64, Seq, NotifyClass)>> = BTreeMap::new();
    for (row, entry) in rows {
        let Some(entry) = entry else {
            out.dropped.push((row.id, "the entry could not be read"));
            continue;
        };
        if row.kind == moor_protocol::kinds::BRIDGE_DISCONNECTED
            && ages.now < row.ts.saturating_add(ages.bridge_lost_after)
        {
            out.deferred
                .push((row.id, row.ts.saturating_add(ages.bridge_lost_after)));
            continue;
        }
        let Some(item) = describe(row.id, row.session, entry) else {
            out.dropped.push((row.id, "nothing to tell"));
            continue;
        };
        let is_stale = ages.stale_after > 0
            && item.resolves.is_none()
            && ages.now.saturating_sub(row.ts) > ages.stale_after;
        if is_stale {
            stale
                .entry(item.session)
                .or_default()
                .push((item.row, item.seq, item.class));
        } else {
            items.push(item);
        }
    }

    // A request answered before its notification went out needs neither.
    let resolved: HashMap<(SessionId, &str), i64> = items
        .iter()
        .filter_map(|i| Some(((i.session, i.resolves.as_deref()?), i.row)))
        .collect();
    let mut cancelled = Vec::new();
    for i in &items {
        if let Some(id) = &i.request_id {
            if let Some(res_row) = resolved.get(&(i.session, id.as_str())) {
                cancelled.push(i.row);
                cancelled.push(*res_row);
            }
        }
    }
    for row in &cancelled {
        out.dropped.push((*row, "answered before it was sent"));
    }

    let mut groups: BTreeMap<(SessionId, NotifyClass), Vec<Item>> = BTreeMap::new();
    for item in items.into_iter().filter(|i| !cancelled.contains(&i.row)) {
        if item.request_id.is_some() || item.resolves.is_some() {
            out.drafts.push(single(item));
        } else {
            groups
                .entry((item.session, item.class))
                .or_default()
                .push(item);
        }
    }
    for ((session, class), group) in groups {
        out.drafts.push(coalesce(session, class, group));
    }
    for (session, rows) in stale {
        out.drafts.push(summary(session, rows));
    }
    out
}

/// A permission request, or the retraction of one.
fn single(item: Item) -> Draft {
    let request = item.request_id.clone().or(item.resolves.clone());
    Draft {
        session: item.session,
        class: item.class,
        tag: format!(
            "perm:{}:{}",
            item.session,
            request.clone().unwrap_or_default()
        ),
        seq: item.seq,
        count: 1,
        title: item.title,
        body: item.body,
        request_id: request,
        close: item.resolves.is_some(),
        rows: vec![item.row],
    }
}

/// Several rows of one class in one session: one notification, newest text, with a count.
fn coalesce(session: SessionId, class: NotifyClass, group: Vec<Item>) -> Draft {
    let count = group.len() as u32;
    let rows = group.iter().map(|i| i.row).collect();
    let newest = group
        .into_iter()
        .max_by_key(|i| i.seq)
        .map(|i| (i.seq, i.title, i.body));
    let (seq, title, body) = newest.unwrap_or((Seq(0), String::new(), String::new()));
    let title = if count > 1 {
        format!("{count} × {}", plural_title(class).unwrap_or(&title))
    } else {
        title
    };
    Draft {
        session,
        class,
        tag: format!("{}:{session}", class_name(class)),
        seq,
        count,
        title: clip(&title, MAX_TITLE_CHARS),
        body,
        request_id: None,
        close: false,
        rows,
    }
}

/// Rows from an outage folded into one notification per session.
fn summary(session: SessionId, rows: Vec<(i64, Seq, NotifyClass)>) -> Draft {
    let count = rows.len() as u32;
    let mut by_class: BTreeMap<NotifyClass, u32> = BTreeMap::new();
    for (_, _, class) in &rows {
        *by_class.entry(*class).or_default() += 1;
    }
    let body = by_class
        .iter()
        .map(|(class, n)| format!("{n} {}", class_label(*class)))
        .collect::<Vec<_>>()
        .join(", ");
    Draft {
        session,
        class: NotifyClass::Summary,
        tag: format!("summary:{session}"),
        seq: rows.iter().map(|r| r.1).max().unwrap_or(Seq(0)),
        count,
        title: format!("While you were away: {count} notifications"),
        body: clip(&body, MAX_BODY_CHARS),
        request_id: None,
        close: false,
        rows: rows.iter().map(|r| r.0).collect(),
    }
}

/// The class and the words for one entry; `None` when the entry tells nobody anything (a
/// clean exit, an unreadable payload).
fn describe(row: i64, session: SessionId, entry: &Entry) -> Option<Item> {
    let body = entry.body().ok()?;
    let mut item = Item {
        row,
        session,
        seq: entry.seq,
        class: NotifyClass::Turn,
        title: String::new(),
        body: String::new(),
        request_id: None,
        resolves: None,
    };
    match body {
        EntryBody::AgentPermissionRequest(p) => {
            item.class = NotifyClass::Permission;
            item.title = format!("Permission: {}", p.tool_name);
            item.body = permission_detail(&p);
            item.request_id = Some(p.request_id);
        }
        EntryBody::AgentPermissionResolved(p) => {
            item.class = NotifyClass::Permission;
            item.title = "Answered".to_owned();
            item.resolves = Some(p.request_id);
        }
        EntryBody::AgentResult(p) => {
            item.title = if p.is_error {
                "Turn failed".to_owned()
            } else {
                "Turn finished".to_owned()
            };
            let line = p
                .result
                .as_deref()
                .and_then(|r| r.lines().find(|l| !l.trim().is_empty()))
                .unwrap_or("")
                .trim()
                .to_owned();
            item.body = match p.cost_usd {
                Some(cost) if cost.is_finite() => format!("{line} (${cost:.4})"),
                _ => line,
            };
        }
        EntryBody::AgentStalled(p) => {
            item.class = NotifyClass::Stalled;
            item.title = "Agent stalled".to_owned();
            item.body = format!("silent for {} s while {}", p.silent_ms / 1000, p.phase);
        }
        EntryBody::AgentExit(p) => {
            if p.code == Some(0) && p.signal.is_none() {
                return None;
            }
            item.class = NotifyClass::Crashed;
            item.title = "Agent exited".to_owned();
            item.body = match (p.code, p.signal) {
                (_, Some(sig)) => format!("killed by signal {sig}"),
                (Some(code), None) => format!("exit code {code}"),
                (None, None) => "ended".to_owned(),
            };
        }
        EntryBody::AgentRestart(p) => {
            if p.reason != "stalled" && p.reason != "crashed" {
                return None;
            }
            item.class = NotifyClass::Crashed;
            item.title = "Agent restarted".to_owned();
            item.body = format!("after it {}; attempt {}", p.reason, p.attempt);
        }
        EntryBody::BridgeDisconnected(p) => {
            item.class = NotifyClass::BridgeLost;
            item.title = "Bridge lost".to_owned();
            item.body = p.reason.unwrap_or_default();
        }
        EntryBody::InputFailed(p) => {
            item.class = NotifyClass::InputFailed;
            item.title = "Input failed".to_owned();
            item.body = p.reason;
        }
        EntryBody::SessionEnded(p) => {
            item.class = NotifyClass::Ended;
            item.title = "Session ended".to_owned();
            item.body = p.reason.unwrap_or_default();
        }
        _ => return None,
    }
    item.title = clip(&item.title, MAX_TITLE_CHARS);
    item.body = clip(&item.body, MAX_BODY_CHARS);
    Some(item)
}

/// The words of a notification about `entry` covering `count` entries of its class, for a
/// service worker that got it in privacy mode; `None` when the entry notifies nobody.
pub(crate) fn text_of(session: SessionId, entry: &Entry, count: u32) -> Option<(String, String)> {
    let item = describe(0, session, entry)?;
    let title = match plural_title(item.class) {
        Some(plural) if count > 1 => format!("{count} × {plural}"),
        _ => item.title,
    };
    Some((clip(&title, MAX_TITLE_CHARS), item.body))
}

/// What a notification in privacy mode says where the service worker cannot ask for its
/// words (ntfy, a webhook): its class, nothing of the session.
pub(crate) fn private_text(class: NotifyClass) -> &'static str {
    match class {
        NotifyClass::Permission => "A permission request is waiting",
        NotifyClass::Turn => "A turn finished",
        NotifyClass::Stalled => "An agent stalled",
        NotifyClass::Crashed => "An agent crashed or restarted",
        NotifyClass::BridgeLost => "A bridge was lost",
        NotifyClass::InputFailed => "An input failed",
        NotifyClass::Ended => "A session ended",
        NotifyClass::Summary => "Notifications while you were away",
    }
}

/// What a permission request asks to do: the command, else the path, else the description.
fn permission_detail(p: &moor_protocol::payload::AgentPermissionRequest) -> String {
    let command = p.input.get("command").and_then(|c| c.as_str());
    let path = p
        .path
        .as_deref()
        .or_else(|| p.input.get("file_path").and_then(|c| c.as_str()));
    command
        .or(path)
        .or(p.description.as_deref())
        .unwrap_or("")
        .to_owned()
}

fn plural_title(class: NotifyClass) -> Option<&'static str> {
    match class {
        NotifyClass::Turn => Some("turns finished"),
        NotifyClass::Stalled => Some("stalls"),
        NotifyClass::Crashed => Some("agent crashes or restarts"),
        NotifyClass::BridgeLost => Some("bridge losses"),
        NotifyClass::InputFailed => Some("inputs failed"),
        _ => None,
    }
}

fn class_label(class: NotifyClass) -> &'static str {
    match class {
        NotifyClass::Permission => "permission requests",
        NotifyClass::Turn => "turns finished",
        NotifyClass::Stalled => "stalls",
        NotifyClass::Crashed => "crashes or restarts",
        NotifyClass::BridgeLost => "bridge losses",
        NotifyClass::InputFailed => "failed inputs",
        NotifyClass::Ended => "session end",
        NotifyClass::Summary => "summaries",
    }
}

/// The class's name in tags.
pub(crate) fn class_name(class: NotifyClass) -> &'static str {
    match class {
        NotifyClass::Permission => "permission",
        NotifyClass::Turn => "turn",
        NotifyClass::Stalled => "stalled",
        NotifyClass::Crashed => "crashed",
        NotifyClass::BridgeLost => "bridge_lost",
        NotifyClass::InputFailed => "input_failed",
        NotifyClass::Ended => "ended",
        NotifyClass::Summary => "summary",
    }
}

/// `s` cut to `max` characters, with an ellipsis when cut.
fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(id: i64, session: SessionId, seq: u64, kind: &str, ts: i64) -> OutboxRow {
        OutboxRow {
            id,
            session,
            seq: Seq(seq),
            kind: kind.to_owned(),
            ts,
            attempts: 0,
        }
    }

    fn entry(seq: u64, kind: &str, ts: i64, payload: serde_json::Value) -> Option<Entry> {
        Some(Entry {
            seq: Seq(seq),
            ts,
            kind: kind.to_owned(),
            author: "bridge".to_owned(),
            payload,
        })
    }

    const AGES: Ages = Ages {
        now: 1_000_000,
        stale_after: 60_000,
        bridge_lost_after: 10_000,
    };

    #[test]
    fn three_turns_coalesce_into_one_notification_with_a_count() {
        let s = SessionId::new();
        let rows: Vec<_> = (1..=3)
            .map(|i| {
                let p = json!({"result": format!("done {i}"), "cost_usd": 0.01});
                (
                    row(i, s, i as u64, "agent.result", AGES.now),
                    entry(i as u64, "agent.result", AGES.now, p),
                )
            })
            .collect();
        let out = compose(&rows, AGES);
        assert_eq!(out.drafts.len(), 1);
        let d = &out.drafts[0];
        assert_eq!(d.count, 3);
        assert_eq!(d.title, "3 × turns finished");
        assert_eq!(d.body, "done 3 ($0.0100)");
        assert_eq!(d.rows, vec![1, 2, 3]);
    }

    #[test]
    fn a_request_answered_before_sending_cancels_both_and_a_later_answer_retracts() {
        let s = SessionId::new();
        let req = json!({"request_id": "r1", "tool_name": "Bash", "input": {"command": "ls"}});
        let res = json!({"request_id": "r1", "decision": "allow"});
        let both = vec![
            (
                row(1, s, 1, "agent.permission.request", AGES.now),
                entry(1, "agent.permission.request", AGES.now, req.clone()),
            ),
            (
                row(2, s, 2, "agent.permission.resolved", AGES.now),
                entry(2, "agent.permission.resolved", AGES.now, res.clone()),
            ),
        ];
        let out = compose(&both, AGES);
        assert!(out.drafts.is_empty());
        assert_eq!(out.dropped.len(), 2);

        let alone = vec![(
            row(3, s, 2, "agent.permission.resolved", AGES.now),
            entry(2, "agent.permission.resolved", AGES.now, res),
        )];
        let out = compose(&alone, AGES);
        assert_eq!(out.drafts.len(), 1);
        assert!(out.drafts[0].close);
        assert_eq!(out.drafts[0].tag, format!("perm:{s}:r1"));
    }

    #[test]
    fn rows_from_an_outage_fold_into_one_summary_and_a_fresh_bridge_loss_waits() {
        let s = SessionId::new();
        let old = AGES.now - 120_000;
        let mut rows: Vec<_> = (1..=4)
            .map(|i| {
                (
                    row(i, s, i as u64, "agent.result", old),
                    entry(i as u64, "agent.result", old, json!({})),
                )
            })
            .collect();
        rows.push((
            row(9, s, 9, "bridge.disconnected", AGES.now - 1000),
            entry(9, "bridge.disconnected", AGES.now - 1000, json!({})),
        ));
        let out = compose(&rows, AGES);
        assert_eq!(out.drafts.len(), 1);
        assert_eq!(out.drafts[0].class, NotifyClass::Summary);
        assert_eq!(out.drafts[0].count, 4);
        assert_eq!(out.deferred, vec![(9, AGES.now - 1000 + 10_000)]);
    }
}
