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
//!
//! Compaction ([`RetentionStore::compact_session`]) deletes a session's old entries of the
//! [`COMPACTED_KINDS`] and keeps the rest. It walks the log forward from the session's
//! `compacted_through`, one bounded step per transaction, and moves that mark in the same
//! transaction as its deletions, so a reader that reads the mark before and after a page knows
//! whether the page has gaps (see [`crate::store::read_page`]). It never goes past the session's
//! latest state snapshot (the fold never needs a compacted entry) nor into the newest
//! [`KEEP_TAIL`] entries (a viewer re-attaching near the head gets everything).

use async_trait::async_trait;
use moor_protocol::web::COMPACTED_KINDS;
use moor_protocol::{Seq, SessionId};

use super::StoreResult;

/// The newest entries of a log compaction never touches.
pub const KEEP_TAIL: u64 = 1_000;

/// A session's own retention policy; `None` follows the server's. Applied with the server's as
/// the stricter of the two (see [`Policy::stricter`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Policy {
    /// Keep the session this long (ms) after it ended, then delete it.
    pub keep_ended_ms: Option<i64>,
    /// Compact entries older than this (ms).
    pub compact_after_ms: Option<i64>,
    /// Compact the oldest entries while the log's payloads hold more than this (bytes).
    pub max_log_bytes: Option<u64>,
}

impl Policy {
    /// The policy in effect: for each bound, the smaller of the two where both are set.
    pub fn stricter(self, other: Policy) -> Policy {
        fn min<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        Policy {
            keep_ended_ms: min(self.keep_ended_ms, other.keep_ended_ms),
            compact_after_ms: min(self.compact_after_ms, other.compact_after_ms),
            max_log_bytes: min(self.max_log_bytes, other.max_log_bytes),
        }
    }

    /// Whether it asks for any compaction.
    pub fn compacts(&self) -> bool {
        self.compact_after_ms.is_some() || self.max_log_bytes.is_some()
    }
}

/// What compaction has removed from a session's log so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compaction {
    /// Every entry of the [`COMPACTED_KINDS`] with seq up to this one is gone.
    pub through: Seq,
    /// Entries removed in all.
    pub entries: u64,
    /// Payload bytes removed in all.
    pub bytes: u64,
}

impl Compaction {
    /// What a reader at `after` misses, if anything.
    pub fn after(&self, after: Seq) -> Option<moor_protocol::web::Compacted> {
        (after < self.through && self.entries > 0).then(|| moor_protocol::web::Compacted {
            after,
            through: self.through,
            kinds: COMPACTED_KINDS.iter().map(|k| (*k).to_owned()).collect(),
            entries: self.entries,
            bytes: self.bytes,
        })
    }
}

/// What one compaction step did to one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactStep {
    /// The session's compaction after the step.
    pub compaction: Compaction,
    /// Entries this step deleted.
    pub entries_deleted: u64,
    /// Payload bytes this step deleted.
    pub bytes_deleted: u64,
    /// Nothing more is due for this session now (the step stopped before its budget).
    pub finished: bool,
}

/// A session compaction may have work in, with its own policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The session.
    pub session: SessionId,
    /// Its own policy.
    pub policy: Policy,
}

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
    /// Blobs (SHA-256) that no checkpoint names any more, past their grace period: the caller
    /// deletes their files.
    pub orphan_blobs: Vec<String>,
}

/// Deleting sessions: by their owner, and by the server's retention policy.
#[async_trait]
pub trait RetentionStore: Send + Sync + std::fmt::Debug {
    /// Retires `session` now, for `reason` (see the module doc); the blobs no checkpoint names
    /// any more become orphans (see [`RetentionStore::collect_blobs`]). A session that is not ended, or whose bridge holds a lease
    /// live at `at`, is a [`StoreError::Conflict`](super::StoreError::Conflict)
    /// ([`RETIRE_NOT_ENDED`], [`RETIRE_LIVE`]); an unknown or already retired one is
    /// [`StoreError::NotFound`](super::StoreError::NotFound).
    async fn retire_session(&self, session: SessionId, at: i64, reason: &str) -> StoreResult<()>;

