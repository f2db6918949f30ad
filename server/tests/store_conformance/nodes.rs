//! Stories about several nodes on one database: racing appenders, notices of appends and
//! bridge claims, a lost listen connection, a database closed to connections, and moving a
//! SQLite log to Postgres.

use std::collections::HashSet;

use moor_protocol::payload::SessionEnded;
use moor_protocol::{kinds, ProducerId, Seq, SessionId};
use moor_server::store::{
    Append, Appended, CheckpointRow, IdemKey, Notice, Range, RefreshOutcome, RefreshRow, Role,
    StoreError, Stores,
};

use crate::stories::{all, input, next, output, produced, receipt, share_link, stored_seq};
use crate::Db;

pub async fn appenders_on_two_nodes_keep_seqs_contiguous_and_keys_unique(db: Db) {
    // arrange: two handles on one database, as two nodes would have
    let a = db.open("node-a").await;
    let b = db.open("node-b").await;
    let s = a.log.open_session("race", None).await.unwrap().id;
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
                for o in a.log.append(s, batch).await.unwrap() {
                    assert!(matches!(o, Appended::Stored(_)), "{o:?}");
                }
            }
        }
    };
    let inputs = |store: Stores, node: &'static str| async move {
        let mut stored = 0;
        for i in 0..ROUNDS {
            let batch = vec![
                input(&format!("shared-{i}"), "x"),
                output(node, IdemKey::None),
            ];
            let out = store.log.append(s, batch).await.unwrap();
            stored += matches!(out[0], Appended::Stored(_)) as u32;
        }
        stored
    };
    let ((), on_a, on_b) = tokio::join!(producer, inputs(a.clone(), "a"), inputs(b.clone(), "b"));

    // assert
    let entries = all(&*b.log, s).await;
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
        a.log.find_session("race").await.unwrap().head_seq.0,
        entries.len() as u64
    );
    assert_eq!(b.log.producer_mark(s, p).await.unwrap(), ROUNDS * 5);
}

