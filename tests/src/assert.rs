//! The assertions every end-to-end test ends with: the log is contiguous, and it holds exactly
//! what the agent printed, once each, in order.

use std::collections::HashMap;

use moor_protocol::{kinds, Entry};
use serde_json::Value;

/// `prefix<from>` … `prefix<to>`.
pub fn numbered(prefix: &str, from: u64, to: u64) -> Vec<String> {
    (from..=to).map(|i| format!("{prefix}{i}")).collect()
}

/// One numbered run after another: `[("a-", 2), ("b-", 1)]` is `a-1, a-2, b-1`, what a session
/// holds when a second agent run (or a second bridge) followed the first.
pub fn numbered_runs(runs: &[(&str, u64)]) -> Vec<String> {
    runs.iter()
        .flat_map(|(prefix, n)| numbered(prefix, 1, *n))
        .collect()
}

/// `line-1` … `line-n`, what `moor-test-agent count n` prints.
pub fn lines(n: u64) -> Vec<String> {
    numbered("line-", 1, n)
}

/// Texts of the `agent.output` entries on `stream` (`stdout`/`stderr`), in log order.
pub fn agent_texts(entries: &[Entry], stream: &str) -> Vec<String> {
    entries
        .iter()
        .filter(|e| e.kind == kinds::AGENT_OUTPUT)
        .filter(|e| e.payload.get("stream").and_then(Value::as_str) == Some(stream))
        .map(|e| {
            e.payload
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .trim_end_matches(['\n', '\r'])
                .to_owned()
        })
        .collect()
}

/// Entries of `kind`, in log order.
pub fn of_kind<'a>(entries: &'a [Entry], kind: &str) -> Vec<&'a Entry> {
    entries.iter().filter(|e| e.kind == kind).collect()
}

/// The first entry of `kind`; panics naming the kind and the entries when there is none.
pub fn first_of_kind<'a>(entries: &'a [Entry], kind: &str) -> &'a Entry {
    entries
        .iter()
        .find(|e| e.kind == kind)
        .unwrap_or_else(|| panic!("no {kind} among {entries:#?}"))
}

/// The `agent.*` kinds of `entries`, in log order, without the deltas that stream in between
/// and the intent records (which tests check on their own).
pub fn agent_kinds(entries: &[Entry]) -> Vec<&str> {
    entries
        .iter()
        .map(|e| e.kind.as_str())
        .filter(|k| {
            k.starts_with("agent.")
                && *k != kinds::AGENT_TEXT_DELTA
                && !k.starts_with("agent.tool.intent")
        })
        .collect()
}

/// `payload.input_seq` of a receipt.
pub fn input_seq(e: &Entry) -> Option<u64> {
    e.payload.get("input_seq").and_then(Value::as_u64)
}

/// A short census of a log: count per kind and the seq range, for failure messages.
pub fn summary(entries: &[Entry]) -> String {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for e in entries {
        *counts.entry(e.kind.as_str()).or_default() += 1;
    }
    let mut counts: Vec<_> = counts.into_iter().collect();
    counts.sort();
    format!(
        "seq {}..={} {:?}",
        entries.first().map_or(0, |e| e.seq.0),
        entries.last().map_or(0, |e| e.seq.0),
        counts
    )
}

/// Seqs are exactly 1..=len: no gap, no duplicate, ascending.
#[track_caller]
pub fn assert_contiguous(entries: &[Entry]) {
    for (i, e) in entries.iter().enumerate() {
        let want = i as u64 + 1;
        assert_eq!(
            e.seq.0,
            want,
            "log is not contiguous at index {i}: got seq {}, expected {want} (neighbours: {:?}); {}",
            e.seq.0,
            entries[i.saturating_sub(2)..(i + 2).min(entries.len())]
                .iter()
                .map(|e| (e.seq.0, &e.kind))
                .collect::<Vec<_>>(),
            summary(entries)
        );
    }
}

/// Compares `got` to `expected` and explains the first difference (missing, duplicated,
/// reordered lines) in the panic message.
#[track_caller]
pub fn assert_same_lines(what: &str, got: &[String], expected: &[String]) {
    if got == expected {
        return;
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for g in got {
        *seen.entry(g.as_str()).or_default() += 1;
    }
    let dups: Vec<_> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(l, n)| format!("{l}×{n}"))
        .take(10)
        .collect();
    let missing: Vec<_> = expected
        .iter()
        .filter(|l| !seen.contains_key(l.as_str()))
        .take(10)
        .collect();
    let first_diff = got
        .iter()
        .zip(expected)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(expected.len()));
    panic!(
        "{what}: got {} lines, expected {}; first difference at index {first_diff}: got {:?}, expected {:?}; \
         duplicated (first 10): {dups:?}; missing (first 10): {missing:?}",
        got.len(),
        expected.len(),
        got.get(first_diff.saturating_sub(2)..(first_diff + 3).min(got.len())),
        expected.get(first_diff.saturating_sub(2)..(first_diff + 3).min(expected.len())),
    );
}

/// The log's stdout `agent.output` texts are exactly `expected`: each once, in order.
#[track_caller]
pub fn assert_exact_agent_output(entries: &[Entry], expected: &[String]) {
    assert_same_lines(
        "agent stdout in the server log",
        &agent_texts(entries, "stdout"),
        expected,
    );
}

/// The log's `agent.output` texts on `stream` are exactly `expected`.
#[track_caller]
pub fn assert_exact_stream(entries: &[Entry], stream: &str, expected: &[String]) {
    assert_same_lines(
        &format!("agent {stream} in the server log"),
        &agent_texts(entries, stream),
        expected,
    );
}

/// The texts among `texts` that start with `prefix` form exactly `prefix1..prefixK` for some
/// K (a gap-free prefix of a count run, each once, in order). Returns K.
#[track_caller]
pub fn assert_counted_prefix(texts: &[String], prefix: &str) -> u64 {
    let mine: Vec<String> = texts
        .iter()
        .filter(|t| t.starts_with(prefix))
        .cloned()
        .collect();
    let k = mine.len() as u64;
    assert_same_lines(
        &format!("lines starting with {prefix:?}"),
        &mine,
        &numbered(prefix, 1, k),
    );
    k
}

/// The log of an ended session: contiguous, exact stdout, exactly one `session.ended`, and
/// nothing but `bridge.*` bookkeeping after it.
#[track_caller]
pub fn assert_complete_session(entries: &[Entry], expected_stdout: &[String]) {
    assert_contiguous(entries);
    assert_exact_agent_output(entries, expected_stdout);
    let ended: Vec<_> = of_kind(entries, kinds::SESSION_ENDED);
    assert_eq!(
        ended.len(),
        1,
        "exactly one session.ended; {}",
        summary(entries)
    );
    let after: Vec<_> = entries
        .iter()
        .filter(|e| e.seq > ended[0].seq && !e.kind.starts_with("bridge."))
        .map(|e| (e.seq.0, e.kind.as_str()))
        .collect();
    assert!(after.is_empty(), "entries after session.ended: {after:?}");
}
