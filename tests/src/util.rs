//! Shared plumbing: locating the built binaries, capturing child output, bounded waiting.
//!
//! Nothing here sleeps to synchronise: `eventually` re-checks a condition and its timeout is
//! only a failure guard.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::mpsc;

/// Bound for a single expected event (a reconnect, an entry showing up).
pub const WAIT: Duration = Duration::from_secs(15);

/// How often [`eventually`] re-checks its condition.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Whether `TEST_LOG=1` asks for child output to be forwarded live.
pub fn test_log() -> bool {
    std::env::var("TEST_LOG").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The directory holding the workspace binaries (`target/<profile>/`), found from the running
/// test executable (`target/<profile>/deps/<test>-<hash>`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe is readable");
    let mut dir = exe
        .parent()
        .expect("test executable has a parent dir")
        .to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// Path of a workspace binary, panicking with the fix when it was not built.
pub fn bin_path(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "{} not found: run `cargo build --workspace` first",
        path.display()
    );
    path
}

/// An agent CLI installed for the end-to-end tests: the path in the environment variable
/// `env_var` when set, else `.tools/<under_tools>` at the top of the tree; panics naming `what`
/// and the `install` script when it is missing.
pub fn installed_agent(env_var: &str, under_tools: &str, what: &str, install: &str) -> PathBuf {
    let path = std::env::var_os(env_var)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../.tools")
                .join(under_tools)
        });
    assert!(
        path.is_file(),
        "{what} is not installed at {}: run scripts/{install} (scripts/test does)",
        path.display()
    );
    path
}

/// The agent's pid that an `agent.start` entry names; panics when it names none.
pub fn agent_pid(start: &moor_protocol::Entry) -> rustix::process::Pid {
    start.payload["pid"]
        .as_i64()
        .and_then(|pid| rustix::process::Pid::from_raw(pid as i32))
        .unwrap_or_else(|| panic!("agent.start names the agent's pid: {start:?}"))
}

/// Re-checks `cond` until it holds; panics naming `what` after `timeout`.
pub async fn eventually<F, Fut>(timeout: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if cond().await {
            return;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Like [`eventually`], for a condition that yields a value once it holds.
pub async fn eventually_some<T, F, Fut>(timeout: Duration, what: &str, mut cond: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = cond().await {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Copies a child's output stream line by line into `file` (appending), forwards it to stderr
/// when `TEST_LOG=1`, and hands each line to `lines` when given (so a caller can wait for a
/// readiness line). Ends at EOF; the handle tells when everything written before it is in `file`.
pub fn capture<R>(
    stream: R,
    file: &Path,
    label: String,
    lines: Option<mpsc::UnboundedSender<String>>,
) -> tokio::task::JoinHandle<()>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let mut out: File = OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .expect("log file can be opened");
    let forward = test_log();
    tokio::spawn(async move {
        let mut reader = BufReader::new(stream).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            let _ = writeln!(out, "{line}");
            if forward {
                eprintln!("[{label}] {line}");
            }
            if let Some(tx) = &lines {
                let _ = tx.send(line);
            }
        }
    })
}

/// Prints the last `max_lines` lines of each log file to stderr, under a header.
pub fn dump_logs(title: &str, files: &[PathBuf], max_lines: usize) {
    for f in files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let skip = lines.len().saturating_sub(max_lines);
        eprintln!(
            "----- {title}: {} (last {} of {} lines) -----",
            f.display(),
            lines.len() - skip,
            lines.len()
        );
        for l in &lines[skip..] {
            eprintln!("{l}");
        }
    }
}

/// Whether logs should be dumped (and temp dirs kept) when a harness object is dropped: the
/// test is failing.
pub fn should_dump_on_drop() -> bool {
    std::thread::panicking()
}

/// Sends `signal` to `pid`.
pub fn signal(pid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// `len` pseudo-random bytes from `seed` (xorshift: fast, reproducible, every byte value).
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Runs git in `dir` with a fixed identity and no signing (and none of the `GIT_DIR`-style
/// variables a git hook running the tests would set), failing the test on error; returns its
/// standard output.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=Dev", "-c", "user.email=dev@example.com"])
        .args([
            "-c",
            "commit.gpgSign=false",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env_remove("GIT_DIR")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_WORK_TREE")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The bytes of the user's git state in `repo` that a checkpoint must never change: the index,
/// HEAD, the markers of an operation in progress, the stash, and every branch and tag.
pub fn git_state(repo: &Path) -> BTreeMap<String, Vec<u8>> {
    let g = repo.join(".git");
    let mut out = BTreeMap::new();
    for name in [
        "index",
        "HEAD",
        "packed-refs",
        "MERGE_HEAD",
        "ORIG_HEAD",
        "refs/stash",
        "logs/refs/stash",
    ] {
        if let Ok(bytes) = std::fs::read(g.join(name)) {
            out.insert(name.to_owned(), bytes);
        }
    }
    let refs = git(repo, &["for-each-ref", "refs/heads", "refs/tags"]);
    out.insert("refs".into(), refs.into_bytes());
    out
}

/// A clone of `origin` in a new temporary directory (kept while the returned handle lives),
/// made without hard links so that nothing of it is shared with `origin`; returns the clone's
/// path.
pub fn fresh_clone(origin: &Path) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("clone");
    let origin = origin.to_str().expect("a UTF-8 path");
    git(dir.path(), &["clone", "-q", "--no-local", origin, "clone"]);
    (dir, path)
}

/// Makes `dir` a git repository with `files` (path, content) committed as its one commit.
pub fn git_work_tree(dir: &Path, files: &[(&str, &[u8])]) {
    git(dir, &["init", "-q"]);
    for (path, content) in files {
        let full = dir.join(path);
        std::fs::create_dir_all(full.parent().expect("a file has a parent")).expect("mkdir");
        std::fs::write(full, content).expect("write");
    }
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "base"]);
}

/// Serves `app` on 127.0.0.1 (a free port) until the returned token is cancelled: the local
/// stand-ins for push services and notification sinks.
pub async fn serve_loopback(
    app: axum::Router,
    what: &str,
) -> (std::net::SocketAddr, tokio_util::sync::CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind the {what}: {e}"));
    let addr = listener.local_addr().expect("local addr");
    let stop = tokio_util::sync::CancellationToken::new();
    let shutdown = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
    });
    (addr, stop)
}
