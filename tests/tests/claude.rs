//! The `claude` adapter against the real Claude Code CLI (the pinned npm package), run offline
//! against `FakeAnthropic`, through the real `moor` and `moord`.

use std::time::Duration;

use moor_e2e::assert::{agent_kinds, first_of_kind};
use moor_e2e::claude::ClaudeSession;
use moor_e2e::http::permission_answer;
use moor_e2e::{
    BridgeOpts, ClaudeEnv, LogTail, ServerOpts, SseClient, SseOpts, TestBridge, TestServer, WAIT,
};
use moor_protocol::payload::PermissionDecision;
use moor_protocol::{kinds, Entry, SessionId};
use serde_json::{json, Value};

const FINISH: Duration = Duration::from_secs(60);

struct Claude {
    env: ClaudeEnv,
    server: TestServer,
    bridge: TestBridge,
    id: SessionId,
    tail: LogTail,
    inputs: u32,
}

impl Claude {
    /// `moor run [flags] -- claude [args]`, waiting for the agent to start.
    async fn start(flags: &[(&str, &str)], args: &[&str]) -> Self {
        let env = ClaudeEnv::start().await;
        let server = TestServer::start(ServerOpts::new()).await;
        let add_flags = |opts| {
            flags
                .iter()
                .fold(opts, |o: BridgeOpts, (k, v)| o.flag(k, v))
        };
        let ClaudeSession {
            bridge, id, tail, ..
        } = env
            .session(&server, &server.url(), "claude", args, add_flags)
            .await;
        Self {
            env,
            server,
            bridge,
            id,
            tail,
            inputs: 0,
        }
    }

    async fn input(&mut self, kind: &str, payload: Value) -> u64 {
        self.inputs += 1;
        let msg = format!("in-{}", self.inputs);
        let accepted = self
            .server
            .api()
            .post_input_kind(self.id, &msg, kind, payload)
            .await;
        accepted.seq.0
    }

    async fn prompt(&mut self, text: &str) -> u64 {
        self.input(kinds::INPUT_TEXT, json!({ "text": text })).await
    }

    /// Prompts for a Bash `touch` of `file`, which needs permission; returns the request.
    async fn ask_to_touch(&mut self, file: &std::path::Path) -> Entry {
        let seq = self
            .prompt(&format!("[[bash:touch {}]]", file.display()))
            .await;
        self.tail
            .wait_kind(kinds::AGENT_PERMISSION_REQUEST, seq, FINISH, |_| true)
            .await
    }

    /// Waits for the turn started by the input at `seq` to end; returns its result entry.
    async fn turn_result(&mut self, after: u64) -> Entry {
        self.tail
            .wait_kind(kinds::AGENT_RESULT, after, FINISH, |_| true)
            .await
    }

    fn after(&self, seq: u64) -> Vec<Entry> {
        self.tail
            .entries
            .iter()
            .filter(|e| e.seq.0 > seq)
            .cloned()
            .collect()
    }

    /// SIGTERM to moor: passed to Claude Code, which exits; the session ends complete.
    async fn stop(mut self) -> Vec<Entry> {
        self.bridge.terminate();
        self.bridge.wait_exit(FINISH).await;
        let name = self
            .server
            .session(&self.id.to_string())
            .await
            .expect("the session exists")
            .name;
        self.server.api().wait_ended(&name, WAIT).await;
        self.server.api().entries_all(self.id).await
    }
}