    /// Up to `limit` blobs orphaned before `before` that no checkpoint names and nobody
    /// uploaded since they were orphaned: their rows go, in one transaction, and the caller
    /// deletes their files. An orphan named again is forgotten; one uploaded again waits another
    /// grace period from `now`. Empty when another node is running a retention step.
    async fn collect_blobs(&self, before: i64, now: i64, limit: u32) -> StoreResult<Vec<String>>;

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

    /// Up to `limit` sessions not deleted with more than [`KEEP_TAIL`] entries past their
    /// compaction mark and a policy that compacts (their own, or the server's when
    /// `server_compacts`), most uncompacted first.
    async fn compact_candidates(
        &self,
        server_compacts: bool,
        limit: u32,
    ) -> StoreResult<Vec<Candidate>>;

    /// One compaction step of `session` under `policy` (already the stricter of the session's
    /// and the server's), in one transaction: looks at up to `max_entries` entries past its
    /// mark, deletes those of the [`COMPACTED_KINDS`] older than `now - compact_after_ms` (or,
    /// while the log holds more than `max_log_bytes`, the oldest whatever their age) and moves
    /// the mark. `None` when another node is running a retention or compaction step.
    async fn compact_session(
        &self,
        session: SessionId,
        policy: Policy,
        now: i64,
        max_entries: u32,
    ) -> StoreResult<Option<CompactStep>>;

    /// The session's own policy and what compaction removed from it.
    async fn session_policy(&self, session: SessionId) -> StoreResult<(Policy, Compaction)>;

    /// Replaces the session's own policy.
    async fn set_session_policy(&self, session: SessionId, policy: Policy) -> StoreResult<()>;
}

