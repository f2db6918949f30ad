//! The stories every store must tell the same way: one node (this file), checkpoints and blobs
//! scoped by session and uploader (`checkpoint_scope.rs`), pages and lists bounded
//! (`bounds.rs`), group appends (`group.rs`) and several nodes sharing a database (`nodes.rs`),
//! re-exported here.

use std::time::Duration;

use moor_protocol::api::ShareLinkInfo;
use moor_protocol::{kinds, now_ms, ProducerId, Seq, SessionId};
use moor_server::store::{
    AccessStore, Append, Appended, CheckpointRow, FamilyUser, IdemKey, LogStore, MemberRow, Notice,
    NoticeFeed, Range, RefreshOutcome, RefreshRow, Role, ShareLinkRow, StoreError, Stores,
};
use serde_json::json;

use super::Db;
pub use crate::bounds::*;
pub use crate::checkpoint_scope::*;
pub use crate::compaction::*;
pub use crate::group::*;
pub use crate::leases::*;
pub use crate::nodes::*;
pub use crate::notify::*;
pub use crate::offers::*;
pub use crate::retention::*;

/// Bound for waiting on a notice; only a failure guard.
pub(crate) const NOTICE_WAIT: Duration = Duration::from_secs(10);

pub(crate) fn output(text: &str, key: IdemKey) -> Append {
    Append {
        ts: now_ms(),
        kind: kinds::AGENT_OUTPUT.into(),
        author: kinds::AUTHOR_BRIDGE.into(),
        payload: json!({"stream": "stdout", "text": text}).into(),
        key,
    }
}

pub(crate) fn produced(producer: ProducerId, seq: u64, text: &str) -> Append {
    output(text, IdemKey::Producer { producer, seq })
}

pub(crate) fn input(id: &str, text: &str) -> Append {
    Append {
        ts: now_ms(),
        kind: kinds::INPUT_TEXT.into(),
        author: "admin".into(),
        payload: json!({"text": text}).into(),
        key: IdemKey::ClientMsg(id.into()),
    }
}

pub(crate) fn receipt(kind: &str, input: Seq) -> Append {
    Append {
        ts: now_ms(),
        kind: kind.into(),
        author: kinds::AUTHOR_SERVER.into(),
        payload: json!({"input_seq": input}).into(),
        key: IdemKey::Receipt(input),
    }
}

pub(crate) fn stored_seq(o: &Appended) -> Seq {
    match o {
        Appended::Stored(e) => e.seq,
        other => panic!("expected a stored entry, got {other:?}"),
    }
}

/// The feed's next notice, failing the test if none comes in time.
pub(crate) async fn next(feed: &mut Box<dyn NoticeFeed>) -> Notice {
    tokio::time::timeout(NOTICE_WAIT, feed.next())
        .await
        .expect("a notice in time")
}

pub(crate) async fn all(log: &dyn LogStore, session: SessionId) -> Vec<moor_protocol::Entry> {
    log.read(session, Range::After(Seq::ZERO), 100_000)
        .await
        .unwrap()
}

pub async fn sessions_are_created_once_and_found_by_id_or_name(db: Db) {
    // arrange
    let Stores { log, .. } = db.open("a").await;
    let agent = moor_protocol::bridge::AgentInfo {
        command: vec!["claude".into()],
        adapter: "lines".into(),
        host: "h".into(),
        cwd: "/w".into(),
    };

    // act
    let first = log.open_session("alpha", None).await.unwrap();
    let again = log.open_session("alpha", Some(&agent)).await.unwrap();
    let by_id = log.find_session(&first.id.to_string()).await.unwrap();
    let other = log.open_session("beta", None).await.unwrap();
    log.append(other.id, vec![output("x", IdemKey::None)])
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
    assert_eq!(log.find_session("alpha").await.unwrap().id, first.id);
    assert!(matches!(
        log.find_session("nope").await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        log.find_session(&SessionId::new().to_string()).await,
        Err(StoreError::NotFound)
    ));
    let listed: Vec<String> = log
        .list_sessions(None, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|(s, _)| s.name)
        .collect();
    assert_eq!(listed, ["beta", "alpha"], "newest activity first");
}

