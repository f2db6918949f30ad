//! Running it for a year: `--log-format json` on `moord` and `moor` writes one JSON object a
//! line that a log shipper can parse; `moor run --metrics-listen` serves its spool depth, acked
//! seq, link state and reconnections to a Prometheus scraper; the systemd unit in `deploy/` is hardened and passes
//! `systemd-analyze verify` (where systemd is installed).

use std::time::Duration;

use moor_e2e::util::bin_path;
use moor_e2e::{eventually, BridgeOpts, ServerOpts, TestBridge, TestServer, WAIT};
use reqwest::StatusCode;
use serde_json::Value;

const FINISH: Duration = Duration::from_secs(60);

/// The JSON log lines among `text` whose message is `message`.
fn json_lines(text: &str, message: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["fields"]["message"] == message)
        .collect()
}

#[tokio::test]
async fn moord_and_moor_write_json_log_lines() {
    // arrange: moord logging JSON; an ended session
    let server = TestServer::start(ServerOpts::new().flag("--log-format", "json")).await;
    let mut bridge = TestBridge::start(&server.url(), server.token(), "logged", &["count", "1"]);
    bridge.wait_success(FINISH).await;
    let ended = server.api().wait_ended("logged", WAIT).await;

    // act: something moord logs at info
    let deleted = server.api().delete_session(ended.id).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{:?}", deleted.body);

    // assert: its line parses, with level, target, timestamp and fields
    eventually(WAIT, "the deletion's JSON log line", || async {
        !json_lines(&server.logs(), "session deleted").is_empty()
    })
    .await;
    let line = json_lines(&server.logs(), "session deleted").remove(0);
    assert_eq!(line["level"], "INFO", "{line}");
    assert_eq!(line["target"], "moor_server::http::sessions", "{line}");
    assert_eq!(line["fields"]["session"], ended.id.to_string(), "{line}");
    assert_eq!(line["fields"]["by"], "admin", "{line}");
    assert!(
        line["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{line}"
    );

    // act: moor, logging at debug as JSON, against a server that is not there
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = closed.local_addr().expect("addr");
    drop(closed);
    let state = tempfile::tempdir().expect("state dir");
    let mut moor = tokio::process::Command::new(bin_path("moor"))
        .args(["--log-format", "json", "run", "--token", "t", "--server"])
        .arg(format!("http://{addr}"))
        .args(["--session", "json-logs", "--state-dir"])
        .arg(state.path())
        .arg("--")
        .arg(bin_path("moor-test-agent"))
        .args(["echo"])
        .env("RUST_LOG", "moor_bridge=debug")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start moor");
    let stderr = moor.stderr.take().expect("piped");
    let first_json = tokio::time::timeout(WAIT, async move {
        use tokio::io::AsyncBufReadExt;
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                return Some(v);
            }
        }
        None
    })
    .await
    .expect("moor wrote a JSON log line in time")
    .expect("moor wrote a JSON log line");
    let _ = moor.kill().await;

    // assert
    assert!(
        ["DEBUG", "INFO", "WARN", "ERROR"].contains(&first_json["level"].as_str().unwrap_or("")),
        "{first_json}"
    );
    assert!(
        first_json["target"]
            .as_str()
            .is_some_and(|t| t.starts_with("moor_bridge")),
        "{first_json}"
    );
    assert!(first_json["fields"]["message"].is_string(), "{first_json}");
}

#[tokio::test]
async fn moord_whose_output_readers_went_away_serves_and_still_stops_on_sigterm() {
    // arrange: moord with its stdout and stderr on pipes, as under a supervisor or a terminal;
    // whoever read its stdout is gone before it prints its start-up lines
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        probe.local_addr().expect("addr").port()
    };
    let data = tempfile::tempdir().expect("data dir");
    let mut moord = tokio::process::Command::new(bin_path("moord"))
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data-dir")
        .arg(data.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start moord");
    drop(moord.stdout.take());
    let health = format!("http://127.0.0.1:{port}/healthz");
    eventually(WAIT, "moord answers though its stdout is gone", || async {
        reqwest::get(&health)
            .await
            .is_ok_and(|r| r.status() == StatusCode::OK)
    })
    .await;
    // now whoever read its stderr goes away too
    drop(moord.stderr.take());

    // act: SIGTERM, whose shutdown moord logs to the closed stderr
    sigterm(&moord);

    // assert: it shuts down as it would with a reader (the guard only bounds a failure)
    let status = tokio::time::timeout(moor_e2e::server::SHUTDOWN_TIMEOUT, moord.wait())
        .await
        .expect("moord exits after SIGTERM though nobody reads its log")
        .expect("wait for moord");
    assert!(status.success(), "{status}");
}

