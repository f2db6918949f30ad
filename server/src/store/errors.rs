//! Driver errors to [`StoreError`], for both engines: a missing row is `NotFound`, a unique
//! violation `Conflict`, and anything that says the database cannot be reached right now is
//! `Unavailable` (callers answer it with "retry", not with "broken").

use sqlx::error::DatabaseError;
use sqlx::postgres::PgDatabaseError;
use sqlx::sqlite::SqliteError;

use super::StoreError;

/// SQLite's primary result codes for "another connection holds the lock" (busy past the busy
/// timeout, or a locked table).
const SQLITE_BUSY: i64 = 5;
const SQLITE_LOCKED: i64 = 6;

/// Maps a driver error to the store's terms.
pub(crate) fn db_error(e: sqlx::Error) -> StoreError {
    match e {
        sqlx::Error::RowNotFound => StoreError::NotFound,
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            StoreError::Conflict("unique key already stored")
        }
        sqlx::Error::Database(db) if unreachable(db.as_ref()) => {
            StoreError::Unavailable(sqlx::Error::Database(db).into())
        }
        e @ (sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed) => StoreError::Unavailable(e.into()),
        e => StoreError::Other(e.into()),
    }
}

/// Whether a database's answer means "not now" rather than "never".
fn unreachable(db: &(dyn DatabaseError + 'static)) -> bool {
    if let Some(pg) = db.try_downcast_ref::<PgDatabaseError>() {
        return pg_unreachable(pg.code(), pg.message());
    }
    if db.try_downcast_ref::<SqliteError>().is_some() {
        let code = db.code().and_then(|c| c.parse::<i64>().ok()).unwrap_or(0);
        // Extended codes (SQLITE_BUSY_SNAPSHOT, …) keep the primary code in the low byte.
        return matches!(code & 0xff, SQLITE_BUSY | SQLITE_LOCKED);
    }
    false
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
