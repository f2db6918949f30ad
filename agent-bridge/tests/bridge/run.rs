//! Whole `moor run` lifecycles: through `Bridge`, and through the `moor` binary for what only a
//! process can show (SIGKILL and resume, exit codes, messages).

use std::process::{Command, Stdio};

use moor_bridge::{Bridge, BridgeError, BridgeExit, ConnectError};
use moor_protocol::bridge::ReceiptStatus;
use moor_protocol::{close, kinds, Entry, Seq};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::{FakeServer, Script};
use crate::{bridge_config, within, TOKEN};

fn input(seq: u64, kind: &str, payload: serde_json::Value) -> Entry {
    Entry {
        seq: Seq(seq),
        ts: 0,
        kind: kind.into(),
        author: "user:t".into(),
        payload,
    }
}

/// Run a bridge for `argv` against `server` until it stops, with a fresh shutdown token.
async fn run_bridge(
    server: &FakeServer,
    state: &std::path::Path,
    argv: &[&str],
) -> Result<BridgeExit, BridgeError> {
    let config = bridge_config(server, state, argv);
    within(
        "bridge stops",
        Bridge::new(config).run(CancellationToken::new()),
    )
    .await
}

#[tokio::test]
async fn agent_output_is_delivered_and_the_session_ends_with_the_agents_exit_code() {
    // arrange
    let server = FakeServer::start(Script::default()).await;
    let state = tempfile::tempdir().unwrap();
    // act
    let exit = run_bridge(
        &server,
        state.path(),
        &["sh", "-c", "echo hello; echo oops >&2; printf tail; exit 3"],
    )
    .await
    .unwrap();
    // assert
    assert_eq!(exit.exit_code(), 3);
    assert!(matches!(exit, BridgeExit::Ended { .. }));
    let seen = server.seen.lock().unwrap();
    assert!(seen.ended);
    let kinds: Vec<&str> = seen.entries.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds.first(), Some(&kinds::AGENT_START));
    assert_eq!(kinds.last(), Some(&kinds::AGENT_EXIT));
    assert_eq!(
        seen.entries.last().unwrap().payload,
        json!({"code": 3, "signal": null, "stopped_tools": [], "stopped_processes": []})
    );
    let start = &seen.entries[0].payload;
    assert_eq!(start["command"][0], "sh");
    assert!(start["pid"].as_u64().is_some());
    let mut outputs: Vec<(String, String)> = seen
        .entries
        .iter()
        .filter(|e| e.kind == kinds::AGENT_OUTPUT)
        .map(|e| {
            (
                e.payload["stream"].as_str().unwrap().into(),
                e.payload["text"].as_str().unwrap().into(),
            )
        })
        .collect();
    outputs.sort();
    let want = [("stderr", "oops"), ("stdout", "hello"), ("stdout", "tail")]
        .map(|(a, b)| (a.to_owned(), b.to_owned()));
    assert_eq!(outputs, want);
    assert_eq!(seen.hellos[0].agent.adapter, "lines");
    // a finished session leaves nothing behind
    assert!(!state.path().join("sessions").join("s1").exists());
}

