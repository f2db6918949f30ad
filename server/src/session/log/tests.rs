use futures_util::FutureExt;
use moor_protocol::{kinds, ProducerId, Seq};

use super::*;
use crate::session::text_input as input;
use crate::store::{IdemKey, Range};

/// Sessions submitting at once in the grouping test.
const SESSIONS: usize = 200;

fn produced(producer: ProducerId, seq: u64, text: &str) -> Append {
    Append {
        ts: 0,
        kind: kinds::AGENT_OUTPUT.into(),
        author: kinds::AUTHOR_BRIDGE.into(),
        payload: serde_json::json!({"stream": "stdout", "text": text}).into(),
        key: IdemKey::Producer { producer, seq },
    }
}

fn seqs(outcomes: &[Appended]) -> Vec<Seq> {
    outcomes
        .iter()
        .map(|o| match o {
            Appended::Stored(e) => e.seq,
            other => panic!("expected stored entries, got {other:?}"),
        })
        .collect()
}

/// A log over a real SQLite store in a temp dir (kept alive by the returned guard).
async fn log_on_sqlite() -> (tempfile::TempDir, Log, Arc<dyn LogStore>) {
    log_with_window(Duration::ZERO).await
}

/// The same with a commit window.
async fn log_with_window(window: Duration) -> (tempfile::TempDir, Log, Arc<dyn LogStore>) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("moor.db").display());
    let store = crate::store::connect(&url).await.unwrap().log;
    let log = Log::new(store.clone(), Hub::default(), TaskTracker::new(), window);
    (dir, log, store)
}

#[tokio::test]
async fn many_sessions_submitting_at_once_commit_in_one_transaction_each_acked_once_durable() {
    // arrange: 200 sessions, each with a producer
    let (_dir, log, store) = log_on_sqlite().await;
    let mut sessions = Vec::with_capacity(SESSIONS);
    for i in 0..SESSIONS {
        let id = store.open_session(&format!("s{i}"), None).await.unwrap().id;
        sessions.push((id, ProducerId::new()));
    }
    let before = store.append_transactions();

    // act: every session submits two batches before the committer runs (this test's runtime has
    // one thread, and nothing here yields until the waits; unconstrained: tokio's cooperative
    // budget would otherwise have a semaphore report "not yet" after a hundred acquisitions)
    let mut pending = Vec::with_capacity(2 * SESSIONS);
    for &(s, p) in &sessions {
        for n in [1, 3] {
            let batch = vec![produced(p, n, "a"), produced(p, n + 1, "b")];
            let submitted = tokio::task::unconstrained(log.submit(s, batch)).now_or_never();
            pending.push((s, n, submitted.expect("room at once").unwrap()));
        }
    }

    // assert: each answer comes only once its entries are readable on another connection
    // (committed, and with synchronous=FULL durable), with seqs contiguous per session in
    // submission order
    for (s, n, mut p) in pending {
        let outcomes = p.wait().await.unwrap();
        assert_eq!(seqs(&outcomes), [Seq(n), Seq(n + 1)]);
        let stored = store.read(s, Range::After(Seq(n - 1)), 2).await.unwrap();
        assert_eq!(
            stored.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [Seq(n), Seq(n + 1)]
        );
    }
    // assert: one transaction for all 400 batches of 200 sessions
    assert_eq!(store.append_transactions() - before, 1);
}

#[tokio::test]
async fn a_session_over_its_byte_budget_waits_for_room_then_commits_in_order() {
    // arrange: one batch takes the session's whole budget
    let (_dir, log, store) = log_on_sqlite().await;
    let s = store.open_session("s", None).await.unwrap().id;
    let mut big = input(1);
    big.payload = serde_json::json!({"text": "x".repeat(SESSION_QUEUE_BYTES)}).into();
    let mut first = log.submit(s, vec![big]).await.unwrap();

    // act: before the committer has run (one thread, nothing yielded), the next batch of the
    // same session cannot be queued, while another session's can
    let mut second = Box::pin(log.submit(s, vec![input(2)]));
    let held = futures_util::poll!(second.as_mut()).is_pending();
    let other = store.open_session("other", None).await.unwrap().id;
    let other_queued = log.submit(other, vec![input(1)]).now_or_never();

    // assert: once the first committed, the second was queued and committed after it
    assert!(held, "a session over its budget waits for room");
    let mut other_queued = other_queued.expect("another session has room").unwrap();
    assert_eq!(seqs(&other_queued.wait().await.unwrap()), [Seq(1)]);
    assert_eq!(seqs(&first.wait().await.unwrap()), [Seq(1)]);
    let mut second = second.await.unwrap();
    assert_eq!(seqs(&second.wait().await.unwrap()), [Seq(2)]);
}

