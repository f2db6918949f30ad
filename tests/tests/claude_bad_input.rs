//! The `claude` adapter fed bad stream-json and a crashing agent (a stand-in that replays lines,
//! not the real CLI): everything becomes a clear entry, inputs are accounted for, nothing is
//! lost, and an input for the ended session is refused in plain words.

use moor_e2e::{BridgeOpts, LogTail, ServerOpts, TestServer, WAIT};
use moor_protocol::kinds;
use serde_json::json;

const LINES: &str = r#"{"type":"system","subtype":"init","session_id":"s-1","model":"m","cwd":"/x","tools":[]}
{"type":"hologram","depth":3}
this is not json
{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"still here"}]}}
"#;

#[tokio::test]
async fn garbage_output_and_a_crash_become_entries_and_every_input_is_accounted_for() {
    // arrange: a "claude" that prints good, unknown and malformed lines, then crashes on a prompt
    let server = TestServer::start(ServerOpts::new()).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("capture.jsonl");
    std::fs::write(&file, LINES).unwrap();
    let name = format!("bad-{}", uuid::Uuid::new_v4().simple());
    let mut bridge = BridgeOpts::new(
        &server.url(),
        server.token(),
        &name,
        &["replay", &file.display().to_string(), "--then-crash", "3"],
    )
    .flag("--mode", "claude")
    .spawn();
    let api = server.api();
    let id = api.wait_session(&name, WAIT).await.id;
    let mut tail = LogTail::new(api.clone(), id);
    tail.wait_kind(kinds::AGENT_TEXT, 0, WAIT, |e| {
        e.payload["text"] == "still here"
    })
    .await;

    // act: keystrokes the claude adapter does not take, then a prompt that crashes the agent
    let keys = api
        .post_input_kind(id, "k", kinds::INPUT_KEYS, json!({"text": "x"}))
        .await;
    let crash = api.post_input(id, "p1", "crash now").await;
    let status = bridge.wait_exit(moor_e2e::FINISH).await;
    api.wait_ended(&name, WAIT).await;

    // assert
    assert_eq!(status.code(), Some(3), "the agent's exit code is passed on");
    let log = api.entries_all(id).await;
    moor_e2e::assert_contiguous(&log);
    let of = |k: &str| log.iter().filter(|e| e.kind == k).collect::<Vec<_>>();
    assert_eq!(of(kinds::AGENT_SESSION).len(), 1);
    let event = of(kinds::AGENT_EVENT);
    assert!(
        event.iter().any(|e| e.payload["type"] == "hologram"),
        "unknown type kept"
    );
    let errors = of(kinds::AGENT_ERROR);
    assert!(
        errors
            .iter()
            .any(|e| e.payload["line"] == "this is not json"),
        "malformed line kept: {errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.payload["line"] == r#"{"type":"assistant","message":{"#),
        "the half line printed while crashing is kept: {errors:?}"
    );
    assert_eq!(of(kinds::AGENT_EXIT)[0].payload["code"], 3);
    let receipts = |seq: u64, kind: &str| {
        log.iter()
            .filter(|e| e.kind == kind && e.payload["input_seq"] == seq)
            .count()
    };
    assert_eq!(receipts(keys.seq.0, kinds::INPUT_FAILED), 1);
    assert_eq!(receipts(keys.seq.0, kinds::INPUT_APPLIED), 0);
    let failed_keys = of(kinds::INPUT_FAILED)
        .into_iter()
        .find(|e| e.payload["input_seq"] == keys.seq.0)
        .expect("keystrokes to claude fail with a reason");
    assert!(failed_keys.payload["reason"]
        .as_str()
        .unwrap()
        .contains("input.text"));
    assert_eq!(receipts(crash.seq.0, kinds::INPUT_APPLIED), 1);
    assert_eq!(receipts(crash.seq.0, kinds::INPUT_FAILED), 0);

    // an input for the session whose agent exited is refused in plain words
    let late = api.post_input_raw(id, "p2", "anyone there?").await;
    assert_eq!(late.status.as_u16(), 409, "{:?}", late.body);
    assert_eq!(late.error_code(), Some("session_ended"));
}

/// A "claude" (the replaying stand-in) that prints `first`, then an assistant text `last`, run
/// against a server started with `opts`; returns once `last` is in the log, with the whole log.
async fn replayed_until(opts: ServerOpts, first: &str, last: &str) -> Vec<moor_protocol::Entry> {
    let server = TestServer::start(opts).await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("capture.jsonl");
    let after = json!({"type": "assistant", "message": {"id": "last", "content": [{
        "type": "text", "text": last,
    }]}});
    std::fs::write(&file, format!("{first}\n{after}\n")).expect("the capture written");
    let name = format!("replay-{}", uuid::Uuid::new_v4().simple());
    let _bridge = BridgeOpts::new(
        &server.url(),
        server.token(),
        &name,
        &["replay", &file.display().to_string()],
    )
    .flag("--mode", "claude")
    .spawn();
    let api = server.api();
    let id = api.wait_session(&name, WAIT).await.id;
    let mut tail = LogTail::new(api.clone(), id);
    tail.wait_kind(kinds::AGENT_TEXT, 0, WAIT, |e| e.payload["text"] == last)
        .await;
    let log = api.entries_all(id).await;
    moor_e2e::assert_contiguous(&log);
    log
}

#[tokio::test]
async fn a_tool_call_larger_than_the_servers_frame_limit_is_cut_to_fit_and_the_session_goes_on() {
    // arrange: a "claude" whose Write tool call carries 5 MiB of file content, then says more;
    // a server that takes frames of 256 KiB at most
    let opts = ServerOpts::new().flag("--max-frame-bytes", 256 * 1024);
    let content = "0123456789abcdef".repeat(5 << 16);
    let write = json!({"type": "assistant", "message": {"id": "m1", "content": [{
        "type": "tool_use", "id": "t1", "name": "Write",
        "input": {"file_path": "/w/big.txt", "content": content},
    }]}});

    // act
    let log = replayed_until(opts, &write.to_string(), "after the big write").await;

    // assert: the call is in the log, its path whole and its content cut short, saying so, and
    // small enough for one frame; the link stayed up (one connection)
    let call = log
        .iter()
        .find(|e| e.kind == kinds::AGENT_TOOL_USE)
        .expect("the tool call is in the log");
    assert_eq!(call.payload["id"], "t1");
    assert_eq!(call.payload["input"]["file_path"], "/w/big.txt");
    let sent = call.payload["input"]["content"].as_str().unwrap();
    assert!(content.starts_with(sent.split(" … [").next().unwrap()));
    assert!(
        sent.contains("bytes cut: the entry was over"),
        "{}",
        &sent[sent.len() - 120..]
    );
    assert!(serde_json::to_vec(&call.payload).unwrap().len() < 256 * 1024);
    let connections = log
        .iter()
        .filter(|e| e.kind == kinds::BRIDGE_CONNECTED)
        .count();
    assert_eq!(connections, 1, "the link was not cut for the big entry");
}

#[tokio::test]
async fn a_line_longer_than_the_bridge_reads_is_skipped_and_said_so() {
    // arrange: a "claude" that prints a line of 20 MiB, then a good one
    let long = "z".repeat(20 << 20);

    // act
    let log = replayed_until(ServerOpts::new(), &long, "after the long line").await;

    // assert: the long line is an error that gives its size
    let errors: Vec<_> = log
        .iter()
        .filter(|e| e.kind == kinds::AGENT_ERROR)
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let message = errors[0].payload["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("a line of {} bytes", 20 << 20)),
        "{message}"
    );
}
