//! Postgres rows to the store's types.

use moor_protocol::SessionId;
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::store::access::stored_session;
use crate::store::errors::db_error;
use crate::store::StoreResult;

/// The session id in column `col`, read back as text.
pub(super) fn session_id(row: &PgRow, col: &str) -> StoreResult<SessionId> {
    stored_session(row.try_get(col).map_err(db_error)?)
}
