//! The notification outbox and Web Push subscriptions.

use std::collections::HashSet;

use moor_protocol::{kinds, ProducerId, Seq};
use moor_server::store::notify::{
    MutesRow, OutboxState, PushSubscriptionRow, MAX_MUTED_SESSIONS_PER_PRINCIPAL,
    MAX_SUBSCRIPTIONS_PER_PRINCIPAL, MAX_TARGETS_PER_ROW, MAX_TARGET_BYTES,
};
use moor_server::store::{Append, IdemKey};
use serde_json::json;

use super::Db;
use crate::stories::produced;

fn entry(producer: ProducerId, seq: u64, kind: &str, ts: i64) -> Append {
    Append {
        ts,
        kind: kind.to_owned(),
        author: "bridge".to_owned(),
        payload: json!({"request_id": format!("r{seq}"), "tool_name": "Bash"}).into(),
        key: IdemKey::Producer { producer, seq },
    }
}

pub async fn notifying_entries_get_an_outbox_row_in_their_commit_and_others_none(db: Db) {
    // arrange
    let a = db.open("node-a").await;
    let s = a.log.open_session("outbox", None).await.unwrap().id;
    let p = ProducerId::new();

    // act: a single append and a group append, each mixing notifying and quiet entries
    a.log
        .append(
            s,
            vec![
                produced(p, 1, "quiet"),
                entry(p, 2, kinds::AGENT_PERMISSION_REQUEST, 1_000),
            ],
        )
        .await
        .unwrap();
    let t = a.log.open_session("outbox-2", None).await.unwrap().id;
    a.log
        .append_group(vec![
            (s, vec![entry(p, 3, kinds::AGENT_RESULT, 1_001)]),
            (t, vec![entry(p, 1, kinds::SESSION_ENDED, 1_002)]),
        ])
        .await
        .unwrap();

    // assert: exactly the notifying entries have a pending row
    let n = &a.notify;
    assert_eq!(n.outbox_status(s, Seq(1)).await.unwrap(), None);
    for (session, seq) in [(s, 2), (s, 3), (t, 1)] {
        let status = n.outbox_status(session, Seq(seq)).await.unwrap().unwrap();
        assert_eq!(status.state, OutboxState::Pending);
    }
    let claimed = n.claim_outbox("node-a", 10_000, 20_000, 100).await.unwrap();
    let got: Vec<_> = claimed
        .iter()
        .map(|r| (r.session, r.seq.0, r.kind.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            (s, 2, kinds::AGENT_PERMISSION_REQUEST),
            (s, 3, kinds::AGENT_RESULT),
            (t, 1, kinds::SESSION_ENDED),
        ]
    );
    assert_eq!(claimed[0].ts, 1_000);
}

