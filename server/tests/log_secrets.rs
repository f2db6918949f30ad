//! A whole access scenario with every log target at trace level, written to a buffer: no
//! password, token or cookie value may appear in it. One test per binary, because it installs
//! the process-wide subscriber.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

mod support;

use support::{client, serve_on_loopback, Serving};

const WAIT: Duration = Duration::from_secs(10);

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sends `req` and checks the response's status.
async fn expect(req: reqwest::RequestBuilder, status: u16) -> reqwest::Response {
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), status);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scenario_logged_at_trace_level_never_shows_a_secret() {
    // arrange: everything at trace, into a buffer
    let buf = Buf::default();
    let writer = buf.clone();
    tracing_subscriber::fmt()
        // Everything the server side logs; the test's own clients (in the same process) are
        // not the server, and tungstenite's client does log its request headers.
        .with_env_filter(
            "trace,tungstenite::handshake::client=off,reqwest=off,hyper_util::client=off",
        )
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();
    let admin = "admin-secret-token-0123456789";
    let password = "hunter2-but-longer";
    let wrong = "not-the-password-42";
    let dir = std::env::temp_dir().join(format!("moor-logs-{}", uuid::Uuid::new_v4()));
    // No grace for a spent refresh token: its reuse below revokes the family at once.
    let server = support::build(&dir, admin, |c| c.refresh_grace = Duration::ZERO).await;
    let setup_code = server
        .setup_code()
        .expect("no administrator yet")
        .to_owned();
    let Serving {
        addr,
        shutdown,
        task: serving,
    } = serve_on_loopback(server).await;
    let http = reqwest::Client::new();
    let url = |p: &str| format!("http://{addr}/api/v1{p}");
    let root_password = "root-password-of-the-first-admin";
    let wrong_code = "wrong-setup-code-0123456789";
    let mut secrets: Vec<String> = vec![
        admin.into(),
        password.into(),
        wrong.into(),
        setup_code.clone(),
        root_password.into(),
        wrong_code.into(),
    ];

    // act: first-start setup, with a wrong code and then the right one
    for (code, status) in [(wrong_code, 401), (setup_code.as_str(), 200)] {
        let r = http
            .post(url("/auth/setup"))
            .json(&json!({"code": code, "name": "root", "password": root_password}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status);
        if status == 200 {
            let pair: Value = r.json().await.unwrap();
            for k in ["access_token", "refresh_token"] {
                secrets.push(pair[k].as_str().unwrap().to_owned());
            }
        }
    }

    // act: user, logins (good and bad), refresh, every way of presenting a token, a bridge, a
    // viewer, an input, logout
    expect(
        http.post(url("/users"))
            .bearer_auth(admin)
            .json(&json!({"name": "ann", "password": password})),
        201,
    )
    .await;
    expect(
        http.post(url("/auth/login"))
            .json(&json!({"name": "ann", "password": wrong})),
        401,
    )
    .await;
    let first: Value = expect(
        http.post(url("/auth/login"))
            .json(&json!({"name": "ann", "password": password})),
        200,
    )
    .await
    .json()
    .await
    .unwrap();
    let r = http
        .post(url("/auth/refresh"))
        .json(&json!({"refresh_token": first["refresh_token"]}))
        .send()
        .await
        .unwrap();
    let cookies: Vec<String> = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_owned())
        .collect();
    let pair: Value = r.json().await.unwrap();
    let access = pair["access_token"].as_str().unwrap().to_owned();
    for t in [
        &first["access_token"],
        &first["refresh_token"],
        &pair["refresh_token"],
    ] {
        secrets.push(t.as_str().unwrap().to_owned());
    }
    secrets.push(access.clone());

    let bridge = client::bridge_socket(addr, &access).await;
    let _bridge = client::handshake(bridge, client::hello("logs"))
        .await
        .socket();
    let viewer_url = format!("ws://{addr}/api/v1/sessions/logs/ws?access_token={access}");
    let (mut viewer, _) = tokio_tungstenite::connect_async(viewer_url).await.unwrap();
    let r = http
        .get(url(&format!(
            "/sessions/logs/entries?access_token={access}"
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    expect(
        http.get(url("/sessions"))
            .header("cookie", cookies.join("; ")),
        200,
    )
    .await;
    expect(
        http.post(url("/sessions/logs/inputs"))
            .bearer_auth(&access)
            .json(
                &json!({"client_msg_id": "c1", "kind": "input.text", "payload": {"text": "hello"}}),
            ),
        200,
    )
    .await;
    expect(
        http.post(url("/auth/refresh"))
            .json(&json!({"refresh_token": first["refresh_token"]})),
        401,
    )
    .await;
    // The reuse revoked the family: the viewer socket ends.
    let end = tokio::time::timeout(WAIT, async {
        while let Some(Ok(m)) = viewer.next().await {
            if let Message::Close(_) = m {
                break;
            }
        }
    });
    end.await.unwrap();
    expect(
        http.get(url("/sessions")).bearer_auth("forged.token.value"),
        401,
    )
    .await;
    shutdown.cancel();
    serving.await.unwrap().unwrap();

    // assert
    let logs = String::from_utf8_lossy(&buf.0.lock().unwrap()).into_owned();
    assert!(logs.contains("TRACE"), "trace logging was on");
    assert!(logs.contains("login refused"), "the scenario was logged");
    for s in &secrets {
        // The whole secret, and its tail (a JWT's signature) on its own.
        let tail = &s[s.len().saturating_sub(16)..];
        // Show where, with the secret masked.
        let line = logs
            .lines()
            .find(|l| l.contains(tail))
            .map(|l| l.replace(s.as_str(), "<SECRET>").replace(tail, "<SECRET>"));
        assert!(
            line.is_none(),
            "a secret is in the logs: {}",
            line.unwrap_or_default()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
