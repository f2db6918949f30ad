//! `TermSession`: `moor` run the way a person runs it, in a real terminal — a pseudo-terminal
//! whose other end the test holds, so it can type, resize the window, read the screen bytes and
//! look at the terminal's settings (raw while `moor` runs, restored after).

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pty_process::{OwnedWritePty, Size};
use rustix::termios::{self, LocalModes, Termios};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;
use tokio::sync::watch;

use crate::bridge::BridgeOpts;
use crate::util::{bin_path, dump_logs, should_dump_on_drop, test_log};

/// `moor run …` on a terminal the test controls.
#[derive(Debug)]
pub struct TermSession {
    child: Child,
    writer: OwnedWritePty,
    /// A second handle on the terminal, for `tcgetattr`.
    fd: OwnedFd,
    screen: Arc<Mutex<Vec<u8>>>,
    changed: watch::Receiver<usize>,
    dir: TempDir,
    status: Option<ExitStatus>,
}

impl TermSession {
    /// Starts `moor` with `opts` on a `cols`×`rows` terminal.
    pub fn spawn(opts: &BridgeOpts, cols: u16, rows: u16) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("moor-e2e-term-")
            .tempdir()
            .expect("temp dir");
        let (pty, pts) = pty_process::open().expect("open a pty");
        pty.resize(Size::new(rows, cols)).expect("size the pty");
        let fd = rustix::io::dup(pty.as_fd()).expect("dup the pty");
        let (envs, cwd) = opts.environment();
        let mut cmd = pty_process::Command::new(bin_path("moor"))
            .args(opts.run_args(&dir.path().join("state")))
            .env("TERM", "xterm-256color")
            .current_dir(cwd.map_or_else(|| dir.path().to_owned(), PathBuf::from))
            .kill_on_drop(true);
        for (k, v) in envs {
            cmd = cmd.env(k, v);
        }
        let child = cmd.spawn(pts).expect("moor spawns on the pty");
        let (mut reader, writer) = pty.into_split();
        let screen = Arc::new(Mutex::new(Vec::new()));
        let (tx, changed) = watch::channel(0usize);
        let sink = screen.clone();
        let forward = test_log();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            // EIO once moor and its children closed the terminal: the end of the screen.
            while let Ok(n @ 1..) = reader.read(&mut buf).await {
                if forward {
                    eprintln!("[term] {}", String::from_utf8_lossy(&buf[..n]));
                }
                let len = {
                    let mut screen = sink.lock().expect("screen lock");
                    screen.extend_from_slice(&buf[..n]);
                    screen.len()
                };
                tx.send_replace(len);
            }
        });
        Self {
            child,
            writer,
            fd,
            screen,
            changed,
            dir,
            status: None,
        }
    }

    /// Types `bytes` at the terminal.
    pub async fn type_bytes(&mut self, bytes: &[u8]) {
        self.writer
            .write_all(bytes)
            .await
            .expect("type at the terminal");
        self.writer.flush().await.expect("flush the terminal");
    }

    /// Resizes the window (the program on it gets SIGWINCH).
    pub fn resize(&self, cols: u16, rows: u16) {
        self.writer
            .resize(Size::new(rows, cols))
            .expect("resize the terminal");
    }

    /// The terminal's current settings.
    pub fn termios(&self) -> Termios {
        termios::tcgetattr(&self.fd).expect("tcgetattr")
    }

    /// Whether the terminal is in raw mode (no line editing, no echo).
    pub fn is_raw(&self) -> bool {
        !self
            .termios()
            .local_modes
            .intersects(LocalModes::ICANON | LocalModes::ECHO)
    }

    /// Everything `moor` wrote to the terminal so far.
    pub fn screen(&self) -> Vec<u8> {
        self.screen.lock().expect("screen lock").clone()
    }

    /// Waits until the screen holds `needle`; panics after `timeout`.
    pub async fn wait_screen(&mut self, needle: &[u8], timeout: Duration) {
        let found = |s: &[u8]| s.windows(needle.len()).any(|w| w == needle);
        let waited = tokio::time::timeout(timeout, async {
            loop {
                if found(&self.screen()) {
                    return;
                }
                if self.changed.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        assert!(
            waited.is_ok() && found(&self.screen()),
            "timed out after {timeout:?} waiting for {:?} on the terminal; it shows:\n{}",
            String::from_utf8_lossy(needle),
            String::from_utf8_lossy(&self.screen())
        );
    }

    /// Waits for `moor` to exit; panics after `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        if let Some(status) = self.status {
            return status;
        }
        let status = tokio::time::timeout(timeout, self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "moor on the terminal did not exit within {timeout:?}; screen:\n{}",
                    String::from_utf8_lossy(&self.screen())
                )
            })
            .expect("wait for moor");
        self.status = Some(status);
        status
    }
}

impl Drop for TermSession {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        if should_dump_on_drop() {
            let path = self.dir.path().join("screen.log");
            let _ = std::fs::write(&path, self.screen());
            dump_logs("moor on a terminal", &[path], 60);
        }
    }
}