#[tokio::test]
async fn a_remote_prompt_starts_a_turn_and_its_write_tool_call_maps_to_typed_entries_in_order() {
    // arrange: auto mode picks the claude adapter for a command named claude
    let mut c = Claude::start(&[], &["--permission-mode", "acceptEdits"]).await;
    let file = c.env.file("hello.txt");

    // act
    let seq = c
        .prompt(&format!(
            "[[write:{}:hi from the fake model]]",
            file.display()
        ))
        .await;
    let result = c.turn_result(seq).await;

    // assert
    let turn = c.after(seq);
    assert_eq!(
        agent_kinds(&turn),
        [
            "agent.session",
            "agent.text",
            "agent.tool_use",
            "agent.tool_result",
            "agent.text",
            "agent.result"
        ],
        "{turn:#?}"
    );
    let session = first_of_kind(&turn, kinds::AGENT_SESSION);
    assert!(session.payload["agent_session_id"].as_str().unwrap().len() > 10);
    assert!(session.payload["model"].is_string());
    let tool = first_of_kind(&turn, kinds::AGENT_TOOL_USE);
    assert_eq!(tool.payload["name"], "Write");
    assert_eq!(tool.payload["path"], file.display().to_string());
    let tool_result = first_of_kind(&turn, kinds::AGENT_TOOL_RESULT);
    assert_eq!(tool_result.payload["tool_use_id"], tool.payload["id"]);
    assert_eq!(tool_result.payload["is_error"], false);
    // The bridge hashed the target before the Write and found it applied after.
    let intent = first_of_kind(&turn, moor_protocol::state::TOOL_INTENT);
    assert_eq!(intent.payload["tool_use_id"], tool.payload["id"]);
    assert_eq!(
        intent.payload["before"],
        Value::Null,
        "the file did not exist before"
    );
    let checked = first_of_kind(&turn, moor_protocol::state::TOOL_INTENT_CHECKED);
    assert_eq!(checked.payload["verdict"], "applied");
    assert!(
        turn.iter().any(|e| e.kind == kinds::AGENT_TEXT_DELTA),
        "deltas stream"
    );
    assert_eq!(result.payload["is_error"], false);
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "hi from the fake model"
    );
    assert!(
        turn.iter()
            .any(|e| e.kind == kinds::INPUT_APPLIED && e.payload["input_seq"] == seq),
        "the prompt is accounted as applied"
    );

    // a second prompt, a Bash call: the result summary is the command's output
    let seq = c.prompt("[[bash:echo hi-from-bash]]").await;
    c.turn_result(seq).await;
    let turn = c.after(seq);
    let tool_result = first_of_kind(&turn, kinds::AGENT_TOOL_RESULT);
    assert_eq!(tool_result.payload["summary"], "hi-from-bash");
    let log = c.stop().await;
    moor_e2e::assert_contiguous(&log);
}

#[tokio::test]
async fn remote_deny_stops_the_tool_remote_approve_runs_it_and_a_late_viewer_sees_the_pending_request(
) {
    let mut c = Claude::start(&[], &[]).await;
    let denied = c.env.file("denied.txt");
    let approved = c.env.file("approved.txt");

    // a tool call that needs permission: the request is a log entry, pending
    let request = c.ask_to_touch(&denied).await;
    assert_eq!(request.payload["tool_name"], "Bash");
    let request_id = request.payload["request_id"].as_str().unwrap().to_owned();

    // a viewer who joins later sees it pending: the request and no resolution
    let late = SseClient::connect(
        c.server.api().base(),
        c.server.token(),
        c.id,
        SseOpts::default(),
    );
    late.wait_seq(request.seq.0, WAIT).await;
    let seen = late.snapshot().entries;
    assert!(seen
        .iter()
        .any(|e| e.kind == kinds::AGENT_PERMISSION_REQUEST
            && e.payload["request_id"] == request_id.as_str()));
    assert!(!seen
        .iter()
        .any(|e| e.kind == kinds::AGENT_PERMISSION_RESOLVED));
    assert!(
        !denied.exists(),
        "nothing runs while the request is pending"
    );

    // a decision for a request that is not pending is refused at the POST (nothing is stored),
    // the real one stays pending
    let bogus = c
        .server
        .api()
        .post_input_kind_raw(
            c.id,
            "bogus",
            kinds::INPUT_PERMISSION,
            json!({"request_id": "nope", "decision": "allow"}),
        )
        .await;
    assert_eq!(
        bogus.status,
        reqwest::StatusCode::CONFLICT,
        "{:?}",
        bogus.body
    );
    assert!(
        bogus.body["message"]
            .as_str()
            .unwrap()
            .contains("not pending"),
        "{:?}",
        bogus.body
    );

    // deny: the tool does not run, the model gets an error result
    let deny = c
        .input(
            kinds::INPUT_PERMISSION,
            json!({"request_id": request_id, "decision": "deny", "message": "not today"}),
        )
        .await;
    c.turn_result(deny).await;
    let turn = c.after(request.seq.0);
    let resolved = first_of_kind(&turn, kinds::AGENT_PERMISSION_RESOLVED);
    assert_eq!(resolved.payload["decision"], "deny");
    assert_eq!(resolved.payload["by"], "user:admin");
    assert_eq!(resolved.payload["input_seq"], deny);
    let result = first_of_kind(&turn, kinds::AGENT_TOOL_RESULT);
    assert_eq!(result.payload["is_error"], true);
    assert!(!denied.exists(), "a denied tool never ran");
    late.wait_for(WAIT, "the late viewer sees the decision", |s| {
        s.entries
            .iter()
            .any(|e| e.kind == kinds::AGENT_PERMISSION_RESOLVED)
    })
    .await;

    // approve: the tool runs
    let request = c.ask_to_touch(&approved).await;
    let allow = c
        .input(
            kinds::INPUT_PERMISSION,
            permission_answer(&request, PermissionDecision::Allow),
        )
        .await;
    c.turn_result(allow).await;
    let result = c
        .after(request.seq.0)
        .into_iter()
        .find(|e| e.kind == kinds::AGENT_TOOL_RESULT)
        .unwrap();
    assert_eq!(result.payload["is_error"], false);
    assert!(approved.exists(), "an approved tool ran");
    c.stop().await;
}