pub async fn other_nodes_hear_of_appends_and_bridge_claims(db: Db) {
    let a = db.open("node-a").await;
    let b = db.open("node-b").await;
    let (Some(ca), Some(cb)) = (a.cluster.as_deref(), b.cluster.as_deref()) else {
        // A single-node store: nothing to announce, and it says so.
        assert!(a.cluster.as_deref().is_none() && b.cluster.as_deref().is_none());
        assert!(db.url.starts_with("sqlite:"), "only SQLite is single-node");
        return;
    };
    // arrange
    assert_eq!(cb.node_id(), "node-b");
    let s = a.log.open_session("notices", None).await.unwrap().id;
    let mut feed = cb.feed();
    assert_eq!(
        next(&mut feed).await,
        Notice::Resync,
        "a feed starts with a resync"
    );

    // act
    b.log
        .append(s, vec![output("own", IdemKey::None)])
        .await
        .unwrap();
    a.log
        .append(
            s,
            vec![output("x", IdemKey::None), output("y", IdemKey::None)],
        )
        .await
        .unwrap();
    let (p1, p2) = (ProducerId::new(), ProducerId::new());
    let e1 = ca.claim_bridge(s, p1).await.unwrap();
    let e2 = ca.claim_bridge(s, p2).await.unwrap();

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
            epoch: e1,
            producer: p1
        }
    );
    assert_eq!(
        next(&mut feed).await,
        Notice::BridgeClaimed {
            session: s,
            epoch: e2,
            producer: p2
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
    let s = a.log.open_session("terminate", None).await.unwrap().id;
    let mut feed = b
        .cluster
        .as_deref()
        .expect("postgres is a cluster store")
        .feed();
    assert_eq!(next(&mut feed).await, Notice::Resync);
    let admin = sqlx::PgPool::connect(&admin_url).await.unwrap();

    // act
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'moord-listen node-b'",
    )
    .fetch_all(&admin)
    .await
    .unwrap();
    a.log
        .append(s, vec![output("while reconnecting", IdemKey::None)])
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
    a.log
        .append(s, vec![output("after", IdemKey::None)])
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
    let a = src.log.open_session("first", None).await.unwrap().id;
    let b = src.log.open_session("second", None).await.unwrap().id;
    src.log
        .append(
            a,
            (1..=7000)
                .map(|i| produced(p, i, &format!("l{i}")))
                .collect(),
        )
        .await
        .unwrap();
    src.log
        .append(
            a,
            vec![input("m1", "hi"), receipt(kinds::INPUT_APPLIED, Seq(7001))],
        )
        .await
        .unwrap();
    src.log
        .append(b, vec![output("b", IdemKey::None)])
        .await
        .unwrap();
    src.log.end_session(b, 42).await.unwrap();
    src.log
        .save_snapshot(a, Seq(5000), r#"{"head":5000}"#)
        .await
        .unwrap();
    let checkpoint = CheckpointRow {
        id: "cp-1".into(),
        session: a,
        created_at: 7,
        summary: "{}".into(),
        manifest: r#"{"files":[]}"#.into(),
        blobs: vec!["patch-sha".into()],
    };
    src.checkpoints.save_checkpoint(&checkpoint).await.unwrap();
    src.checkpoints
        .record_blob_upload("patch-sha", "ann", 12, 1)
        .await
        .unwrap();
    src.access
        .create_user("ann", "hash", true, 1)
        .await
        .unwrap();
    let refresh = RefreshRow {
        token_hash: "h1".into(),
        user: "ann".into(),
        created_at: 1,
        expires_at: i64::MAX,
    };
    src.access
        .create_token_family("f1", &refresh)
        .await
        .unwrap();
    src.access.set_member(a, "ann", Role::Owner).await.unwrap();
    src.access
        .create_share_link(&share_link("l1", a, Role::Viewer, 3))
        .await
        .unwrap();
    src.access
        .redeem_share_link("hash-l1", "bob", 2)
        .await
        .unwrap();
    let offer = moor_server::store::OfferRow {
        session: a,
        principal: "cat".into(),
        role: Role::Controller,
        offered_by: "ann".into(),
        offered_at: 2,
        expires_at: i64::MAX,
    };
    let limits = moor_server::store::OfferLimits {
        per_session: 1,
        per_user: 1,
    };
    src.access.offer(&offer, limits).await.unwrap();
    let gone = src.log.open_session("deleted", None).await.unwrap().id;
    src.log.end_session(gone, 50).await.unwrap();
    src.retention
        .retire_session(gone, 60, "deleted by its owner")
        .await
        .unwrap();
    src.notify.mute_class("ann", "turn", true).await.unwrap();
    src.notify.mute_session("ann", b, true, 5).await.unwrap();
    let quiet = moor_protocol::notify::QuietHours {
        start: "22:00".into(),
        end: "07:00".into(),
        time_zone: "Europe/Paris".into(),
    };
    src.notify
        .set_quiet_hours("ann", Some(&quiet))
        .await
        .unwrap();

    // act
    let copied = moor_server::store::migrate::copy(&sqlite.url, &pg.url)
        .await
        .unwrap();
    let again = moor_server::store::migrate::copy(&sqlite.url, &pg.url).await;

    // assert
    assert_eq!((copied.sessions, copied.entries), (3, 7003));
    assert!(
        again.is_err(),
        "a second copy into a non-empty database is refused"
    );
    let dst = pg.open("new").await;
    assert_eq!(
        dst.retention.retired_session(gone).await.unwrap(),
        src.retention.retired_session(gone).await.unwrap(),
        "a deleted session still says so"
    );
    assert_eq!(
        dst.notify.mutes("ann").await.unwrap(),
        src.notify.mutes("ann").await.unwrap()
    );
    assert_eq!(dst.notify.quiet_hours("ann").await.unwrap(), Some(quiet));
    assert_eq!(
        dst.log.list_sessions(None, 1000).await.unwrap(),
        src.log.list_sessions(None, 1000).await.unwrap()
    );
    for s in [a, b] {
        assert_eq!(
            all(&*dst.log, s).await,
            all(&*src.log, s).await,
            "the same entries"
        );
    }
    assert_eq!(dst.log.producer_mark(a, p).await.unwrap(), 7000);
    assert_eq!(
        dst.checkpoints.checkpoint(a, "cp-1").await.unwrap(),
        CheckpointRow {
            blobs: vec![],
            ..checkpoint
        }
    );
    assert_eq!(
        dst.checkpoints.uploaded_blob_bytes("ann").await.unwrap(),
        12,
        "who uploaded which blob"
    );
    assert_eq!(
        dst.checkpoints.blob_sessions("patch-sha").await.unwrap(),
        [a]
    );
    assert_eq!(
        copied.accounts, 13,
        "a user, a family, a token, a link, two roles, an offer, a checkpoint's blob, its upload, \
         a deleted session's tombstone, two mutes, quiet hours"
    );
    assert_eq!(dst.access.session_offers(a, 3).await.unwrap(), [offer]);
    assert!(
        dst.access.user("ann").await.unwrap().admin,
        "administrators stay"
    );
    let (_, removed) = dst.access.revoke_share_link("l1", 3).await.unwrap();
    assert_eq!(removed, ["bob"], "who joined through a link is still known");
    assert_eq!(
        dst.access.user("ann").await.unwrap(),
        src.access.user("ann").await.unwrap()
    );
    assert_eq!(
        dst.access.memberships("ann").await.unwrap(),
        [(a, Role::Owner)]
    );
    assert!(matches!(
        dst.access
            .rotate_refresh(
                "h1",
                &RefreshRow {
                    token_hash: "h2".into(),
                    ..refresh
                },
                2,
                0
            )
            .await
            .unwrap(),
        RefreshOutcome::Rotated { .. }
    ));
    assert_eq!(
        dst.log.latest_snapshot(a).await.unwrap(),
        src.log.latest_snapshot(a).await.unwrap()
    );
    let replay = dst
        .log
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
    assert!(
        matches!(
            dst.log.append(b, vec![input("x", "late")]).await,
            Err(StoreError::SessionEnded)
        ),
        "the end came along"
    );
}

pub async fn sessions_ended_from_two_nodes_at_once_end_once(db: Db) {
    // arrange: a bridge's `End` can reach two nodes, on a half-open connection and on the one
    // that replaced it; each node fails the input it thinks undelivered and writes
    // `session.ended`, in one batch that ends the session
    let a = db.open("node-a").await;
    let b = db.open("node-b").await;
    let ending = |head: Seq, at: i64| {
        let mut end = Append::end(SessionEnded { reason: None }, head);
        end.ts = at;
        vec![receipt(kinds::INPUT_FAILED, Seq(1)), end]
    };
    let mut ends = 0;
    for i in 0..20 {
        let s = a
            .log
            .open_session(&format!("ending-{i}"), None)
            .await
            .unwrap()
            .id;
        a.log.append(s, vec![input("m", "hi")]).await.unwrap();

        // act
        let (x, y) = tokio::join!(
            a.log.append(s, ending(Seq(1), 100)),
            b.log.append(s, ending(Seq(1), 200))
        );

        // assert: one ends it, the other is told it had ended and writes nothing
        let (x, y) = (x.is_ok(), y.is_ok());
        assert_ne!(x, y, "session {i}: exactly one node ends it");
        ends += x as u32 + y as u32;
        let kinds: Vec<String> = all(&*b.log, s).await.into_iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [kinds::INPUT_TEXT, kinds::INPUT_FAILED, kinds::SESSION_ENDED],
            "session {i}"
        );
        let ended_at = b
            .log
            .find_session(&format!("ending-{i}"))
            .await
            .unwrap()
            .ended_at;
        assert_eq!(
            ended_at,
            Some(if x { 100 } else { 200 }),
            "the winner's time is kept"
        );
    }
    assert_eq!(ends, 20);
}

