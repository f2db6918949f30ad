//! Plain configuration for the bridge, and the few pure helpers that turn what a person typed
//! (a server URL, maybe a session name, maybe a state dir) into what the bridge uses.
//!
//! No clap here: `main.rs` maps its flags onto [`BridgeConfig`], and tests build it directly.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rand::Rng;

use moor_protocol::SessionId;

use crate::adapter::{AdapterMode, AgentOptions};
use crate::backoff::BackoffConfig;
use crate::error::BridgeError;

/// Default `moord` address.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7070";
/// Path of the bridge WebSocket endpoint on a `moord` base URL.
pub const BRIDGE_PATH: &str = "/api/v1/bridge";

/// The bearer token for `moord`. `Debug` never prints it.
///
/// A token from `moor login` renews itself: clones share the current value, a background task
/// ([`Token::keep_fresh`]) refreshes it before it expires, and the link asks for a refresh
/// ([`Token::refresh`]) when the server answers 401, then reconnects with the new value.
#[derive(Clone, Default)]
pub struct Token {
    value: Arc<RwLock<String>>,
    refresher: Option<crate::login::Refresher>,
}

impl Token {
    /// Wrap a token string.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            value: Arc::new(RwLock::new(token.into())),
            refresher: None,
        }
    }

    /// A token kept fresh by `refresher`.
    pub fn refreshing(refresher: crate::login::Refresher) -> Self {
        Self {
            value: refresher.value(),
            refresher: Some(refresher),
        }
    }

    /// The secret itself, for the `Authorization` header only.
    pub fn expose(&self) -> String {
        self.value.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the secret (a renewed fixed credential); every holder of this token sees it.
    pub fn replace(&self, token: impl Into<String>) {
        *self.value.write().unwrap_or_else(|p| p.into_inner()) = token.into();
    }

    /// Whether no token was given.
    pub fn is_empty(&self) -> bool {
        self.expose().trim().is_empty()
    }

    /// Renews the token now (after a 401); false when it cannot be renewed.
    pub async fn refresh(&self) -> bool {
        match &self.refresher {
            Some(r) => r.refresh().await.is_ok(),
            None => false,
        }
    }

    /// Renews the token before each expiry until `shutdown` (no-op for a fixed token).
    pub fn keep_fresh(&self, shutdown: tokio_util::sync::CancellationToken) {
        if let Some(r) = &self.refresher {
            tokio::spawn(r.clone().run(shutdown));
        }
    }
}

impl PartialEq for Token {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for Token {}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Timings and limits of the link to `moord`. Tests shrink the timings to milliseconds.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// Reconnect backoff, including after how long a connection counts as stable.
    pub backoff: BackoffConfig,
    /// TCP connect + WebSocket upgrade + `Welcome` must complete within this.
    pub connect_timeout: Duration,
    /// Most entries per `Entries` frame.
    pub batch_max: usize,
    /// Most bytes of entry JSON per `Entries` frame (a single larger entry is still sent alone).
    pub batch_max_bytes: usize,
    /// Most entries sent and not yet acked.
    pub window: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            backoff: BackoffConfig::default(),
            connect_timeout: Duration::from_secs(10),
            batch_max: 1000,
            batch_max_bytes: 512 * 1024,
            window: 20_000,
        }
    }
}

/// Everything `moor run` needs, with no CLI parsing attached.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// `moord` base URL: `http(s)://` or `ws(s)://`, optionally already ending in [`BRIDGE_PATH`].
    /// Several URLs separated by commas name nodes of one deployment (sharing a Postgres
    /// database): the link moves to the next one whenever a connection fails.
    pub server: String,
    /// Bearer token (required).
    pub token: Token,
    /// Session name or id; `None` generates `<command basename>-<6 hex>`.
    pub session: Option<String>,
    /// The ended session this new one continues (`moor resume`), for `Hello.continues`.
    pub continues: Option<SessionId>,
    /// Where spools live; `None` means [`default_state_dir`].
    pub state_dir: Option<PathBuf>,
    /// The agent command and its arguments.
    pub command: Vec<String>,
    /// Link timings and limits.
    pub link: LinkConfig,
    /// Print `moor: ...` status lines on stderr.
    pub print_status: bool,
    /// Which adapter runs the agent.
    pub mode: AdapterMode,
    /// Adapter knobs (stall watchdog, auto-resume, whether a person is at the terminal).
    pub agent: AgentOptions,
    /// Serve `GET /metrics` (spool depth, link state) on this address (see [`crate::metrics`]).
    pub metrics_listen: Option<String>,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        Self {
            server: DEFAULT_SERVER.to_owned(),
            token: Token::default(),
            session: None,
            continues: None,
            state_dir: None,
            command: Vec::new(),
            link: LinkConfig::default(),
            print_status: true,
            mode: AdapterMode::Auto,
            agent: AgentOptions::default(),
            metrics_listen: None,
        }
    }
}

/// Map a `moord` base URL to its bridge WebSocket URL; a comma-separated list of base URLs maps
/// to the list of their bridge URLs, still comma-separated (see [`split_urls`]).
///
/// `http` becomes `ws` and `https` becomes `wss`; a URL without a scheme is taken as `http`.
pub fn bridge_ws_url(server: &str) -> Result<String, BridgeError> {
    match split_urls(server).as_slice() {
        [] => one_bridge_ws_url(server),
        [one] => one_bridge_ws_url(one),
        several => Ok(several
            .iter()
            .map(|u| one_bridge_ws_url(u))
            .collect::<Result<Vec<_>, _>>()?
            .join(",")),
    }
}

/// The URLs of a comma-separated list, trimmed, empty items dropped.
pub fn split_urls(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
        .collect()
}

