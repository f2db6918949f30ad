//! The web client in a real Chromium (Debian's, driven by playwright-core) against the real
//! `moord` and the real `moor`: `web/tests/browser.mjs` runs the browser scenarios and
//! `web/tests/browser-reattach.mjs` those of re-attaching (back/forward and the back/forward
//! cache, a discarded tab, a sleeping phone, a cut or half-open stream, paging a long transcript)
//! and of checkpoints, and `web/tests/browser-phone.mjs` the phone's (what the banners say
//! offline, with the server unreachable and after access was removed, an ended session, the
//! terminal's helper keys, touch targets); these tests own the processes. They start `moord` (with a short
//! keep-alive, so the page's watchdog interval is short) and serve the script's requests to
//! start, kill and restart bridges — plain line agents, an echo agent, a PTY shell, the real
//! Claude Code CLI against the fake Messages API, a shell agent in a git work tree that `moor`
//! checkpoints, a fault proxy in front of `moord` — and to run the real `moor login` (device
//! login approved in the page), over a line protocol on the script's stdout (`@rpc {json}`) and
//! stdin (one JSON answer per line). A second `moord` whose access tokens live three seconds
//! (and whose SSE streams end every two) serves the scenario in which a logged-in page outlives
//! its tokens. Rust owns the processes so the browser tests reuse the harness the other
//! end-to-end tests trust (`TestServer`, `TestBridge`, `ClaudeEnv`); Node owns the browser.
//!
//! Needs `scripts/build-web` (web/dist embedded in moord, web/node_modules) and
//! `/usr/bin/chromium` (`scripts/install-chromium`); `scripts/test` does both. Screenshots go to
//! `web/artifacts/` (gitignored).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use moor_e2e::http::RawBody;
use moor_e2e::util::{bin_path, git_work_tree};
use moor_e2e::{
    Api, BridgeOpts, ClaudeEnv, Device, FaultProxy, PushService, ServerOpts, TestBridge, TestServer,
};
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

/// The whole browser suite must finish within this (a guard against hangs, not a pace).
const SUITE_TIMEOUT: Duration = Duration::from_secs(600);
/// Keep-alive of the test server: the page's watchdog declares a silent stream dead after
/// two of these plus a second.
const KEEPALIVE_MS: u64 = 500;
/// Access-token lifetime of the second server.
const SHORT_TOKEN_TTL_SECS: u64 = 3;
/// How long `moor login` may take to show its link, or to finish once approved.
const LOGIN_WAIT: Duration = Duration::from_secs(30);

fn web_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../web")
}

/// A git repository with one commit of a few files, for an agent that `moor` checkpoints.
fn work_tree() -> (TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("moor-e2e-web-ckpt-")
        .tempdir()
        .expect("temp dir");
    let repo = dir.path().join("work");
    std::fs::create_dir_all(&repo).expect("mkdir");
    git_work_tree(
        &repo,
        &[
            ("README.md", b"# project\n"),
            ("gone.txt", b"to be deleted\n"),
            ("src/main.rs", b"fn main() {\n    println!(\"hello\");\n}\n"),
        ],
    );
    (dir, repo)
}

/// A `moor login` waiting for approval, and the config dir its credentials land in.
struct Login {
    child: tokio::process::Child,
    config: tempfile::TempDir,
}

struct Bridges<'a> {
    server_addr: std::net::SocketAddr,
    url: String,
    token: String,
    /// The short-token server's URL and admin token.
    short: (String, String),
    running: HashMap<String, TestBridge>,
    agents: HashMap<String, Vec<String>>,
    claude: HashMap<String, ClaudeEnv>,
    login: Option<Login>,
    server: &'a TestServer,
    trees: Vec<TempDir>,
    proxy: Option<FaultProxy>,
    /// The local push service `moord` sends Web Push to, and the devices subscribed there by
    /// user (a headless browser cannot subscribe to a real push service).
    push: PushService,
    devices: HashMap<String, Device>,
}