pub async fn an_end_written_after_the_log_moved_on_is_refused_whole(db: Db) {
    // arrange: a node read the log up to seq 1 to end it; an input came in since (on another
    // node), which that end would leave without an outcome
    let a = db.open("node-a").await;
    let b = db.open("node-b").await;
    let s = a.log.open_session("moved", None).await.unwrap().id;
    a.log.append(s, vec![input("m1", "first")]).await.unwrap();
    b.log.append(s, vec![input("m2", "second")]).await.unwrap();

    // act
    let stale = vec![
        receipt(kinds::INPUT_FAILED, Seq(1)),
        Append::end(SessionEnded { reason: None }, Seq(1)),
    ];
    let refused = a.log.append(s, stale).await;
    let current = vec![
        receipt(kinds::INPUT_FAILED, Seq(1)),
        receipt(kinds::INPUT_FAILED, Seq(2)),
        Append::end(SessionEnded { reason: None }, Seq(2)),
    ];
    let ended = a.log.append(s, current).await;

    // assert: nothing of the stale end was written and the session stayed open; the end that
    // read the whole log ended it, and the session takes no more input
    assert!(
        matches!(refused, Err(StoreError::Conflict(_))),
        "{refused:?}"
    );
    assert!(ended.is_ok(), "{ended:?}");
    let kinds: Vec<String> = all(&*b.log, s).await.into_iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            kinds::INPUT_TEXT,
            kinds::INPUT_TEXT,
            kinds::INPUT_FAILED,
            kinds::INPUT_FAILED,
            kinds::SESSION_ENDED
        ]
    );
    assert!(b
        .log
        .find_session("moved")
        .await
        .unwrap()
        .ended_at
        .is_some());
    assert!(matches!(
        b.log.append(s, vec![input("m3", "late")]).await,
        Err(StoreError::SessionEnded)
    ));
}

