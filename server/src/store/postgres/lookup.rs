//! The idempotency lookups of one Postgres append, on its open transaction (the session row is
//! locked, so nothing they read can change before commit).

use moor_protocol::{ProducerId, Seq};
use sqlx::{PgConnection, Row};

use crate::store::append::{Lookup, StoredEntry};
use crate::store::errors::db_error;
use crate::store::StoreResult;

/// [`Lookup`] over a Postgres connection inside the appending transaction.
pub(super) struct PgLookup<'c> {
    conn: &'c mut PgConnection,
    sid: &'c str,
}

impl<'c> PgLookup<'c> {
    pub(super) fn new(conn: &'c mut PgConnection, sid: &'c str) -> Self {
        Self { conn, sid }
    }
}

/// Highest stored producer seq of `producer` in session `sid` (0: none).
pub(super) async fn producer_mark(
    conn: &mut PgConnection,
    sid: &str,
    producer: ProducerId,
) -> StoreResult<u64> {
    let mark: Option<i64> = sqlx::query_scalar(
        "SELECT last_seq FROM producers WHERE session_id = $1::uuid AND producer_id = $2::uuid",
    )
    .bind(sid)
    .bind(producer.to_string())
    .fetch_optional(conn)
    .await
    .map_err(db_error)?;
    Ok(mark.unwrap_or(0) as u64)
}

impl Lookup for PgLookup<'_> {
    async fn producer_mark(&mut self, producer: ProducerId) -> StoreResult<u64> {
        producer_mark(self.conn, self.sid, producer).await
    }

    async fn producer_entry(
        &mut self,
        producer: ProducerId,
        seq: u64,
    ) -> StoreResult<Option<StoredEntry>> {
        let row = sqlx::query(
            "SELECT seq, kind, payload FROM entries \
             WHERE session_id = $1::uuid AND producer_id = $2::uuid AND producer_seq = $3",
        )
        .bind(self.sid)
        .bind(producer.to_string())
        .bind(seq as i64)
        .fetch_optional(&mut *self.conn)
        .await
        .map_err(db_error)?;
        row.map(|r| {
            Ok(StoredEntry {
                seq: r.try_get("seq").map_err(db_error)?,
                kind: r.try_get("kind").map_err(db_error)?,
                payload: r.try_get("payload").map_err(db_error)?,
            })
        })
        .transpose()
    }

    async fn client_msg_seq(&mut self, id: &str) -> StoreResult<Option<i64>> {
        sqlx::query_scalar(
            "SELECT seq FROM entries WHERE session_id = $1::uuid AND client_msg_id = $2",
        )
        .bind(self.sid)
        .bind(id)
        .fetch_optional(&mut *self.conn)
        .await
        .map_err(db_error)
    }

    async fn receipt_seq(&mut self, kind: &str, input: Seq) -> StoreResult<Option<i64>> {
        sqlx::query_scalar(
            "SELECT seq FROM entries WHERE session_id = $1::uuid AND kind = $2 AND ref_seq = $3",
        )
        .bind(self.sid)
        .bind(kind)
        .bind(input.0 as i64)
        .fetch_optional(&mut *self.conn)
        .await
        .map_err(db_error)
    }
}
