//! `moor login SERVER`: the device flow against `moord` (a short code and a QR code in the
//! terminal; a logged-in user approves it), the credentials file (mode 0600 in the user's config
//! dir), and the [`Refresher`] that renews the access token before it expires and after a 401.
//! Tokens are never printed or logged.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// Longest a login waits for approval (the server forgets the code after ten minutes).
const LOGIN_WAIT: Duration = Duration::from_secs(600);
/// Delay between refresh attempts that failed (server unreachable).
const RETRY: Duration = Duration::from_secs(1);

/// What `moor login` stores.
#[derive(Clone, Serialize, Deserialize)]
pub struct Credentials {
    /// The `moord` base URL these belong to.
    pub server: String,
    /// Current access token (JWT).
    pub access_token: String,
    /// Single-use refresh token.
    pub refresh_token: String,
    /// When the access token expires (unix seconds).
    pub expires_at: u64,
    /// Its lifetime as issued (seconds).
    pub lifetime: u64,
}

moor_protocol::debug_fields!(Credentials { server, expires_at });

#[derive(Deserialize)]
struct TokenPair {
    access_token: String,
    refresh_token: String,
    expires_in: u64,
}

impl Credentials {
    fn from_pair(server: &str, pair: TokenPair) -> Self {
        Self {
            server: server.trim_end_matches('/').to_owned(),
            access_token: pair.access_token,
            refresh_token: pair.refresh_token,
            expires_at: unix_now() + pair.expires_in,
            lifetime: pair.expires_in,
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `$MOOR_CONFIG_DIR`, else `$XDG_CONFIG_HOME/moor`, else `~/.config/moor`.
pub fn config_dir() -> Option<PathBuf> {
    let env = |k| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env("MOOR_CONFIG_DIR")
        .or_else(|| env("XDG_CONFIG_HOME").map(|d| d.join("moor")))
        .or_else(|| env("HOME").map(|h| h.join(".config").join("moor")))
}

/// Where the credentials for all servers live.
pub fn credentials_path() -> Option<PathBuf> {
    config_dir().map(|d| d.join("credentials.json"))
}

/// The stored credentials for `server`, if any.
pub fn load(path: &Path, server: &str) -> anyhow::Result<Option<Credentials>> {
    let all = load_all(path)?;
    let server = server.trim_end_matches('/');
    Ok(all.into_iter().find(|c| c.server == server))
}

fn load_all(path: &Path) -> anyhow::Result<Vec<Credentials>> {
    match std::fs::read(path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes).with_context(|| format!("parse {}", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
    }
}

/// Stores `creds` (replacing those for the same server), readable only by the user.
pub fn save(path: &Path, creds: &Credentials) -> anyhow::Result<()> {
    let mut all = load_all(path)?;
    all.retain(|c| c.server != creds.server);
    all.push(creds.clone());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let tmp = path.with_extension("json.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts
        .open(&tmp)
        .with_context(|| format!("create {}", tmp.display()))?;
    f.write_all(&serde_json::to_vec_pretty(&all)?)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("replace {}", path.display()))
}

#[derive(Deserialize)]
struct Grant {
    device_code: String,
    user_code: String,
    verification_uri: String,
    verification_uri_complete: String,
    interval: u64,
}

/// Runs the device flow: prints the code and a QR code to `out`, waits for approval, returns
/// the new credentials (not yet saved).
pub async fn device_login(
    server: &str,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<Credentials> {
    let server = server.trim_end_matches('/');
    let http = crate::tls::http_client()
        .build()
        .context("build an HTTP client")?;
    let grant: Grant = http
        .post(format!("{server}/api/v1/auth/device"))
        .send()
        .await
        .context("reach moord")?
        .error_for_status()
        .context("start a device login")?
        .json()
        .await
        .context("read the device grant")?;
    writeln!(
        out,
        "To approve this device, open {} while logged in and enter the code",
        grant.verification_uri
    )?;
    writeln!(out)?;
    writeln!(out, "    {}", grant.user_code)?;
    writeln!(out)?;
    writeln!(
        out,
        "or open {} (the code filled in), or scan this with your phone:",
        grant.verification_uri_complete
    )?;
    if let Ok(qr) = qrcode::QrCode::new(grant.verification_uri_complete.as_bytes()) {
        let art = qr
            .render::<qrcode::render::unicode::Dense1x2>()
            .quiet_zone(true)
            .build();
        writeln!(out, "{art}")?;
    }
    out.flush()?;
    let started = tokio::time::Instant::now();
    let interval = Duration::from_secs(grant.interval.max(1));
    while started.elapsed() < LOGIN_WAIT {
        tokio::time::sleep(interval).await;
        let resp = http
            .post(format!("{server}/api/v1/auth/device/token"))
            .json(&serde_json::json!({"device_code": grant.device_code}))
            .send()
            .await
            .context("reach moord")?;
        match resp.status().as_u16() {
            200 => {
                let pair: TokenPair = resp.json().await.context("read the tokens")?;
                return Ok(Credentials::from_pair(server, pair));
            }
            202 => {}
            403 => bail!("the login was denied in the web UI"),
            404 => bail!("the code expired or was used; run moor login again"),
            s => bail!("moord answered {s} while waiting for approval"),
        }
    }
    bail!(
        "nobody approved the code within {} minutes",
        LOGIN_WAIT.as_secs() / 60
    )
}

/// Keeps a login's access token fresh, and the credentials file current.
#[derive(Clone)]
pub struct Refresher {
    creds: Arc<tokio::sync::Mutex<Credentials>>,
    value: Arc<RwLock<String>>,
    path: Option<PathBuf>,
    http: reqwest::Client,
}

impl std::fmt::Debug for Refresher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Refresher { .. }")
    }
}

impl Refresher {
    /// Renews `creds`, saving each new pair to `path` (when given).
    pub fn new(creds: Credentials, path: Option<PathBuf>) -> Self {
        Self {
            value: Arc::new(RwLock::new(creds.access_token.clone())),
            creds: Arc::new(tokio::sync::Mutex::new(creds)),
            path,
            // Without the configured trust a refresh would fail; fall back to the default client
            // only if building it fails (it does not with a valid CA file).
            http: crate::tls::http_client().build().unwrap_or_default(),
        }
    }

    /// The shared current access token.
    pub(crate) fn value(&self) -> Arc<RwLock<String>> {
        self.value.clone()
    }

    /// Spends the refresh token for a new pair.
    pub async fn refresh(&self) -> anyhow::Result<()> {
        let mut creds = self.creds.lock().await;
        let resp = self
            .http
            .post(format!("{}/api/v1/auth/refresh", creds.server))
            .json(&serde_json::json!({"refresh_token": creds.refresh_token}))
            .send()
            .await
            .context("reach moord to refresh the token")?;
        if !resp.status().is_success() {
            bail!(
                "moord refused the refresh ({}); run moor login again",
                resp.status()
            );
        }
        let pair: TokenPair = resp.json().await.context("read the refreshed tokens")?;
        *creds = Credentials::from_pair(&creds.server.clone(), pair);
        *self.value.write().unwrap_or_else(|p| p.into_inner()) = creds.access_token.clone();
        if let Some(path) = &self.path {
            if let Err(e) = save(path, &creds) {
                tracing::warn!(error = ?e, "could not save the refreshed credentials");
            }
        }
        tracing::debug!(expires_at = creds.expires_at, "access token refreshed");
        Ok(())
    }

    /// Refreshes when two thirds of each token's lifetime have passed, until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let this = &self;
        let wait = move || async move {
            let c = this.creds.lock().await;
            renew_in(c.expires_at, c.lifetime, unix_now())
        };
        keep_renewing(wait, move || this.refresh(), shutdown).await;
    }
}

/// How long before renewing a token that expires at `expires_at` (unix seconds) after a life of
/// `lifetime` seconds, seen at `now`: two thirds into its life, half a second early because
/// expiries are whole seconds (a little early beats a little late), never sooner than 200 ms.
fn renew_in(expires_at: u64, lifetime: u64, now: u64) -> Duration {
    let refresh_at = expires_at.saturating_sub(lifetime / 3);
    let secs = refresh_at.saturating_sub(now);
    Duration::from_millis((secs * 1000).saturating_sub(500).max(200))
}

/// The renewal schedule, apart from HTTP and the wall clock so its timing runs on tokio's
/// (paused, in tests) clock: sleep as long as `wait` says, `renew`, and after a failed renewal
/// try again [`RETRY`] later, until `shutdown`.
async fn keep_renewing<W, WF, R, RF>(mut wait: W, mut renew: R, shutdown: CancellationToken)
where
    W: FnMut() -> WF,
    WF: std::future::Future<Output = Duration>,
    R: FnMut() -> RF,
    RF: std::future::Future<Output = anyhow::Result<()>>,
{
    loop {
        let wait = wait().await;
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        if let Err(e) = renew().await {
            tracing::warn!(error = %e, "token refresh failed; retrying");
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(RETRY) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_saved_per_server_and_private() {
        let dir = std::env::temp_dir().join(format!("moor-login-{}", uuid::Uuid::new_v4()));
        let path = dir.join("credentials.json");
        let c = |server: &str, t: &str| Credentials {
            server: server.into(),
            access_token: t.into(),
            refresh_token: format!("r-{t}"),
            expires_at: 1,
            lifetime: 1,
        };
        save(&path, &c("http://a", "1")).unwrap();
        save(&path, &c("http://b", "2")).unwrap();
        save(&path, &c("http://a", "3")).unwrap();
        assert_eq!(load(&path, "http://a/").unwrap().unwrap().access_token, "3");
        assert_eq!(load(&path, "http://b").unwrap().unwrap().access_token, "2");
        assert!(load(&path, "http://c").unwrap().is_none());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(!format!("{:?}", c("x", "secret")).contains("secret"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A token issuer on tokio's clock: whole-second expiries, like the server's.
    #[derive(Default)]
    struct Issuer {
        /// Expiry of the current token, seconds since the test started.
        expires_at: u64,
        /// Renewal attempts: (when, whether it succeeded).
        attempts: Vec<(Duration, bool)>,
        /// How many of the next attempts fail.
        failing: u32,
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_are_renewed_two_thirds_into_their_life_and_a_failed_renewal_is_retried_before_expiry(
    ) {
        // arrange: 900 s tokens; the first renewal attempt fails (server unreachable)
        const LIFETIME: u64 = 900;
        let start = tokio::time::Instant::now();
        let secs = move || start.elapsed().as_secs();
        let issuer = std::sync::Mutex::new(Issuer {
            expires_at: LIFETIME,
            failing: 1,
            ..Issuer::default()
        });
        let shutdown = CancellationToken::new();
        let wait = || async { renew_in(issuer.lock().unwrap().expires_at, LIFETIME, secs()) };
        let renew = || async {
            let mut i = issuer.lock().unwrap();
            let ok = i.failing == 0;
            i.failing = i.failing.saturating_sub(1);
            i.attempts.push((start.elapsed(), ok));
            if ok {
                i.expires_at = secs() + LIFETIME;
                if i.attempts.len() == 3 {
                    shutdown.cancel();
                }
                Ok(())
            } else {
                Err(anyhow::anyhow!("moord unreachable"))
            }
        };
        // act
        keep_renewing(wait, renew, shutdown.clone()).await;
        // assert
        let attempts = issuer.lock().unwrap().attempts.clone();
        let ms = Duration::from_millis;
        assert_eq!(
            attempts,
            [
                (ms(599_500), false),
                // after the retry pause the token is due: the shortest wait
                (ms(599_500) + RETRY + ms(200), true),
                // two thirds into the new token's life (issued at 600 s, whole seconds)
                (ms(1_200_200), true),
            ]
        );
        // every successful renewal came before the token it replaced expired
        assert!(attempts[1].0 < Duration::from_secs(LIFETIME));
        assert!(attempts[2].0 < Duration::from_secs(600 + LIFETIME));
    }

    #[test]
    fn an_overdue_token_is_renewed_almost_at_once() {
        assert_eq!(renew_in(100, 900, 5_000), Duration::from_millis(200));
    }
}
