//! What was in flight, against the real Claude Code CLI (fake model API), the real `moor` and
//! `moord`: the link lost during a Write, the agent killed during a command, `moor recover`
//! checking the brief against the files, `moor resume` continuing the same agent session without
//! re-running a command nobody approved.

use std::process::Stdio;
use std::time::Duration;

use moor_e2e::claude::ClaudeSession;
use moor_e2e::fake_api::last_user_text;
use moor_e2e::util::bin_path;
use moor_e2e::{ClaudeEnv, FaultProxy, LogTail, ServerOpts, TestServer, WAIT};
use moor_protocol::payload::PermissionDecision;
use moor_protocol::recovery::RecoveryBrief;
use moor_protocol::state::ToolClass;
use moor_protocol::transcript::{validate, Message};
use moor_protocol::{kinds, Entry};
use serde_json::Value;

const FINISH: Duration = Duration::from_secs(60);

/// Runs a `moor` subcommand with the Claude environment, in the project directory.
async fn moor(
    env: &ClaudeEnv,
    server: &TestServer,
    args: &[&str],
    timeout: Duration,
) -> std::process::Output {
    let opts = env.bridge(&server.url(), server.token(), "unused", &[]);
    let (envs, _) = opts.environment();
    let mut cmd = tokio::process::Command::new(bin_path("moor"));
    cmd.args(args)
        .arg("--server")
        .arg(server.url())
        .arg("--token")
        .arg(server.token())
        .current_dir(&env.project)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    tokio::time::timeout(timeout, cmd.output())
        .await
        .expect("moor finished in time")
        .expect("moor ran")
}

/// SIGKILL to the agent; waits for the session to be marked interrupted (after `seq`) and for
/// `moor` to exit. Returns the `session.interrupted` entry.
async fn kill_agent(claude: &mut ClaudeSession, seq: u64) -> Entry {
    claude
        .signal_agent(rustix::process::Signal::KILL)
        .expect("kill claude");
    let interrupted = claude
        .tail
        .wait_kind("session.interrupted", seq, FINISH, |_| true)
        .await;
    claude.bridge.wait_exit(FINISH).await;
    interrupted
}

/// `GET /api/v1{path}` on `server`: the answer's body.
async fn get(server: &TestServer, path: &str) -> Value {
    let resp = server
        .api()
        .authed(reqwest::Method::GET, &format!("/api/v1{path}"), None)
        .await;
    resp.body
}

async fn brief(server: &TestServer, session: &str) -> RecoveryBrief {
    let body = get(server, &format!("/sessions/{session}/recovery")).await;
    serde_json::from_value(body).expect("brief json")
}

