//! Postgres for the cluster tests and the server's store conformance tests: a fresh database
//! per test (dropped when the handle is, even on failure), a look at the nodes' connections,
//! and control of the machine's cluster.
//!
//! The server comes from `MOOR_TEST_PG_URL`, else `postgres://postgres@127.0.0.1:5432/postgres`.
//! When none answers and the variable is unset, tests skip with a loud message; when it is set,
//! they fail. Tests that use Postgres run one at a time (`.config/nextest.toml`), because one of
//! them restarts the server.

use std::future::Future;
use std::process::Command;
use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};

use crate::server::ServerOpts;

/// Where to find a server when `MOOR_TEST_PG_URL` is not set.
pub const DEFAULT_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A database created for one test; dropped (with `FORCE`) when this is dropped.
#[derive(Debug)]
pub struct TestDb {
    admin_url: String,
    name: String,
    url: String,
}

/// Prints why a Postgres test does nothing, so a skip is never silent.
pub fn skip(why: &str) {
    eprintln!("\n!!!!! SKIPPING a Postgres test: {why}\n");
}

impl TestDb {
    /// Creates `moor_e2e_<random>`; `None` (after a loud message) when no server answers and
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
                skip(&format!(
                    "no server at {admin_url} ({e}); start one, or set MOOR_TEST_PG_URL to make this a failure"
                ));
                return None;
            }
            Err(e) => panic!("MOOR_TEST_PG_URL={admin_url} does not answer: {e}"),
        };
        let name = format!("moor_e2e_{}", uuid::Uuid::new_v4().simple());
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

    /// Runs `test` on the database's URL, then drops the database (also when `test` panics).
    pub async fn run<F, Fut>(self, test: F)
    where
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = ()>,
    {
        test(self.url.clone()).await;
    }

    /// The test database's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The maintenance database's URL (for `pg_terminate_backend` and the like).
    pub fn admin_url(&self) -> &str {
        &self.admin_url
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `moord` flags for node `node` on this database, with a shared admin token.
    pub fn node_opts(&self, node: &str, token: &str) -> ServerOpts {
        Self::node_opts_via(&self.url, node, token)
    }

    /// [`Self::node_opts`] with the database reached at `url` (through a proxy, say).
    pub fn node_opts_via(url: &str, node: &str, token: &str) -> ServerOpts {
        ServerOpts::new()
            .flag("--database-url", url)
            .flag("--node-id", node)
            .flag("--admin-token", token)
    }

    /// A connection pool on the maintenance database (for `pg_stat_activity` and the like).
    pub async fn admin(&self) -> PgPool {
        PgPoolOptions::new()
            .max_connections(2)
            .connect(&self.admin_url)
            .await
            .expect("connect to the maintenance database")
    }

    /// Process ids of node `node`'s listen connections to this database.
    pub async fn listen_pids(&self, admin: &PgPool, node: &str) -> Vec<i32> {
        sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = $2",
        )
        .bind(&self.name)
        .bind(format!("moord-listen {node}"))
        .fetch_all(admin)
        .await
        .expect("query pg_stat_activity")
    }

    /// `pg_terminate_backend` on node `node`'s listen connections; returns how many.
    pub async fn kill_listen(&self, admin: &PgPool, node: &str) -> usize {
        self.terminate(admin, &format!("moord-listen {node}"), 0)
            .await
    }

    /// `pg_terminate_backend` on node `node`'s pooled connections (not its listen connection),
    /// waiting until each is gone; returns how many there were.
    pub async fn kill_pool(&self, admin: &PgPool, node: &str) -> usize {
        self.terminate(admin, &format!("moord {node}"), 5000).await
    }

    /// `pg_terminate_backend` on this database's connections named `application`, waiting up
    /// to `wait_ms` for each to go (0: not at all); returns how many were signalled.
    async fn terminate(&self, admin: &PgPool, application: &str, wait_ms: i64) -> usize {
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid, $3) FROM pg_stat_activity \
             WHERE datname = $1 AND application_name = $2",
        )
        .bind(&self.name)
        .bind(application)
        .bind(wait_ms)
        .fetch_all(admin)
        .await
        .unwrap_or_else(|e| panic!("terminate {application} connections: {e}"));
        killed.into_iter().filter(|k| *k).count()
    }

    /// A fault proxy in front of the database server, and this database's URL through it: a
    /// node given that URL can be cut off from the database alone, while others keep theirs.
    pub async fn proxied(&self) -> (crate::FaultProxy, String) {
        let mut url = reqwest::Url::parse(&self.url).expect("the test database's URL");
        let server = url
            .socket_addrs(|| Some(5432))
            .expect("the database server's address")[0];
        let proxy = crate::FaultProxy::start(server).await;
        url.set_ip_host(proxy.addr().ip())
            .expect("an IP host for the URL");
        url.set_port(Some(proxy.addr().port()))
            .expect("a port for the URL");
        (proxy, url.to_string())
    }

    /// Allows or refuses new connections to the test database (open ones are not affected).
    pub async fn allow_connections(&self, admin: &PgPool, allow: bool) {
        sqlx::query(&format!(
            "ALTER DATABASE {} WITH ALLOW_CONNECTIONS {allow}",
            self.name
        ))
        .execute(admin)
        .await
        .expect("alter database");
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        // Drop may run inside a runtime (or while unwinding): do the async work on a thread.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async {
                let mut conn = PgConnection::connect(&admin_url).await?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut conn)
                    .await?;
                conn.close().await
            })
            .map_err(|e| e.to_string())
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop test database {}: {dropped:?}", self.name);
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

/// The machine's Postgres cluster (Debian `pg_ctlcluster`), for the restart test. Dropping it
/// starts the cluster if it is not running, so a failing test never leaves it down.
#[derive(Debug)]
pub struct LocalCluster {
    version: String,
}

impl LocalCluster {
    /// The cluster `main` of the single version under `/etc/postgresql`, if `pg_ctlcluster`
    /// exists and it is online.
    pub fn find() -> Result<Self, String> {
        let versions: Vec<String> = std::fs::read_dir("/etc/postgresql")
            .map_err(|e| format!("no /etc/postgresql ({e})"))?
            .filter_map(|d| d.ok())
            .map(|d| d.file_name().to_string_lossy().into_owned())
            .collect();
        let [version] = versions.as_slice() else {
            return Err(format!(
                "expected one version in /etc/postgresql, found {versions:?}"
            ));
        };
        ctl(version, "status").map_err(|e| format!("cluster {version}/main: {e}"))?;
        Ok(Self {
            version: version.clone(),
        })
    }

    /// Stops the cluster (fast shutdown: every connection is cut).
    pub async fn stop(&self) {
        self.run("stop").await;
    }

    /// Starts the cluster and waits until it accepts connections.
    pub async fn start(&self) {
        self.run("start").await;
    }

    async fn run(&self, action: &'static str) {
        let version = self.version.clone();
        tokio::task::spawn_blocking(move || ctl(&version, action))
            .await
            .expect("pg_ctlcluster task")
            .unwrap_or_else(|e| panic!("{action} postgres: {e}"));
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        if ctl(&self.version, "status").is_err() {
            if let Err(e) = ctl(&self.version, "start") {
                eprintln!("!!!!! could not start postgres again: {e}");
            }
        }
    }
}

/// `pg_ctlcluster <version> main <action>`.
fn ctl(version: &str, action: &str) -> Result<(), String> {
    let out = Command::new("pg_ctlcluster")
        .args(["--skip-systemctl-redirect", version, "main", action])
        .output()
        .map_err(|e| format!("run pg_ctlcluster: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "pg_ctlcluster {action}: {} {}",
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
