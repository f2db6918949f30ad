//! Properties of the state fold and the repaired transcript over random logs: the fold is
//! deterministic and `fold(snapshot, rest) == fold(all)` at every split point; every prefix of a
//! log yields a transcript that satisfies the Messages API's pairing and alternation rules; odd
//! and malformed entries are counted, never fatal.

use moor_protocol::kinds as k;
use moor_protocol::recovery::{brief, RetryPolicy};
use moor_protocol::state::{Phase, SessionState, ToolClass, INTERRUPTED_KEPT, SESSION_INTERRUPTED};
use moor_protocol::transcript::{repaired, validate};
use moor_protocol::{Entry, Seq};
use proptest::prelude::*;
use serde_json::{json, Value};

#[derive(Debug, Clone)]
enum Ev {
    Prompt(u8),
    Delta(u8, u8),
    Text(u8),
    ToolUse(u8, u8),
    ToolResult(u8, bool),
    Interrupted,
    Result,
    Restart,
    Exit,
    Start,
    Permission(u8),
    Resolved(u8),
    Receipt(u8, u8),
    Unknown,
    Malformed(u8),
}

fn ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        3 => any::<u8>().prop_map(Ev::Prompt),
        3 => (0u8..4, any::<u8>()).prop_map(|(m, t)| Ev::Delta(m, t)),
        2 => (0u8..4).prop_map(Ev::Text),
        3 => (0u8..8, 0u8..4).prop_map(|(id, t)| Ev::ToolUse(id, t)),
        3 => (0u8..8, any::<bool>()).prop_map(|(id, e)| Ev::ToolResult(id, e)),
        1 => Just(Ev::Interrupted),
        1 => Just(Ev::Result),
        1 => Just(Ev::Restart),
        1 => Just(Ev::Exit),
        1 => Just(Ev::Start),
        1 => (0u8..3).prop_map(Ev::Permission),
        1 => (0u8..3).prop_map(Ev::Resolved),
        1 => (0u8..40, 0u8..4).prop_map(|(s, r)| Ev::Receipt(s, r)),
        1 => Just(Ev::Unknown),
        1 => (0u8..6).prop_map(Ev::Malformed),
    ]
}

const TOOLS: [&str; 4] = ["Read", "Write", "Bash", "Edit"];

