//! A fresh Postgres database per test, dropped afterwards whatever happens.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection};

/// Where to find a server when `MOOR_TEST_PG_URL` is not set.
pub const DEFAULT_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A database created for one test.
#[derive(Debug)]
pub struct TestDb {
    admin_url: String,
    name: String,
    url: String,
}

impl TestDb {
    /// Creates `moor_test_<random>`; `None` (after a loud message) when no server answers and
    /// none was asked for explicitly.
    pub async fn create() -> Option<Self> {
        let explicit = std::env::var("MOOR_TEST_PG_URL").ok();
        let admin_url = explicit
            .clone()
            .unwrap_or_else(|| DEFAULT_ADMIN_URL.to_owned());
        let conn = tokio::time::timeout(Duration::from_secs(5), PgConnection::connect(&admin_url))
            .await
            .map_err(|_| "timed out".to_owned())
            .and_then(|r| r.map_err(|e| e.to_string()));
        let mut conn = match conn {
            Ok(c) => c,
            Err(e) if explicit.is_none() => {
                eprintln!(
                    "\n!!!!! SKIPPING a Postgres test: no server at {admin_url} ({e}).\n\
                     !!!!! Start one, or set MOOR_TEST_PG_URL to make this a failure.\n"
                );
                return None;
            }
            Err(e) => panic!("MOOR_TEST_PG_URL={admin_url} does not answer: {e}"),
        };
        let name = format!("moor_test_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .expect("create test database");
        let _ = conn.close().await;
        let url = with_database(&admin_url, &name);
        Some(Self {
            admin_url,
            name,
            url,
        })
    }

    /// The maintenance database's URL (for `pg_terminate_backend` and the like).
    pub fn admin_url(&self) -> &str {
        &self.admin_url
    }

    /// Runs `test` on the database's URL, then drops the database, then re-raises any panic.
    pub async fn run<F, Fut>(self, test: F)
    where
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = ()>,
    {
        let result = AssertUnwindSafe(test(self.url.clone()))
            .catch_unwind()
            .await;
        self.drop_db().await;
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    }

    async fn drop_db(&self) {
        let dropped = async {
            let pool = PgPoolOptions::new()
                .max_connections(1)
                .connect(&self.admin_url)
                .await?;
            sqlx::query(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .execute(&pool)
            .await?;
            pool.close().await;
            Ok::<_, sqlx::Error>(())
        };
        if let Err(e) = dropped.await {
            eprintln!("could not drop test database {}: {e}", self.name);
        }
    }
}

/// `url` with its database name replaced by `db`.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}
