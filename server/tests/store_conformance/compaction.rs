//! Stories of compaction: old raw terminal output and text deltas go, everything else stays;
//! the log's compaction mark moves with the deletions, so a page read after a cursor below it
//! says what is missing; the newest entries and everything past the state snapshot are never
//! touched; a log over its size cap loses its oldest compactable entries whatever their age; a
//! session's own policy is stored and its `keep_ended` deletes it.

use moor_protocol::{kinds, now_ms, ProducerId, Seq, SessionId};
use moor_server::store::retention::{Policy, KEEP_TAIL};
use moor_server::store::{read_page, Append, IdemKey, PageLimit, Range, Stores};
use serde_json::json;

use super::Db;

/// Entry `i` of the test logs: every tenth a kept `agent.output`, the rest alternately PTY
/// output and text deltas, `size` bytes of text each.
fn mixed(producer: ProducerId, i: u64, ts: i64, size: usize) -> Append {
    let text = "x".repeat(size);
    let (kind, payload) = match i % 10 {
        0 => (
            kinds::AGENT_OUTPUT,
            json!({"stream": "stdout", "text": text}),
        ),
        n if n % 2 == 1 => (kinds::AGENT_PTY_OUTPUT, json!({"data": text})),
        _ => (kinds::AGENT_TEXT_DELTA, json!({"text": text})),
    };
    Append {
        ts,
        kind: kind.into(),
        author: "bridge".into(),
        payload: payload.into(),
        key: IdemKey::Producer { producer, seq: i },
    }
}

/// A session with `n` mixed entries stamped `ts`, in batches of 1,000, and a state snapshot at
/// `snapshot`; the session and the producer of its entries.
async fn mixed_session(
    store: &Stores,
    name: &str,
    n: u64,
    ts: i64,
    size: usize,
    snapshot: u64,
) -> (SessionId, ProducerId) {
    let producer = ProducerId::new();
    let s = store.log.open_session(name, None).await.unwrap().id;
    let mut i = 1;
    while i <= n {
        let end = (i + 999).min(n);
        let batch = (i..=end).map(|j| mixed(producer, j, ts, size)).collect();
        store.log.append(s, batch).await.unwrap();
        i = end + 1;
    }
    store
        .log
        .save_snapshot(s, Seq(snapshot), "{}")
        .await
        .unwrap();
    (s, producer)
}

fn compactable(kind: &str) -> bool {
    kind == kinds::AGENT_PTY_OUTPUT || kind == kinds::AGENT_TEXT_DELTA
}

/// Runs compaction steps of `s` until one says it is finished; at most `max`.
async fn compact_all(
    store: &Stores,
    s: SessionId,
    policy: Policy,
    now: i64,
    budget: u32,
    max: usize,
) -> u64 {
    let mut deleted = 0;
    for _ in 0..max {
        let step = store
            .retention
            .compact_session(s, policy, now, budget)
            .await
            .unwrap()
            .expect("no other node holds the lock");
        deleted += step.entries_deleted;
        if step.finished {
            return deleted;
        }
    }
    panic!("compaction of {s} still had work after {max} steps");
}

async fn whole_log(store: &Stores, s: SessionId) -> Vec<moor_protocol::Entry> {
    store
        .log
        .read(s, Range::After(Seq::ZERO), 100_000)
        .await
        .unwrap()
}

const HOUR: i64 = 3_600_000;

