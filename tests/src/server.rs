//! `TestServer`: a real `moord` process on a temp data dir, with its output captured.
//!
//! It owns the process and its directory: SIGKILL (`kill`), SIGTERM (`terminate`), and
//! `restart` on the same port and data dir. The readiness event is the `moord listening on`
//! line on stdout; nothing waits by sleeping.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use moor_protocol::api::SessionInfo;
use moor_protocol::{Entry, SessionId};
use tempfile::TempDir;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::http::Api;
use crate::sse::{SseClient, SseOpts};
use crate::util::WAIT;
use crate::util::{bin_path, capture, dump_logs, should_dump_on_drop, signal};

/// How long `moord` may take to print its listening line.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a SIGTERM'd `moord` may take to exit.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);

/// Extra `moord` flags.
#[derive(Debug, Clone, Default)]
pub struct ServerOpts {
    flags: Vec<(String, String)>,
    /// Files written into the data dir before the first start.
    files: Vec<(String, Vec<u8>)>,
    /// A backup `moord restore` puts into the data dir before the first start.
    restore: Option<PathBuf>,
    envs: Vec<(String, String)>,
    /// The data dir, when not a fresh one beside the logs (a small filesystem, say).
    data_dir: Option<PathBuf>,
}

impl ServerOpts {
    /// No extra flags.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `--name value`.
    pub fn flag(mut self, name: &str, value: impl ToString) -> Self {
        self.flags.push((name.to_owned(), value.to_string()));
        self
    }

    /// Sets an environment variable for `moord`.
    pub fn env(mut self, key: &str, value: impl ToString) -> Self {
        self.envs.push((key.to_owned(), value.to_string()));
        self
    }

    /// Writes `name` (mode 0600) into the data dir before the first start, e.g. another node's
    /// `jwt-keys.json`, as nodes sharing a data dir would see it.
    pub fn data_file(mut self, name: &str, contents: impl Into<Vec<u8>>) -> Self {
        self.files.push((name.to_owned(), contents.into()));
        self
    }

    /// Uses `dir` (which must exist) as the data dir instead of a fresh temp dir.
    pub fn data_dir(mut self, dir: &Path) -> Self {
        self.data_dir = Some(dir.to_owned());
        self
    }

    /// Runs `moord restore <backup>` into the fresh data dir before the first start.
    pub fn restore_from(mut self, backup: &Path) -> Self {
        self.restore = Some(backup.to_owned());
        self
    }
}

/// A running (or stopped, between `kill` and `restart`) `moord`.
#[derive(Debug)]
pub struct TestServer {
    dir: TempDir,
    opts: ServerOpts,
    port: u16,
    token: String,
    child: Option<Child>,
    incarnation: u32,
    /// `https` when it serves TLS (`--tls-cert`), else `http`.
    scheme: &'static str,
}

impl TestServer {
    /// The entries an SSE viewer replays from the start of session `id`, up to `head`.
    pub async fn replayed(&self, id: SessionId, head: u64) -> Vec<Entry> {
        let viewer = SseClient::connect(
            &self.url(),
            self.token(),
            id,
            SseOpts {
                after: Some(0),
                ..SseOpts::default()
            },
        );
        viewer.wait_seq(head, WAIT).await;
        viewer.stop();
        viewer.snapshot().entries
    }

