//! What the server's integration test binaries share: a built server serving on a loopback port.

#[allow(dead_code)] // not every test binary drives clients
pub mod client;

use std::ops::Deref;
use std::path::{Path, PathBuf};

use moor_server::{Server, ServerConfig};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A server serving on `127.0.0.1` until `shutdown` is cancelled.
pub struct Serving {
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    /// Cancel to stop it.
    pub shutdown: CancellationToken,
    /// Its serve loop, ending after shutdown.
    #[allow(dead_code)] // not every test binary waits for it
    pub task: JoinHandle<anyhow::Result<()>>,
}

/// Binds a free loopback port and serves `server` on it. Nothing waits for it to come up: the
/// bound listener already queues connections.
pub async fn serve_on_loopback(server: Server) -> Serving {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(server.serve(listener, shutdown.clone()));
    Serving {
        addr,
        shutdown,
        task,
    }
}

/// A fresh data directory below the system temp dir, `<prefix>-<uuid>`, not created (the server
/// makes it); removed with all it holds when dropped.
#[allow(dead_code)] // not every test binary has one
pub struct DataDir(PathBuf);

#[allow(dead_code)]
impl DataDir {
    pub fn new(prefix: &str) -> Self {
        Self(std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4())))
    }
}

impl Deref for DataDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Builds a server whose data lives in `dir` and whose bootstrap token is `admin`, with the
/// configuration as `tweak` leaves it.
pub async fn build(dir: &Path, admin: &str, tweak: impl FnOnce(&mut ServerConfig)) -> Server {
    let mut config = ServerConfig::default();
    config.data_dir = dir.to_owned();
    config.admin_token = Some(admin.into());
    tweak(&mut config);
    Server::build(config).await.unwrap()
}
