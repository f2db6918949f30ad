//! Driver errors to [`StoreError`], for both engines: a missing row is `NotFound`, a unique
//! violation `Conflict`, anything that says the database cannot be reached right now is
//! `Unavailable` (callers answer it with "retry", not with "broken"), and a full disk is `Full`
//! (retry once the operator freed space).

use futures_util::future::BoxFuture;
use sqlx::error::DatabaseError;
use sqlx::pool::PoolConnectionMetadata;
use sqlx::postgres::PgDatabaseError;
use sqlx::sqlite::SqliteError;
use sqlx::{Connection, SqliteConnection};

use super::StoreError;

/// SQLite's primary result codes for "another connection holds the lock" (busy past the busy
/// timeout, or a locked table).
const SQLITE_BUSY: i64 = 5;
const SQLITE_LOCKED: i64 = 6;
/// SQLite's primary result code for "the disk is full" (a write failed with `ENOSPC`).
const SQLITE_FULL: i64 = 13;
/// Postgres's SQLSTATE `disk_full`.
const PG_DISK_FULL: &str = "53100";

/// Maps a driver error to the store's terms.
pub(crate) fn db_error(e: sqlx::Error) -> StoreError {
    match e {
        sqlx::Error::RowNotFound => StoreError::NotFound,
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            StoreError::Conflict("unique key already stored")
        }
        e if unavailable(&e) => StoreError::Unavailable(e.into()),
        sqlx::Error::Database(db) if full(db.as_ref()) => {
            StoreError::Full(sqlx::Error::Database(db).into())
        }
        sqlx::Error::Io(e) if io_full(&e) => StoreError::Full(sqlx::Error::Io(e).into()),
        e => StoreError::Other(e.into()),
    }
}

/// Whether `e` says the database cannot be reached right now (retry later), as opposed to a
/// broken request, a full disk or a missing row.
pub(crate) fn unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => unreachable(db.as_ref()),
        sqlx::Error::Io(io) => !io_full(io),
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => true,
        _ => false,
    }
}

/// The SQLite writer pool's `after_release` check: a connection still inside a transaction
/// once its queued rollback ran is closed instead of reused.
///
/// SQLite rolls a transaction back on its own when a write or `COMMIT` fails with
/// `SQLITE_FULL`; sqlx does not know, its `ROLLBACK` then fails ("no transaction is active")
/// and it keeps counting the transaction as open. Its next `begin` would issue a `SAVEPOINT`
/// and its next "commit" a `RELEASE` inside a transaction that never commits: appends
/// acknowledged and published but never written (G2), until the process restarts.
pub(crate) fn sqlite_writer_released(
    conn: &mut SqliteConnection,
    _: PoolConnectionMetadata,
) -> BoxFuture<'_, Result<bool, sqlx::Error>> {
    Box::pin(async move {
        if conn.is_in_transaction() {
            // The rollback of a dropped transaction is queued; a ping runs after it.
            conn.ping().await?;
        }
        Ok(!conn.is_in_transaction())
    })
}

/// Whether a file error means the disk (or the process's or user's share of it) is full:
/// `ENOSPC`, `EFBIG` (a file-size limit, as `RLIMIT_FSIZE` gives) or `EDQUOT`.
pub fn io_full(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{FileTooLarge, QuotaExceeded, StorageFull};
    matches!(e.kind(), StorageFull | FileTooLarge | QuotaExceeded)
}