pub async fn appends_get_contiguous_seqs_and_read_back_in_both_directions(db: Db) {
    // arrange
    let Stores { log, .. } = db.open("a").await;
    let s = log.open_session("log", None).await.unwrap().id;

    // act
    let mut seqs = Vec::new();
    for batch in [1usize, 5, 300] {
        let appends = (0..batch)
            .map(|i| output(&format!("b{batch}-{i}"), IdemKey::None))
            .collect();
        seqs.extend(log.append(s, appends).await.unwrap().iter().map(stored_seq));
    }
    let empty = log.append(s, Vec::new()).await.unwrap();

    // assert
    assert!(empty.is_empty());
    assert_eq!(
        seqs,
        (1..=306).map(Seq).collect::<Vec<_>>(),
        "contiguous from 1"
    );
    let session = log.find_session("log").await.unwrap();
    assert_eq!(session.head_seq, Seq(306));
    assert!(session.last_ts.is_some());
    let after = log.read(s, Range::After(Seq(300)), 100).await.unwrap();
    assert_eq!(
        after.iter().map(|e| e.seq.0).collect::<Vec<_>>(),
        (301..=306).collect::<Vec<_>>()
    );
    assert_eq!(after[0].payload["text"], "b300-294", "payload round-trips");
    assert_eq!(after[0].kind, kinds::AGENT_OUTPUT);
    assert_eq!(after[0].author, kinds::AUTHOR_BRIDGE);
    let before = log.read(s, Range::Before(Seq(11)), 4).await.unwrap();
    assert_eq!(
        before.iter().map(|e| e.seq.0).collect::<Vec<_>>(),
        [7, 8, 9, 10],
        "newest of those before, ascending"
    );
    let newest = log.read(s, Range::Before(Seq(u64::MAX)), 1).await.unwrap();
    assert_eq!(
        newest.iter().map(|e| e.seq.0).collect::<Vec<_>>(),
        [306],
        "a cursor beyond the head means the end"
    );
    assert!(log
        .read(s, Range::After(Seq(306)), 10)
        .await
        .unwrap()
        .is_empty());
}

pub async fn entries_of_any_text_read_back_exactly_as_stored(db: Db) {
    // arrange: texts with the separators a page is read back with, escapes and wide characters
    let Stores { log, .. } = db.open("a").await;
    let s = log.open_session("texts", None).await.unwrap().id;
    let texts = [
        "1,2:3",
        "quote \" backslash \\ newline \n tab \t",
        "é ✓ 漢字 🚢",
        "",
        "{\"seq\":1,\"kind\":\"x\"}:,:,",
    ];
    let appends = texts
        .iter()
        .enumerate()
        .map(|(i, text)| Append {
            ts: -(i as i64),
            kind: kinds::AGENT_OUTPUT.into(),
            author: format!("user:{text}"),
            payload: json!({"text": text, "n": i}).into(),
            key: IdemKey::None,
        })
        .collect();
    log.append(s, appends).await.unwrap();

    // act
    let (after, _) = log.read_raw(s, Range::After(Seq(0)), 10).await.unwrap();
    let (before, _) = log.read_raw(s, Range::Before(Seq(5)), 3).await.unwrap();

    // assert
    assert_eq!(after.len(), texts.len());
    for (i, (entry, text)) in after.iter().zip(texts).enumerate() {
        assert_eq!(entry.seq, Seq(i as u64 + 1));
        assert_eq!(entry.ts, -(i as i64));
        assert_eq!(entry.author(), format!("user:{text}"));
        assert_eq!(entry.payload(), json!({"text": text, "n": i}).to_string());
        assert_eq!(entry.parse().unwrap().payload["text"], *text);
    }
    assert_eq!(before, after[1..4], "the newest before 5, ascending");
}

