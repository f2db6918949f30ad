//! Remote input: idempotent by `client_msg_id`, queued while the bridge is away, applied to the
//! agent exactly once, with its receipts in the log (G6).

use moor_e2e::assert::{input_seq, of_kind, summary};
use moor_e2e::{Rig, ServerOpts, WAIT};
use moor_protocol::{kinds, Entry};

fn got(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|t| format!("got: {t}")).collect()
}

/// Exactly one `input.text` at `seq`, one `input.delivered` and one `input.applied` for it,
/// delivered before applied, both after the input.
#[track_caller]
fn assert_input_accounted(entries: &[Entry], seq: u64) {
    let input: Vec<_> = entries
        .iter()
        .filter(|e| e.seq.0 == seq && e.kind == kinds::INPUT_TEXT)
        .collect();
    assert_eq!(
        input.len(),
        1,
        "input.text at seq {seq}; {}",
        summary(entries)
    );
    let receipts = |kind: &str| -> Vec<u64> {
        of_kind(entries, kind)
            .into_iter()
            .filter(|e| input_seq(e) == Some(seq))
            .map(|e| e.seq.0)
            .collect()
    };
    let delivered = receipts(kinds::INPUT_DELIVERED);
    let applied = receipts(kinds::INPUT_APPLIED);
    assert_eq!(
        delivered.len(),
        1,
        "one input.delivered for input {seq}, got {delivered:?}; {}",
        summary(entries)
    );
    assert_eq!(
        applied.len(),
        1,
        "one input.applied for input {seq}, got {applied:?}; {}",
        summary(entries)
    );
    assert!(
        seq < delivered[0] && delivered[0] < applied[0],
        "input {seq} < delivered {delivered:?} < applied {applied:?}"
    );
    assert!(
        of_kind(entries, kinds::INPUT_UNCERTAIN)
            .iter()
            .all(|e| input_seq(e) != Some(seq)),
        "input {seq} is not uncertain"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_client_msg_id_posted_twice_is_stored_and_applied_once() {
    // arrange
    let mut rig = Rig::start(ServerOpts::new(), &["echo", "--exit-after", "2"]).await;
    rig.api.wait_bridge_online(&rig.name, true, WAIT).await;

    // act
    let first = rig.api.post_input(rig.id, "msg-1", "hello").await;
    let again = rig.api.post_input(rig.id, "msg-1", "hello").await;
    let other = rig.api.post_input(rig.id, "msg-2", "bye").await;

    // assert
    assert_eq!(first.seq, again.seq, "a retried post gets the same seq");
    assert!(!first.duplicate, "the first post is not a duplicate");
    assert!(again.duplicate, "the retried post is flagged duplicate");
    assert_ne!(other.seq, first.seq);
    let entries = rig.finish(&got(&["hello", "bye"])).await;
    assert_eq!(
        of_kind(&entries, kinds::INPUT_TEXT).len(),
        2,
        "two inputs stored; {}",
        summary(&entries)
    );
    assert_input_accounted(&entries, first.seq.0);
    assert_input_accounted(&entries, other.seq.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_posted_while_the_bridge_is_unreachable_is_applied_once_after_it_reconnects() {
    // arrange
    let mut rig = Rig::start(ServerOpts::new(), &["echo", "--exit-after", "2"]).await;
    rig.api.wait_bridge_online(&rig.name, true, WAIT).await;
    let first = rig.api.post_input(rig.id, "msg-1", "first").await;
    rig.tail
        .wait_for(WAIT, "the agent to echo the first input", |es| {
            moor_e2e::assert::agent_texts(es, "stdout").contains(&"got: first".to_owned())
        })
        .await;

    // act: the server becomes unreachable; an input is posted meanwhile; then it comes back.
    let conns = rig.proxy.connections();
    rig.proxy.refuse(true);
    rig.proxy.reset_all().await;
    rig.api.wait_bridge_online(&rig.name, false, WAIT).await;
    let second = rig.api.post_input(rig.id, "msg-2", "second").await;
    rig.proxy.wait_connections(conns + 2, WAIT).await;
    rig.proxy.refuse(false);

    // assert
    let entries = rig.finish(&got(&["first", "second"])).await;
    assert_input_accounted(&entries, first.seq.0);
    assert_input_accounted(&entries, second.seq.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_posted_while_moor_is_down_is_applied_once_by_the_restarted_bridge() {
    // arrange
    let mut rig = Rig::start(ServerOpts::new(), &["echo", "--exit-after", "5"]).await;
    rig.api.wait_bridge_online(&rig.name, true, WAIT).await;
    let first = rig.api.post_input(rig.id, "msg-1", "first").await;
    rig.tail
        .wait_for(
            WAIT,
            "the agent to echo the first input and the receipt to land",
            |es| {
                moor_e2e::assert::agent_texts(es, "stdout").contains(&"got: first".to_owned())
                    && of_kind(es, kinds::INPUT_APPLIED)
                        .iter()
                        .any(|e| input_seq(e) == Some(first.seq.0))
            },
        )
        .await;

    // act: moor crashes; an input is posted while it is down; moor starts again.
    rig.bridge.kill().await;
    rig.api.wait_bridge_online(&rig.name, false, WAIT).await;
    let second = rig.api.post_input(rig.id, "msg-2", "second").await;
    assert!(second.queued, "no bridge holds the session: {second:?}");
    let mut restarted = rig.bridge.respawn(&["echo", "--exit-after", "1"]);

    // assert: the restarted agent gets only the new input, once.
    restarted.wait_success(moor_e2e::FINISH).await;
    rig.api.wait_ended(&rig.name, WAIT).await;
    let entries = rig.api.entries_all(rig.id).await;
    moor_e2e::assert_complete_session(&entries, &got(&["first", "second"]));
    assert_input_accounted(&entries, first.seq.0);
    assert_input_accounted(&entries, second.seq.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_that_stops_reading_moors_status_lines_stops_neither_its_inputs_nor_its_link() {
    // arrange: `moor`'s stderr is a one-page pipe nobody reads (a terminal stopped with
    // Ctrl-S); each applied input prints a status line, so a few hundred fill it many times over
    const INPUTS: usize = 400;
    let exit_after = INPUTS.to_string();
    let mut rig = Rig::start_with(
        ServerOpts::new(),
        &["echo", "--exit-after", &exit_after],
        |b| b.stderr_unread(),
    )
    .await;
    rig.api.wait_bridge_online(&rig.name, true, WAIT).await;

    // act
    let mut texts = Vec::with_capacity(INPUTS);
    for i in 0..INPUTS {
        let text = format!("line {i}");
        rig.api.post_input(rig.id, &format!("msg-{i}"), &text).await;
        texts.push(text);
    }

    // assert: every input reached the agent, once, in order, and the session ended cleanly
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let entries = rig.finish(&got(&texts)).await;
    assert_eq!(
        of_kind(&entries, kinds::INPUT_APPLIED).len(),
        INPUTS,
        "every input applied once; {}",
        summary(&entries)
    );
}
