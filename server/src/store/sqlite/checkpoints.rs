//! The SQLite side of checkpoints: one row per uploaded checkpoint, keyed by its session and
//! its id; the blobs each names; who uploaded each blob.

use async_trait::async_trait;
use moor_protocol::SessionId;
use sqlx::Row;

use super::{session_id, SqliteStore};
use crate::store::errors::db_error;
use crate::store::{checkpoint_retried, CheckpointRow, CheckpointStore, StoreError, StoreResult};

#[async_trait]
impl CheckpointStore for SqliteStore {
    async fn save_checkpoint(&self, row: &CheckpointRow) -> StoreResult<bool> {
        let mut tx = self.writer.begin().await.map_err(db_error)?;
        let inserted = sqlx::query(
            "INSERT INTO checkpoints (session_pk, id, created_at, summary, manifest) \
             SELECT pk, ?, ?, ?, ? FROM sessions WHERE id = ? \
             ON CONFLICT (session_pk, id) DO NOTHING",
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
            let blobs = serde_json::to_string(&row.blobs).map_err(anyhow::Error::from)?;
            sqlx::query(
                "INSERT OR IGNORE INTO checkpoint_blobs (sha256, session_pk, checkpoint_id) \
                 SELECT DISTINCT j.value, s.pk, ? FROM json_each(?) j, sessions s WHERE s.id = ?",
            )
            .bind(&row.id)
            .bind(blobs)
            .bind(row.session.to_string())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
            tx.commit().await.map_err(db_error)?;
            return Ok(true);
        }
        drop(tx);
        checkpoint_retried(self.checkpoint(row.session, &row.id).await, row)
    }

    async fn checkpoint(&self, session: SessionId, id: &str) -> StoreResult<CheckpointRow> {
        let row = sqlx::query(
            "SELECT c.id, s.id AS session, c.created_at, c.summary, c.manifest \
             FROM checkpoints c JOIN sessions s ON s.pk = c.session_pk \
             WHERE s.id = ? AND c.id = ?",
        )
        .bind(session.to_string())
        .bind(id)
        .fetch_optional(&self.writer)
        .await
        .map_err(db_error)?
        .ok_or(StoreError::NotFound)?;
        checkpoint_from(&row, true)
    }

    async fn checkpoint_sessions(&self, id: &str) -> StoreResult<Vec<SessionId>> {
        let rows = sqlx::query(
            "SELECT s.id FROM checkpoints c JOIN sessions s ON s.pk = c.session_pk \
             WHERE c.id = ? ORDER BY s.id",
        )
        .bind(id)
        .fetch_all(&self.readers)
        .await
        .map_err(db_error)?;
        rows.iter().map(|r| session_id(r, "id")).collect()
    }

    async fn list_checkpoints(&self, session: SessionId) -> StoreResult<Vec<CheckpointRow>> {
        let rows = sqlx::query(
            "SELECT c.id, s.id AS session, c.created_at, c.summary \
             FROM checkpoints c JOIN sessions s ON s.pk = c.session_pk \
             WHERE s.id = ? ORDER BY c.created_at DESC, c.id DESC",
        )
        .bind(session.to_string())
        .fetch_all(&self.readers)
        .await
        .map_err(db_error)?;
        rows.iter().map(|r| checkpoint_from(r, false)).collect()
    }

    async fn blob_sessions(&self, sha256: &str) -> StoreResult<Vec<SessionId>> {
        let rows = sqlx::query(
            "SELECT DISTINCT s.id FROM checkpoint_blobs b \
             JOIN sessions s ON s.pk = b.session_pk WHERE b.sha256 = ?",
        )
        .bind(sha256)
        .fetch_all(&self.readers)
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
            "INSERT OR IGNORE INTO blob_uploads (sha256, uploader, size, uploaded_at) \
             VALUES (?, ?, ?, ?)",
        )
        .bind(sha256)
        .bind(uploader)
        .bind(size as i64)
        .bind(at)
        .execute(&self.writer)
        .await
        .map_err(db_error)?;
        Ok(())
    }

    async fn blobs_known_to(&self, principal: &str, sha256: &[String]) -> StoreResult<Vec<String>> {
        let asked = serde_json::to_string(sha256).map_err(anyhow::Error::from)?;
        let rows = sqlx::query(
            "SELECT DISTINCT j.value AS sha256 FROM json_each(?1) j WHERE \
             EXISTS (SELECT 1 FROM blob_uploads u WHERE u.sha256 = j.value AND u.uploader = ?2) \
             OR EXISTS (SELECT 1 FROM checkpoint_blobs b \
                 JOIN sessions s ON s.pk = b.session_pk \
                 JOIN session_members m ON m.session_id = s.id \
                 WHERE b.sha256 = j.value AND m.principal = ?2)",
        )
        .bind(asked)
        .bind(principal)
        .fetch_all(&self.readers)
        .await
        .map_err(db_error)?;
        Ok(rows.iter().map(|r| r.get("sha256")).collect())
    }

    async fn uploaded_blob_bytes(&self, uploader: &str) -> StoreResult<u64> {
        let total: i64 = sqlx::query_scalar(
            "SELECT COALESCE(SUM(size), 0) FROM blob_uploads WHERE uploader = ?",
        )
        .bind(uploader)
        .fetch_one(&self.readers)
        .await
        .map_err(db_error)?;
        Ok(total.max(0) as u64)
    }
}

fn checkpoint_from(row: &sqlx::sqlite::SqliteRow, manifest: bool) -> StoreResult<CheckpointRow> {
    Ok(CheckpointRow {
        id: row.get("id"),
        session: session_id(row, "session")?,
        created_at: row.get("created_at"),
        summary: row.get("summary"),
        manifest: if manifest {
            row.get("manifest")
        } else {
            String::new()
        },
        blobs: Vec::new(),
    })
}
