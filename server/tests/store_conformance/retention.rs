//! Stories of retention: ended sessions past the policy's age, and sessions their owners
//! delete, are retired at once and deleted in bounded batches; live sessions are never touched;
//! nodes never do one batch twice.

use std::collections::HashSet;

use moor_protocol::{ProducerId, Seq, SessionId};
use moor_server::store::retention::{RETIRE_LIVE, RETIRE_NOT_ENDED};
use moor_server::store::{CheckpointRow, Lease, Range, Role, StoreError, Stores, Sweep};

use super::stories::produced;
use super::Db;

/// A session named `name` with `n` output entries from one producer.
async fn session_with_log(store: &Stores, name: &str, n: u64) -> SessionId {
    let s = store.log.open_session(name, None).await.unwrap().id;
    let producer = ProducerId::new();
    let batch = (1..=n).map(|i| produced(producer, i, &format!("{name} {i}")));
    store.log.append(s, batch.collect()).await.unwrap();
    s
}

fn checkpoint(session: SessionId, id: &str, blobs: &[&str]) -> CheckpointRow {
    CheckpointRow {
        id: id.into(),
        session,
        created_at: 1,
        summary: "{}".into(),
        manifest: format!("{{\"id\":\"{id}\"}}"),
        blobs: blobs.iter().map(|b| (*b).to_owned()).collect(),
    }
}

fn lease(session: SessionId, expires_at: i64) -> Lease {
    Lease {
        session,
        node: "node-a".into(),
        connection: 1,
        connected_seq: Seq(1),
        expires_at,
    }
}

async fn all_entries(store: &Stores, s: SessionId) -> usize {
    store
        .log
        .read(s, Range::After(Seq(0)), 10_000)
        .await
        .unwrap()
        .len()
}

/// Runs batches until one does nothing; at most `max` of them.
async fn drain(store: &Stores, before: Option<i64>, now: i64, max: usize) -> Vec<Sweep> {
    let mut sweeps = Vec::new();
    for _ in 0..max {
        let sweep = store
            .retention
            .retention_batch(before, now, "policy", 16, 10)
            .await
            .unwrap()
            .expect("no other node holds the batch");
        let idle = sweep == Sweep::default();
        sweeps.push(sweep);
        if idle {
            return sweeps;
        }
    }
    panic!("retention still had work after {max} batches: {sweeps:?}");
}

