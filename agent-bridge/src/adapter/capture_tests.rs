//! What the mappers' tests share on every real agent capture (Claude Code, Gemini CLI, Codex
//! through codex-acp): reading the captures, and checking that the mapped entries as the log
//! would hold them fold to a valid state at every prefix.

use moor_protocol::payload::Resolution;
use moor_protocol::state::SessionState;
use moor_protocol::transcript::{repaired, validate};
use moor_protocol::{Entry, Seq};

use crate::adapter::claude::decide::resolved;
use crate::spool::Draft;

/// The capture file `path`, below `agent-bridge/tests/fixtures/`.
pub(crate) fn fixture(path: &str) -> String {
    let path = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The kinds of `drafts`, in order.
pub(crate) fn kinds_of(drafts: &[Draft]) -> Vec<&str> {
    drafts.iter().map(|d| d.kind.as_str()).collect()
}

/// The kinds of `drafts` without text deltas and raw agent events: the shape of a turn.
pub(crate) fn turn_kinds(drafts: &[Draft]) -> Vec<&str> {
    kinds_of(drafts)
        .into_iter()
        .filter(|k| *k != "agent.text.delta" && *k != "agent.event")
        .collect()
}

/// The drafts of kind `kind`, in order.
pub(crate) fn of_kind<'a>(drafts: &'a [Draft], kind: &str) -> Vec<&'a Draft> {
    drafts.iter().filter(|d| d.kind == kind).collect()
}

/// The entries of a call the agent asks a person about: announced, asked, decided, finished.
const ASKED_CALL: [&str; 4] = [
    "agent.tool_use",
    "agent.permission.request",
    "agent.permission.resolved",
    "agent.tool_result",
];

/// The turn shapes of a capture that first gets a plain answer, then makes a call a person
/// allows, then one a person denies, each call followed by the model's answer; `rest` is how
/// the capture goes on from there.
pub(crate) fn answer_allowed_denied_then(rest: &[&'static str]) -> Vec<&'static str> {
    let answer = ["agent.text", "agent.result"];
    [
        &answer[..],
        &ASKED_CALL,
        &answer,
        &ASKED_CALL,
        &answer,
        rest,
    ]
    .concat()
}

/// The entry of the capture's answer to the permission request `request_id`, as a person's
/// decision.
pub(crate) fn answered(request_id: &str, decision: Resolution) -> Draft {
    resolved(request_id, decision, Some("user:t"), None, None)
}

/// `drafts` as the log would hold them: a prompt first (the remote input that started the
/// turn), then the mapped entries, numbered as the server would.
pub(crate) fn as_log(drafts: Vec<Draft>) -> Vec<Entry> {
    let prompt = Draft::new(moor_protocol::payload::InputText {
        text: "do the task".into(),
    });
    std::iter::once(prompt)
        .chain(drafts)
        .enumerate()
        .map(|(i, d)| Entry {
            seq: Seq(i as u64 + 1),
            ts: d.ts,
            kind: d.kind,
            author: "bridge".into(),
            payload: d.payload,
        })
        .collect()
}

/// Every prefix of the capture `name`'s `log` gives an API-valid repaired transcript, and
/// folding a snapshot at any point, then the rest, equals folding everything; nothing is
/// malformed.
pub(crate) fn assert_every_prefix_folds(name: &str, log: &[Entry]) {
    let all = SessionState::from_entries(log);
    for end in 0..=log.len() {
        let messages = repaired(&log[..end]);
        if let Err(why) = validate(&messages) {
            panic!("{name}, first {end} entries: {why}\n{messages:#?}");
        }
        let mut resumed = SessionState::from_entries(&log[..end]);
        for e in &log[end..] {
            resumed.apply(e);
        }
        assert_eq!(resumed, all, "{name}: split at {end}");
    }
    assert_eq!(all.counts.malformed, 0, "{name}: {:?}", all.counts);
}
