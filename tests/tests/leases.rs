//! Bridge leases against real processes: a bridge's presence is what a live node can prove.
//! `moord` and `moor` both killed while Claude Code (fake model API) waits for a permission,
//! then only `moord` restarted on the same data dir: the log records the lost connection and
//! the interruption once, the state shows the link down with nothing awaiting permission, and a
//! new input's receipt says it is queued.

use moor_e2e::claude::ClaudeSession;
use moor_e2e::{ClaudeEnv, LogTail, ServerOpts, TestServer, FINISH};
use moor_protocol::payload::PermissionDecision;
use moor_protocol::state::Phase;
use moor_protocol::{kinds, Entry};

/// How many entries of `kind` come after seq `after`.
fn count(entries: &[Entry], kind: &str, after: u64) -> usize {
    entries
        .iter()
        .filter(|e| e.kind == kind && e.seq.0 > after)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridge_lost_with_its_server_is_recorded_once_after_restart_and_inputs_say_queued() {
    // arrange: Claude Code asks to write a file and waits for a decision
    let env = ClaudeEnv::start().await;
    let mut server = TestServer::start(ServerOpts::new()).await;
    let mut claude: ClaudeSession = env
        .session(&server, &server.url(), "lease", &[], |o| o)
        .await;
    let id = claude.id;
    let prompt = format!("[[write:{}:hello]]", env.file("notes.txt").display());
    let sent = server.api().post_input(id, "w1", &prompt).await;
    assert!(!sent.queued, "a live bridge holds the session: {sent:?}");
    let request = claude
        .tail
        .wait_kind(kinds::AGENT_PERMISSION_REQUEST, sent.seq.0, FINISH, |_| {
            true
        })
        .await;

    // act: kill -9 moord and moor (and the agent under it), then start only moord again
    server.kill().await;
    claude.bridge.kill().await;
    let _ = claude.signal_agent(rustix::process::Signal::KILL);
    server.restart().await;

    // assert: the connection's end and the interruption are in the log
    let mut tail = LogTail::new(server.api(), id);
    let interrupted = tail
        .wait_kind(kinds::SESSION_INTERRUPTED, request.seq.0, FINISH, |_| true)
        .await;
    assert_eq!(interrupted.payload["cause"], "link");
    assert_eq!(
        interrupted.payload["pending_permissions"][0]["request_id"],
        request.payload["request_id"]
    );
    let info = server
        .api()
        .session(&id.to_string())
        .await
        .expect("session");
    assert!(!info.bridge.online);
    let state = info.state.expect("state");
    assert!(!state.link.up, "{:?}", state.link);
    assert_ne!(state.phase, Phase::AwaitingPermission);
    assert!(state.pending_permissions.is_empty(), "{state:?}");

    // ... a decision now is refused: the agent that asked is gone, so nothing is pending
    let answer = server
        .api()
        .post_input_kind_raw(
            id,
            "p1",
            kinds::INPUT_PERMISSION,
            moor_e2e::http::permission_answer(&request, PermissionDecision::Allow),
        )
        .await;
    assert_eq!(answer.status, 409, "{:?}", answer.body);

    // ... and a second restart records nothing more: the end was recorded exactly once
    server.restart().await;
    let mut tail = LogTail::new(server.api(), id);
    tail.refresh().await;
    let after = request.seq.0;
    assert_eq!(
        count(&tail.entries, kinds::BRIDGE_DISCONNECTED, after),
        1,
        "{}",
        moor_e2e::assert::summary(&tail.entries)
    );
    assert_eq!(count(&tail.entries, kinds::SESSION_INTERRUPTED, after), 1);
    let disconnect = tail
        .entries
        .iter()
        .find(|e| e.kind == kinds::BRIDGE_DISCONNECTED && e.seq.0 > after)
        .expect("disconnect");
    assert!(disconnect.seq < interrupted.seq);
    let reason = disconnect.payload["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("server restart"), "{reason}");
}
