//! The SQLite store: one file, WAL, `synchronous=FULL` so a commit is durable before it is
//! acknowledged. One writer connection (SQLite has one writer anyway, and a single connection
//! never meets `SQLITE_BUSY` from itself) and a small pool of readers.

use std::str::FromStr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteAutoVacuum, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Sqlite, SqlitePool};

use super::access::{access_store, AccessDialect};
use super::checkpoint::{checkpoint_store, CheckpointDialect};
use super::errors::{db_error, sqlite_writer_released};
use super::lease::lease_store;
use super::log::{log_store, LogDialect};
use super::machines::machine_store;
use super::notify::notify_store;
use super::retention::{retention_store, RetentionDialect};
use super::StoreResult;

mod group;

/// SQLite implementation of [`LogStore`](super::LogStore), [`AccessStore`](super::AccessStore) and
/// [`CheckpointStore`](super::CheckpointStore).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    readers: SqlitePool,
    /// Append transactions committed (see [`LogStore::append_transactions`](super::LogStore::append_transactions)).
    append_txs: Arc<AtomicU64>,
}

/// Writes a consistent copy of the SQLite database at `url` to the new file `dest` with
/// `VACUUM INTO`, on a connection of its own: it reads one snapshot (every transaction committed
/// before it began, nothing after) while other connections and processes keep writing.
pub async fn backup_into(url: &str, dest: &std::path::Path) -> anyhow::Result<()> {
    use sqlx::Connection;
    let opts = SqliteConnectOptions::from_str(url)
        .with_context(|| format!("parse database url {url:?}"))?
        .read_only(true)
        .busy_timeout(Duration::from_secs(30));
    let mut conn = sqlx::SqliteConnection::connect_with(&opts)
        .await
        .context("open the sqlite database")?;
    let dest = dest
        .to_str()
        .context("the backup path is not valid UTF-8")?
        .to_owned();
    sqlx::query("VACUUM INTO ?")
        .bind(dest)
        .execute(&mut conn)
        .await
        .context("VACUUM INTO the backup file")?;
    conn.close().await.context("close the sqlite database")?;
    Ok(())
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `url` and migrates it.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let opts = SqliteConnectOptions::from_str(url)
            .with_context(|| format!("parse database url {url:?}"))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true)
            // A larger page cache and memory-mapped reads keep the writer's B-tree pages in
            // memory instead of copying them in from the page cache on every insert.
            .pragma("cache_size", "-65536")
            .pragma("mmap_size", "268435456");
        let file = opts.get_filename();
        if !file.as_os_str().is_empty() && file != std::path::Path::new(":memory:") {
            crate::util::touch_private(file)
                .with_context(|| format!("create database file {}", file.display()))?;
        }
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .after_release(sqlite_writer_released)
            // Only takes effect on a new database (or after a VACUUM): lets retention give
            // deleted pages back with `PRAGMA incremental_vacuum`. Set by the writer only (a
            // read-only connection may not).
            //
            // `temp_store=memory`: a statement that writes many rows (a group's insert) keeps
            // the pages it changes in a statement journal, which SQLite moves to a temporary
            // file past 64 KiB: a file created, written and closed in every commit of more
            // than sixteen pages, about 8% of `moord`'s CPU with 1,000 quiet sessions. In
            // memory it is at most the pages one statement changes (a group is at most
            // `MAX_GROUP_ENTRIES` entries; retention and compaction delete in bounded batches).
            .connect_with(
                opts.clone()
                    .auto_vacuum(SqliteAutoVacuum::Incremental)
                    .pragma("temp_store", "memory"),
            )
            .await
            .context("open sqlite database")?;
        MIGRATIONS
            .run(&writer)
            .await
            .context("run sqlite migrations")?;
        // A reader's rows cross from SQLite's worker thread through a channel; one that holds a
        // whole page lets the worker step through the page without waiting for the reader, and
        // the reader take it in one wake-up (the default, 50 rows, made a page of 1,000 twenty
        // hand-offs each way).
        let readers = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts.read_only(true).row_buffer_size(READ_ROW_CHANNEL))
            .await
            .context("open sqlite read pool")?;
        Ok(Self {
            writer,
            readers,
            append_txs: Arc::default(),
        })
    }

    /// Where writes go: the one writer connection.
    fn writes(&self) -> &SqlitePool {
        &self.writer
    }

    /// Where reads go that need not see the writer's latest commit at once.
    fn reads(&self) -> &SqlitePool {
        &self.readers
    }

    /// Setups need no lock: the single writer runs one transaction at a time.
    async fn lock_first_admin(_tx: &mut sqlx::Transaction<'_, Sqlite>) -> StoreResult<()> {
        Ok(())
    }

    /// Claims need no lock: the single writer runs one transaction at a time.
    async fn lock_session(_tx: &mut sqlx::Transaction<'_, Sqlite>, _sid: &str) -> StoreResult<()> {
        Ok(())
    }

    /// Retention batches need no lock: the single writer runs one transaction at a time.
    async fn lock_retention(_tx: &mut sqlx::Transaction<'_, Sqlite>) -> StoreResult<bool> {
        Ok(true)
    }

    /// Returns up to `pages` free pages to the file system (a no-op unless the database was
    /// created with incremental auto-vacuum, see [`SqliteStore::connect`]).
    async fn vacuum_pages(&self, pages: u32) -> StoreResult<()> {
        sqlx::query(&format!("PRAGMA incremental_vacuum({pages})"))
            .execute(&self.writer)
            .await
            .map_err(db_error)?;
        // The file shrinks only when the WAL is copied back; a reader still on an older
        // snapshot leaves the rest for the next checkpoint.
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&self.writer)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// Offers need no lock: the single writer runs one transaction at a time.
    async fn lock_offers_to(
        _tx: &mut sqlx::Transaction<'_, Sqlite>,
        _name: &str,
    ) -> StoreResult<()> {
        Ok(())
    }
}

