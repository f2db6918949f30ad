//! `moord`: parse flags, start tracing, build the server, serve until SIGTERM/SIGINT; or run a
//! maintenance command (`moord migrate-store`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use moor_server::{Server, ServerConfig};
use tokio_util::sync::CancellationToken;

/// The Mooring relay server.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Config {
    /// A maintenance command instead of serving.
    #[command(subcommand)]
    command: Option<Command>,
    /// Address to listen on.
    #[arg(long, env = "MOOR_LISTEN", default_value = "127.0.0.1:7070")]
    listen: String,
    /// Directory for the SQLite database and the admin token.
    #[arg(long, env = "MOOR_DATA_DIR", default_value = "moor-data")]
    data_dir: PathBuf,
    /// Database URL (default: sqlite:<data-dir>/moor.db).
    #[arg(long, env = "MOOR_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// This node's name among nodes sharing a Postgres database (default: generated).
    #[arg(long, env = "MOOR_NODE_ID")]
    node_id: Option<String>,
    /// Admin token to use instead of <data-dir>/admin.token.
    #[arg(long, env = "MOOR_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// URL people open, if not http://<listen>.
    #[arg(long, env = "MOOR_PUBLIC_URL")]
    public_url: Option<String>,
    /// Heartbeat interval on bridge sockets.
    #[arg(long, env = "MOOR_HEARTBEAT_INTERVAL_MS", default_value_t = 10_000)]
    heartbeat_interval_ms: u64,
    /// Silence after which a socket is considered dead.
    #[arg(long, env = "MOOR_IDLE_TIMEOUT_MS", default_value_t = 30_000)]
    idle_timeout_ms: u64,
    /// Maximum bridge connection lifetime (0 = none); the bridge is told to move before it.
    #[arg(long, env = "MOOR_BRIDGE_MAX_LIFETIME_MS", default_value_t = 0)]
    bridge_max_lifetime_ms: u64,
    /// How long before the lifetime cap the bridge is told to move.
    #[arg(long, env = "MOOR_MOVE_NOTICE_MS", default_value_t = 5_000)]
    move_notice_ms: u64,
    /// Maximum SSE stream lifetime (0 = none); clients resume with Last-Event-ID.
    #[arg(long, env = "MOOR_SSE_LIFETIME_MS", default_value_t = 0)]
    sse_lifetime_ms: u64,
    /// Keep-alive interval for SSE and viewer sockets.
    #[arg(long, env = "MOOR_KEEPALIVE_MS", default_value_t = 15_000)]
    keepalive_ms: u64,
    /// Largest WebSocket message accepted.
    #[arg(long, env = "MOOR_MAX_FRAME_BYTES", default_value_t = 4 << 20)]
    max_frame_bytes: usize,
    /// Largest HTTP request body accepted.
    #[arg(long, env = "MOOR_MAX_BODY_BYTES", default_value_t = 1 << 20)]
    max_body_bytes: usize,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Copy a SQLite database into an empty Postgres database (stop moord first).
    MigrateStore {
        /// Source, e.g. sqlite:moor-data/moor.db
        #[arg(long)]
        from: String,
        /// Destination, e.g. postgres://moor@db/moor
        #[arg(long, hide_env_values = true)]
        to: String,
    },
}

impl Config {
    fn into_server_config(self) -> ServerConfig {
        let ms = Duration::from_millis;
        let mut c = ServerConfig::default();
        c.data_dir = self.data_dir;
        c.database_url = self.database_url;
        c.node_id = self.node_id;
        c.admin_token = self.admin_token;
        c.public_url = self.public_url;
        c.heartbeat_interval = ms(self.heartbeat_interval_ms.max(1));
        c.idle_timeout = ms(self.idle_timeout_ms.max(1));
        c.bridge_max_lifetime = ms(self.bridge_max_lifetime_ms);
        c.move_notice = ms(self.move_notice_ms);
        c.sse_lifetime = ms(self.sse_lifetime_ms);
        c.keepalive = ms(self.keepalive_ms.max(1));
        c.max_frame_bytes = self.max_frame_bytes;
        c.max_body_bytes = self.max_body_bytes;
        c
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "moor_server=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Some(Command::MigrateStore { from, to }) = &config.command {
        let n = moor_server::store::migrate::copy(from, to).await?;
        println!(
            "copied {} sessions, {} entries, {} producer marks, {} checkpoints into {}",
            n.sessions,
            n.entries,
            n.producers,
            n.checkpoints,
            moor_server::store::redact_url(to)
        );
        return Ok(());
    }
    let listen = config.listen.clone();
    let data_dir = config.data_dir.clone();
    let server = Server::build(config.into_server_config()).await?;
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .with_context(|| format!("listen on {listen}"))?;
    let addr = listener.local_addr()?;
    println!("moord listening on http://{addr}");
    match server.new_admin_token() {
        Some(token) => {
            println!("web: http://{addr}/#token={token}");
            println!(
                "admin token (saved in {}): {token}",
                data_dir.join("admin.token").display()
            );
        }
        None => println!(
            "web: http://{addr}/ (admin token in {})",
            data_dir.join("admin.token").display()
        ),
    }
    println!(
        "attach an agent: MOOR_TOKEN=$(cat {}) moor run --server http://{addr} -- <command>",
        data_dir.join("admin.token").display()
    );
    let shutdown = CancellationToken::new();
    tokio::spawn(signal_shutdown(shutdown.clone()));
    server.serve(listener, shutdown).await
}

async fn signal_shutdown(token: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    tracing::info!("shutting down: moving bridges, ending streams, finishing commits");
    token.cancel();
}
