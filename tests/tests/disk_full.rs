//! Disk full, handled: `moord` on a data dir that fills up refuses appends with a clear,
//! retryable error while reads go on, and resumes when space returns; `moor` with a full spool
//! disk tells the user and holds the agent's output back instead of losing it. In both cases
//! every line arrives exactly once, in order.
//!
//! The full disk is real: a small `tmpfs` filled with a filler file (so `ENOSPC` comes from the
//! kernel). Mounting needs root; where it is refused, each test says so loudly and skips.

use moor_e2e::assert::{agent_texts, assert_counted_prefix, of_kind, summary};
use moor_e2e::small_fs::SmallFs;
use moor_e2e::{
    assert_contiguous, eventually, metrics, BridgeOpts, ServerOpts, SseClient, SseOpts, TestBridge,
    TestServer, FINISH, WAIT,
};
use moor_protocol::{kinds, Entry, SessionId};

/// Bytes of the small filesystem: room for the database and some log, filled up on purpose.
const SMALL_FS_BYTES: u64 = 16 * 1024 * 1024;
const METRICS_TOKEN: &str = "disk-full-metrics";
/// Failure guard for `moor` to deliver the rest of its 20,000 padded lines (5 MB) once space
/// returns: 12 s on an idle two-core machine, 48 s in a passing run beside a release build, and
/// over 50 s in another (4,026 entries stored by then, still arriving).
const DRAIN: std::time::Duration = std::time::Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moord_on_a_full_disk_refuses_appends_serves_reads_and_resumes_with_nothing_lost() {
    let Some(fs) = SmallFs::mount("disk_full::moord", SMALL_FS_BYTES) else {
        return;
    };
    // arrange: moord's data dir on the small filesystem, a bridge streaming through it, a viewer
    const LINES: u64 = 6000;
    let server = TestServer::start(
        ServerOpts::new()
            .data_dir(fs.path())
            .flag("--metrics-token", METRICS_TOKEN),
    )
    .await;
    let name = format!("s-{}", uuid::Uuid::new_v4().simple());
    let agent = [
        "count",
        &LINES.to_string(),
        "--interval-ms",
        "1",
        "--pad",
        "400",
    ];
    let opts = BridgeOpts::new(&server.url(), server.token(), &name, &agent);
    let (mut bridge, id, viewer) = streaming(&server, opts, &name).await;
    let api = server.api();

    // act: the disk fills up while the agent keeps printing
    fill_until_told(&fs, &bridge, "moord's disk is full").await;

    // assert, while full: writes are refused with the clear, retryable error. SQLite may still
    // fit a small write into WAL pages a refused larger one left allocated, so inputs are
    // posted until one is refused; those that got in must be stored once, like any other.
    let deadline = std::time::Instant::now() + FINISH;
    let mut accepted = 0;
    let (refused_id, refused) = loop {
        let client_msg_id = format!("while-full-{accepted}");
        let answer = api.post_input_raw(id, &client_msg_id, "hello").await;
        if answer.status.as_u16() != 200 {
            break (client_msg_id, answer);
        }
        accepted += 1;
        assert!(
            std::time::Instant::now() < deadline,
            "no input refused while the disk is full"
        );
    };
    assert_eq!(refused.status.as_u16(), 507, "{:?}", refused.body);
    assert_eq!(refused.error_code(), Some("storage_full"));
    assert!(refused.retry_after.is_some(), "a full disk is retryable");
    let text = refused.body["message"].as_str().unwrap_or_default();
    assert!(text.contains("free space"), "says what to do: {text}");
    let scrape = metrics::scrape(&server.url(), METRICS_TOKEN).await;
    let counted = metrics::value(&scrape, "moord_storage_full_refusals_total", &[]);
    assert!(counted >= Some(1.0), "refusals are counted: {counted:?}");
    // … and reads are served: the log over HTTP, and a new viewer replaying all of it
    let stored = api.entries_all(id).await;
    assert_contiguous(&stored);
    let late = SseClient::connect(&server.url(), server.token(), id, SseOpts::default());
    late.wait_seq(stored.len() as u64, WAIT).await;
    assert!(!bridge.stderr().contains("stopping"), "{}", bridge.stderr());

    // act: space returns
    fs.free();
    let retried = api.post_input_raw(id, &refused_id, "hello").await;
    assert_eq!(retried.status.as_u16(), 200, "{:?}", retried.body);
    bridge.wait_success(FINISH).await;
    api.wait_ended(&name, WAIT).await;

    // assert: everything arrived exactly once, in order, and the viewer saw all of it
    let log = api.entries_all(id).await;
    assert_contiguous(&log);
    assert_eq!(
        &log[..stored.len()],
        &stored[..],
        "what was stored while full is unchanged; {}",
        summary(&log)
    );
    let out = unpadded(&log);
    assert_eq!(
        assert_counted_prefix(&out, "line-"),
        LINES,
        "every line once, in order"
    );
    assert_eq!(
        of_kind(&log, kinds::INPUT_TEXT).len(),
        accepted + 1,
        "each accepted input once, and the refused one once, by its retry"
    );
    let head = log.last().map_or(0, |e| e.seq.0);
    viewer.wait_seq(head, WAIT).await;
    assert_eq!(
        viewer.snapshot().entries,
        log,
        "the first viewer got it all, once"
    );
    // The operator is told once when an episode starts and once when it ends. A write that
    // fits while the disk is full (a small one into WAL pages) ends an episode, so there may be
    // several, each with one refusal or more.
    let logs = server.logs();
    let told: Vec<&str> = logs
        .lines()
        .filter_map(|line| {
            if line.contains("storage full: refusing") {
                Some("full")
            } else if line.contains("storage has space again") {
                Some("space again")
            } else {
                None
            }
        })
        .collect();
    let scrape = metrics::scrape(&server.url(), METRICS_TOKEN).await;
    let refusals = metrics::value(&scrape, "moord_storage_full_refusals_total", &[]).unwrap_or(0.0);
    assert_eq!(
        metrics::value(&scrape, "moord_storage_full", &[]),
        Some(0.0)
    );
    assert!(!told.is_empty(), "the operator is told");
    assert!(
        told.chunks(2)
            .all(|episode| episode == ["full", "space again"]),
        "each episode is told once as it starts and once as it ends: {told:?}"
    );
    assert!(
        told.len() as f64 / 2.0 <= refusals,
        "no more episodes ({}) than refusals ({refusals})",
        told.len() / 2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moor_with_a_full_spool_disk_tells_the_user_holds_the_agent_back_and_loses_nothing() {
    let Some(fs) = SmallFs::mount("disk_full::moor", SMALL_FS_BYTES) else {
        return;
    };
    // arrange: the bridge's state dir (and spool) on the small filesystem; the agent records
    // how far it got outside of it
    const LINES: u64 = 20_000;
    let server = TestServer::start(ServerOpts::new()).await;
    let name = format!("s-{}", uuid::Uuid::new_v4().simple());
    let progress_dir = tempfile::tempdir().unwrap();
    let progress = progress_dir.path().join("progress");
    let agent = [
        "count",
        &LINES.to_string(),
        "--pad",
        "200",
        "--progress-file",
        progress.to_str().unwrap(),
    ];
    let opts = BridgeOpts::new(&server.url(), server.token(), &name, &agent).state_dir(fs.path());
    let (mut bridge, id, viewer) = streaming(&server, opts, &name).await;
    let api = server.api();

    // act: the spool's disk fills up
    fill_until_told(&fs, &bridge, "the spool's disk is full").await;

    // assert: the agent is held back, not finished and not dropped; moor keeps running
    let got_to = |p: &std::path::Path| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let held = got_to(&progress);
    assert!(
        held < LINES,
        "the agent blocks on its full pipe ({held} lines)"
    );
    assert!(bridge.running(), "{}", bridge.stderr());

    // act: space returns
    fs.free();
    bridge.wait_success(DRAIN).await;
    api.wait_ended(&name, WAIT).await;

    // assert: every line once, in order; the user was told it flows again
    let log = api.entries_all(id).await;
    assert_contiguous(&log);
    let out = unpadded(&log);
    assert_eq!(
        assert_counted_prefix(&out, "line-"),
        LINES,
        "every line once, in order; {}",
        summary(&log)
    );
    assert_eq!(got_to(&progress), LINES);
    assert!(
        bridge.stderr().contains("the spool's disk has space again"),
        "{}",
        bridge.stderr()
    );
    let head = log.last().map_or(0, |e| e.seq.0);
    viewer.wait_seq(head, WAIT).await;
    assert_eq!(
        viewer.snapshot().entries,
        log,
        "the viewer got it all, once"
    );
}

/// The agent's stdout lines without their `--pad` filler.
fn unpadded(log: &[Entry]) -> Vec<String> {
    agent_texts(log, "stdout")
        .into_iter()
        .map(|t| t.split(' ').next().unwrap_or_default().to_owned())
        .collect()
}

/// Starts the bridge of session `name` and a viewer on it, and waits until the viewer got the
/// agent's first lines.
async fn streaming(
    server: &TestServer,
    bridge: BridgeOpts,
    name: &str,
) -> (TestBridge, SessionId, SseClient) {
    let bridge = bridge.spawn();
    let id = server.api().wait_session(name, WAIT).await.id;
    let viewer = SseClient::connect(&server.url(), server.token(), id, SseOpts::default());
    viewer
        .wait_for(WAIT, "the first lines", |s| {
            agent_texts(&s.entries, "stdout").len() >= 100
        })
        .await;
    (bridge, id, viewer)
}

/// Fills `fs` up, then waits until `bridge` has told its user `told`.
async fn fill_until_told(fs: &SmallFs, bridge: &TestBridge, told: &str) {
    fs.fill();
    eventually(FINISH, &format!("moor to say {told:?}"), || async {
        bridge.stderr().contains(told)
    })
    .await;
}
