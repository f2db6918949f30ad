//! Postgres rows to and from the store's types: sessions and entries read back, and the batch
//! insert of an append.

use anyhow::Context;
use moor_protocol::{Entry, Seq, SessionId};
use sqlx::postgres::PgRow;
use sqlx::{Postgres, Row};

use crate::store::access::stored_session;
use crate::store::append::NewRow;
use crate::store::errors::db_error;
use crate::store::{SessionRow, StoreResult};

/// The session id in column `col`, read back as text.
pub(super) fn session_id(row: &PgRow, col: &str) -> StoreResult<SessionId> {
    stored_session(row.try_get(col).map_err(db_error)?)
}

pub(super) fn session_row(row: &PgRow) -> StoreResult<SessionRow> {
    let agent: Option<String> = row.try_get("agent").map_err(db_error)?;
    Ok(SessionRow {
        id: session_id(row, "id")?,
        name: row.try_get("name").map_err(db_error)?,
        created_at: row.try_get("created_at").map_err(db_error)?,
        head_seq: Seq(row.try_get::<i64, _>("head_seq").map_err(db_error)? as u64),
        last_ts: row.try_get("last_ts").map_err(db_error)?,
        ended_at: row.try_get("ended_at").map_err(db_error)?,
        agent: agent.and_then(|a| serde_json::from_str(&a).ok()),
    })
}

pub(super) fn entry_row(row: &PgRow) -> StoreResult<Entry> {
    let payload: String = row.try_get("payload").map_err(db_error)?;
    Ok(Entry {
        seq: Seq(row.try_get::<i64, _>("seq").map_err(db_error)? as u64),
        ts: row.try_get("ts").map_err(db_error)?,
        kind: row.try_get("kind").map_err(db_error)?,
        author: row.try_get("author").map_err(db_error)?,
        payload: serde_json::from_str(&payload).context("stored payload is not json")?,
    })
}

/// Inserts the new rows with one statement whatever their number (arrays, not a VALUES list,
/// so there is a single prepared statement).
pub(super) async fn insert_rows(
    tx: &mut sqlx::Transaction<'_, Postgres>,
    sid: &str,
    rows: &[NewRow<'_>],
) -> StoreResult<()> {
    let n = rows.len();
    let mut seqs = Vec::with_capacity(n);
    let mut tss = Vec::with_capacity(n);
    let mut kinds = Vec::with_capacity(n);
    let mut authors = Vec::with_capacity(n);
    let mut payloads = Vec::with_capacity(n);
    let mut producers = Vec::with_capacity(n);
    let mut producer_seqs = Vec::with_capacity(n);
    let mut client_msgs = Vec::with_capacity(n);
    let mut ref_seqs = Vec::with_capacity(n);
    for row in rows {
        let (producer, producer_seq, client_msg, ref_seq) = row.key_columns();
        seqs.push(row.seq);
        tss.push(row.append.ts);
        kinds.push(row.append.kind.as_str());
        authors.push(row.append.author.as_str());
        payloads.push(row.payload.as_str());
        producers.push(producer.map(|p| p.to_string()));
        producer_seqs.push(producer_seq);
        client_msgs.push(client_msg);
        ref_seqs.push(ref_seq);
    }
    sqlx::query(
        "INSERT INTO entries (session_id, seq, ts, kind, author, payload, producer_id, \
         producer_seq, client_msg_id, ref_seq) \
         SELECT $1::uuid, * FROM UNNEST($2::bigint[], $3::bigint[], $4::text[], $5::text[], \
         $6::text[], $7::uuid[], $8::bigint[], $9::text[], $10::bigint[])",
    )
    .bind(sid)
    .bind(seqs)
    .bind(tss)
    .bind(kinds)
    .bind(authors)
    .bind(payloads)
    .bind(producers)
    .bind(producer_seqs)
    .bind(client_msgs)
    .bind(ref_seqs)
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(())
}