fn one_bridge_ws_url(server: &str) -> Result<String, BridgeError> {
    let server = server.trim();
    let (scheme, rest) = match server.split_once("://") {
        Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest),
        None => ("http".to_owned(), server),
    };
    let ws_scheme = match scheme.as_str() {
        "http" | "ws" => "ws",
        "https" | "wss" => "wss",
        other => {
            return Err(BridgeError::Config(format!(
                "server URL {server:?} has scheme {other:?}; use http(s):// or ws(s)://"
            )))
        }
    };
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() {
        return Err(BridgeError::Config(format!(
            "server URL {server:?} has no host"
        )));
    }
    if rest.ends_with(BRIDGE_PATH) {
        Ok(format!("{ws_scheme}://{rest}"))
    } else {
        Ok(format!("{ws_scheme}://{rest}{BRIDGE_PATH}"))
    }
}

/// A duration as people type it: `1500ms`, `60s`, `10m`, `1h`; a bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 60s, 1500ms, 10m)"))?;
    let seconds = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => return Err(format!("unknown unit {other:?} in {text:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

/// `$XDG_STATE_HOME/moor`, else `~/.local/state/moor`.
pub fn default_state_dir() -> Result<PathBuf, BridgeError> {
    state_dir_from(
        std::env::var_os("XDG_STATE_HOME").map(PathBuf::from),
        std::env::var_os("HOME").map(PathBuf::from),
    )
}

fn state_dir_from(xdg: Option<PathBuf>, home: Option<PathBuf>) -> Result<PathBuf, BridgeError> {
    // The XDG spec says relative values are invalid and must be ignored.
    if let Some(xdg) = xdg.filter(|p| p.is_absolute()) {
        return Ok(xdg.join("moor"));
    }
    match home.filter(|p| !p.as_os_str().is_empty()) {
        Some(home) => Ok(home.join(".local").join("state").join("moor")),
        None => Err(BridgeError::Config(
            "neither XDG_STATE_HOME nor HOME is set; pass --state-dir or set MOOR_STATE_DIR".into(),
        )),
    }
}

/// A fresh session name: `<command basename>-<6 random hex digits>`.
pub fn generate_session_name(command: &[String]) -> String {
    let base = command
        .first()
        .and_then(|c| Path::new(c).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "agent".to_owned());
    let suffix: u32 = rand::thread_rng().gen_range(0..0x100_0000);
    format!("{base}-{suffix:06x}")
}

/// This machine's host name, for `AgentInfo.host`.
pub fn host_name() -> String {
    let uname = rustix::system::uname();
    let name = uname.nodename().to_string_lossy().into_owned();
    if name.is_empty() {
        "unknown".to_owned()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_and_ws_urls_map_to_the_bridge_endpoint() {
        let cases = [
            ("http://127.0.0.1:7070", "ws://127.0.0.1:7070/api/v1/bridge"),
            ("https://moor.example/", "wss://moor.example/api/v1/bridge"),
            ("ws://h:1", "ws://h:1/api/v1/bridge"),
            ("wss://h/prefix", "wss://h/prefix/api/v1/bridge"),
            ("ws://h:1/api/v1/bridge", "ws://h:1/api/v1/bridge"),
            ("localhost:7070", "ws://localhost:7070/api/v1/bridge"),
            ("HTTP://h", "ws://h/api/v1/bridge"),
        ];
        for (input, want) in cases {
            assert_eq!(bridge_ws_url(input).unwrap(), want, "{input}");
        }
        assert!(bridge_ws_url("ftp://h").is_err());
        assert!(bridge_ws_url("http://").is_err());
    }

    #[test]
    fn several_servers_map_to_several_bridge_urls() {
        assert_eq!(
            bridge_ws_url("http://a:1, https://b/ ,").unwrap(),
            "ws://a:1/api/v1/bridge,wss://b/api/v1/bridge"
        );
        assert_eq!(
            split_urls("ws://a/api/v1/bridge,ws://b/api/v1/bridge"),
            ["ws://a/api/v1/bridge", "ws://b/api/v1/bridge"]
        );
        assert_eq!(bridge_ws_url("http://a,").unwrap(), "ws://a/api/v1/bridge");
        assert!(bridge_ws_url("http://a,ftp://b").is_err());
    }

    #[test]
    fn state_dir_prefers_absolute_xdg_then_home() {
        let home = Some(PathBuf::from("/home/u"));
        assert_eq!(
            state_dir_from(Some("/x".into()), home.clone()).unwrap(),
            PathBuf::from("/x/moor")
        );
        assert_eq!(
            state_dir_from(Some("rel".into()), home.clone()).unwrap(),
            PathBuf::from("/home/u/.local/state/moor")
        );
        assert!(state_dir_from(None, None).is_err());
    }

    #[test]
    fn generated_session_names_use_the_command_basename() {
        let name = generate_session_name(&["/usr/bin/claude".into(), "-p".into()]);
        let (base, hex) = name.rsplit_once('-').unwrap();
        assert_eq!(base, "claude");
        assert_eq!(hex.len(), 6);
        assert!(hex.chars().all(|c| c.is_ascii_hexdigit()));
        assert!(generate_session_name(&[]).starts_with("agent-"));
    }

    #[test]
    fn durations_take_units_and_default_to_seconds() {
        assert_eq!(parse_duration("60").unwrap(), Duration::from_secs(60));
        assert_eq!(
            parse_duration("1500ms").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("0.5s").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5 days").is_err());
    }

    #[test]
    fn token_debug_is_redacted() {
        assert_eq!(format!("{:?}", Token::new("s3cret")), "Token(<redacted>)");
    }
}
