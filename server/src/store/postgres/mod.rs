//! The Postgres store: any number of `moord` nodes on one database.
//!
//! Seqs are allocated inside the appending transaction from `sessions.head_seq`, with the session
//! row locked (`SELECT … FOR UPDATE`), so appends to one session from several nodes serialise in
//! the database and seq order is commit order. One append transaction may serve several sessions
//! (`group.rs`); it announces each session's range with `NOTIFY` (delivered at commit);
//! `cluster.rs` holds the listening side and bridge claims.

mod cluster;
mod group;
mod lookup;
mod rows;

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use moor_protocol::bridge::AgentInfo;
use moor_protocol::{kinds, now_ms, Entry, ProducerId, Seq, SessionId};
use sqlx::migrate::MigrateDatabase;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, Row, Transaction};
use uuid::Uuid;

use self::rows::{entry_row, session_row};
use super::access::{access_store, stored_role, AccessDialect};
use super::checkpoint::{checkpoint_store, CheckpointDialect};
use super::errors::db_error;
use super::lease::lease_store;
use super::machines::machine_store;
use super::notify::notify_store;
use super::retention::{retention_store, RetentionDialect};
use super::{
    redact_url, seq_bind, Appended, GroupPart, LogStore, Range, Role, SessionRow, StoreError,
    StoreResult, ENTRY_COLS, INPUTS_AFTER_SQL, MAX_LISTED_AGENT_BYTES,
};

/// Connections per node for appends and reads (the listen connection is separate).
const POOL_SIZE: u32 = 8;
/// How long a query waits for a free (or new) connection before failing.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// Advisory lock key serialising first-administrator setups across nodes.
const FIRST_ADMIN_LOCK: i64 = 0x6d6f_6f72_0001;
/// The class of the advisory locks that serialise offers to one user name (the two-key lock
/// space, keyed by this and the name's hash).
const OFFERS_TO_LOCK: i32 = 0x6d6f_6f01;
/// Advisory lock key held by the node running a retention batch.
const RETENTION_LOCK: i64 = 0x6d6f_6f72_0002;
/// Channel announcing appended ranges: `"<session> <first> <last> <node>"`.
pub(crate) const ENTRIES_CHANNEL: &str = "moor_entries";
/// Channel announcing bridge claims: `"<session> <epoch> <node>"`.
pub(crate) const BRIDGES_CHANNEL: &str = "moor_bridges";
/// Channel announcing revocations: `"user <name> <node>"`, `"family <family> <node>"` or
/// `"member <session> <principal> <node>"`.
pub(crate) const REVOCATIONS_CHANNEL: &str = "moor_revocations";

const SESSION_COLS: &str = "id::text AS id, name, created_at, head_seq, last_ts, ended_at, agent";
/// Selects the entries of the session whose id is in `$1`.
const SESSION_ENTRIES: &str = "session_id = $1::uuid";
/// Leaves out the deleted sessions (alias `s`) whose rows are still being deleted.
const NOT_RETIRED: &str = "NOT EXISTS (SELECT 1 FROM retired_sessions r WHERE r.id = s.id::text)";

/// Postgres implementation of [`LogStore`], [`AccessStore`](super::AccessStore),
/// [`CheckpointStore`](super::CheckpointStore) and [`Cluster`](super::Cluster).
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    /// A pool of one, for the `LISTEN` connection (its own `application_name`).
    listen: PgPool,
    node: Arc<str>,
    /// Append transactions committed (see [`LogStore::append_transactions`]).
    append_txs: Arc<AtomicU64>,
    /// Whether a notice feed's `LISTEN` connection is up (see [`Cluster::listening`]).
    listening: Arc<std::sync::atomic::AtomicBool>,
}

impl PgStore {
    /// Connects to the database at `url` (creating it if missing) as node `node_id`, and
    /// migrates it. Several nodes may do this at once: migrations take an advisory lock.
    pub async fn connect(url: &str, node_id: &str) -> anyhow::Result<Self> {
        let shown = redact_url(url);
        let opts = PgConnectOptions::from_str(url)
            .with_context(|| format!("parse database url {shown:?}"))?;
        if !Postgres::database_exists(url)
            .await
            .with_context(|| format!("reach postgres at {shown}"))?
        {
            // Another node may create it at the same moment; only a missing database is an error.
            if let Err(e) = Postgres::create_database(url).await {
                if !Postgres::database_exists(url).await.unwrap_or(false) {
                    return Err(e).with_context(|| format!("create database {shown}"));
                }
            }
        }
        let pool = PgPoolOptions::new()
            .max_connections(POOL_SIZE)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(opts.clone().application_name(&app_name("moord", node_id)))
            .await
            .with_context(|| format!("connect to postgres at {shown}"))?;
        sqlx::migrate!("../migrations/postgres")
            .run(&pool)
            .await
            .context("run postgres migrations")?;
        let listen = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .max_lifetime(None)
            .idle_timeout(None)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(opts.application_name(&app_name("moord-listen", node_id)));
        Ok(Self {
            pool,
            listen,
            node: node_id.into(),
            append_txs: Arc::default(),
            listening: Arc::default(),
        })
    }

