//! The real `moord` binary during its start: signals are handled from the first moment, so a
//! SIGTERM while it is still starting stops it cleanly instead of killing it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

/// Failure guard on each wait, never the synchronisation itself.
const WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn sigterm_while_moord_is_still_starting_stops_it_cleanly() {
    // arrange: a moord still starting, waiting for a database that refuses connections
    let dir = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_moord"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(["--database-url", "postgres://moor@127.0.0.1:1/moor"])
        .args(["--database-wait-secs", "300"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut log = BufReader::new(child.stderr.take().unwrap()).lines();
    let waiting = async {
        while let Some(line) = log.next_line().await.unwrap() {
            if line.contains("the database cannot be reached yet") {
                return;
            }
        }
        panic!("moord ended before waiting for its database");
    };
    tokio::time::timeout(WAIT, waiting).await.unwrap();
    // act
    let pid = child.id().unwrap().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    // assert: it handles the signal (exit 0) rather than dying of it
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(
        status.success(),
        "moord should exit 0 on SIGTERM during its start, got {status}"
    );
}
