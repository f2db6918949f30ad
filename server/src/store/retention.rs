//! [`RetentionStore`]: deleting ended sessions, written once for both engines.
//!
//! A session is deleted in two steps. Retiring it (one transaction) records it in
//! `retired_sessions` — from then on lookups and lists no longer see it and a request for it is
//! answered 410 with the reason — and deletes everything small about it: members, share links,
//! offers, its lease, its outbox rows, its state snapshot and its checkpoints (the blobs no other
//! checkpoint names are handed back for the caller to delete from disk). Its log is then deleted
//! by [`RetentionStore::retention_batch`], at most a bounded number of entries per batch; once
//! none is left its producers and its row go and the retirement is marked done.
//!
//! Only ended sessions whose bridge holds no live lease are ever retired. On Postgres each batch
//! takes a transaction-scoped advisory lock first: while one node runs a batch, another node's
//! batch returns at once (`None`), so nodes never do the same work twice.

use async_trait::async_trait;
use moor_protocol::SessionId;

use super::StoreResult;

/// Why an owner's deletion was refused: the session is still running.
pub const RETIRE_NOT_ENDED: &str =
    "the session has not ended: end it (or wait for its agent to exit) before deleting it";

/// Why an owner's deletion was refused: a bridge is connected to it.
pub const RETIRE_LIVE: &str = "a bridge is connected to this session: stop it before deleting it";

/// Most retirements whose logs one batch works on.
pub const PENDING_PER_BATCH: i64 = 16;

/// A deleted session, as its tombstone records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retired {
    /// The session.
    pub session: SessionId,
    /// Its name.
    pub name: String,
    /// When it had ended (ms).
    pub ended_at: Option<i64>,
    /// When it was deleted (ms).
    pub retired_at: i64,
    /// Why (the retention policy, or its owner).
    pub reason: String,
    /// When the last of its rows was deleted (ms); `None` while its log is being deleted.
    pub done_at: Option<i64>,
}

/// What one retention batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sweep {
    /// Sessions the policy retired in this batch.
    pub retired: Vec<SessionId>,
    /// Retired sessions whose last rows this batch deleted.
    pub finished: Vec<SessionId>,
    /// Entries deleted.
    pub entries_deleted: u64,
    /// Blobs (SHA-256) that no checkpoint names any more: the caller deletes their files.
    pub orphan_blobs: Vec<String>,
}

/// Deleting sessions: by their owner, and by the server's retention policy.
#[async_trait]
pub trait RetentionStore: Send + Sync + std::fmt::Debug {
    /// Retires `session` now, for `reason` (see the module doc). Returns the blobs no
    /// checkpoint names any more. A session that is not ended, or whose bridge holds a lease
    /// live at `at`, is a [`StoreError::Conflict`](super::StoreError::Conflict)
    /// ([`RETIRE_NOT_ENDED`], [`RETIRE_LIVE`]); an unknown or already retired one is
    /// [`StoreError::NotFound`](super::StoreError::NotFound).
    async fn retire_session(
        &self,
        session: SessionId,
        at: i64,
        reason: &str,
    ) -> StoreResult<Vec<String>>;

    /// One bounded batch, in one transaction: retires up to `max_sessions` sessions that ended
    /// before `ended_before` (none when `None`) and hold no lease live at `now`, with `reason`;
    /// then deletes up to `max_entries` entries of retired sessions, oldest retirement first,
    /// finishing each whose log is empty. `None` when another node is running a batch.
    async fn retention_batch(
        &self,
        ended_before: Option<i64>,
        now: i64,
        reason: &str,
        max_sessions: u32,
        max_entries: u32,
    ) -> StoreResult<Option<Sweep>>;

    /// The tombstone of session `id`, if it was deleted.
    async fn retired_session(&self, id: SessionId) -> StoreResult<Option<Retired>>;