    /// Starts `moord` on `127.0.0.1:0` with a fresh data dir and waits for it to listen.
    pub async fn start(opts: ServerOpts) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("moor-e2e-server-")
            .tempdir()
            .expect("temp dir");
        let data = opts
            .data_dir
            .clone()
            .unwrap_or_else(|| dir.path().join("data"));
        std::fs::create_dir_all(&data).expect("data dir");
        for (name, contents) in &opts.files {
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(data.join(name))
                .expect("data file");
            std::io::Write::write_all(&mut f, contents).expect("write data file");
        }
        if let Some(backup) = &opts.restore {
            let out = std::process::Command::new(bin_path("moord"))
                .arg("--data-dir")
                .arg(&data)
                .arg("restore")
                .arg(backup)
                .stdin(Stdio::null())
                .output()
                .expect("moord restore runs");
            assert!(
                out.status.success(),
                "moord restore {}: {}",
                backup.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut server = Self {
            dir,
            opts,
            port: 0,
            token: String::new(),
            child: None,
            incarnation: 0,
            scheme: "http",
        };
        server.spawn().await;
        server
    }

    fn data_dir(&self) -> PathBuf {
        self.opts
            .data_dir
            .clone()
            .unwrap_or_else(|| self.dir.path().join("data"))
    }

    fn log_files(&self) -> Vec<PathBuf> {
        vec![
            self.dir.path().join("moord.stdout.log"),
            self.dir.path().join("moord.stderr.log"),
        ]
    }

    async fn spawn(&mut self) {
        self.incarnation += 1;
        let label = format!("moord#{}", self.incarnation);
        for f in self.log_files() {
            append_line(&f, &format!("===== {label} starting ====="));
        }
        let mut cmd = Command::new(bin_path("moord"));
        cmd.arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--data-dir")
            .arg(self.data_dir());
        for (k, v) in &self.opts.flags {
            cmd.arg(k).arg(v);
        }
        for (k, v) in &self.opts.envs {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("moord spawns");
        let (tx, mut rx) = mpsc::unbounded_channel();
        let files = self.log_files();
        // The copies run until moord's pipes close; nothing waits for them.
        drop(capture(
            child.stdout.take().expect("piped"),
            &files[0],
            format!("{label} out"),
            Some(tx),
        ));
        drop(capture(
            child.stderr.take().expect("piped"),
            &files[1],
            format!("{label} err"),
            None,
        ));
        self.child = Some(child);

        let addr = tokio::time::timeout(STARTUP_TIMEOUT, async {
            while let Some(line) = rx.recv().await {
                for scheme in ["http", "https"] {
                    let marker = format!("listening on {scheme}://");
                    if let Some(rest) = line.split(&marker).nth(1) {
                        let addr = rest.trim().trim_end_matches('/').parse::<SocketAddr>();
                        return addr.ok().map(|a| (a, scheme));
                    }
                }
            }
            None
        })
        .await;
        let addr = match addr {
            Ok(Some((addr, scheme))) => {
                self.scheme = scheme;
                addr
            }
            Ok(None) => {
                dump_logs(&label, &self.log_files(), 200);
                panic!("{label} exited (or printed a bad address) before listening");
            }
            Err(_) => {
                dump_logs(&label, &self.log_files(), 200);
                panic!("{label} did not print its listening line within {STARTUP_TIMEOUT:?}");
            }
        };
        assert!(
            self.port == 0 || addr.port() == self.port,
            "{label} listened on {addr}, expected port {}",
            self.port
        );
        self.port = addr.port();
        let token_path = self.data_dir().join("admin.token");
        let given = self.opts.flags.iter().find(|(k, _)| k == "--admin-token");
        let token = match given {
            Some((_, t)) => t.clone(),
            None => std::fs::read_to_string(&token_path)
                .unwrap_or_else(|e| panic!("{label}: cannot read {}: {e}", token_path.display()))
                .trim()
                .to_owned(),
        };
        assert!(!token.is_empty(), "{label}: empty admin token");
        assert!(
            self.token.is_empty() || self.token == token,
            "{label}: admin token changed across a restart"
        );
        self.token = token;
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `http://127.0.0.1:PORT` (`https://` when it serves TLS).
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr())
    }

    /// The admin token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// A typed API client talking to this server directly.
    pub fn api(&self) -> Api {
        Api::new(self.url(), self.token.clone())
    }

    /// The whole log of `session`, paged through `/entries`.
    pub async fn entries_all(&self, session: SessionId) -> Vec<Entry> {
        self.api().entries_all(session).await
    }

    /// The session named (or with id) `id_or_name`, `None` if unknown.
    pub async fn session(&self, id_or_name: &str) -> Option<SessionInfo> {
        self.api().session(id_or_name).await
    }

    /// Asks the server to close the session's live bridge socket with `code` and `reason`.
    pub async fn close_bridge(
        &self,
        session: SessionId,
        code: u16,
        reason: &str,
    ) -> reqwest::StatusCode {
        self.api().close_bridge(session, code, reason).await
    }

    /// The process id of the running incarnation.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// The server's captured stdout and stderr so far.
    pub fn logs(&self) -> String {
        self.log_files()
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap_or_default())
            .collect()
    }

    /// A file of the data dir (e.g. `jwt-keys.json`), as it is now.
    pub fn data_file(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.data_dir().join(name)).expect("read data file")
    }

    /// The test's temp dir (data dir and logs live under it).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// SIGKILL: a crash. Waits until the process is gone.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    /// SIGTERM, then waits for a graceful exit (panics if it takes longer than
    /// [`SHUTDOWN_TIMEOUT`]). Returns the exit status.
    pub async fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("moord is running");
        if let Some(pid) = child.id() {
            signal(pid, rustix::process::Signal::TERM);
        }
        match tokio::time::timeout(SHUTDOWN_TIMEOUT, child.wait()).await {
            Ok(status) => status.expect("wait for moord"),
            Err(_) => {
                let _ = child.start_kill();
                panic!("moord did not exit within {SHUTDOWN_TIMEOUT:?} of SIGTERM");
            }
        }
    }

    /// Sets `--name value` for the next (re)start, replacing an earlier value.
    pub fn set_flag(&mut self, name: &str, value: impl ToString) {
        self.opts.flags.retain(|(k, _)| k != name);
        self.opts.flags.push((name.to_owned(), value.to_string()));
    }

    /// Starts the server again on the same port and data dir (killing it first if it runs).
    pub async fn restart(&mut self) {
        self.kill().await;
        self.spawn().await;
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.start_kill();
        }
        if should_dump_on_drop() {
            dump_logs("moord", &self.log_files(), 300);
            self.dir.disable_cleanup(true);
            eprintln!(
                "----- moord data and logs kept in {} -----",
                self.dir.path().display()
            );
        }
    }
}

fn append_line(path: &Path, line: &str) {
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{line}");
    }
}
