//! The library's configuration: plain data, built by `main` from flags or by tests directly.
//! Imports nothing from the crate but the TLS file names; everything may read it.

use std::path::PathBuf;
use std::time::Duration;

use crate::tls::TlsFiles;

/// Issuer of access tokens unless configured otherwise.
pub const DEFAULT_TOKEN_ISSUER: &str = "moord";

/// Everything `serve` needs to know. `Default` is the zero-configuration setup.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Where the SQLite file and the admin token live.
    pub data_dir: PathBuf,
    /// Database URL; `None` means `sqlite:<data_dir>/moor.db`.
    pub database_url: Option<String>,
    /// How long the start waits for a database that cannot be reached yet.
    pub database_wait: Duration,
    /// This node's name among the nodes sharing a Postgres database (in notices and in
    /// `pg_stat_activity.application_name`); `None` generates one at start.
    pub node_id: Option<String>,
    /// The admin token; `None` means read `<data_dir>/admin.token`, creating it on first start.
    pub admin_token: Option<String>,
    /// The URL people open, used in links the server prints and hands to bridges.
    pub public_url: Option<String>,
    /// How often each side of a bridge or viewer socket sends a heartbeat.
    pub heartbeat_interval: Duration,
    /// Silence on a socket longer than this means it is dead.
    pub idle_timeout: Duration,
    /// A bridge's lease on its session lasts this long unless the node holding the socket
    /// renews it; after it, any node records the connection's end.
    pub bridge_lease: Duration,
    /// How often a node renews its bridges' leases and looks for expired ones (at most half
    /// of `bridge_lease`).
    pub bridge_lease_renew: Duration,
    /// A bridge connection is closed (after a `Move`) once it is this old; zero means never.
    pub bridge_max_lifetime: Duration,
    /// How long before the lifetime cap the bridge is told to move.
    pub move_notice: Duration,
    /// An SSE stream ends after this long (the client resumes); zero means never.
    pub sse_lifetime: Duration,
    /// Interval of SSE keep-alive comments and viewer WebSocket heartbeats.
    pub keepalive: Duration,
    /// How long an idle committer waits for other sessions' entries to join a group when
    /// several sessions are writing (zero: never waits).
    pub commit_window: Duration,
    /// Largest WebSocket message accepted.
    pub max_frame_bytes: usize,
    /// Largest HTTP request body accepted.
    pub max_body_bytes: usize,
    /// Most bytes of entries in one page read from the store (`/entries`, and each read behind
    /// an SSE stream or viewer socket); a page always holds at least one entry.
    pub max_page_bytes: u64,
    /// A viewer that takes no data for this long while some is waiting is disconnected.
    pub stall_timeout: Duration,
    /// SSE streams, viewer sockets and bridge sockets one account (not an administrator) may
    /// have open at once.
    pub max_streams_per_user: u32,
    /// How long shutdown waits for connections and commits to finish.
    pub shutdown_grace: Duration,
    /// Lifetime of JWT access tokens.
    pub access_token_ttl: Duration,
    /// Lifetime of refresh tokens (each use replaces the token).
    pub refresh_token_ttl: Duration,
    /// How long a spent refresh token may be presented again while its successor is unused.
    pub refresh_grace: Duration,
    /// `iss` of access tokens this server issues and accepts.
    pub token_issuer: String,
    /// Browser origins (`https://host[:port]`) besides the public URL's that may call the API
    /// (CORS) and open WebSockets.
    pub allowed_origins: Vec<String>,
    /// Take the client address from `X-Forwarded-For` (the entry the proxy appended last).
    /// Only behind a reverse proxy that sets it: otherwise clients choose their own address.
    pub trust_forwarded: bool,
    /// Requests a second per credential (or client address), on average.
    pub rate_limit_per_sec: f64,
    /// Requests allowed in a burst.
    pub rate_limit_burst: f64,
    /// How long the first-start setup code stays valid.
    pub setup_code_ttl: Duration,
    /// Serve HTTPS with this certificate and key instead of plain HTTP.
    pub tls: Option<TlsFiles>,
    /// Size limits of checkpoint uploads and downloads.
    pub checkpoints: CheckpointLimits,
    /// Most sessions one account may own; zero means no limit. Administrators have none.
    pub max_sessions_per_account: u64,
    /// Most of an account's sessions with a live bridge at once (per node); zero means no
    /// limit.
    pub max_live_sessions_per_account: u64,
    /// Most bytes of entry payloads the logs of an account's sessions may hold; zero means no
    /// limit.
    pub max_log_bytes_per_account: u64,
    /// Most bytes of checkpoint content (blobs) one account may have sent; zero means no limit.
    pub max_blob_bytes_per_account: u64,
    /// Bearer token that `GET /metrics` on the main address requires; without it (and
    /// without `metrics_listen`) metrics are not served.
    pub metrics_token: Option<String>,
    /// A separate address serving `GET /metrics` without a token.
    pub metrics_listen: Option<String>,
    /// The memory the server may use, exported as `moord_memory_budget_bytes`; `None` means
    /// the cgroup's limit if one is set, else none is exported.
    pub memory_budget_bytes: Option<u64>,
    /// Notifications: the outbox sender and its sinks.
    pub notify: NotifyConfig,
    /// Deleting old sessions.
    pub retention: RetentionConfig,
}

