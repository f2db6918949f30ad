//! The end of a session: the one place that writes `session.ended`.
//!
//! A bridge whose agent exited says `End`, and says it again on its next connection when it did
//! not hear the close. The two connections can be live at once (the first one half-open, or on
//! another node that has not yet heard of the second), so both may get here. The store decides
//! which one ends the session; only that one fails the inputs the agent never got and writes
//! `session.ended`, so the log holds it once.
//!
//! The end is one transaction: the failures, `session.ended` and the session's end time are
//! committed together or not at all. A server that dies or a database that refuses the write
//! half-way leaves the session open, and the bridge's next `End` ends it whole.
//!
//! Part of the session core: calls `session::log` and `store`; never a transport.

use moor_protocol::payload::{InputFailed, SessionEnded};
use moor_protocol::{Seq, SessionId};

use super::log::Log;
use crate::store::{Append, LogStore, StoreError, StoreResult};

/// How often an end is tried again when the log moved on between reading it and ending it
/// (an input came in, or the bridge's twin connection wrote its bookkeeping).
const ATTEMPTS: usize = 8;

/// Ends `session` for a bridge that was sent the inputs up to `delivered`. The inputs stored
/// after it (up to `limit` of them) never reached the agent and are failed, then
/// `session.ended` is written, in one transaction that also marks the session ended, so that
/// none is left without an outcome: it is refused if the log moved on since it was read, and
/// tried again. Returns false, writing nothing, when the session had already ended: whoever
/// ended it wrote what follows.
pub async fn end(
    log: &Log,
    store: &dyn LogStore,
    session: SessionId,
    delivered: Seq,
    limit: u32,
) -> StoreResult<bool> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        // The head the store will compare against: the session row's, not a read of the log.
        let head = store.find_session(&session.to_string()).await?.head_seq;
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
        let ended = SessionEnded {
            reason: Some("agent exited".into()),
        };
        closing.push(Append::end(ended, head));
        match log.append(session, closing).await {
            Ok(_) => return Ok(true),
            Err(StoreError::SessionEnded) => return Ok(false),
            Err(StoreError::Conflict(_)) if attempt < ATTEMPTS => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use moor_protocol::kinds;

    use super::*;
    use crate::session::text_input as input;
    use crate::store::Range;

    /// The session's log, and its entries' kinds in order.
    async fn log_of(
        store: &dyn LogStore,
        s: SessionId,
    ) -> (Vec<moor_protocol::Entry>, Vec<String>) {
        let entries = store.read(s, Range::After(Seq::ZERO), 100).await.unwrap();
        let kinds = entries.iter().map(|e| e.kind.clone()).collect();
        (entries, kinds)
    }

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
            end(&log, &*store.log, s, Seq(1), 10),
            end(&log, &*store.log, s, Seq(1), 10),
        );
        let again = end(&log, &*store.log, s, Seq(0), 10).await.unwrap();

        // assert: one of them ended it; the log holds one failure for the undelivered input
        // and one session.ended, last (the two nodes' race is in the store's conformance tests)
        let (entries, kinds) = log_of(&*store.log, s).await;
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

    #[tokio::test]
    async fn an_end_the_database_refuses_leaves_the_session_open_and_is_done_whole_next_time() {
        // arrange: a session with one input the agent never got, on a database that refuses to
        // store `session.ended` (as a full disk or a crash would stop it half-way)
        let dir = tempfile::tempdir().unwrap();
        let (url, store, log, _states) = crate::session::on_sqlite(&dir).await;
        let s = store.log.open_session("s", None).await.unwrap().id;
        log.append(s, vec![input(1)]).await.unwrap();
        let mut db = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
            .await
            .unwrap();
        sqlx::query(
            "CREATE TRIGGER refuse_end BEFORE INSERT ON entries \
             WHEN NEW.kind = 'session.ended' BEGIN SELECT RAISE(ABORT, 'refused'); END",
        )
        .execute(&mut db)
        .await
        .unwrap();

        // act: the bridge's End fails; the phone sends another input; the database takes
        // writes again and the bridge, not having heard the close, says End again
        let refused = end(&log, &*store.log, s, Seq::ZERO, 10).await;
        let later = log.append(s, vec![input(2)]).await;
        sqlx::query("DROP TRIGGER refuse_end")
            .execute(&mut db)
            .await
            .unwrap();
        let again = end(&log, &*store.log, s, Seq::ZERO, 10).await.unwrap();

        // assert: nothing of the refused end held, so the session was not left ended without
        // its `session.ended`; the second End failed both inputs and wrote the end once
        assert!(refused.is_err());
        assert!(later.is_ok(), "an input after the refused end: {later:?}");
        assert!(again, "the second End ends the session");
        let (_, kinds) = log_of(&*store.log, s).await;
        assert_eq!(
            kinds,
            [
                kinds::INPUT_TEXT,
                kinds::INPUT_TEXT,
                kinds::INPUT_FAILED,
                kinds::INPUT_FAILED,
                kinds::SESSION_ENDED
            ]
        );
    }
}
