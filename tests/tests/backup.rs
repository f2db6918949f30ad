//! `moord backup` while a real bridge streams, `moord restore` into a fresh data dir: every entry
//! committed (so every entry acknowledged) before the backup began is in the copy, the copy holds
//! nothing the original does not, and a `moord` started on it serves it with the same token and
//! the same Web Push key (so browsers' push subscriptions keep working).

use std::process::Stdio;
use std::time::Duration;

use moor_e2e::util::bin_path;
use moor_e2e::{eventually_some, BridgeOpts, ServerOpts, TestServer, WAIT};

const STREAM: Duration = Duration::from_secs(180);
const ENTRIES: u64 = 20_000;

#[tokio::test]
async fn a_backup_taken_while_a_bridge_streams_restores_every_entry_committed_before_it() {
    // arrange: a bridge streaming 20,000 lines, paced so the stream outlasts the backup
    let server = TestServer::start(ServerOpts::new()).await;
    let name = format!("backup-{}", uuid::Uuid::new_v4().simple());
    let count = ENTRIES.to_string();
    let mut bridge = BridgeOpts::new(
        &server.url(),
        server.token(),
        &name,
        &["count", &count, "--interval-ms", "1"],
    )
    .spawn();
    let api = server.api();
    let id = api.wait_session(&name, WAIT).await.id;
    let committed = eventually_some(WAIT, "2,000 entries stored", || async {
        let head = api.session(&name).await?.head_seq.0;
        (head >= 2_000).then_some(head)
    })
    .await;
    let backup_dir = tempfile::tempdir().expect("temp dir");
    let backup = backup_dir.path().join("backup");

    // act: the backup, with moord serving and the bridge streaming
    let out = tokio::time::timeout(
        STREAM,
        tokio::process::Command::new(bin_path("moord"))
            .arg("--data-dir")
            .arg(server.dir().join("data"))
            .arg("backup")
            .arg(&backup)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("backup finished in time")
    .expect("moord backup ran");
    assert!(
        out.status.success(),
        "moord backup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let head_after_backup = api.session(&name).await.expect("session").head_seq.0;
    bridge.wait_success(STREAM).await;
    let original = api.entries_all(id).await;
    let restored_server = TestServer::start(ServerOpts::new().restore_from(&backup)).await;
    let restored = restored_server.api().entries_all(id).await;

    // assert: the stream went on while the backup ran, and is whole in the original
    assert!(
        head_after_backup > committed,
        "entries kept coming during the backup"
    );
    let lines = original.iter().filter(|e| e.kind == "agent.output").count() as u64;
    assert_eq!(lines, ENTRIES);
    // every entry committed before the backup began is in the copy, the same; nothing else is,
    // but the restored moord's record that the backup's bridge connection is over
    let (copied, written) = restored.split_at(
        restored
            .iter()
            .position(|e| e != &original[(e.seq.0 - 1) as usize])
            .unwrap_or(restored.len()),
    );
    assert!(
        copied.len() as u64 >= committed,
        "restored {} entries, {committed} were committed before the backup",
        copied.len()
    );
    let kinds: Vec<&str> = written.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["bridge.disconnected"], "{written:?}");
    assert_eq!(written[0].author, "server");
    // and the restored moord serves it, to the same admin token
    assert_eq!(restored_server.token(), server.token());
    let vapid = |dir: &std::path::Path| {
        std::fs::read(dir.join("vapid.key"))
            .unwrap_or_else(|e| panic!("{}/vapid.key: {e}", dir.display()))
    };
    let original_key = vapid(&server.dir().join("data"));
    assert_eq!(
        vapid(&backup),
        original_key,
        "the backup holds the Web Push key"
    );
    assert_eq!(
        vapid(&restored_server.dir().join("data")),
        original_key,
        "the restored data dir holds the original Web Push key, not a new one"
    );
    let info = restored_server
        .session(&name)
        .await
        .expect("the restored session");
    assert_eq!(info.head_seq.0, restored.len() as u64);
}
