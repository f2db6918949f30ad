//! The SQLite store: one file, WAL, `synchronous=FULL` so a commit is durable before it is
//! acknowledged. One writer connection (SQLite has one writer anyway, and a single connection
//! never meets `SQLITE_BUSY` from itself) and a small pool of readers.

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use moor_protocol::bridge::AgentInfo;
use moor_protocol::{kinds, now_ms, Entry, ProducerId, Seq, SessionId};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{QueryBuilder, Row, Sqlite, SqlitePool};
use uuid::Uuid;

use super::append::{self, Decision, Lookup, NewRow, StoredEntry};
use super::{Append, Appended, Range, SessionRow, Store, StoreError, StoreResult};

/// Rows per multi-row INSERT. A few fixed sizes keep the prepared-statement cache small.
const INSERT_CHUNKS: [usize; 4] = [256, 32, 4, 1];

/// SQLite implementation of [`Store`].
#[derive(Debug, Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    readers: SqlitePool,
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
            .foreign_keys(true);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts.clone())
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
        Ok(Self { writer, readers })
    }
}

fn other(e: sqlx::Error) -> StoreError {
    match e {
        sqlx::Error::RowNotFound => StoreError::NotFound,
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            StoreError::Conflict("unique key already stored")
        }
        e => StoreError::Other(e.into()),
    }
}