pub async fn outbox_rows_go_to_one_node_and_back_when_a_claim_lapses(db: Db) {
    // arrange: 60 notifying entries
    let a = db.open("node-a").await;
    let b = db.open("node-b").await;
    let s = a.log.open_session("race", None).await.unwrap().id;
    let p = ProducerId::new();
    let batch = (1..=60)
        .map(|i| entry(p, i, kinds::AGENT_RESULT, 1))
        .collect();
    a.log.append(s, batch).await.unwrap();

    // act: both nodes claim at once, in small batches, until nothing is left
    let claim = |stores: moor_server::store::Stores, node: &'static str| async move {
        let mut got = Vec::new();
        loop {
            let rows = stores
                .notify
                .claim_outbox(node, 100, 1_000, 7)
                .await
                .unwrap();
            if rows.is_empty() {
                return got;
            }
            got.extend(rows.into_iter().map(|r| r.id));
        }
    };
    let (on_a, on_b) = tokio::join!(claim(a.clone(), "node-a"), claim(b.clone(), "node-b"));

    // assert: each row claimed exactly once
    let mut all = HashSet::new();
    for id in on_a.iter().chain(&on_b) {
        assert!(all.insert(*id), "row {id} claimed twice");
    }
    assert_eq!(all.len(), 60);

    // a sender that crashed (its claim lapses) leaves its rows to the next claim, once
    assert!(b
        .notify
        .claim_outbox("node-b", 999, 2_000, 100)
        .await
        .unwrap()
        .is_empty());
    let again = b
        .notify
        .claim_outbox("node-b", 1_000, 2_000, 100)
        .await
        .unwrap();
    assert_eq!(again.len(), 60);

    // only the claimer settles; settled rows are never claimed again
    let ids: Vec<i64> = again.iter().map(|r| r.id).collect();
    assert_eq!(
        a.notify
            .settle_outbox(&ids, "node-a", OutboxState::Sent, None, 1_500)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        b.notify
            .settle_outbox(&ids[..50], "node-b", OutboxState::Sent, None, 1_500)
            .await
            .unwrap(),
        50
    );
    // a failed attempt is counted, backs off, and keeps its reason
    let last = *ids.last().unwrap();
    assert!(b
        .notify
        .retry_outbox(last, "node-b", 5_000, Some("push service answered 500"))
        .await
        .unwrap());
    b.notify
        .settle_outbox(
            &ids[50..59],
            "node-b",
            OutboxState::Dropped,
            Some("gave up"),
            1_600,
        )
        .await
        .unwrap();
    assert!(a
        .notify
        .claim_outbox("node-a", 4_999, 9_000, 100)
        .await
        .unwrap()
        .is_empty());
    let retried = a
        .notify
        .claim_outbox("node-a", 5_000, 9_000, 100)
        .await
        .unwrap();
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0].attempts, 1);
    let status = a
        .notify
        .outbox_status(s, retried[0].seq)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.reason.as_deref(), Some("push service answered 500"));
    let dropped = a.notify.outbox_status(s, Seq(51)).await.unwrap().unwrap();
    assert_eq!(
        (dropped.state, dropped.reason.as_deref()),
        (OutboxState::Dropped, Some("gave up"))
    );
}

pub async fn push_subscriptions_are_per_user_bounded_and_removed_by_endpoint(db: Db) {
    let a = db.open("node-a").await;
    let n = &a.notify;
    let sub = |i: i64, who: &str| PushSubscriptionRow {
        id: format!("id-{who}-{i}"),
        principal: who.to_owned(),
        device: format!("device {i}"),
        endpoint: format!("https://push.test/{who}/{i}"),
        p256dh: "key".to_owned(),
        auth: "auth".to_owned(),
        created_at: i,
    };
    for i in 0..MAX_SUBSCRIPTIONS_PER_PRINCIPAL + 2 {
        n.put_subscription(&sub(i, "alice")).await.unwrap();
    }
    n.put_subscription(&sub(0, "bob")).await.unwrap();
    let alice = n.subscriptions("alice").await.unwrap();
    assert_eq!(alice.len() as i64, MAX_SUBSCRIPTIONS_PER_PRINCIPAL);
    assert_eq!(alice[0].id, "id-alice-2", "the oldest two were dropped");
    // a known endpoint changes hands rather than doubling
    let mut moved = sub(0, "bob");
    moved.id = "moved".into();
    moved.principal = "carol".into();
    moved.created_at = 99;
    n.put_subscription(&moved).await.unwrap();
    assert!(n.subscriptions("bob").await.unwrap().is_empty());
    assert_eq!(n.subscriptions("carol").await.unwrap().len(), 1);
    // removal: only by its owner, or by endpoint
    assert!(!n.remove_subscription("bob", "moved").await.unwrap());
    assert!(n.remove_subscription("carol", "moved").await.unwrap());
    assert!(n
        .remove_endpoint("https://push.test/alice/5")
        .await
        .unwrap());
    assert!(!n
        .remove_endpoint("https://push.test/alice/5")
        .await
        .unwrap());
    assert_eq!(
        n.subscriptions("alice").await.unwrap().len() as i64,
        MAX_SUBSCRIPTIONS_PER_PRINCIPAL - 1
    );
}

