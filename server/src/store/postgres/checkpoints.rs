//! The Postgres side of checkpoints: one row per uploaded checkpoint, keyed by its id.

use anyhow::Context;
use moor_protocol::SessionId;
use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

use super::{other, PgStore};
use crate::store::{CheckpointRow, StoreError, StoreResult};

impl PgStore {
    pub(super) async fn save_checkpoint_row(&self, row: &CheckpointRow) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await.map_err(other)?;
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
        .map_err(other)?
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
            .map_err(other)?;
            tx.commit().await.map_err(other)?;
            return Ok(true);
        }
        drop(tx);
        // Either the id is taken (by this upload retried, or by other content) or the session
        // does not exist.
        match self.checkpoint_row(&row.id).await {
            Ok(stored) if stored.manifest == row.manifest && stored.session == row.session => {
                Ok(false)
            }
            Ok(_) => Err(StoreError::Conflict(
                "checkpoint id already stored with other content",
            )),
            Err(e) => Err(e),
        }
    }

    pub(super) async fn checkpoint_row(&self, id: &str) -> StoreResult<CheckpointRow> {
        let row = sqlx::query(
            "SELECT id, session_id::text AS session, created_at, summary, manifest \
             FROM checkpoints WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(other)?
        .ok_or(StoreError::NotFound)?;
        checkpoint_from(&row, true)
    }

    pub(super) async fn checkpoint_rows(
        &self,
        session: SessionId,
    ) -> StoreResult<Vec<CheckpointRow>> {
        let rows = sqlx::query(
            "SELECT id, session_id::text AS session, created_at, summary FROM checkpoints \
             WHERE session_id = $1::uuid ORDER BY created_at DESC, id DESC",
        )
        .bind(session.to_string())
        .fetch_all(&self.pool)
        .await
        .map_err(other)?;
        rows.iter().map(|r| checkpoint_from(r, false)).collect()
    }

    pub(super) async fn sessions_naming_blob(&self, sha256: &str) -> StoreResult<Vec<SessionId>> {
        let rows = sqlx::query(
            "SELECT DISTINCT c.session_id::text AS id FROM checkpoint_blobs b \
             JOIN checkpoints c ON c.id = b.checkpoint_id WHERE b.sha256 = $1",
        )
        .bind(sha256)
        .fetch_all(&self.pool)
        .await
        .map_err(other)?;
        rows.iter()
            .map(|r| {
                let id: String = r.try_get("id").map_err(other)?;
                Ok(SessionId(
                    Uuid::parse_str(&id).context("stored session id")?,
                ))
            })
            .collect()
    }
}

fn checkpoint_from(row: &PgRow, manifest: bool) -> StoreResult<CheckpointRow> {
    let session: String = row.try_get("session").map_err(other)?;
    Ok(CheckpointRow {
        id: row.try_get("id").map_err(other)?,
        session: SessionId(Uuid::parse_str(&session).context("stored session id")?),
        created_at: row.try_get("created_at").map_err(other)?,
        summary: row.try_get("summary").map_err(other)?,
        manifest: if manifest {
            row.try_get("manifest").map_err(other)?
        } else {
            String::new()
        },
        blobs: Vec::new(),
    })
}