fn session_row(row: &sqlx::sqlite::SqliteRow) -> StoreResult<SessionRow> {
    let id: String = row.get("id");
    let agent: Option<String> = row.get("agent");
    Ok(SessionRow {
        id: SessionId(Uuid::parse_str(&id).context("stored session id")?),
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

#[async_trait]
impl Store for SqliteStore {
    async fn open_session(&self, key: &str, agent: Option<&AgentInfo>) -> StoreResult<SessionRow> {
        let agent_json = agent
            .map(serde_json::to_string)
            .transpose()
            .context("encode agent")?;
        let id = Uuid::parse_str(key).unwrap_or_else(|_| Uuid::new_v4());
        // Insert-if-absent then read: safe against a concurrent creator of the same name.
        sqlx::query(
            "INSERT INTO sessions (id, name, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(id.to_string())
        .bind(key)
        .bind(now_ms())
        .execute(&self.writer)
        .await
        .map_err(other)?;
        if let Some(agent_json) = agent_json {
            sqlx::query("UPDATE sessions SET agent = ? WHERE id = ? OR name = ?")
                .bind(agent_json)
                .bind(key)
                .bind(key)
                .execute(&self.writer)
                .await
                .map_err(other)?;
        }
        self.find_session_in(&self.writer, key).await
    }

    async fn find_session(&self, key: &str) -> StoreResult<SessionRow> {
        self.find_session_in(&self.readers, key).await
    }

    async fn list_sessions(&self) -> StoreResult<Vec<SessionRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {SESSION_COLS} FROM sessions ORDER BY COALESCE(last_ts, created_at) DESC"
        ))
        .fetch_all(&self.readers)
        .await
        .map_err(other)?;
        rows.iter().map(session_row).collect()
    }

    async fn append(&self, session: SessionId, batch: Vec<Append>) -> StoreResult<Vec<Appended>> {
        let sid = session.to_string();
        let mut tx = self.writer.begin().await.map_err(other)?;
        let row = sqlx::query("SELECT head_seq, ended_at FROM sessions WHERE id = ?")
            .bind(&sid)
            .fetch_optional(&mut *tx)
            .await
            .map_err(other)?
            .ok_or(StoreError::NotFound)?;
        if row.get::<Option<i64>, _>("ended_at").is_some() {
            return Err(StoreError::SessionEnded);
        }
        let head: i64 = row.get("head_seq");
        let mut lookup = SqliteLookup {
            conn: &mut tx,
            sid: &sid,
        };
        let Decision {
            decided,
            rows,
            head,
            last_ts,
            plan,
        } = append::decide(&mut lookup, &batch, head).await?;
        if !rows.is_empty() {
            insert_rows(&mut tx, &sid, &rows).await?;
            for (producer, mark) in plan.advanced_marks() {
                sqlx::query(
                    "INSERT INTO producers (session_id, producer_id, last_seq) VALUES (?, ?, ?) \
                     ON CONFLICT (session_id, producer_id) DO UPDATE SET last_seq = excluded.last_seq",
                )
                .bind(&sid)
                .bind(producer.to_string())
                .bind(mark as i64)
                .execute(&mut *tx)
                .await
                .map_err(other)?;
            }
            sqlx::query("UPDATE sessions SET head_seq = ?, last_ts = ? WHERE id = ?")
                .bind(head)
                .bind(last_ts)
                .bind(&sid)
                .execute(&mut *tx)
                .await
                .map_err(other)?;
        }
        tx.commit().await.map_err(other)?;
        let stored_seqs: Vec<i64> = rows.into_iter().map(|r| r.seq).collect();
        Ok(append::outcomes(batch, decided, stored_seqs))
    }

    async fn read(&self, session: SessionId, range: Range, limit: u32) -> StoreResult<Vec<Entry>> {
        let sql = match range {
            Range::After(_) => {
                "SELECT seq, ts, kind, author, payload FROM entries \
                 WHERE session_id = ? AND seq > ? ORDER BY seq ASC LIMIT ?"
            }
            Range::Before(_) => {
                "SELECT seq, ts, kind, author, payload FROM entries \
                 WHERE session_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?"
            }
        };
        let (Range::After(at) | Range::Before(at)) = range;
        let rows = sqlx::query(sql)
            .bind(session.to_string())
            .bind(super::seq_bind(at))
            .bind(limit as i64)
            .fetch_all(&self.readers)
            .await
            .map_err(other)?;
        let mut entries = rows
            .iter()
            .map(entry_row)
            .collect::<StoreResult<Vec<_>>>()?;
        if matches!(range, Range::Before(_)) {
            entries.reverse();
        }
        Ok(entries)
    }

    async fn producer_mark(&self, session: SessionId, producer: ProducerId) -> StoreResult<u64> {
        let mut conn = self.readers.acquire().await.map_err(other)?;
        producer_mark_in(&mut conn, &session.to_string(), producer).await
    }

    async fn inputs_after(
        &self,
        session: SessionId,
        after: Seq,
        limit: u32,
    ) -> StoreResult<Vec<Entry>> {
        let rows = sqlx::query(
            "SELECT seq, ts, kind, author, payload FROM entries \
             WHERE session_id = ? AND client_msg_id IS NOT NULL AND seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(session.to_string())
        .bind(after.0 as i64)
        .bind(limit as i64)
        .fetch_all(&self.readers)
        .await
        .map_err(other)?;
        rows.iter().map(entry_row).collect()
    }

    async fn unsettled_inputs(&self, session: SessionId, upto: Seq) -> StoreResult<Vec<Seq>> {
        let seqs: Vec<i64> = sqlx::query_scalar(
            "SELECT e.seq FROM entries e WHERE e.session_id = ? AND e.client_msg_id IS NOT NULL \
             AND e.seq <= ? AND NOT EXISTS (SELECT 1 FROM entries r WHERE r.session_id = e.session_id \
             AND r.kind IN (?, ?, ?) AND r.ref_seq = e.seq) ORDER BY e.seq",
        )
        .bind(session.to_string())
        .bind(upto.0 as i64)
        .bind(kinds::INPUT_APPLIED)
        .bind(kinds::INPUT_FAILED)
        .bind(kinds::INPUT_UNCERTAIN)
        .fetch_all(&self.writer)
        .await
        .map_err(other)?;
        Ok(seqs.into_iter().map(|s| Seq(s as u64)).collect())
    }

    async fn end_session(&self, session: SessionId, at: i64) -> StoreResult<()> {
        sqlx::query("UPDATE sessions SET ended_at = COALESCE(ended_at, ?) WHERE id = ?")
            .bind(at)
            .bind(session.to_string())
            .execute(&self.writer)
            .await
            .map_err(other)?;
        Ok(())
    }
}

impl SqliteStore {
    async fn find_session_in(&self, pool: &SqlitePool, key: &str) -> StoreResult<SessionRow> {
        let row = sqlx::query(&format!(
            "SELECT {SESSION_COLS} FROM sessions WHERE id = ? OR name = ?"
        ))
        .bind(key)
        .bind(key)
        .fetch_optional(pool)
        .await
        .map_err(other)?
        .ok_or(StoreError::NotFound)?;
        session_row(&row)
    }
}

async fn producer_mark_in(
    conn: &mut sqlx::SqliteConnection,
    sid: &str,
    producer: ProducerId,
) -> StoreResult<u64> {
    let mark: Option<i64> = sqlx::query_scalar(
        "SELECT last_seq FROM producers WHERE session_id = ? AND producer_id = ?",
    )
    .bind(sid)
    .bind(producer.to_string())
    .fetch_optional(conn)
    .await
    .map_err(other)?;
    Ok(mark.unwrap_or(0) as u64)
}

/// The idempotency lookups of one append, on the writer's open transaction.
struct SqliteLookup<'c> {
    conn: &'c mut sqlx::SqliteConnection,
    sid: &'c str,
}

impl Lookup for SqliteLookup<'_> {
    async fn producer_mark(&mut self, producer: ProducerId) -> StoreResult<u64> {
        producer_mark_in(self.conn, self.sid, producer).await
    }

    async fn producer_entry(
        &mut self,
        producer: ProducerId,
        seq: u64,
    ) -> StoreResult<Option<StoredEntry>> {
        let row = sqlx::query(
            "SELECT seq, kind, payload FROM entries \
             WHERE session_id = ? AND producer_id = ? AND producer_seq = ?",
        )
        .bind(self.sid)
        .bind(producer.to_string())
        .bind(seq as i64)
        .fetch_optional(&mut *self.conn)
        .await
        .map_err(other)?;
        Ok(row.map(|r| StoredEntry {
            seq: r.get("seq"),
            kind: r.get("kind"),
            payload: r.get("payload"),
        }))
    }

    async fn client_msg_seq(&mut self, id: &str) -> StoreResult<Option<i64>> {
        sqlx::query_scalar("SELECT seq FROM entries WHERE session_id = ? AND client_msg_id = ?")
            .bind(self.sid)
            .bind(id)
            .fetch_optional(&mut *self.conn)
            .await
            .map_err(other)
    }

    async fn receipt_seq(&mut self, kind: &str, input: Seq) -> StoreResult<Option<i64>> {
        sqlx::query_scalar(
            "SELECT seq FROM entries WHERE session_id = ? AND kind = ? AND ref_seq = ?",
        )
        .bind(self.sid)
        .bind(kind)
        .bind(input.0 as i64)
        .fetch_optional(&mut *self.conn)
        .await
        .map_err(other)
    }
}

async fn insert_rows(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    sid: &str,
    rows: &[NewRow<'_>],
) -> StoreResult<()> {
    let mut rest = rows;
    while !rest.is_empty() {
        let n = INSERT_CHUNKS
            .iter()
            .copied()
            .find(|&n| n <= rest.len())
            .unwrap_or(1);
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        let mut qb = QueryBuilder::<Sqlite>::new(
            "INSERT INTO entries (session_id, seq, ts, kind, author, payload, producer_id, \
             producer_seq, client_msg_id, ref_seq) ",
        );
        qb.push_values(chunk, |mut b, row| {
            let (producer, producer_seq, client_msg, ref_seq) = row.key_columns();
            b.push_bind(sid)
                .push_bind(row.seq)
                .push_bind(row.append.ts)
                .push_bind(&row.append.kind)
                .push_bind(&row.append.author)
                .push_bind(&row.payload)
                .push_bind(producer.map(|p| p.to_string()))
                .push_bind(producer_seq)
                .push_bind(client_msg.map(str::to_owned))
                .push_bind(ref_seq);
        });
        qb.build()
            .persistent(true)
            .execute(&mut **tx)
            .await
            .map_err(other)?;
    }
    Ok(())
}