pub async fn refresh_tokens_claims_and_share_links_raced_from_two_nodes_count_once(db: Db) {
    // arrange
    let a = db.open("node-a").await;
    let b = db.open("node-b").await;
    let token = |hash: &str| RefreshRow {
        token_hash: hash.into(),
        user: "ann".into(),
        created_at: 1,
        expires_at: i64::MAX,
    };
    a.access.create_user("ann", "hash", false, 1).await.unwrap();
    let s = a.log.open_session("claimed", None).await.unwrap().id;

    // act: the same token, and the same unclaimed session, on both nodes at once, many times
    let mut rotated = 0;
    let mut owners = 0;
    // The link is on a session ann owns: a link grants only while its creator owns it.
    let shared = a.log.open_session("shared", None).await.unwrap().id;
    a.access
        .set_member(shared, "ann", Role::Owner)
        .await
        .unwrap();
    a.access
        .create_share_link(&share_link("once", shared, Role::Viewer, 20))
        .await
        .unwrap();
    let mut redeemed = 0;
    for i in 0..20 {
        let old = format!("t{i}");
        a.access
            .create_token_family(&format!("f{i}"), &token(&old))
            .await
            .unwrap();
        let (next_a, next_b) = (token(&format!("a{i}")), token(&format!("b{i}")));
        let (x, y) = tokio::join!(
            a.access.rotate_refresh(&old, &next_a, 2, 0),
            b.access.rotate_refresh(&old, &next_b, 2, 0)
        );
        let outcomes = [x.unwrap(), y.unwrap()];
        rotated += outcomes
            .iter()
            .filter(|o| matches!(o, RefreshOutcome::Rotated { .. }))
            .count();
        assert!(
            outcomes
                .iter()
                .any(|o| matches!(o, RefreshOutcome::Reused { .. })),
            "the loser sees reuse: {outcomes:?}"
        );
        let (who_a, who_b) = (format!("a{i}"), format!("b{i}"));
        let claims = tokio::join!(
            a.access.claim_session(s, &who_a),
            b.access.claim_session(s, &who_b)
        );
        owners += claims.0.unwrap() as u32 + claims.1.unwrap() as u32;
        let (who_a, who_b) = (format!("la{i}"), format!("lb{i}"));
        let (x, y) = tokio::join!(
            a.access.redeem_share_link("hash-once", &who_a, 2),
            b.access.redeem_share_link("hash-once", &who_b, 2)
        );
        redeemed += x.unwrap().is_some() as u32 + y.unwrap().is_some() as u32;
    }

    // assert
    assert_eq!(rotated, 20, "each token rotated exactly once");
    assert_eq!(owners, 1, "the session got one owner");
    assert_eq!(
        redeemed, 20,
        "a link with 20 uses is redeemed 20 times in 40 tries"
    );
}

/// A Postgres database the test closes to connections and opens again, as an operator or a
/// failover would.
struct Outage {
    admin: sqlx::PgPool,
    name: String,
}

impl Outage {
    async fn new(db: &Db, admin_url: &str) -> Self {
        Self {
            admin: sqlx::PgPool::connect(admin_url).await.unwrap(),
            name: db.url.rsplit('/').next().unwrap().to_owned(),
        }
    }