    /// Gives the space freed by deletions back to the file system where the engine needs to be
    /// asked (SQLite with incremental auto-vacuum: up to `pages` pages); Postgres's autovacuum
    /// reuses it by itself.
    async fn reclaim_space(&self, pages: u32) -> StoreResult<()>;
}

/// The SQL that differs between engines in [`retention_store!`].
pub(crate) trait RetentionDialect {
    /// Selects one session's rows in `entries`, `producers`, `state_snapshots`, `checkpoints`
    /// and `checkpoint_blobs` by its id in `$1`.
    const ROWS_OF: &'static str;
    /// Selects its `sessions` row (no alias) by its id in `$1`.
    const ID_IS: &'static str;
    /// `sessions.id` (alias `s`) as text.
    const S_ID_TEXT: &'static str;
}

/// Implements [`RetentionStore`] for `$store`, a store over `$db` with an inherent `writes()`
/// pool, a `lock_retention(tx) -> StoreResult<bool>` and a `vacuum_pages(u32)`.
macro_rules! retention_store {
    ($store:ident, $db:ty) => {
        mod retention_store {
            use moor_protocol::SessionId;
            use sqlx::Row;

            use super::$store;
            use $crate::store::access::stored_session;
            use $crate::store::errors::db_error;
            use $crate::store::retention::{
                Retired, RetentionDialect, RetentionStore, Sweep, PENDING_PER_BATCH, RETIRE_LIVE,
                RETIRE_NOT_ENDED,
            };
            use $crate::store::{StoreError, StoreResult};

            type Tx<'a> = sqlx::Transaction<'a, $db>;

            const ROWS_OF: &str = <$store as RetentionDialect>::ROWS_OF;
            const ID_IS: &str = <$store as RetentionDialect>::ID_IS;
            const S_ID_TEXT: &str = <$store as RetentionDialect>::S_ID_TEXT;

            /// Tables keyed by the session id as text.
            const BY_SESSION_ID: [&str; 5] = [
                "session_members",
                "share_links",
                "session_offers",
                "bridge_leases",
                "notify_outbox",
            ];

            /// Deletes everything of `sid` but its log, its producers and its row: checkpoints
            /// (blob names first), the state snapshot, and the rows keyed by its id as text.
            async fn delete_small_rows(tx: &mut Tx<'_>, sid: &str) -> StoreResult<()> {
                for table in ["checkpoint_blobs", "checkpoints", "state_snapshots"] {
                    sqlx::query(&format!("DELETE FROM {table} WHERE {ROWS_OF}"))
                        .bind(sid)
                        .execute(&mut **tx)
                        .await
                        .map_err(db_error)?;
                }
                for table in BY_SESSION_ID {
                    sqlx::query(&format!("DELETE FROM {table} WHERE session_id = $1"))
                        .bind(sid)
                        .execute(&mut **tx)
                        .await
                        .map_err(db_error)?;
                }
                Ok(())
            }

            /// Records the retirement of `sid` and deletes all but its log, its producers and
            /// its row; returns the blobs no checkpoint names any more. False (and nothing
            /// done) when it was retired already.
            async fn retire_in(
                tx: &mut Tx<'_>,
                sid: &str,
                at: i64,
                reason: &str,
                orphans: &mut Vec<String>,
            ) -> StoreResult<bool> {
                let done = sqlx::query(&format!(
                    "INSERT INTO retired_sessions (id, name, ended_at, retired_at, reason) \
                     SELECT {S_ID_TEXT}, s.name, s.ended_at, $2, $3 FROM sessions s \
                     WHERE s.{ID_IS} ON CONFLICT (id) DO NOTHING"
                ))
                .bind(sid)
                .bind(at)
                .bind(reason)
                .execute(&mut **tx)
                .await
                .map_err(db_error)?;
                if done.rows_affected() == 0 {
                    return Ok(false);
                }
                let blobs: Vec<String> = sqlx::query_scalar(&format!(
                    "SELECT DISTINCT sha256 FROM checkpoint_blobs WHERE {ROWS_OF}"
                ))
                .bind(sid)
                .fetch_all(&mut **tx)
                .await
                .map_err(db_error)?;
                delete_small_rows(tx, sid).await?;
                for sha in blobs {
                    let named: Option<i64> = sqlx::query_scalar(
                        "SELECT CAST(1 AS BIGINT) FROM checkpoint_blobs WHERE sha256 = $1 LIMIT 1",
                    )
                    .bind(&sha)
                    .fetch_optional(&mut **tx)
                    .await
                    .map_err(db_error)?;
                    if named.is_none() {
                        sqlx::query("DELETE FROM blob_uploads WHERE sha256 = $1")
                            .bind(&sha)
                            .execute(&mut **tx)
                            .await
                            .map_err(db_error)?;
                        orphans.push(sha);
                    }
                }
                Ok(true)
            }

            /// Deletes up to `budget` entries of retired session `sid`; when none is left,
            /// deletes its producers and its row and marks the retirement done. Returns the
            /// entries deleted and whether it finished.
            async fn delete_log(
                tx: &mut Tx<'_>,
                sid: &str,
                budget: i64,
                at: i64,
            ) -> StoreResult<(u64, bool)> {
                let deleted = sqlx::query(&format!(
                    "DELETE FROM entries WHERE {ROWS_OF} AND seq IN \
                     (SELECT seq FROM entries WHERE {ROWS_OF} ORDER BY seq LIMIT $2)"
                ))
                .bind(sid)
                .bind(budget)
                .execute(&mut **tx)
                .await
                .map_err(db_error)?
                .rows_affected();
                if deleted as i64 >= budget {
                    return Ok((deleted, false));
                }
                sqlx::query(&format!("DELETE FROM producers WHERE {ROWS_OF}"))
                    .bind(sid)
                    .execute(&mut **tx)
                    .await
                    .map_err(db_error)?;
                // Rows a late bookkeeping append added since the retirement.
                delete_small_rows(tx, sid).await?;
                sqlx::query(&format!("DELETE FROM sessions WHERE {ID_IS}"))
                    .bind(sid)
                    .execute(&mut **tx)
                    .await
                    .map_err(db_error)?;
                sqlx::query("UPDATE retired_sessions SET done_at = $2 WHERE id = $1")
                    .bind(sid)
                    .bind(at)
                    .execute(&mut **tx)
                    .await
                    .map_err(db_error)?;
                Ok((deleted, true))
            }

            #[async_trait::async_trait]
            impl RetentionStore for $store {
                async fn retire_session(
                    &self,
                    session: SessionId,
                    at: i64,
                    reason: &str,
                ) -> StoreResult<Vec<String>> {
                    let sid = session.to_string();
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    let row = sqlx::query(&format!(
                        "SELECT s.ended_at, CAST(CASE WHEN EXISTS (SELECT 1 FROM retired_sessions r \
                         WHERE r.id = {S_ID_TEXT}) THEN 1 ELSE 0 END AS BIGINT) AS retired, \
                         CAST(CASE WHEN EXISTS (SELECT 1 FROM bridge_leases l \
                         WHERE l.session_id = {S_ID_TEXT} AND l.expires_at > $2 \
                         AND l.claimed_by IS NULL) THEN 1 ELSE 0 END AS BIGINT) AS live \
                         FROM sessions s WHERE s.{ID_IS}"
                    ))
                    .bind(&sid)
                    .bind(at)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(db_error)?
                    .ok_or(StoreError::NotFound)?;
                    let ended: Option<i64> = row.try_get("ended_at").map_err(db_error)?;
                    let retired: i64 = row.try_get("retired").map_err(db_error)?;
                    let live: i64 = row.try_get("live").map_err(db_error)?;
                    if retired != 0 {
                        return Err(StoreError::NotFound);
                    }
                    if ended.is_none() {
                        return Err(StoreError::Conflict(RETIRE_NOT_ENDED));
                    }
                    if live != 0 {
                        return Err(StoreError::Conflict(RETIRE_LIVE));
                    }
                    let mut orphans = Vec::new();
                    if !retire_in(&mut tx, &sid, at, reason, &mut orphans).await? {
                        return Err(StoreError::NotFound);
                    }
                    tx.commit().await.map_err(db_error)?;
                    Ok(orphans)
                }

                async fn retention_batch(
                    &self,
                    ended_before: Option<i64>,
                    now: i64,
                    reason: &str,
                    max_sessions: u32,
                    max_entries: u32,
                ) -> StoreResult<Option<Sweep>> {
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    if !$store::lock_retention(&mut tx).await? {
                        return Ok(None);
                    }
                    let mut sweep = Sweep::default();
                    if let Some(before) = ended_before {
                        let ids: Vec<String> = sqlx::query_scalar(&format!(
                            "SELECT {S_ID_TEXT} FROM sessions s \
                             WHERE s.ended_at IS NOT NULL AND s.ended_at < $1 \
                             AND NOT EXISTS (SELECT 1 FROM retired_sessions r \
                             WHERE r.id = {S_ID_TEXT}) \
                             AND NOT EXISTS (SELECT 1 FROM bridge_leases l \
                             WHERE l.session_id = {S_ID_TEXT} AND l.expires_at > $2 \
                             AND l.claimed_by IS NULL) \
                             ORDER BY s.ended_at LIMIT $3"
                        ))
                        .bind(before)
                        .bind(now)
                        .bind(i64::from(max_sessions))
                        .fetch_all(&mut *tx)
                        .await
                        .map_err(db_error)?;
                        for sid in ids {
                            if retire_in(&mut tx, &sid, now, reason, &mut sweep.orphan_blobs)
                                .await?
                            {
                                sweep.retired.push(stored_session(&sid)?);
                            }
                        }
                    }
                    let pending: Vec<String> = sqlx::query_scalar(
                        "SELECT id FROM retired_sessions WHERE done_at IS NULL \
                         ORDER BY retired_at, id LIMIT $1",
                    )
                    .bind(PENDING_PER_BATCH)
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    let mut budget = i64::from(max_entries.max(1));
                    for sid in pending {
                        let (deleted, finished) = delete_log(&mut tx, &sid, budget, now).await?;
                        sweep.entries_deleted += deleted;
                        budget -= deleted as i64;
                        if finished {
                            sweep.finished.push(stored_session(&sid)?);
                        }
                        if budget <= 0 {
                            break;
                        }
                    }
                    tx.commit().await.map_err(db_error)?;
                    Ok(Some(sweep))
                }

                async fn retired_session(&self, id: SessionId) -> StoreResult<Option<Retired>> {
                    let row = sqlx::query(
                        "SELECT id, name, ended_at, retired_at, reason, done_at \
                         FROM retired_sessions WHERE id = $1",
                    )
                    .bind(id.to_string())
                    .fetch_optional(self.writes())
                    .await
                    .map_err(db_error)?;
                    row.map(|r| {
                        Ok(Retired {
                            session: stored_session(
                                &r.try_get::<String, _>("id").map_err(db_error)?,
                            )?,
                            name: r.try_get("name").map_err(db_error)?,
                            ended_at: r.try_get("ended_at").map_err(db_error)?,
                            retired_at: r.try_get("retired_at").map_err(db_error)?,
                            reason: r.try_get("reason").map_err(db_error)?,
                            done_at: r.try_get("done_at").map_err(db_error)?,
                        })
                    })
                    .transpose()
                }

                async fn reclaim_space(&self, pages: u32) -> StoreResult<()> {
                    self.vacuum_pages(pages).await
                }
            }
        }
    };
}

pub(crate) use retention_store;
