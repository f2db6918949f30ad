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
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlx::migrate::{MigrateDatabase, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use super::access::{access_store, AccessDialect};
use super::checkpoint::{checkpoint_store, CheckpointDialect};
use super::errors::db_error;
use super::lease::lease_store;
use super::log::{log_store, LogDialect};
use super::machines::machine_store;
use super::notify::notify_store;
use super::retention::{retention_store, RetentionDialect};
use super::{redact_url, StoreResult};

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

/// Selects the entries of the session whose id is in `$1`.
const SESSION_ENTRIES: &str = "session_id = $1::uuid";

/// Postgres implementation of [`LogStore`](super::LogStore), [`AccessStore`](super::AccessStore),
/// [`CheckpointStore`](super::CheckpointStore) and [`Cluster`](super::Cluster).
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    /// A pool of one, for the `LISTEN` connection (its own `application_name`).
    listen: PgPool,
    node: Arc<str>,
    /// Append transactions committed (see [`LogStore::append_transactions`](super::LogStore::append_transactions)).
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
        MIGRATIONS
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

/// The Postgres schema's migrations.
static MIGRATIONS: Migrator = sqlx::migrate!("../migrations/postgres");

impl LogDialect for PgStore {
    const ROWS_OF: &'static str = SESSION_ENTRIES;
    const S_ID_TEXT: &'static str = "s.id::text";
    const AS_ID: &'static str = "::uuid";
    /// Followers on several nodes may save at once: the newest snapshot wins.
    const SAVE_SNAPSHOT: &'static str =
        "INSERT INTO state_snapshots (session_id, head_seq, state) VALUES ($1::uuid, $2, $3) \
         ON CONFLICT (session_id) DO UPDATE SET head_seq = excluded.head_seq, \
         state = excluded.state WHERE excluded.head_seq > state_snapshots.head_seq";

    /// Ids are uuids: a key that is not one names no id.
    fn key_as_id(key: &str) -> Option<String> {
        uuid_text(key)
    }

    fn migrations() -> &'static Migrator {
        &MIGRATIONS
    }
}

log_store!(PgStore, sqlx::Postgres);

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