/// The retention policy and how its batches run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionConfig {
    /// Ended sessions are deleted this long after they ended; `None` keeps them forever (an
    /// owner may still delete one).
    pub keep_ended: Option<Duration>,
    /// How often a node runs retention batches (each node tries; one runs each batch).
    pub interval: Duration,
    /// Most entries one batch deletes (one transaction).
    pub batch_entries: u32,
    /// Most sessions one batch retires.
    pub batch_sessions: u32,
    /// Most batches one run does before waiting for the next interval.
    pub batches_per_run: u32,
    /// Raw terminal output and text deltas older than this are compacted; `None`: not by age.
    pub compact_after: Option<Duration>,
    /// A session's log is compacted, oldest first, while its payloads hold more than this many
    /// bytes; `None`: no cap.
    pub max_log_bytes: Option<u64>,
    /// A blob no checkpoint names any more is deleted this long after that, if still unnamed.
    pub blob_grace: Duration,
}

impl RetentionConfig {
    /// The server's bounds as a [`crate::store::Policy`], which a session's own can only make
    /// stricter.
    pub fn policy(&self) -> crate::store::Policy {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        crate::store::Policy {
            keep_ended_ms: self.keep_ended.map(ms),
            compact_after_ms: self.compact_after.map(ms),
            max_log_bytes: self.max_log_bytes,
        }
    }
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            keep_ended: None,
            interval: Duration::from_secs(60),
            batch_entries: 10_000,
            batch_sessions: 16,
            batches_per_run: 100,
            compact_after: Some(Duration::from_secs(7 * 86_400)),
            max_log_bytes: Some(1 << 30),
            blob_grace: Duration::from_secs(3_600),
        }
    }
}

/// How notifications are sent.
#[derive(Debug, Clone)]
pub struct NotifyConfig {
    /// The VAPID private key file (base64url P-256 scalar); `None` means
    /// `<data_dir>/vapid.key`, created (mode 0600) on first start.
    pub vapid_key_file: Option<PathBuf>,
    /// The VAPID `sub` claim: a `mailto:` or `https:` contact for push services.
    pub vapid_subject: String,
    /// Accept `http://` push endpoints on loopback addresses (local push services in tests);
    /// otherwise only `https://` endpoints are accepted.
    pub allow_loopback_http: bool,
    /// Whether this node sends notifications (several nodes may: each row goes to one).
    pub sender: bool,
    /// How often the sender looks at the outbox when no commit woke it.
    pub poll: Duration,
    /// A claimed outbox row goes back to the other senders after this long unless settled
    /// (its sender crashed).
    pub claim_ttl: Duration,
    /// Outbox rows older than this when claimed (an outage) are folded into one summary.
    pub stale_after: Duration,
    /// A lost bridge notifies only once it has been gone this long.
    pub bridge_lost_after: Duration,
    /// First retry delay of a failed delivery; doubled per attempt, capped at 64 times.
    pub retry_base: Duration,
    /// Failed attempts after which a notification is given up (with the last reason).
    pub max_attempts: u32,
    /// Timeout of one request to a push service.
    pub request_timeout: Duration,
    /// Sent and dropped outbox rows are kept this long for inspection, then deleted.
    pub keep: Duration,
    /// How long the one-use Approve / Deny links of ntfy and webhook notifications work.
    pub action_ttl: Duration,
    /// Privacy mode: push payloads carry only ids (the service worker fetches the text from
    /// this server when it shows the notification), and sinks get a text without details.
    pub private: bool,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self {
            vapid_key_file: None,
            vapid_subject: "mailto:admin@localhost".to_owned(),
            allow_loopback_http: false,
            sender: true,
            poll: Duration::from_secs(1),
            claim_ttl: Duration::from_secs(60),
            stale_after: Duration::from_secs(15 * 60),
            bridge_lost_after: Duration::from_secs(120),
            retry_base: Duration::from_secs(2),
            max_attempts: 8,
            request_timeout: Duration::from_secs(15),
            keep: Duration::from_secs(24 * 3600),
            action_ttl: Duration::from_secs(30 * 60),
            private: false,
        }
    }
}

