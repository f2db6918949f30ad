//! The stories every store must tell the same way.

use std::collections::HashSet;
use std::time::Duration;

use moor_protocol::{kinds, now_ms, ProducerId, Seq, SessionId};
use moor_server::store::{
    Append, Appended, CheckpointRow, IdemKey, Notice, NoticeFeed, Range, Store, StoreError,
};
use serde_json::json;

use super::Db;

/// Bound for waiting on a notice; only a failure guard.
const NOTICE_WAIT: Duration = Duration::from_secs(10);

fn output(text: &str, key: IdemKey) -> Append {
    Append {
        ts: now_ms(),
        kind: kinds::AGENT_OUTPUT.into(),
        author: kinds::AUTHOR_BRIDGE.into(),
        payload: json!({"stream": "stdout", "text": text}),
        key,
    }
}

fn produced(producer: ProducerId, seq: u64, text: &str) -> Append {
    output(text, IdemKey::Producer { producer, seq })
}

fn input(id: &str, text: &str) -> Append {
    Append {
        ts: now_ms(),
        kind: kinds::INPUT_TEXT.into(),
        author: "admin".into(),
        payload: json!({"text": text}),
        key: IdemKey::ClientMsg(id.into()),
    }
}

fn receipt(kind: &str, input: Seq) -> Append {
    Append {
        ts: now_ms(),
        kind: kind.into(),
        author: kinds::AUTHOR_SERVER.into(),
        payload: json!({"input_seq": input}),
        key: IdemKey::Receipt(input),
    }
}

fn stored_seq(o: &Appended) -> Seq {
    match o {
        Appended::Stored(e) => e.seq,
        other => panic!("expected a stored entry, got {other:?}"),
    }
}

/// The feed's next notice, failing the test if none comes in time.
async fn next(feed: &mut Box<dyn NoticeFeed>) -> Notice {
    tokio::time::timeout(NOTICE_WAIT, feed.next())
        .await
        .expect("a notice in time")
}

async fn all(store: &dyn Store, session: SessionId) -> Vec<moor_protocol::Entry> {
    store
        .read(session, Range::After(Seq::ZERO), 100_000)
        .await
        .unwrap()
}

pub async fn sessions_are_created_once_and_found_by_id_or_name(db: Db) {
    // arrange
    let store = db.open("a").await;
    let agent = moor_protocol::bridge::AgentInfo {
        command: vec!["claude".into()],
        adapter: "lines".into(),
        host: "h".into(),
        cwd: "/w".into(),
    };

    // act
    let first = store.open_session("alpha", None).await.unwrap();
    let again = store.open_session("alpha", Some(&agent)).await.unwrap();
    let by_id = store.find_session(&first.id.to_string()).await.unwrap();
    let other = store.open_session("beta", None).await.unwrap();
    store
        .append(other.id, vec![output("x", IdemKey::None)])
        .await
        .unwrap();

    // assert
    assert_eq!(
        first.id, again.id,
        "opening a name twice finds the same session"
    );
    assert_eq!(first.name, "alpha");
    assert_eq!(first.head_seq, Seq::ZERO);
    assert_eq!(again.agent.as_ref(), Some(&agent), "the agent is recorded");
    assert_eq!(by_id, again, "found by id as opened by name");
    assert_eq!(store.find_session("alpha").await.unwrap().id, first.id);
    assert!(matches!(
        store.find_session("nope").await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.find_session(&SessionId::new().to_string()).await,
        Err(StoreError::NotFound)
    ));
    let listed: Vec<String> = store
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(listed, ["beta", "alpha"], "newest activity first");
}

