//! Upgrades: a database the previous release wrote (its migrations, up to 0012, and rows written
//! with its SQL) opens with this `moord`, is migrated, and serves its sessions exactly; and a
//! bridge speaking another protocol version is refused with close 4002 and a message saying
//! which side to upgrade, which `moor` shows its user.

use std::borrow::Cow;
use std::path::Path;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use moor_e2e::util::bin_path;
use moor_e2e::ws::RawBridge;
use moor_e2e::{ServerOpts, TestServer, WAIT};
use moor_protocol::bridge::{BridgeToServer, ServerToBridge, Welcome};
use moor_protocol::{close, Entry, ProducerId, Seq, SessionId, PROTOCOL_VERSION};
use reqwest::{Method, StatusCode};
use serde_json::json;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

/// The newest migration of the previous release.
const PREVIOUS_SCHEMA: i64 = 12;

/// A SQLite database as the previous release left it: its migrations, and one ended session of
/// `n` output lines written with its SQL. The file's bytes and the entries it holds.
async fn previous_release_db(dir: &Path, id: SessionId, n: i64) -> (Vec<u8>, Vec<Entry>) {
    let file = dir.join("old.db");
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::new()
                .filename(&file)
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Delete),
        )
        .await
        .expect("create the old database");
    let migrations = Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/sqlite");
    let mut old = Migrator::new(migrations).await.expect("read migrations");
    old.migrations = Cow::Owned(
        old.migrations
            .iter()
            .filter(|m| m.version <= PREVIOUS_SCHEMA)
            .cloned()
            .collect(),
    );
    old.run(&pool)
        .await
        .expect("the previous release's migrations");
    let producer = ProducerId::new();
    let mut entries = Vec::new();
    sqlx::query(
        "INSERT INTO sessions (pk, id, name, created_at, head_seq, last_ts, ended_at) \
         VALUES (1, ?, 'from-last-release', 1000, ?, ?, ?)",
    )
    .bind(id.to_string())
    .bind(n)
    .bind(1000 + n)
    .bind(2000 + n)
    .execute(&pool)
    .await
    .expect("old session row");
    sqlx::query(
        "INSERT INTO producers (pk, session_pk, producer_id, last_seq) VALUES (1, 1, ?, ?)",
    )
    .bind(producer.to_string())
    .bind(n)
    .execute(&pool)
    .await
    .expect("old producer row");
    for seq in 1..=n {
        let payload = json!({"stream": "stdout", "text": format!("line {seq} of the old release")});
        sqlx::query(
            "INSERT INTO entries (session_pk, seq, ts, kind, author, payload, producer_pk, \
             producer_seq) VALUES (1, ?, ?, 'agent.output', 'agent', ?, 1, ?)",
        )
        .bind(seq)
        .bind(1000 + seq)
        .bind(payload.to_string())
        .bind(seq)
        .execute(&pool)
        .await
        .expect("old entry row");
        entries.push(Entry {
            seq: Seq(seq as u64),
            ts: 1000 + seq,
            kind: "agent.output".into(),
            author: "agent".into(),
            payload,
        });
    }
    pool.close().await;
    (
        std::fs::read(&file).expect("read the old database"),
        entries,
    )
}

#[tokio::test]
async fn a_database_of_the_previous_release_is_migrated_and_serves_its_sessions() {
    // arrange
    let dir = tempfile::tempdir().expect("temp dir");
    let id = SessionId::new();
    let (db, old_entries) = previous_release_db(dir.path(), id, 40).await;

    // act: this release starts on it
    let server = TestServer::start(ServerOpts::new().data_file("moor.db", db)).await;

    // assert: migrated (ready), and the old session is served as it was stored
    let ready = server.api().raw(Method::GET, "/readyz", None, None).await;
    assert_eq!(ready.status, StatusCode::OK, "{:?}", ready.body);
    let info = server
        .api()
        .session("from-last-release")
        .await
        .expect("the old session is listed");
    assert_eq!((info.id, info.head_seq), (id, Seq(40)));
    assert_eq!(server.api().entries_all(id).await, old_entries);
    assert_eq!(server.replayed(id, 40).await, old_entries);
    // ... and this release's own features work on it: the old session can be deleted
    let deleted = server.api().delete_session(id).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{:?}", deleted.body);
}

#[tokio::test]
async fn a_bridge_of_another_protocol_version_is_told_which_side_to_upgrade() {
    // arrange
    let server = TestServer::start(ServerOpts::new()).await;
    for (version, upgrade) in [
        (PROTOCOL_VERSION - 1, "upgrade moor to this moord's release"),
        (PROTOCOL_VERSION + 1, "upgrade moord"),
    ] {
        let mut bridge = RawBridge::connect(server.addr(), Some(server.token()))
            .await
            .expect("bridge socket");
        let mut hello = RawBridge::hello_frame("versions", ProducerId::new());
        if let BridgeToServer::Hello(h) = &mut hello {
            h.version = version;
        }

        // act
        bridge.send(&hello).await;
        let closed = bridge.expect_close(WAIT).await;

        // assert
        assert_eq!(closed.code, close::VERSION_MISMATCH, "{closed:?}");
        assert!(
            closed.reason.contains(&format!(
                "moor speaks protocol {version}, moord speaks {PROTOCOL_VERSION}"
            )) && closed.reason.contains(upgrade),
            "{closed:?}"
        );
    }
    assert!(server.api().session("versions").await.is_none());
}

/// A `moord` of a newer release, as far as `moor` can tell: it welcomes with its own protocol
/// version. Serves one connection.
async fn newer_moord() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("accept");
        let mut ws = tokio_tungstenite::accept_async(tcp).await.expect("upgrade");
        while let Some(Ok(msg)) = ws.next().await {
            let Ok(text) = msg.to_text() else { continue };
            let Ok(BridgeToServer::Hello(hello)) = serde_json::from_str(text) else {
                continue;
            };
            let welcome = ServerToBridge::Welcome(Welcome {
                version: PROTOCOL_VERSION + 1,
                session_id: SessionId::new(),
                session_name: hello.session,
                producer_mark: 0,
                pending_inputs: Vec::new(),
                heartbeat_interval_ms: 10_000,
                idle_timeout_ms: 30_000,
                max_lifetime_ms: 0,
                web_url: String::new(),
            });
            let text = serde_json::to_string(&welcome).expect("welcome");
            let _ = ws
                .send(tokio_tungstenite::tungstenite::Message::Text(text.into()))
                .await;
        }
    });
    (addr, task)
}

#[tokio::test]
async fn moor_tells_its_user_to_upgrade_when_moord_speaks_a_newer_protocol() {
    // arrange
    let (addr, server) = newer_moord().await;
    let state = tempfile::tempdir().expect("state dir");

    // act: a real moor run against it
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(bin_path("moor"))
            .args(["run", "--server", &format!("http://{addr}"), "--token", "t"])
            .args(["--session", "versions", "--state-dir"])
            .arg(state.path())
            .arg("--")
            .arg(bin_path("moor-test-agent"))
            .args(["count", "1"])
            .env("MOOR_CONFIG_DIR", state.path())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("moor stopped in time")
    .expect("moor ran");

    // assert: it stops for good, saying to upgrade moor
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "moord speaks protocol {}, this moor speaks {PROTOCOL_VERSION}: upgrade moor",
            PROTOCOL_VERSION + 1
        )),
        "{stderr}"
    );
    server.abort();
}
