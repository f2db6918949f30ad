//! The Postgres side of checkpoints: one row per uploaded checkpoint, keyed by its id.

use async_trait::async_trait;
use moor_protocol::SessionId;
use sqlx::postgres::PgRow;
use sqlx::Row;

use super::rows::session_id;
use super::PgStore;
use crate::store::errors::db_error;
use crate::store::{checkpoint_retried, CheckpointRow, CheckpointStore, StoreError, StoreResult};

#[async_trait]
impl CheckpointStore for PgStore {
    async fn save_checkpoint(&self, row: &CheckpointRow) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await.map_err(db_error)?;
        let inserted = sqlx::query(
            "INSERT INTO checkpoints (id, session_id, created_at, summary, manifest) \
             SELECT $1, id, $2, $3, $4 FROM sessions WHERE id = $5::uuid \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(&row.id)
        .bind(row.created_at)
        .bind(&row.summary)
        .bind(&row.manifest)
        .bind(row.session.to_string())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?
        .rows_affected();
        if inserted == 1 {
            sqlx::query(
                "INSERT INTO checkpoint_blobs (sha256, checkpoint_id) \
                 SELECT DISTINCT sha, $2 FROM UNNEST($1::text[]) sha ON CONFLICT DO NOTHING",
            )
            .bind(&row.blobs)
            .bind(&row.id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
            tx.commit().await.map_err(db_error)?;
            return Ok(true);
        }
        drop(tx);
        // Either the id is taken (by this upload retried, or by other content) or the session
        // does not exist.
        checkpoint_retried(self.checkpoint(&row.id).await, row)
    }

    async fn checkpoint(&self, id: &str) -> StoreResult<CheckpointRow> {
        let row = sqlx::query(
            "SELECT id, session_id::text AS session, created_at, summary, manifest \
             FROM checkpoints WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?
        .ok_or(StoreError::NotFound)?;
        checkpoint_from(&row, true)
    }

    async fn list_checkpoints(&self, session: SessionId) -> StoreResult<Vec<CheckpointRow>> {
        let rows = sqlx::query(
            "SELECT id, session_id::text AS session, created_at, summary FROM checkpoints \
             WHERE session_id = $1::uuid ORDER BY created_at DESC, id DESC",
        )
        .bind(session.to_string())
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter().map(|r| checkpoint_from(r, false)).collect()
    }

    async fn blob_sessions(&self, sha256: &str) -> StoreResult<Vec<SessionId>> {
        let rows = sqlx::query(
            "SELECT DISTINCT c.session_id::text AS id FROM checkpoint_blobs b \
             JOIN checkpoints c ON c.id = b.checkpoint_id WHERE b.sha256 = $1",
        )
        .bind(sha256)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter().map(|r| session_id(r, "id")).collect()
    }
}

fn checkpoint_from(row: &PgRow, manifest: bool) -> StoreResult<CheckpointRow> {
    Ok(CheckpointRow {
        id: row.try_get("id").map_err(db_error)?,
        session: session_id(row, "session")?,
        created_at: row.try_get("created_at").map_err(db_error)?,
        summary: row.try_get("summary").map_err(db_error)?,
        manifest: if manifest {
            row.try_get("manifest").map_err(db_error)?
        } else {
            String::new()
        },
        blobs: Vec::new(),
    })
}