pub async fn old_terminal_output_and_deltas_are_compacted_and_pages_say_what_is_missing(db: Db) {
    // arrange: 4,000 old entries, a snapshot at 3,500; 500 new entries after them; a session
    // with the same old log and no policy
    let store = db.open("node-a").await;
    let now = now_ms();
    let (s, first) = mixed_session(&store, "compacted", 4_000, now - 2 * HOUR, 10, 3_500).await;
    let producer = ProducerId::new();
    let fresh: Vec<Append> = (1..=500).map(|i| mixed(producer, i, now, 10)).collect();
    store.log.append(s, fresh).await.unwrap();
    let (other, _) = mixed_session(&store, "untouched", 2_000, now - 2 * HOUR, 10, 2_000).await;
    let before = whole_log(&store, s).await;
    let other_before = whole_log(&store, other).await;
    let policy = Policy {
        compact_after_ms: Some(HOUR),
        ..Policy::default()
    };

    // act: steps of at most 700 entries
    let deleted = compact_all(&store, s, policy, now, 700, 20).await;

    // assert: the mark is the snapshot (head - KEEP_TAIL = 3,500 too); exactly the old
    // compactable entries up to it are gone, nothing else
    let compaction = store.log.compaction(s).await.unwrap();
    assert_eq!(compaction.through, Seq(3_500));
    assert_eq!(4_500 - KEEP_TAIL, 3_500);
    let after = whole_log(&store, s).await;
    let expected: Vec<_> = before
        .iter()
        .filter(|e| !(compactable(&e.kind) && e.seq <= Seq(3_500)))
        .cloned()
        .collect();
    assert_eq!(after, expected);
    assert_eq!(deleted, (before.len() - after.len()) as u64);
    assert_eq!(compaction.entries, deleted);
    let removed_bytes: u64 = before
        .iter()
        .filter(|e| !after.contains(e))
        .map(|e| e.payload.to_string().len() as u64)
        .sum();
    assert_eq!(compaction.bytes, removed_bytes);
    assert_eq!(
        whole_log(&store, other).await,
        other_before,
        "another session is untouched"
    );

    // ... a page after a cursor below the mark says what is missing; at or past it, nothing
    let limit = PageLimit {
        count: 100,
        bytes: 1 << 20,
    };
    let page = read_page(&*store.log, s, Range::After(Seq(10)), limit)
        .await
        .unwrap();
    let missing = page.compacted.expect("a page below the mark says so");
    assert_eq!((missing.after, missing.through), (Seq(10), Seq(3_500)));
    assert_eq!(
        missing.kinds,
        [kinds::AGENT_PTY_OUTPUT, kinds::AGENT_TEXT_DELTA]
    );
    assert!(
        page.entries.iter().all(|e| e.kind == kinds::AGENT_OUTPUT),
        "{:?}",
        page.entries
    );
    let page = read_page(&*store.log, s, Range::After(Seq(3_500)), limit)
        .await
        .unwrap();
    assert_eq!(page.compacted, None);
    assert_eq!(page.entries.first().map(|e| e.seq), Some(Seq(3_501)));

    // ... a bridge replaying a compacted entry (stored once, below its mark) is answered
    // "duplicate", not an error, and nothing is written
    let replayed = mixed(first, 1, now - 2 * HOUR, 10);
    assert_eq!(replayed.kind, kinds::AGENT_PTY_OUTPUT);
    let answer = store.log.append(s, vec![replayed]).await.unwrap();
    assert!(
        matches!(answer[..], [moor_server::store::Appended::Duplicate(_)]),
        "{answer:?}"
    );
    assert_eq!(whole_log(&store, s).await, after);

    // ... and a second run finds nothing more to do
    assert_eq!(compact_all(&store, s, policy, now, 700, 2).await, 0);
}

pub async fn a_log_over_its_cap_loses_its_oldest_compactable_entries_whatever_their_age(db: Db) {
    // arrange: 3,000 new entries of 1,000 bytes (about 3 MB), a snapshot at the head; a cap of
    // 2 MB and no age bound
    let store = db.open("node-a").await;
    let now = now_ms();
    let (s, _) = mixed_session(&store, "capped", 3_000, now, 1_000, 3_000).await;
    let before = whole_log(&store, s).await;
    let stored = |log: &[moor_protocol::Entry]| -> u64 {
        log.iter().map(|e| e.payload.to_string().len() as u64).sum()
    };
    let cap = 2_000_000;
    let policy = Policy {
        max_log_bytes: Some(cap),
        ..Policy::default()
    };

    // act: small steps, so counting the log takes several
    compact_all(&store, s, policy, now, 400, 40).await;

    // assert: under the cap (within one entry), by deleting a prefix of the compactable
    // entries: the oldest first
    let after = whole_log(&store, s).await;
    assert!(
        stored(&after) <= cap,
        "{} bytes left, cap {cap}",
        stored(&after)
    );
    assert!(
        stored(&after) + 1_100 > cap,
        "compacted more than the cap asks: {}",
        stored(&after)
    );
    let through = store.log.compaction(s).await.unwrap().through;
    let expected: Vec<_> = before
        .iter()
        .filter(|e| !(compactable(&e.kind) && e.seq <= through))
        .cloned()
        .collect();
    assert_eq!(after, expected);
}

