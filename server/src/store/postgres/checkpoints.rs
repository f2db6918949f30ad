//! The Postgres side of checkpoints: one row per uploaded checkpoint, keyed by its session and
//! its id; the blobs each names; who uploaded each blob.

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
            "INSERT INTO checkpoints (session_id, id, created_at, summary, manifest) \
             SELECT id, $1, $2, $3, $4 FROM sessions WHERE id = $5::uuid \
             ON CONFLICT (session_id, id) DO NOTHING",
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
                "INSERT INTO checkpoint_blobs (sha256, session_id, checkpoint_id) \
                 SELECT DISTINCT sha, $2::uuid, $3 FROM UNNEST($1::text[]) sha \
                 ON CONFLICT DO NOTHING",
            )
            .bind(&row.blobs)
            .bind(row.session.to_string())
            .bind(&row.id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
            tx.commit().await.map_err(db_error)?;
            return Ok(true);
        }
        drop(tx);
        // Either the id is taken in this session (by this upload retried, or by other content)
        // or the session does not exist.
        checkpoint_retried(self.checkpoint(row.session, &row.id).await, row)
    }

    async fn checkpoint(&self, session: SessionId, id: &str) -> StoreResult<CheckpointRow> {
        let row = sqlx::query(
            "SELECT id, session_id::text AS session, created_at, summary, manifest \
             FROM checkpoints WHERE session_id = $1::uuid AND id = $2",
        )
        .bind(session.to_string())
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?
        .ok_or(StoreError::NotFound)?;
        checkpoint_from(&row, true)
    }

    async fn checkpoint_sessions(&self, id: &str) -> StoreResult<Vec<SessionId>> {
        let rows = sqlx::query(
            "SELECT session_id::text AS id FROM checkpoints WHERE id = $1 ORDER BY session_id",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter().map(|r| session_id(r, "id")).collect()
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
            "SELECT DISTINCT session_id::text AS id FROM checkpoint_blobs WHERE sha256 = $1",
        )
        .bind(sha256)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter().map(|r| session_id(r, "id")).collect()
    }

    async fn record_blob_upload(
        &self,
        sha256: &str,
        uploader: &str,
        size: u64,
        at: i64,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO blob_uploads (sha256, uploader, size, uploaded_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .bind(sha256)
        .bind(uploader)
        .bind(size as i64)
        .bind(at)
        .execute(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(())
    }

    async fn blobs_known_to(&self, principal: &str, sha256: &[String]) -> StoreResult<Vec<String>> {
        let rows = sqlx::query(
            "SELECT DISTINCT sha FROM UNNEST($1::text[]) sha WHERE \
             EXISTS (SELECT 1 FROM blob_uploads u WHERE u.sha256 = sha AND u.uploader = $2) \
             OR EXISTS (SELECT 1 FROM checkpoint_blobs b \
                 JOIN session_members m ON m.session_id = b.session_id::text \
                 WHERE b.sha256 = sha AND m.principal = $2)",
        )
        .bind(sha256)
        .bind(principal)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter()
            .map(|r| r.try_get("sha").map_err(db_error))
            .collect()
    }

    async fn uploaded_blob_bytes(&self, uploader: &str) -> StoreResult<u64> {
        let total: i64 = sqlx::query_scalar(
            "SELECT COALESCE(SUM(size), 0)::bigint FROM blob_uploads WHERE uploader = $1",
        )
        .bind(uploader)
        .fetch_one(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(total.max(0) as u64)
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
