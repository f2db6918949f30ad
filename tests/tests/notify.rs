//! Notifications through Web Push: a local push service verifies each request's VAPID JWT and
//! decrypts its `aes128gcm` payload with the subscribed device's private key, so what is
//! checked is what a browser would show.

use std::time::Duration;

use moor_e2e::http::RawBody;
use moor_e2e::metrics::{scrape, value};
use moor_e2e::push::Received;
use moor_e2e::{
    eventually, Api, Device, PushService, RawBridge, ServerOpts, SinkReceiver, TestServer,
};
use moor_protocol::bridge::BridgeToServer;
use moor_protocol::notify::{NotifyAction, NotifyClass};
use moor_protocol::{kinds, now_ms, NewEntry, ProducerId};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);
const METRICS_TOKEN: &str = "metrics-token-for-the-scraper";

/// A server that sends to loopback push services and looks at its outbox often.
fn opts() -> ServerOpts {
    ServerOpts::new()
        .flag("--push-allow-loopback-http", true)
        .flag("--notify-poll-ms", 50)
        .flag("--notify-retry-ms", 50)
}

/// Attempts to deliver to `sink` that ended with `outcome`, as `moord` last counted them.
async fn notifications(server: &TestServer, sink: &str, outcome: &str) -> f64 {
    let s = scrape(&server.url(), METRICS_TOKEN).await;
    value(
        &s,
        "moord_notifications_total",
        &[("sink", sink), ("outcome", outcome)],
    )
    .unwrap_or(0.0)
}

/// Adds user `name` and returns an API client with their token.
async fn user(server: &TestServer, name: &str) -> Api {
    let admin = server.api();
    admin.add_user(name, "correct horse battery").await;
    let tokens = admin.login(name, "correct horse battery").await;
    let token = tokens["access_token"].as_str().expect("access token");
    Api::new(server.url(), token)
}