pub async fn appends_get_contiguous_seqs_and_read_back_in_both_directions(db: Db) {
    // arrange
    let store = db.open("a").await;
    let s = store.open_session("log", None).await.unwrap().id;

    // act
    let mut seqs = Vec::new();
    for batch in [1usize, 5, 300] {
        let appends = (0..batch)
            .map(|i| output(&format!("b{batch}-{i}"), IdemKey::None))
            .collect();
        seqs.extend(
            store
                .append(s, appends)
                .await
                .unwrap()
                .iter()
                .map(stored_seq),
        );
    }
    let empty = store.append(s, Vec::new()).await.unwrap();

    // assert
    assert!(empty.is_empty());
    assert_eq!(
        seqs,
        (1..=306).map(Seq).collect::<Vec<_>>(),
        "contiguous from 1"
    );
    let session = store.find_session("log").await.unwrap();
    assert_eq!(session.head_seq, Seq(306));
    assert!(session.last_ts.is_some());
    let after = store.read(s, Range::After(Seq(300)), 100).await.unwrap();
    assert_eq!(
        after.iter().map(|e| e.seq.0).collect::<Vec<_>>(),
        (301..=306).collect::<Vec<_>>()
    );
    assert_eq!(after[0].payload["text"], "b300-294", "payload round-trips");
    assert_eq!(after[0].kind, kinds::AGENT_OUTPUT);
    assert_eq!(after[0].author, kinds::AUTHOR_BRIDGE);
    let before = store.read(s, Range::Before(Seq(11)), 4).await.unwrap();
    assert_eq!(
        before.iter().map(|e| e.seq.0).collect::<Vec<_>>(),
        [7, 8, 9, 10],
        "newest of those before, ascending"
    );
    let newest = store
        .read(s, Range::Before(Seq(u64::MAX)), 1)
        .await
        .unwrap();
    assert_eq!(
        newest.iter().map(|e| e.seq.0).collect::<Vec<_>>(),
        [306],
        "a cursor beyond the head means the end"
    );
    assert!(store
        .read(s, Range::After(Seq(306)), 10)
        .await
        .unwrap()
        .is_empty());
}

