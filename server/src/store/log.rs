//! [`LogStore`](super::LogStore) reads and session rows, written once for both engines.
//!
//! Both drivers take `$n` placeholders and most of the SQL is the same; what differs is how a
//! table names a session (SQLite by the session's integer `pk`, Postgres by its uuid) and how
//! a session is found by its key. Those are the store's [`LogDialect`] items; everything else
//! (the statements, the binds, reading the rows back) is here once. Appending is not: each
//! engine allocates seqs its own way (`sqlite/group.rs`, `postgres/group.rs`).

use sqlx::migrate::Migrator;

/// What [`log_store!`] needs from a store besides its pools: the SQL and binds that differ
/// between engines.
pub(crate) trait LogDialect {
    /// Selects one session's rows in `entries`, `producers` and `state_snapshots` by its id
    /// in `$1`.
    const ROWS_OF: &'static str;
    /// `sessions.id` (alias `s`) as text.
    const S_ID_TEXT: &'static str;
    /// What follows a text value compared with `sessions.id`: `::uuid` where ids are uuids,
    /// nothing where they are text.
    const AS_ID: &'static str;
    /// Stores the state `$3` of session `$1` at head `$2`, unless a later one is stored.
    const SAVE_SNAPSHOT: &'static str;

    /// What a session's key is compared with `sessions.id` as (a name matches `name`).
    fn key_as_id(key: &str) -> Option<String>;

    /// The store's migrations (their newest version is the one the code expects).
    fn migrations() -> &'static Migrator;
}

