//! The SQLite store: one file, WAL, `synchronous=FULL` so a commit is durable before it is
//! acknowledged. One writer connection (SQLite has one writer anyway, and a single connection
//! never meets `SQLITE_BUSY` from itself) and a small pool of readers.

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use moor_protocol::bridge::AgentInfo;
use moor_protocol::{kinds, now_ms, Entry, ProducerId, Seq, SessionId};
use sqlx::sqlite::{
    SqliteAutoVacuum, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Row, Sqlite, SqliteConnection, SqlitePool};
use uuid::Uuid;

use super::access::{access_store, stored_role, stored_session, AccessDialect};
use super::checkpoint::{checkpoint_store, CheckpointDialect};
use super::errors::{db_error, sqlite_writer_released};
use super::lease::lease_store;
use super::machines::machine_store;
use super::notify::notify_store;
use super::retention::{retention_store, RetentionDialect};
use super::{
    Appended, GroupPart, LogStore, Range, Role, SessionRow, StoreError, StoreResult, ENTRY_COLS,
    INPUTS_AFTER_SQL, MAX_LISTED_AGENT_BYTES,
};

mod group;

/// SQLite implementation of [`LogStore`], [`AccessStore`](super::AccessStore) and
/// [`CheckpointStore`](super::CheckpointStore).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    readers: SqlitePool,
    /// Append transactions committed (see [`LogStore::append_transactions`]).
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
            .connect_with(opts.clone().auto_vacuum(SqliteAutoVacuum::Incremental))
            .await
            .context("open sqlite database")?;
        sqlx::migrate!("../migrations/sqlite")
            .run(&writer)
            .await
            .context("run sqlite migrations")?;
        let readers = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts.read_only(true))
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

/// The session id in column `col`, stored as text.
fn session_id(row: &sqlx::sqlite::SqliteRow, col: &str) -> StoreResult<SessionId> {
    stored_session(row.try_get(col).map_err(db_error)?)
}

fn session_row(row: &sqlx::sqlite::SqliteRow) -> StoreResult<SessionRow> {
    let agent: Option<String> = row.get("agent");
    Ok(SessionRow {
        id: session_id(row, "id")?,
        name: row.get("name"),
        created_at: row.get("created_at"),
        head_seq: Seq(row.get::<i64, _>("head_seq") as u64),
        last_ts: row.get("last_ts"),
        ended_at: row.get("ended_at"),
        agent: agent.and_then(|a| serde_json::from_str(&a).ok()),
    })
}

fn entry_row(row: &sqlx::sqlite::SqliteRow) -> StoreResult<Entry> {
    let payload: String = row.get("payload");
    Ok(Entry {
        seq: Seq(row.get::<i64, _>("seq") as u64),
        ts: row.get("ts"),
        kind: row.get("kind"),
        author: row.get("author"),
        payload: serde_json::from_str(&payload).context("stored payload is not json")?,
    })
}

const SESSION_COLS: &str = "id, name, created_at, head_seq, last_ts, ended_at, agent";
/// Leaves out the deleted sessions (alias `s`) whose rows are still being deleted.
const NOT_RETIRED: &str = "NOT EXISTS (SELECT 1 FROM retired_sessions r WHERE r.id = s.id)";
/// Selects the entries of the session whose id is in `$1`.
const SESSION_ENTRIES: &str = "session_pk = (SELECT pk FROM sessions WHERE id = $1)";

#[async_trait]
impl LogStore for SqliteStore {
    async fn open_session(&self, key: &str, agent: Option<&AgentInfo>) -> StoreResult<SessionRow> {
        let agent_json = agent
            .map(serde_json::to_string)
            .transpose()
            .context("encode agent")?;
        let id = Uuid::parse_str(key).unwrap_or_else(|_| Uuid::new_v4());
        // Insert-if-absent then read: safe against a concurrent creator of the same name. The
        // writer is taken once for all three statements, so a handshake waits once (not three
        // times) behind the group commit in flight.
        let mut writer = self.writer.acquire().await.map_err(db_error)?;
        sqlx::query(
            "INSERT INTO sessions (id, name, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(id.to_string())
        .bind(key)
        .bind(now_ms())
        .execute(&mut *writer)
        .await
        .map_err(db_error)?;
        if let Some(agent_json) = agent_json {
            sqlx::query("UPDATE sessions SET agent = ? WHERE id = ? OR name = ?")
                .bind(agent_json)
                .bind(key)
                .bind(key)
                .execute(&mut *writer)
                .await
                .map_err(db_error)?;
        }
        find_session_on(&mut writer, key).await
    }

    async fn find_session(&self, key: &str) -> StoreResult<SessionRow> {
        let mut reader = self.readers.acquire().await.map_err(db_error)?;
        find_session_on(&mut reader, key).await
    }

    async fn list_sessions(
        &self,
        member: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<(SessionRow, Role)>> {
        let cols = format!(
            "s.id, s.name, s.created_at, s.head_seq, s.last_ts, s.ended_at, \
             CASE WHEN length(CAST(s.agent AS BLOB)) <= {MAX_LISTED_AGENT_BYTES} THEN s.agent END AS agent"
        );
        let order =
            format!("AND {NOT_RETIRED} ORDER BY COALESCE(s.last_ts, s.created_at) DESC LIMIT ?");
        let rows = match member {
            None => {
                sqlx::query(&format!(
                    "SELECT {cols}, 'owner' AS role FROM sessions s WHERE 1 = 1 {order}"
                ))
                .bind(i64::from(limit))
                .fetch_all(&self.readers)
                .await
            }
            Some(principal) => {
                sqlx::query(&format!(
                    "SELECT {cols}, m.role FROM session_members m \
                     JOIN sessions s ON s.id = m.session_id WHERE m.principal = ? {order}"
                ))
                .bind(principal)
                .bind(i64::from(limit))
                .fetch_all(&self.readers)
                .await
            }
        }
        .map_err(db_error)?;
        rows.iter()
            .map(|r| Ok((session_row(r)?, stored_role(r.get("role"))?)))
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
        let applied = super::applied_migration(&self.readers).await?;
        Ok((
            applied,
            super::newest_migration(&sqlx::migrate!("../migrations/sqlite")),
        ))
    }

    async fn read(&self, session: SessionId, range: Range, limit: u32) -> StoreResult<Vec<Entry>> {
        let rows = sqlx::query(&format!(
            "SELECT {ENTRY_COLS} FROM entries WHERE {SESSION_ENTRIES} AND {}",
            range.sql()
        ))
        .bind(session.to_string())
        .bind(super::seq_bind(range.bound()))
        .bind(limit as i64)
        .fetch_all(&self.readers)
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
            "SELECT length(CAST(payload AS BLOB)) FROM entries \
             WHERE session_pk = (SELECT pk FROM sessions WHERE id = ?) AND seq {op} ? \
             ORDER BY seq {order} LIMIT ?"
        ))
        .bind(session.to_string())
        .bind(super::seq_bind(at))
        .bind(i64::from(limit))
        .fetch_all(&self.readers)
        .await
        .map_err(db_error)?;
        Ok(sizes.into_iter().map(|n| n.max(0) as u64).collect())
    }