/// Size limits of checkpoints: what one upload or one archive may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointLimits {
    /// Largest blob (one file's content, or a patch) accepted.
    pub max_blob_bytes: u64,
    /// Largest manifest accepted (read only once the caller is known to own the session).
    pub max_manifest_bytes: usize,
    /// Most bytes of file content one archive download may stream, counted from the stored
    /// sizes of its blobs.
    pub max_archive_bytes: u64,
}

impl Default for CheckpointLimits {
    fn default() -> Self {
        Self {
            max_blob_bytes: 64 << 20,
            max_manifest_bytes: 16 << 20,
            max_archive_bytes: 512 << 20,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("moor-data"),
            database_url: None,
            database_wait: Duration::from_secs(60),
            node_id: None,
            admin_token: None,
            public_url: None,
            heartbeat_interval: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            bridge_lease: Duration::from_secs(30),
            bridge_lease_renew: Duration::from_secs(10),
            bridge_max_lifetime: Duration::ZERO,
            move_notice: Duration::from_secs(5),
            sse_lifetime: Duration::ZERO,
            keepalive: Duration::from_secs(15),
            commit_window: Duration::from_millis(1),
            max_frame_bytes: 4 << 20,
            max_body_bytes: 1 << 20,
            max_page_bytes: 2 << 20,
            stall_timeout: Duration::from_secs(30),
            max_streams_per_user: 64,
            shutdown_grace: Duration::from_secs(10),
            access_token_ttl: Duration::from_secs(15 * 60),
            refresh_token_ttl: Duration::from_secs(30 * 24 * 3600),
            refresh_grace: Duration::from_secs(30),
            token_issuer: DEFAULT_TOKEN_ISSUER.to_owned(),
            allowed_origins: Vec::new(),
            trust_forwarded: false,
            rate_limit_per_sec: 200.0,
            rate_limit_burst: 2000.0,
            setup_code_ttl: Duration::from_secs(3600),
            tls: None,
            checkpoints: CheckpointLimits::default(),
            max_sessions_per_account: 1000,
            max_live_sessions_per_account: 32,
            max_log_bytes_per_account: 8 << 30,
            max_blob_bytes_per_account: 8 << 30,
            metrics_token: None,
            metrics_listen: None,
            memory_budget_bytes: None,
            notify: NotifyConfig::default(),
            retention: RetentionConfig::default(),
        }
    }
}

impl ServerConfig {
    /// The database URL in effect.
    pub fn database_url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| format!("sqlite:{}", self.data_dir.join("moor.db").display()))
    }

    /// The public URL in effect when listening on `addr`: the configured one, else
    /// `http://<addr>` (`https://` when serving TLS). No trailing slash.
    pub fn public_url_for(&self, addr: std::net::SocketAddr) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        self.public_url
            .clone()
            .unwrap_or_else(|| format!("{scheme}://{addr}"))
            .trim_end_matches('/')
            .to_owned()
    }

    /// The node id in effect: the configured one, else `node-<8 random hex digits>`.
    pub fn node_id(&self) -> String {
        match &self.node_id {
            Some(id) => id.clone(),
            None => format!("node-{:08x}", rand::random::<u32>()),
        }
    }
}
