//! What the mappers' tests check on every real agent capture (Claude Code, Gemini CLI, Codex
//! through codex-acp): the mapped entries as the log would hold them fold to a valid state at
//! every prefix.

use moor_protocol::state::SessionState;
use moor_protocol::transcript::{repaired, validate};
use moor_protocol::{Entry, Seq};

use crate::spool::Draft;

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