/// The reason recorded on a session deleted by its own policy.
pub fn own_policy_reason(keep_ms: i64) -> String {
    let days = keep_ms as f64 / 86_400_000.0;
    format!("its owner asked to keep it for {days} days after it ended")
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
            use moor_protocol::web::COMPACTED_KINDS;
            use moor_protocol::Seq;
            use $crate::store::retention::{
                own_policy_reason, Candidate, CompactStep, Compaction, Policy, Retired,
                RetentionDialect,
                RetentionStore, Sweep, KEEP_TAIL, PENDING_PER_BATCH, RETIRE_LIVE,
                RETIRE_NOT_ENDED,
            };
            use $crate::store::{seq_bind, StoreError, StoreResult};

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
            /// its row; records the blobs no checkpoint names any more as orphans since `at`.
            /// False (and nothing done) when it was retired already.
            async fn retire_in(
                tx: &mut Tx<'_>,
                sid: &str,
                at: i64,
                reason: &str,
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
                        sqlx::query(
                            "INSERT INTO blob_orphans (sha256, since) VALUES ($1, $2) \
                             ON CONFLICT (sha256) DO NOTHING",
                        )
                        .bind(&sha)
                        .bind(at)
                        .execute(&mut **tx)
                        .await
                        .map_err(db_error)?;
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

            /// A session's own policy from its row's `keep_ended_ms`, `compact_after_ms` and
            /// `max_log_bytes`.
            fn policy_row(r: &<$db as sqlx::Database>::Row) -> StoreResult<Policy> {
                let max: Option<i64> = r.try_get("max_log_bytes").map_err(db_error)?;
                Ok(Policy {
                    keep_ended_ms: r.try_get("keep_ended_ms").map_err(db_error)?,
                    compact_after_ms: r.try_get("compact_after_ms").map_err(db_error)?,
                    max_log_bytes: max.map(|b| b.max(0) as u64),
                })
            }

            #[async_trait::async_trait]
            impl RetentionStore for $store {
                async fn retire_session(
                    &self,
                    session: SessionId,
                    at: i64,
                    reason: &str,
                ) -> StoreResult<()> {
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
                    if !retire_in(&mut tx, &sid, at, reason).await? {
                        return Err(StoreError::NotFound);
                    }
                    tx.commit().await.map_err(db_error)?;
                    Ok(())
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
                    {
                        // The server's bound, or none; a session's own bound applies as well.
                        let before = ended_before.unwrap_or(i64::MIN);
                        let rows = sqlx::query(&format!(
                            "SELECT {S_ID_TEXT} AS id, CAST(CASE WHEN s.ended_at < $1 THEN 0 \
                             ELSE 1 END AS BIGINT) AS own, s.keep_ended_ms FROM sessions s \
                             WHERE s.ended_at IS NOT NULL AND (s.ended_at < $1 \
                             OR (s.keep_ended_ms IS NOT NULL AND s.ended_at < $2 - s.keep_ended_ms)) \
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
                        for row in rows {
                            let sid: String = row.try_get("id").map_err(db_error)?;
                            let own: i64 = row.try_get("own").map_err(db_error)?;
                            let keep: Option<i64> = row.try_get("keep_ended_ms").map_err(db_error)?;
                            let why = match keep {
                                Some(ms) if own != 0 => own_policy_reason(ms),
                                _ => reason.to_owned(),
                            };
                            if retire_in(&mut tx, &sid, now, &why).await?
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

                async fn collect_blobs(
                    &self,
                    before: i64,
                    now: i64,
                    limit: u32,
                ) -> StoreResult<Vec<String>> {
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    if !$store::lock_retention(&mut tx).await? {
                        return Ok(Vec::new());
                    }
                    let rows = sqlx::query(
                        "SELECT sha256, since, \
                         CAST(CASE WHEN EXISTS (SELECT 1 FROM checkpoint_blobs c \
                         WHERE c.sha256 = o.sha256) THEN 1 ELSE 0 END AS BIGINT) AS named, \
                         CAST(CASE WHEN EXISTS (SELECT 1 FROM blob_uploads u \
                         WHERE u.sha256 = o.sha256 AND u.uploaded_at >= o.since) \
                         THEN 1 ELSE 0 END AS BIGINT) AS fresh \
                         FROM blob_orphans o WHERE o.since < $1 ORDER BY o.since LIMIT $2",
                    )
                    .bind(before)
                    .bind(i64::from(limit))
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    let mut collected = Vec::new();
                    for r in rows {
                        let sha: String = r.try_get("sha256").map_err(db_error)?;
                        let named: i64 = r.try_get("named").map_err(db_error)?;
                        let fresh: i64 = r.try_get("fresh").map_err(db_error)?;
                        if named != 0 {
                            sqlx::query("DELETE FROM blob_orphans WHERE sha256 = $1")
                                .bind(&sha)
                                .execute(&mut *tx)
                                .await
                                .map_err(db_error)?;
                        } else if fresh != 0 {
                            sqlx::query("UPDATE blob_orphans SET since = $2 WHERE sha256 = $1")
                                .bind(&sha)
                                .bind(now)
                                .execute(&mut *tx)
                                .await
                                .map_err(db_error)?;
                        } else {
                            for table in ["blob_orphans", "blob_uploads"] {
                                sqlx::query(&format!("DELETE FROM {table} WHERE sha256 = $1"))
                                    .bind(&sha)
                                    .execute(&mut *tx)
                                    .await
                                    .map_err(db_error)?;
                            }
                            collected.push(sha);
                        }
                    }
                    tx.commit().await.map_err(db_error)?;
                    Ok(collected)
                }

                async fn compact_candidates(
                    &self,
                    server_compacts: bool,
                    limit: u32,
                ) -> StoreResult<Vec<Candidate>> {
                    let rows = sqlx::query(&format!(
                        "SELECT {S_ID_TEXT} AS id, s.keep_ended_ms, s.compact_after_ms, \
                         s.max_log_bytes FROM sessions s \
                         WHERE s.head_seq > s.compacted_through + $1 \
                         AND ($2 = 1 OR s.compact_after_ms IS NOT NULL \
                         OR s.max_log_bytes IS NOT NULL) \
                         AND NOT EXISTS (SELECT 1 FROM retired_sessions r \
                         WHERE r.id = {S_ID_TEXT}) \
                         ORDER BY s.head_seq - s.compacted_through DESC LIMIT $3"
                    ))
                    .bind(KEEP_TAIL as i64)
                    .bind(i64::from(server_compacts))
                    .bind(i64::from(limit))
                    .fetch_all(self.reads())
                    .await
                    .map_err(db_error)?;
                    rows.iter()
                        .map(|r| {
                            Ok(Candidate {
                                session: stored_session(
                                    &r.try_get::<String, _>("id").map_err(db_error)?,
                                )?,
                                policy: policy_row(r)?,
                            })
                        })
                        .collect()
                }

                async fn compact_session(
                    &self,
                    session: SessionId,
                    policy: Policy,
                    now: i64,
                    max_entries: u32,
                ) -> StoreResult<Option<CompactStep>> {
                    let sid = session.to_string();
                    let budget = i64::from(max_entries.max(1));
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    if !$store::lock_retention(&mut tx).await? {
                        return Ok(None);
                    }
                    let row = sqlx::query(&format!(
                        "SELECT head_seq, compacted_through, compacted_entries, compacted_bytes, \
                         sized_through, sized_bytes FROM sessions WHERE {ID_IS}"
                    ))
                    .bind(&sid)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(db_error)?
                    .ok_or(StoreError::NotFound)?;
                    let get = |c: &str| -> StoreResult<i64> { row.try_get(c).map_err(db_error) };
                    let head = get("head_seq")?;
                    let mut compaction = Compaction {
                        through: Seq(get("compacted_through")?.max(0) as u64),
                        entries: get("compacted_entries")?.max(0) as u64,
                        bytes: get("compacted_bytes")?.max(0) as u64,
                    };
                    let mut sized_through = get("sized_through")?;
                    let mut sized_bytes = get("sized_bytes")?;
                    let snapshot: Option<i64> = sqlx::query_scalar(&format!(
                        "SELECT head_seq FROM state_snapshots WHERE {ROWS_OF}"
                    ))
                    .bind(&sid)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    // Never past the fold's snapshot, never into the newest entries.
                    let upto = (head - KEEP_TAIL as i64).min(snapshot.unwrap_or(0));
                    // Count what the log holds, forward from where the count stopped.
                    let mut sized_all = true;
                    if policy.max_log_bytes.is_some() && sized_through < head {
                        let sized = sqlx::query(&format!(
                            "SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) AS bytes, \
                             CAST(COUNT(*) AS BIGINT) AS n, CAST(MAX(seq) AS BIGINT) AS last \
                             FROM (SELECT seq, octet_length(payload) AS size FROM entries \
                             WHERE {ROWS_OF} AND seq > $2 ORDER BY seq LIMIT $3) AS t"
                        ))
                        .bind(&sid)
                        .bind(sized_through)
                        .bind(budget)
                        .fetch_one(&mut *tx)
                        .await
                        .map_err(db_error)?;
                        let n: i64 = sized.try_get("n").map_err(db_error)?;
                        if n > 0 {
                            sized_bytes += sized.try_get::<i64, _>("bytes").map_err(db_error)?;
                            sized_through = sized
                                .try_get::<Option<i64>, _>("last")
                                .map_err(db_error)?
                                .unwrap_or(sized_through);
                        }
                        sized_all = n < budget;
                    }
                    let mut excess = match policy.max_log_bytes {
                        Some(cap) => sized_bytes.saturating_sub(i64::try_from(cap).unwrap_or(i64::MAX)),
                        None => 0,
                    };
                    let cutoff = policy.compact_after_ms.map(|ms| now.saturating_sub(ms));
                    let from = seq_bind(compaction.through);
                    let rows = if upto > from {
                        sqlx::query(&format!(
                            "SELECT seq, ts, kind, CAST(octet_length(payload) AS BIGINT) AS size \
                             FROM entries WHERE {ROWS_OF} AND seq > $2 AND seq <= $3 \
                             ORDER BY seq LIMIT $4"
                        ))
                        .bind(&sid)
                        .bind(from)
                        .bind(upto)
                        .bind(budget)
                        .fetch_all(&mut *tx)
                        .await
                        .map_err(db_error)?
                    } else {
                        Vec::new()
                    };
                    let mut finished = (rows.len() as i64) < budget;
                    let (mut through, mut deleted, mut bytes, mut sized_freed) = (from, 0u64, 0i64, 0i64);
                    for r in &rows {
                        let seq: i64 = r.try_get("seq").map_err(db_error)?;
                        let ts: i64 = r.try_get("ts").map_err(db_error)?;
                        let due = excess > 0 || cutoff.is_some_and(|c| ts < c);
                        if !due {
                            finished = true;
                            break;
                        }
                        let kind: String = r.try_get("kind").map_err(db_error)?;
                        if COMPACTED_KINDS.contains(&kind.as_str()) {
                            let size: i64 = r.try_get("size").map_err(db_error)?;
                            deleted += 1;
                            bytes += size;
                            excess -= size;
                            if seq <= sized_through {
                                sized_freed += size;
                            }
                        }
                        through = seq;
                    }
                    // While the count is behind, the cap's excess is not known in full.
                    finished = finished && (sized_all || policy.max_log_bytes.is_none());
                    if through == from && sized_through == get("sized_through")? {
                        return Ok(Some(CompactStep {
                            compaction,
                            entries_deleted: 0,
                            bytes_deleted: 0,
                            finished: true,
                        }));
                    }
                    let removed = sqlx::query(&format!(
                        "DELETE FROM entries WHERE {ROWS_OF} AND seq > $2 AND seq <= $3 \
                         AND kind IN ($4, $5)"
                    ))
                    .bind(&sid)
                    .bind(from)
                    .bind(through)
                    .bind(COMPACTED_KINDS[0])
                    .bind(COMPACTED_KINDS[1])
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?
                    .rows_affected();
                    debug_assert_eq!(removed, deleted);
                    compaction.through = Seq(through as u64);
                    compaction.entries += deleted;
                    compaction.bytes += bytes.max(0) as u64;
                    sqlx::query(&format!(
                        "UPDATE sessions SET compacted_through = $2, compacted_entries = $3, \
                         compacted_bytes = $4, sized_through = $5, sized_bytes = $6 WHERE {ID_IS}"
                    ))
                    .bind(&sid)
                    .bind(through)
                    .bind(compaction.entries as i64)
                    .bind(compaction.bytes as i64)
                    .bind(sized_through)
                    .bind((sized_bytes - sized_freed).max(0))
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    tx.commit().await.map_err(db_error)?;
                    Ok(Some(CompactStep {
                        compaction,
                        entries_deleted: deleted,
                        bytes_deleted: bytes.max(0) as u64,
                        finished,
                    }))
                }

                async fn session_policy(
                    &self,
                    session: SessionId,
                ) -> StoreResult<(Policy, Compaction)> {
                    let row = sqlx::query(&format!(
                        "SELECT keep_ended_ms, compact_after_ms, max_log_bytes, \
                         compacted_through, compacted_entries, compacted_bytes \
                         FROM sessions WHERE {ID_IS}"
                    ))
                    .bind(session.to_string())
                    .fetch_optional(self.reads())
                    .await
                    .map_err(db_error)?
                    .ok_or(StoreError::NotFound)?;
                    let get = |c: &str| -> StoreResult<i64> { row.try_get(c).map_err(db_error) };
                    Ok((
                        policy_row(&row)?,
                        Compaction {
                            through: Seq(get("compacted_through")?.max(0) as u64),
                            entries: get("compacted_entries")?.max(0) as u64,
                            bytes: get("compacted_bytes")?.max(0) as u64,
                        },
                    ))
                }

                async fn set_session_policy(
                    &self,
                    session: SessionId,
                    policy: Policy,
                ) -> StoreResult<()> {
                    let done = sqlx::query(&format!(
                        "UPDATE sessions SET keep_ended_ms = $2, compact_after_ms = $3, \
                         max_log_bytes = $4 WHERE {ID_IS}"
                    ))
                    .bind(session.to_string())
                    .bind(policy.keep_ended_ms)
                    .bind(policy.compact_after_ms)
                    .bind(policy.max_log_bytes.map(|b| i64::try_from(b).unwrap_or(i64::MAX)))
                    .execute(self.writes())
                    .await
                    .map_err(db_error)?;
                    if done.rows_affected() == 0 {
                        return Err(StoreError::NotFound);
                    }
                    Ok(())
                }
            }
        }
    };
}

pub(crate) use retention_store;
