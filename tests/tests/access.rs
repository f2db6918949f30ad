//! Access through the real binaries: a bridge logged in as a user (`moor login`'s credentials
//! file) whose access tokens live two seconds streams for half a minute while a viewer
//! watches, the link is cut again and again, and nobody logs in again; and `moor login`'s
//! device flow itself.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use moor_e2e::assert::{agent_texts, lines};
use moor_e2e::util::bin_path;
use moor_e2e::{assert_contiguous, BridgeOpts, ServerOpts, SseClient, SseOpts, TestServer, WAIT};
use serde_json::{json, Value};

const PASSWORD: &str = "correct horse battery";

async fn add_user_and_login(server: &TestServer, name: &str) -> Value {
    let api = server.api();
    api.add_user(name, PASSWORD).await;
    api.login(name, PASSWORD).await
}

/// A server whose access tokens live 2 s, and ann's fresh login stored where `moor` looks for
/// credentials (`MOOR_CONFIG_DIR`): the server, the login, that dir and the credentials file.
async fn ann_with_two_second_tokens() -> (TestServer, Value, tempfile::TempDir, std::path::PathBuf)
{
    let server = TestServer::start(ServerOpts::new().flag("--access-token-ttl-secs", 2)).await;
    let pair = add_user_and_login(&server, "ann").await;
    let config = tempfile::tempdir().unwrap();
    let creds = config.path().join("credentials.json");
    let stored = json!([{
        "server": server.url(),
        "access_token": pair["access_token"],
        "refresh_token": pair["refresh_token"],
        "expires_at": unix_now() + 2,
        "lifetime": 2,
    }]);
    std::fs::write(&creds, serde_json::to_vec(&stored).unwrap()).unwrap();
    (server, pair, config, creds)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[cfg(unix)]
fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_second_tokens_a_bridge_streams_for_30_s_through_cuts_and_nothing_is_lost() {
    // arrange: a server whose access tokens live 2 s; ann's credentials where moor looks
    let (server, pair, config, creds) = ann_with_two_second_tokens().await;
    // 300 lines over 30 s.
    let mut bridge = BridgeOpts::new(
        &server.url(),
        "",
        "expiry",
        &["count", "300", "--interval-ms", "100"],
    )
    .env("MOOR_CONFIG_DIR", config.path().display())
    .spawn();
    // Polls until the bridge created the session (bounded by WAIT).
    let session = tokio::time::timeout(WAIT, async {
        loop {
            if let Some(s) = server.session("expiry").await {
                break s;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the bridge attaches within WAIT");
    // The viewer is the administrator: ann's own 2-second token may have lapsed before a busy
    // machine opens the stream, and the session exists (for the administrator) a moment
    // before ann's handshake has claimed it.
    let viewer = SseClient::connect(
        &server.url(),
        server.token(),
        session.id,
        SseOpts::default(),
    );

    // act: every 40 lines (4 s, two token lifetimes), cut the bridge's connection; it must
    // reconnect with a token that is still valid.
    for k in 1..=6u64 {
        viewer.wait_seq(40 * k, Duration::from_secs(30)).await;
        let s = server
            .close_bridge(session.id, 1001, "cut by the test")
            .await;
        assert!(s.is_success() || s == 404, "close bridge: {s}");
    }
    bridge.wait_success(Duration::from_secs(90)).await;

    // assert: every line arrived, in order, once; the viewer saw all of it on its one stream;
    // the bridge never stopped for its token; the credentials were renewed and stay private.
    let log = server.entries_all(session.id).await;
    assert_contiguous(&log);
    assert_eq!(agent_texts(&log, "stdout"), lines(300));
    let head = log.last().unwrap().seq.0;
    viewer.wait_seq(head, WAIT).await;
    let seen = viewer.snapshot();
    assert_eq!(agent_texts(&seen.entries, "stdout"), lines(300));
    assert_eq!(
        seen.connections, 1,
        "the viewer had to reconnect: {:?}",
        seen.errors
    );
    assert!(!bridge.stderr().contains("refused"), "{}", bridge.stderr());
    let now: Value = serde_json::from_slice(&std::fs::read(&creds).unwrap()).unwrap();
    assert_ne!(
        now[0]["refresh_token"], pair["refresh_token"],
        "tokens were refreshed"
    );
    #[cfg(unix)]
    assert_eq!(mode(&creds), 0o600);
    let logs = server.logs() + &bridge.stderr();
    for secret in [
        &now[0]["access_token"],
        &now[0]["refresh_token"],
        &pair["refresh_token"],
    ] {
        assert!(
            !logs.contains(secret.as_str().unwrap()),
            "a token is in the logs"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridge_whose_access_token_is_refused_refreshes_and_reconnects() {
    // arrange: a stored access token the server refuses (as after a key rotation), with a
    // valid refresh token and an expiry far away, so only the 401 can trigger the refresh
    let server = TestServer::start(ServerOpts::new()).await;
    let pair = add_user_and_login(&server, "ann").await;
    let config = tempfile::tempdir().unwrap();
    let stored = json!([{
        "server": server.url(),
        "access_token": "not-a-valid-token",
        "refresh_token": pair["refresh_token"],
        "expires_at": unix_now() + 3600,
        "lifetime": 3600,
    }]);
    std::fs::write(
        config.path().join("credentials.json"),
        serde_json::to_vec(&stored).unwrap(),
    )
    .unwrap();
    // act
    let mut bridge = BridgeOpts::new(&server.url(), "", "refused", &["count", "20"])
        .env("MOOR_CONFIG_DIR", config.path().display())
        .spawn();
    bridge.wait_success(WAIT).await;
    // assert
    let session = server.session("refused").await.expect("session");
    let log = server.entries_all(session.id).await;
    assert_eq!(agent_texts(&log, "stdout"), lines(20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moor_login_shows_a_code_and_stores_credentials_once_a_user_approves() {
    // arrange
    let server = TestServer::start(ServerOpts::new()).await;
    let pair = add_user_and_login(&server, "ann").await;
    let config = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(bin_path("moor"))
        .args(["login", &server.url()])
        .env("MOOR_CONFIG_DIR", config.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // act: read the code it shows (bounded: it prints it within its first lines)
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut shown = Vec::new();
        for line in BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .take(200)
        {
            shown.push(line.clone());
            let _ = tx.send(shown.join("\n"));
        }
    });
    let code = loop {
        let shown = rx.recv_timeout(WAIT).expect("moor login prints a code");
        let code = shown
            .lines()
            .map(str::trim)
            .find(|l| l.len() == 9 && l.as_bytes()[4] == b'-');
        if let (Some(code), true) = (code, shown.contains('█') || shown.contains('▀')) {
            break code.to_owned();
        }
    };
    let s = reqwest::Client::new()
        .post(format!("{}/api/v1/auth/device/approve", server.url()))
        .bearer_auth(pair["access_token"].as_str().unwrap())
        .json(&json!({"user_code": code}))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(s, 204);
    // assert: moor exits 0 with the credentials saved, private, and they work
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    let path = config.path().join("credentials.json");
    #[cfg(unix)]
    assert_eq!(mode(&path), 0o600);
    let saved: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let token = saved[0]["access_token"].as_str().unwrap();
    let s = reqwest::Client::new()
        .get(format!("{}/api/v1/sessions", server.url()))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(s, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_taken_after_the_first_access_token_expired_are_uploaded() {
    // arrange: 2-second access tokens; ann's credentials; an agent in a git work tree that
    // writes a file only when told to
    let (server, pair, config, creds) = ann_with_two_second_tokens().await;
    let work = tempfile::tempdir().unwrap();
    moor_e2e::util::git_work_tree(work.path(), &[("README.md", b"# project\n")]);
    let (go, finish) = (config.path().join("go"), config.path().join("finish"));
    let script = format!(
        "while [ ! -e {go} ]; do sleep 0.05; done; echo late > late.txt; \
         while [ ! -e {finish} ]; do sleep 0.05; done",
        go = go.display(),
        finish = finish.display()
    );
    let mut bridge = BridgeOpts::new(&server.url(), "", "late-checkpoint", &[])
        .command(&["bash".into(), "-c".into(), script])
        .cwd(work.path())
        .flag("--checkpoint-interval", "200ms")
        .env("MOOR_CONFIG_DIR", config.path().display())
        // Upload failures are logged at info: shown, so the end can check there were none.
        .env("RUST_LOG", "moor_bridge=info")
        .spawn();
    let api = server.api();
    api.wait_session("late-checkpoint", WAIT).await;

    // act: once the token was renewed twice (so the one moor started with has expired), the
    // agent changes a file
    let first_refresh = pair["refresh_token"].clone();
    let mut seen = vec![first_refresh];
    moor_e2e::eventually(WAIT, "two token refreshes", || {
        let now: Value = serde_json::from_slice(&std::fs::read(&creds).unwrap()).unwrap();
        let current = now[0]["refresh_token"].clone();
        if !seen.contains(&current) {
            seen.push(current);
        }
        let done = seen.len() >= 3;
        async move { done }
    })
    .await;
    std::fs::write(&go, "").unwrap();

    // assert: a checkpoint holding the change reaches the server
    moor_e2e::eventually(WAIT, "a checkpoint holding late.txt on the server", || {
        let api = &api;
        async move {
            let get = |path: String| async move {
                api.authed(reqwest::Method::GET, &path, None).await.body
            };
            let list = get("/api/v1/sessions/late-checkpoint/checkpoints".into()).await;
            for c in list.as_array().cloned().unwrap_or_default() {
                let stored =
                    get(format!("/api/v1/checkpoints/{}", c["id"].as_str().unwrap())).await;
                let files = stored["manifest"]["files"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                if files.iter().any(|f| f["path"] == "late.txt") {
                    return true;
                }
            }
            false
        }
    })
    .await;
    std::fs::write(&finish, "").unwrap();
    bridge.wait_success(WAIT).await;
    let stderr = bridge.stderr();
    assert!(
        stderr.contains("checkpoint uploaded"),
        "the bridge logs at info: {stderr}"
    );
    assert!(
        !stderr.contains("checkpoint upload failed"),
        "an upload was refused: {stderr}"
    );
}