    async fn producer_mark(&self, session: SessionId, producer: ProducerId) -> StoreResult<u64> {
        let mark: Option<i64> = sqlx::query_scalar(
            "SELECT p.last_seq FROM producers p JOIN sessions s ON s.pk = p.session_pk \
             WHERE s.id = ? AND p.producer_id = ?",
        )
        .bind(session.to_string())
        .bind(producer.to_string())
        .fetch_optional(&self.readers)
        .await
        .map_err(db_error)?;
        Ok(mark.unwrap_or(0) as u64)
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
        .bind(after.0 as i64)
        .bind(limit as i64)
        .fetch_all(&self.readers)
        .await
        .map_err(db_error)?;
        rows.iter().map(entry_row).collect()
    }

    async fn unsettled_inputs(&self, session: SessionId, upto: Seq) -> StoreResult<Vec<Seq>> {
        let seqs: Vec<i64> = sqlx::query_scalar(
            "SELECT e.seq FROM entries e WHERE e.session_pk = (SELECT pk FROM sessions WHERE id = ?) \
             AND e.client_msg_id IS NOT NULL AND e.seq <= ? AND NOT EXISTS (SELECT 1 FROM entries r \
             WHERE r.session_pk = e.session_pk \
             AND r.kind IN (?, ?, ?) AND r.ref_seq = e.seq) ORDER BY e.seq",
        )
        .bind(session.to_string())
        .bind(upto.0 as i64)
        .bind(kinds::INPUT_APPLIED)
        .bind(kinds::INPUT_FAILED)
        .bind(kinds::INPUT_UNCERTAIN)
        .fetch_all(&self.writer)
        .await
        .map_err(db_error)?;
        Ok(seqs.into_iter().map(|s| Seq(s as u64)).collect())
    }

    async fn save_snapshot(&self, session: SessionId, head: Seq, state: &str) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO state_snapshots (session_pk, head_seq, state) \
             SELECT pk, ?, ? FROM sessions WHERE id = ? \
             ON CONFLICT (session_pk) DO UPDATE SET head_seq = excluded.head_seq, state = excluded.state \
             WHERE excluded.head_seq > state_snapshots.head_seq",
        )
        .bind(head.0 as i64)
        .bind(state)
        .bind(session.to_string())
        .execute(&self.writer)
        .await
        .map_err(db_error)?;
        Ok(())
    }

    async fn latest_snapshot(&self, session: SessionId) -> StoreResult<Option<(Seq, String)>> {
        let row = sqlx::query(
            "SELECT s.head_seq, s.state FROM state_snapshots s JOIN sessions x ON x.pk = s.session_pk \
             WHERE x.id = ?",
        )
        .bind(session.to_string())
        .fetch_optional(&self.readers)
        .await
        .map_err(db_error)?;
        Ok(row.map(|r| (Seq(r.get::<i64, _>("head_seq") as u64), r.get("state"))))
    }

    async fn end_session(&self, session: SessionId, at: i64) -> StoreResult<()> {
        sqlx::query("UPDATE sessions SET ended_at = COALESCE(ended_at, ?) WHERE id = ?")
            .bind(at)
            .bind(session.to_string())
            .execute(&self.writer)
            .await
            .map_err(db_error)?;
        Ok(())
    }
}

/// The session named or numbered `key`, read on `conn`.
async fn find_session_on(conn: &mut SqliteConnection, key: &str) -> StoreResult<SessionRow> {
    let row = sqlx::query(&format!(
        "SELECT {SESSION_COLS} FROM sessions s WHERE (id = ? OR name = ?) AND {NOT_RETIRED}"
    ))
    .bind(key)
    .bind(key)
    .fetch_optional(conn)
    .await
    .map_err(db_error)?
    .ok_or(StoreError::NotFound)?;
    session_row(&row)
}
