//! The storage limit of ingest: the rows `moor-bench --only ingest` has `moord` store, inserted
//! straight into the same SQLite file (the schema `moord` made, WAL, `synchronous=FULL`) with
//! no server in between, one transaction per frame of entries. What `moord` reaches is reported
//! as a share of this.

use std::time::Instant;

use anyhow::{Context, Result};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{Connection, Row, SqliteConnection};

use super::moord::Moord;
use super::{entry, ingest};

/// Rows in one `INSERT` statement (10 values each, within SQLite's 32,766 variables).
const ROWS_PER_STATEMENT: usize = 1000;

/// Entries per second inserted straight into a `moord` data file: `total` entries as rows of one
/// session and producer, `batch` rows per transaction, each committed with an fsync.
pub async fn sqlite_insert_limit(total: u64, batch: u64) -> Result<f64> {
    // A session, a producer and one entry stored by moord, so every row has what moord's have.
    let mut moord = Moord::start().await?;
    let ws = moord.bridge("limit").await?;
    ingest(ws, 1, 1, 1).await?;
    let file = moord.stop().await?.join("moor.db");

    let options = SqliteConnectOptions::new()
        .filename(&file)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .pragma("temp_store", "memory");
    let mut db = SqliteConnection::connect_with(&options).await?;
    let last = sqlx::query(
        "SELECT session_pk, producer_pk, \
         (SELECT MAX(seq) FROM entries a WHERE a.session_pk = e.session_pk), ts, kind, author \
         FROM entries e WHERE producer_pk IS NOT NULL ORDER BY seq DESC LIMIT 1",
    )
    .fetch_one(&mut db)
    .await
    .context("the entry moord stored")?;
    let (session, producer): (i64, i64) = (last.try_get(0)?, last.try_get(1)?);
    let (first, kind, author): (i64, String, String) =
        (last.try_get(2)?, last.try_get(4)?, last.try_get(5)?);
    let payloads: Vec<String> = (0..batch)
        .map(|i| serde_json::to_string(&entry(i + 2, 0).payload))
        .collect::<Result<_, _>>()?;

    let start = Instant::now();
    let mut seq = first;
    let mut stored = 0;
    while stored < total {
        let rows = batch.min(total - stored) as usize;
        let mut tx = db.begin().await?;
        for chunk in payloads[..rows].chunks(ROWS_PER_STATEMENT) {
            let values = vec!["(?,?,?,?,?,?,?,?,NULL,NULL)"; chunk.len()].join(",");
            let sql = format!(
                "INSERT INTO entries (session_pk, seq, ts, kind, author, payload, producer_pk, \
                 producer_seq, client_msg_id, ref_seq) VALUES {values}"
            );
            let mut insert = sqlx::query(&sql);
            for payload in chunk {
                seq += 1;
                insert = insert
                    .bind(session)
                    .bind(seq)
                    .bind(0_i64)
                    .bind(&kind)
                    .bind(&author)
                    .bind(payload)
                    .bind(producer)
                    .bind(seq);
            }
            insert.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        stored += rows as u64;
    }
    let rate = total as f64 / start.elapsed().as_secs_f64();
    db.close().await?;
    drop(moord);
    Ok(rate)
}

/// Entries per second copied straight into the Postgres database at `url`, after the rows of
/// session `session` that `moord` stored there: `total` rows like its newest producer's entry,
/// `batch` rows per `COPY` (each its own transaction, committed durably).
pub async fn postgres_copy_limit(url: &str, session: &str, total: u64, batch: u64) -> Result<f64> {
    use sqlx::postgres::PgConnection;

    let mut db = PgConnection::connect(url).await?;
    let last = sqlx::query(
        "SELECT session_id::text, producer_id::text, \
         (SELECT MAX(seq) FROM entries WHERE session_id = $1::uuid), kind, author FROM entries \
         WHERE session_id = $1::uuid AND producer_id IS NOT NULL ORDER BY seq DESC LIMIT 1",
    )
    .bind(session)
    .fetch_one(&mut db)
    .await
    .context("an entry moord stored")?;
    let (session, producer): (String, String) = (last.try_get(0)?, last.try_get(1)?);
    let (first, kind, author): (i64, String, String) =
        (last.try_get(2)?, last.try_get(3)?, last.try_get(4)?);
    let payload = copy_text(&serde_json::to_string(&entry(2, 0).payload)?);
    let (kind, author) = (copy_text(&kind), copy_text(&author));

    let start = Instant::now();
    let mut seq = first;
    let mut stored = 0;
    while stored < total {
        let rows = batch.min(total - stored);
        let mut data = String::new();
        for _ in 0..rows {
            seq += 1;
            data += &format!(
                "{session}\t{seq}\t0\t{kind}\t{author}\t{payload}\t{producer}\t{seq}\t\\N\t\\N\n"
            );
        }
        let mut copy = db
            .copy_in_raw(
                "COPY entries (session_id, seq, ts, kind, author, payload, producer_id, \
                 producer_seq, client_msg_id, ref_seq) FROM STDIN",
            )
            .await?;
        copy.send(data.into_bytes()).await?;
        copy.finish().await?;
        stored += rows;
    }
    let rate = total as f64 / start.elapsed().as_secs_f64();
    db.close().await?;
    Ok(rate)
}

/// `text` as a field of `COPY`'s text format.
fn copy_text(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('\t', "\\t")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
}
