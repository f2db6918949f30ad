//! Ownership and quotas, tried as an attacker with an ordinary account would, against a real
//! server on a loopback port with a real SQLite store: taking over a session its owner left,
//! claiming a session nobody owns, redeeming a link whose creator has left, probing for
//! accounts through sharing, pushing a session into someone's list, flooding them with offers,
//! and filling the server with sessions and log bytes. Each test is
//! the attack; it passes when the attack fails safely.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use moor_protocol::close;
use moor_server::quota::Quotas;
use moor_server::session::states::FollowerCount;
use moor_server::ServerConfig;
use reqwest::StatusCode;
use serde_json::{json, Value};

mod support;

use support::client::{output, Attach, Client, WAIT};
use support::{serve_on_loopback, Serving};

const ADMIN: &str = "attacks-admin-token";
const PASSWORD: &str = "correct horse battery";

/// A serving server with users `ann` (a victim), `bob` and `mal` (the attacker), logged in.
struct World {
    serving: Serving,
    _dir: tempfile::TempDir,
    admin: Client,
    ann: Client,
    bob: Client,
    mal: Client,
    server_store: moor_server::store::Stores,
    quotas: Quotas,
    followers: FollowerCount,
}

impl Drop for World {
    fn drop(&mut self) {
        self.serving.shutdown.cancel();
    }
}

async fn world(tweak: impl FnOnce(&mut ServerConfig)) -> World {
    let dir = tempfile::tempdir().unwrap();
    let server = support::build(dir.path(), ADMIN, tweak).await;
    for name in ["ann", "bob", "mal"] {
        server.add_user(name, PASSWORD.into(), false).await.unwrap();
    }
    let (server_store, quotas, followers) =
        (server.store(), server.quotas(), server.follower_count());
    let serving = serve_on_loopback(server).await;
    let addr = serving.addr;
    World {
        admin: Client::new(addr, ADMIN),
        ann: Client::login(addr, "ann", PASSWORD).await,
        bob: Client::login(addr, "bob", PASSWORD).await,
        mal: Client::login(addr, "mal", PASSWORD).await,
        serving,
        _dir: dir,
        server_store,
        quotas,
        followers,
    }
}