impl Bridges<'_> {
    async fn handle(&mut self, op: &str, args: &Value) -> Result<Value, String> {
        let session = args["session"].as_str().unwrap_or_default().to_owned();
        let (url, token) = if args["server"] == "short" {
            self.short.clone()
        } else {
            (self.url.clone(), self.token.clone())
        };
        match op {
            "lines" | "echo" => {
                let agent: Vec<String> = if op == "echo" {
                    vec!["echo".into()]
                } else {
                    let mut a: Vec<String> = vec![
                        "count".into(),
                        args["count"].as_u64().unwrap_or(100).to_string(),
                        "--interval-ms".into(),
                        args["interval_ms"].as_u64().unwrap_or(0).to_string(),
                    ];
                    // With `echo_inputs: K` the agent also echoes inputs and ends only after K.
                    if let Some(k) = args["echo_inputs"].as_u64() {
                        a.extend(["--echo-inputs".into(), k.to_string()]);
                    }
                    a
                };
                let argv: Vec<&str> = agent.iter().map(String::as_str).collect();
                let bridge = TestBridge::start(&url, &token, &session, &argv);
                self.agents.insert(session.clone(), agent);
                self.running.insert(session, bridge);
                Ok(json!({}))
            }
            "pty" => {
                let script = args["script"].as_str().unwrap_or("bash").to_owned();
                let command = vec!["bash".to_owned(), "-c".to_owned(), script];
                let bridge = BridgeOpts::new(&self.url, &self.token, &session, &[])
                    .command(&command)
                    .flag("--mode", "pty")
                    .spawn();
                self.running.insert(session, bridge);
                Ok(json!({}))
            }
            "claude" => {
                let env = ClaudeEnv::start().await;
                let bridge = env.bridge(&self.url, &self.token, &session, &[]).spawn();
                let project = env.project.display().to_string();
                self.running.insert(session.clone(), bridge);
                self.claude.insert(session, env);
                Ok(json!({ "project": project }))
            }
            "checkpoints" => {
                // A shell agent in a git work tree: it runs each input line; `moor` checkpoints
                // the tree whenever it changed.
                let (dir, repo) = work_tree();
                let script = r#"n=0; while IFS= read -r cmd; do n=$((n+1)); eval "$cmd"; echo "done $n"; done"#;
                let bridge = BridgeOpts::new(&self.url, &self.token, &session, &[])
                    .command(&["bash".into(), "-c".into(), script.into()])
                    .cwd(&repo)
                    .flag("--checkpoint-interval", "300ms")
                    .spawn();
                self.running.insert(session, bridge);
                self.trees.push(dir);
                Ok(json!({ "repo": repo.display().to_string() }))
            }
            "host" => {
                // `moor host` offering a shell in a git work tree (`notes`, on main, with
                // uncommitted changes); an interactive shell ignores SIGTERM, so a stop is
                // forced after a short grace.
                let (dir, repo) = work_tree();
                std::fs::write(repo.join("draft.txt"), "unsaved").map_err(|e| e.to_string())?;
                let config = dir.path().join("host.toml");
                let text = format!(
                    "name = \"phone-box\"\n[projects.notes]\ndir = {repo:?}\n\
                     [agents.shell]\ncommand = [\"bash\"]\nmode = \"pty\"\n"
                );
                std::fs::write(&config, text).map_err(|e| e.to_string())?;
                let host = BridgeOpts::host(&self.url, &self.token, &config)
                    .flag("--stop-grace", "1s")
                    .spawn();
                self.running.insert("host".into(), host);
                self.trees.push(dir);
                Ok(json!({}))
            }
            "proxy" => {
                let proxy = FaultProxy::start(self.server_addr).await;
                let url = proxy.url();
                self.proxy = Some(proxy);
                Ok(json!({ "url": url }))
            }
            "proxy_refuse" => {
                // While on, the proxy takes connections and closes them at once: the server is
                // unreachable through it (live connections are broken with proxy_reset).
                let proxy = self.proxy.as_ref().ok_or("no proxy")?;
                proxy.refuse(args["on"].as_bool().unwrap_or(true));
                Ok(json!({}))
            }
            "proxy_stall" | "proxy_reset" | "proxy_cut" => {
                let proxy = self.proxy.as_ref().ok_or("no proxy")?;
                let n = match op {
                    "proxy_stall" => proxy.stall().await,
                    "proxy_reset" => proxy.reset_all().await,
                    _ => proxy.cut_all().await,
                };
                Ok(json!({ "connections": n }))
            }
            "push_subscribe" => {
                // A device of `user` subscribed at the local push service, as the page would
                // with a real one.
                let user = args["user"].as_str().ok_or("user")?.to_owned();
                let password = args["password"].as_str().ok_or("password")?;
                let tokens = self.server.api().login(&user, password).await;
                let token = tokens["access_token"].as_str().ok_or("no access token")?;
                let api = Api::new(self.server.url(), token);
                let key = api
                    .authed(reqwest::Method::GET, "/api/v1/notify/vapid", None)
                    .await;
                self.push
                    .expect_vapid_key(key.body["public_key"].as_str().ok_or("vapid key")?);
                let device = self.push.subscribe();
                let body = json!({
                    "device": "phone",
                    "endpoint": device.endpoint,
                    "keys": {"p256dh": device.p256dh, "auth": device.auth},
                });
                let r = api
                    .authed(
                        reqwest::Method::POST,
                        "/api/v1/notify/subscriptions",
                        Some(RawBody::Json(body)),
                    )
                    .await;
                if r.status != reqwest::StatusCode::CREATED {
                    return Err(format!("subscribe: {} {:?}", r.status, r.body));
                }
                self.devices.insert(user, device);
                Ok(json!({}))
            }
            "push_wait" => {
                // The decrypted push message `user`'s device got about `request_id` (its
                // retraction with `close`), as a browser's push event would carry it.
                let device = self
                    .devices
                    .get(args["user"].as_str().unwrap_or_default())
                    .ok_or("no device for this user")?
                    .clone();
                let request = args["request_id"].as_str().map(str::to_owned);
                let close = args["close"].as_bool().unwrap_or(false);
                let matches = |r: &moor_e2e::push::Received| {
                    r.device == device.id
                        && r.message.close == close
                        && (request.is_none() || r.message.request_id == request)
                };
                self.push
                    .wait_until(Duration::from_secs(60), "the push message", |got, _| {
                        got.iter().any(matches)
                    })
                    .await;
                let got = self.push.received();
                let message = got.iter().rev().find(|r| matches(r)).ok_or("no message")?;
                serde_json::to_value(&message.message).map_err(|e| e.to_string())
            }
            "kill" => {
                let bridge = self.running.get_mut(&session).ok_or("no such bridge")?;
                bridge.kill().await;
                Ok(json!({}))
            }
            "restart" => {
                let old = self.running.get(&session).ok_or("no such bridge")?;
                // Same session, same state dir and spool, same agent.
                let agent = self.agents.get(&session).cloned().unwrap_or_default();
                let agent: Vec<&str> = agent.iter().map(String::as_str).collect();
                let new = old.respawn(&agent);
                self.running.insert(session, new);
                Ok(json!({}))
            }
            "setup_link" => {
                // The one-time link for the first admin, as moord printed it at its first start.
                let logs = self.server.logs();
                let link = logs
                    .split_whitespace()
                    .find(|w| w.contains("#/setup&code="))
                    .map(str::to_owned);
                Ok(json!({ "link": link }))
            }
            "moor_login" => {
                let config = tempfile::tempdir().map_err(|e| e.to_string())?;
                let mut child = Command::new(bin_path("moor"))
                    .args(["login", &self.url])
                    .env("MOOR_CONFIG_DIR", config.path())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit())
                    .kill_on_drop(true)
                    .spawn()
                    .map_err(|e| e.to_string())?;
                let mut out = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
                // The code and the link moor shows (and QR-encodes) for the web page.
                let shown = tokio::time::timeout(LOGIN_WAIT, async {
                    let mut code = None;
                    while let Ok(Some(line)) = out.next_line().await {
                        let t = line.trim();
                        if t.len() == 9 && t.as_bytes()[4] == b'-' {
                            code = Some(t.to_owned());
                        }
                        if let Some(link) =
                            t.split_whitespace().find(|w| w.contains("#/device&code="))
                        {
                            return Some((code, link.to_owned()));
                        }
                    }
                    None
                })
                .await
                .map_err(|_| "moor login showed no link in time")?
                .ok_or("moor login ended without a link")?;
                // Keep draining its output so it never blocks on a full pipe.
                tokio::spawn(async move { while let Ok(Some(_)) = out.next_line().await {} });
                self.login = Some(Login { child, config });
                Ok(json!({ "code": shown.0, "link": shown.1 }))
            }
            "moor_login_done" => {
                let login = self.login.as_mut().ok_or("no moor login running")?;
                let status = tokio::time::timeout(LOGIN_WAIT, login.child.wait())
                    .await
                    .map_err(|_| "moor login did not finish after the approval")?
                    .map_err(|e| e.to_string())?;
                Ok(json!({ "success": status.success() }))
            }
            "device_lines" => {
                // `moor run` with the credentials `moor login` saved (no token given).
                let login = self.login.as_ref().ok_or("no moor login ran")?;
                let count = args["count"].as_u64().unwrap_or(100).to_string();
                let interval = args["interval_ms"].as_u64().unwrap_or(0).to_string();
                let bridge = BridgeOpts::new(
                    &self.url,
                    "",
                    &session,
                    &["count", &count, "--interval-ms", &interval],
                )
                .env("MOOR_CONFIG_DIR", login.config.path().display())
                .spawn();
                self.running.insert(session, bridge);
                Ok(json!({}))
            }
            other => Err(format!("unknown op {other:?}")),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_client_in_a_real_browser() {
    run_browser_script("tests/browser.mjs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_client_reattaches_in_a_real_browser() {
    run_browser_script("tests/browser-reattach.mjs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_client_on_a_phone() {
    run_browser_script("tests/browser-phone.mjs").await;
}

/// Starts `moord` (and the short-token one), runs the Node script `script` (relative to `web/`)
/// against them, serves its requests, and fails unless every scenario passed.
async fn run_browser_script(script: &str) {
    // arrange
    let chromium = std::env::var("MOOR_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        std::path::Path::new(&chromium).is_file(),
        "{chromium} is missing: run scripts/install-chromium (scripts/test does)"
    );
    let web = web_dir();
    assert!(
        web.join("node_modules/playwright-core").is_dir(),
        "web/node_modules is missing: run scripts/build-web (scripts/test does)"
    );
    let push = PushService::start().await;
    let server = TestServer::start(
        ServerOpts::new()
            .flag("--keepalive-ms", KEEPALIVE_MS)
            .flag("--push-allow-loopback-http", true)
            .flag("--notify-poll-ms", 100),
    )
    .await;
    let shell = reqwest::get(server.url()).await.expect("GET /");
    assert_eq!(
        shell.status(),
        200,
        "moord serves no web client: run scripts/build-web, then cargo build"
    );
    let short = TestServer::start(
        ServerOpts::new()
            .flag("--keepalive-ms", KEEPALIVE_MS)
            .flag("--access-token-ttl-secs", SHORT_TOKEN_TTL_SECS)
            .flag("--sse-lifetime-ms", 2000),
    )
    .await;
    let artifacts = web.join("artifacts");
    std::fs::create_dir_all(&artifacts).expect("artifacts dir");
    let mut bridges = Bridges {
        server_addr: server.addr(),
        url: server.url(),
        token: server.token().to_owned(),
        short: (short.url(), short.token().to_owned()),
        running: HashMap::new(),
        agents: HashMap::new(),
        claude: HashMap::new(),
        login: None,
        server: &server,
        trees: Vec::new(),
        proxy: None,
        push,
        devices: HashMap::new(),
    };

    // act: run the browser scenarios, serving their requests
    let mut node = Command::new("node")
        .arg(script)
        .current_dir(&web)
        .env("MOOR_URL", server.url())
        .env("MOOR_TOKEN", server.token())
        .env("MOOR_SHORT_URL", short.url())
        .env("MOOR_SHORT_TOKEN", short.token())
        .env("MOOR_SHORT_TTL_SECS", SHORT_TOKEN_TTL_SECS.to_string())
        .env("MOOR_KEEPALIVE_MS", KEEPALIVE_MS.to_string())
        .env("MOOR_CHROMIUM", &chromium)
        .env("MOOR_ARTIFACTS", &artifacts)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs (Node 20+ is needed)");
    let mut stdin = node.stdin.take().expect("piped");
    let mut lines = BufReader::new(node.stdout.take().expect("piped")).lines();
    let mut output = String::new();
    let run = async {
        while let Some(line) = lines.next_line().await.expect("read node output") {
            let Some(req) = line.strip_prefix("@rpc ") else {
                println!("{line}");
                output.push_str(&line);
                output.push('\n');
                continue;
            };
            let req: Value = serde_json::from_str(req).expect("rpc request is JSON");
            let op = req["op"].as_str().unwrap_or_default().to_owned();
            let answer = match bridges.handle(&op, &req["args"]).await {
                Ok(result) => json!({ "id": req["id"], "ok": true, "result": result }),
                Err(error) => json!({ "id": req["id"], "ok": false, "error": error }),
            };
            stdin
                .write_all(format!("{answer}\n").as_bytes())
                .await
                .expect("answer node");
        }
        node.wait().await.expect("wait for node")
    };
    let status = tokio::time::timeout(SUITE_TIMEOUT, run)
        .await
        .unwrap_or_else(|_| panic!("the browser suite did not finish within {SUITE_TIMEOUT:?}"));

    // assert
    assert!(
        status.success(),
        "browser scenarios of {script} failed (see above); screenshots in {}",
        artifacts.display()
    );
    drop(bridges);
}