impl RetentionDialect for SqliteStore {
    const ROWS_OF: &'static str = SESSION_ENTRIES;
    const ID_IS: &'static str = "id = $1";
    const S_ID_TEXT: &'static str = "s.id";
}

retention_store!(SqliteStore, sqlx::Sqlite);

impl AccessDialect for SqliteStore {
    const TOKEN_ROW_LOCK: &'static str = "";
    const OWNED_LOG_BYTES: &'static str =
        "SELECT CAST(COALESCE(SUM(octet_length(e.payload)), 0) AS BIGINT) \
         FROM session_members m JOIN sessions s ON s.id = m.session_id \
         JOIN entries e ON e.session_pk = s.pk WHERE m.principal = $1 AND m.role = $2";
}

access_store!(SqliteStore, sqlx::Sqlite);
lease_store!(SqliteStore, sqlx::Sqlite);
notify_store!(SqliteStore, sqlx::Sqlite, "");
machine_store!(SqliteStore, sqlx::Sqlite);

impl CheckpointDialect for SqliteStore {
    const SAVE_CHECKPOINT: &'static str =
        "INSERT INTO checkpoints (session_pk, id, created_at, summary, manifest) \
         SELECT pk, $1, $2, $3, $4 FROM sessions WHERE id = $5 \
         ON CONFLICT (session_pk, id) DO NOTHING";
    const SAVE_BLOBS: &'static str =
        "INSERT INTO checkpoint_blobs (sha256, session_pk, checkpoint_id) \
         SELECT DISTINCT j.value, s.pk, $3 FROM json_each($1) j, sessions s WHERE s.id = $2 \
         ON CONFLICT DO NOTHING";
    const CHECKPOINT: &'static str =
        "SELECT c.id, s.id AS session, c.created_at, c.summary, c.manifest \
         FROM checkpoints c JOIN sessions s ON s.pk = c.session_pk WHERE s.id = $1 AND c.id = $2";
    const CHECKPOINT_SESSIONS: &'static str =
        "SELECT s.id FROM checkpoints c JOIN sessions s ON s.pk = c.session_pk \
         WHERE c.id = $1 ORDER BY s.id";
    const LIST_CHECKPOINTS: &'static str = "SELECT c.id, s.id AS session, c.created_at, c.summary \
         FROM checkpoints c JOIN sessions s ON s.pk = c.session_pk \
         WHERE s.id = $1 ORDER BY c.created_at DESC, c.id DESC";
    const BLOB_SESSIONS: &'static str = "SELECT DISTINCT s.id FROM checkpoint_blobs b \
         JOIN sessions s ON s.pk = b.session_pk WHERE b.sha256 = $1";
    const BLOBS_KNOWN_TO: &'static str =
        "SELECT DISTINCT j.value AS sha256 FROM json_each($1) j WHERE \
         EXISTS (SELECT 1 FROM blob_uploads u WHERE u.sha256 = j.value AND u.uploader = $2) \
         OR EXISTS (SELECT 1 FROM checkpoint_blobs b \
             JOIN sessions s ON s.pk = b.session_pk \
             JOIN session_members m ON m.session_id = s.id \
             WHERE b.sha256 = j.value AND m.principal = $2)";
}

checkpoint_store!(SqliteStore, sqlx::Sqlite);

/// Selects the entries of the session whose id is in `$1`.
/// Rows a read connection's channel holds: a replay page (at most 1,000 entries) and its
/// end-of-query message.
const READ_ROW_CHANNEL: usize = 1024;

const SESSION_ENTRIES: &str = "session_pk = (SELECT pk FROM sessions WHERE id = $1)";

/// The SQLite schema's migrations.
static MIGRATIONS: Migrator = sqlx::migrate!("../migrations/sqlite");

impl LogDialect for SqliteStore {
    const ROWS_OF: &'static str = SESSION_ENTRIES;
    const S_ID_TEXT: &'static str = "s.id";
    const AS_ID: &'static str = "";
    const SAVE_SNAPSHOT: &'static str = "INSERT INTO state_snapshots (session_pk, head_seq, state) \
         SELECT pk, $2, $3 FROM sessions WHERE id = $1 \
         ON CONFLICT (session_pk) DO UPDATE SET head_seq = excluded.head_seq, state = excluded.state \
         WHERE excluded.head_seq > state_snapshots.head_seq";

    /// Ids are stored as text: the key as it is.
    fn key_as_id(key: &str) -> Option<String> {
        Some(key.to_owned())
    }

    fn migrations() -> &'static Migrator {
        &MIGRATIONS
    }
}

log_store!(SqliteStore, sqlx::Sqlite);