/// Polls `done` until it holds (bounded by [`WAIT`]): for counters the server updates after
/// a socket closes, with no event a test could wait on.
async fn until(mut done: impl FnMut() -> bool) {
    tokio::time::timeout(WAIT, async {
        while !done() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the condition holds in time");
}

#[tokio::test]
async fn the_last_owner_cannot_leave_so_her_session_cannot_be_taken_over_by_name() {
    // arrange: ann's bridge made s1
    let w = world(|_| {}).await;
    let bridge = w.ann.bridge("s1").await.socket();
    drop(bridge);

    // act: ann removes herself, then demotes herself; mal attaches a bridge named s1
    let (leave, body) = w.ann.call("DELETE", "/sessions/s1/members/ann", None).await;
    let (demote, _) = w
        .ann
        .call(
            "PUT",
            "/sessions/s1/members/ann",
            Some(json!({"role": "viewer"})),
        )
        .await;
    let attack = w.mal.bridge("s1").await;

    // assert: both refused with a reason, ann still owns s1, mal gets no welcome and no log
    assert_eq!(leave, StatusCode::CONFLICT, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("always has an owner"),
        "{body}"
    );
    assert_eq!(demote, StatusCode::CONFLICT);
    assert_eq!(attack.code(), Some(close::UNAUTHORIZED));
    let (status, _) = w.mal.call("GET", "/sessions/s1/entries", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = w.ann.call("GET", "/sessions/s1/members", None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn an_administrator_reassigns_a_session_and_only_then_may_its_owner_leave() {
    // arrange: ann's session
    let w = world(|_| {}).await;
    drop(w.ann.bridge("s1").await.socket());

    // act: an administrator makes bob owner; ann leaves; bob's bridge attaches
    let (reassign, _) = w
        .admin
        .call(
            "PUT",
            "/sessions/s1/members/bob",
            Some(json!({"role": "owner"})),
        )
        .await;
    let (leave, _) = w.ann.call("DELETE", "/sessions/s1/members/ann", None).await;
    let bob = w.bob.bridge("s1").await;
    let (bob_leaves, _) = w.bob.call("DELETE", "/sessions/s1/members/bob", None).await;

    // assert
    assert_eq!(reassign, StatusCode::NO_CONTENT);
    assert_eq!(leave, StatusCode::NO_CONTENT);
    assert_eq!(bob.code(), None, "the new owner attaches");
    assert_eq!(
        bob_leaves,
        StatusCode::CONFLICT,
        "bob is now the last owner"
    );
}

#[tokio::test]
async fn a_bridge_cannot_claim_a_session_that_existed_before_its_handshake() {
    // arrange: a session with no members at all (made before access control, or whose
    // creator's claim never landed)
    let w = world(|_| {}).await;
    let orphan = w
        .server_store
        .log
        .open_session("orphan", None)
        .await
        .unwrap();

    // act: mal attaches a bridge with its name, then by its id
    let by_name = w.mal.bridge("orphan").await;
    let by_id = w.mal.bridge(&orphan.id.to_string()).await;

    // assert: refused both times; mal has no role on it; a new name is still mal's to create
    assert_eq!(by_name.code(), Some(close::UNAUTHORIZED));
    assert_eq!(by_id.code(), Some(close::UNAUTHORIZED));
    let members = w.server_store.access.members(orphan.id).await.unwrap();
    assert!(members.is_empty(), "{members:?}");
    assert_eq!(w.mal.bridge("mals-own").await.code(), None);
}

#[tokio::test]
async fn a_share_link_made_by_an_owner_who_has_since_left_grants_nothing() {
    // arrange: ann's session, bob made co-owner; bob makes an owner link, then leaves
    let w = world(|_| {}).await;
    drop(w.ann.bridge("s1").await.socket());
    w.ann.share("s1", "bob", &w.bob, "owner").await;
    let (s, link) = w
        .bob
        .call(
            "POST",
            "/sessions/s1/share-links",
            Some(json!({"role": "owner", "uses": 5})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, _) = w.bob.call("DELETE", "/sessions/s1/members/bob", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);

    // act: mal redeems bob's link, then attaches a bridge
    let (redeem, _) = w
        .mal
        .call(
            "POST",
            "/share-links/redeem",
            Some(json!({"token": link["token"]})),
        )
        .await;
    let attack = w.mal.bridge("s1").await;

    // assert: the link is dead; mal has nothing on s1
    assert_eq!(redeem, StatusCode::NOT_FOUND);
    assert_eq!(attack.code(), Some(close::UNAUTHORIZED));
    let (s, _) = w.mal.call("GET", "/sessions/s1", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn revoking_the_link_the_last_owner_joined_through_is_refused() {
    // arrange: ann's session; bob joins as owner through ann's link; ann leaves
    let w = world(|_| {}).await;
    drop(w.ann.bridge("s1").await.socket());
    let (_, link) = w
        .ann
        .call(
            "POST",
            "/sessions/s1/share-links",
            Some(json!({"role": "owner"})),
        )
        .await;
    let (s, _) = w
        .bob
        .call(
            "POST",
            "/share-links/redeem",
            Some(json!({"token": link["token"]})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = w.ann.call("DELETE", "/sessions/s1/members/ann", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);

    // act: bob revokes the link he joined through
    let id = link["id"].as_str().unwrap();
    let (revoke, _) = w
        .bob
        .call("DELETE", &format!("/share-links/{id}"), None)
        .await;

    // assert: refused, and bob still owns the session
    assert_eq!(revoke, StatusCode::CONFLICT);
    let (s, _) = w.bob.call("GET", "/sessions/s1/members", None).await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test]
async fn one_account_cannot_create_sessions_past_its_quota() {
    // arrange: a quota of three sessions per account
    let w = world(|c| c.max_sessions_per_account = 3).await;
    for name in ["m1", "m2", "m3"] {
        drop(w.mal.bridge(name).await.socket());
    }

    // act: mal's bridges try to create more sessions
    let fourth = w.mal.bridge("m4").await;
    let fifth = w.mal.bridge("m5").await;

    // assert: refused with the quota close code and a reason naming the flag; nothing is
    // stored for them; mal's existing sessions still attach; others are unaffected
    let Attach::Closed(code, reason) = fourth else {
        panic!("the fourth session was created");
    };
    assert_eq!(code, close::QUOTA_EXCEEDED);
    assert!(close::is_terminal(code), "moor stops retrying");
    assert!(reason.contains("--max-sessions-per-account"), "{reason}");
    assert_eq!(fifth.code(), Some(close::QUOTA_EXCEEDED));
    for name in ["m4", "m5"] {
        let (s, _) = w
            .admin
            .call("GET", &format!("/sessions/{name}"), None)
            .await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{name} was stored");
    }
    assert_eq!(w.mal.bridge("m1").await.code(), None);
    assert_eq!(w.ann.bridge("a1").await.code(), None);
}

#[tokio::test]
async fn one_account_cannot_hold_more_live_sessions_than_its_quota() {
    // arrange: two live sessions per account
    let w = world(|c| c.max_live_sessions_per_account = 2).await;
    let first = w.mal.bridge("m1").await.socket();
    let _second = w.mal.bridge("m2").await.socket();

    // act: a third live session; a reconnect of a live one; the third after one stops
    let third = w.mal.bridge("m3").await;
    let reconnect = w.mal.bridge("m2").await;
    drop(first);
    until(|| w.quotas.live_sessions("mal") < 2).await;
    let third_again = w.mal.bridge("m3").await;

    // assert
    assert_eq!(third.code(), Some(close::QUOTA_EXCEEDED));
    assert_eq!(
        reconnect.code(),
        None,
        "a live session's bridge may always reconnect"
    );
    assert_eq!(third_again.code(), None);
    assert_eq!(w.quotas.live_sessions("mal"), 2);
    assert_eq!(
        w.ann.bridge("a1").await.code(),
        None,
        "others are unaffected"
    );
}

#[tokio::test]
async fn one_account_cannot_store_more_log_bytes_than_its_quota() {
    // arrange: 20 kB of log per account
    let w = world(|c| c.max_log_bytes_per_account = 20_000).await;
    let mut bridge = w.mal.bridge("m1").await.socket();

    // act: 8 kB is stored, twice; the third 8 kB would pass the quota
    let first = output(&mut bridge, 1, 8_000).await;
    let second = output(&mut bridge, 2, 8_000).await;
    let third = output(&mut bridge, 3, 8_000).await;
    drop(bridge);
    until(|| w.quotas.live_sessions("mal") == 0).await;
    // a later bridge of the account reads the stored total back
    let mut again = w.mal.bridge("m2").await.socket();
    let fourth = output(&mut again, 1, 8_000).await;

    // assert: the batch over the quota is refused, not stored; the account stays refused
    assert_eq!((first, second), (Ok(()), Ok(())));
    assert_eq!(third, Err(close::QUOTA_EXCEEDED));
    assert_eq!(fourth, Err(close::QUOTA_EXCEEDED));
    let stored = w.server_store.access.owned_log_bytes("mal").await.unwrap();
    assert!(stored <= 20_000, "{stored} bytes stored");
    assert_eq!(
        w.ann.bridge("a1").await.code(),
        None,
        "others are unaffected"
    );
}

#[tokio::test]
async fn sessions_nobody_watches_and_no_bridge_feeds_keep_no_state_follower() {
    // arrange: the finding's attack in small: one account opens many sessions through
    // bridges and leaves each
    let w = world(|_| {}).await;
    for i in 0..40 {
        let bridge = w.mal.bridge(&format!("m{i}")).await.socket();
        assert!(
            w.followers.get() >= 1,
            "a live bridge's session is followed"
        );
        drop(bridge);
    }

    // act: wait for every bridge to be gone
    until(|| w.quotas.live_sessions("mal") == 0).await;

    // assert: every follower retired; watching one session starts just its follower
    until(|| w.followers.get() == 0).await;
    let _live = w.ann.bridge("a1").await.socket();
    assert_eq!(w.followers.get(), 1);
}

/// The status and body of `owner`'s `PUT …/members/{user}` on `session`.
async fn put_member(owner: &Client, session: &str, user: &str, role: &str) -> (StatusCode, Value) {
    owner
        .call(
            "PUT",
            &format!("/sessions/{session}/members/{user}"),
            Some(json!({ "role": role })),
        )
        .await
}

/// The names of the sessions in `who`'s session list.
async fn session_names(who: &Client) -> Vec<String> {
    let (s, list) = who.call("GET", "/sessions", None).await;
    assert_eq!(s, StatusCode::OK);
    list.as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The sessions named in `who`'s offers.
async fn offered_names(who: &Client) -> Vec<String> {
    let (s, list) = who.call("GET", "/offers", None).await;
    assert_eq!(s, StatusCode::OK, "{list}");
    list.as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap().to_owned())
        .collect()
}

/// `session`'s member list as its owner `who` sees it, each entry without its name.
async fn member_views(who: &Client, session: &str) -> Vec<(String, Value)> {
    let (s, list) = who
        .call("GET", &format!("/sessions/{session}/members"), None)
        .await;
    assert_eq!(s, StatusCode::OK, "{list}");
    list.as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let mut m = m.clone();
            let name = m["principal"].as_str().unwrap().to_owned();
            m.as_object_mut().unwrap().remove("principal");
            (name, m)
        })
        .collect()
}

#[tokio::test]
async fn sharing_by_name_tells_no_one_who_has_an_account_and_adds_no_one_without_consent() {
    // arrange: mal owns a session with an enticing name
    let w = world(|_| {}).await;
    drop(w.mal.bridge("ann-payroll-urgent").await.socket());

    // act: mal shares it with ann (an account) and with ghost (none)
    let (to_ann, ann_body) = put_member(&w.mal, "ann-payroll-urgent", "ann", "controller").await;
    let (to_ghost, ghost_body) =
        put_member(&w.mal, "ann-payroll-urgent", "ghost", "controller").await;

    // assert: the same answer both times, the same entry in mal's member list (apart from
    // the name); nothing reaches ann's session list, only her offers
    assert_eq!(to_ann, StatusCode::ACCEPTED, "{ann_body}");
    assert_eq!((to_ann, &ann_body), (to_ghost, &ghost_body));
    assert_eq!(ann_body, json!({"status": "offered"}));
    let views = member_views(&w.mal, "ann-payroll-urgent").await;
    let ann_view = &views.iter().find(|(n, _)| n == "ann").unwrap().1;
    let ghost_view = &views.iter().find(|(n, _)| n == "ghost").unwrap().1;
    assert_eq!(ann_view["pending"], json!(true), "{ann_view}");
    assert_eq!(ann_view["role"], ghost_view["role"]);
    assert_eq!(ann_view["pending"], ghost_view["pending"]);
    assert_eq!(ann_view["via_link"], ghost_view["via_link"]);
    assert!(session_names(&w.ann).await.is_empty());
    let (s, _) = w
        .ann
        .call("GET", "/sessions/ann-payroll-urgent", None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "an offer gives no role");
    let (s, offers) = w.ann.call("GET", "/offers", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(offers[0]["name"], "ann-payroll-urgent");
    assert_eq!(offers[0]["offered_by"], "mal");
    assert_eq!(offers[0]["role"], "controller");

    // act: ann declines
    let (decline, _) = w
        .ann
        .call("DELETE", "/offers/ann-payroll-urgent", None)
        .await;

    // assert: gone from her offers and from mal's list; her session list never had it
    assert_eq!(decline, StatusCode::NO_CONTENT);
    assert!(offered_names(&w.ann).await.is_empty());
    assert!(session_names(&w.ann).await.is_empty());
    let views = member_views(&w.mal, "ann-payroll-urgent").await;
    assert!(views.iter().all(|(n, _)| n != "ann"), "{views:?}");
}

#[tokio::test]
async fn an_offer_made_before_an_account_existed_matches_nobody() {
    // arrange: mal offers his session to a name nobody has
    let w = world(|_| {}).await;
    drop(w.mal.bridge("trap").await.socket());
    let (s, _) = put_member(&w.mal, "trap", "newcomer", "viewer").await;
    assert_eq!(s, StatusCode::ACCEPTED);

    // act: the account is made afterwards, and its user looks at their offers
    w.server_store
        .access
        .create_user("newcomer", "x", false, moor_protocol::now_ms() + 1)
        .await
        .unwrap();
    let newcomer_offers = w
        .server_store
        .access
        .offers_to("newcomer", moor_protocol::now_ms())
        .await
        .unwrap();

    // assert: the offer was addressed to a name, not to the account made later
    assert!(newcomer_offers.is_empty(), "{newcomer_offers:?}");
}

#[tokio::test]
async fn an_accepted_offer_is_a_membership_and_an_offer_dies_with_its_makers_ownership() {
    // arrange: ann makes bob co-owner (offered, accepted); bob offers mal control
    let w = world(|_| {}).await;
    drop(w.ann.bridge("s1").await.socket());
    w.ann.share("s1", "bob", &w.bob, "owner").await;
    let (s, _) = put_member(&w.bob, "s1", "mal", "controller").await;
    assert_eq!(s, StatusCode::ACCEPTED);
    assert_eq!(offered_names(&w.mal).await, ["s1"]);

    // act: ann removes bob; mal tries to accept bob's offer
    let (s, _) = w.ann.call("DELETE", "/sessions/s1/members/bob", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (accept, _) = w.mal.call("POST", "/offers/s1/accept", None).await;

    // assert: bob was a member (s1 in his list until removed); mal gets nothing
    assert_eq!(accept, StatusCode::NOT_FOUND);
    assert!(offered_names(&w.mal).await.is_empty());
    assert!(session_names(&w.mal).await.is_empty());
    assert!(session_names(&w.bob).await.is_empty());
    let views = member_views(&w.ann, "s1").await;
    assert_eq!(views.len(), 1, "only ann: {views:?}");
}

#[tokio::test]
async fn an_existing_members_role_changes_directly_and_removing_an_offer_withdraws_it() {
    // arrange: ann shares s1 with bob as a viewer; offers mal a role
    let w = world(|_| {}).await;
    drop(w.ann.bridge("s1").await.socket());
    w.ann.share("s1", "bob", &w.bob, "viewer").await;
    let (s, _) = put_member(&w.ann, "s1", "mal", "viewer").await;
    assert_eq!(s, StatusCode::ACCEPTED);

    // act: ann makes bob a controller; withdraws mal's offer
    let (change, _) = put_member(&w.ann, "s1", "bob", "controller").await;
    let (withdraw, _) = w.ann.call("DELETE", "/sessions/s1/members/mal", None).await;
    let (accept, _) = w.mal.call("POST", "/offers/s1/accept", None).await;

    // assert
    assert_eq!(change, StatusCode::NO_CONTENT);
    let (_, info) = w.bob.call("GET", "/sessions/s1", None).await;
    assert_eq!(info["role"], "controller", "{info}");
    assert_eq!(withdraw, StatusCode::NO_CONTENT);
    assert_eq!(accept, StatusCode::NOT_FOUND);
    assert!(session_names(&w.mal).await.is_empty());
}

#[tokio::test]
async fn a_flood_of_offers_fills_neither_a_session_nor_anyones_list() {
    // arrange: mal owns 21 sessions (made in the store: the bridges are not what is tried)
    let w = world(|_| {}).await;
    let mut sessions = Vec::new();
    for i in 0..21 {
        let row = w
            .server_store
            .log
            .open_session(&format!("flood-{i}"), None)
            .await
            .unwrap();
        assert!(w
            .server_store
            .access
            .claim_session(row.id, "mal")
            .await
            .unwrap());
        sessions.push(format!("flood-{i}"));
    }

    // act: 64 offers on one session, then one more; one offer to ann from every session
    for i in 0..64 {
        let (s, body) = put_member(&w.mal, "flood-0", &format!("n{i}"), "viewer").await;
        assert_eq!(s, StatusCode::ACCEPTED, "{i}: {body}");
    }
    let (over_session, why) = put_member(&w.mal, "flood-0", "n64", "viewer").await;
    let mut to_ann = Vec::new();
    for name in &sessions[1..] {
        to_ann.push(put_member(&w.mal, name, "ann", "viewer").await);
    }

    // assert: the 65th on one session is refused, saying why; every offer to ann is answered
    // alike, but she holds 20 of them
    assert_eq!(over_session, StatusCode::CONFLICT, "{why}");
    assert!(
        why["message"].as_str().unwrap().contains("pending offers"),
        "{why}"
    );
    assert!(
        to_ann
            .iter()
            .all(|a| *a == (StatusCode::ACCEPTED, json!({"status": "offered"}))),
        "{to_ann:?}"
    );
    assert_eq!(offered_names(&w.ann).await.len(), 20);
}