    /// The connection pool, for tools working below the store's roles (`migrate-store`).
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Where writes go.
    fn writes(&self) -> &PgPool {
        &self.pool
    }

    /// Where reads go (the same pool: every node reads its own and the others' commits).
    fn reads(&self) -> &PgPool {
        &self.pool
    }

    /// Serialises first-administrator setups on every node: under READ COMMITTED two nodes'
    /// `NOT EXISTS` could both pass, so a transaction-scoped advisory lock makes the first
    /// setup the only one.
    async fn lock_first_admin(tx: &mut Transaction<'_, Postgres>) -> StoreResult<()> {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(FIRST_ADMIN_LOCK)
            .execute(&mut **tx)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// Serialises offers to one user name on every node until commit, so the cap on offers
    /// pending to a name holds (a transaction-scoped advisory lock in its own key space).
    async fn lock_offers_to(tx: &mut Transaction<'_, Postgres>, name: &str) -> StoreResult<()> {
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
            .bind(OFFERS_TO_LOCK)
            .bind(name)
            .execute(&mut **tx)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// Takes the retention lock until commit if no other node holds it; false when one does
    /// (that node is running a batch).
    async fn lock_retention(tx: &mut Transaction<'_, Postgres>) -> StoreResult<bool> {
        sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
            .bind(RETENTION_LOCK)
            .fetch_one(&mut **tx)
            .await
            .map_err(db_error)
    }

    /// Autovacuum makes deleted rows' space reusable; nothing to ask for.
    async fn vacuum_pages(&self, _pages: u32) -> StoreResult<()> {
        Ok(())
    }

    /// Locks the session's row until commit, so claims of one session serialise on any node.
    async fn lock_session(tx: &mut Transaction<'_, Postgres>, sid: &str) -> StoreResult<()> {
        sqlx::query("SELECT 1 FROM sessions WHERE id = $1::uuid FOR UPDATE")
            .bind(sid)
            .fetch_optional(&mut **tx)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    async fn find_session_by(&self, key: &str) -> StoreResult<SessionRow> {
        let row = sqlx::query(&format!(
            "SELECT {SESSION_COLS} FROM sessions s WHERE (name = $1 OR id = $2::uuid) \
             AND {NOT_RETIRED}"
        ))
        .bind(key)
        .bind(uuid_text(key))
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?
        .ok_or(StoreError::NotFound)?;
        session_row(&row)
    }
}

impl AccessDialect for PgStore {
    const TOKEN_ROW_LOCK: &'static str = " FOR UPDATE OF t";
    const OWNED_LOG_BYTES: &'static str =
        "SELECT CAST(COALESCE(SUM(octet_length(e.payload)), 0) AS BIGINT) \
         FROM session_members m JOIN entries e ON e.session_id = CAST(m.session_id AS UUID) \
         WHERE m.principal = $1 AND m.role = $2";
}

impl RetentionDialect for PgStore {
    const ROWS_OF: &'static str = SESSION_ENTRIES;
    const ID_IS: &'static str = "id = $1::uuid";
    const S_ID_TEXT: &'static str = "s.id::text";
}

retention_store!(PgStore, sqlx::Postgres);
access_store!(PgStore, sqlx::Postgres);
lease_store!(PgStore, sqlx::Postgres);
notify_store!(PgStore, sqlx::Postgres, " FOR UPDATE SKIP LOCKED");
machine_store!(PgStore, sqlx::Postgres);

impl CheckpointDialect for PgStore {
    const SAVE_CHECKPOINT: &'static str =
        "INSERT INTO checkpoints (session_id, id, created_at, summary, manifest) \
         SELECT id, $1, $2, $3, $4 FROM sessions WHERE id = $5::uuid \
         ON CONFLICT (session_id, id) DO NOTHING";
    const SAVE_BLOBS: &'static str =
        "INSERT INTO checkpoint_blobs (sha256, session_id, checkpoint_id) \
         SELECT DISTINCT j.value, $2::uuid, $3 FROM jsonb_array_elements_text($1::jsonb) j \
         ON CONFLICT DO NOTHING";
    const CHECKPOINT: &'static str =
        "SELECT id, session_id::text AS session, created_at, summary, manifest \
         FROM checkpoints WHERE session_id = $1::uuid AND id = $2";
    const CHECKPOINT_SESSIONS: &'static str =
        "SELECT session_id::text AS id FROM checkpoints WHERE id = $1 ORDER BY session_id";
    const LIST_CHECKPOINTS: &'static str =
        "SELECT id, session_id::text AS session, created_at, summary FROM checkpoints \
         WHERE session_id = $1::uuid ORDER BY created_at DESC, id DESC";
    const BLOB_SESSIONS: &'static str =
        "SELECT DISTINCT session_id::text AS id FROM checkpoint_blobs WHERE sha256 = $1";
    const BLOBS_KNOWN_TO: &'static str =
        "SELECT DISTINCT j.value AS sha256 FROM jsonb_array_elements_text($1::jsonb) j WHERE \
         EXISTS (SELECT 1 FROM blob_uploads u WHERE u.sha256 = j.value AND u.uploader = $2) \
         OR EXISTS (SELECT 1 FROM checkpoint_blobs b \
             JOIN session_members m ON m.session_id = b.session_id::text \
             WHERE b.sha256 = j.value AND m.principal = $2)";
}

checkpoint_store!(PgStore, sqlx::Postgres);

/// `application_name` of a node's connections: `<role> <node>`, within Postgres' 63 bytes.
pub(crate) fn app_name(role: &str, node: &str) -> String {
    let mut name = format!("{role} {node}");
    while name.len() > 63 {
        name.pop();
    }
    name
}

/// `key` as canonical UUID text when it is one (for `$n::uuid` binds), else `None`.
fn uuid_text(key: &str) -> Option<String> {
    Uuid::parse_str(key).ok().map(|u| u.to_string())
}

#[async_trait]
impl LogStore for PgStore {
    async fn open_session(&self, key: &str, agent: Option<&AgentInfo>) -> StoreResult<SessionRow> {
        let agent_json = agent
            .map(serde_json::to_string)
            .transpose()
            .context("encode agent")?;
        let id = Uuid::parse_str(key).unwrap_or_else(|_| Uuid::new_v4());
        // Insert-if-absent then read: safe against a concurrent creator on any node.
        sqlx::query(
            "INSERT INTO sessions (id, name, created_at) VALUES ($1::uuid, $2, $3) \
             ON CONFLICT DO NOTHING",
        )
        .bind(id.to_string())
        .bind(key)
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .map_err(db_error)?;
        if let Some(agent_json) = agent_json {
            sqlx::query("UPDATE sessions SET agent = $1 WHERE name = $2 OR id = $3::uuid")
                .bind(agent_json)
                .bind(key)
                .bind(uuid_text(key))
                .execute(&self.pool)
                .await
                .map_err(db_error)?;
        }
        self.find_session_by(key).await
    }

    async fn find_session(&self, key: &str) -> StoreResult<SessionRow> {
        self.find_session_by(key).await
    }

    async fn list_sessions(
        &self,
        member: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<(SessionRow, Role)>> {
        let cols = format!(
            "s.id::text AS id, s.name, s.created_at, s.head_seq, s.last_ts, s.ended_at, \
             CASE WHEN octet_length(s.agent) <= {MAX_LISTED_AGENT_BYTES} THEN s.agent END AS agent"
        );
        let order = format!("AND {NOT_RETIRED} ORDER BY COALESCE(s.last_ts, s.created_at) DESC");
        let rows = match member {
            None => {
                sqlx::query(&format!(
                    "SELECT {cols}, 'owner' AS role FROM sessions s WHERE TRUE {order} LIMIT $1"
                ))
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await
            }
            Some(principal) => {
                sqlx::query(&format!(
                    "SELECT {cols}, m.role FROM session_members m \
                     JOIN sessions s ON s.id = m.session_id::uuid WHERE m.principal = $1 \
                     {order} LIMIT $2"
                ))
                .bind(principal)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
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
        let applied = super::applied_migration(&self.pool).await?;
        Ok((
            applied,
            super::newest_migration(&sqlx::migrate!("../migrations/postgres")),
        ))
    }

    async fn read(&self, session: SessionId, range: Range, limit: u32) -> StoreResult<Vec<Entry>> {
        let rows = sqlx::query(&format!(
            "SELECT {ENTRY_COLS} FROM entries WHERE {SESSION_ENTRIES} AND {}",
            range.sql()
        ))
        .bind(session.to_string())
        .bind(seq_bind(range.bound()))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        let entries = rows
            .iter()
            .map(entry_row)
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(range.ascending(entries))
    }

    async fn entry_sizes(
        &self,
        session: SessionId,
        range: Range,
        limit: u32,
    ) -> StoreResult<Vec<u64>> {
        let (op, order) = match range {
            Range::After(_) => (">", "ASC"),
            Range::Before(_) => ("<", "DESC"),
        };
        let (Range::After(at) | Range::Before(at)) = range;
        let sizes: Vec<i64> = sqlx::query_scalar(&format!(
            "SELECT octet_length(payload)::bigint FROM entries \
             WHERE session_id = $1::uuid AND seq {op} $2 ORDER BY seq {order} LIMIT $3"
        ))
        .bind(session.to_string())
        .bind(seq_bind(at))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(sizes.into_iter().map(|n| n.max(0) as u64).collect())
    }

    async fn producer_mark(&self, session: SessionId, producer: ProducerId) -> StoreResult<u64> {
        let mut conn = self.pool.acquire().await.map_err(db_error)?;
        lookup::producer_mark(&mut conn, &session.to_string(), producer).await
    }

    async fn inputs_after(
        &self,
        session: SessionId,
        after: Seq,
        limit: u32,
    ) -> StoreResult<Vec<Entry>> {
        let rows = sqlx::query(&format!(
            "SELECT {ENTRY_COLS} FROM entries WHERE {SESSION_ENTRIES} AND {INPUTS_AFTER_SQL}"
        ))
        .bind(session.to_string())
        .bind(seq_bind(after))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter().map(entry_row).collect()
    }

    async fn unsettled_inputs(&self, session: SessionId, upto: Seq) -> StoreResult<Vec<Seq>> {
        let seqs: Vec<i64> = sqlx::query_scalar(
            "SELECT e.seq FROM entries e WHERE e.session_id = $1::uuid \
             AND e.client_msg_id IS NOT NULL AND e.seq <= $2 AND NOT EXISTS \
             (SELECT 1 FROM entries r WHERE r.session_id = e.session_id \
             AND r.kind IN ($3, $4, $5) AND r.ref_seq = e.seq) ORDER BY e.seq",
        )
        .bind(session.to_string())
        .bind(seq_bind(upto))
        .bind(kinds::INPUT_APPLIED)
        .bind(kinds::INPUT_FAILED)
        .bind(kinds::INPUT_UNCERTAIN)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(seqs.into_iter().map(|s| Seq(s as u64)).collect())
    }

    async fn save_snapshot(&self, session: SessionId, head: Seq, state: &str) -> StoreResult<()> {
        // Followers on several nodes may save at once: the newest snapshot wins.
        sqlx::query(
            "INSERT INTO state_snapshots (session_id, head_seq, state) VALUES ($1::uuid, $2, $3) \
             ON CONFLICT (session_id) DO UPDATE SET head_seq = excluded.head_seq, \
             state = excluded.state WHERE excluded.head_seq > state_snapshots.head_seq",
        )
        .bind(session.to_string())
        .bind(seq_bind(head))
        .bind(state)
        .execute(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(())
    }

    async fn latest_snapshot(&self, session: SessionId) -> StoreResult<Option<(Seq, String)>> {
        let row =
            sqlx::query("SELECT head_seq, state FROM state_snapshots WHERE session_id = $1::uuid")
                .bind(session.to_string())
                .fetch_optional(&self.pool)
                .await
                .map_err(db_error)?;
        row.map(|r| {
            let head: i64 = r.try_get("head_seq").map_err(db_error)?;
            Ok((Seq(head as u64), r.try_get("state").map_err(db_error)?))
        })
        .transpose()
    }

    async fn end_session(&self, session: SessionId, at: i64) -> StoreResult<()> {
        sqlx::query("UPDATE sessions SET ended_at = COALESCE(ended_at, $1) WHERE id = $2::uuid")
            .bind(at)
            .bind(session.to_string())
            .execute(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(())
    }
}