/// Adds a webhook, `ci`, for the user of `api`, posting to `sinks`' path `hook`, which checks
/// its signatures with the secret the server gave.
async fn signed_webhook(api: &Api, sinks: &SinkReceiver) {
    let (status, hook) = add_sink(
        api,
        json!({"kind": "webhook", "label": "ci", "url": sinks.url("hook")}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{hook:?}");
    let secret = hook["secret"].as_str().expect("the webhook's secret, once");
    sinks.expect_signed("hook", secret);
}

/// Asserts that `stranger` cannot delete `path` (to them it does not exist) and its `owner`
/// can.
async fn assert_only_the_owner_deletes(owner: &Api, stranger: &Api, path: &str) {
    assert_eq!(
        stranger.authed(Method::DELETE, path, None).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        owner.authed(Method::DELETE, path, None).await.status,
        StatusCode::NO_CONTENT
    );
}

/// For [`PushService::wait_until`]: a message about the permission request `id` has arrived.
fn request_arrived(id: &str) -> impl FnMut(&[Received], &[(String, u16)]) -> bool + '_ {
    move |r, _| {
        r.iter()
            .any(|m| m.message.request_id.as_deref() == Some(id))
    }
}

/// Subscribes `device` for the user of `api`, after pointing the push service at the server's
/// VAPID key.
async fn subscribe(api: &Api, push: &PushService, device: &Device, label: &str) -> String {
    let key = api.authed(Method::GET, "/api/v1/notify/vapid", None).await;
    assert_eq!(key.status, StatusCode::OK, "{:?}", key.body);
    push.expect_vapid_key(key.body["public_key"].as_str().expect("public key"));
    let body = json!({
        "device": label,
        "endpoint": device.endpoint,
        "keys": {"p256dh": device.p256dh, "auth": device.auth},
    });
    let r = api
        .authed(
            Method::POST,
            "/api/v1/notify/subscriptions",
            Some(RawBody::Json(body)),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    r.body["id"].as_str().expect("subscription id").to_owned()
}

/// A bridge of `api`'s user on session `name`, sending typed entries by hand.
struct Agent {
    raw: RawBridge,
    next: u64,
    session: moor_protocol::SessionId,
}

impl Agent {
    async fn start(server: &TestServer, api: &Api, name: &str) -> Self {
        let mut raw = RawBridge::connect(server.addr(), Some(api.token()))
            .await
            .expect("bridge connects");
        let welcome = raw.hello(name, ProducerId::new()).await;
        Self {
            raw,
            next: 1,
            session: welcome.session_id,
        }
    }

    /// Sends `entries` (kind, payload, age in ms) in one batch and waits for the ack: they
    /// are committed.
    async fn send(&mut self, entries: &[(&str, Value, i64)]) {
        let now = now_ms();
        let batch: Vec<NewEntry> = entries
            .iter()
            .enumerate()
            .map(|(i, (kind, payload, age))| NewEntry {
                producer_seq: self.next + i as u64,
                ts: now - age,
                kind: (*kind).to_owned(),
                payload: payload.clone(),
            })
            .collect();
        self.next += batch.len() as u64;
        self.raw
            .send(&BridgeToServer::Entries { entries: batch })
            .await;
        self.raw.wait_ack(self.next - 1, WAIT).await;
    }
}

fn permission(id: &str, command: &str, age: i64) -> (&'static str, Value, i64) {
    (
        kinds::AGENT_PERMISSION_REQUEST,
        json!({"request_id": id, "tool_name": "Bash", "input": {"command": command}}),
        age,
    )
}

/// alice on `server`, with her phone subscribed to `push`.
async fn alice_with_a_phone(server: &TestServer, push: &PushService) -> (Api, Device) {
    let alice = user(server, "alice").await;
    let phone = push.subscribe();
    subscribe(&alice, push, &phone, "phone").await;
    (alice, phone)
}

fn turn(text: &str, age: i64) -> (&'static str, Value, i64) {
    (
        kinds::AGENT_RESULT,
        json!({"subtype": "success", "result": text, "cost_usd": 0.0125}),
        age,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_request_reaches_the_owners_phone_with_buttons_and_its_answer_retracts_it() {
    // arrange
    let push = PushService::start().await;
    let server = TestServer::start(opts()).await;
    let (alice, phone) = alice_with_a_phone(&server, &push).await;
    let mut agent = Agent::start(&server, &alice, "perm-demo").await;

    // act: the agent asks
    agent.send(&[permission("req-1", "rm -rf build", 0)]).await;

    // assert: one high-urgency notification with Approve/Deny, the command, its tag
    push.wait_until(WAIT, "the permission notification", |r, _| !r.is_empty())
        .await;
    let got = push.received_by(&phone);
    assert_eq!(got.len(), 1);
    let m = &got[0].message;
    assert_eq!(m.class, NotifyClass::Permission);
    assert_eq!(m.title, "perm-demo: Permission: Bash");
    assert_eq!(m.body, "rm -rf build");
    assert_eq!(m.actions, vec![NotifyAction::Approve, NotifyAction::Deny]);
    assert_eq!(m.tag, format!("perm:{}:req-1", agent.session));
    assert_eq!(m.request_id.as_deref(), Some("req-1"));
    assert!(!m.close);
    assert_eq!(got[0].urgency.as_deref(), Some("high"));
    assert!(got[0].topic.is_some());

    // act: the request is answered elsewhere (the terminal)
    agent
        .send(&[(
            kinds::AGENT_PERMISSION_RESOLVED,
            json!({"request_id": "req-1", "decision": "allow", "by": "local"}),
            0,
        )])
        .await;

    // assert: the notification is closed on the phone (same tag)
    push.wait_until(WAIT, "the retraction", |r, _| r.len() >= 2)
        .await;
    let got = push.received_by(&phone);
    assert_eq!(got.len(), 2);
    assert!(got[1].message.close);
    assert_eq!(got[1].message.tag, got[0].message.tag);
    assert!(got[1].message.actions.is_empty());
    assert!(push.rejections().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_coalesce_old_ones_fold_into_a_summary_and_a_gone_device_is_removed() {
    // arrange
    let push = PushService::start().await;
    let server = TestServer::start(opts().flag("--metrics-token", METRICS_TOKEN)).await;
    let (alice, phone) = alice_with_a_phone(&server, &push).await;
    let mut agent = Agent::start(&server, &alice, "turns").await;

    // act: three turns finish in one commit
    agent
        .send(&[turn("first", 0), turn("second", 0), turn("third\nmore", 0)])
        .await;

    // assert: one notification for three
    push.wait_until(WAIT, "the coalesced turns", |r, _| !r.is_empty())
        .await;
    let got = push.received_by(&phone);
    assert_eq!(got.len(), 1, "{got:#?}");
    let m = &got[0].message;
    assert_eq!((m.class, m.count), (NotifyClass::Turn, 3));
    assert_eq!(m.title, "turns: 3 × turns finished");
    assert_eq!(m.body, "third ($0.0125)");
    assert!(m.actions.is_empty());

    // act: entries from an hour ago (a bridge back from a long outage) arrive
    let hour = 3_600_000;
    agent
        .send(&[
            turn("old 1", hour),
            permission("old-req", "make", hour),
            turn("old 2", hour),
        ])
        .await;

    // assert: one summary, not three notifications
    push.wait_until(WAIT, "the summary", |r, _| r.len() >= 2)
        .await;
    let got = push.received_by(&phone);
    assert_eq!(got.len(), 2, "{got:#?}");
    let m = &got[1].message;
    assert_eq!((m.class, m.count), (NotifyClass::Summary, 3));
    assert_eq!(m.body, "1 permission requests, 2 turns finished");

    // act: the push service says the subscription is gone
    push.answer_with(&phone, 410);
    agent.send(&[turn("after", 0)]).await;

    // assert: the server removed it
    push.wait_until(WAIT, "the 410", |_, refused| !refused.is_empty())
        .await;
    eventually(WAIT, "the gone subscription is removed", || async {
        let r = alice
            .authed(Method::GET, "/api/v1/notify/subscriptions", None)
            .await;
        r.body.as_array().is_some_and(|a| a.is_empty())
    })
    .await;
    assert!(push.rejections().is_empty());
    // and the metrics count two sent and one gone
    assert_eq!(notifications(&server, "webpush", "sent").await, 2.0);
    assert_eq!(notifications(&server, "webpush", "gone").await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_push_service_is_retried_with_backoff_then_given_up_and_the_row_deleted() {
    // arrange: 4 attempts at most, 100 ms first retry, settled rows kept 2 s
    let push = PushService::start().await;
    let server = TestServer::start(
        ServerOpts::new()
            .flag("--push-allow-loopback-http", true)
            .flag("--notify-poll-ms", 50)
            .flag("--notify-retry-ms", 100)
            .flag("--notify-max-attempts", 4)
            .flag("--notify-keep-ms", 2_000)
            .flag("--metrics-token", METRICS_TOKEN),
    )
    .await;
    let (alice, phone) = alice_with_a_phone(&server, &push).await;
    push.answer_with(&phone, 500);
    let mut agent = Agent::start(&server, &alice, "failing").await;

    // act
    agent.send(&[turn("done", 0)]).await;

    // assert: four attempts, each wait at least double the one before
    push.wait_until(WAIT, "four attempts", |_, refused| refused.len() >= 4)
        .await;
    let outbox = |state: &'static str| {
        let base = server.url();
        async move {
            let s = scrape(&base, METRICS_TOKEN).await;
            value(&s, "moord_notify_outbox_rows", &[("state", state)])
        }
    };
    eventually(WAIT, "the given-up row counted as dropped", || async {
        outbox("dropped").await == Some(1.0) && outbox("pending").await == Some(0.0)
    })
    .await;
    let at = push.refused_at(&phone);
    assert_eq!(at.len(), 4, "{at:?}");
    for (i, pair) in at.windows(2).enumerate() {
        let wait = pair[1] - pair[0];
        assert!(
            wait >= 100 << i,
            "attempt {} came {wait} ms after the one before",
            i + 2
        );
    }

    // assert: the dropped row is deleted after its keep, and no fifth attempt was made
    eventually(WAIT, "the dropped row deleted", || async {
        outbox("dropped").await == Some(0.0)
    })
    .await;
    assert_eq!(outbox("pending").await, Some(0.0));
    assert_eq!(outbox("sent").await, Some(0.0));
    assert_eq!(push.refused().len(), 4);
    assert!(push.received().is_empty());
    assert_eq!(notifications(&server, "webpush", "retry").await, 4.0);
    assert_eq!(notifications(&server, "webpush", "sent").await, 0.0);
}

/// Adds a sink for the user of `api`; the created sink as answered.
async fn add_sink(api: &Api, body: Value) -> (StatusCode, Value) {
    let r = api
        .authed(
            Method::POST,
            "/api/v1/notify/sinks",
            Some(RawBody::Json(body)),
        )
        .await;
    (r.status, r.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ntfy_and_webhook_sinks_get_the_notification_signed_and_a_failing_webhook_is_retried() {
    // arrange: alice has an ntfy topic (with a token) and a webhook, no browser
    let sinks = SinkReceiver::start().await;
    let server = TestServer::start(opts().flag("--metrics-token", METRICS_TOKEN)).await;
    let alice = user(&server, "alice").await;
    let (status, ntfy) = add_sink(
        &alice,
        json!({"kind": "ntfy", "label": "ntfy", "url": sinks.url("alice-topic"), "token": "tk_abc"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{ntfy:?}");
    assert!(ntfy.get("secret").is_none());
    signed_webhook(&alice, &sinks).await;
    let listed = alice
        .authed(Method::GET, "/api/v1/notify/sinks", None)
        .await;
    let listed = listed.body.as_array().expect("sinks").clone();
    assert_eq!(listed.len(), 2);
    assert!(
        listed.iter().all(|s| s.get("secret").is_none()),
        "{listed:?}"
    );
    let mut agent = Agent::start(&server, &alice, "sinky").await;

    // act: a permission request
    agent.send(&[permission("req-1", "rm -rf build", 0)]).await;

    // assert: ntfy gets the text with its headers; the webhook the signed JSON
    sinks
        .wait_until(WAIT, "both sinks", |hits| {
            hits.iter().any(|h| h.path == "alice-topic") && hits.iter().any(|h| h.path == "hook")
        })
        .await;
    let n = &sinks.hits("alice-topic")[0];
    assert_eq!(n.text(), "rm -rf build");
    assert_eq!(n.header("title"), Some("sinky: Permission: Bash"));
    assert_eq!(n.header("priority"), Some("5"));
    assert_eq!(n.header("authorization"), Some("Bearer tk_abc"));
    assert!(n
        .header("click")
        .unwrap()
        .ends_with(&format!("/#/s/{}", agent.session)));
    let w = &sinks.hits("hook")[0];
    assert_eq!(w.header("content-type"), Some("application/json"));
    let body = w.json();
    assert_eq!(body["type"], "moor.notification");
    assert_eq!(body["message"]["request_id"], "req-1");
    assert_eq!(body["message"]["body"], "rm -rf build");
    assert_eq!(body["message"]["actions"], json!(["approve", "deny"]));
    assert_eq!(
        body["timestamp"].as_i64().map(|t| t.to_string()).as_deref(),
        w.header("x-moor-timestamp")
    );

    // act: the webhook fails twice, then takes it
    sinks.answer_next("hook", &[500, 503]);
    agent.send(&[turn("built", 0)]).await;

    // assert: retried through the outbox until it is taken
    sinks
        .wait_until(WAIT, "the turn after two failures", |hits| {
            hits.iter()
                .filter(|h| h.path == "hook" && h.json()["message"]["class"] == "turn")
                .map(|h| h.status)
                .collect::<Vec<_>>()
                == vec![500, 503, 200]
        })
        .await;
    assert!(sinks.rejections().is_empty());
    // and the metrics count each attempt by sink and outcome (the retries went to the
    // webhook alone: ntfy had taken the turn on the first attempt)
    eventually(WAIT, "the webhook's success counted", || async {
        notifications(&server, "webhook", "sent").await == 2.0
    })
    .await;
    assert_eq!(notifications(&server, "webhook", "retry").await, 2.0);
    assert_eq!(notifications(&server, "ntfy", "sent").await, 2.0);
    assert_eq!(notifications(&server, "ntfy", "retry").await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_goes_only_to_the_target_that_failed_and_the_other_gets_one_copy() {
    // arrange: alice has a phone and a webhook; the webhook fails once
    let push = PushService::start().await;
    let sinks = SinkReceiver::start().await;
    let server = TestServer::start(opts()).await;
    let alice = user(&server, "alice").await;
    let phone = push.subscribe();
    subscribe(&alice, &push, &phone, "phone").await;
    signed_webhook(&alice, &sinks).await;
    sinks.answer_next("hook", &[503]);
    let mut agent = Agent::start(&server, &alice, "two-targets").await;

    // act: one turn finishes; the webhook refuses it, then takes the retry
    agent.send(&[turn("built", 0)]).await;
    sinks
        .wait_until(WAIT, "the webhook's retry taken", |hits| {
            hits.iter().map(|h| h.status).collect::<Vec<_>>() == vec![503, 200]
        })
        .await;

    // a later notification orders after the retry on the phone: once it is there, the retry
    // has been handled for every target
    agent.send(&[permission("req-1", "ls", 0)]).await;
    push.wait_until(WAIT, "the later notification", request_arrived("req-1"))
        .await;

    // assert: the phone, which took the first attempt, got the turn once
    let turns: Vec<_> = push
        .received_by(&phone)
        .into_iter()
        .filter(|m| m.message.class == NotifyClass::Turn)
        .collect();
    assert_eq!(turns.len(), 1, "{turns:#?}");
    assert_eq!(turns[0].message.body, "built ($0.0125)");
    assert!(push.rejections().is_empty());
    assert!(sinks.rejections().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_muted_session_and_a_muted_class_send_nothing_until_unmuted() {
    // arrange: alice's phone, two sessions
    let push = PushService::start().await;
    let server = TestServer::start(opts().flag("--metrics-token", METRICS_TOKEN)).await;
    let alice = user(&server, "alice").await;
    let bob = user(&server, "bob").await;
    let phone = push.subscribe();
    subscribe(&alice, &push, &phone, "phone").await;
    let mut quiet = Agent::start(&server, &alice, "muted").await;
    let mut loud = Agent::start(&server, &alice, "loud").await;
    let put = |api: &Api, path: String| {
        let api = api.clone();
        async move { api.authed(Method::PUT, &path, None).await.status }
    };

    // act: mute the session "muted" and the class "turn"
    let muted_session = format!("/api/v1/notify/mutes/sessions/{}", quiet.session);
    assert_eq!(
        put(&alice, muted_session.clone()).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        put(&alice, "/api/v1/notify/mutes/classes/turn".into()).await,
        StatusCode::NO_CONTENT
    );
    // bob has no role on alice's session; an unknown class is not one
    assert_eq!(
        put(&bob, muted_session.clone()).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        put(&alice, "/api/v1/notify/mutes/classes/email".into()).await,
        StatusCode::NOT_FOUND
    );
    let listed = alice
        .authed(Method::GET, "/api/v1/notify/mutes", None)
        .await;
    assert_eq!(
        listed.body,
        json!({"classes": ["turn"], "sessions": [quiet.session]})
    );

    // act: the muted session asks; the other finishes a turn (muted class), then asks
    quiet.send(&[permission("q-1", "rm -rf /", 0)]).await;
    loud.send(&[turn("done", 0)]).await;
    loud.send(&[permission("l-1", "ls", 0)]).await;

    // assert: once nothing waits in the outbox, only the unmuted class of the unmuted
    // session has arrived
    push.wait_until(WAIT, "the unmuted request", request_arrived("l-1"))
        .await;
    eventually(WAIT, "the three rows settled", || async {
        let s = scrape(&server.url(), METRICS_TOKEN).await;
        let rows = |state| value(&s, "moord_notify_outbox_rows", &[("state", state)]);
        rows("pending") == Some(0.0) && rows("sent") == Some(3.0)
    })
    .await;
    let got: Vec<_> = push
        .received_by(&phone)
        .into_iter()
        .map(|m| (m.message.class, m.message.request_id))
        .collect();
    assert_eq!(got, vec![(NotifyClass::Permission, Some("l-1".to_owned()))]);

    // act: unmute both; the same kinds notify again
    for path in [
        muted_session,
        "/api/v1/notify/mutes/classes/turn".to_owned(),
    ] {
        let r = alice.authed(Method::DELETE, &path, None).await;
        assert_eq!(r.status, StatusCode::NO_CONTENT);
    }
    quiet.send(&[permission("q-2", "ls", 0)]).await;
    loud.send(&[turn("again", 0)]).await;

    // assert
    push.wait_until(WAIT, "both after unmuting", |r, _| r.len() >= 3)
        .await;
    let got: Vec<_> = push
        .received_by(&phone)
        .into_iter()
        .map(|m| (m.message.class, m.message.session))
        .collect();
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got.contains(&(NotifyClass::Permission, quiet.session)));
    assert!(got.contains(&(NotifyClass::Turn, loud.session)));
    assert!(push.rejections().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sinks_refuse_plain_http_are_bounded_per_user_and_removed_by_their_owner_only() {
    // arrange
    let server = TestServer::start(opts()).await;
    let alice = user(&server, "alice").await;
    let bob = user(&server, "bob").await;

    // act + assert: plain http off loopback, a bad label, a bad kind
    for body in [
        json!({"kind": "webhook", "label": "x", "url": "http://example.com/hook"}),
        json!({"kind": "ntfy", "label": "", "url": "https://ntfy.sh/topic"}),
        json!({"kind": "ntfy", "label": "x", "url": "https://ntfy.sh/t", "token": "a b"}),
        json!({"kind": "email", "label": "x", "url": "https://example.com"}),
    ] {
        let (status, _) = add_sink(&alice, body.clone()).await;
        assert!(status.is_client_error(), "{body}: {status}");
    }
    // at most 8
    let mut ids = Vec::new();
    for i in 0..8 {
        let (status, s) = add_sink(
            &alice,
            json!({"kind": "ntfy", "label": format!("t{i}"), "url": format!("https://ntfy.sh/t{i}")}),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{s:?}");
        ids.push(s["id"].as_str().unwrap().to_owned());
    }
    let (status, _) = add_sink(
        &alice,
        json!({"kind": "ntfy", "label": "t9", "url": "https://ntfy.sh/t9"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // bob cannot remove alice's; alice can
    let path = format!("/api/v1/notify/sinks/{}", ids[0]);
    assert_only_the_owner_deletes(&alice, &bob, &path).await;
    let listed = alice
        .authed(Method::GET, "/api/v1/notify/sinks", None)
        .await;
    assert_eq!(listed.body.as_array().map(Vec::len), Some(7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_committed_before_a_crash_is_sent_once_after_the_restart() {
    // arrange: a node that does not send (it crashes before it would)
    let push = PushService::start().await;
    let mut server = TestServer::start(opts().flag("--notify-sender", false)).await;
    let (alice, phone) = alice_with_a_phone(&server, &push).await;
    let mut agent = Agent::start(&server, &alice, "crashy").await;
    agent.send(&[permission("req-1", "cargo publish", 0)]).await;

    // act: SIGKILL after the commit, restart as a sender
    server.kill().await;
    server.set_flag("--notify-sender", true);
    server.restart().await;

    // assert: delivered once; a later notification passes it, and it never comes again
    push.wait_until(WAIT, "the notification after the restart", |r, _| {
        !r.is_empty()
    })
    .await;
    let alice = Api::new(server.url(), alice.token());
    let mut agent = Agent::start(&server, &alice, "crashy-2").await;
    agent.send(&[permission("req-2", "ls", 0)]).await;
    push.wait_until(WAIT, "the later notification", request_arrived("req-2"))
        .await;
    let first: Vec<_> = push
        .received_by(&phone)
        .into_iter()
        .filter(|m| m.message.request_id.as_deref() == Some("req-1"))
        .collect();
    assert_eq!(first.len(), 1, "{first:#?}");
    assert_eq!(first[0].message.body, "cargo publish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_refuse_plain_http_endpoints_and_bad_keys() {
    let push = PushService::start().await;
    let server = TestServer::start(ServerOpts::new()).await;
    let alice = user(&server, "alice").await;
    let device = push.subscribe();
    let post = |endpoint: String, p256dh: String| {
        let alice = alice.clone();
        async move {
            let body = json!({"device": "x", "endpoint": endpoint, "keys": {"p256dh": p256dh, "auth": "AAAAAAAAAAAAAAAAAAAAAA"}});
            alice
                .authed(
                    Method::POST,
                    "/api/v1/notify/subscriptions",
                    Some(RawBody::Json(body)),
                )
                .await
        }
    };
    // a loopback http endpoint without --push-allow-loopback-http
    let r = post(device.endpoint.clone(), device.p256dh.clone()).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    // an https endpoint with a key that is not a P-256 point
    let r = post("https://push.example/x".into(), "AAAA".into()).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    // a good one is listed, and removed by its owner only
    let r = post("https://push.example/x".into(), device.p256dh.clone()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let id = r.body["id"].as_str().unwrap().to_owned();
    let bob = user(&server, "bob").await;
    let path = format!("/api/v1/notify/subscriptions/{id}");
    assert_only_the_owner_deletes(&alice, &bob, &path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_is_accepted_only_while_its_request_is_pending() {
    // arrange: a pending request
    let server = TestServer::start(opts()).await;
    let alice = user(&server, "alice").await;
    let mut agent = Agent::start(&server, &alice, "stale").await;
    agent.send(&[permission("req-1", "ls", 0)]).await;
    let session = agent.session;
    let decide = |id: &'static str, request: &'static str| {
        let alice = alice.clone();
        async move {
            let payload = json!({"request_id": request, "decision": "allow"});
            alice
                .post_input_kind_raw(session, id, kinds::INPUT_PERMISSION, payload)
                .await
        }
    };

    // act + assert: the first Approve is taken; one for a request never made is refused
    assert_eq!(decide("n1", "req-1").await.status, StatusCode::OK);
    let unknown = decide("n2", "req-9").await;
    assert_eq!(unknown.status, StatusCode::CONFLICT, "{:?}", unknown.body);

    // act: the request is resolved
    agent
        .send(&[(
            kinds::AGENT_PERMISSION_RESOLVED,
            json!({"request_id": "req-1", "decision": "allow"}),
            0,
        )])
        .await;

    // assert: a second Approve (another notification, a fresh client_msg_id) is refused as
    // stale, and nothing was stored for it
    let stale = decide("n3", "req-1").await;
    assert_eq!(stale.status, StatusCode::CONFLICT, "{:?}", stale.body);
    let entries = server.entries_all(agent.session).await;
    let decisions = entries
        .iter()
        .filter(|e| e.kind == kinds::INPUT_PERMISSION)
        .count();
    assert_eq!(decisions, 1);
}

/// Bench (run with `--run-ignored only`): notifications the outbox sustains per second, and the
/// delay from the causing entry's commit (its ack to the bridge) to the push request, p50/p99.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "bench: prints figures, asserts only completeness"]
async fn bench_outbox_throughput_and_commit_to_push_delay() {
    const SESSIONS: usize = 20;
    const ROUNDS: usize = 10;
    let push = PushService::start().await;
    let server = TestServer::start(opts()).await;
    let (alice, _phone) = alice_with_a_phone(&server, &push).await;
    let mut agents = Vec::new();
    for i in 0..SESSIONS {
        agents.push(Agent::start(&server, &alice, &format!("bench-{i}")).await);
    }

    // delay: one permission request at a time, committed (acked) then timed to its push
    let mut delays = Vec::new();
    for round in 0..ROUNDS {
        for (i, agent) in agents.iter_mut().enumerate().take(5) {
            let id = format!("d-{round}-{i}");
            let before = push.received().len();
            agent.send(&[permission(&id, "true", 0)]).await;
            let committed = now_ms();
            push.wait_until(WAIT, "the timed notification", |r, _| r.len() > before)
                .await;
            let got = push.received();
            let m = got
                .iter()
                .find(|m| m.message.request_id.as_deref() == Some(id.as_str()));
            delays.push(m.expect("timed notification").at - committed);
        }
    }
    delays.sort_unstable();
    let pct = |p: f64| delays[((delays.len() as f64 - 1.0) * p).round() as usize];

    // throughput: each session commits ROUNDS requests in one batch, each its own notification
    let before = push.received().len();
    let started = std::time::Instant::now();
    for (i, agent) in agents.iter_mut().enumerate() {
        let batch: Vec<_> = (0..ROUNDS)
            .map(|round| permission(&format!("t-{round}-{i}"), "true", 0))
            .collect();
        agent.send(&batch).await;
    }
    let total = SESSIONS * ROUNDS;
    push.wait_until(Duration::from_secs(120), "every notification", |r, _| {
        r.len() >= before + total
    })
    .await;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "notify bench: commit→push delay p50 {} ms, p99 {} ms ({} samples, --notify-poll-ms 50); \
         {total} notifications in {secs:.2} s = {:.0}/s",
        pct(0.5),
        pct(0.99),
        delays.len(),
        total as f64 / secs
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_quiet_hours_notifications_arrive_without_sound_on_every_target() {
    // arrange: alice's phone and ntfy topic, one session
    let push = PushService::start().await;
    let sinks = SinkReceiver::start().await;
    let server = TestServer::start(opts()).await;
    let (alice, phone) = alice_with_a_phone(&server, &push).await;
    let (status, _) = add_sink(
        &alice,
        json!({"kind": "ntfy", "label": "ntfy", "url": sinks.url("night")}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let mut agent = Agent::start(&server, &alice, "night").await;
    let quiet = |body: Value| {
        let alice = alice.clone();
        async move {
            let r = alice
                .authed(
                    Method::PUT,
                    "/api/v1/notify/quiet-hours",
                    Some(RawBody::Json(body)),
                )
                .await;
            (r.status, r.body)
        }
    };
    let get = || async {
        alice
            .authed(Method::GET, "/api/v1/notify/quiet-hours", None)
            .await
    };
    // Local times in Tokyo (UTC+9 all year), `offset` minutes from now.
    let tokyo = |offset: i64| {
        let minute = (now_ms() / 60_000 + 9 * 60 + offset).rem_euclid(24 * 60);
        format!("{:02}:{:02}", minute / 60, minute % 60)
    };

    // act: bad quiet hours are refused and set nothing
    for bad in [
        json!({"start": "25:00", "end": "07:00", "time_zone": "UTC"}),
        json!({"start": "22:00", "end": "22:00", "time_zone": "UTC"}),
        json!({"start": "22:00", "end": "07:00", "time_zone": "Mars/Olympus"}),
    ] {
        let (status, body) = quiet(bad.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body:?}");
    }
    assert_eq!(get().await.status, StatusCode::NOT_FOUND);

    // act: quiet from an hour ago to an hour from now, in her time zone; a request comes
    let window = json!({"start": tokyo(-60), "end": tokyo(60), "time_zone": "Asia/Tokyo"});
    let (status, body) = quiet(window.clone()).await;
    assert_eq!((status, &body), (StatusCode::OK, &window));
    assert_eq!(get().await.body, window);
    agent.send(&[permission("n-1", "make", 0)]).await;

    // assert: it arrives everywhere, marked quiet (ntfy's lowest priority)
    push.wait_until(WAIT, "the quiet request", request_arrived("n-1"))
        .await;
    sinks
        .wait_until(WAIT, "the quiet ntfy message", |hits| !hits.is_empty())
        .await;
    let got = push.received_by(&phone);
    assert!(got[0].message.quiet, "{:?}", got[0].message);
    assert_eq!(sinks.hits("night")[0].header("priority"), Some("1"));

    // act: quiet hours later in the day, then a request
    let later = json!({"start": tokyo(120), "end": tokyo(180), "time_zone": "Asia/Tokyo"});
    assert_eq!(quiet(later).await.0, StatusCode::OK);
    agent.send(&[permission("n-2", "make", 0)]).await;

    // assert: it is not quiet
    push.wait_until(WAIT, "the loud request", request_arrived("n-2"))
        .await;
    sinks
        .wait_until(WAIT, "the loud ntfy message", |hits| hits.len() >= 2)
        .await;
    let got = push.received_by(&phone);
    assert!(!got[1].message.quiet, "{:?}", got[1].message);
    assert_eq!(sinks.hits("night")[1].header("priority"), Some("5"));

    // act: no quiet hours any more
    let r = alice
        .authed(Method::DELETE, "/api/v1/notify/quiet-hours", None)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(get().await.status, StatusCode::NOT_FOUND);
    assert!(push.rejections().is_empty());
}

/// The Approve / Deny links the ntfy topic `path` got with the notification saying `text`
/// (its `Actions` header), if any.
fn ntfy_links(sinks: &SinkReceiver, path: &str, text: &str) -> Option<(String, String)> {
    let hit = sinks.hits(path).into_iter().find(|h| h.text() == text)?;
    let actions = hit.header("actions")?.to_owned();
    let url = |label: &str| {
        actions
            .split(';')
            .map(|a| a.split(',').map(str::trim).collect::<Vec<_>>())
            .find(|parts| parts.first() == Some(&"http") && parts.get(1) == Some(&label))
            .and_then(|parts| parts.get(2).map(|u| (*u).to_owned()))
            .expect("an http action with the label")
    };
    assert!(actions.contains("method=POST"), "{actions}");
    Some((url("Approve"), url("Deny")))
}

/// Posts a decision link as ntfy's app does: no credentials, no body.
async fn press(link: &str) -> StatusCode {
    reqwest::Client::new()
        .post(link)
        .send()
        .await
        .expect("the link answers")
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ntfy_buttons_decide_a_pending_request_once_and_only_for_who_may_still_decide() {
    // arrange: alice (owner) has an ntfy topic and a webhook; carol (controller) and bob
    // (viewer) have ntfy topics
    let sinks = SinkReceiver::start().await;
    let server = TestServer::start(opts()).await;
    let alice = user(&server, "alice").await;
    let bob = user(&server, "bob").await;
    let carol = user(&server, "carol").await;
    for (api, topic) in [(&alice, "alice"), (&bob, "bob"), (&carol, "carol")] {
        let body = json!({"kind": "ntfy", "label": "ntfy", "url": sinks.url(topic)});
        assert_eq!(add_sink(api, body).await.0, StatusCode::CREATED);
    }
    signed_webhook(&alice, &sinks).await;
    let mut agent = Agent::start(&server, &alice, "buttons").await;
    for (api, name, role) in [(&bob, "bob", "viewer"), (&carol, "carol", "controller")] {
        let path = format!("/api/v1/sessions/{}/members/{name}", agent.session);
        let r = alice
            .authed(
                Method::PUT,
                &path,
                Some(RawBody::Json(json!({"role": role}))),
            )
            .await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
        let accept = format!("/api/v1/offers/{}/accept", agent.session);
        let r = api.authed(Method::POST, &accept, None).await;
        assert!(r.status.is_success(), "{:?}", r.body);
    }

    // act: a permission request
    agent.send(&[permission("req-1", "make deploy", 0)]).await;
    sinks
        .wait_until(WAIT, "every sink", |hits| {
            ["alice", "bob", "carol", "hook"]
                .iter()
                .all(|p| hits.iter().any(|h| h.path == *p))
        })
        .await;

    // assert: buttons for those who may decide, none for the viewer; the webhook gets the
    // same pair of links as alice's ntfy topic
    let (approve, deny) = ntfy_links(&sinks, "alice", "make deploy").expect("alice gets buttons");
    let to_bob = sinks.hits("bob");
    assert!(
        to_bob.iter().any(|h| h.text() == "make deploy")
            && to_bob.iter().all(|h| h.header("actions").is_none()),
        "a viewer is told, without buttons"
    );
    let (carol_approve, _) =
        ntfy_links(&sinks, "carol", "make deploy").expect("carol gets buttons");
    let hook = sinks.hits("hook").into_iter().last().expect("webhook");
    assert_eq!(
        hook.json()["decide"],
        json!({"approve": approve, "deny": deny})
    );
    assert!(
        !approve.contains("access_token") && approve.contains("/api/v1/notify/decide?link="),
        "{approve}"
    );

    // act + assert: a forged link does nothing; alice's Approve decides once
    let forged = approve.replace("link=", "link=e30.");
    assert_eq!(press(&forged).await, StatusCode::UNAUTHORIZED);
    assert_eq!(press(&approve).await, StatusCode::OK);
    assert_eq!(press(&approve).await, StatusCode::GONE, "a second use");
    assert_eq!(press(&deny).await, StatusCode::CONFLICT, "the other button");
    let decisions: Vec<_> = server
        .entries_all(agent.session)
        .await
        .into_iter()
        .filter(|e| e.kind == kinds::INPUT_PERMISSION)
        .collect();
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0].author, "user:alice");
    assert_eq!(
        decisions[0].payload,
        json!({"request_id": "req-1", "decision": "allow"})
    );

    // act: the agent takes the answer; then carol's button (another pair) is pressed
    agent
        .send(&[(
            kinds::AGENT_PERMISSION_RESOLVED,
            json!({"request_id": "req-1", "decision": "allow"}),
            0,
        )])
        .await;

    // assert: the request is no longer pending
    assert_eq!(press(&carol_approve).await, StatusCode::CONFLICT);

    // act: a second request, then carol loses her role before she presses
    agent.send(&[permission("req-2", "make release", 0)]).await;
    sinks
        .wait_until(WAIT, "carol's second notification", |hits| {
            hits.iter()
                .any(|h| h.path == "carol" && h.text() == "make release")
        })
        .await;
    let (carol_approve, _) =
        ntfy_links(&sinks, "carol", "make release").expect("carol gets buttons");
    let path = format!("/api/v1/sessions/{}/members/carol", agent.session);
    assert_eq!(
        alice.authed(Method::DELETE, &path, None).await.status,
        StatusCode::NO_CONTENT
    );

    // assert: her link no longer decides, and nothing was stored for it
    assert_eq!(press(&carol_approve).await, StatusCode::NOT_FOUND);
    let decisions = server
        .entries_all(agent.session)
        .await
        .into_iter()
        .filter(|e| e.kind == kinds::INPUT_PERMISSION)
        .count();
    assert_eq!(decisions, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_privacy_mode_notifications_carry_ids_only_and_members_fetch_the_words() {
    // arrange: a server in privacy mode; alice has a phone and an ntfy topic
    let push = PushService::start().await;
    let sinks = SinkReceiver::start().await;
    let server = TestServer::start(opts().flag("--notify-private", true)).await;
    let (alice, phone) = alice_with_a_phone(&server, &push).await;
    let bob = user(&server, "bob").await;
    let body = json!({"kind": "ntfy", "label": "ntfy", "url": sinks.url("alice")});
    assert_eq!(add_sink(&alice, body).await.0, StatusCode::CREATED);
    let mut agent = Agent::start(&server, &alice, "secret-project").await;

    // act: a permission request
    agent
        .send(&[permission(
            "req-1",
            "curl https://internal.example/deploy",
            0,
        )])
        .await;
    push.wait_until(WAIT, "the push", |got, _| !got.is_empty())
        .await;
    sinks
        .wait_until(WAIT, "the ntfy message", |hits| !hits.is_empty())
        .await;

    // assert: ids, class and buttons leave the server; no name, tool or command
    let m = &push.received_by(&phone)[0].message;
    assert!(m.private, "{m:?}");
    assert_eq!((m.title.as_str(), m.body.as_str()), ("", ""));
    assert_eq!(m.class, NotifyClass::Permission);
    assert_eq!(m.request_id.as_deref(), Some("req-1"));
    assert_eq!(m.actions, vec![NotifyAction::Approve, NotifyAction::Deny]);
    let n = &sinks.hits("alice")[0];
    assert_eq!(n.header("title"), Some("Mooring"));
    assert_eq!(n.text(), "A permission request is waiting");
    assert!(!format!("{:?}", n.headers).contains("secret-project"));

    // act + assert: the service worker's question, as alice, gets the words
    let path = format!(
        "/api/v1/sessions/{}/notification?seq={}&count={}",
        m.session, m.seq.0, m.count
    );
    let words = alice.authed(Method::GET, &path, None).await;
    assert_eq!(words.status, StatusCode::OK, "{:?}", words.body);
    assert_eq!(
        words.body,
        json!({
            "title": "secret-project: Permission: Bash",
            "body": "curl https://internal.example/deploy",
        })
    );
    // someone without a role on the session learns nothing; a bad seq is refused
    assert_eq!(
        bob.authed(Method::GET, &path, None).await.status,
        StatusCode::NOT_FOUND
    );
    let bad = format!("/api/v1/sessions/{}/notification?seq=x", m.session);
    assert_eq!(
        alice.authed(Method::GET, &bad, None).await.status,
        StatusCode::BAD_REQUEST
    );
    assert!(push.rejections().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_postgres_send_each_notification_once_even_when_one_dies_after_the_commit() {
    let Some(db) = moor_e2e::pg::TestDb::create().await else {
        return;
    };
    // arrange: node A takes the bridge and does not send (it dies before it would); node B
    // sends; both share the database, the token keys and the VAPID key (one deployment)
    let push = PushService::start().await;
    let admin = "two-node-admin-token-0123456789abcdef";
    let node = |name: &str| {
        db.node_opts(name, admin)
            .flag("--push-allow-loopback-http", true)
            .flag("--notify-poll-ms", 50)
            .flag("--notify-retry-ms", 50)
            .flag("--metrics-token", METRICS_TOKEN)
            // the bridge A loses notifies at once, so the outbox can be seen empty
            .flag("--notify-bridge-lost-after-ms", 0)
    };
    let mut a = TestServer::start(node("a").flag("--notify-sender", false)).await;
    let b = TestServer::start(
        node("b")
            .data_file("jwt-keys.json", a.data_file("jwt-keys.json"))
            .data_file("vapid.key", a.data_file("vapid.key")),
    )
    .await;
    let (alice, phone) = alice_with_a_phone(&a, &push).await;
    let mut agent = Agent::start(&a, &alice, "two-nodes").await;
    agent.send(&[permission("req-0", "cargo publish", 0)]).await;

    // act: A is killed after the commit
    a.kill().await;

    // assert: B sends it, once
    push.wait_until(WAIT, "req-0 sent by B", |r, _| !r.is_empty())
        .await;

    // act: A comes back as a sender too; twenty requests, each its own notification, with
    // both nodes draining the outbox
    a.set_flag("--notify-sender", true);
    a.restart().await;
    let alice = Api::new(a.url(), alice.token());
    let mut agent = Agent::start(&a, &alice, "two-nodes-2").await;
    for i in 1..=20 {
        agent
            .send(&[permission(&format!("req-{i}"), "ls", 0)])
            .await;
    }

    // assert: every request reached the phone exactly once, and the outbox is empty on both
    push.wait_until(WAIT, "all 21 requests", |r, _| {
        let ids: std::collections::HashSet<_> = r
            .iter()
            .filter_map(|m| m.message.request_id.clone())
            .collect();
        ids.len() >= 21
    })
    .await;
    for node in [&a, &b] {
        let base = node.url();
        eventually(WAIT, "nothing pending in the outbox", || {
            let base = base.clone();
            async move {
                let s = scrape(&base, METRICS_TOKEN).await;
                value(&s, "moord_notify_outbox_rows", &[("state", "pending")]) == Some(0.0)
            }
        })
        .await;
    }
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for m in push.received_by(&phone) {
        if let Some(id) = m.message.request_id {
            *counts.entry(id).or_default() += 1;
        }
    }
    assert_eq!(counts.len(), 21, "{counts:?}");
    assert!(counts.values().all(|n| *n == 1), "{counts:?}");
    assert!(push.rejections().is_empty());
}
