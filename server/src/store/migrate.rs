//! `moord migrate-store`: copies a SQLite deployment's log into an empty Postgres database,
//! table by table, keeping every seq and idempotency key (so bridges resume from the same marks
//! and retried inputs stay duplicates).
//!
//! The copy runs in one destination transaction: if anything fails, the destination is left as
//! it was and the command can simply be run again. The source is opened read-only; stop `moord`
//! before copying so nothing is appended behind the copy's back.

use std::str::FromStr;

use anyhow::{bail, Context};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions, SqliteRow};
use sqlx::{Postgres, Row, Transaction};

use super::{redact_url, Engine, PgStore};

/// Rows per read from the source and per insert into the destination.
const CHUNK: i64 = 5000;

/// What was copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    /// Sessions.
    pub sessions: u64,
    /// Log entries.
    pub entries: u64,
    /// Producer marks.
    pub producers: u64,
}

/// Copies everything from the SQLite database at `from` into the Postgres database at `to`
/// (created and migrated if needed, and required to hold no session yet).
pub async fn copy(from: &str, to: &str) -> anyhow::Result<Copied> {
    if Engine::of(from)? != Engine::Sqlite || Engine::of(to)? != Engine::Postgres {
        bail!(
            "migrate-store copies a sqlite: database into a postgres: database (got {} -> {})",
            redact_url(from),
            redact_url(to)
        );
    }
    let src = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::from_str(from)
                .with_context(|| format!("parse {from:?}"))?
                .read_only(true),
        )
        .await
        .with_context(|| format!("open {from}"))?;
    let dst = PgStore::connect(to, "migrate-store").await?;
    let mut tx = dst.pool().begin().await.context("begin on postgres")?;
    let existing: i64 = sqlx::query_scalar("SELECT count(*) FROM sessions")
        .fetch_one(&mut *tx)
        .await
        .context("count destination sessions")?;
    if existing > 0 {
        bail!(
            "{} already holds {existing} session(s); migrate into an empty database",
            redact_url(to)
        );
    }
    let mut copied = Copied::default();

    let rows = sqlx::query(
        "SELECT id, name, created_at, head_seq, last_ts, ended_at, agent FROM sessions",
    )
    .fetch_all(&src)
    .await
    .context("read sessions")?;
    for chunk in rows.chunks(CHUNK as usize) {
        copy_sessions(&mut tx, chunk).await?;
        copied.sessions += chunk.len() as u64;
    }

    let mut after: (String, i64) = (String::new(), 0);
    loop {
        let rows = sqlx::query(
            "SELECT session_id, seq, ts, kind, author, payload, producer_id, producer_seq, \
             client_msg_id, ref_seq FROM entries WHERE (session_id, seq) > (?, ?) \
             ORDER BY session_id, seq LIMIT ?",
        )
        .bind(&after.0)
        .bind(after.1)
        .bind(CHUNK)
        .fetch_all(&src)
        .await
        .context("read entries")?;
        let Some(last) = rows.last() else { break };
        after = (last.try_get("session_id")?, last.try_get("seq")?);
        copy_entries(&mut tx, &rows).await?;
        copied.entries += rows.len() as u64;
    }

    let rows = sqlx::query("SELECT session_id, producer_id, last_seq FROM producers")
        .fetch_all(&src)
        .await
        .context("read producer marks")?;
    for chunk in rows.chunks(CHUNK as usize) {
        let col = |name: &str| -> anyhow::Result<Vec<String>> {
            chunk.iter().map(|r| Ok(r.try_get(name)?)).collect()
        };
        let marks: Vec<i64> = chunk
            .iter()
            .map(|r| r.try_get("last_seq"))
            .collect::<Result<_, _>>()?;
        sqlx::query(
            "INSERT INTO producers (session_id, producer_id, last_seq) \
             SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::bigint[])",
        )
        .bind(col("session_id")?)
        .bind(col("producer_id")?)
        .bind(marks)
        .execute(&mut *tx)
        .await
        .context("write producer marks")?;
        copied.producers += chunk.len() as u64;
    }

    // Every session's head must match what was copied: a torn source would show here.
    let bad: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM sessions s WHERE s.head_seq <> \
         (SELECT count(*) FROM entries e WHERE e.session_id = s.id)",
    )
    .fetch_one(&mut *tx)
    .await
    .context("check copied heads")?;
    if bad > 0 {
        bail!("{bad} session(s) have a head seq that does not match their entries; nothing was written");
    }
    tx.commit().await.context("commit the copy")?;
    Ok(copied)
}

async fn copy_sessions(
    tx: &mut Transaction<'_, Postgres>,
    rows: &[SqliteRow],
) -> anyhow::Result<()> {
    let text = |name: &str| -> anyhow::Result<Vec<Option<String>>> {
        rows.iter().map(|r| Ok(r.try_get(name)?)).collect()
    };
    let int = |name: &str| -> anyhow::Result<Vec<Option<i64>>> {
        rows.iter().map(|r| Ok(r.try_get(name)?)).collect()
    };
    sqlx::query(
        "INSERT INTO sessions (id, name, created_at, head_seq, last_ts, ended_at, agent) \
         SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], \
         $6::bigint[], $7::text[])",
    )
    .bind(text("id")?)
    .bind(text("name")?)
    .bind(int("created_at")?)
    .bind(int("head_seq")?)
    .bind(int("last_ts")?)
    .bind(int("ended_at")?)
    .bind(text("agent")?)
    .execute(&mut **tx)
    .await
    .context("write sessions")?;
    Ok(())
}

async fn copy_entries(
    tx: &mut Transaction<'_, Postgres>,
    rows: &[SqliteRow],
) -> anyhow::Result<()> {
    let text = |name: &str| -> anyhow::Result<Vec<Option<String>>> {
        rows.iter().map(|r| Ok(r.try_get(name)?)).collect()
    };
    let int = |name: &str| -> anyhow::Result<Vec<Option<i64>>> {
        rows.iter().map(|r| Ok(r.try_get(name)?)).collect()
    };
    sqlx::query(
        "INSERT INTO entries (session_id, seq, ts, kind, author, payload, producer_id, \
         producer_seq, client_msg_id, ref_seq) \
         SELECT * FROM UNNEST($1::uuid[], $2::bigint[], $3::bigint[], $4::text[], $5::text[], \
         $6::text[], $7::uuid[], $8::bigint[], $9::text[], $10::bigint[])",
    )
    .bind(text("session_id")?)
    .bind(int("seq")?)
    .bind(int("ts")?)
    .bind(text("kind")?)
    .bind(text("author")?)
    .bind(text("payload")?)
    .bind(text("producer_id")?)
    .bind(int("producer_seq")?)
    .bind(text("client_msg_id")?)
    .bind(int("ref_seq")?)
    .execute(&mut **tx)
    .await
    .context("write entries")?;
    Ok(())
}
