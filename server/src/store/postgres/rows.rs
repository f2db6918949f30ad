//! Postgres rows to the store's types: sessions and entries read back.

use anyhow::Context;
use moor_protocol::{Entry, Seq, SessionId};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::store::access::stored_session;
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
