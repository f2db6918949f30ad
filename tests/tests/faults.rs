//! Faults on the bridge → server path: `moor` → fault proxy → `moord`, with the agent streaming
//! across the fault. Every test ends with the log holding exactly what the agent printed, once
//! each, in order (G1), and the bridge having reconnected by itself (G4).

use moor_e2e::assert::{
    agent_texts, assert_counted_prefix, assert_same_lines, numbered, numbered_runs, of_kind,
    summary,
};
use moor_e2e::{
    assert_complete_session, assert_exact_stream, eventually, lines, Rig, ServerOpts, TestBridge,
    FINISH, WAIT,
};
use moor_protocol::{close, kinds, Entry};
use serde_json::Value;

fn close_code(e: &Entry) -> Option<u64> {
    e.payload.get("close_code").and_then(Value::as_u64)
}

/// Server-initiated close with `code` in the middle of a stream: the bridge reconnects and
/// nothing is lost or duplicated.
async fn bridge_survives_server_close(code: u16) {
    // arrange
    let mut rig = Rig::start(ServerOpts::new(), &["count", "300", "--interval-ms", "10"]).await;
    rig.tail.wait_agent_lines(50, WAIT).await;

    // act
    let status = rig
        .api
        .close_bridge(rig.id, code, "closed by the test")
        .await;

    // assert
    assert_eq!(
        status.as_u16(),
        204,
        "bridge/close should find the live bridge"
    );
    rig.wait_reconnect(0, |e| close_code(e) == Some(u64::from(code)))
        .await;
    rig.finish(&lines(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_reconnects_after_server_closes_with_1000_normal() {
    bridge_survives_server_close(1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_reconnects_after_server_closes_with_1001_going_away() {
    bridge_survives_server_close(1001).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_reconnects_after_server_closes_with_1002_protocol_error() {
    bridge_survives_server_close(1002).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_reconnects_after_server_closes_with_1011_internal_error() {
    bridge_survives_server_close(1011).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_reconnects_after_server_closes_with_4010_server_error() {
    bridge_survives_server_close(4010).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_reconnects_after_the_connection_drops_without_a_close_frame() {
    // arrange
    let mut rig = Rig::start(ServerOpts::new(), &["count", "300", "--interval-ms", "10"]).await;
    rig.tail.wait_agent_lines(50, WAIT).await;
    let conns = rig.proxy.connections();

    // act
    let cut = rig.proxy.cut_all().await;

    // assert
    assert!(cut >= 1, "the bridge's connection was live");
    rig.proxy.wait_connections(conns + 1, WAIT).await;
    rig.wait_reconnect(0, |_| true).await;
    rig.finish(&lines(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_loses_nothing_when_tcp_resets_hit_mid_batch() {
    // arrange: a fast agent, so frames carry batches when the resets hit.
    let mut rig = Rig::start(
        ServerOpts::new(),
        &["count", "600", "--interval-ms", "2", "--stderr-every", "7"],
    )
    .await;

    // act: three resets, each once the stream has moved on.
    for at in [100, 250, 400] {
        rig.tail.wait_agent_lines(at, WAIT).await;
        let reset = rig.proxy.reset_all().await;
        assert!(reset >= 1, "a live connection was reset at line {at}");
    }

    // assert
    let entries = rig.finish(&lines(600)).await;
    let stderr_lines: Vec<String> = (1..=600 / 7).map(|k| format!("err-{}", k * 7)).collect();
    assert_exact_stream(&entries, "stderr", &stderr_lines);
    assert!(
        of_kind(&entries, kinds::BRIDGE_CONNECTED).len() >= 2,
        "the bridge reconnected after the resets; {}",
        summary(&entries)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_link_is_detected_as_dead_and_the_bridge_reconnects() {
    // arrange
    let opts = ServerOpts::new()
        .flag("--heartbeat-interval-ms", 200)
        .flag("--idle-timeout-ms", 1000);
    let mut rig = Rig::start(opts, &["count", "400", "--interval-ms", "10"]).await;
    rig.tail.wait_agent_lines(50, WAIT).await;
    let connected_before = of_kind(&rig.tail.entries, kinds::BRIDGE_CONNECTED).len();
    let head = rig.tail.entries.last().map_or(0, |e| e.seq.0);

    // act: the link goes silent both ways, sockets stay open.
    let stalled = rig.proxy.stall().await;

    // assert: the silent connection is declared dead (by the server's watchdog, or by the
    // bridge's, whose new connection then supersedes it: the same bridge's, 4013), then a new
    // one is welcomed, and the stream goes on without a loss. How fast is a latency figure,
    // not a test assertion.
    assert!(stalled >= 1, "the bridge's connection was live");
    let gone = rig.wait_reconnect(head, |_| true).await;
    let silent_or_superseded =
        [close::HEARTBEAT_TIMEOUT, close::SUPERSEDED_BY_SAME_BRIDGE].map(u64::from);
    assert!(
        close_code(&gone).is_some_and(|c| silent_or_superseded.contains(&c)),
        "the dead link was closed as silent or superseded: {}",
        gone.payload
    );
    let entries = rig.finish(&lines(400)).await;
    assert!(of_kind(&entries, kinds::BRIDGE_CONNECTED).len() > connected_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifetime_cap_moves_the_bridge_many_times_without_losing_a_line() {
    // arrange: connections live ~1 s, the stream runs ≥ 20 s.
    let opts = ServerOpts::new()
        .flag("--bridge-max-lifetime-ms", 1000)
        .flag("--move-notice-ms", 300);
    let mut rig = Rig::start(opts, &["count", "2000", "--interval-ms", "10"]).await;

    // act: nothing; the server moves the bridge every second.

    // assert
    let entries = rig.finish(&lines(2000)).await;
    let connected = of_kind(&entries, kinds::BRIDGE_CONNECTED).len();
    assert!(
        connected >= 5,
        "expected several bridge.connected over a 20 s stream with a 1 s cap, got {connected}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_resumes_when_moord_is_killed_and_restarted_mid_stream() {
    // arrange
    let mut rig = Rig::start(ServerOpts::new(), &["count", "500", "--interval-ms", "10"]).await;
    rig.tail.wait_agent_lines(100, WAIT).await;
    let committed = rig.tail.entries.clone();
    let conns = rig.proxy.connections();

    // act: crash the server; restart it once the bridge has tried to reach it while it was down.
    rig.server.kill().await;
    rig.proxy.wait_connections(conns + 1, WAIT).await;
    rig.server.restart().await;

    // assert
    let entries = rig.finish(&lines(500)).await;
    assert_eq!(
        &entries[..committed.len()],
        &committed[..],
        "entries read before the crash are unchanged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moor_killed_mid_stream_resumes_from_its_spool_after_restart() {
    // arrange: the agent reports how far it got in a progress file.
    let scratch = tempfile::tempdir().expect("temp dir");
    let progress = scratch.path().join("progress");
    let progress_arg = progress.to_str().expect("utf-8 path").to_owned();
    let mut rig = Rig::start(
        ServerOpts::new(),
        &[
            "count",
            "100000",
            "--interval-ms",
            "10",
            "--progress-file",
            &progress_arg,
        ],
    )
    .await;
    rig.tail.wait_agent_lines(50, WAIT).await;

    // act: freeze the link so acks stop and the spool grows, then crash moor and start it again
    // on the same state dir with a new agent run.
    assert!(
        rig.proxy.stall().await >= 1,
        "the bridge's connection was live"
    );
    rig.tail.refresh().await;
    let stored_at_stall = agent_texts(&rig.tail.entries, "stdout").len() as u64;
    let read_progress = || {
        std::fs::read_to_string(&progress)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    eventually(
        WAIT,
        "the agent to print 50 more lines while the link is frozen",
        || {
            let p = read_progress();
            async move { p >= stored_at_stall + 50 }
        },
    )
    .await;
    let printed_before_kill = read_progress();
    rig.bridge.kill().await;
    let mut second = rig.bridge.respawn(&["count", "30", "--prefix", "again-"]);

    // assert
    second.wait_success(FINISH).await;
    let (entries, texts) = rig.ended_log().await;
    let first_run = assert_counted_prefix(&texts, "line-");
    eprintln!(
        "spool check: {stored_at_stall} lines stored at the stall, {printed_before_kill} printed before the kill, \
         {first_run} stored after the restart"
    );
    // Lines printed ≥ 20 lines (~200 ms) before the kill had time to reach the spool on disk;
    // lines still in the pipe when moor died are legitimately lost.
    assert!(
        first_run + 20 >= printed_before_kill && first_run > stored_at_stall,
        "spooled lines were lost: {stored_at_stall} stored at the stall, the agent printed {printed_before_kill} \
         before the kill, only {first_run} stored after the restart"
    );
    assert!(
        first_run <= printed_before_kill + 3,
        "more first-run lines ({first_run}) than the agent printed"
    );
    assert_complete_session(
        &entries,
        &numbered_runs(&[("line-", first_run), ("again-", 30)]),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_rides_out_a_stretch_when_the_server_is_unreachable() {
    // arrange
    let mut rig = Rig::start(ServerOpts::new(), &["count", "500", "--interval-ms", "10"]).await;
    rig.tail.wait_agent_lines(50, WAIT).await;
    let conns = rig.proxy.connections();

    // act: new connections are refused and the live one is reset.
    rig.proxy.refuse(true);
    rig.proxy.reset_all().await;
    rig.api.wait_bridge_online(&rig.name, false, WAIT).await;
    rig.proxy.wait_connections(conns + 3, WAIT).await;
    rig.proxy.refuse(false);

    // assert
    let entries = rig.finish(&lines(500)).await;
    assert!(!of_kind(&entries, kinds::BRIDGE_DISCONNECTED).is_empty());
    assert!(of_kind(&entries, kinds::BRIDGE_CONNECTED).len() >= 2);
}

/// An operator set `--max-frame-bytes` below what `moor` puts in one frame. The link is down
/// while the agent prints, so the spool holds more than one frame's worth when it comes back:
/// `moor` sends it in frames the server takes, and nothing is lost. (It used to send it all in
/// one frame, be closed with 1009, reconnect and send the same frame, for ever.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spool_larger_than_the_servers_frame_limit_goes_in_frames_the_server_takes() {
    // arrange
    let mut rig = Rig::start(
        ServerOpts::new().flag("--max-frame-bytes", 4096),
        &["count", "300", "--interval-ms", "10"],
    )
    .await;
    rig.tail.wait_agent_lines(1, WAIT).await;

    // act: the link stays down until the agent has printed everything and exited.
    rig.proxy.refuse(true);
    rig.proxy.reset_all().await;
    let bridge = &rig.bridge;
    eventually(WAIT, "the agent exits while the link is down", || async {
        bridge.stderr().contains("the agent has exited")
    })
    .await;
    rig.proxy.refuse(false);

    // assert
    rig.finish(&lines(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_attempt_the_bridge_gave_up_on_does_not_stop_it_when_its_hello_arrives_late() {
    // arrange
    let mut rig = Rig::start(ServerOpts::new(), &["count", "600", "--interval-ms", "10"]).await;
    rig.tail.wait_agent_lines(50, WAIT).await;
    let conns = rig.proxy.connections();
    let head = rig.tail.entries.last().map_or(0, |e| e.seq.0);

    // act: the link drops; the next connection's hello is held on the way until the bridge
    // has given up on it (no welcome within --connect-timeout-ms) and connected again; then
    // the abandoned hello reaches the server, after the live connection's.
    rig.proxy.hold_after_upgrade(true);
    assert!(
        rig.proxy.cut_all().await >= 1,
        "the bridge's connection was live"
    );
    rig.proxy.wait_connections(conns + 1, WAIT).await;
    rig.proxy.hold_after_upgrade(false);
    let live = rig
        .tail
        .wait_kind(kinds::BRIDGE_CONNECTED, head, WAIT, |_| true)
        .await;
    rig.tail.wait_agent_lines(120, WAIT).await;
    rig.proxy.unstall().await;
    let abandoned = rig
        .tail
        .wait_kind(kinds::BRIDGE_CONNECTED, live.seq.0, WAIT, |_| true)
        .await;

    // assert: the bridge is not stopped by its own abandoned attempt: it connects again and
    // delivers everything.
    rig.tail
        .wait_kind(kinds::BRIDGE_CONNECTED, abandoned.seq.0, WAIT, |_| true)
        .await;
    let entries = rig.finish(&lines(600)).await;
    assert!(
        !rig.bridge.stderr().contains("another bridge took over"),
        "the bridge thought another bridge took over: {}",
        rig.bridge.stderr()
    );
    assert!(of_kind(&entries, kinds::BRIDGE_CONNECTED).len() >= 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_bridge_supersedes_the_first_which_exits_saying_so() {
    // arrange: bridge A streams a long run through the proxy.
    let mut rig = Rig::start(
        ServerOpts::new(),
        &[
            "count",
            "100000",
            "--interval-ms",
            "10",
            "--prefix",
            "a-line-",
        ],
    )
    .await;
    rig.tail
        .wait_for(WAIT, "30 lines from bridge A", |es| {
            agent_texts(es, "stdout")
                .iter()
                .filter(|t| t.starts_with("a-line-"))
                .count()
                >= 30
        })
        .await;

    // act: bridge B, another installation (own state dir), attaches to the same session.
    let mut b = TestBridge::start(
        &rig.server.url(),
        rig.server.token(),
        &rig.name,
        &["count", "200", "--interval-ms", "5", "--prefix", "b-line-"],
    );

    // assert: A stops for good and says why.
    let a_status = rig.bridge.wait_exit(WAIT).await;
    assert!(
        !a_status.success(),
        "the superseded bridge must exit non-zero, got {a_status}"
    );
    eventually(WAIT, "bridge A to say it was superseded", || {
        let err = rig.bridge.stderr().to_lowercase();
        async move { err.contains("superseded") || err.contains("another bridge took over") }
    })
    .await;
    b.wait_success(FINISH).await;
    let (entries, texts) = rig.ended_log().await;
    let a_lines = assert_counted_prefix(&texts, "a-line-");
    assert!(a_lines >= 30);
    let b_lines: Vec<String> = texts
        .iter()
        .filter(|t| t.starts_with("b-line-"))
        .cloned()
        .collect();
    assert_same_lines("bridge B's lines", &b_lines, &numbered("b-line-", 1, 200));
    let first_b = texts
        .iter()
        .position(|t| t.starts_with("b-line-"))
        .expect("B's lines are stored");
    let late_a: Vec<_> = texts[first_b..]
        .iter()
        .filter(|t| t.starts_with("a-line-"))
        .take(5)
        .collect();
    assert!(
        late_a.is_empty(),
        "bridge A stored lines after bridge B took over (first: {late_a:?}): A reconnected and superseded B \
         instead of stopping on 4003"
    );
    let expected = numbered_runs(&[("a-line-", a_lines), ("b-line-", 200)]);
    assert_complete_session(&entries, &expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_moord_keeps_every_acked_entry_and_the_stream_completes_after_restart() {
    // arrange
    let mut rig = Rig::start(ServerOpts::new(), &["count", "500", "--interval-ms", "10"]).await;
    rig.tail.wait_agent_lines(100, WAIT).await;
    let committed = rig.tail.entries.clone();

    // act: graceful shutdown while the bridge streams, then start again.
    let status = rig.server.terminate().await;
    rig.server.restart().await;

    // assert
    assert!(
        status.success(),
        "moord should exit 0 on SIGTERM, got {status}"
    );
    let after_restart = rig.api.entries_all(rig.id).await;
    assert!(
        after_restart.len() >= committed.len(),
        "entries were lost in the shutdown"
    );
    assert_eq!(
        &after_restart[..committed.len()],
        &committed[..],
        "entries stored before SIGTERM are unchanged"
    );
    rig.finish(&lines(500)).await;
}