#[tokio::test]
async fn text_input_reaches_the_agent_and_every_input_gets_receipts() {
    // arrange: one text input, and one kind the lines adapter cannot apply
    let script = Script {
        inputs: vec![
            input(5, kinds::INPUT_TEXT, json!({"text": "hi there"})),
            input(6, "input.keys", json!({"keys": "^C"})),
        ],
        ..Script::default()
    };
    let server = FakeServer::start(script).await;
    let state = tempfile::tempdir().unwrap();
    // act
    let exit = run_bridge(
        &server,
        state.path(),
        &["sh", "-c", "read line; echo \"got:$line\""],
    )
    .await
    .unwrap();
    // assert
    assert_eq!(exit.exit_code(), 0);
    let seen = server.seen.lock().unwrap();
    assert!(
        seen.texts().contains(&"got:hi there".to_owned()),
        "{:?}",
        seen.texts()
    );
    let of = |seq| {
        seen.receipts
            .iter()
            .filter(|(s, _)| *s == Seq(seq))
            .map(|(_, r)| r.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(of(5), [ReceiptStatus::Delivered, ReceiptStatus::Applied]);
    let six = of(6);
    assert_eq!(six[0], ReceiptStatus::Delivered);
    assert!(matches!(six[1], ReceiptStatus::Failed { .. }), "{six:?}");
}

#[tokio::test]
async fn a_terminal_close_stops_the_agent_and_fails_the_run() {
    let script = Script {
        close_first_with: Some(close::SUPERSEDED),
        ..Script::default()
    };
    let server = FakeServer::start(script).await;
    let state = tempfile::tempdir().unwrap();
    // an agent that would outlast the test's failure guard unless moor stops it
    let err = run_bridge(&server, state.path(), &["sleep", "600"])
        .await
        .unwrap_err();

    assert!(
        matches!(
            err,
            BridgeError::Link(ConnectError::Terminal {
                code: close::SUPERSEDED,
                ..
            })
        ),
        "{err}"
    );
    assert_eq!(
        agent_exit(state.path(), "s1"),
        json!({"code": null, "signal": 15, "stopped_tools": [], "stopped_processes": []}),
        "moor stopped the agent with SIGTERM"
    );
}

/// The `agent.exit` payload spooled by the last run of `session`.
fn agent_exit(state: &std::path::Path, session: &str) -> serde_json::Value {
    let dir = moor_bridge::session_dir::SessionDir::open(state, session).unwrap();
    let batch = dir.spool.read_batch(1, usize::MAX, usize::MAX).unwrap();
    let entries = batch.map(|b| b.entries().unwrap()).unwrap_or_default();
    entries
        .into_iter()
        .rev()
        .find(|e| e.kind == kinds::AGENT_EXIT)
        .unwrap_or_else(|| panic!("no {} spooled", kinds::AGENT_EXIT))
        .payload
}

#[tokio::test]
async fn a_second_bridge_for_the_same_session_refuses_to_start() {
    let server = FakeServer::start(Script {
        no_ack_on: vec![1],
        ..Script::default()
    })
    .await;
    let state = tempfile::tempdir().unwrap();
    let shutdown = CancellationToken::new();
    let first = tokio::spawn(
        Bridge::new(bridge_config(&server, state.path(), &["sleep", "30"])).run(shutdown.clone()),
    );
    server
        .wait_until("first bridge sent agent.start", |s| {
            s.uncommitted.len() == 1
        })
        .await;

    let second = Bridge::new(bridge_config(&server, state.path(), &["true"]))
        .run(CancellationToken::new())
        .await;

    assert!(
        matches!(second, Err(BridgeError::Locked { .. })),
        "{second:?}"
    );
    shutdown.cancel();
    let first = within("first bridge stops", first).await.unwrap().unwrap();
    assert!(
        matches!(first, BridgeExit::Interrupted { unacked: 1, .. }),
        "{first:?}"
    );
}

fn moor(server: &FakeServer, state: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_moor"));
    // Never in the source tree: `moor run` checkpoints the git work tree it runs in.
    cmd.current_dir(state)
        .env("MOOR_SERVER", server.url())
        .env("MOOR_TOKEN", TOKEN)
        .env("MOOR_STATE_DIR", state)
        .env("MOOR_BACKOFF_INITIAL_MS", "20")
        .env("MOOR_BACKOFF_MAX_MS", "100")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moor_killed_with_sigkill_resumes_and_delivers_everything_exactly_once() {
    // arrange: the first connection takes entries but never commits them
    let server = FakeServer::start(Script {
        no_ack_on: vec![1],
        ..Script::default()
    })
    .await;
    let state = tempfile::tempdir().unwrap();
    let script = "for i in $(seq 1 200); do echo line$i; done; exec sleep 30";
    let mut first = moor(&server, state.path())
        .args(["run", "--session", "crashy", "--", "sh", "-c", script])
        .spawn()
        .unwrap();
    server
        .wait_until("all output sent once", |s| s.uncommitted.len() == 201)
        .await;
    // act: SIGKILL, then run again with the same session
    first.kill().unwrap();
    first.wait().unwrap();
    let agent_pid = server.seen.lock().unwrap().uncommitted[0].payload["pid"]
        .as_u64()
        .unwrap();
    kill_orphaned_agent(agent_pid);
    let mut again = moor(&server, state.path());
    again.args(["run", "--session", "crashy", "--", "true"]);
    // Blocking wait off the runtime: the fake server runs on it.
    let second = within(
        "second moor",
        tokio::task::spawn_blocking(move || again.output()),
    )
    .await
    .unwrap()
    .unwrap();
    // assert
    assert_eq!(
        second.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let seen = server.seen.lock().unwrap();
    let seqs: Vec<u64> = seen.entries.iter().map(|e| e.producer_seq).collect();
    assert_eq!(seqs, (1..=203).collect::<Vec<_>>());
    let texts = seen.texts();
    assert_eq!(
        texts,
        (1..=200).map(|i| format!("line{i}")).collect::<Vec<_>>()
    );
    assert_eq!(seen.entries[201].kind, kinds::AGENT_START);
    assert_eq!(seen.entries[202].kind, kinds::AGENT_EXIT);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("moor: session fake "), "{stderr}");
    assert!(
        stderr.contains("201 entries from an earlier run"),
        "{stderr}"
    );
}

/// The agent runs in its own process group and outlives a SIGKILLed `moor`; end it.
fn kill_orphaned_agent(pid: u64) {
    let pid = i32::try_from(pid)
        .ok()
        .filter(|p| *p > 1)
        .and_then(rustix::process::Pid::from_raw);
    if let Some(pid) = pid {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

#[test]
fn moor_without_a_token_says_where_the_token_is() {
    let out = Command::new(env!("CARGO_BIN_EXE_moor"))
        .args(["run", "--", "true"])
        .env_remove("MOOR_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("MOOR_TOKEN") && stderr.contains("admin.token"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moor_superseded_while_the_agent_streams_stops_the_agent_and_says_why() {
    // arrange: the agent writes continuously; the server says "superseded" at once
    let script = Script {
        close_first_with: Some(close::SUPERSEDED),
        ..Script::default()
    };
    let server = FakeServer::start(script).await;
    let state = tempfile::tempdir().unwrap();
    let mut cmd = moor(&server, state.path());
    cmd.args([
        "run",
        "--session",
        "busy",
        "--",
        "sh",
        "-c",
        "while :; do echo x; sleep 0.01; done",
    ]);
    // act
    let out = within(
        "moor exits",
        tokio::task::spawn_blocking(move || cmd.output()),
    )
    .await
    .unwrap()
    .unwrap();
    // assert
    // assert: the endless agent was stopped, and moor said why
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("another bridge took over session"),
        "{stderr}"
    );
    assert_eq!(agent_exit(state.path(), "busy")["signal"], 15, "{stderr}");
}

#[test]
fn moor_with_a_missing_command_exits_127_like_a_shell() {
    let state = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_moor"))
        .args([
            "run",
            "--server",
            "http://127.0.0.1:9",
            "--",
            "/nonexistent/agent",
        ])
        .env("MOOR_TOKEN", TOKEN)
        .env("MOOR_STATE_DIR", state.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot start"), "{stderr}");
}