#[tokio::test]
async fn a_stalled_model_stream_is_reported_once_past_the_timeout_and_an_interrupt_ends_the_turn() {
    let stall = Duration::from_secs(2);
    let mut c = Claude::start(&[("--stall-timeout", "2s")], &[]).await;

    let seq = c.prompt("[[stall]] take your time").await;
    // On a busy machine Claude Code can be silent for the limit before its first word: that is
    // a stall too, and the words that follow re-arm the watchdog. The stall measured here is the
    // first one after the words.
    c.tail
        .wait_for(FINISH, "an agent.stalled after the model's words", |es| {
            stall_after_words(es, seq).is_some()
        })
        .await;
    let (last_word, stalled) = stall_after_words(&c.tail.entries, seq).expect("just found");
    // assert: reported for the streaming phase, against the configured limit, and not before
    // the silence reached it (the deadline's exact timing is tested on paused time in moor's
    // watchdog tests)
    assert_eq!(stalled.payload["phase"], "streaming");
    assert_eq!(stalled.payload["timeout_ms"], stall.as_millis() as u64);
    let silent = stalled.payload["silent_ms"].as_u64().unwrap();
    assert!(
        silent >= stall.as_millis() as u64,
        "reported after only {silent} ms of silence"
    );
    // Timed by the bridge's own clock: the report follows the last word before the silence by
    // at least the limit.
    let margin = stalled.ts - last_word.ts;
    assert!(
        margin >= stall.as_millis() as i64,
        "agent.stalled {margin} ms after the last output, limit {stall:?}"
    );

    // an interrupt stops the stalled turn
    let int = c.input(kinds::INPUT_INTERRUPT, json!({})).await;
    let result = c.turn_result(int).await;
    assert_eq!(result.payload["is_error"], true);
    c.stop().await;
}

/// The first `agent.stalled` after `seq` that follows a text delta, with the last delta before it.
fn stall_after_words(entries: &[Entry], seq: u64) -> Option<(Entry, Entry)> {
    let mut last_word = None;
    for e in entries.iter().filter(|e| e.seq.0 > seq) {
        if e.kind == kinds::AGENT_TEXT_DELTA {
            last_word = Some(e);
        } else if e.kind == kinds::AGENT_STALLED {
            if let Some(word) = last_word {
                return Some((word.clone(), e.clone()));
            }
        }
    }
    None
}

#[tokio::test]
async fn a_long_running_tool_is_not_reported_as_a_stall() {
    let mut c = Claude::start(
        &[("--stall-timeout", "2s")],
        &["--permission-mode", "acceptEdits"],
    )
    .await;
    let seq = c.prompt("[[bash:sleep 5 && echo slept]]").await;
    // sleep may need a decision in this permission mode; time spent waiting for a person is no
    // stall either
    c.tail
        .wait_for(FINISH, "a permission request or the tool result", |es| {
            es.iter().any(|e| {
                e.seq.0 > seq
                    && (e.kind == kinds::AGENT_PERMISSION_REQUEST
                        || e.kind == kinds::AGENT_TOOL_RESULT)
            })
        })
        .await;
    if let Some(req) = c
        .after(seq)
        .into_iter()
        .find(|e| e.kind == kinds::AGENT_PERMISSION_REQUEST)
    {
        c.input(
            kinds::INPUT_PERMISSION,
            permission_answer(&req, PermissionDecision::Allow),
        )
        .await;
    }
    c.turn_result(seq).await;
    let turn = c.after(seq);
    let tool = first_of_kind(&turn, kinds::AGENT_TOOL_USE);
    let result = first_of_kind(&turn, kinds::AGENT_TOOL_RESULT);
    assert_eq!(result.payload["summary"], "slept");
    assert!(
        result.ts - tool.ts > 2000,
        "the tool ran longer than the stall limit"
    );
    // A slow machine may make the model side exceed 2 s; the running tool must never count.
    let tool_stalls: Vec<_> = turn
        .iter()
        .filter(|e| e.kind == kinds::AGENT_STALLED && e.payload["phase"] != "streaming")
        .collect();
    assert!(
        tool_stalls.is_empty(),
        "a 5 s tool with a 2 s stall limit is not a stall: {tool_stalls:#?}"
    );
    c.stop().await;
}

