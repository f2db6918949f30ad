//! Stories about bridge leases: held, renewed, released, taken over by a newer connection, and
//! claimed once expired by exactly one of several racing nodes.

use std::collections::HashSet;

use moor_protocol::{Seq, SessionId};
use moor_server::store::{Expired, Lease};

use crate::Db;

fn lease(session: SessionId, node: &str, connected_seq: u64, expires_at: i64) -> Lease {
    Lease {
        session,
        node: node.into(),
        connection: connected_seq * 10,
        connected_seq: Seq(connected_seq),
        expires_at,
    }
}

pub async fn bridge_leases_are_held_renewed_released_and_taken_over(db: Db) {
    // arrange
    let store = db.open("node-a").await;
    let s = store.log.open_session("leased", None).await.unwrap().id;
    let leases = &store.leases;

    // act + assert: a held lease is live until it expires; its holder renews it
    assert!(leases
        .hold_lease(&lease(s, "node-a", 3, 1_000))
        .await
        .unwrap());
    assert_eq!(
        leases.live_lease(s, 999).await.unwrap(),
        Some(lease(s, "node-a", 3, 1_000))
    );
    assert_eq!(leases.live_lease(s, 1_000).await.unwrap(), None);
    assert_eq!(
        leases.renew_leases("node-a", &[s], 2_000).await.unwrap(),
        vec![(s, Seq(3))]
    );
    assert!(leases.live_lease(s, 1_500).await.unwrap().is_some());
    // ... but nobody else does
    assert!(leases
        .renew_leases("node-b", &[s], 9_000)
        .await
        .unwrap()
        .is_empty());
    assert!(leases.live_lease(s, 2_000).await.unwrap().is_none());

    // an older connection never replaces a newer one's lease; a newer one does
    assert!(!leases
        .hold_lease(&lease(s, "node-b", 2, 5_000))
        .await
        .unwrap());
    assert!(leases
        .hold_lease(&lease(s, "node-b", 7, 5_000))
        .await
        .unwrap());
    assert_eq!(
        leases.live_lease(s, 0).await.unwrap().map(|l| l.node),
        Some("node-b".to_owned())
    );
    // releasing names the connection: the replaced one's release leaves the lease alone
    assert!(!leases.release_lease(s, Seq(3)).await.unwrap());
    assert!(leases.release_lease(s, Seq(7)).await.unwrap());
    assert_eq!(leases.live_lease(s, 0).await.unwrap(), None);

    // a new connection takes over: the lease it removes names the connection before
    assert!(leases
        .hold_lease(&lease(s, "node-a", 9, 5_000))
        .await
        .unwrap());
    assert_eq!(
        leases.take_lease(s).await.unwrap(),
        Some(lease(s, "node-a", 9, 5_000))
    );
    assert_eq!(leases.take_lease(s).await.unwrap(), None);
}

pub async fn a_node_renews_the_leases_it_names_in_one_call_whatever_their_number(db: Db) {
    // arrange: more leases on node-a than one statement names, one of node-b's, one unlisted
    let store = db.open("node-a").await;
    let leases = &store.leases;
    let n = moor_server::store::RENEW_CHUNK + 20;
    let mut mine = Vec::with_capacity(n);
    for i in 0..n {
        let s = store
            .log
            .open_session(&format!("renewed-{i}"), None)
            .await
            .unwrap()
            .id;
        assert!(leases
            .hold_lease(&lease(s, "node-a", i as u64 + 1, 1_000))
            .await
            .unwrap());
        mine.push((s, Seq(i as u64 + 1)));
    }
    let theirs = store.log.open_session("theirs", None).await.unwrap().id;
    assert!(leases
        .hold_lease(&lease(theirs, "node-b", 1, 1_000))
        .await
        .unwrap());
    let unlisted = store.log.open_session("unlisted", None).await.unwrap().id;
    assert!(leases
        .hold_lease(&lease(unlisted, "node-a", 1, 1_000))
        .await
        .unwrap());

    // act: node-a renews what it names, node-b's session among them
    let mut named: Vec<SessionId> = mine.iter().map(|(s, _)| *s).collect();
    named.push(theirs);
    let renewed = leases.renew_leases("node-a", &named, 5_000).await.unwrap();

    // assert: exactly node-a's named leases, each with its connection, are renewed
    assert_eq!(
        renewed.into_iter().collect::<HashSet<_>>(),
        mine.iter().copied().collect::<HashSet<_>>()
    );
    assert!(leases
        .live_lease(mine[n - 1].0, 4_000)
        .await
        .unwrap()
        .is_some());
    assert!(leases.live_lease(theirs, 4_000).await.unwrap().is_none());
    assert!(leases.live_lease(unlisted, 4_000).await.unwrap().is_none());
}