    async fn allow(&self, yes: bool) {
        sqlx::query(&format!(
            "ALTER DATABASE {} WITH ALLOW_CONNECTIONS {yes}",
            self.name
        ))
        .execute(&self.admin)
        .await
        .unwrap();
    }

    /// Refuses new connections and ends `node`'s open ones, waiting until they are gone;
    /// whether it had any.
    async fn close(&self, node: &str) -> bool {
        self.allow(false).await;
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity \
             WHERE datname = $1 AND application_name = $2",
        )
        .bind(&self.name)
        .bind(format!("moord {node}"))
        .fetch_all(&self.admin)
        .await
        .unwrap();
        !killed.is_empty()
    }
}

/// Postgres: while the database refuses new connections and the node's open ones are gone,
/// every call reports the store unavailable (retry later), not broken; once the database
/// accepts connections again the same calls succeed.
pub async fn a_database_closed_to_connections_is_unavailable_until_it_reopens(
    db: Db,
    admin_url: String,
) {
    // arrange
    let Stores { log, access, .. } = db.open("node-a").await;
    let s = log.open_session("outage", None).await.unwrap().id;
    access.set_member(s, "mem", Role::Viewer).await.unwrap();
    let outage = Outage::new(&db, &admin_url).await;

    // act: close the database, end the node's connections (waiting until they are gone)
    let had_connections = outage.close("node-a").await;
    let read = log.read(s, Range::After(Seq::ZERO), 10).await;
    let removed = access.remove_member(s, "mem").await;
    outage.allow(true).await;

    // assert
    assert!(had_connections, "the node had connections to end");
    assert!(
        matches!(read, Err(StoreError::Unavailable(_))),
        "a read while closed: {read:?}"
    );
    assert!(
        matches!(removed, Err(StoreError::Unavailable(_))),
        "a write while closed: {removed:?}"
    );
    access.remove_member(s, "mem").await.unwrap();
    assert_eq!(access.member_role(s, "mem").await.unwrap(), None);
    assert!(log.read(s, Range::After(Seq::ZERO), 10).await.is_ok());
}

/// Postgres: a viewer's tail whose store reads fail because the database is closed to
/// connections keeps retrying, and once the database opens again it returns the entries after
/// its cursor, in order: a short outage holds a stream rather than ending it.
pub async fn a_tail_waits_through_a_short_outage_and_then_returns_what_follows(
    db: Db,
    admin_url: String,
) {
    // arrange: a session with two entries and a tail from its start
    let Stores { log, .. } = db.open("node-t").await;
    let s = log.open_session("tail-outage", None).await.unwrap().id;
    let texts = ["before", "the outage"];
    let batch = texts.map(|t| output(t, IdemKey::None)).to_vec();
    log.append(s, batch).await.unwrap();
    let hub = moor_server::hub::Hub::default();
    let mut tail = moor_server::session::tail::Tail::new(log.clone(), &hub, s, Seq::ZERO);
    let outage = Outage::new(&db, &admin_url).await;

    // act: close the database, let the tail fail to read twice, open it again
    assert!(
        outage.close("node-t").await,
        "the node had connections to end"
    );
    let reading = tokio::spawn(async move {
        let mut got = Vec::new();
        for _ in texts {
            got.push(tail.next().await.map(|f| f.seq()));
        }
        got
    });
    // Two failed reads, or the tail ending (which the assertion below reports).
    let failed_twice = || async { hub.metrics().store_errors.get() >= 2 || reading.is_finished() };
    let why = "the tail's reads to fail twice while the database is closed";
    moor_e2e::util::eventually(std::time::Duration::from_secs(30), why, failed_twice).await;
    let finished_early = reading.is_finished();
    outage.allow(true).await;
    let got = tokio::time::timeout(std::time::Duration::from_secs(30), reading)
        .await
        .expect("the tail returns once the database is open")
        .unwrap();

    // assert
    assert!(
        !finished_early,
        "the tail ended instead of waiting: {got:?}"
    );
    let seqs: Vec<u64> = got.into_iter().map(|r| r.unwrap().0).collect();
    assert_eq!(seqs, [1, 2], "the entries after the cursor, in order");
}