fn entries(evs: &[Ev]) -> Vec<Entry> {
    evs.iter()
        .enumerate()
        .map(|(i, e)| {
            let (kind, payload): (&str, Value) = match e {
                Ev::Prompt(n) => (k::INPUT_TEXT, json!({"text": format!("do thing {n}")})),
                Ev::Delta(m, t) => (k::AGENT_TEXT_DELTA, json!({"message_id": format!("m{m}"), "index": 0, "text": format!("d{t} ")})),
                Ev::Text(m) => (k::AGENT_TEXT, json!({"message_id": format!("m{m}"), "text": format!("final {m}")})),
                Ev::ToolUse(id, t) => (
                    k::AGENT_TOOL_USE,
                    json!({"id": format!("t{id}"), "name": TOOLS[*t as usize], "input": {"file_path": format!("/f{id}"), "command": "echo"}, "path": format!("/f{id}")}),
                ),
                Ev::ToolResult(id, err) => (k::AGENT_TOOL_RESULT, json!({"tool_use_id": format!("t{id}"), "is_error": err, "summary": "ok"})),
                Ev::Interrupted => (SESSION_INTERRUPTED, json!({"cause": "link"})),
                Ev::Result => (k::AGENT_RESULT, json!({"subtype": "success", "is_error": false})),
                Ev::Restart => (k::AGENT_RESTART, json!({"reason": "stalled"})),
                Ev::Exit => (k::AGENT_EXIT, json!({"code": 1, "signal": null})),
                Ev::Start => (k::AGENT_START, json!({"command": ["claude"], "adapter": "claude"})),
                Ev::Permission(r) => (k::AGENT_PERMISSION_REQUEST, json!({"request_id": format!("r{r}"), "tool_name": "Write"})),
                Ev::Resolved(r) => (k::AGENT_PERMISSION_RESOLVED, json!({"request_id": format!("r{r}"), "decision": "deny"})),
                Ev::Receipt(s, r) => (k::RECEIPTS[*r as usize], json!({"input_seq": s})),
                Ev::Unknown => ("agent.something_new", json!({"x": 1})),
                Ev::Malformed(which) => (
                    [k::AGENT_TOOL_USE, k::AGENT_TOOL_RESULT, k::INPUT_TEXT, k::AGENT_TEXT, k::AGENT_PERMISSION_REQUEST, k::INPUT_APPLIED][*which as usize],
                    json!("not an object"),
                ),
            };
            Entry { seq: Seq(i as u64 + 1), ts: i as i64, kind: kind.into(), author: "bridge".into(), payload }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn folding_a_snapshot_then_the_rest_equals_folding_everything(evs in proptest::collection::vec(ev(), 0..60)) {
        let log = entries(&evs);
        let all = SessionState::from_entries(&log);
        prop_assert_eq!(&all, &SessionState::from_entries(&log), "fold is deterministic");
        for split in 0..=log.len() {
            let snapshot = SessionState::from_entries(&log[..split]);
            // Snapshots go through JSON in the store.
            let mut resumed: SessionState = serde_json::from_value(serde_json::to_value(&snapshot).unwrap()).unwrap();
            for e in &log[split..] {
                resumed.apply(e);
            }
            prop_assert_eq!(&resumed, &all, "split at {}", split);
        }
    }

    #[test]
    fn every_prefix_yields_a_valid_transcript(evs in proptest::collection::vec(ev(), 0..60)) {
        let log = entries(&evs);
        for end in 0..=log.len() {
            let messages = repaired(&log[..end]);
            if let Err(why) = validate(&messages) {
                prop_assert!(false, "prefix {end}: {why}\n{}", serde_json::to_string_pretty(&messages).unwrap());
            }
        }
    }

    #[test]
    fn the_brief_never_advises_rerunning_a_command(evs in proptest::collection::vec(ev(), 0..60)) {
        let state = SessionState::from_entries(&entries(&evs));
        let b = brief(&state, RetryPolicy::default());
        for t in &b.uncertain {
            if t.class == ToolClass::Command {
                prop_assert!(!t.auto_retry);
                prop_assert!(t.advice.contains("do not re-run without asking"));
            }
        }
        prop_assert!(b.resume_prompt.contains("inspect"));
        let _ = b.to_markdown();
    }
}

/// Whether `e` ends the agent that asked for what is pending: nothing from before it can
/// still get a result or a decision.
fn settles(e: &Ev) -> bool {
    matches!(e, Ev::Interrupted | Ev::Restart | Ev::Exit | Ev::Start)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn after_an_exit_start_restart_or_interruption_nothing_from_before_is_pending_or_open(
        evs in proptest::collection::vec(ev(), 0..60),
    ) {
        let log = entries(&evs);
        let Some(last) = evs.iter().rposition(settles) else { return Ok(()) };
        let state = SessionState::from_entries(&log);
        let cut = log[last].seq;
        let stale_tool = state.open_tools.iter().find(|t| t.seq <= cut);
        prop_assert!(stale_tool.is_none(), "open after {:?}: {:?}", evs[last], stale_tool);
        let stale_request = state.pending_permissions.iter().find(|p| p.seq <= cut);
        prop_assert!(stale_request.is_none(), "pending after {:?}: {:?}", evs[last], stale_request);
        // What was cut off is listed only as interrupted (uncertain tools, expired requests),
        // never as pending, until a turn completes.
        if evs[last..].iter().any(|e| matches!(e, Ev::Result)) {
            return Ok(());
        }
        let before = SessionState::from_entries(&log[..last]);
        let b = brief(&state, RetryPolicy::default());
        if before.open_tools.len() <= INTERRUPTED_KEPT {
            for t in &before.open_tools {
                prop_assert!(b.uncertain.iter().any(|u| u.id == t.id), "{} not uncertain", &t.id);
            }
        }
        prop_assert_eq!(b.pending_permissions.len(), state.pending_permissions.len());
        prop_assert!(b.expired_permissions.len() >= before.pending_permissions.len().min(INTERRUPTED_KEPT));
    }
}

#[test]
fn an_agent_restarted_after_a_crash_offers_no_decision_on_the_dead_agents_request() {
    // arrange: a request pending and a tool open when the agent died without a word
    let log = entries(&[
        Ev::Prompt(1),
        Ev::ToolUse(1, 1),
        Ev::Permission(1),
        Ev::Start,
    ]);
    // act
    let state = SessionState::from_entries(&log);
    // assert
    assert_eq!(state.phase, Phase::Idle);
    assert!(
        state.pending_permissions.is_empty(),
        "{:?}",
        state.pending_permissions
    );
    assert!(state.open_tools.is_empty(), "{:?}", state.open_tools);
    assert_eq!(state.interrupted.permissions[0].request_id, "r1");
    assert_eq!(state.interrupted.tools[0].id, "t1");
    let b = brief(&state, RetryPolicy::default());
    assert!(b.pending_permissions.is_empty());
    assert_eq!(b.expired_permissions, vec!["Write"]);
    assert!(
        b.resume_prompt.contains("have expired"),
        "{}",
        b.resume_prompt
    );
    // a completed turn leaves the interruption behind
    let mut done = log.clone();
    done.extend(entries(&[Ev::Result]).into_iter().map(|mut e| {
        e.seq = Seq(log.len() as u64 + 1);
        e
    }));
    assert_eq!(
        SessionState::from_entries(&done).interrupted,
        Default::default()
    );
}

#[test]
fn an_interrupted_write_and_command_show_up_in_the_state_and_the_brief() {
    let log = entries(&[
        Ev::Prompt(1),
        Ev::Delta(0, 7),
        Ev::ToolUse(1, 1), // Write /f1
        Ev::ToolUse(2, 2), // Bash
        Ev::Interrupted,
    ]);
    let state = SessionState::from_entries(&log);
    assert_eq!(state.phase, Phase::Interrupted);
    assert!(
        state.open_tools.is_empty(),
        "nothing stays open past the interruption"
    );
    assert_eq!(state.interrupted.tools.len(), 2);
    assert!(state.files_touched.contains("/f1"));
    let b = brief(&state, RetryPolicy::default());
    assert_eq!(b.goal, vec!["do thing 1"]);
    assert_eq!(b.partial_answer.as_deref(), Some("d7 "));
    let write = b.uncertain.iter().find(|t| t.tool == "Write").unwrap();
    assert!(write.advice.contains("read the file"), "{write:?}");
    let bash = b.uncertain.iter().find(|t| t.tool == "Bash").unwrap();
    assert!(bash.advice.contains("do not re-run without asking"));
    let transcript = repaired(&log);
    validate(&transcript).unwrap();
    let last = serde_json::to_string(transcript.last().unwrap()).unwrap();
    assert!(last.contains("interrupted:"), "{last}");
}

#[test]
fn unknown_and_malformed_entries_are_counted_not_fatal() {
    let log = entries(&[
        Ev::Unknown,
        Ev::Malformed(0),
        Ev::Malformed(2),
        Ev::Prompt(3),
    ]);
    let state = SessionState::from_entries(&log);
    assert_eq!(state.counts.unknown_kinds, 1);
    assert_eq!(state.counts.malformed, 2);
    assert_eq!(state.prompts, vec!["do thing 3"]);
}

#[test]
fn a_line_applied_to_a_shell_is_not_a_model_turn_but_a_prompt_to_claude_is() {
    let log = |adapter: &str| {
        let e = |seq: u64, kind: &str, payload: Value| Entry {
            seq: Seq(seq),
            ts: seq as i64,
            kind: kind.into(),
            author: "test".into(),
            payload,
        };
        vec![
            e(1, k::AGENT_START, json!({"adapter": adapter, "pid": 1})),
            e(
                2,
                k::INPUT_TEXT,
                json!({"text": "ls", "client_msg_id": "m1"}),
            ),
            e(3, k::INPUT_APPLIED, json!({"input_seq": 2})),
        ]
    };
    for (adapter, phase) in [
        ("pty", Phase::Idle),
        ("lines", Phase::Idle),
        ("claude", Phase::ModelStreaming),
    ] {
        let state = SessionState::from_entries(&log(adapter));
        assert_eq!(state.agent.adapter.as_deref(), Some(adapter));
        assert_eq!(state.phase, phase, "{adapter}");
        assert_eq!(state.is_busy(), phase != Phase::Idle, "{adapter}");
    }
}

#[test]
fn a_session_that_ended_after_its_agent_died_mid_turn_reads_interrupted_with_only_the_open_goal() {
    // arrange: turn 1 finished; turn 2 was cut off by the agent's death; then the session ended
    let mut log = entries(&[
        Ev::Start,
        Ev::Prompt(1),
        Ev::Result,
        Ev::Prompt(2),
        Ev::ToolUse(2, 2),
        Ev::Exit,
    ]);
    log.push(Entry {
        seq: Seq(log.len() as u64 + 1),
        ts: 0,
        kind: k::SESSION_ENDED.into(),
        author: "server".into(),
        payload: json!({"reason": "agent exited"}),
    });

    // act
    let state = SessionState::from_entries(&log);
    let b = brief(&state, RetryPolicy::default());

    // assert
    assert_eq!(state.phase, Phase::Interrupted, "the work was cut off");
    assert_eq!(b.phase, Phase::Interrupted);
    assert_eq!(
        b.goal,
        vec!["do thing 2"],
        "the finished turn's prompt is no goal"
    );
    assert_eq!(state.prompts, vec!["do thing 1", "do thing 2"]);

    // a session that ends idle reads ended
    let calm = entries(&[Ev::Start, Ev::Prompt(1), Ev::Result, Ev::Exit]);
    let mut calm_log = calm.clone();
    calm_log.push(Entry {
        seq: Seq(calm.len() as u64 + 1),
        kind: k::SESSION_ENDED.into(),
        ..log.last().unwrap().clone()
    });
    let calm_state = SessionState::from_entries(&calm_log);
    assert_eq!(calm_state.phase, Phase::Ended);
    assert!(brief(&calm_state, RetryPolicy::default()).goal.is_empty());
}

#[test]
fn an_agent_without_turns_streaming_output_gets_no_model_phase_only_its_last_output_time() {
    let e = |seq: u64, kind: &str, payload: Value| Entry {
        seq: Seq(seq),
        ts: 1000 * seq as i64,
        kind: kind.into(),
        author: "bridge".into(),
        payload,
    };
    let caps = json!({"turns": false, "output_activity": true, "terminal_wait": false});
    let log = vec![
        // an adapter of an unknown name that says it has no turns
        e(
            1,
            k::AGENT_START,
            json!({"adapter": "future", "capabilities": caps}),
        ),
        e(
            2,
            k::INPUT_TEXT,
            json!({"text": "make", "client_msg_id": "m1"}),
        ),
        e(3, k::INPUT_APPLIED, json!({"input_seq": 2})),
        e(
            4,
            k::AGENT_OUTPUT,
            json!({"stream": "stdout", "text": "compiling"}),
        ),
        e(
            5,
            k::AGENT_OUTPUT,
            json!({"stream": "stderr", "text": "warning"}),
        ),
    ];
    let state = SessionState::from_entries(&log);
    assert_eq!(
        state.phase,
        Phase::Idle,
        "no model phase for an agent without turns"
    );
    assert!(!state.is_busy());
    assert!(!state.agent.has_turns());
    assert_eq!(state.agent.last_output_at, Some(5000));
    assert!(state.agent.running);
    // the same log from an agent that declares turns is a model turn
    let mut turns = log.clone();
    turns[0].payload["capabilities"]["turns"] = json!(true);
    assert_eq!(
        SessionState::from_entries(&turns).phase,
        Phase::ModelStreaming
    );
}