pub async fn settled_outbox_rows_are_deleted_after_their_keep_and_a_flooded_session_is_cut(db: Db) {
    // arrange: 5 notifying entries in one session, 12 in another
    let a = db.open("node-a").await;
    let s = a.log.open_session("kept", None).await.unwrap().id;
    let t = a.log.open_session("flood", None).await.unwrap().id;
    let p = ProducerId::new();
    let five = (1..=5)
        .map(|i| entry(p, i, kinds::AGENT_RESULT, 1))
        .collect();
    a.log.append(s, five).await.unwrap();
    let q = ProducerId::new();
    let twelve = (1..=12)
        .map(|i| entry(q, i, kinds::AGENT_RESULT, 1))
        .collect();
    a.log.append(t, twelve).await.unwrap();
    let n = &a.notify;

    // act: claim the first session's rows; settle two at 1_000, one at 2_000, keep two pending
    let rows = n.claim_outbox("node-a", 100, 10_000, 5).await.unwrap();
    let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
    assert!(rows.iter().all(|r| r.session == s));
    n.settle_outbox(&ids[..2], "node-a", OutboxState::Sent, None, 1_000)
        .await
        .unwrap();
    n.settle_outbox(&ids[2..3], "node-a", OutboxState::Dropped, Some("x"), 2_000)
        .await
        .unwrap();

    // assert: rows settled before the cut are deleted, later and pending ones stay
    let pruned = n.prune_outbox(1_500, 100, 3_000).await.unwrap();
    assert_eq!(pruned, (2, 0));
    assert_eq!(n.outbox_status(s, Seq(1)).await.unwrap(), None);
    assert_eq!(n.outbox_status(s, Seq(2)).await.unwrap(), None);
    let kept = n.outbox_status(s, Seq(3)).await.unwrap().unwrap();
    assert_eq!(kept.state, OutboxState::Dropped);
    assert_eq!(n.outbox_counts().await.unwrap(), (14, 0, 1));

    // act: a bound of 4 waiting rows per session; the first session's 2 are claimed
    let pruned = n.prune_outbox(1_500, 4, 3_000).await.unwrap();

    // assert: the flooded session keeps its newest 4; claimed rows are left to their sender
    assert_eq!(pruned, (0, 8));
    for seq in 1..=8 {
        let st = n.outbox_status(t, Seq(seq)).await.unwrap().unwrap();
        assert_eq!(st.state, OutboxState::Dropped, "seq {seq}");
        assert!(st.reason.unwrap().contains("more than 4"));
    }
    for seq in 9..=12 {
        let st = n.outbox_status(t, Seq(seq)).await.unwrap().unwrap();
        assert_eq!(st.state, OutboxState::Pending, "seq {seq}");
    }
    assert_eq!(n.outbox_counts().await.unwrap(), (6, 0, 9));

    // and everything settled goes once its time is up
    let pruned = n.prune_outbox(3_001, 4, 4_000).await.unwrap();
    assert_eq!(pruned, (9, 0));
    assert_eq!(n.outbox_counts().await.unwrap(), (6, 0, 0));
}

