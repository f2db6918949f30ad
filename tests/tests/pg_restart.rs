//! Postgres stopped and started again under a streaming bridge: every connection of `moord` is cut, appends fail
//! until the database is back, and the bridge's spool covers the outage. Nothing acknowledged
//! before the restart is lost, nothing is stored twice, and a viewer on the node catches up.
//! And a node started while its database cannot be reached waits for it (`--database-wait-secs`).
//!
//! Restarts the machine's cluster (`pg_ctlcluster … stop`, then `start`), so the Postgres tests run one at a
//! time (`.config/nextest.toml`); the cluster is started again when the test ends, pass or fail.

use moor_e2e::assert::{agent_texts, assert_counted_prefix, summary};
use moor_e2e::pg::{skip, LocalCluster, TestDb};
use moor_e2e::{
    assert_contiguous, eventually, BridgeOpts, ServerOpts, SseClient, SseOpts, TestServer, FINISH,
    WAIT,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarting_under_a_streaming_bridge_loses_nothing_acknowledged() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let cluster = match LocalCluster::find() {
        Ok(c) => c,
        Err(why) => return skip(&format!("cannot restart the local cluster: {why}")),
    };
    // arrange: one node on Postgres, a bridge streaming through it, a viewer on it
    const LINES: u64 = 4000;
    let token = uuid::Uuid::new_v4().simple().to_string();
    let server = TestServer::start(db.node_opts("a", &token)).await;
    let name = format!("s-{}", uuid::Uuid::new_v4().simple());
    let agent = ["count", &LINES.to_string(), "--interval-ms", "2"];
    let mut bridge = BridgeOpts::new(&server.url(), &token, &name, &agent).spawn();
    let api = server.api();
    let id = api.wait_session(&name, WAIT).await.id;
    let viewer = SseClient::connect(&server.url(), &token, id, SseOpts::default());
    viewer
        .wait_for(WAIT, "a few hundred lines", |s| {
            agent_texts(&s.entries, "stdout").len() >= 300
        })
        .await;
    // Everything a viewer got was committed, hence acknowledged to the bridge if it was its own.
    let before = api.entries_all(id).await;

    // act: down long enough for appends to fail (past the pool's acquire timeout) and the
    // bridge to lose its link, while the agent keeps printing into the spool; then up again
    cluster.stop().await;
    eventually(FINISH, "the bridge to lose its link", || async {
        bridge.stderr().contains("link lost")
    })
    .await;
    cluster.start().await;
    bridge.wait_success(FINISH).await;
    api.wait_ended(&name, WAIT).await;

    // assert
    let log = api.entries_all(id).await;
    assert_contiguous(&log);
    assert_eq!(
        &log[..before.len()],
        &before[..],
        "what was stored before the restart is still there, unchanged; {}",
        summary(&log)
    );
    let out = agent_texts(&log, "stdout");
    assert_eq!(
        assert_counted_prefix(&out, "line-"),
        LINES,
        "every line once, in order"
    );
    let head = log.last().map_or(0, |e| e.seq.0);
    viewer.wait_seq(head, WAIT).await;
    assert_eq!(
        viewer.snapshot().entries,
        log,
        "the viewer got the whole log, once"
    );
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_while_postgres_cannot_be_reached_waits_for_it_then_serves() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    // arrange: the database behind a proxy that refuses every connection, as a Postgres that
    // has not started yet (or is restarting) does
    let (proxy, url) = db.proxied().await;
    proxy.refuse(true);
    let token = uuid::Uuid::new_v4().simple().to_string();
    let opts = ServerOpts::new()
        .flag("--database-url", &url)
        .flag("--node-id", "waiting")
        .flag("--admin-token", &token)
        .flag("--database-wait-secs", 120);

    // act: start the node; once it has tried a few times, the database comes up
    let starting = tokio::spawn(TestServer::start(opts));
    proxy.wait_connections(3, WAIT).await;
    assert!(!starting.is_finished(), "the node waits for its database");
    proxy.refuse(false);
    let server = starting.await.expect("the node started");

    // assert: it serves, and said why it waited
    let name = format!("s-{}", uuid::Uuid::new_v4().simple());
    let mut bridge = BridgeOpts::new(&server.url(), &token, &name, &["count", "20"]).spawn();
    bridge.wait_success(FINISH).await;
    let api = server.api();
    api.wait_ended(&name, WAIT).await;
    let id = api.wait_session(&name, WAIT).await.id;
    let out = agent_texts(&api.entries_all(id).await, "stdout");
    assert_eq!(assert_counted_prefix(&out, "line-"), 20, "every line once");
    assert!(
        server
            .logs()
            .contains("the database cannot be reached yet; retrying"),
        "the wait is logged"
    );
}