#[tokio::test]
async fn with_auto_resume_a_stalled_agent_is_restarted_on_its_session_and_finishes_the_turn() {
    let mut c = Claude::start(&[("--stall-timeout", "2s"), ("--auto-resume", "")], &[]).await;
    let seq = c.prompt("[[stall]] then recover").await;
    let stalled = c
        .tail
        .wait_kind(kinds::AGENT_STALLED, seq, FINISH, |_| true)
        .await;
    let restart = c
        .tail
        .wait_kind(kinds::AGENT_RESTART, stalled.seq.0, FINISH, |_| true)
        .await;
    assert_eq!(restart.payload["reason"], "stalled");
    assert_eq!(restart.payload["attempt"], 1);
    // The new process's agent.start says how it ran: resuming the agent session.
    let restarted = c
        .tail
        .wait_kind(kinds::AGENT_START, restart.seq.0, FINISH, |_| true)
        .await;
    let argv: Vec<&str> = restarted.payload["command"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    let at = argv.iter().position(|a| *a == "--resume");
    assert_eq!(
        at.and_then(|i| argv.get(i + 1)).copied(),
        restart.payload["agent_session_id"].as_str(),
        "{argv:?}"
    );
    let session = c
        .after(seq)
        .into_iter()
        .find(|e| e.kind == kinds::AGENT_SESSION)
        .unwrap();
    assert_eq!(
        restart.payload["agent_session_id"],
        session.payload["agent_session_id"]
    );
    let result = c.turn_result(restart.seq.0).await;
    assert_eq!(result.payload["is_error"], false, "{:#?}", c.after(seq));
    assert_eq!(
        result.payload["agent_session_id"], session.payload["agent_session_id"],
        "resumed the same agent session"
    );
    let prompts = c.env.api.prompts();
    let recovery = prompts.last().unwrap();
    assert!(
        recovery.contains("stalled") && recovery.contains("inspect"),
        "{recovery}"
    );
    c.stop().await;
}

#[tokio::test]
async fn a_model_api_that_keeps_failing_gives_error_entries_with_the_retry_count_and_a_failed_turn()
{
    // arrange (`ClaudeEnv` allows the CLI two retries, so the turn fails within seconds)
    let mut c = Claude::start(&[], &[]).await;

    // act: the fake API answers 529 (overloaded) to every request of the turn
    let seq = c.prompt("[[fail:529]]").await;
    let result = c.turn_result(seq).await;

    // assert
    assert_eq!(result.payload["is_error"], true, "{result:?}");
    let turn = c.after(seq);
    let errors: Vec<&Entry> = turn
        .iter()
        .filter(|e| e.kind == kinds::AGENT_ERROR)
        .collect();
    let retries: Vec<&Entry> = errors
        .iter()
        .copied()
        .filter(|e| e.payload["reason"] == "api_retry")
        .collect();
    assert!(!retries.is_empty(), "{turn:#?}");
    assert_eq!(retries[0].payload["status"], 529, "{:?}", retries[0]);
    assert_eq!(retries[0].payload["retries"], 1);
    let failed = errors
        .iter()
        .find(|e| e.payload["reason"] != "api_retry")
        .unwrap_or_else(|| panic!("the failed turn is an agent.error: {turn:#?}"));
    assert!(failed.seq > result.seq, "it follows the result");
    assert_eq!(failed.payload["retries"], retries.len());
    let api = c.server.api();
    let id = c.id.to_string();
    let counts = moor_e2e::util::eventually_some(WAIT, "the fold to count the errors", || async {
        let state = api.session(&id).await?.state?;
        (state.head >= failed.seq).then_some(state.counts)
    })
    .await;
    assert_eq!(counts.errors, errors.len() as u64, "{counts:?}");
    c.stop().await;
}