pub async fn producer_replays_are_duplicates_mismatches_or_gaps(db: Db) {
    // arrange
    let store = db.open("a").await;
    let s = store.open_session("producer", None).await.unwrap().id;
    let p = ProducerId::new();
    let first = store
        .append(
            s,
            (1..=3).map(|i| produced(p, i, &format!("l{i}"))).collect(),
        )
        .await
        .unwrap();

    // act
    let replay = store
        .append(
            s,
            vec![
                produced(p, 2, "l2"),
                produced(p, 3, "changed"),
                produced(p, 4, "l4"),
            ],
        )
        .await
        .unwrap();
    let resent = store
        .append(s, vec![produced(p, 4, "l4"), produced(p, 5, "l5")])
        .await
        .unwrap();
    let gapped = store
        .append(
            s,
            vec![
                produced(p, 6, "l6"),
                produced(p, 8, "l8"),
                produced(p, 7, "l7"),
            ],
        )
        .await
        .unwrap();

    // assert
    assert_eq!(
        first.iter().map(stored_seq).collect::<Vec<_>>(),
        [Seq(1), Seq(2), Seq(3)]
    );
    assert_eq!(
        replay[0],
        Appended::Duplicate(Seq(2)),
        "same content: a duplicate at its seq"
    );
    assert_eq!(
        replay[1],
        Appended::Mismatch { producer_seq: 3 },
        "different content is refused"
    );
    assert_eq!(
        replay[2],
        Appended::Gap {
            expected: 4,
            got: 4
        },
        "nothing of the producer after a mismatch in the same batch"
    );
    assert_eq!(
        resent.iter().map(stored_seq).collect::<Vec<_>>(),
        [Seq(4), Seq(5)]
    );
    assert_eq!(stored_seq(&gapped[0]), Seq(6));
    assert_eq!(
        gapped[1],
        Appended::Gap {
            expected: 7,
            got: 8
        }
    );
    assert_eq!(
        gapped[2],
        Appended::Gap {
            expected: 7,
            got: 7
        },
        "nothing after a gap"
    );
    assert_eq!(store.producer_mark(s, p).await.unwrap(), 6);
    assert_eq!(store.producer_mark(s, ProducerId::new()).await.unwrap(), 0);
    let texts: Vec<String> = all(&*store, s)
        .await
        .iter()
        .map(|e| e.payload["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(texts, ["l1", "l2", "l3", "l4", "l5", "l6"]);
}

pub async fn checkpoints_are_stored_once_and_listed_newest_first(db: Db) {
    // arrange
    let store = db.open("a").await;
    let s = store.open_session("checkpoints", None).await.unwrap().id;
    let row = |id: &str, at: i64, manifest: &str| CheckpointRow {
        id: id.into(),
        session: s,
        created_at: at,
        summary: format!(r#"{{"id":"{id}"}}"#),
        manifest: manifest.into(),
    };

    // act
    let first = store.save_checkpoint(&row("c1", 10, "m1")).await.unwrap();
    let retried = store.save_checkpoint(&row("c1", 10, "m1")).await.unwrap();
    let other = store.save_checkpoint(&row("c1", 10, "changed")).await;
    store.save_checkpoint(&row("c2", 20, "m2")).await.unwrap();
    let orphan = CheckpointRow {
        session: SessionId::new(),
        ..row("c3", 30, "m3")
    };

    // assert
    assert!(first, "stored");
    assert!(!retried, "the same upload again is not stored twice");
    assert!(matches!(other, Err(StoreError::Conflict(_))), "{other:?}");
    assert!(matches!(
        store.save_checkpoint(&orphan).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(store.checkpoint("c1").await.unwrap(), row("c1", 10, "m1"));
    assert!(matches!(
        store.checkpoint("nope").await,
        Err(StoreError::NotFound)
    ));
    let listed = store.list_checkpoints(s).await.unwrap();
    assert_eq!(
        listed,
        [row("c2", 20, ""), row("c1", 10, "")],
        "newest first, without manifests"
    );
}

pub async fn state_snapshots_keep_the_newest(db: Db) {
    // arrange
    let store = db.open("a").await;
    let s = store.open_session("snap", None).await.unwrap().id;
    let none = store.latest_snapshot(s).await.unwrap();

    // act
    store
        .save_snapshot(s, Seq(10), r#"{"at":10}"#)
        .await
        .unwrap();
    store
        .save_snapshot(s, Seq(30), r#"{"at":30}"#)
        .await
        .unwrap();
    store
        .save_snapshot(s, Seq(20), r#"{"at":20}"#)
        .await
        .unwrap();

    // assert
    assert_eq!(none, None);
    assert_eq!(
        store.latest_snapshot(s).await.unwrap(),
        Some((Seq(30), r#"{"at":30}"#.to_owned())),
        "an older snapshot never replaces a newer one"
    );
    assert_eq!(store.latest_snapshot(SessionId::new()).await.unwrap(), None);
}

pub async fn client_msg_ids_and_receipts_are_stored_once(db: Db) {
    // arrange
    let store = db.open("a").await;
    let s = store.open_session("inputs", None).await.unwrap().id;

    // act
    let first = store
        .append(
            s,
            vec![input("m1", "hi"), input("m1", "hi"), input("m2", "yo")],
        )
        .await
        .unwrap();
    let retry = store.append(s, vec![input("m2", "yo")]).await.unwrap();
    let receipts = store
        .append(
            s,
            vec![
                receipt(kinds::INPUT_DELIVERED, Seq(1)),
                receipt(kinds::INPUT_DELIVERED, Seq(1)),
                receipt(kinds::INPUT_APPLIED, Seq(1)),
            ],
        )
        .await
        .unwrap();
    let late = store
        .append(s, vec![receipt(kinds::INPUT_APPLIED, Seq(1))])
        .await
        .unwrap();

    // assert
    assert_eq!(stored_seq(&first[0]), Seq(1));
    assert_eq!(
        first[1],
        Appended::Duplicate(Seq(1)),
        "a repeat within the batch"
    );
    assert_eq!(stored_seq(&first[2]), Seq(2));
    assert_eq!(
        retry[0],
        Appended::Duplicate(Seq(2)),
        "a retry in a later batch"
    );
    assert_eq!(stored_seq(&receipts[0]), Seq(3));
    assert_eq!(receipts[1], Appended::Duplicate(Seq(3)));
    assert_eq!(
        stored_seq(&receipts[2]),
        Seq(4),
        "another kind of receipt for the same input"
    );
    assert_eq!(late[0], Appended::Duplicate(Seq(4)));
    assert_eq!(store.find_session("inputs").await.unwrap().head_seq, Seq(4));
}

pub async fn inputs_and_their_settling_receipts_are_tracked(db: Db) {
    // arrange
    let store = db.open("a").await;
    let s = store.open_session("settle", None).await.unwrap().id;
    store
        .append(
            s,
            vec![
                input("a", "1"),                // 1
                output("noise", IdemKey::None), // 2
                input("b", "2"),                // 3
                input("c", "3"),                // 4
                input("d", "4"),                // 5
            ],
        )
        .await
        .unwrap();

    // act
    store
        .append(
            s,
            vec![
                receipt(kinds::INPUT_DELIVERED, Seq(1)),
                receipt(kinds::INPUT_APPLIED, Seq(1)),
                receipt(kinds::INPUT_FAILED, Seq(3)),
                receipt(kinds::INPUT_DELIVERED, Seq(4)),
            ],
        )
        .await
        .unwrap();

    // assert
    let inputs = store.inputs_after(s, Seq(1), 10).await.unwrap();
    assert_eq!(
        inputs.iter().map(|e| e.seq.0).collect::<Vec<_>>(),
        [3, 4, 5],
        "only inputs, after the cursor"
    );
    assert_eq!(
        store.inputs_after(s, Seq::ZERO, 2).await.unwrap().len(),
        2,
        "limit holds"
    );
    assert_eq!(
        store.unsettled_inputs(s, Seq(4)).await.unwrap(),
        [Seq(4)],
        "delivered is not settled"
    );
    assert_eq!(
        store.unsettled_inputs(s, Seq(100)).await.unwrap(),
        [Seq(4), Seq(5)]
    );
}

pub async fn ended_and_unknown_sessions_refuse_appends(db: Db) {
    // arrange
    let store = db.open("a").await;
    let s = store.open_session("ending", None).await.unwrap().id;
    store
        .append(s, vec![output("last words", IdemKey::None)])
        .await
        .unwrap();

    // act
    store.end_session(s, 1234).await.unwrap();
    store.end_session(s, 9999).await.unwrap();

    // assert
    assert_eq!(
        store.find_session("ending").await.unwrap().ended_at,
        Some(1234),
        "the first end counts"
    );
    assert!(matches!(
        store.append(s, vec![output("more", IdemKey::None)]).await,
        Err(StoreError::SessionEnded)
    ));
    assert!(matches!(
        store
            .append(SessionId::new(), vec![output("x", IdemKey::None)])
            .await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(all(&*store, s).await.len(), 1);
}

pub async fn appenders_on_two_nodes_keep_seqs_contiguous_and_keys_unique(db: Db) {
    // arrange: two handles on one database, as two nodes would have
    let a = db.open("node-a").await;
    let b = db.open("node-b").await;
    let s = a.open_session("race", None).await.unwrap().id;
    let p = ProducerId::new();
    const ROUNDS: u64 = 40;

    // act: a producer on A, inputs raced from both, output from both
    let producer = {
        let a = a.clone();
        async move {
            for i in 0..ROUNDS {
                let batch = (1..=5)
                    .map(|j| produced(p, i * 5 + j, &format!("p{}", i * 5 + j)))
                    .collect();
                for o in a.append(s, batch).await.unwrap() {
                    assert!(matches!(o, Appended::Stored(_)), "{o:?}");
                }
            }
        }
    };
    let inputs = |store: std::sync::Arc<dyn Store>, node: &'static str| async move {
        let mut stored = 0;
        for i in 0..ROUNDS {
            let batch = vec![
                input(&format!("shared-{i}"), "x"),
                output(node, IdemKey::None),
            ];
            let out = store.append(s, batch).await.unwrap();
            stored += matches!(out[0], Appended::Stored(_)) as u32;
        }
        stored
    };
    let ((), on_a, on_b) = tokio::join!(producer, inputs(a.clone(), "a"), inputs(b.clone(), "b"));

    // assert
    let entries = all(&*b, s).await;
    let seqs: Vec<u64> = entries.iter().map(|e| e.seq.0).collect();
    assert_eq!(
        seqs,
        (1..=entries.len() as u64).collect::<Vec<_>>(),
        "contiguous, no duplicates"
    );
    assert_eq!(entries.len() as u64, ROUNDS * 5 + ROUNDS + 2 * ROUNDS);
    assert_eq!(
        on_a + on_b,
        ROUNDS as u32,
        "each shared client_msg_id stored by exactly one node"
    );
    let inputs: HashSet<&str> = entries
        .iter()
        .filter(|e| e.kind == kinds::INPUT_TEXT)
        .map(|e| e.author.as_str())
        .collect();
    assert_eq!(inputs.len(), 1);
    let produced: Vec<String> = entries
        .iter()
        .filter_map(|e| {
            e.payload["text"]
                .as_str()
                .filter(|t| t.starts_with('p'))
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(
        produced,
        (1..=ROUNDS * 5)
            .map(|i| format!("p{i}"))
            .collect::<Vec<_>>(),
        "producer order kept"
    );
    assert_eq!(
        a.find_session("race").await.unwrap().head_seq.0,
        entries.len() as u64
    );
    assert_eq!(b.producer_mark(s, p).await.unwrap(), ROUNDS * 5);
}

pub async fn other_nodes_hear_of_appends_and_bridge_claims(db: Db) {
    let a = db.open("node-a").await;
    let b = db.open("node-b").await;
    let (Some(ca), Some(cb)) = (a.cluster(), b.cluster()) else {
        // A single-node store: nothing to announce, and it says so.
        assert!(a.cluster().is_none() && b.cluster().is_none());
        assert!(db.url.starts_with("sqlite:"), "only SQLite is single-node");
        return;
    };
    // arrange
    assert_eq!(cb.node_id(), "node-b");
    let s = a.open_session("notices", None).await.unwrap().id;
    let mut feed = cb.feed();
    assert_eq!(
        next(&mut feed).await,
        Notice::Resync,
        "a feed starts with a resync"
    );

    // act
    b.append(s, vec![output("own", IdemKey::None)])
        .await
        .unwrap();
    a.append(
        s,
        vec![output("x", IdemKey::None), output("y", IdemKey::None)],
    )
    .await
    .unwrap();
    let e1 = ca.claim_bridge(s).await.unwrap();
    let e2 = ca.claim_bridge(s).await.unwrap();

    // assert: B does not hear its own append, hears A's range and A's claims in order
    assert_eq!(
        next(&mut feed).await,
        Notice::Entries {
            session: s,
            first: Seq(2),
            last: Seq(3)
        }
    );
    assert_eq!(
        next(&mut feed).await,
        Notice::BridgeClaimed {
            session: s,
            epoch: e1
        }
    );
    assert_eq!(
        next(&mut feed).await,
        Notice::BridgeClaimed {
            session: s,
            epoch: e2
        }
    );
    assert!(e2 > e1, "epochs grow");
    assert_eq!(
        cb.bridge_epochs(&[s, SessionId::new()]).await.unwrap(),
        [(s, e2)]
    );
}

/// Postgres only: terminating the listen connection yields a `Resync` once it listens again,
/// and notices flow after it.
pub async fn feed_resyncs_after_termination(db: Db, admin_url: String) {
    // arrange
    let a = db.open("node-a").await;
    let b = db.open("node-b").await;
    let s = a.open_session("terminate", None).await.unwrap().id;
    let mut feed = b.cluster().expect("postgres is a cluster store").feed();
    assert_eq!(next(&mut feed).await, Notice::Resync);
    let admin = sqlx::PgPool::connect(&admin_url).await.unwrap();

    // act
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'moord-listen node-b'",
    )
    .fetch_all(&admin)
    .await
    .unwrap();
    a.append(s, vec![output("while reconnecting", IdemKey::None)])
        .await
        .unwrap();

    // assert
    assert_eq!(killed, [true], "exactly one listen connection for node-b");
    let mut saw_resync = false;
    // Bounded: the resync and at most the one notice (if it was heard before the kill landed).
    for _ in 0..3 {
        match next(&mut feed).await {
            Notice::Resync => {
                saw_resync = true;
                break;
            }
            Notice::Entries { session, .. } => assert_eq!(session, s),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        saw_resync,
        "a lost listen connection is followed by a resync"
    );
    a.append(s, vec![output("after", IdemKey::None)])
        .await
        .unwrap();
    assert_eq!(
        next(&mut feed).await,
        Notice::Entries {
            session: s,
            first: Seq(2),
            last: Seq(2)
        }
    );
    admin.close().await;
}

/// Postgres only: `moord migrate-store` copies a SQLite log so that the Postgres store tells the
/// same story: the same sessions and entries, marks, idempotency keys and snapshot.
pub async fn migrate_store_copies_everything(pg: Db) {
    // arrange: a SQLite log with every kind of key
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite = Db::new(format!("sqlite:{}", dir.path().join("old.db").display()));
    let src = sqlite.open("old").await;
    let p = ProducerId::new();
    let a = src.open_session("first", None).await.unwrap().id;
    let b = src.open_session("second", None).await.unwrap().id;
    src.append(
        a,
        (1..=7000)
            .map(|i| produced(p, i, &format!("l{i}")))
            .collect(),
    )
    .await
    .unwrap();
    src.append(
        a,
        vec![input("m1", "hi"), receipt(kinds::INPUT_APPLIED, Seq(7001))],
    )
    .await
    .unwrap();
    src.append(b, vec![output("b", IdemKey::None)])
        .await
        .unwrap();
    src.end_session(b, 42).await.unwrap();
    src.save_snapshot(a, Seq(5000), r#"{"head":5000}"#)
        .await
        .unwrap();
    let checkpoint = CheckpointRow {
        id: "cp-1".into(),
        session: a,
        created_at: 7,
        summary: "{}".into(),
        manifest: r#"{"files":[]}"#.into(),
    };
    src.save_checkpoint(&checkpoint).await.unwrap();

    // act
    let copied = moor_server::store::migrate::copy(&sqlite.url, &pg.url)
        .await
        .unwrap();
    let again = moor_server::store::migrate::copy(&sqlite.url, &pg.url).await;

    // assert
    assert_eq!((copied.sessions, copied.entries), (2, 7003));
    assert!(
        again.is_err(),
        "a second copy into a non-empty database is refused"
    );
    let dst = pg.open("new").await;
    assert_eq!(
        dst.list_sessions().await.unwrap(),
        src.list_sessions().await.unwrap()
    );
    for s in [a, b] {
        assert_eq!(all(&*dst, s).await, all(&*src, s).await, "the same entries");
    }
    assert_eq!(dst.producer_mark(a, p).await.unwrap(), 7000);
    assert_eq!(dst.checkpoint("cp-1").await.unwrap(), checkpoint);
    assert_eq!(
        dst.latest_snapshot(a).await.unwrap(),
        src.latest_snapshot(a).await.unwrap()
    );
    let replay = dst
        .append(
            a,
            vec![
                produced(p, 7000, "l7000"),
                input("m1", "hi"),
                produced(p, 7001, "new"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        replay[0],
        Appended::Duplicate(Seq(7000)),
        "producer keys came along"
    );
    assert_eq!(
        replay[1],
        Appended::Duplicate(Seq(7001)),
        "client_msg_ids came along"
    );
    assert_eq!(
        stored_seq(&replay[2]),
        Seq(7003),
        "seqs continue after the copied head"
    );
    assert!(matches!(
        dst.append(b, vec![output("x", IdemKey::None)]).await,
        Err(StoreError::SessionEnded)
    ));
}