#[tokio::test]
async fn a_session_failing_in_a_group_does_not_fail_the_others() {
    // arrange: one live session, one ended
    let (_dir, log, store) = log_on_sqlite().await;
    let live = store.open_session("live", None).await.unwrap().id;
    let ended = store.open_session("ended", None).await.unwrap().id;
    store.end_session(ended, 1).await.unwrap();

    // act: both submit before the committer runs
    let mut a = log
        .submit(ended, vec![input(1)])
        .now_or_never()
        .unwrap()
        .unwrap();
    let mut b = log
        .submit(live, vec![input(1)])
        .now_or_never()
        .unwrap()
        .unwrap();

    // assert
    assert!(matches!(a.wait().await, Err(StoreError::SessionEnded)));
    assert_eq!(seqs(&b.wait().await.unwrap()), [Seq(1)]);
}

#[tokio::test]
async fn an_end_queued_among_a_sessions_inputs_is_committed_on_its_own() {
    // arrange: an input, the session's end written after reading the log up to that input,
    // and a later input, all queued before the committer runs
    let (_dir, log, store) = log_on_sqlite().await;
    let s = store.open_session("s", None).await.unwrap().id;
    let end = Append::end(
        moor_protocol::payload::SessionEnded { reason: None },
        Seq(1),
    );
    let mut submitted = [vec![input(1)], vec![end], vec![input(2)]]
        .map(|batch| log.submit(s, batch).now_or_never().unwrap().unwrap());

    // act
    let [first, ended, late] = &mut submitted;
    let (first, ended, late) = (first.wait().await, ended.wait().await, late.wait().await);

    // assert: the end did not share a transaction with the input before it (which would have
    // had it checked against the head before that input, and refused both), and the input
    // after it was refused
    assert_eq!(seqs(&first.unwrap()), [Seq(1)]);
    assert_eq!(seqs(&ended.unwrap()), [Seq(2)]);
    assert!(matches!(late, Err(StoreError::SessionEnded)), "{late:?}");
}

#[tokio::test]
async fn a_closed_log_answers_what_was_queued_and_refuses_more() {
    // arrange
    let (_dir, log, store) = log_on_sqlite().await;
    let s = store.open_session("s", None).await.unwrap().id;
    let mut queued = log.submit(s, vec![input(1)]).await.unwrap();

    // act
    log.close();

    // assert
    assert_eq!(seqs(&queued.wait().await.unwrap()), [Seq(1)]);
    assert!(log.submit(s, vec![input(2)]).await.is_err());
    assert!(log.submit_now(s, vec![input(2)]).is_err());
}

#[tokio::test]
async fn an_idle_committer_waits_its_window_for_other_active_sessions_to_join_one_transaction() {
    // arrange: two sessions have committed lately, so the committer expects company
    let window = Duration::from_secs(10);
    let (_dir, log, store) = log_with_window(window).await;
    let a = store.open_session("a", None).await.unwrap().id;
    let b = store.open_session("b", None).await.unwrap().id;
    log.append(a, vec![input(1)]).await.unwrap();
    log.append(b, vec![input(1)]).await.unwrap();
    let before = store.append_transactions();

    // act: on paused time (nothing but the committer's window and this test's timer pending,
    // no I/O), `a` submits, `b` submits halfway through the window, then the window ends and
    // the clock runs again for the commit's I/O
    tokio::time::pause();
    let mut first = log.submit(a, vec![input(2)]).await.unwrap();
    tokio::time::sleep(window / 2).await;
    let mut second = log.submit(b, vec![input(2)]).await.unwrap();
    tokio::time::advance(window / 2).await;
    tokio::time::resume();

    // assert: both in one transaction, each with its own seq
    assert_eq!(seqs(&first.wait().await.unwrap()), [Seq(2)]);
    assert_eq!(seqs(&second.wait().await.unwrap()), [Seq(2)]);
    assert_eq!(store.append_transactions() - before, 1);
}

#[tokio::test]
async fn a_lone_session_is_never_held_by_the_commit_window() {
    // arrange: a window far longer than the failure guard
    let (_dir, log, store) = log_with_window(Duration::from_secs(3600)).await;
    let s = store.open_session("s", None).await.unwrap().id;

    // act + assert: appends one after another each commit without waiting for company
    for n in 1..=3 {
        let outcome = tokio::time::timeout(Duration::from_secs(30), log.append(s, vec![input(n)]))
            .await
            .expect("a lone session's append is not held by the window")
            .unwrap();
        assert_eq!(seqs(&outcome), [Seq(n)]);
    }
}