pub async fn expired_leases_are_claimed_by_one_node_only(db: Db) {
    // arrange: leases held by a node that is gone, some expired, one not yet; one held by b
    let a = db.open("node-a").await;
    let b = db.open("node-b").await;
    const N: u64 = 40;
    let mut expired = HashSet::new();
    for i in 0..N {
        let s = a
            .log
            .open_session(&format!("gone-{i}"), None)
            .await
            .unwrap()
            .id;
        assert!(a
            .leases
            .hold_lease(&lease(s, "gone", i + 1, 100))
            .await
            .unwrap());
        expired.insert(s);
    }
    let fresh = a.log.open_session("fresh", None).await.unwrap().id;
    assert!(a
        .leases
        .hold_lease(&lease(fresh, "gone", 1, 10_000))
        .await
        .unwrap());
    let own = a.log.open_session("own", None).await.unwrap().id;
    assert!(a
        .leases
        .hold_lease(&lease(own, "node-b", 1, 10_000))
        .await
        .unwrap());

    // act: both nodes sweep at once
    let (on_a, on_b) = tokio::join!(
        a.leases
            .claim_expired(Expired::Before(1_000), "node-a", 5_000),
        b.leases
            .claim_expired(Expired::Before(1_000), "node-b", 5_000),
    );
    let (on_a, on_b) = (on_a.unwrap(), on_b.unwrap());

    // assert: every expired lease claimed once in all, the live ones by nobody
    let mut claimed = HashSet::new();
    for l in on_a.iter().chain(&on_b) {
        assert!(claimed.insert(l.session), "{:?} claimed twice", l.session);
        assert_eq!(l.node, "gone");
    }
    assert_eq!(claimed, expired);
    // ... a claimed lease is no longer live, its holder cannot renew it, and it is not claimed
    // again until the claim itself expires
    let first = *expired.iter().next().unwrap();
    assert_eq!(a.leases.live_lease(first, 2_000).await.unwrap(), None);
    let first_seq = on_a
        .iter()
        .chain(&on_b)
        .find(|l| l.session == first)
        .unwrap()
        .connected_seq;
    assert!(!a
        .leases
        .renew_leases("gone", &[first], 9_000)
        .await
        .unwrap()
        .contains(&(first, first_seq)));
    assert!(b
        .leases
        .claim_expired(Expired::Before(4_000), "node-b", 9_000)
        .await
        .unwrap()
        .is_empty());

    // a node restarting under its name claims its own leases at once; a node alone, all
    let restarted = b
        .leases
        .claim_expired(Expired::BeforeOrHeldBy(2_000, "node-b"), "node-b", 9_000)
        .await
        .unwrap();
    assert_eq!(
        restarted.iter().map(|l| l.session).collect::<Vec<_>>(),
        vec![own]
    );
    let all = a
        .leases
        .claim_expired(Expired::All, "node-a", 20_000)
        .await
        .unwrap();
    let all: HashSet<SessionId> = all.iter().map(|l| l.session).collect();
    assert!(
        all.contains(&fresh) && all.contains(&own) && all.len() == N as usize + 2,
        "{all:?}"
    );
}
