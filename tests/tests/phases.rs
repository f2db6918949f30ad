//! Phases that mean something: an agent whose adapter knows no turns (`lines`) is never shown a
//! model phase, only running / exited and when it last wrote output. Real `moor` and `moord`.

use moor_e2e::rig::{shell_session, ShellSession};
use moor_e2e::util::eventually_some;
use moor_e2e::{ServerOpts, TestServer, WAIT};
use moor_protocol::kinds;
use moor_protocol::state::Phase;

#[tokio::test]
async fn a_lines_agent_streaming_output_after_a_prompt_is_not_given_a_model_phase() {
    // arrange: a shell loop that answers every line with output
    let server = TestServer::start(ServerOpts::new()).await;
    let script = "while read l; do echo \"got $l\"; echo working; done";
    let ShellSession {
        mut bridge,
        id,
        mut tail,
        start,
    } = shell_session(&server, "phases", script).await;

    // act: a prompt, and the agent streams output
    let seq = server.api().post_input(id, "m1", "hello").await.seq.0;
    let last = tail
        .wait_kind(kinds::AGENT_OUTPUT, seq, WAIT, |e| {
            e.payload["text"] == "working"
        })
        .await;

    // assert: the adapter declared no turns; the state shows output activity, no model phase
    assert_eq!(start.payload["capabilities"]["turns"], false, "{start:?}");
    assert_eq!(start.payload["capabilities"]["output_activity"], true);
    let api = server.api();
    let key = id.to_string();
    let state = eventually_some(WAIT, "the fold to reach the output", || async {
        let state = api.session(&key).await?.state?;
        (state.head >= last.seq).then_some(state)
    })
    .await;
    assert_eq!(state.phase, Phase::Idle, "{state:?}");
    assert!(state.agent.running);
    assert!(!state.agent.has_turns());
    assert_eq!(state.agent.last_output_at, Some(last.ts));
    bridge.terminate();
    bridge.wait_exit(WAIT).await;
}