pub async fn producer_replays_are_duplicates_mismatches_or_gaps(db: Db) {
    // arrange
    let Stores { log, .. } = db.open("a").await;
    let s = log.open_session("producer", None).await.unwrap().id;
    let p = ProducerId::new();
    // A batch of `(producer seq, text)` lines from `p`.
    let batch = |lines: &[(u64, &str)]| -> Vec<Append> {
        lines
            .iter()
            .map(|&(seq, text)| produced(p, seq, text))
            .collect()
    };
    let first = log
        .append(
            s,
            (1..=3).map(|i| produced(p, i, &format!("l{i}"))).collect(),
        )
        .await
        .unwrap();

    // act
    let replay = log
        .append(s, batch(&[(2, "l2"), (3, "changed"), (4, "l4")]))
        .await
        .unwrap();
    let resent = log.append(s, batch(&[(4, "l4"), (5, "l5")])).await.unwrap();
    let gapped = log
        .append(s, batch(&[(6, "l6"), (8, "l8"), (7, "l7")]))
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
    assert_eq!(log.producer_mark(s, p).await.unwrap(), 6);
    assert_eq!(log.producer_mark(s, ProducerId::new()).await.unwrap(), 0);
    let texts: Vec<String> = all(&*log, s)
        .await
        .iter()
        .map(|e| e.payload["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(texts, ["l1", "l2", "l3", "l4", "l5", "l6"]);
}

pub async fn checkpoints_are_stored_once_and_listed_newest_first(db: Db) {
    // arrange
    let Stores {
        log, checkpoints, ..
    } = db.open("a").await;
    let s = log.open_session("checkpoints", None).await.unwrap().id;
    let row = |id: &str, at: i64, manifest: &str| CheckpointRow {
        id: id.into(),
        session: s,
        created_at: at,
        summary: format!(r#"{{"id":"{id}"}}"#),
        manifest: manifest.into(),
        blobs: vec![],
    };

    // act
    let first = checkpoints
        .save_checkpoint(&row("c1", 10, "m1"))
        .await
        .unwrap();
    let retried = checkpoints
        .save_checkpoint(&row("c1", 10, "m1"))
        .await
        .unwrap();
    let other = checkpoints.save_checkpoint(&row("c1", 10, "changed")).await;
    checkpoints
        .save_checkpoint(&row("c2", 20, "m2"))
        .await
        .unwrap();
    let orphan = CheckpointRow {
        session: SessionId::new(),
        ..row("c3", 30, "m3")
    };

    // assert
    assert!(first, "stored");
    assert!(!retried, "the same upload again is not stored twice");
    assert!(matches!(other, Err(StoreError::Conflict(_))), "{other:?}");
    assert!(matches!(
        checkpoints.save_checkpoint(&orphan).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        checkpoints.checkpoint(s, "c1").await.unwrap(),
        row("c1", 10, "m1")
    );
    assert!(matches!(
        checkpoints.checkpoint(s, "nope").await,
        Err(StoreError::NotFound)
    ));
    let listed = checkpoints.list_checkpoints(s).await.unwrap();
    assert_eq!(
        listed,
        [row("c2", 20, ""), row("c1", 10, "")],
        "newest first, without manifests"
    );
}

pub async fn checkpoints_record_the_blobs_they_name(db: Db) {
    // arrange
    let Stores {
        log, checkpoints, ..
    } = db.open("a").await;
    let s1 = log.open_session("blobs-1", None).await.unwrap().id;
    let s2 = log.open_session("blobs-2", None).await.unwrap().id;
    let row = |id: &str, session, blobs: &[&str]| CheckpointRow {
        id: id.into(),
        session,
        created_at: 1,
        summary: "{}".into(),
        manifest: format!("manifest of {id}"),
        blobs: blobs.iter().map(|b| b.to_string()).collect(),
    };

    // act
    checkpoints
        .save_checkpoint(&row("k1", s1, &["shared", "only-1"]))
        .await
        .unwrap();
    checkpoints
        .save_checkpoint(&row("k2", s2, &["shared"]))
        .await
        .unwrap();
    checkpoints
        .save_checkpoint(&row("k3", s1, &["shared"]))
        .await
        .unwrap();
    let retried = checkpoints
        .save_checkpoint(&row("k1", s1, &["shared", "only-1"]))
        .await
        .unwrap();

    // assert
    assert!(!retried);
    let mut shared = checkpoints.blob_sessions("shared").await.unwrap();
    shared.sort();
    let mut both = vec![s1, s2];
    both.sort();
    assert_eq!(shared, both, "each session once, however many checkpoints");
    assert_eq!(checkpoints.blob_sessions("only-1").await.unwrap(), [s1]);
    assert!(checkpoints
        .blob_sessions("unknown")
        .await
        .unwrap()
        .is_empty());
    assert!(
        checkpoints
            .checkpoint(s1, "k1")
            .await
            .unwrap()
            .blobs
            .is_empty(),
        "reads do not list blobs"
    );
}

pub async fn the_first_admin_is_created_once(db: Db) {
    // arrange
    let a = db.open("node-a").await;
    let b = db.open("node-b").await;
    a.access.create_user("ann", "hash", false, 1).await.unwrap();
    let before = a.access.has_admin().await.unwrap();
    let taken = a.access.create_first_admin("ann", "hash", 2).await;

    // act: two setups at once, from two nodes
    let (x, y) = tokio::join!(
        a.access.create_first_admin("root", "hash", 3),
        b.access.create_first_admin("boss", "hash", 3)
    );
    let later = a
        .access
        .create_first_admin("late", "hash", 4)
        .await
        .unwrap();
    a.access.create_user("ops", "hash", true, 5).await.unwrap();

    // assert
    assert!(!before, "an ordinary user is no administrator");
    assert!(matches!(taken, Err(StoreError::Conflict(_))), "{taken:?}");
    let (x, y) = (x.unwrap(), y.unwrap());
    assert!(x ^ y, "exactly one first administrator: {x} {y}");
    assert!(!later, "setup is over once an administrator exists");
    assert!(b.access.has_admin().await.unwrap());
    let first = if x { "root" } else { "boss" };
    assert!(a.access.user(first).await.unwrap().admin);
    assert!(a.access.user("ops").await.unwrap().admin);
    assert!(!a.access.user("ann").await.unwrap().admin);
    assert!(matches!(
        a.access.user("late").await,
        Err(StoreError::NotFound)
    ));
    let family = |user: &str| RefreshRow {
        token_hash: format!("h-{user}"),
        user: user.into(),
        created_at: 1,
        expires_at: i64::MAX,
    };
    a.access
        .create_token_family("fo", &family("ops"))
        .await
        .unwrap();
    a.access
        .create_token_family("fa", &family("ann"))
        .await
        .unwrap();
    assert_eq!(
        b.access.active_family("fo").await.unwrap(),
        Some(FamilyUser {
            name: "ops".into(),
            admin: true
        })
    );
    assert_eq!(
        b.access.active_family("fa").await.unwrap(),
        Some(FamilyUser {
            name: "ann".into(),
            admin: false
        })
    );
}

pub async fn state_snapshots_keep_the_newest(db: Db) {
    // arrange
    let Stores { log, .. } = db.open("a").await;
    let s = log.open_session("snap", None).await.unwrap().id;
    let none = log.latest_snapshot(s).await.unwrap();

    // act
    log.save_snapshot(s, Seq(10), r#"{"at":10}"#).await.unwrap();
    log.save_snapshot(s, Seq(30), r#"{"at":30}"#).await.unwrap();
    log.save_snapshot(s, Seq(20), r#"{"at":20}"#).await.unwrap();

    // assert
    assert_eq!(none, None);
    assert_eq!(
        log.latest_snapshot(s).await.unwrap(),
        Some((Seq(30), r#"{"at":30}"#.to_owned())),
        "an older snapshot never replaces a newer one"
    );
    assert_eq!(log.latest_snapshot(SessionId::new()).await.unwrap(), None);
}

pub async fn replays_among_other_writers_are_found_at_their_seqs(db: Db) {
    // arrange: two producers, inputs and the server's own entries interleaved, as in a session
    // whose bridge reconnected while people typed.
    let Stores { log, .. } = db.open("a").await;
    let s = log.open_session("interleaved", None).await.unwrap().id;
    let (p, q) = (ProducerId::new(), ProducerId::new());
    let mut stored = Vec::new();
    for i in 1..=6u64 {
        let batch = vec![
            produced(p, i, &format!("p{i}")),
            input(&format!("m{i}"), "typed"),
            output("moord's own", IdemKey::None),
            produced(q, i, &format!("q{i}")),
        ];
        stored.extend(log.append(s, batch).await.unwrap());
    }
    let seq_of = |text: &str| {
        stored
            .iter()
            .find_map(|a| match a {
                Appended::Stored(e) if e.parse().unwrap().payload["text"] == text => Some(e.seq),
                _ => None,
            })
            .unwrap()
    };

    // act: each producer replays from an old point, one of them with a changed entry.
    let p_replay = log
        .append(
            s,
            (2..=6).map(|i| produced(p, i, &format!("p{i}"))).collect(),
        )
        .await
        .unwrap();
    let q_replay = log
        .append(
            s,
            vec![
                produced(q, 1, "q1"),
                produced(q, 5, "q5"),
                produced(q, 6, "changed"),
            ],
        )
        .await
        .unwrap();

    // assert
    let want: Vec<Appended> = (2..=6)
        .map(|i| Appended::Duplicate(seq_of(&format!("p{i}"))))
        .collect();
    assert_eq!(p_replay, want, "each replay answers its own entry's seq");
    assert_eq!(
        q_replay[0],
        Appended::Duplicate(seq_of("q1")),
        "the oldest entry"
    );
    assert_eq!(q_replay[1], Appended::Duplicate(seq_of("q5")));
    assert_eq!(
        q_replay[2],
        Appended::Mismatch { producer_seq: 6 },
        "the newest entry changed"
    );
}

pub async fn client_msg_ids_and_receipts_are_stored_once(db: Db) {
    // arrange
    let Stores { log, .. } = db.open("a").await;
    let s = log.open_session("inputs", None).await.unwrap().id;

    // act
    let first = log
        .append(
            s,
            vec![input("m1", "hi"), input("m1", "hi"), input("m2", "yo")],
        )
        .await
        .unwrap();
    let retry = log.append(s, vec![input("m2", "yo")]).await.unwrap();
    let receipts = log
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
    let late = log
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
    assert_eq!(log.find_session("inputs").await.unwrap().head_seq, Seq(4));
}

pub async fn inputs_and_their_settling_receipts_are_tracked(db: Db) {
    // arrange
    let Stores { log, .. } = db.open("a").await;
    let s = log.open_session("settle", None).await.unwrap().id;
    log.append(
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
    log.append(
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
    let inputs = log.inputs_after(s, Seq(1), 10).await.unwrap();
    assert_eq!(
        inputs.iter().map(|e| e.seq.0).collect::<Vec<_>>(),
        [3, 4, 5],
        "only inputs, after the cursor"
    );
    assert_eq!(
        log.inputs_after(s, Seq::ZERO, 2).await.unwrap().len(),
        2,
        "limit holds"
    );
    assert_eq!(
        log.unsettled_inputs(s, Seq(4)).await.unwrap(),
        [Seq(4)],
        "delivered is not settled"
    );
    assert_eq!(
        log.unsettled_inputs(s, Seq(100)).await.unwrap(),
        [Seq(4), Seq(5)]
    );
}

pub async fn ended_and_unknown_sessions_refuse_appends(db: Db) {
    // arrange
    let Stores { log, .. } = db.open("a").await;
    let s = log.open_session("ending", None).await.unwrap().id;
    log.append(s, vec![output("last words", IdemKey::None)])
        .await
        .unwrap();

    // act
    let first = log.end_session(s, 1234).await.unwrap();
    let second = log.end_session(s, 9999).await.unwrap();
    let unknown = log.end_session(SessionId::new(), 1).await.unwrap();

    // assert
    assert!(first, "the first call ends the session");
    assert!(!second, "a second call says it had ended already");
    assert!(!unknown, "an unknown session is not ended");
    assert_eq!(
        log.find_session("ending").await.unwrap().ended_at,
        Some(1234),
        "the first end counts"
    );
    // A bridge's new connection is new work too: a handshake that read the session before it
    // ended must not record a connection after its `session.ended`.
    let connected = Append::server(moor_protocol::payload::BridgeConnected {
        connection: 7,
        producer: None,
        agent: None,
    });
    for new_work in [
        produced(ProducerId::new(), 1, "more"),
        input("late", "hi"),
        connected,
    ] {
        assert!(matches!(
            log.append(s, vec![output("bookkeeping", IdemKey::None), new_work])
                .await,
            Err(StoreError::SessionEnded)
        ));
    }
    let bookkeeping = log
        .append(
            s,
            vec![
                output("server", IdemKey::None),
                receipt(kinds::INPUT_FAILED, Seq(1)),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        bookkeeping.iter().map(stored_seq).collect::<Vec<_>>(),
        [Seq(2), Seq(3)],
        "the server's own entries are still written after the end"
    );
    assert!(matches!(
        log.append(SessionId::new(), vec![output("x", IdemKey::None)])
            .await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(all(&*log, s).await.len(), 3);
}

pub async fn accounts_refresh_tokens_and_roles_are_kept(db: Db) {
    // arrange
    let Stores { log, access, .. } = db.open("a").await;
    let token = |hash: &str, expires_at: i64| RefreshRow {
        token_hash: hash.into(),
        user: "ann".into(),
        created_at: 1,
        expires_at,
    };
    let s = log.open_session("owned", None).await.unwrap().id;

    // act and assert: accounts
    access
        .create_user("ann", "argon-hash", false, 1)
        .await
        .unwrap();
    assert!(matches!(
        access.create_user("ann", "other", false, 2).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        access.user("ann").await.unwrap().password_hash,
        "argon-hash"
    );
    assert!(matches!(
        access.user("bob").await,
        Err(StoreError::NotFound)
    ));

    // refresh tokens: rotation, reuse, expiry
    access
        .create_token_family("f1", &token("h1", 1000))
        .await
        .unwrap();
    assert_eq!(
        access.active_family("f1").await.unwrap(),
        Some(FamilyUser {
            name: "ann".into(),
            admin: false
        })
    );
    let rotated = access
        .rotate_refresh("h1", &token("h2", 1000), 10, 0)
        .await
        .unwrap();
    let (family, user) = ("f1".to_owned(), "ann".to_owned());
    assert_eq!(
        rotated,
        RefreshOutcome::Rotated {
            family: family.clone(),
            user: user.clone()
        }
    );
    let reused = access
        .rotate_refresh("h1", &token("h9", 1000), 11, 0)
        .await
        .unwrap();
    assert_eq!(
        reused,
        RefreshOutcome::Reused { family, user },
        "a spent token revokes its family"
    );
    assert_eq!(access.active_family("f1").await.unwrap(), None);
    assert_eq!(
        access
            .rotate_refresh("nope", &token("h8", 1000), 12, 0)
            .await
            .unwrap(),
        RefreshOutcome::Invalid
    );
    access
        .create_token_family("f2", &token("h3", 5))
        .await
        .unwrap();
    assert_eq!(
        access
            .rotate_refresh("h3", &token("h4", 1000), 10, 0)
            .await
            .unwrap(),
        RefreshOutcome::Invalid,
        "expired"
    );
    assert_eq!(access.revoke_token_family("f2", 20).await.unwrap(), "ann");
    access
        .create_token_family("f3", &token("h5", 1000))
        .await
        .unwrap();
    access.revoke_user("ann", 30).await.unwrap();
    assert!(
        access.active_family("f3").await.unwrap().is_none(),
        "a revoked user's families end"
    );
    assert_eq!(access.user("ann").await.unwrap().revoked_at, Some(30));
    assert!(matches!(
        access.revoke_user("bob", 30).await,
        Err(StoreError::NotFound)
    ));

    // session roles
    assert!(
        access.claim_session(s, "ann").await.unwrap(),
        "the first claim owns it"
    );
    assert!(
        !access.claim_session(s, "bob").await.unwrap(),
        "a claimed session stays claimed"
    );
    access.set_member(s, "bob", Role::Viewer).await.unwrap();
    access.set_member(s, "bob", Role::Controller).await.unwrap();
    assert_eq!(
        access.member_role(s, "ann").await.unwrap(),
        Some(Role::Owner)
    );
    assert_eq!(
        access.memberships("bob").await.unwrap(),
        [(s, Role::Controller)]
    );
    access.remove_member(s, "bob").await.unwrap();
    assert_eq!(access.member_role(s, "bob").await.unwrap(), None);
}

/// A share link on `session` granting `role`, `uses` times, until `expires_at`.
pub(crate) fn share_link(id: &str, session: SessionId, role: Role, uses: i64) -> ShareLinkRow {
    ShareLinkRow {
        info: ShareLinkInfo {
            id: id.into(),
            role,
            created_by: "ann".into(),
            created_at: 1,
            expires_at: 1000,
            uses_left: uses,
            max_uses: Some(uses),
            revoked_at: None,
        },
        token_hash: format!("hash-{id}"),
        session,
    }
}

/// Redeems the link with `token_hash` for `principal` at `at`: the session and role it grants.
async fn redeem(
    access: &dyn AccessStore,
    token_hash: &str,
    principal: &str,
    at: i64,
) -> Option<(SessionId, Role)> {
    access
        .redeem_share_link(token_hash, principal, at)
        .await
        .unwrap()
}

pub async fn share_links_grant_roles_until_spent_expired_or_revoked(db: Db) {
    // arrange
    let Stores { log, access, .. } = db.open("a").await;
    let s = log.open_session("shared", None).await.unwrap().id;
    access.set_member(s, "ann", Role::Owner).await.unwrap();
    access
        .create_share_link(&share_link("l1", s, Role::Viewer, 2))
        .await
        .unwrap();
    access
        .create_share_link(&share_link("l2", s, Role::Controller, 5))
        .await
        .unwrap();

    // act
    let bob = redeem(&*access, "hash-l1", "bob", 10).await;
    let ann = redeem(&*access, "hash-l1", "ann", 10).await;
    let spent = redeem(&*access, "hash-l1", "cat", 10).await;
    let expired = redeem(&*access, "hash-l2", "dan", 2000).await;
    let unknown = redeem(&*access, "nope", "dan", 10).await;
    redeem(&*access, "hash-l2", "eve", 10).await;
    let (session, removed) = access.revoke_share_link("l2", 20).await.unwrap();
    let revoked = redeem(&*access, "hash-l2", "fay", 30).await;

    // assert
    assert_eq!(bob, Some((s, Role::Viewer)));
    assert_eq!(
        ann,
        Some((s, Role::Owner)),
        "a link never changes an existing role"
    );
    assert_eq!((spent, expired, unknown, revoked), (None, None, None, None));
    assert_eq!(
        (session, removed),
        (s, vec!["eve".to_owned()]),
        "revoking removes its members"
    );
    assert_eq!(access.member_role(s, "eve").await.unwrap(), None);
    assert_eq!(
        access.member_role(s, "bob").await.unwrap(),
        Some(Role::Viewer)
    );
    assert_eq!(access.share_link_session("l1").await.unwrap(), s);
    assert!(matches!(
        access.share_link_session("nope").await,
        Err(StoreError::NotFound)
    ));
}

pub async fn a_share_link_preview_says_what_redeeming_would_without_spending_a_use(db: Db) {
    // arrange: a one-use controller link made by ann, the owner; one by bob, who owns nothing
    let Stores { log, access, .. } = db.open("a").await;
    let s = log.open_session("previewed", None).await.unwrap().id;
    access.set_member(s, "ann", Role::Owner).await.unwrap();
    access
        .create_share_link(&share_link("p1", s, Role::Controller, 1))
        .await
        .unwrap();
    let mut orphan = share_link("p2", s, Role::Viewer, 1);
    orphan.info.created_by = "bob".into();
    access.create_share_link(&orphan).await.unwrap();

    // act
    let before = access.share_link_preview("hash-p1", 10).await.unwrap();
    let again = access.share_link_preview("hash-p1", 10).await.unwrap();
    let redeemed = redeem(&*access, "hash-p1", "cat", 10).await;
    let spent = access.share_link_preview("hash-p1", 10).await.unwrap();
    let expired = access.share_link_preview("hash-p2", 2000).await.unwrap();
    let makers_gone = access.share_link_preview("hash-p2", 10).await.unwrap();
    let unknown = access.share_link_preview("nope", 10).await.unwrap();

    // assert
    let grants = Some((s, Role::Controller, "ann".to_owned()));
    assert_eq!((before.clone(), again), (grants.clone(), grants));
    assert_eq!(
        redeemed,
        Some((s, Role::Controller)),
        "previews spent no use"
    );
    assert_eq!(
        (spent, expired, makers_gone, unknown),
        (None, None, None, None)
    );
}

pub async fn a_session_keeps_an_owner_and_links_die_with_their_creators_role(db: Db) {
    // arrange: ann owns s with bob; each made an owner link; one entry in s's log
    let Stores { log, access, .. } = db.open("a").await;
    let s = log.open_session("owned", None).await.unwrap().id;
    access.set_member(s, "ann", Role::Owner).await.unwrap();
    access.set_member(s, "bob", Role::Owner).await.unwrap();
    for (id, by) in [("by-ann", "ann"), ("by-bob", "bob")] {
        let mut link = share_link(id, s, Role::Owner, 5);
        link.info.created_by = by.into();
        access.create_share_link(&link).await.unwrap();
    }
    let payload = json!({"stream": "stdout", "text": "héllo"});
    let stored = serde_json::to_string(&payload).unwrap().len() as u64;
    log.append(
        s,
        vec![Append {
            ts: 1,
            kind: kinds::AGENT_OUTPUT.into(),
            author: "bridge".into(),
            payload: payload.into(),
            key: IdemKey::None,
        }],
    )
    .await
    .unwrap();

    // act: bob leaves; ann tries to leave, then to become a viewer
    access.remove_member(s, "bob").await.unwrap();
    let leave = access.remove_member(s, "ann").await;
    let demote = access.set_member(s, "ann", Role::Viewer).await;
    let by_bob = redeem(&*access, "hash-by-bob", "cat", 10).await;
    let by_ann = redeem(&*access, "hash-by-ann", "dan", 10).await;
    let revoke = access.revoke_share_link("by-ann", 20).await;

    // assert: the last owner stays; the departed owner's link grants nothing, the owner's
    // does; a viewer joined through it may be removed with it; the usage figures
    assert!(matches!(leave, Err(StoreError::Conflict(_))), "{leave:?}");
    assert!(matches!(demote, Err(StoreError::Conflict(_))), "{demote:?}");
    assert_eq!(
        access.member_role(s, "ann").await.unwrap(),
        Some(Role::Owner)
    );
    assert_eq!(by_bob, None);
    assert_eq!(by_ann, Some((s, Role::Owner)));
    assert_eq!(revoke.unwrap().1, ["dan".to_owned()]);
    assert_eq!(access.owned_sessions("ann").await.unwrap(), 1);
    assert_eq!(access.owned_sessions("bob").await.unwrap(), 0);
    assert_eq!(access.owned_log_bytes("ann").await.unwrap(), stored);
    assert_eq!(access.owned_log_bytes("bob").await.unwrap(), 0);
}

pub async fn a_sessions_members_and_share_links_are_listed(db: Db) {
    // arrange
    let Stores { log, access, .. } = db.open("a").await;
    let s = log.open_session("listed", None).await.unwrap().id;
    let other = log.open_session("elsewhere", None).await.unwrap().id;
    access.set_member(s, "ann", Role::Owner).await.unwrap();
    access
        .set_member(s, "cole", Role::Controller)
        .await
        .unwrap();
    access.set_member(other, "ola", Role::Owner).await.unwrap();
    let older = share_link("old", s, Role::Controller, 1);
    let mut newer = share_link("new", s, Role::Viewer, 3);
    newer.info.created_at = 5;
    access.create_share_link(&older).await.unwrap();
    access.create_share_link(&newer).await.unwrap();
    access
        .create_share_link(&share_link("theirs", other, Role::Viewer, 1))
        .await
        .unwrap();
    assert!(access
        .share_links(SessionId::new())
        .await
        .unwrap()
        .is_empty());

    // act
    access
        .redeem_share_link("hash-new", "bob", 10)
        .await
        .unwrap();
    access
        .redeem_share_link("hash-new", "ann", 10)
        .await
        .unwrap();
    access.revoke_share_link("old", 20).await.unwrap();
    let members = access.members(s).await.unwrap();
    let links = access.share_links(s).await.unwrap();

    // assert
    let member = |principal: &str, role: Role, via_link: Option<&str>| MemberRow {
        principal: principal.into(),
        role,
        via_link: via_link.map(Into::into),
    };
    assert_eq!(
        members,
        [
            member("ann", Role::Owner, None),
            member("bob", Role::Viewer, Some("new")),
            member("cole", Role::Controller, None),
        ],
        "by name, with the link each joined through; not other sessions' members"
    );
    let (mut spent, mut revoked) = (newer, older);
    spent.info.uses_left = 1;
    revoked.info.revoked_at = Some(20);
    assert_eq!(
        links,
        [spent, revoked],
        "newest first, uses spent, revoked ones marked; not other sessions' links"
    );
    assert_eq!(links[0].info.max_uses, Some(3), "the uses it was made with");
}