pub async fn compaction_never_passes_the_snapshot_nor_the_newest_entries(db: Db) {
    // arrange: old entries; one session with its snapshot at 300, one with 1,500 entries and
    // its snapshot at the head, one with no snapshot
    let store = db.open("node-a").await;
    let now = now_ms();
    let (early, _) = mixed_session(&store, "early-snapshot", 3_000, now - 2 * HOUR, 10, 300).await;
    let (short, _) = mixed_session(&store, "short", 1_500, now - 2 * HOUR, 10, 1_500).await;
    let none = store
        .log
        .open_session("no-snapshot", None)
        .await
        .unwrap()
        .id;
    let producer = ProducerId::new();
    let batch = (1..=2_000)
        .map(|i| mixed(producer, i, now - 2 * HOUR, 10))
        .collect();
    store.log.append(none, batch).await.unwrap();
    let policy = Policy {
        compact_after_ms: Some(HOUR),
        max_log_bytes: Some(1),
        ..Policy::default()
    };

    // act
    for s in [early, short, none] {
        compact_all(&store, s, policy, now, 10_000, 3).await;
    }

    // assert
    let log = &store.log;
    let through = |s| async move { log.compaction(s).await.unwrap().through };
    assert_eq!(through(early).await, Seq(300));
    assert_eq!(through(short).await, Seq(1_500 - KEEP_TAIL));
    assert_eq!(through(none).await, Seq::ZERO);
    let kept = whole_log(&store, short).await;
    assert!(kept.iter().filter(|e| e.seq > Seq(500)).count() == KEEP_TAIL as usize);
}

pub async fn a_sessions_own_policy_is_stored_and_candidates_follow_it(db: Db) {
    // arrange: two sessions with long enough logs, no server policy
    let store = db.open("node-a").await;
    let now = now_ms();
    let (own, _) = mixed_session(&store, "own-policy", 1_200, now - 2 * HOUR, 10, 1_200).await;
    let (plain, _) = mixed_session(&store, "no-policy", 1_200, now - 2 * HOUR, 10, 1_200).await;
    let policy = Policy {
        keep_ended_ms: Some(1),
        compact_after_ms: Some(HOUR),
        max_log_bytes: Some(1 << 20),
    };

    // act
    store
        .retention
        .set_session_policy(own, policy)
        .await
        .unwrap();

    // assert: stored and read back; only that session is a candidate without a server
    // policy, both with one
    let (stored, compaction) = store.retention.session_policy(own).await.unwrap();
    assert_eq!(stored, policy);
    assert_eq!(compaction.through, Seq::ZERO);
    let ids = |c: Vec<moor_server::store::retention::Candidate>| {
        c.into_iter().map(|c| c.session).collect::<Vec<_>>()
    };
    assert_eq!(
        ids(store.retention.compact_candidates(false, 10).await.unwrap()),
        [own]
    );
    let both = ids(store.retention.compact_candidates(true, 10).await.unwrap());
    assert!(both.contains(&own) && both.contains(&plain), "{both:?}");
    // ... and its keep_ended deletes it once it has ended, with the reason its own
    store.log.end_session(own, now - 10).await.unwrap();
    store.log.end_session(plain, now - 10).await.unwrap();
    let sweep = store
        .retention
        .retention_batch(None, now, "server policy", 16, 10_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(sweep.retired, [own]);
    let tombstone = store.retention.retired_session(own).await.unwrap().unwrap();
    assert!(
        tombstone.reason.contains("its owner asked"),
        "{}",
        tombstone.reason
    );
}