pub async fn ended_sessions_past_retention_are_deleted_in_bounded_batches_live_ones_kept(db: Db) {
    // arrange: an old ended session with a log, a member, a snapshot and checkpoints (one blob
    // of its own, one shared with a kept session); a recently ended one; an old one still live;
    // an old ended one whose bridge still holds a lease
    let store = db.open("node-a").await;
    let old = session_with_log(&store, "old", 25).await;
    let recent = session_with_log(&store, "recent", 3).await;
    let live = session_with_log(&store, "live", 3).await;
    let leased = session_with_log(&store, "leased", 3).await;
    store.log.end_session(old, 1_000).await.unwrap();
    store.log.end_session(leased, 1_000).await.unwrap();
    store.log.end_session(recent, 9_000).await.unwrap();
    assert!(store
        .leases
        .hold_lease(&lease(leased, 60_000))
        .await
        .unwrap());
    store
        .access
        .set_member(old, "ann", Role::Owner)
        .await
        .unwrap();
    store.log.save_snapshot(old, Seq(25), "{}").await.unwrap();
    let cp = &store.checkpoints;
    cp.save_checkpoint(&checkpoint(old, "00000000000000c1", &["own", "shared"]))
        .await
        .unwrap();
    cp.save_checkpoint(&checkpoint(recent, "00000000000000c2", &["shared"]))
        .await
        .unwrap();
    cp.record_blob_upload("own", "ann", 10, 1).await.unwrap();

    // act: one batch, ended before 5 s, at most 10 entries
    let first = store
        .retention
        .retention_batch(Some(5_000), 6_000, "kept 5 s", 16, 10)
        .await
        .unwrap()
        .unwrap();

    // assert: only the old session is retired, and at once invisible
    assert_eq!(first.retired, [old]);
    assert_eq!(
        first.entries_deleted, 10,
        "a batch deletes at most its bound"
    );
    assert!(first.finished.is_empty());
    assert!(
        first.orphan_blobs.is_empty(),
        "a blob is collected only after its grace"
    );
    let r = &store.retention;
    assert!(
        r.collect_blobs(6_000, 6_000, 10).await.unwrap().is_empty(),
        "still in grace"
    );
    assert_eq!(
        r.collect_blobs(6_001, 6_001, 10).await.unwrap(),
        ["own"],
        "the shared blob is still named"
    );
    assert!(matches!(
        store.log.find_session("old").await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.log.find_session(&old.to_string()).await,
        Err(StoreError::NotFound)
    ));
    let listed: Vec<SessionId> = store
        .log
        .list_sessions(None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|(r, _)| r.id)
        .collect();
    assert!(!listed.contains(&old), "{listed:?}");
    assert_eq!(store.access.member_role(old, "ann").await.unwrap(), None);
    assert_eq!(store.log.latest_snapshot(old).await.unwrap(), None);
    assert!(cp.list_checkpoints(old).await.unwrap().is_empty());
    assert_eq!(cp.blob_sessions("shared").await.unwrap(), [recent]);
    assert_eq!(cp.uploaded_blob_bytes("ann").await.unwrap(), 0);
    let tomb = store.retention.retired_session(old).await.unwrap().unwrap();
    assert_eq!(
        (tomb.name.as_str(), tomb.ended_at, tomb.retired_at),
        ("old", Some(1_000), 6_000)
    );
    assert_eq!((tomb.reason.as_str(), tomb.done_at), ("kept 5 s", None));

    // act: the following batches finish it
    let rest = drain(&store, Some(5_000), 7_000, 6).await;

    // assert: the rest of its log went 10 at a time, then its row; the others are whole
    let deleted: Vec<u64> = rest.iter().map(|s| s.entries_deleted).collect();
    assert_eq!(deleted, [10, 5, 0]);
    assert_eq!(rest[1].finished, [old]);
    assert_eq!(all_entries(&store, old).await, 0);
    assert_eq!(
        store
            .retention
            .retired_session(old)
            .await
            .unwrap()
            .unwrap()
            .done_at,
        Some(7_000)
    );
    for (s, n) in [(recent, 3), (live, 3), (leased, 3)] {
        assert_eq!(all_entries(&store, s).await, n, "{s} is kept whole");
        store.log.find_session(&s.to_string()).await.unwrap();
    }
    // ... and the name is free for a new session
    let again = store.log.open_session("old", None).await.unwrap();
    assert_ne!(again.id, old);
    assert_eq!(again.head_seq, Seq(0));
}

pub async fn an_orphaned_blob_named_or_uploaded_again_within_its_grace_is_kept(db: Db) {
    // arrange: three ended sessions, each the only one naming its blob; ann uploaded all three
    let store = db.open("node-a").await;
    let cp = &store.checkpoints;
    let mut sessions = Vec::new();
    for (name, blob) in [("a", "blob-a"), ("b", "blob-b"), ("c", "blob-c")] {
        let s = session_with_log(&store, name, 1).await;
        cp.save_checkpoint(&checkpoint(s, "00000000000000d1", &[blob]))
            .await
            .unwrap();
        cp.record_blob_upload(blob, "ann", 10, 1).await.unwrap();
        store.log.end_session(s, 2).await.unwrap();
        sessions.push(s);
    }
    let r = &store.retention;
    for s in &sessions {
        r.retire_session(*s, 1_000, "by ann").await.unwrap();
    }

    // act: within the grace, a new session's checkpoint names blob-a, bob uploads blob-b
    let kept = session_with_log(&store, "kept", 1).await;
    cp.save_checkpoint(&checkpoint(kept, "00000000000000d2", &["blob-a"]))
        .await
        .unwrap();
    cp.record_blob_upload("blob-b", "bob", 10, 1_500)
        .await
        .unwrap();
    let collected = r.collect_blobs(2_000, 2_000, 10).await.unwrap();

    // assert: only the blob nobody wants is collected; the uploaded one waits a new grace,
    // the named one is no orphan any more
    assert_eq!(collected, ["blob-c"]);
    assert!(r.collect_blobs(2_000, 2_000, 10).await.unwrap().is_empty());
    assert_eq!(r.collect_blobs(2_001, 2_001, 10).await.unwrap(), ["blob-b"]);
    assert!(r
        .collect_blobs(i64::MAX, i64::MAX, 10)
        .await
        .unwrap()
        .is_empty());
}

