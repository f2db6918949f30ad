//! `moord`'s command line: the flags and environment variables (`Config`), serving, and the
//! administration subcommands (`user`, `keys`, `export`, `backup`, `restore`, `migrate-store`). `main` only parses and calls
//! [`Config::run`]; everything here goes through the library's public API ([`Server`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tokio_util::sync::CancellationToken;

use crate::{Server, ServerConfig};

/// A line on stdout: a start-up line for the person or the supervisor that started `moord`, or
/// what a subcommand did. Unlike `println!`, it does not panic when stdout is a pipe whose reader
/// has gone (`moord | head -1`, a supervisor that stopped reading): the line is lost, `moord`
/// serves on, and a subcommand that did its work exits 0.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod backup;
mod export;
mod gc;
mod keys;
mod migrate;
mod user;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields` (with `message`) and
    /// the `span`s it happened in.
    Json,
}

/// Installs the log subscriber: `RUST_LOG`, else `moor_server=info`, written to `writer` in
/// `format`.
pub fn init_tracing<W>(writer: W, format: LogFormat)
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "moor_server=info".into()),
        )
        .with_writer(writer)
        // A failed write is reported with `eprintln!`, which panics when stderr is closed (the
        // terminal or the supervisor reading the log went away), killing whichever task logged:
        // the signal handler's first, so SIGTERM no longer stopped moord. The line is lost
        // either way.
        .log_internal_errors(false);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// The Mooring relay server.
#[derive(Debug, Parser)]
#[command(version, about)]
pub struct Config {
    /// Log lines as text or as JSON objects (one a line), on stderr.
    #[arg(
        long,
        env = "MOOR_LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true
    )]
    pub log_format: LogFormat,
    /// Address to listen on.
    #[arg(long, env = "MOOR_LISTEN", default_value = "127.0.0.1:7070")]
    listen: String,
    /// Directory for the SQLite database and the admin token.
    #[arg(
        long,
        env = "MOOR_DATA_DIR",
        default_value = "moor-data",
        global = true
    )]
    data_dir: PathBuf,
    /// Database URL (default: sqlite:<data-dir>/moor.db).
    #[arg(long, env = "MOOR_DATABASE_URL", hide_env_values = true, global = true)]
    database_url: Option<String>,
    /// How long to wait at start for a database that cannot be reached yet (not started, or
    /// restarting), in seconds, retrying with backoff and logging each attempt; any other
    /// database error ends the start at once (0: never wait).
    #[arg(long, env = "MOOR_DATABASE_WAIT_SECS", default_value_t = 60)]
    database_wait_secs: u64,
    /// This node's name among nodes sharing a Postgres database (default: generated).
    #[arg(long, env = "MOOR_NODE_ID")]
    node_id: Option<String>,
    /// Admin token to use instead of <data-dir>/admin.token.
    #[arg(long, env = "MOOR_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// Bearer token a Prometheus scraper presents for `GET /metrics` on the main address
    /// (without it, and without --metrics-listen, metrics are not served).
    #[arg(long, env = "MOOR_METRICS_TOKEN", hide_env_values = true)]
    metrics_token: Option<String>,
    /// Separate address serving `GET /metrics` without a token (keep it private).
    #[arg(long, env = "MOOR_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    /// Memory the server may use, in bytes, exported as `moord_memory_budget_bytes` (default:
    /// the cgroup's memory limit if one is set, else not exported).
    #[arg(long, env = "MOOR_MEMORY_BUDGET_BYTES")]
    memory_budget_bytes: Option<u64>,
    /// URL people open, if not http://<listen>.
    #[arg(long, env = "MOOR_PUBLIC_URL")]
    public_url: Option<String>,
    /// Heartbeat interval on bridge sockets.
    #[arg(long, env = "MOOR_HEARTBEAT_INTERVAL_MS", default_value_t = 10_000)]
    heartbeat_interval_ms: u64,
    /// Silence after which a socket is considered dead.
    #[arg(long, env = "MOOR_IDLE_TIMEOUT_MS", default_value_t = 30_000)]
    idle_timeout_ms: u64,
    /// How long a bridge's lease lasts unless its node renews it; after it, another node (or
    /// this one, restarted) records the connection's end.
    #[arg(long, env = "MOOR_BRIDGE_LEASE_MS", default_value_t = 30_000)]
    bridge_lease_ms: u64,
    /// How often a node renews its bridges' leases and looks for expired ones (at most half
    /// the lease).
    #[arg(long, env = "MOOR_BRIDGE_LEASE_RENEW_MS", default_value_t = 10_000)]
    bridge_lease_renew_ms: u64,
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
    /// How long an idle committer waits for other sessions' entries to join one transaction
    /// while several sessions are writing (0 = never waits); a lone session never waits.
    #[arg(long, env = "MOOR_COMMIT_WINDOW_MS", default_value_t = 1)]
    commit_window_ms: u64,
    /// Largest WebSocket message accepted.
    #[arg(long, env = "MOOR_MAX_FRAME_BYTES", default_value_t = 4 << 20)]
    max_frame_bytes: usize,
    /// Largest HTTP request body accepted.
    #[arg(long, env = "MOOR_MAX_BODY_BYTES", default_value_t = 1 << 20)]
    max_body_bytes: usize,
    /// Largest checkpoint blob (one file's content) accepted.
    #[arg(long, env = "MOOR_MAX_BLOB_BYTES", default_value_t = 64 << 20)]
    max_blob_bytes: u64,
    /// Largest checkpoint manifest accepted.
    #[arg(long, env = "MOOR_MAX_MANIFEST_BYTES", default_value_t = 16 << 20)]
    max_manifest_bytes: usize,
    /// Most bytes of file content one checkpoint archive download may hold.
    #[arg(long, env = "MOOR_MAX_ARCHIVE_BYTES", default_value_t = 512 << 20)]
    max_archive_bytes: u64,
    /// Most bytes of entries in one page of history (`/entries`, and each store read behind an
    /// SSE stream or viewer socket); a page always holds at least one entry.
    #[arg(long, env = "MOOR_MAX_PAGE_BYTES", default_value_t = 2 << 20)]
    max_page_bytes: u64,
    /// A viewer (SSE or WebSocket) that takes no data for this long while some is waiting is
    /// disconnected, to resume from its cursor.
    #[arg(long, env = "MOOR_STALL_TIMEOUT_MS", default_value_t = 30_000)]
    stall_timeout_ms: u64,
    /// SSE streams, viewer sockets and bridge sockets one account (administrators aside) may
    /// have open at once; more are answered 429.
    #[arg(long, env = "MOOR_MAX_STREAMS_PER_USER", default_value_t = 64)]
    max_streams_per_user: u32,
    /// Lifetime of access tokens, in seconds.
    #[arg(long, env = "MOOR_ACCESS_TOKEN_TTL_SECS", default_value_t = 900)]
    access_token_ttl_secs: u64,
    /// Lifetime of refresh tokens, in seconds (each use replaces the token).
    #[arg(long, env = "MOOR_REFRESH_TOKEN_TTL_SECS", default_value_t = 30 * 24 * 3600)]
    refresh_token_ttl_secs: u64,
    /// How long after a refresh token was spent it may be presented again, in milliseconds,
    /// while the token that replaced it is still unused (the client lost the answer); any
    /// other second use revokes the login (0: never).
    #[arg(long, env = "MOOR_REFRESH_GRACE_MS", default_value_t = 30_000)]
    refresh_grace_ms: u64,
    /// Browser origins besides the public URL's allowed to call the API and open sockets
    /// (comma-separated, e.g. https://app.example).
    #[arg(long, env = "MOOR_ALLOWED_ORIGINS", value_delimiter = ',')]
    allowed_origins: Vec<String>,
    /// Trust X-Forwarded-For for client addresses (only behind a reverse proxy that sets it).
    #[arg(long, env = "MOOR_TRUST_FORWARDED")]
    trust_forwarded: bool,
    /// Requests a second per credential or client address (average; bursts of 10x).
    #[arg(long, env = "MOOR_RATE_LIMIT", default_value_t = 200.0)]
    rate_limit: f64,
    /// Lifetime of the first-start setup link, in seconds (a restart prints a new one).
    #[arg(long, env = "MOOR_SETUP_CODE_TTL_SECS", default_value_t = 3600)]
    setup_code_ttl_secs: u64,
    /// Most sessions one account may own (0: no limit; administrators have none).
    #[arg(long, env = "MOOR_MAX_SESSIONS_PER_ACCOUNT", default_value_t = 1000)]
    max_sessions_per_account: u64,
    /// Most sessions of one account with a live bridge at once, per node (0: no limit).
    #[arg(long, env = "MOOR_MAX_LIVE_SESSIONS_PER_ACCOUNT", default_value_t = 32)]
    max_live_sessions_per_account: u64,
    /// Most bytes of entry payloads the logs of one account's sessions may hold (0: no limit).
    #[arg(long, env = "MOOR_MAX_LOG_BYTES_PER_ACCOUNT", default_value_t = 8 << 30)]
    max_log_bytes_per_account: u64,
    /// Most bytes of checkpoint content one account may have stored (0: no limit).
    #[arg(long, env = "MOOR_MAX_BLOB_BYTES_PER_ACCOUNT", default_value_t = 8 << 30)]
    max_blob_bytes_per_account: u64,
    /// Serve HTTPS and WSS with this PEM certificate chain (with --tls-key).
    #[arg(long, env = "MOOR_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, env = "MOOR_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// VAPID private key file for Web Push (default: <data-dir>/vapid.key, created on first start).
    #[arg(long, env = "MOOR_VAPID_KEY_FILE")]
    vapid_key_file: Option<PathBuf>,
    /// Contact push services see in the VAPID token (mailto: or https: URL).
    #[arg(
        long,
        env = "MOOR_VAPID_SUBJECT",
        default_value = "mailto:admin@localhost"
    )]
    vapid_subject: String,
    /// Accept http:// push endpoints on loopback addresses (local test push services): true/false.
    #[arg(long, env = "MOOR_PUSH_ALLOW_LOOPBACK_HTTP", default_value_t = false, action = clap::ArgAction::Set)]
    push_allow_loopback_http: bool,
    /// Run the notification sender on this node (false: leave the outbox to other nodes).
    #[arg(long, env = "MOOR_NOTIFY_SENDER", default_value_t = true, action = clap::ArgAction::Set)]
    notify_sender: bool,
    /// How often the notification sender looks at the outbox, in milliseconds.
    #[arg(long, env = "MOOR_NOTIFY_POLL_MS", default_value_t = 1000)]
    notify_poll_ms: u64,
    /// Notifications older than this when sent (after an outage) are folded into one summary.
    #[arg(long, env = "MOOR_NOTIFY_STALE_AFTER_MS", default_value_t = 15 * 60 * 1000)]
    notify_stale_after_ms: u64,
    /// A lost bridge notifies once it has been gone this long, in milliseconds.
    #[arg(
        long,
        env = "MOOR_NOTIFY_BRIDGE_LOST_AFTER_MS",
        default_value_t = 120_000
    )]
    notify_bridge_lost_after_ms: u64,
    /// First retry delay of a failed notification, in milliseconds (doubles per attempt).
    #[arg(long, env = "MOOR_NOTIFY_RETRY_MS", default_value_t = 2000)]
    notify_retry_ms: u64,
    /// Failed attempts after which a notification is given up.
    #[arg(long, env = "MOOR_NOTIFY_MAX_ATTEMPTS", default_value_t = 8)]
    notify_max_attempts: u32,
    /// A claimed notification returns to other nodes after this long unless sent, in ms.
    #[arg(long, env = "MOOR_NOTIFY_CLAIM_TTL_MS", default_value_t = 60_000)]
    notify_claim_ttl_ms: u64,
    /// How long sent and dropped notifications stay in the outbox for inspection, in ms.
    #[arg(long, env = "MOOR_NOTIFY_KEEP_MS", default_value_t = 24 * 3600 * 1000)]
    notify_keep_ms: u64,
    /// How long the Approve / Deny links of ntfy and webhook notifications work, in seconds.
    #[arg(long, env = "MOOR_NOTIFY_ACTION_TTL_SECS", default_value_t = 1800)]
    notify_action_ttl_secs: u64,
    /// Privacy mode: notifications leave this server with ids only, no session text (true/false).
    #[arg(long, env = "MOOR_NOTIFY_PRIVATE", default_value_t = false, action = clap::ArgAction::Set)]
    notify_private: bool,
    /// Delete ended sessions this many days after they ended (fractions allowed; 0: keep them).
    #[arg(long, env = "MOOR_RETENTION_DAYS", default_value_t = 0.0)]
    retention_days: f64,
    /// How often this node runs retention batches, in milliseconds.
    #[arg(long, env = "MOOR_RETENTION_INTERVAL_MS", default_value_t = 60_000)]
    retention_interval_ms: u64,
    /// Most entries one retention batch (one transaction) deletes.
    #[arg(long, env = "MOOR_RETENTION_BATCH_ENTRIES", default_value_t = 10_000)]
    retention_batch_entries: u32,
    /// Compact raw terminal output and streamed text deltas older than this many hours
    /// (fractions allowed; 0: not by age).
    #[arg(long, env = "MOOR_COMPACT_AFTER_HOURS", default_value_t = 168.0)]
    compact_after_hours: f64,
    /// Compact a session's log, oldest first, while its payloads hold more than this many
    /// bytes (0: no cap).
    #[arg(long, env = "MOOR_MAX_LOG_BYTES_PER_SESSION", default_value_t = 1 << 30)]
    max_log_bytes_per_session: u64,
    /// Delete a blob no checkpoint names any more this many seconds after that, if no
    /// checkpoint names it by then (a checkpoint being saved meanwhile keeps it).
    #[arg(long, env = "MOOR_BLOB_GRACE_SECS", default_value_t = 3_600)]
    blob_grace_secs: u64,
    #[command(subcommand)]
    command: Option<Command>,
}

/// Administration; without a subcommand, moord serves.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Manage users.
    User {
        #[command(subcommand)]
        cmd: user::UserCommand,
    },
    /// Manage the JWT signing keys in <data-dir>/jwt-keys.json.
    Keys {
        #[command(subcommand)]
        cmd: keys::KeysCommand,
    },
    /// Copy a SQLite deployment (database, blobs, keys) into a new directory, while moord
    /// serves.
    Backup {
        /// The new directory.
        path: PathBuf,
    },
    /// Put a backup into a fresh data dir (--data-dir), migrating it to this release.
    Restore {
        /// The backup directory.
        path: PathBuf,
    },
    /// Write a session's log as JSONL or Markdown (to stdout or --output).
    Export(export::ExportArgs),
    /// Run retention and compaction once now, with the retention flags, and say what they did
    /// (works while moord serves).
    Gc,
    /// Copy a SQLite database into an empty Postgres database (stop moord first).
    MigrateStore {
        /// Source, e.g. sqlite:moor-data/moor.db
        #[arg(long)]
        from: String,
        /// Destination, e.g. postgres://moor@db/moor
        #[arg(long)]
        to: String,
    },
}

impl Config {
    /// The library configuration these flags describe.
    pub fn into_server_config(self) -> ServerConfig {
        let ms = Duration::from_millis;
        ServerConfig {
            data_dir: self.data_dir,
            database_url: self.database_url,
            database_wait: Duration::from_secs(self.database_wait_secs),
            node_id: self.node_id,
            admin_token: self.admin_token,
            public_url: self.public_url,
            heartbeat_interval: ms(self.heartbeat_interval_ms.max(1)),
            idle_timeout: ms(self.idle_timeout_ms.max(1)),
            bridge_lease: ms(self.bridge_lease_ms.max(2)),
            bridge_lease_renew: ms(self.bridge_lease_renew_ms.max(1)),
            bridge_max_lifetime: ms(self.bridge_max_lifetime_ms),
            move_notice: ms(self.move_notice_ms),
            sse_lifetime: ms(self.sse_lifetime_ms),
            keepalive: ms(self.keepalive_ms.max(1)),
            commit_window: ms(self.commit_window_ms),
            max_frame_bytes: self.max_frame_bytes,
            max_body_bytes: self.max_body_bytes,
            checkpoints: crate::config::CheckpointLimits {
                max_blob_bytes: self.max_blob_bytes,
                max_manifest_bytes: self.max_manifest_bytes,
                max_archive_bytes: self.max_archive_bytes,
            },
            max_page_bytes: self.max_page_bytes.max(1),
            stall_timeout: ms(self.stall_timeout_ms.max(1)),
            max_streams_per_user: self.max_streams_per_user.max(1),
            access_token_ttl: Duration::from_secs(self.access_token_ttl_secs.max(1)),
            refresh_token_ttl: Duration::from_secs(self.refresh_token_ttl_secs.max(1)),
            refresh_grace: ms(self.refresh_grace_ms),
            allowed_origins: self.allowed_origins,
            trust_forwarded: self.trust_forwarded,
            rate_limit_per_sec: self.rate_limit,
            rate_limit_burst: self.rate_limit * 10.0,
            setup_code_ttl: Duration::from_secs(self.setup_code_ttl_secs.max(1)),
            max_sessions_per_account: self.max_sessions_per_account,
            max_live_sessions_per_account: self.max_live_sessions_per_account,
            max_log_bytes_per_account: self.max_log_bytes_per_account,
            max_blob_bytes_per_account: self.max_blob_bytes_per_account,
            metrics_token: self.metrics_token,
            metrics_listen: self.metrics_listen,
            memory_budget_bytes: self.memory_budget_bytes,
            notify: crate::config::NotifyConfig {
                vapid_key_file: self.vapid_key_file,
                vapid_subject: self.vapid_subject,
                allow_loopback_http: self.push_allow_loopback_http,
                sender: self.notify_sender,
                poll: ms(self.notify_poll_ms.max(1)),
                claim_ttl: ms(self.notify_claim_ttl_ms.max(1)),
                stale_after: ms(self.notify_stale_after_ms),
                bridge_lost_after: ms(self.notify_bridge_lost_after_ms),
                retry_base: ms(self.notify_retry_ms.max(1)),
                max_attempts: self.notify_max_attempts.max(1),
                keep: ms(self.notify_keep_ms),
                action_ttl: Duration::from_secs(self.notify_action_ttl_secs.max(1)),
                private: self.notify_private,
                ..crate::config::NotifyConfig::default()
            },
            retention: crate::config::RetentionConfig {
                keep_ended: (self.retention_days > 0.0)
                    .then(|| Duration::try_from_secs_f64(self.retention_days * 86_400.0).ok())
                    .flatten(),
                interval: ms(self.retention_interval_ms.max(1)),
                batch_entries: self.retention_batch_entries.max(1),
                compact_after: (self.compact_after_hours > 0.0)
                    .then(|| Duration::try_from_secs_f64(self.compact_after_hours * 3_600.0).ok())
                    .flatten(),
                max_log_bytes: (self.max_log_bytes_per_session > 0)
                    .then_some(self.max_log_bytes_per_session),
                blob_grace: Duration::from_secs(self.blob_grace_secs),
                ..crate::config::RetentionConfig::default()
            },
            tls: self
                .tls_cert
                .zip(self.tls_key)
                .map(|(cert, key)| crate::tls::TlsFiles { cert, key }),
            ..ServerConfig::default()
        }
    }

    /// Runs what the flags ask for: an administration command, else the server until SIGTERM
    /// or SIGINT (caught by `signals`, installed before anything else so that a signal during
    /// start-up stops the server cleanly too).
    pub async fn run(self, signals: Signals) -> anyhow::Result<()> {
        let mut config = self;
        if let Some(command) = config.command.take() {
            let server_config = config.into_server_config();
            return match command {
                Command::MigrateStore { from, to } => migrate::run(&from, &to).await,
                Command::Keys { cmd } => keys::run(cmd, server_config),
                Command::Export(args) => export::run(args, server_config).await,
                Command::Backup { path } => backup::backup(path, server_config).await,
                Command::Restore { path } => backup::restore(path, server_config).await,
                Command::Gc => gc::run(server_config).await,
                Command::User { cmd } => user::run(cmd, server_config).await,
            };
        }
        let listen = config.listen.clone();
        let data_dir = config.data_dir.clone();
        let server_config = config.into_server_config();
        let tls = server_config.tls.is_some();
        let shutdown = CancellationToken::new();
        tokio::spawn(signals.shutdown(shutdown.clone()));
        // Opening the store may wait a minute for the database: a signal meanwhile ends the
        // start (nothing is served yet, nothing to drain).
        let mut server = tokio::select! {
            built = Server::build(server_config.clone()) => built?,
            _ = shutdown.cancelled() => {
                tracing::info!("stopped before serving");
                return Ok(());
            }
        };
        if let Some(addr) = &server_config.metrics_listen {
            let metrics = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("listen for metrics on {addr}"))?;
            say!("metrics on http://{}/metrics", metrics.local_addr()?);
            server = server.with_metrics_listener(metrics);
        }
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .with_context(|| format!("listen on {listen}"))?;
        let addr = listener.local_addr()?;
        let scheme = if tls { "https" } else { "http" };
        let public_url = server_config.public_url_for(addr);
        say!("moord listening on {scheme}://{addr}");
        match server.setup_link(addr) {
            Some(link) => say!(
                "first start: create the administrator account at {link} (one use, valid {}; \
             a restart prints a new link)",
                human(server_config.setup_code_ttl)
            ),
            None => say!("web: {public_url}/"),
        }
        let token_file = data_dir.join("admin.token");
        if server.new_admin_token().is_some() {
            say!(
                "bootstrap admin token (for scripts) saved in {}",
                token_file.display()
            );
        }
        say!(
            "attach an agent: moor login {public_url} && moor run -- <command> \
         (or MOOR_TOKEN=$(cat {}) moor run --server {public_url} -- <command>)",
            token_file.display()
        );
        server.serve(listener, shutdown).await
    }
}

/// `1 h`, `15 min`, `30 s`.
fn human(d: Duration) -> String {
    match d.as_secs() {
        s if s >= 3600 && s % 3600 == 0 => format!("{} h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// SIGTERM and SIGINT, caught from the moment [`Signals::install`] returns: from then on they
/// no longer kill the process, and one received before [`Signals::shutdown`] waits is kept.
#[derive(Debug)]
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers; call it first thing in the runtime.
    pub fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Cancels `token` at the first SIGTERM or SIGINT (already received or to come).
    pub async fn shutdown(mut self, token: CancellationToken) {
        tokio::select! { _ = self.term.recv() => {}, _ = self.int.recv() => {} }
        token.cancel();
        tracing::info!("shutting down: moving bridges, ending streams, finishing commits");
    }
}
