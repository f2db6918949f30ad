//! Offers of a role by name: pending until their user accepts or declines, live while
//! unexpired and while their maker owns the session, addressed to a name (an account made after
//! the offer is not its user), and bounded per session and per name, also when made at once on
//! two nodes.

use moor_protocol::SessionId;
use moor_server::store::{
    AccessStore, OfferLimits, OfferRow, Offered, Role, StoreError, Stores, OFFERS_PER_SESSION,
};

use super::Db;

/// An offer of `role` on `session` to `to` by `by`, made at `at`, expiring at 1,000.
fn offer(session: SessionId, to: &str, by: &str, role: Role, at: i64) -> OfferRow {
    OfferRow {
        session,
        principal: to.into(),
        role,
        offered_by: by.into(),
        offered_at: at,
        expires_at: 1_000,
    }
}

const ROOMY: OfferLimits = OfferLimits {
    per_session: 100,
    per_user: 100,
};

/// The sessions of the live offers to `to` at `at`.
async fn offered(access: &dyn AccessStore, to: &str, at: i64) -> Vec<SessionId> {
    let offers = access.offers_to(to, at).await.unwrap();
    offers.iter().map(|o| o.session).collect()
}

pub async fn offers_wait_for_their_user_expire_and_die_with_their_makers_ownership(db: Db) {
    // arrange: ann owns s and t with bob; accounts for cat and dan (dan's made at 50)
    let Stores { log, access, .. } = db.open("a").await;
    let s = log.open_session("s", None).await.unwrap().id;
    let t = log.open_session("t", None).await.unwrap().id;
    for session in [s, t] {
        access
            .set_member(session, "ann", Role::Owner)
            .await
            .unwrap();
        access
            .set_member(session, "bob", Role::Owner)
            .await
            .unwrap();
    }
    for (name, at) in [("ann", 1), ("bob", 1), ("cat", 1), ("dan", 50)] {
        access.create_user(name, "h", false, at).await.unwrap();
    }

    // act: ann offers cat control of s, bob offers cat a view of t; ann offers dan (no
    // account yet) and eve (none ever) s
    for o in [
        offer(s, "cat", "ann", Role::Controller, 10),
        offer(t, "cat", "bob", Role::Viewer, 11),
        offer(s, "dan", "ann", Role::Viewer, 12),
        offer(s, "eve", "ann", Role::Viewer, 13),
    ] {
        assert_eq!(access.offer(&o, ROOMY).await.unwrap(), Offered::Pending);
    }

    // assert: cat sees both, newest first, and is a member of neither; the owners see every
    // name they typed; dan's offer predates his account and eve has none: they see nothing
    assert_eq!(offered(&*access, "cat", 20).await, [t, s]);
    assert_eq!(access.member_role(s, "cat").await.unwrap(), None);
    let names: Vec<String> = (access.session_offers(s, 20).await.unwrap())
        .into_iter()
        .map(|o| o.principal)
        .collect();
    assert_eq!(names, ["cat", "dan", "eve"]);
    assert!(offered(&*access, "dan", 60).await.is_empty());
    assert!(offered(&*access, "eve", 20).await.is_empty());
    assert_eq!(access.accept_offer(s, "dan", 60).await.unwrap(), None);

    // act: bob leaves t, so his offer dies; cat accepts s
    access.remove_member(t, "bob").await.unwrap();
    let dead = access.accept_offer(t, "cat", 20).await.unwrap();
    let accepted = access.accept_offer(s, "cat", 20).await.unwrap();

    // assert
    assert_eq!(dead, None);
    assert_eq!(accepted, Some(Role::Controller));
    assert_eq!(
        access.member_role(s, "cat").await.unwrap(),
        Some(Role::Controller)
    );
    assert!(offered(&*access, "cat", 20).await.is_empty());
    assert_eq!(
        access.accept_offer(s, "cat", 20).await.unwrap(),
        None,
        "once"
    );

    // act: ann offers cat t again; it expires; a fresh one is declined; removing the member
    // also removes an offer made to them
    access
        .offer(&offer(t, "cat", "ann", Role::Viewer, 30), ROOMY)
        .await
        .unwrap();
    let after_expiry = access.accept_offer(t, "cat", 1_000).await.unwrap();
    access
        .offer(&offer(t, "cat", "ann", Role::Viewer, 40), ROOMY)
        .await
        .unwrap();
    let declined = access.decline_offer(t, "cat").await.unwrap();
    let again = access.decline_offer(t, "cat").await.unwrap();
    access
        .offer(&offer(t, "cat", "ann", Role::Viewer, 41), ROOMY)
        .await
        .unwrap();
    access.remove_member(t, "cat").await.unwrap();

    // assert
    assert_eq!(after_expiry, None);
    assert!((declined, again) == (true, false));
    assert!(access.session_offers(t, 42).await.unwrap().is_empty());
}