/// The session's transcript as messages; fails unless they are valid.
async fn valid_transcript(server: &TestServer, session: &str) -> Vec<Message> {
    let body = get(
        server,
        &format!("/sessions/{session}/transcript?format=messages"),
    )
    .await;
    let messages: Vec<Message> =
        serde_json::from_value(body["messages"].clone()).expect("transcript messages");
    if let Err(e) = validate(&messages) {
        panic!("invalid transcript: {e:?}");
    }
    messages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_lost_during_a_write_gives_a_brief_naming_the_file_and_moor_recover_says_it_did_not_land(
) {
    // arrange: Claude Code asks to write a file (default permission mode: it waits for a decision)
    let env = ClaudeEnv::start().await;
    let server = TestServer::start(ServerOpts::new()).await;
    let proxy = FaultProxy::start(server.addr()).await;
    let target = env.file("notes.txt");
    let ClaudeSession {
        name,
        id,
        mut bridge,
        mut tail,
        ..
    } = env.session(&server, &proxy.url(), "rec", &[], |o| o).await;
    let prompt = format!("[[write:{}:hello]]", target.display());
    let seq = server.api().post_input(id, "w1", &prompt).await.seq.0;
    tail.wait_kind(kinds::AGENT_PERMISSION_REQUEST, seq, FINISH, |_| true)
        .await;

    // act: the link dies and stays down
    proxy.refuse(true);
    proxy.cut_all().await;
    let interrupted = tail
        .wait_kind("session.interrupted", seq, FINISH, |_| true)
        .await;

    // assert: everyone can see what was in flight
    assert_eq!(interrupted.payload["cause"], "link");
    let b = brief(&server, &name).await;
    let write = b
        .uncertain
        .iter()
        .find(|t| t.tool == "Write")
        .unwrap_or_else(|| panic!("{b:#?}"));
    assert_eq!(write.class, ToolClass::FileMutation);
    assert!(
        write
            .target
            .as_deref()
            .is_some_and(|t| t.ends_with("notes.txt")),
        "{write:?}"
    );
    assert_eq!(b.goal.last().map(String::as_str), Some(prompt.as_str()));
    // ... and this machine can tell whether it landed: it did not.
    let out = moor(&env, &server, &["recover", &name, "--json"], WAIT).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let local: RecoveryBrief = serde_json::from_slice(&out.stdout).unwrap();
    let write = local.uncertain.iter().find(|t| t.tool == "Write").unwrap();
    assert!(write.advice.starts_with("not applied"), "{write:?}");
    assert!(!target.exists());

    proxy.refuse(false);
    bridge.terminate();
    bridge.wait_exit(FINISH).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_mid_command_is_resumed_on_its_session_and_the_command_is_not_rerun_unasked(
) {
    // arrange: an approved command that runs for a while
    let env = ClaudeEnv::start().await;
    let server = TestServer::start(ServerOpts::new()).await;
    let marker = env.file("ran.txt");
    let mut claude = env
        .session(&server, &server.url(), "kill", &[], |o| o)
        .await;
    let (name, id) = (claude.name.clone(), claude.id);
    let prompt = format!("[[bash:echo run >> {} && sleep 30]]", marker.display());
    let seq = server.api().post_input(id, "c1", &prompt).await.seq.0;
    let req = claude
        .tail
        .wait_kind(kinds::AGENT_PERMISSION_REQUEST, seq, FINISH, |_| true)
        .await;
    server
        .api()
        .answer_permission(id, "c2", &req, PermissionDecision::Allow)
        .await;
    // The command has started once the marker file has its line.
    moor_e2e::eventually(FINISH, "the command to start", || async {
        std::fs::read_to_string(&marker).is_ok_and(|s| s.lines().count() == 1)
    })
    .await;

    // act: the agent dies with the command running
    let interrupted = kill_agent(&mut claude, seq).await;

    // assert: the brief says the command's effects are unknown
    assert_eq!(interrupted.payload["cause"], "agent");
    let b = brief(&server, &name).await;
    let bash = b
        .uncertain
        .iter()
        .find(|t| t.tool == "Bash")
        .unwrap_or_else(|| panic!("{b:#?}"));
    assert!(
        bash.advice.contains("do not re-run without asking") && !bash.auto_retry,
        "{bash:?}"
    );
    let session_id = b.agent_session_id.clone().expect("agent session id");

    // act: resume; the brief is the first prompt and the model asks to run the command again
    let resumed_name = format!("{name}-resumed-");
    let resume_args = ["resume", name.as_str()];
    let run = moor(&env, &server, &resume_args, FINISH);
    let watch = async {
        let resumed = moor_e2e::eventually_some(FINISH, "the resumed session", || async {
            server
                .api()
                .sessions()
                .await
                .into_iter()
                .find(|s| s.name.starts_with(&resumed_name))
        })
        .await;
        let mut rtail = LogTail::new(server.api(), resumed.id);
        let applied = rtail
            .wait_kind(kinds::INPUT_APPLIED, 0, FINISH, |_| true)
            .await;
        let session = rtail
            .wait_kind(kinds::AGENT_SESSION, 0, FINISH, |_| true)
            .await;
        let req = rtail
            .wait_kind(kinds::AGENT_PERMISSION_REQUEST, 0, FINISH, |e| {
                e.payload["tool_name"] == "Bash"
            })
            .await;
        // Nothing runs before somebody decides: deny it.
        assert_eq!(std::fs::read_to_string(&marker).unwrap().lines().count(), 1);
        server
            .api()
            .answer_permission(resumed.id, "deny", &req, PermissionDecision::Deny)
            .await;
        rtail
            .wait_kind(kinds::AGENT_RESULT, req.seq.0, FINISH, |_| true)
            .await;
        // Done: stop the resumed agent so `moor resume` returns.
        let start = rtail.wait_kind(kinds::AGENT_START, 0, WAIT, |_| true).await;
        let pid =
            rustix::process::Pid::from_raw(start.payload["pid"].as_i64().unwrap() as i32).unwrap();
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        (resumed, applied, session)
    };
    let (out, (resumed, applied, session)) = tokio::join!(run, watch);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("resuming"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // assert: same agent session, the brief went in as the prompt, the command never re-ran,
    // and the resumed session's transcript is valid
    assert_eq!(session.payload["agent_session_id"], Value::from(session_id));
    let prompts = env.api.prompts();
    assert!(
        prompts
            .iter()
            .any(|p| p.contains("inspect") && p.contains("do not re-run without asking")),
        "{prompts:#?}"
    );
    assert!(applied.payload["input_seq"].as_u64().is_some());
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap().lines().count(),
        1,
        "the command ran again"
    );
    valid_transcript(&server, &resumed.id.to_string()).await;

    // ... and the two sessions point to each other, in their logs and their states
    let from = server
        .api()
        .entries_all(resumed.id)
        .await
        .into_iter()
        .find(|e| e.kind == kinds::SESSION_CONTINUED_FROM)
        .expect("the resumed session says what it continues");
    assert_eq!(from.payload["session"], Value::from(id.to_string()));
    assert_eq!(from.payload["name"], Value::from(name.clone()));
    let old = server.api().entries_all(id).await;
    let to: Vec<&Entry> = old
        .iter()
        .filter(|e| e.kind == kinds::SESSION_CONTINUED_IN)
        .collect();
    assert_eq!(to.len(), 1, "{old:#?}");
    assert_eq!(
        to[0].payload["session"],
        Value::from(resumed.id.to_string())
    );
    let ended = server
        .api()
        .session(&id.to_string())
        .await
        .expect("the ended session");
    let link = ended
        .state
        .and_then(|s| s.continued_in)
        .expect("continued_in in the state");
    assert_eq!(link.session, resumed.id);
    assert_eq!(link.name, resumed.name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moor_run_again_on_the_session_after_a_crash_continues_the_same_claude_conversation() {
    // arrange: one finished turn, then moor and Claude Code die without a word
    let env = ClaudeEnv::start().await;
    let server = TestServer::start(ServerOpts::new()).await;
    let mut claude = env
        .session(&server, &server.url(), "again", &[], |o| o)
        .await;
    let id = claude.id;
    let asked = server
        .api()
        .post_input(id, "c1", "remember the word heron")
        .await
        .seq
        .0;
    let first = claude
        .tail
        .wait_kind(kinds::AGENT_RESULT, asked, FINISH, |_| true)
        .await;
    let conversation = claude
        .tail
        .wait_kind(kinds::AGENT_SESSION, 0, FINISH, |_| true)
        .await
        .payload["agent_session_id"]
        .clone();
    claude.bridge.kill().await;
    let _ = claude.signal_agent(rustix::process::Signal::KILL);

    // act: the same `moor run --session X -- claude` again, then a question about the first turn
    let mut again = claude.bridge.respawn(&[]);
    let restart = claude
        .tail
        .wait_kind(kinds::AGENT_RESTART, first.seq.0, FINISH, |_| true)
        .await;
    let question = server.api().post_input(id, "c2", "which word?").await.seq.0;
    claude
        .tail
        .wait_kind(kinds::AGENT_RESULT, question, FINISH, |_| true)
        .await;

    // assert: the log says the conversation continued, and the model saw the earlier turn
    assert_eq!(restart.payload["reason"], "continued");
    assert_eq!(restart.payload["agent_session_id"], conversation);
    let request = env
        .api
        .requests()
        .into_iter()
        .rev()
        .find(|r| last_user_text(r).as_deref() == Some("which word?"))
        .expect("the question reached the model");
    assert!(
        request["messages"]
            .to_string()
            .contains("remember the word heron"),
        "the model sees the earlier conversation: {request}"
    );
    assert!(
        again
            .stderr()
            .contains("continuing Claude Code conversation"),
        "{}",
        again.stderr()
    );
    again.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_mid_answer_leaves_its_partial_answer_in_the_brief() {
    // arrange: the model starts answering, then goes silent mid-response
    let env = ClaudeEnv::start().await;
    let server = TestServer::start(ServerOpts::new()).await;
    let mut claude = env
        .session(&server, &server.url(), "partial", &[], |o| o)
        .await;
    let (name, id) = (claude.name.clone(), claude.id);
    let seq = server
        .api()
        .post_input(id, "p1", "[[stall]] explain")
        .await
        .seq
        .0;
    claude
        .tail
        .wait_kind(kinds::AGENT_TEXT_DELTA, seq, FINISH, |_| true)
        .await;

    // act: the agent dies mid-answer
    let interrupted = kill_agent(&mut claude, seq).await;

    // assert: the brief holds what had been said, and the transcript marks it interrupted
    assert_eq!(interrupted.payload["cause"], "agent");
    let b = brief(&server, &name).await;
    let partial = b.partial_answer.clone().unwrap_or_else(|| panic!("{b:#?}"));
    assert!(partial.contains("Thinking about"), "{partial}");
    assert!(
        b.resume_prompt.contains("Thinking about"),
        "{}",
        b.resume_prompt
    );
    let messages = valid_transcript(&server, &name).await;
    assert!(serde_json::to_string(&messages)
        .unwrap()
        .contains("[interrupted]"));
}
