//! The end of a session: the one place that writes `session.ended`.
//!
//! A bridge whose agent exited says `End`, and says it again on its next connection when it did
//! not hear the close. The two connections can be live at once (the first one half-open, or on
//! another node that has not yet heard of the second), so both may get here. The store decides
//! which one ends the session; only that one fails the inputs the agent never got and writes
//! `session.ended`, so the log holds it once.
//!
//! Part of the session core: calls `session::log` and `store`; never a transport.

use moor_protocol::payload::{InputFailed, SessionEnded};
use moor_protocol::{Seq, SessionId};

use super::log::Log;
use crate::store::{Append, LogStore, StoreResult};

/// Ends `session` at `at` for a bridge that was sent the inputs up to `delivered`. The inputs
/// stored after it (up to `limit` of them) never reached the agent and are failed, then
/// `session.ended` is written; new inputs are refused from the moment the store marks the
/// end, so none is left without an outcome. Returns false, writing nothing, when the session
/// had already ended: whoever ended it wrote what follows.
pub async fn end(
    log: &Log,
    store: &dyn LogStore,
    session: SessionId,
    delivered: Seq,
    limit: u32,
    at: i64,
) -> StoreResult<bool> {
    if !store.end_session(session, at).await? {
        return Ok(false);
    }
    let undelivered = store.inputs_after(session, delivered, limit).await?;
    let mut closing: Vec<Append> = undelivered
        .iter()
        .map(|e| {
            let failed = InputFailed {
                input_seq: e.seq,
                reason: "the agent had exited".into(),
            };
            Append::receipt(e.seq, failed)
        })
        .collect();
    closing.push(Append::server(SessionEnded {
        reason: Some("agent exited".into()),
    }));
    log.append(session, closing).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use moor_protocol::kinds;

    use super::*;
    use crate::session::text_input as input;
    use crate::store::Range;

    #[tokio::test]
    async fn two_connections_ending_one_session_write_its_end_once() {
        // arrange: a session with one input delivered and one not
        let dir = tempfile::tempdir().unwrap();
        let (_url, store, log, _states) = crate::session::on_sqlite(&dir).await;
        let s = store.log.open_session("s", None).await.unwrap().id;
        log.append(s, vec![input(1), input(2)]).await.unwrap();

        // act: the bridge's End arrives on two of its connections at once (the first one
        // half-open), then once more
        let (a, b) = tokio::join!(
            end(&log, &*store.log, s, Seq(1), 10, 100),
            end(&log, &*store.log, s, Seq(1), 10, 200),
        );
        let again = end(&log, &*store.log, s, Seq(0), 10, 300).await.unwrap();

        // assert: one of them ended it; the log holds one failure for the undelivered input
        // and one session.ended, last (the two nodes' race is in the store's conformance tests)
        let entries = store
            .log
            .read(s, Range::After(Seq::ZERO), 100)
            .await
            .unwrap();
        let kinds: Vec<&str> = entries.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                kinds::INPUT_TEXT,
                kinds::INPUT_TEXT,
                kinds::INPUT_FAILED,
                kinds::SESSION_ENDED
            ]
        );
        assert_eq!(entries[2].payload["input_seq"], 2);
        assert_ne!(a.unwrap(), b.unwrap(), "exactly one call ends the session");
        assert!(!again);
    }
}
