//! [`CheckpointStore`](super::CheckpointStore), written once for both engines.
//!
//! The checkpoint tables key their rows by the session differently (SQLite by the session's
//! integer `pk`, Postgres by its uuid), so the queries that name a session are the store's own
//! [`CheckpointDialect`] items; everything else (the transaction, the binds, reading the rows
//! back, the blob uploads) is here once. Lists of blob hashes are bound as one JSON array on
//! both engines.

/// What [`checkpoint_store!`] needs from a store besides its pools: the queries that name a
/// session, each with the binds and the columns its doc says.
pub(crate) trait CheckpointDialect {
    /// Inserts checkpoint `$1` (created `$2`, summary `$3`, manifest `$4`) into session `$5`;
    /// nothing when the session already holds that id.
    const SAVE_CHECKPOINT: &'static str;
    /// Records that checkpoint `$3` of session `$2` names each blob of the JSON array `$1`.
    const SAVE_BLOBS: &'static str;
    /// Checkpoint `$2` of session `$1`: `id, session, created_at, summary, manifest`.
    const CHECKPOINT: &'static str;
    /// The sessions (`id`) holding a checkpoint `$1`, in id order.
    const CHECKPOINT_SESSIONS: &'static str;
    /// The checkpoints of session `$1`, newest first: `id, session, created_at, summary`.
    const LIST_CHECKPOINTS: &'static str;
    /// The sessions (`id`) with a checkpoint naming blob `$1`.
    const BLOB_SESSIONS: &'static str;
    /// Of the JSON array `$1` of hashes, those (`sha256`) that `$2` uploaded or that a
    /// checkpoint of a session `$2` is a member of names.
    const BLOBS_KNOWN_TO: &'static str;
}

/// Implements [`CheckpointStore`](crate::store::CheckpointStore) for `$store`, a store over
/// `$db` with inherent `writes()` and `reads()` pools and [`CheckpointDialect`].
macro_rules! checkpoint_store {
    ($store:ident, $db:ty) => {
        mod checkpoint_store {
            use moor_protocol::SessionId;
            use sqlx::Row;

            use super::$store;
            use $crate::store::access::stored_session;
            use $crate::store::checkpoint::CheckpointDialect as _;
            use $crate::store::errors::db_error;
            use $crate::store::{
                checkpoint_retried, CheckpointRow, CheckpointStore, StoreError, StoreResult,
            };

            type DbRow = <$db as sqlx::Database>::Row;

            #[async_trait::async_trait]
            impl CheckpointStore for $store {
                async fn save_checkpoint(&self, row: &CheckpointRow) -> StoreResult<bool> {
                    let sid = row.session.to_string();
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    let inserted = sqlx::query(Self::SAVE_CHECKPOINT)
                        .bind(&row.id)
                        .bind(row.created_at)
                        .bind(&row.summary)
                        .bind(&row.manifest)
                        .bind(&sid)
                        .execute(&mut *tx)
                        .await
                        .map_err(db_error)?
                        .rows_affected();
                    if inserted == 1 {
                        let blobs =
                            serde_json::to_string(&row.blobs).map_err(anyhow::Error::from)?;
                        sqlx::query(Self::SAVE_BLOBS)
                            .bind(blobs)
                            .bind(&sid)
                            .bind(&row.id)
                            .execute(&mut *tx)
                            .await
                            .map_err(db_error)?;
                        tx.commit().await.map_err(db_error)?;
                        return Ok(true);
                    }
                    drop(tx);
                    // Either the id is taken in this session (by this upload retried, or by
                    // other content) or the session does not exist.
                    checkpoint_retried(self.checkpoint(row.session, &row.id).await, row)
                }

                async fn checkpoint(
                    &self,
                    session: SessionId,
                    id: &str,
                ) -> StoreResult<CheckpointRow> {
                    // From the writer: a checkpoint just saved is read back at once.
                    let row = sqlx::query(Self::CHECKPOINT)
                        .bind(session.to_string())
                        .bind(id)
                        .fetch_optional(self.writes())
                        .await
                        .map_err(db_error)?
                        .ok_or(StoreError::NotFound)?;
                    checkpoint_from(&row, true)
                }

                async fn checkpoint_sessions(&self, id: &str) -> StoreResult<Vec<SessionId>> {
                    sessions_listed(self.reads(), Self::CHECKPOINT_SESSIONS, id).await
                }

                async fn list_checkpoints(
                    &self,
                    session: SessionId,
                ) -> StoreResult<Vec<CheckpointRow>> {
                    let rows = sqlx::query(Self::LIST_CHECKPOINTS)
                        .bind(session.to_string())
                        .fetch_all(self.reads())
                        .await
                        .map_err(db_error)?;
                    rows.iter().map(|r| checkpoint_from(r, false)).collect()
                }

                async fn blob_sessions(&self, sha256: &str) -> StoreResult<Vec<SessionId>> {
                    sessions_listed(self.reads(), Self::BLOB_SESSIONS, sha256).await
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
                    .execute(self.writes())
                    .await
                    .map_err(db_error)?;
                    Ok(())
                }

                async fn blobs_known_to(
                    &self,
                    principal: &str,
                    sha256: &[String],
                ) -> StoreResult<Vec<String>> {
                    let asked = serde_json::to_string(sha256).map_err(anyhow::Error::from)?;
                    let rows = sqlx::query(Self::BLOBS_KNOWN_TO)
                        .bind(asked)
                        .bind(principal)
                        .fetch_all(self.reads())
                        .await
                        .map_err(db_error)?;
                    rows.iter()
                        .map(|r| r.try_get("sha256").map_err(db_error))
                        .collect()
                }

                async fn uploaded_blob_bytes(&self, uploader: &str) -> StoreResult<u64> {
                    let total: i64 = sqlx::query_scalar(
                        "SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM blob_uploads \
                         WHERE uploader = $1",
                    )
                    .bind(uploader)
                    .fetch_one(self.reads())
                    .await
                    .map_err(db_error)?;
                    Ok(total.max(0) as u64)
                }
            }

            /// The sessions (column `id`) that `sql`, a query of one bind, lists for `key`.
            async fn sessions_listed(
                pool: &sqlx::Pool<$db>,
                sql: &'static str,
                key: &str,
            ) -> StoreResult<Vec<SessionId>> {
                let rows = sqlx::query(sql)
                    .bind(key)
                    .fetch_all(pool)
                    .await
                    .map_err(db_error)?;
                rows.iter().map(|r| session_id(r, "id")).collect()
            }

            /// The session id in column `col`, read back as text.
            fn session_id(row: &DbRow, col: &str) -> StoreResult<SessionId> {
                stored_session(row.try_get(col).map_err(db_error)?)
            }

            fn checkpoint_from(row: &DbRow, manifest: bool) -> StoreResult<CheckpointRow> {
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
        }
    };
}

pub(crate) use checkpoint_store;