pub async fn offers_are_bounded_per_session_and_per_name(db: Db) {
    // arrange: ann owns three sessions; limits of two per session and two per name
    let Stores { log, access, .. } = db.open("a").await;
    let limits = OfferLimits {
        per_session: 2,
        per_user: 2,
    };
    let mut sessions = Vec::new();
    for name in ["s1", "s2", "s3"] {
        let id = log.open_session(name, None).await.unwrap().id;
        access.set_member(id, "ann", Role::Owner).await.unwrap();
        sessions.push(id);
    }
    let [s1, s2, s3] = sessions[..] else {
        unreachable!()
    };

    // act: two names on s1, a third; the second offered again; cat offered all three
    let first = access
        .offer(&offer(s1, "a", "ann", Role::Viewer, 1), limits)
        .await;
    let second = access
        .offer(&offer(s1, "b", "ann", Role::Viewer, 1), limits)
        .await;
    let third = access
        .offer(&offer(s1, "c", "ann", Role::Viewer, 1), limits)
        .await;
    let renewed = access
        .offer(&offer(s1, "b", "ann", Role::Owner, 2), limits)
        .await;
    let mut to_cat = Vec::new();
    for s in [s2, s3, s1] {
        let lasting = OfferRow {
            expires_at: 5_000,
            ..offer(s, "cat", "ann", Role::Viewer, 3)
        };
        to_cat.push(access.offer(&lasting, limits).await);
    }

    // assert: the session's third is refused, a renewal is not; cat's third is dropped
    assert_eq!(first.unwrap(), Offered::Pending);
    assert_eq!(second.unwrap(), Offered::Pending);
    assert!(
        matches!(third, Err(StoreError::Conflict(why)) if why == OFFERS_PER_SESSION),
        "{third:?}"
    );
    assert_eq!(renewed.unwrap(), Offered::Pending);
    assert_eq!(to_cat[0].as_ref().unwrap(), &Offered::Pending);
    assert_eq!(to_cat[1].as_ref().unwrap(), &Offered::Pending);
    assert!(
        matches!(to_cat[2], Err(StoreError::Conflict(_))),
        "s1 is full"
    );
    let on_s1 = access.session_offers(s1, 5).await.unwrap();
    assert_eq!(on_s1[1].role, Role::Owner, "renewed: {on_s1:?}");

    // act: s1's offers expire; s1 has room again, but cat still holds two
    let after = access
        .offer(&offer(s1, "cat", "ann", Role::Viewer, 1_000), limits)
        .await;

    // assert
    assert_eq!(after.unwrap(), Offered::Dropped);
    assert!(access.session_offers(s1, 1_000).await.unwrap().is_empty());
}

pub async fn offers_to_one_name_raced_from_two_nodes_stay_within_its_bound(db: Db) {
    // arrange: ann owns eight sessions; nodes a and b; at most three offers per name
    let a = db.open("a").await;
    let b = db.open("b").await;
    let limits = OfferLimits {
        per_session: 10,
        per_user: 3,
    };
    let mut sessions = Vec::new();
    for i in 0..8 {
        let id = a.log.open_session(&format!("r{i}"), None).await.unwrap().id;
        a.access.set_member(id, "ann", Role::Owner).await.unwrap();
        sessions.push(id);
    }

    // act: every session offers cat a role at once, alternating nodes
    let offers = sessions.iter().enumerate().map(|(i, &s)| {
        let access = if i % 2 == 0 { &a.access } else { &b.access };
        async move {
            access
                .offer(&offer(s, "cat", "ann", Role::Viewer, 1), limits)
                .await
        }
    });
    let results = futures_util::future::join_all(offers).await;

    // assert: three pending, the rest dropped
    let pending = results
        .iter()
        .filter(|r| matches!(r, Ok(Offered::Pending)))
        .count();
    assert_eq!(pending, 3, "{results:?}");
    let mut stored = 0;
    for s in sessions {
        stored += a.access.session_offers(s, 2).await.unwrap().len();
    }
    assert_eq!(stored, 3);
}
