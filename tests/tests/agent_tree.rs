//! Processes die with their agent: whatever the agent started (Claude Code's Bash tools run in a
//! session of their own, a shell's `setsid` children) is stopped by `moor` when the agent exits
//! or is killed, and `agent.exit` says what was stopped. Real `moor` and `moord`, processes
//! really killed, `/proc` checked.

use std::path::Path;
use std::time::Duration;

use moor_e2e::claude::ClaudeSession;
use moor_e2e::http::permission_answer;
use moor_e2e::rig::{shell_session, ShellSession};
use moor_e2e::util::eventually_some;
use moor_e2e::{ClaudeEnv, ServerOpts, TestServer};
use moor_protocol::payload::PermissionDecision;
use moor_protocol::{kinds, Entry};
use serde_json::json;

const FINISH: Duration = Duration::from_secs(60);

/// The pid a command wrote into `file`, once it is there.
async fn pid_in(file: &Path) -> u32 {
    eventually_some(FINISH, &format!("a pid in {}", file.display()), || async {
        std::fs::read_to_string(file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    })
    .await
}

/// Whether `pid` is a live process (not gone, not a zombie).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Pids listed as stopped in an `agent.exit` entry.
fn stopped_pids(exit: &Entry) -> Vec<u32> {
    exit.payload["stopped_processes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p["pid"].as_u64().map(|p| p as u32))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_claude_code_mid_tool_stops_the_tools_processes_and_agent_exit_names_them() {
    // arrange: a Bash tool that starts a long sleep in its own session and one in its group
    let env = ClaudeEnv::start().await;
    let server = TestServer::start(ServerOpts::new()).await;
    let ClaudeSession {
        id,
        mut bridge,
        mut tail,
        start,
        ..
    } = env
        .session(&server, &server.url(), "tree", &[], |o| {
            o.flag("--stop-grace", "2s")
        })
        .await;
    let (own, detached) = (env.file("own.pid"), env.file("detached.pid"));
    let command = format!(
        "setsid sleep 3601 & echo $! > {}; sleep 3602 & echo $! > {}; wait",
        detached.display(),
        own.display()
    );
    let seq = server
        .api()
        .post_input(id, "p1", &format!("[[bash:{command}]]"))
        .await
        .seq
        .0;
    let request = tail
        .wait_kind(kinds::AGENT_PERMISSION_REQUEST, seq, FINISH, |_| true)
        .await;
    let answer = permission_answer(&request, PermissionDecision::Allow);
    server
        .api()
        .post_input_kind(id, "p2", kinds::INPUT_PERMISSION, answer)
        .await;
    let (own_pid, detached_pid) = (pid_in(&own).await, pid_in(&detached).await);
    assert!(alive(own_pid) && alive(detached_pid));

    // act: SIGKILL to Claude Code itself, mid-tool
    let agent = start.payload["pid"].as_u64().expect("agent pid") as u32;
    moor_e2e::util::signal(agent, rustix::process::Signal::KILL);
    let exit = tail
        .wait_kind(kinds::AGENT_EXIT, seq, FINISH, |_| true)
        .await;

    // assert: nothing the agent started survives its exit, and the log says what was stopped
    assert!(!alive(own_pid), "the tool's sleep {own_pid} survived");
    assert!(
        !alive(detached_pid),
        "the setsid'd sleep {detached_pid} survived"
    );
    assert_eq!(exit.payload["signal"], 9, "{exit:?}");
    let tools = exit.payload["stopped_tools"]
        .as_array()
        .unwrap_or_else(|| panic!("agent.exit names the running tool: {exit:?}"));
    assert_eq!(tools.len(), 1, "{exit:?}");
    assert_eq!(tools[0]["name"], "Bash");
    let pids = stopped_pids(&exit);
    assert!(
        pids.contains(&own_pid) && pids.contains(&detached_pid),
        "{exit:?}"
    );
    bridge.wait_exit(FINISH).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lines_agent_killed_with_a_setsid_child_holding_its_output_ends_and_the_child_is_stopped()
{
    // arrange: a shell whose setsid'd child keeps the agent's stdout open
    let server = TestServer::start(ServerOpts::new()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let pid_file = dir.path().join("child.pid");
    let script = format!(
        "setsid sleep 3603 & echo $! > {}; echo ready; wait",
        pid_file.display()
    );
    let ShellSession {
        mut bridge,
        mut tail,
        start,
        ..
    } = shell_session(&server, "tree-lines", &script).await;
    tail.wait_agent_lines(1, FINISH).await;
    let child = pid_in(&pid_file).await;

    // act
    let shell = start.payload["pid"].as_u64().expect("agent pid") as u32;
    moor_e2e::util::signal(shell, rustix::process::Signal::KILL);
    let exit = tail.wait_kind(kinds::AGENT_EXIT, 0, FINISH, |_| true).await;

    // assert
    assert!(!alive(child), "the setsid'd sleep {child} survived");
    assert_eq!(stopped_pids(&exit), [child], "{exit:?}");
    assert_eq!(
        exit.payload["stopped_processes"][0]["command"],
        json!("sleep 3603")
    );
    bridge.wait_exit(FINISH).await;
}