/// SQLite's primary result code of an error SQLite gave. Extended codes (SQLITE_BUSY_SNAPSHOT,
/// …) keep the primary code in the low byte.
fn sqlite_primary_code(db: &(dyn DatabaseError + 'static)) -> Option<i64> {
    db.try_downcast_ref::<SqliteError>()?;
    Some(db.code().and_then(|c| c.parse::<i64>().ok()).unwrap_or(0) & 0xff)
}

/// Whether a database's answer means its disk is full.
fn full(db: &(dyn DatabaseError + 'static)) -> bool {
    if let Some(pg) = db.try_downcast_ref::<PgDatabaseError>() {
        return pg.code() == PG_DISK_FULL;
    }
    sqlite_primary_code(db) == Some(SQLITE_FULL)
}

/// Whether a database's answer means "not now" rather than "never".
fn unreachable(db: &(dyn DatabaseError + 'static)) -> bool {
    if let Some(pg) = db.try_downcast_ref::<PgDatabaseError>() {
        return pg_unreachable(pg.code(), pg.message());
    }
    matches!(sqlite_primary_code(db), Some(SQLITE_BUSY | SQLITE_LOCKED))
}

/// Postgres SQLSTATEs of a server that refuses or dropped the connection: class 08
/// (connection exception), 57P01–57P03 (shutting down, crashed, starting up), 53300 (too many
/// connections), and 55000 when a database is closed to new connections
/// (`ALLOW_CONNECTIONS false`).
fn pg_unreachable(code: &str, message: &str) -> bool {
    code.starts_with("08")
        || matches!(code, "57P01" | "57P02" | "57P03" | "53300")
        || (code == "55000" && message.contains("not currently accepting connections"))
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;
    use std::time::Duration;

    use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

    use super::*;

    #[test]
    fn postgres_refusals_are_unavailable_and_other_states_are_not() {
        for code in ["08006", "08001", "57P01", "57P02", "57P03", "53300"] {
            assert!(pg_unreachable(code, "whatever"), "{code}");
        }
        assert!(pg_unreachable(
            "55000",
            "database \"moor\" is not currently accepting connections"
        ));
        assert!(!pg_unreachable("55000", "cannot do that in this state"));
        assert!(!pg_unreachable("42P01", "relation does not exist"));
        assert!(!pg_unreachable("23505", "duplicate key"));
    }

    #[tokio::test]
    async fn sqlite_busy_past_the_timeout_is_unavailable() {
        // arrange: one connection holds the write lock; another gives up at once
        let dir = tempfile::tempdir().unwrap();
        let opts = SqliteConnectOptions::from_str(&format!(
            "sqlite:{}",
            dir.path().join("busy.db").display()
        ))
        .unwrap()
        .create_if_missing(true);
        let holder = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts.clone())
            .await
            .unwrap();
        sqlx::query("CREATE TABLE t (x INTEGER)")
            .execute(&holder)
            .await
            .unwrap();
        let mut lock = holder.begin().await.unwrap();
        sqlx::query("INSERT INTO t VALUES (1)")
            .execute(&mut *lock)
            .await
            .unwrap();
        let other = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts.busy_timeout(Duration::ZERO))
            .await
            .unwrap();
        // act
        let err = sqlx::query("INSERT INTO t VALUES (2)")
            .execute(&other)
            .await
            .unwrap_err();
        // assert
        assert!(
            matches!(db_error(err), StoreError::Unavailable(_)),
            "a busy database is worth retrying"
        );
        lock.rollback().await.unwrap();
    }

    #[test]
    fn postgres_disk_full_and_file_errors_of_a_full_disk_are_full() {
        assert!(matches!(
            db_error(sqlx::Error::Io(std::io::Error::from(
                std::io::ErrorKind::StorageFull
            ))),
            StoreError::Full(_)
        ));
        assert!(io_full(&std::io::Error::from_raw_os_error(27)), "EFBIG");
        assert!(io_full(&std::io::Error::from_raw_os_error(28)), "ENOSPC");
        assert!(!io_full(&std::io::Error::from_raw_os_error(5)), "EIO");
    }

    #[tokio::test]
    async fn sqlite_at_its_size_limit_is_full_and_still_serves_reads() {
        // arrange: a database that may not grow past its current pages, as on a full disk
        let dir = tempfile::tempdir().unwrap();
        let opts = SqliteConnectOptions::from_str(&format!(
            "sqlite:{}",
            dir.path().join("full.db").display()
        ))
        .unwrap()
        .create_if_missing(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts)
            .await
            .unwrap();
        sqlx::query("CREATE TABLE t (x BLOB)")
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query("INSERT INTO t VALUES (zeroblob(100))")
            .execute(&pool)
            .await
            .unwrap();
        let (pages,): (i64,) = sqlx::query_as("PRAGMA page_count")
            .fetch_one(&pool)
            .await
            .unwrap();
        sqlx::query(&format!("PRAGMA max_page_count = {pages}"))
            .execute(&pool)
            .await
            .unwrap();
        // act
        let err = sqlx::query("INSERT INTO t VALUES (zeroblob(100000))")
            .execute(&pool)
            .await
            .unwrap_err();
        // assert
        assert!(
            matches!(db_error(err), StoreError::Full(_)),
            "SQLITE_FULL is a full disk"
        );
        let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM t")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(n, 1, "reads still work and the failed write left nothing");
    }

    #[tokio::test]
    async fn a_writer_whose_transaction_sqlite_rolled_back_for_a_full_disk_commits_again() {
        // arrange: one writer connection whose database may not grow (a full disk)
        let dir = tempfile::tempdir().unwrap();
        let opts = SqliteConnectOptions::from_str(&format!(
            "sqlite:{}",
            dir.path().join("full.db").display()
        ))
        .unwrap()
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .after_release(sqlite_writer_released)
            .connect_with(opts.clone().pragma("max_page_count", "3"))
            .await
            .unwrap();
        sqlx::query("CREATE TABLE t (x BLOB)")
            .execute(&writer)
            .await
            .unwrap();
        let mut tx = writer.begin().await.unwrap();
        let err = sqlx::query("INSERT INTO t VALUES (zeroblob(100000))")
            .execute(&mut *tx)
            .await
            .unwrap_err();
        assert!(matches!(db_error(err), StoreError::Full(_)));
        drop(tx);
        // act: the next user of the writer, then a small write that fits
        let conn = writer.acquire().await.unwrap();
        assert!(
            !conn.is_in_transaction(),
            "the writer does not take SQLite's rollback for an open transaction"
        );
        drop(conn);
        let mut tx = writer.begin().await.unwrap();
        sqlx::query("INSERT INTO t VALUES (x'01')")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        // assert: it is really committed: another connection sees it
        let reader = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts)
            .await
            .unwrap();
        let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM t")
            .fetch_one(&reader)
            .await
            .unwrap();
        assert_eq!(
            n, 1,
            "the commit after the full disk is durable, not a savepoint"
        );
    }

    #[test]
    fn a_pool_that_timed_out_is_unavailable_and_a_missing_row_is_not_found() {
        assert!(matches!(
            db_error(sqlx::Error::PoolTimedOut),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            db_error(sqlx::Error::RowNotFound),
            StoreError::NotFound
        ));
        assert!(matches!(
            db_error(sqlx::Error::Protocol("garbled".into())),
            StoreError::Other(_)
        ));
    }
}