pub async fn an_owner_deletes_only_an_ended_session_without_a_live_bridge(db: Db) {
    // arrange
    let store = db.open("node-a").await;
    let running = session_with_log(&store, "running", 2).await;
    let leased = session_with_log(&store, "leased", 2).await;
    let done = session_with_log(&store, "done", 30).await;
    store.log.end_session(leased, 1_000).await.unwrap();
    store.log.end_session(done, 1_000).await.unwrap();
    assert!(store
        .leases
        .hold_lease(&lease(leased, 60_000))
        .await
        .unwrap());
    let r = &store.retention;

    // act + assert
    let not_ended = r.retire_session(running, 2_000, "by ann").await;
    assert!(
        matches!(not_ended, Err(StoreError::Conflict(m)) if m == RETIRE_NOT_ENDED),
        "{not_ended:?}"
    );
    let live = r.retire_session(leased, 2_000, "by ann").await;
    assert!(
        matches!(live, Err(StoreError::Conflict(m)) if m == RETIRE_LIVE),
        "{live:?}"
    );
    r.retire_session(done, 2_000, "by ann").await.unwrap();
    let twice = r.retire_session(done, 2_000, "by ann").await;
    assert!(matches!(twice, Err(StoreError::NotFound)), "{twice:?}");
    let unknown = r.retire_session(SessionId::new(), 2_000, "by ann").await;
    assert!(matches!(unknown, Err(StoreError::NotFound)), "{unknown:?}");
    // ... once the lease has expired the owner may delete it
    r.retire_session(leased, 70_000, "by ann").await.unwrap();

    // act: batches without an age policy finish what owners deleted, and nothing else
    let sweeps = drain(&store, None, 3_000, 8).await;

    // assert
    let finished: HashSet<SessionId> = sweeps.iter().flat_map(|s| s.finished.clone()).collect();
    assert_eq!(finished, HashSet::from([done, leased]));
    assert_eq!(sweeps.iter().map(|s| s.entries_deleted).sum::<u64>(), 32);
    assert_eq!(all_entries(&store, running).await, 2);
    assert_eq!(
        r.retired_session(done).await.unwrap().unwrap().reason,
        "by ann"
    );
    assert_eq!(r.retired_session(running).await.unwrap(), None);
}

pub async fn retention_batches_raced_from_two_nodes_do_each_batch_once(db: Db) {
    // arrange: twenty old ended sessions of 12 entries
    let a = db.open("node-a").await;
    let b = db.open("node-b").await;
    let mut old = HashSet::new();
    for i in 0..20 {
        let s = session_with_log(&a, &format!("old-{i}"), 12).await;
        a.log.end_session(s, 1_000).await.unwrap();
        old.insert(s);
    }

    // act: both nodes run batches at once until neither has work
    let mut retired = Vec::new();
    let mut finished = Vec::new();
    let mut deleted = 0;
    for _ in 0..200 {
        let (on_a, on_b) = tokio::join!(
            a.retention.retention_batch(Some(5_000), 6_000, "p", 4, 25),
            b.retention.retention_batch(Some(5_000), 6_000, "p", 4, 25),
        );
        let sweeps: Vec<Sweep> = [on_a.unwrap(), on_b.unwrap()]
            .into_iter()
            .flatten()
            .collect();
        assert!(!sweeps.is_empty(), "one of the nodes runs each batch");
        for s in &sweeps {
            assert!(s.entries_deleted <= 25, "{s:?}");
            retired.extend(s.retired.clone());
            finished.extend(s.finished.clone());
            deleted += s.entries_deleted;
        }
        if sweeps.iter().all(|s| *s == Sweep::default()) {
            break;
        }
    }

    // assert: each session retired once and finished once; every entry deleted once
    assert_eq!(retired.len(), 20, "{retired:?}");
    assert_eq!(retired.iter().copied().collect::<HashSet<_>>(), old);
    assert_eq!(finished.len(), 20, "{finished:?}");
    assert_eq!(finished.iter().copied().collect::<HashSet<_>>(), old);
    assert_eq!(deleted, 20 * 12);
}
