//! TLS served by `moord` itself: a self-signed certificate for 127.0.0.1, the real `moor`
//! trusting it with `--ca-file` and streaming a session over WSS, read back over HTTPS by a
//! client that trusts it; clients that speak plain HTTP or do not trust the certificate get
//! nothing; a bad certificate or key stops `moord` at start with a message saying what is wrong.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use moor_e2e::util::bin_path;
use moor_e2e::{lines, Api, BridgeOpts, ServerOpts, TestServer, WAIT};
use serde_json::json;

/// A self-signed certificate for `127.0.0.1` and `localhost`, written as PEM files.
struct TestCert {
    _dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
    pem: String,
}

fn test_cert() -> TestCert {
    let dir = tempfile::tempdir().expect("temp dir");
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("generate a certificate");
    let pem = cert.pem();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, &pem).expect("write cert");
    std::fs::write(&key, signing_key.serialize_pem()).expect("write key");
    TestCert {
        _dir: dir,
        cert,
        key,
        pem,
    }
}

fn tls_opts(c: &TestCert) -> ServerOpts {
    ServerOpts::new()
        .flag("--tls-cert", c.cert.display())
        .flag("--tls-key", c.key.display())
}

/// A client builder that trusts only `c` (no public roots needed on loopback).
fn trusting(c: &TestCert) -> reqwest::ClientBuilder {
    let root = reqwest::Certificate::from_pem(c.pem.as_bytes()).expect("parse cert");
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(root)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moor_streams_over_wss_with_its_ca_file_and_the_log_reads_back_over_https() {
    // arrange
    let cert = test_cert();
    let server = TestServer::start(tls_opts(&cert)).await;
    assert!(
        server.url().starts_with("https://127.0.0.1:"),
        "{}",
        server.url()
    );
    let api = Api::with_client(server.url(), server.token(), trusting(&cert));
    let name = format!("tls-{}", uuid::Uuid::new_v4().simple());

    // act: the real moor, trusting the certificate through --ca-file, streams 300 lines
    let mut bridge = BridgeOpts::new(
        &server.url(),
        server.token(),
        &name,
        &["count", "300", "--interval-ms", "1"],
    )
    .flag("--ca-file", cert.cert.display())
    .spawn();

    // assert: the whole session arrived, read back over HTTPS
    bridge.wait_success(Duration::from_secs(60)).await;
    let session = api.wait_ended(&name, WAIT).await;
    let entries = api.entries_all(session.id).await;
    moor_e2e::assert_complete_session(&entries, &lines(300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_sets_secure_cookies_and_hsts_and_refuses_plain_http_and_untrusting_clients() {
    // arrange
    let cert = test_cert();
    let server = TestServer::start(tls_opts(&cert)).await;
    let api = Api::with_client(server.url(), server.token(), trusting(&cert));
    api.add_user("ann", "correct horse battery").await;
    let client = trusting(&cert).build().unwrap();

    // act
    let login = client
        .post(format!("{}/api/v1/auth/login", server.url()))
        .json(&json!({"name": "ann", "password": "correct horse battery"}))
        .send()
        .await
        .expect("login over HTTPS");
    let plain = reqwest::Client::new()
        .get(format!("http://{}/healthz", server.addr()))
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    let untrusting = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
        .get(format!("{}/healthz", server.url()))
        .send()
        .await;

    // assert
    assert_eq!(login.status(), reqwest::StatusCode::OK);
    assert_eq!(
        login
            .headers()
            .get("strict-transport-security")
            .map(|v| v.to_str().unwrap().to_owned()),
        Some("max-age=31536000".to_owned())
    );
    let cookies: Vec<String> = login
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    assert_eq!(cookies.len(), 2);
    assert!(
        cookies
            .iter()
            .all(|c| c.contains("; Secure") && c.contains("HttpOnly")),
        "{cookies:?}"
    );
    assert!(
        plain.is_err(),
        "plain HTTP on the TLS port got an answer: {plain:?}"
    );
    let err = untrusting.expect_err("a client that does not trust the certificate connected");
    assert!(err.is_connect(), "{err:?}");
    // The server is fine after both.
    let health = client
        .get(format!("{}/healthz", server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), reqwest::StatusCode::OK);
}

/// Runs `moord` with `args` on a fresh data dir and returns its exit status and stderr; it must
/// exit by itself.
async fn moord_fails(args: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(bin_path("moord"))
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .args(args)
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("moord exits by itself")
    .expect("moord runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "moord started: {stdout}");
    assert!(!stdout.contains("listening"), "moord listened: {stdout}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[tokio::test]
async fn a_bad_certificate_or_key_stops_moord_at_start_saying_what_is_wrong() {
    // arrange
    let cert = test_cert();
    let other = test_cert();
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a PEM file\n").unwrap();
    let missing = dir.path().join("missing.pem");
    // act + assert
    // (certificate, key, what the message says, the file it names)
    let cases: [(&Path, &Path, &str, &Path); 4] = [
        (&missing, &cert.key, "read TLS certificate", &missing),
        (&garbage, &cert.key, "holds no PEM certificate", &garbage),
        (&cert.cert, &garbage, "no usable PEM private key", &garbage),
        (
            &cert.cert,
            &other.key,
            "does not fit certificate",
            &other.key,
        ),
    ];
    for (c, k, want, named) in cases {
        let stderr = moord_fails(&["--tls-cert", path(c), "--tls-key", path(k)]).await;
        assert!(stderr.contains(want), "expected {want:?} in: {stderr}");
        assert!(
            stderr.contains(path(named)),
            "expected {named:?} in: {stderr}"
        );
    }
    let stderr = moord_fails(&["--tls-cert", path(&cert.cert)]).await;
    assert!(stderr.contains("--tls-key"), "{stderr}");
}

#[tokio::test]
async fn moor_refuses_a_ca_file_that_holds_no_certificate() {
    // arrange
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("ca.pem");
    std::fs::write(&garbage, "nothing here\n").unwrap();
    // act
    let out = tokio::process::Command::new(bin_path("moor"))
        .args(["--ca-file", path(&garbage), "checkpoints", "list"])
        .current_dir(dir.path())
        // Nothing from the developer's environment: no server to reach if the check ever passed.
        .env_remove("MOOR_SERVER")
        .env_remove("MOOR_TOKEN")
        .env("MOOR_CONFIG_DIR", dir.path())
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    // assert
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--ca-file") && stderr.contains("no PEM certificate"),
        "{stderr}"
    );
}
