//! The SQLite side of checkpoints: one row per uploaded checkpoint, keyed by its id.

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
            "INSERT INTO checkpoints (id, session_pk, created_at, summary, manifest) \
             SELECT ?, pk, ?, ?, ? FROM sessions WHERE id = ? \
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
            for sha in &row.blobs {
                sqlx::query(
                    "INSERT OR IGNORE INTO checkpoint_blobs (sha256, checkpoint_id) VALUES (?, ?)",
                )
                .bind(sha)
                .bind(&row.id)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            }
            tx.commit().await.map_err(db_error)?;
            return Ok(true);
        }
        drop(tx);
        checkpoint_retried(self.checkpoint(&row.id).await, row)
    }

    async fn checkpoint(&self, id: &str) -> StoreResult<CheckpointRow> {
        let row = sqlx::query(
            "SELECT c.id, s.id AS session, c.created_at, c.summary, c.manifest \
             FROM checkpoints c JOIN sessions s ON s.pk = c.session_pk WHERE c.id = ?",
        )
        .bind(id)
        .fetch_optional(&self.writer)
        .await
        .map_err(db_error)?
        .ok_or(StoreError::NotFound)?;
        checkpoint_from(&row, true)
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
             JOIN checkpoints c ON c.id = b.checkpoint_id \
             JOIN sessions s ON s.pk = c.session_pk WHERE b.sha256 = ?",
        )
        .bind(sha256)
        .fetch_all(&self.readers)
        .await
        .map_err(db_error)?;
        rows.iter().map(|r| session_id(r, "id")).collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LogStore;

    #[tokio::test]
    async fn checkpoints_are_stored_once_listed_newest_first_and_never_overwritten() {
        // arrange
        let path = std::env::temp_dir().join(format!("moor-ckpt-{}.db", uuid::Uuid::new_v4()));
        let store = SqliteStore::connect(&format!("sqlite:{}", path.display()))
            .await
            .unwrap();
        let session = store.open_session("s", None).await.unwrap().id;
        let row = |id: &str, at: i64, manifest: &str| CheckpointRow {
            id: id.into(),
            session,
            created_at: at,
            summary: format!("{{\"id\":\"{id}\"}}"),
            manifest: manifest.into(),
            blobs: vec![],
        };
        // act + assert
        assert!(store.save_checkpoint(&row("a", 1, "{}")).await.unwrap());
        assert!(store.save_checkpoint(&row("b", 2, "{}")).await.unwrap());
        assert!(
            !store.save_checkpoint(&row("a", 1, "{}")).await.unwrap(),
            "a retry is a no-op"
        );
        assert!(matches!(
            store.save_checkpoint(&row("a", 1, "{\"other\":1}")).await,
            Err(StoreError::Conflict(_))
        ));
        let listed: Vec<String> = store
            .list_checkpoints(session)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(listed, ["b", "a"]);
        assert_eq!(store.checkpoint("a").await.unwrap().manifest, "{}");
        assert!(matches!(
            store.checkpoint("zz").await,
            Err(StoreError::NotFound)
        ));
        let _ = std::fs::remove_file(&path);
    }
}