/// Implements every [`LogStore`](crate::store::LogStore) method but appending for `$store`, a
/// store over `$db` with inherent `writes()` and `reads()` pools, an `append_group_tx(group)`,
/// an `append_txs` counter and [`LogDialect`].
macro_rules! log_store {
    ($store:ident, $db:ty) => {
        mod log_store {
            use std::sync::atomic::Ordering;

            use anyhow::Context as _;
            use moor_protocol::bridge::AgentInfo;
            use moor_protocol::{kinds, now_ms, Entry, ProducerId, Seq, SessionId};
            use sqlx::Row;
            use uuid::Uuid;

            use super::$store;
            use $crate::store::access::{stored_role, stored_session};
            use $crate::store::errors::db_error;
            use $crate::store::log::LogDialect;
            use $crate::store::packed::{unpack, PACKED_ENTRY};
            use $crate::store::{
                applied_migration, newest_migration, seq_bind, Appended, Compaction, GroupPart,
                LogStore, PageFit, PageLimit, Range, RawEntry, Role, SessionRow, StoreError,
                StoreResult, ENTRY_COLS, ENTRY_OVERHEAD_BYTES, INPUTS_AFTER_SQL,
                MAX_LISTED_AGENT_BYTES,
            };

            type DbRow = <$db as sqlx::Database>::Row;
            type Connection = <$db as sqlx::Database>::Connection;

            const ROWS_OF: &str = <$store as LogDialect>::ROWS_OF;
            const S_ID_TEXT: &str = <$store as LogDialect>::S_ID_TEXT;
            const AS_ID: &str = <$store as LogDialect>::AS_ID;

            /// Leaves out the deleted sessions (alias `s`) whose rows are still being deleted.
            fn not_retired() -> String {
                format!("NOT EXISTS (SELECT 1 FROM retired_sessions r WHERE r.id = {S_ID_TEXT})")
            }

            #[async_trait::async_trait]
            impl LogStore for $store {
                async fn open_session(
                    &self,
                    key: &str,
                    agent: Option<&AgentInfo>,
                ) -> StoreResult<SessionRow> {
                    let agent_json = agent
                        .map(serde_json::to_string)
                        .transpose()
                        .context("encode agent")?;
                    let id = Uuid::parse_str(key).unwrap_or_else(|_| Uuid::new_v4());
                    // Insert-if-absent then read: safe against a concurrent creator of the
                    // same name on any node. One connection serves all three statements, so a
                    // handshake waits for one (not three) behind the writes in flight.
                    let mut conn = self.writes().acquire().await.map_err(db_error)?;
                    sqlx::query(&format!(
                        "INSERT INTO sessions (id, name, created_at) VALUES ($1{AS_ID}, $2, $3) \
                         ON CONFLICT DO NOTHING"
                    ))
                    .bind(id.to_string())
                    .bind(key)
                    .bind(now_ms())
                    .execute(&mut *conn)
                    .await
                    .map_err(db_error)?;
                    if let Some(agent_json) = agent_json {
                        sqlx::query(&format!(
                            "UPDATE sessions SET agent = $1 WHERE name = $2 OR id = $3{AS_ID}"
                        ))
                        .bind(agent_json)
                        .bind(key)
                        .bind(Self::key_as_id(key))
                        .execute(&mut *conn)
                        .await
                        .map_err(db_error)?;
                    }
                    find_session_on(&mut conn, key).await
                }

                async fn find_session(&self, key: &str) -> StoreResult<SessionRow> {
                    let mut conn = self.reads().acquire().await.map_err(db_error)?;
                    find_session_on(&mut conn, key).await
                }

                async fn list_sessions(
                    &self,
                    member: Option<&str>,
                    limit: u32,
                ) -> StoreResult<Vec<(SessionRow, Role)>> {
                    let cols = format!(
                        "{S_ID_TEXT} AS id, s.name, s.created_at, s.head_seq, s.last_ts, \
                         s.ended_at, CASE WHEN octet_length(s.agent) <= {MAX_LISTED_AGENT_BYTES} \
                         THEN s.agent END AS agent"
                    );
                    let order = format!(
                        "AND {} ORDER BY COALESCE(s.last_ts, s.created_at) DESC",
                        not_retired()
                    );
                    let rows = match member {
                        None => {
                            sqlx::query(&format!(
                                "SELECT {cols}, 'owner' AS role FROM sessions s WHERE 1 = 1 \
                                 {order} LIMIT $1"
                            ))
                            .bind(i64::from(limit))
                            .fetch_all(self.reads())
                            .await
                        }
                        Some(principal) => {
                            sqlx::query(&format!(
                                "SELECT {cols}, m.role FROM session_members m \
                                 JOIN sessions s ON s.id = m.session_id{AS_ID} \
                                 WHERE m.principal = $1 {order} LIMIT $2"
                            ))
                            .bind(principal)
                            .bind(i64::from(limit))
                            .fetch_all(self.reads())
                            .await
                        }
                    }
                    .map_err(db_error)?;
                    rows.iter()
                        .map(|r| {
                            let role: String = r.try_get("role").map_err(db_error)?;
                            Ok((session_row(r)?, stored_role(&role)?))
                        })
                        .collect()
                }

                async fn append_group(
                    &self,
                    group: Vec<GroupPart>,
                ) -> StoreResult<Vec<StoreResult<Vec<Appended>>>> {
                    self.append_group_tx(group).await
                }

                fn append_transactions(&self) -> u64 {
                    self.append_txs.load(Ordering::Relaxed)
                }

                async fn schema_versions(&self) -> StoreResult<(i64, i64)> {
                    let applied = applied_migration(self.reads()).await?;
                    Ok((applied, newest_migration(Self::migrations())))
                }

                async fn read_raw(
                    &self,
                    session: SessionId,
                    range: Range,
                    limit: u32,
                ) -> StoreResult<(Vec<RawEntry>, Compaction)> {
                    // One row for the whole page ([`packed`](crate::store::packed)), and the
                    // compaction mark as of the same statement.
                    let row = sqlx::query(&format!(
                        "SELECT (SELECT string_agg({PACKED_ENTRY}, '') FROM \
                         (SELECT {ENTRY_COLS} FROM entries WHERE {ROWS_OF} AND {}) page) AS packed, \
                         {COMPACTION_COLS} FROM sessions WHERE id = $1{AS_ID}",
                        range.sql()
                    ))
                    .bind(session.to_string())
                    .bind(seq_bind(range.bound()))
                    .bind(i64::from(limit))
                    .fetch_optional(self.reads())
                    .await
                    .map_err(db_error)?;
                    let Some(row) = row else {
                        return Ok((Vec::new(), Compaction::default()));
                    };
                    let packed: Option<String> = row.try_get("packed").map_err(db_error)?;
                    Ok((unpack(packed.unwrap_or_default())?, compaction_row(&row)?))
                }

                async fn compaction(&self, session: SessionId) -> StoreResult<Compaction> {
                    let row = sqlx::query(&format!(
                        "SELECT {COMPACTION_COLS} FROM sessions WHERE id = $1{AS_ID}"
                    ))
                    .bind(session.to_string())
                    .fetch_optional(self.reads())
                    .await
                    .map_err(db_error)?;
                    row.map_or(Ok(Compaction::default()), |row| compaction_row(&row))
                }

                async fn fit_page(
                    &self,
                    session: SessionId,
                    range: Range,
                    limit: PageLimit,
                ) -> StoreResult<PageFit> {
                    // Each entry's size is read without its payload; the running sum walks the
                    // range in its order, and the page is the prefix that fits (at least one).
                    let order = match range {
                        Range::After(_) => "ASC",
                        Range::Before(_) => "DESC",
                    };
                    let row = sqlx::query(&format!(
                        "SELECT COUNT(*) AS seen, \
                         COALESCE(SUM(CASE WHEN n <= $4 AND (n = 1 OR used <= $5) \
                                      THEN 1 ELSE 0 END), 0) AS take, \
                         (SELECT compacted_through FROM sessions WHERE id = $1{AS_ID}) AS mark \
                         FROM (SELECT ROW_NUMBER() OVER w AS n, SUM(cost) OVER w AS used \
                               FROM (SELECT seq, CAST(octet_length(payload) AS BIGINT) + {} AS cost \
                                     FROM entries WHERE {ROWS_OF} AND {}) sized \
                               WINDOW w AS (ORDER BY seq {order} ROWS UNBOUNDED PRECEDING)) walked",
                        ENTRY_OVERHEAD_BYTES,
                        range.sql(),
                    ))
                    .bind(session.to_string())
                    .bind(seq_bind(range.bound()))
                    .bind(i64::from(limit.count.saturating_add(1)))
                    .bind(i64::from(limit.count))
                    .bind(i64::try_from(limit.bytes).unwrap_or(i64::MAX))
                    .fetch_one(self.reads())
                    .await
                    .map_err(db_error)?;
                    let seen: i64 = row.try_get("seen").map_err(db_error)?;
                    let take: i64 = row.try_get("take").map_err(db_error)?;
                    let mark: Option<i64> = row.try_get("mark").map_err(db_error)?;
                    Ok(PageFit {
                        take: take.max(0) as u32,
                        more: seen > take,
                        compacted_through: Seq(mark.unwrap_or(0).max(0) as u64),
                    })
                }

                async fn producer_mark(
                    &self,
                    session: SessionId,
                    producer: ProducerId,
                ) -> StoreResult<u64> {
                    let mark: Option<i64> = sqlx::query_scalar(&format!(
                        "SELECT last_seq FROM producers WHERE {ROWS_OF} \
                         AND producer_id = $2{AS_ID}"
                    ))
                    .bind(session.to_string())
                    .bind(producer.to_string())
                    .fetch_optional(self.reads())
                    .await
                    .map_err(db_error)?;
                    Ok(mark.unwrap_or(0) as u64)
                }

                async fn client_msg_seq(
                    &self,
                    session: SessionId,
                    id: &str,
                ) -> StoreResult<Option<Seq>> {
                    let seq: Option<i64> = sqlx::query_scalar(&format!(
                        "SELECT seq FROM entries WHERE {ROWS_OF} AND client_msg_id = $2"
                    ))
                    .bind(session.to_string())
                    .bind(id)
                    .fetch_optional(self.reads())
                    .await
                    .map_err(db_error)?;
                    Ok(seq.map(|s| Seq(s as u64)))
                }

                async fn inputs_after(
                    &self,
                    session: SessionId,
                    after: Seq,
                    limit: u32,
                ) -> StoreResult<Vec<Entry>> {
                    let which = (INPUTS_AFTER_SQL, after);
                    let rows = select_entries(self, ENTRY_COLS, session, which, limit).await?;
                    rows.iter().map(entry_row).collect()
                }

                async fn unsettled_inputs(
                    &self,
                    session: SessionId,
                    upto: Seq,
                ) -> StoreResult<Vec<Seq>> {
                    // From the writer: a receipt just appended is seen at once.
                    let seqs: Vec<i64> = sqlx::query_scalar(&format!(
                        "SELECT e.seq FROM entries e WHERE e.{ROWS_OF} \
                         AND e.client_msg_id IS NOT NULL AND e.seq <= $2 AND NOT EXISTS \
                         (SELECT 1 FROM entries r WHERE r.{ROWS_OF} \
                         AND r.kind IN ($3, $4, $5) AND r.ref_seq = e.seq) ORDER BY e.seq"
                    ))
                    .bind(session.to_string())
                    .bind(seq_bind(upto))
                    .bind(kinds::INPUT_APPLIED)
                    .bind(kinds::INPUT_FAILED)
                    .bind(kinds::INPUT_UNCERTAIN)
                    .fetch_all(self.writes())
                    .await
                    .map_err(db_error)?;
                    Ok(seqs.into_iter().map(|s| Seq(s as u64)).collect())
                }

                async fn save_snapshot(
                    &self,
                    session: SessionId,
                    head: Seq,
                    state: &str,
                ) -> StoreResult<()> {
                    sqlx::query(Self::SAVE_SNAPSHOT)
                        .bind(session.to_string())
                        .bind(seq_bind(head))
                        .bind(state)
                        .execute(self.writes())
                        .await
                        .map_err(db_error)?;
                    Ok(())
                }

                async fn latest_snapshot(
                    &self,
                    session: SessionId,
                ) -> StoreResult<Option<(Seq, String)>> {
                    let row = sqlx::query(&format!(
                        "SELECT head_seq, state FROM state_snapshots WHERE {ROWS_OF}"
                    ))
                    .bind(session.to_string())
                    .fetch_optional(self.reads())
                    .await
                    .map_err(db_error)?;
                    row.map(|r| {
                        let head: i64 = r.try_get("head_seq").map_err(db_error)?;
                        Ok((Seq(head as u64), r.try_get("state").map_err(db_error)?))
                    })
                    .transpose()
                }

                async fn end_session(&self, session: SessionId, at: i64) -> StoreResult<bool> {
                    let done = sqlx::query(&format!(
                        "UPDATE sessions SET ended_at = $1 \
                         WHERE id = $2{AS_ID} AND ended_at IS NULL"
                    ))
                    .bind(at)
                    .bind(session.to_string())
                    .execute(self.writes())
                    .await
                    .map_err(db_error)?;
                    Ok(done.rows_affected() == 1)
                }
            }

            /// Columns `cols` of `session`'s entries that `which` selects: the SQL after the
            /// session condition, written with its seq in `$2` and the limit in `$3` (as
            /// [`Range::sql`] and [`INPUTS_AFTER_SQL`] are), and that seq.
            async fn select_entries(
                store: &$store,
                cols: &str,
                session: SessionId,
                (rest, seq): (&str, Seq),
                limit: u32,
            ) -> StoreResult<Vec<DbRow>> {
                sqlx::query(&format!("SELECT {cols} FROM entries WHERE {ROWS_OF} AND {rest}"))
                    .bind(session.to_string())
                    .bind(seq_bind(seq))
                    .bind(i64::from(limit))
                    .fetch_all(store.reads())
                    .await
                    .map_err(db_error)
            }

            /// The session named or numbered `key`, read on `conn`.
            async fn find_session_on(conn: &mut Connection, key: &str) -> StoreResult<SessionRow> {
                let row = sqlx::query(&format!(
                    "SELECT {S_ID_TEXT} AS id, s.name, s.created_at, s.head_seq, s.last_ts, \
                     s.ended_at, s.agent FROM sessions s \
                     WHERE (s.name = $1 OR s.id = $2{AS_ID}) AND {}",
                    not_retired()
                ))
                .bind(key)
                .bind(<$store as LogDialect>::key_as_id(key))
                .fetch_optional(conn)
                .await
                .map_err(db_error)?
                .ok_or(StoreError::NotFound)?;
                session_row(&row)
            }

            fn session_row(row: &DbRow) -> StoreResult<SessionRow> {
                let agent: Option<String> = row.try_get("agent").map_err(db_error)?;
                let head_seq: i64 = row.try_get("head_seq").map_err(db_error)?;
                Ok(SessionRow {
                    id: stored_session(row.try_get("id").map_err(db_error)?)?,
                    name: row.try_get("name").map_err(db_error)?,
                    created_at: row.try_get("created_at").map_err(db_error)?,
                    head_seq: Seq(head_seq as u64),
                    last_ts: row.try_get("last_ts").map_err(db_error)?,
                    ended_at: row.try_get("ended_at").map_err(db_error)?,
                    agent: agent.and_then(|a| serde_json::from_str(&a).ok()),
                })
            }

            fn raw_row(row: &DbRow) -> StoreResult<RawEntry> {
                let seq: i64 = row.try_get("seq").map_err(db_error)?;
                let text = |c: &str| -> StoreResult<&str> { row.try_get(c).map_err(db_error) };
                Ok(RawEntry::new(
                    Seq(seq as u64),
                    row.try_get("ts").map_err(db_error)?,
                    text("kind")?,
                    text("author")?,
                    text("payload")?,
                ))
            }

            /// The columns of `sessions` that [`compaction_row`] reads.
            const COMPACTION_COLS: &str = "compacted_through, compacted_entries, compacted_bytes";

            fn compaction_row(row: &DbRow) -> StoreResult<Compaction> {
                let get = |c: &str| -> StoreResult<i64> { row.try_get(c).map_err(db_error) };
                Ok(Compaction {
                    through: Seq(get("compacted_through")?.max(0) as u64),
                    entries: get("compacted_entries")?.max(0) as u64,
                    bytes: get("compacted_bytes")?.max(0) as u64,
                })
            }

            fn entry_row(row: &DbRow) -> StoreResult<Entry> {
                raw_row(row)?.parse()
            }
        }
    };
}

pub(crate) use log_store;