pub async fn deliveries_are_kept_per_row_and_target_while_pending_and_bounded(db: Db) {
    // arrange: three claimed rows of one session
    let a = db.open("node-a").await;
    let s = a.log.open_session("targets", None).await.unwrap().id;
    let p = ProducerId::new();
    let three = (1..=3)
        .map(|i| entry(p, i, kinds::AGENT_RESULT, 1))
        .collect();
    a.log.append(s, three).await.unwrap();
    let n = &a.notify;
    let rows = n.claim_outbox("node-a", 100, 10_000, 10).await.unwrap();
    let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
    assert_eq!(ids.len(), 3);

    // act: the phone took all three, the hook the first two; another node records nothing
    let phone = vec!["push:phone".to_owned()];
    let hook = vec!["sink:hook".to_owned()];
    assert_eq!(
        n.record_deliveries(&ids, "node-a", &phone, 500)
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        n.record_deliveries(&ids[..2], "node-a", &hook, 500)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        n.record_deliveries(&ids, "node-b", &["sink:other".to_owned()], 500)
            .await
            .unwrap(),
        0
    );
    // recording again (a second failed attempt) adds nothing
    assert_eq!(
        n.record_deliveries(&ids, "node-a", &phone, 600)
            .await
            .unwrap(),
        0
    );

    // assert: per target, how many of the rows it took
    assert_eq!(
        n.deliveries(&ids).await.unwrap(),
        vec![("push:phone".to_owned(), 3), ("sink:hook".to_owned(), 2)]
    );
    assert_eq!(
        n.deliveries(&ids[2..]).await.unwrap(),
        vec![("push:phone".to_owned(), 1)]
    );

    // the bound: at most MAX_TARGETS_PER_ROW targets, none longer than MAX_TARGET_BYTES
    let many: Vec<String> = (0..MAX_TARGETS_PER_ROW + 10)
        .map(|i| format!("push:{i}"))
        .chain([format!("push:{}", "x".repeat(MAX_TARGET_BYTES))])
        .collect();
    let added = n
        .record_deliveries(&ids[2..], "node-a", &many, 700)
        .await
        .unwrap();
    assert_eq!(added as usize, MAX_TARGETS_PER_ROW - 1);
    let listed = n.deliveries(&ids[2..]).await.unwrap();
    assert_eq!(listed.len(), MAX_TARGETS_PER_ROW);
    assert!(listed.iter().all(|(t, _)| t.len() <= MAX_TARGET_BYTES));

    // act: the first row is settled; the others are dropped by the bound, then pruned
    n.settle_outbox(&ids[..1], "node-a", OutboxState::Sent, None, 1_000)
        .await
        .unwrap();

    // assert: a settled row's delivery state goes with its settling
    assert!(n.deliveries(&ids[..1]).await.unwrap().is_empty());
    assert_eq!(
        n.deliveries(&ids[1..2]).await.unwrap(),
        vec![("push:phone".to_owned(), 1), ("sink:hook".to_owned(), 1)]
    );
    n.retry_outbox(ids[1], "node-a", 0, Some("503"))
        .await
        .unwrap();
    n.retry_outbox(ids[2], "node-a", 0, Some("503"))
        .await
        .unwrap();
    let pruned = n.prune_outbox(0, 0, 2_000).await.unwrap();
    assert_eq!(pruned, (0, 2));
    assert!(n.deliveries(&ids).await.unwrap().is_empty());
}

pub async fn mutes_are_per_user_and_a_users_muted_sessions_are_bounded(db: Db) {
    // arrange
    let a = db.open("node-a").await;
    let s = a.log.open_session("mute-me", None).await.unwrap().id;
    let t = a.log.open_session("other", None).await.unwrap().id;
    let n = &a.notify;

    // act: alice mutes a class and a session
    n.mute_class("alice", "turn", true).await.unwrap();
    n.mute_class("alice", "turn", true).await.unwrap();
    assert!(n.mute_session("alice", s, true, 10).await.unwrap());
    assert!(n.mute_session("alice", s, true, 11).await.unwrap());

    // assert: what she muted, and for whom
    let m = n.mutes("alice").await.unwrap();
    assert_eq!(m.classes, vec!["turn".to_owned()]);
    assert_eq!(m.sessions, vec![s]);
    assert!(n.is_muted("alice", t, "turn").await.unwrap());
    assert!(n.is_muted("alice", s, "permission").await.unwrap());
    assert!(!n.is_muted("alice", t, "permission").await.unwrap());
    assert!(!n.is_muted("bob", s, "turn").await.unwrap());

    // act + assert: unmuting
    n.mute_class("alice", "turn", false).await.unwrap();
    assert!(n.mute_session("alice", s, false, 12).await.unwrap());
    assert!(!n.is_muted("alice", s, "turn").await.unwrap());
    assert_eq!(n.mutes("alice").await.unwrap(), MutesRow::default());

    // the bound: a user mutes at most MAX_MUTED_SESSIONS_PER_PRINCIPAL sessions
    for i in 0..MAX_MUTED_SESSIONS_PER_PRINCIPAL {
        let id = moor_protocol::SessionId::new();
        assert!(n.mute_session("carol", id, true, i).await.unwrap());
    }
    assert!(!n.mute_session("carol", s, true, 999).await.unwrap());
    assert!(!n.is_muted("carol", s, "turn").await.unwrap());
    let m = n.mutes("carol").await.unwrap();
    assert_eq!(m.sessions.len() as i64, MAX_MUTED_SESSIONS_PER_PRINCIPAL);
}
