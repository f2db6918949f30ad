//! An operator can see and probe the server: `/metrics` for a scraper with the metrics token
//! (or on `--metrics-listen`), `/readyz` saying whether the node can serve; a session says how
//! many entries wait in its bridge's spool.

use moor_e2e::assert::agent_texts;
use moor_e2e::metrics::{get, scrape, value};
use moor_e2e::pg::TestDb;
use moor_e2e::{
    eventually, BridgeOpts, FaultProxy, Rig, ServerOpts, SseClient, SseOpts, TestServer, WsViewer,
    FINISH, WAIT,
};
use prometheus_parse::Scrape;
use reqwest::StatusCode;

const METRICS_TOKEN: &str = "metrics-token-for-the-scraper";

fn at_least(s: &Scrape, name: &str, labels: &[(&str, &str)], min: f64) -> bool {
    value(s, name, labels).is_some_and(|v| v >= min)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_while_a_session_streams_to_viewers() {
    // arrange: a bridge streaming lines for longer than the test, an SSE and a WS viewer
    let opts = ServerOpts::new().flag("--metrics-token", METRICS_TOKEN);
    let rig = Rig::start(opts, &["count", "100000", "--interval-ms", "20"]).await;
    let base = rig.server.url();
    let sse = SseClient::connect(&base, rig.server.token(), rig.id, SseOpts::default());
    let ws = WsViewer::connect(rig.server.addr(), rig.server.token(), rig.id, 0).await;
    sse.wait_seq(5, WAIT).await;
    ws.recorder()
        .wait_for(WAIT, "5 entries", |s| s.last_seq() >= 5)
        .await;
    rig.api.post_input(rig.id, "m-1", "hello").await;
    let before = scrape(&base, METRICS_TOKEN).await;

    // act + assert: while it streams, every family moves
    let kind = |k| [("kind", k)];
    eventually(WAIT, "the metrics to show the live session", || async {
        let s = scrape(&base, METRICS_TOKEN).await;
        at_least(&s, "moord_connections", &kind("bridge"), 1.0)
            && at_least(&s, "moord_connections", &kind("sse"), 1.0)
            && at_least(&s, "moord_connections", &kind("ws_viewer"), 1.0)
            && at_least(&s, "moord_live_sessions", &[], 1.0)
            && at_least(&s, "moord_entries_appended_total", &[], 5.0)
            && at_least(&s, "moord_appended_bytes_total", &[], 1.0)
            && at_least(&s, "moord_commit_duration_seconds", &[], 1.0)
            && at_least(&s, "moord_commit_group_entries", &[], 1.0)
            && at_least(
                &s,
                "moord_viewer_deliveries_total",
                &[("transport", "sse")],
                5.0,
            )
            && at_least(
                &s,
                "moord_viewer_deliveries_total",
                &[("transport", "ws")],
                5.0,
            )
            && at_least(&s, "moord_replay_pages_total", &[], 2.0)
            && at_least(&s, "moord_inputs_total", &[("outcome", "accepted")], 1.0)
            && at_least(&s, "process_resident_memory_bytes", &[], 1.0)
    })
    .await;
    let appended = |s: &Scrape| value(s, "moord_entries_appended_total", &[]).unwrap_or(0.0);
    eventually(WAIT, "the appended counter to grow", || async {
        appended(&scrape(&base, METRICS_TOKEN).await) > appended(&before)
    })
    .await;
    assert_eq!(value(&before, "moord_store_errors_total", &[]), Some(0.0));
    sse.stop();
}

#[tokio::test]
async fn metrics_show_resident_memory_below_the_configured_memory_budget() {
    // arrange
    const BUDGET: u64 = 1 << 30;
    let server = TestServer::start(
        ServerOpts::new()
            .flag("--metrics-token", METRICS_TOKEN)
            .flag("--memory-budget-bytes", BUDGET),
    )
    .await;

    // act
    let s = scrape(&server.url(), METRICS_TOKEN).await;

    // assert: the budget as configured, and the process well within it
    assert_eq!(
        value(&s, "moord_memory_budget_bytes", &[]),
        Some(BUDGET as f64)
    );
    let resident = value(&s, "process_resident_memory_bytes", &[]).expect("resident memory");
    assert!(
        resident > 0.0 && resident < BUDGET as f64,
        "resident {resident} bytes, budget {BUDGET}"
    );
}

#[tokio::test]
async fn metrics_need_the_metrics_token_and_are_not_served_without_one() {
    // arrange
    let with = TestServer::start(ServerOpts::new().flag("--metrics-token", METRICS_TOKEN)).await;
    let without = TestServer::start(ServerOpts::new()).await;
    // act + assert: no token, a wrong one, the admin token: 401; the metrics token: 200
    assert_eq!(get(&with.url(), None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(
        get(&with.url(), Some("wrong")).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        get(&with.url(), Some(with.token())).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        get(&with.url(), Some(METRICS_TOKEN)).await.0,
        StatusCode::OK
    );
    // without a metrics token, no metrics on the main address, whatever is presented
    assert_eq!(
        get(&without.url(), Some(without.token())).await.0,
        StatusCode::NOT_FOUND
    );
}

/// `GET /readyz`: the status and the JSON body.
async fn readyz(base: &str) -> (StatusCode, serde_json::Value) {
    let resp = reqwest::get(format!("{base}/readyz"))
        .await
        .expect("GET /readyz");
    let status = resp.status();
    (status, resp.json().await.expect("a JSON body"))
}

#[tokio::test]
async fn readyz_is_ready_on_sqlite() {
    let server = TestServer::start(ServerOpts::new()).await;
    let (status, body) = readyz(&server.url()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_answers_503_while_postgres_is_unreachable_and_200_once_it_is_back() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    // arrange: a node on Postgres, ready (its notice feed listening)
    let server = TestServer::start(db.node_opts("a", "admin-token-a")).await;
    let admin = db.admin().await;
    let base = server.url();
    eventually(WAIT, "the node ready", || async {
        readyz(&base).await.0 == StatusCode::OK
    })
    .await;

    // act: the database refuses connections and the node's connections are cut
    db.allow_connections(&admin, false).await;
    db.kill_pool(&admin, "a").await;
    db.kill_listen(&admin, "a").await;

    // assert: not ready, saying why
    let (status, body) = readyz(&base).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["code"], "unavailable");
    assert!(
        body["message"].as_str().is_some_and(|r| !r.is_empty()),
        "{body}"
    );

    // act: the database is back
    db.allow_connections(&admin, true).await;

    // assert: ready again
    eventually(WAIT, "the node ready again", || async {
        readyz(&base).await.0 == StatusCode::OK
    })
    .await;
}

#[tokio::test]
async fn metrics_listen_serves_the_metrics_without_a_token_on_its_own_address() {
    // arrange
    let server = TestServer::start(ServerOpts::new().flag("--metrics-listen", "127.0.0.1:0")).await;
    let logs = server.logs();
    let url = logs
        .lines()
        .find_map(|l| l.strip_prefix("metrics on "))
        .and_then(|u| u.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("no metrics address in the output: {logs}"))
        .to_owned();
    // act
    let (status, text) = get(&url, None).await;
    // assert: served there, parseable, and still not on the main address
    assert_eq!(status, StatusCode::OK, "{text}");
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("parseable");
    assert!(value(&scrape, "moord_live_sessions", &[]).is_some());
    assert_eq!(get(&server.url(), None).await.0, StatusCode::NOT_FOUND);
    assert_eq!(get(&url, None).await.0, StatusCode::OK);
    let other = reqwest::get(format!("{url}/healthz")).await.expect("GET");
    assert_eq!(other.status(), StatusCode::NOT_FOUND, "only /metrics there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_the_relay_delay_is_observed_by_the_node_serving_another_nodes_bridge() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    // arrange: nodes A and B on one database; a bridge streams to A, a viewer reads from B
    let token = uuid::Uuid::new_v4().simple().to_string();
    let node = |n| {
        db.node_opts(n, &token)
            .flag("--metrics-token", METRICS_TOKEN)
    };
    let a = TestServer::start(node("a")).await;
    let b = TestServer::start(node("b")).await;
    let relayed = |s: &Scrape| value(s, "moord_relay_delay_seconds", &[]).unwrap_or(-1.0);
    assert_eq!(relayed(&scrape(&b.url(), METRICS_TOKEN).await), 0.0);
    let name = format!("relay-{}", uuid::Uuid::new_v4().simple());
    let mut bridge = BridgeOpts::new(
        &a.url(),
        &token,
        &name,
        &["count", "400", "--interval-ms", "5"],
    )
    .spawn();
    let id = b.api().wait_session(&name, WAIT).await.id;

    // act: B's viewer follows the session, so B's relay publishes A's commits
    let viewer = SseClient::connect(&b.url(), &token, id, SseOpts::default());
    bridge.wait_success(FINISH).await;
    let head = a
        .api()
        .session(&name)
        .await
        .expect("the session")
        .head_seq
        .0;
    viewer.wait_seq(head, WAIT).await;

    // assert: B observed delays for relayed entries; A, whose own commits they were, none
    eventually(WAIT, "relay delays observed on B", || async {
        relayed(&scrape(&b.url(), METRICS_TOKEN).await) >= 1.0
    })
    .await;
    assert_eq!(relayed(&scrape(&a.url(), METRICS_TOKEN).await), 0.0);
    viewer.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_shows_the_entries_waiting_in_moors_spool_until_they_are_stored() {
    // arrange: a bridge through a proxy, with its own metrics listener, printing 300 lines and
    // then waiting for an input; heartbeats every second
    let server = TestServer::start(ServerOpts::new().flag("--heartbeat-interval-ms", 1000)).await;
    let proxy = FaultProxy::start(server.addr()).await;
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let moor = format!("http://{}", free.local_addr().expect("addr"));
    drop(free);
    let name = format!("spool-{}", uuid::Uuid::new_v4().simple());
    let agent = ["count", "300", "--interval-ms", "10", "--echo-inputs", "1"];
    let bridge = BridgeOpts::new(&proxy.url(), server.token(), &name, &agent)
        .flag("--metrics-listen", moor.trim_start_matches("http://"))
        .spawn();
    let api = server.api();
    let id = api.wait_session(&name, WAIT).await.id;
    let waiting = || {
        let (api, name) = (api.clone(), name.clone());
        async move {
            let info = api.session(&name).await.expect("the session");
            (info.bridge.online, info.bridge.spool_unacked)
        }
    };
    let spooled = || async {
        let (_, text) = get(&moor, None).await;
        let s = Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("parseable");
        value(&s, "moor_spool_unacked_entries", &[]).unwrap_or(0.0)
    };

    // act: the link cut and kept down until entries pile up in moor's spool
    proxy.refuse(true);
    proxy.cut_all().await;
    eventually(WAIT, "20 entries waiting in moor's spool", || async {
        spooled().await >= 20.0
    })
    .await;
    proxy.refuse(false);

    // assert: once back, the session says entries wait on the machine, then that none do
    eventually(WAIT, "the server to show the spool's depth", || async {
        matches!(waiting().await, (true, Some(n)) if n > 0)
    })
    .await;
    eventually(
        WAIT,
        "every line stored and the spool said empty",
        || async {
            waiting().await == (true, None)
                && agent_texts(&api.entries_all(id).await, "stdout")
                    .contains(&"line-300".to_owned())
                && spooled().await == 0.0
        },
    )
    .await;
    bridge.terminate();
}