/// Runs `program args` with `input` on stdin and its stdout on a pipe whose reader is closed
/// before the program starts, as `moord user add … | head -0` would; its status and stderr.
fn into_a_closed_pipe(
    program: &str,
    args: &[&std::ffi::OsStr],
    input: &str,
) -> (std::process::ExitStatus, String) {
    use std::io::Write as _;
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let mut child = std::process::Command::new(bin_path(program))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the command");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input.as_bytes()).expect("write stdin");
    drop(stdin);
    let out = child.wait_with_output().expect("wait for the command");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn subcommands_whose_output_reader_went_away_still_succeed() {
    // arrange: a data directory for moord, a directory for moor's unit file, and a reader of
    // their stdout that is already gone
    let data = tempfile::tempdir().expect("data dir");
    let units = tempfile::tempdir().expect("unit dir");
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    let data_dir = [os("--data-dir"), data.path().as_os_str()];

    // act: each command prints what it did into the closed pipe
    let added = into_a_closed_pipe(
        "moord",
        &[
            &data_dir[..],
            &[os("user"), os("add"), os("piped"), os("--password-stdin")],
        ]
        .concat(),
        "a long enough password\n",
    );
    let revoked = into_a_closed_pipe(
        "moord",
        &[&data_dir[..], &[os("user"), os("revoke"), os("piped")]].concat(),
        "",
    );
    let installed = into_a_closed_pipe(
        "moor",
        &[
            os("host"),
            os("install"),
            os("--launchd"),
            os("false"),
            os("--dir"),
            units.path().as_os_str(),
        ],
        "",
    );

    // assert: each did its work and says so by its status, as with a reader; the revocation
    // succeeding proves the user was stored
    for (what, (status, stderr)) in [
        ("user add", added),
        ("user revoke", revoked),
        ("host install", installed),
    ] {
        assert!(status.success(), "{what}: {status}: {stderr}");
        assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    }
    assert!(
        units.path().join("moor-host.service").is_file(),
        "the unit file is written"
    );
}

#[tokio::test]
async fn moor_whose_terminal_went_away_still_kills_an_agent_that_ignores_sigterm() {
    // arrange: `moor run` with a 1 s stop grace, its agent a shell that ignores SIGTERM, and
    // its stderr on a pipe that is closed once the agent runs
    let server = TestServer::start(ServerOpts::new()).await;
    let state = tempfile::tempdir().expect("state dir");
    let mut moor = tokio::process::Command::new(bin_path("moor"))
        .args(["run", "--token", server.token(), "--server", &server.url()])
        .args([
            "--session",
            "deaf-agent",
            "--stop-grace",
            "1s",
            "--state-dir",
        ])
        .arg(state.path())
        .args(["--", "sh", "-c", "trap '' TERM; echo started; sleep 120"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start moor");
    let api = server.api();
    let session = api.wait_session("deaf-agent", WAIT).await;
    eventually(WAIT, "the agent's first line", || async {
        api.entries_all(session.id)
            .await
            .iter()
            .any(|e| e.payload.to_string().contains("started"))
    })
    .await;
    drop(moor.stderr.take());

    // act: SIGTERM, which moor passes on and announces on the closed stderr
    sigterm(&moor);

    // assert: after the grace it kills the agent, ends the session and exits, as it would with
    // a terminal (the guard only bounds a failure; the agent would sleep for 120 s)
    tokio::time::timeout(FINISH, moor.wait())
        .await
        .expect("moor exits once the grace is over though nobody reads its stderr")
        .expect("wait for moor");
    api.wait_ended("deaf-agent", WAIT).await;
}

/// Sends SIGTERM to `child`, which must be running.
fn sigterm(child: &tokio::process::Child) {
    let pid = child
        .id()
        .and_then(|p| rustix::process::Pid::from_raw(p as i32));
    rustix::process::kill_process(pid.expect("running"), rustix::process::Signal::TERM)
        .expect("send SIGTERM");
}

/// The hardening the unit promises (docs/operating.md, "systemd").
const HARDENING: &[&str] = &[
    "DynamicUser=yes",
    "StateDirectory=moord",
    "ProtectSystem=strict",
    "ProtectHome=yes",
    "PrivateTmp=yes",
    "PrivateDevices=yes",
    "NoNewPrivileges=yes",
    "CapabilityBoundingSet=",
    "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
    "SystemCallFilter=@system-service",
    "Environment=MOOR_DATA_DIR=/var/lib/moord",
    "ExecStart=/usr/local/bin/moord",
];

#[test]
fn the_systemd_unit_is_hardened_and_verifies() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/moord.service");
    let unit = std::fs::read_to_string(&path).expect("deploy/moord.service");
    let lines: Vec<&str> = unit.lines().map(str::trim).collect();
    for setting in HARDENING {
        assert!(lines.contains(setting), "{setting} missing from {path:?}");
    }
    let Ok(analyze) = which("systemd-analyze") else {
        eprintln!("SKIPPED systemd-analyze verify: systemd-analyze is not installed");
        return;
    };
    // verify checks that ExecStart exists: point it at the moord just built.
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("moord.service");
    let moord = bin_path("moord");
    std::fs::write(
        &copy,
        unit.replace("/usr/local/bin/moord", &moord.display().to_string()),
    )
    .expect("write unit copy");
    let out = std::process::Command::new(analyze)
        .args(["verify", "--man=no"])
        .arg(&copy)
        .output()
        .expect("run systemd-analyze");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "systemd-analyze verify: {said}");
    assert!(
        !said.contains("moord.service"),
        "systemd-analyze verify warns: {said}"
    );
}

/// The path of `program` on `PATH`.
fn which(program: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .ok_or(())
}

/// `moor`'s metrics as a Prometheus text-format parser reads them.
async fn moor_metrics(base: &str) -> prometheus_parse::Scrape {
    let (status, text) = moor_e2e::metrics::get(base, None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .unwrap_or_else(|e| panic!("unparseable exposition {text:?}: {e}"))
}

fn sample(scrape: &prometheus_parse::Scrape, name: &str) -> f64 {
    moor_e2e::metrics::value(scrape, name, &[]).unwrap_or_else(|| panic!("no {name}"))
}

#[tokio::test]
async fn moor_serves_its_spool_and_link_state_as_prometheus_metrics() {
    // arrange: a bridge with a metrics listener, streaming to moord
    let mut server = TestServer::start(ServerOpts::new()).await;
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = free.local_addr().expect("addr");
    drop(free);
    let base = format!("http://{addr}");
    let bridge = BridgeOpts::new(&server.url(), server.token(), "metered", &["echo"])
        .flag("--metrics-listen", addr)
        .spawn();
    let info = server.api().wait_session("metered", WAIT).await;
    let mut tail = moor_e2e::LogTail::new(server.api(), info.id);
    server.api().post_input(info.id, "m-1", "one").await;
    tail.wait_agent_lines(1, WAIT).await;

    // act + assert: up, one connection, everything acknowledged
    eventually(
        WAIT,
        "moor's spool acknowledged and its link up",
        || async {
            let m = moor_metrics(&base).await;
            sample(&m, "moor_link_up") == 1.0
                && sample(&m, "moor_spool_unacked_entries") == 0.0
                && sample(&m, "moor_acked_seq") >= 1.0
        },
    )
    .await;
    let before = moor_metrics(&base).await;
    assert_eq!(sample(&before, "moor_link_connections_total"), 1.0);
    assert_eq!(sample(&before, "moor_link_reconnects_total"), 0.0);
    assert_eq!(
        sample(&before, "moor_acked_seq"),
        sample(&before, "moor_spool_durable_seq")
    );

    // act: moord goes away
    server.kill().await;

    // assert: the link is down
    eventually(WAIT, "moor to report its link down", || async {
        sample(&moor_metrics(&base).await, "moor_link_up") == 0.0
    })
    .await;

    // act: moord comes back
    server.restart().await;

    // assert: reconnected, counted
    eventually(WAIT, "moor to reconnect", || async {
        let m = moor_metrics(&base).await;
        sample(&m, "moor_link_up") == 1.0 && sample(&m, "moor_link_reconnects_total") >= 1.0
    })
    .await;
    let (status, _) = moor_e2e::metrics::get(&format!("{base}/other"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    bridge.terminate();
}
