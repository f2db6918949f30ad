//! `TestBridge`: a real `moor run` process driving a real `moor-test-agent`.
//!
//! Its state dir outlives the process, so a test can SIGKILL it and `respawn` it on the same
//! session and spool. Output goes to per-process log files, printed when the test fails.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;
use tokio::process::{Child, ChildStdin, Command};

use crate::util::{bin_path, capture, dump_logs, should_dump_on_drop, signal};

/// How long [`TestBridge::wait_exit`] waits for moor's last output to reach its log files.
const LOG_DRAIN: Duration = Duration::from_secs(5);

/// Flags every test bridge gets unless overridden: fast backoff so reconnects are quick.
pub const DEFAULT_FLAGS: [(&str, &str); 3] = [
    ("--backoff-initial-ms", "50"),
    ("--backoff-max-ms", "500"),
    ("--connect-timeout-ms", "2000"),
];

/// What respawned bridges share: the temp dir (state, logs, scratch files).
#[derive(Debug)]
struct Family {
    dir: TempDir,
    spawned: AtomicU32,
    keep: AtomicBool,
}

impl Drop for Family {
    fn drop(&mut self) {
        if self.keep.load(Ordering::SeqCst) {
            self.dir.disable_cleanup(true);
            eprintln!(
                "----- moor state and logs kept in {} -----",
                self.dir.path().display()
            );
        }
    }
}

/// How to start a bridge.
#[derive(Debug, Clone)]
pub struct BridgeOpts {
    server_url: String,
    token: String,
    session: String,
    flags: Vec<(String, String)>,
    agent: Vec<String>,
    state_dir: Option<PathBuf>,
    /// A command to run instead of `moor-test-agent <agent…>`.
    command: Option<Vec<String>>,
    envs: Vec<(String, String)>,
    cwd: Option<PathBuf>,
    /// Runs `moor host --config <this>` instead of `moor run`.
    host_config: Option<PathBuf>,
    /// Gives `moor` a one-page stderr pipe that nothing reads (a terminal that stopped).
    stderr_unread: bool,
}

impl BridgeOpts {
    /// A bridge for `session` on `server_url` (usually a proxy) running `moor-test-agent
    /// <agent…>`; an empty `token` leaves `moor` to its saved credentials.
    pub fn new(server_url: &str, token: &str, session: &str, agent: &[&str]) -> Self {
        Self {
            server_url: server_url.to_owned(),
            token: token.to_owned(),
            session: session.to_owned(),
            flags: DEFAULT_FLAGS
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            agent: agent.iter().map(|s| (*s).to_owned()).collect(),
            state_dir: None,
            command: None,
            envs: Vec::new(),
            cwd: None,
            host_config: None,
            stderr_unread: false,
        }
    }

    /// `moor host --config <config>` on `server_url` (usually a proxy), instead of `moor run`.
    pub fn host(server_url: &str, token: &str, config: &Path) -> Self {
        Self {
            host_config: Some(config.to_owned()),
            ..Self::new(server_url, token, "", &[])
        }
    }

    /// Runs `command` (program and arguments) as the agent instead of `moor-test-agent`.
    pub fn command(mut self, command: &[String]) -> Self {
        self.command = Some(command.to_vec());
        self
    }

    /// Sets an environment variable for `moor` (and so for the agent).
    pub fn env(mut self, key: &str, value: impl ToString) -> Self {
        self.envs.push((key.to_owned(), value.to_string()));
        self
    }

    /// Starts `moor` (and so the agent) in `dir` instead of the bridge's temp dir.
    pub fn cwd(mut self, dir: &Path) -> Self {
        self.cwd = Some(dir.to_owned());
        self
    }

    /// The `moor run …` arguments (without the program) for `state_dir`.
    pub fn run_args(&self, state_dir: &Path) -> Vec<String> {
        let command = if self.host_config.is_some() {
            "host"
        } else {
            "run"
        };
        let mut args: Vec<String> = [command, "--server", &self.server_url]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        // No token: `moor` uses the credentials `moor login` saved (see `MOOR_CONFIG_DIR`).
        if !self.token.is_empty() {
            args.extend(["--token".into(), self.token.clone()]);
        }
        match &self.host_config {
            Some(config) => args.extend(["--config".into(), config.display().to_string()]),
            None => args.extend(["--session".into(), self.session.clone()]),
        }
        args.extend(["--state-dir".into(), state_dir.display().to_string()]);
        // An empty value is a switch (`--auto-resume`).
        for (k, v) in &self.flags {
            args.push(k.clone());
            args.extend((!v.is_empty()).then(|| v.clone()));
        }
        if self.host_config.is_some() {
            return args;
        }
        args.push("--".into());
        match &self.command {
            Some(command) => args.extend(command.iter().cloned()),
            None => {
                args.push(bin_path("moor-test-agent").display().to_string());
                args.extend(self.agent.iter().cloned());
            }
        }
        args
    }

    /// The environment and working directory given with [`BridgeOpts::env`] / [`BridgeOpts::cwd`].
    pub fn environment(&self) -> (&[(String, String)], Option<&Path>) {
        (&self.envs, self.cwd.as_deref())
    }

    /// Sets (or replaces) `--name value`.
    pub fn flag(mut self, name: &str, value: impl ToString) -> Self {
        self.flags.retain(|(k, _)| k != name);
        self.flags.push((name.to_owned(), value.to_string()));
        self
    }

    /// Gives `moor` a stderr that nothing reads: a pipe of one page (4 KiB), held open, never
    /// drained, like a terminal stopped with Ctrl-S.
    pub fn stderr_unread(mut self) -> Self {
        self.stderr_unread = true;
        self
    }

    /// Uses this state dir instead of a fresh one.
    pub fn state_dir(mut self, dir: &Path) -> Self {
        self.state_dir = Some(dir.to_owned());
        self
    }

    /// Starts the bridge.
    pub fn spawn(self) -> TestBridge {
        let dir = tempfile::Builder::new()
            .prefix("moor-e2e-bridge-")
            .tempdir()
            .expect("temp dir");
        TestBridge::spawn_in(
            Arc::new(Family {
                dir,
                spawned: AtomicU32::new(0),
                keep: AtomicBool::new(false),
            }),
            self,
        )
    }
}

/// A running (or exited) `moor run`.
#[derive(Debug)]
pub struct TestBridge {
    family: Arc<Family>,
    opts: BridgeOpts,
    label: String,
    child: Option<Child>,
    // Held open and never written: the agent's input comes from the server, not from here.
    _stdin: Option<ChildStdin>,
    // With `stderr_unread`: the pipe's read end, held open and never read.
    _stderr_unread: Option<std::os::fd::OwnedFd>,
    /// The tasks copying stdout and stderr into the log files: done once the pipes close.
    captured: Vec<tokio::task::JoinHandle<()>>,
    status: Option<ExitStatus>,
}

impl TestBridge {
    /// Starts `moor run` with the default flags.
    pub fn start(server_url: &str, token: &str, session: &str, agent: &[&str]) -> Self {
        BridgeOpts::new(server_url, token, session, agent).spawn()
    }

    fn spawn_in(family: Arc<Family>, mut opts: BridgeOpts) -> Self {
        let n = family.spawned.fetch_add(1, Ordering::SeqCst) + 1;
        let label = format!("moor#{n}");
        let state_dir = opts
            .state_dir
            .clone()
            .unwrap_or_else(|| family.dir.path().join("state"));
        std::fs::create_dir_all(&state_dir).expect("state dir");
        opts.state_dir = Some(state_dir.clone());
        let mut cmd = Command::new(bin_path("moor"));
        cmd.args(opts.run_args(&state_dir));
        for (k, v) in &opts.envs {
            cmd.env(k, v);
        }
        let unread = opts.stderr_unread.then(|| {
            let (read, write) = rustix::pipe::pipe().expect("a pipe");
            rustix::pipe::fcntl_setpipe_size(&read, 4096).expect("a one-page pipe");
            (read, write)
        });
        let stderr = match &unread {
            Some((_, write)) => Stdio::from(write.try_clone().expect("pipe end clones")),
            None => Stdio::piped(),
        };
        cmd.current_dir(opts.cwd.as_deref().unwrap_or(family.dir.path()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("moor spawns");
        let dir = family.dir.path();
        let mut captured = vec![capture(
            child.stdout.take().expect("piped"),
            &dir.join(format!("{label}.stdout.log")),
            format!("{label} out"),
            None,
        )];
        if let Some(stderr) = child.stderr.take() {
            captured.push(capture(
                stderr,
                &dir.join(format!("{label}.stderr.log")),
                format!("{label} err"),
                None,
            ));
        }
        let stdin = child.stdin.take();
        Self {
            family,
            opts,
            label,
            child: Some(child),
            _stdin: stdin,
            _stderr_unread: unread.map(|(read, _)| read),
            captured,
            status: None,
        }
    }

    /// Starts a new `moor` on the same session, server and state dir, running `agent`.
    pub fn respawn(&self, agent: &[&str]) -> TestBridge {
        let mut opts = self.opts.clone();
        opts.agent = agent.iter().map(|s| (*s).to_owned()).collect();
        Self::spawn_in(self.family.clone(), opts)
    }

    /// The bridge's state dir (its spool lives there).
    pub fn state_dir(&self) -> PathBuf {
        self.opts.state_dir.clone().expect("set at spawn")
    }

    /// A path in this bridge family's temp dir (for agent progress files and the like).
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.family.dir.path().join(name)
    }

    /// Label used in logs (`moor#N`).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    fn log_files(&self) -> Vec<PathBuf> {
        let dir = self.family.dir.path();
        vec![
            dir.join(format!("{}.stdout.log", self.label)),
            dir.join(format!("{}.stderr.log", self.label)),
        ]
    }

    /// What the bridge printed on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log_files()[1]).unwrap_or_default()
    }

    /// Waits for the process to exit (panics after `timeout`) and returns its status.
    pub async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        if let Some(status) = self.status {
            return status;
        }
        let child = self.child.as_mut().expect("bridge was spawned");
        let status = match tokio::time::timeout(timeout, child.wait()).await {
            Ok(status) => status.expect("wait for moor"),
            Err(_) => panic!("{} did not exit within {timeout:?}", self.label),
        };
        // What moor wrote before it exited is in its pipes; let the copies reach the log files
        // before anyone reads them. A process moor left behind may hold a pipe open: bounded.
        for copy in std::mem::take(&mut self.captured) {
            let _ = tokio::time::timeout(LOG_DRAIN, copy).await;
        }
        self.status = Some(status);
        status
    }

    /// Waits for the process to exit with status 0.
    pub async fn wait_success(&mut self, timeout: Duration) {
        let status = self.wait_exit(timeout).await;
        assert!(
            status.success(),
            "{} exited with {status}; stderr:\n{}",
            self.label,
            self.stderr()
        );
    }

    /// True while the process has not exited.
    pub fn running(&mut self) -> bool {
        if self.status.is_some() {
            return false;
        }
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(status))) => {
                self.status = Some(status);
                false
            }
            Some(Ok(None)) => true,
            _ => false,
        }
    }

    /// SIGKILL: a crash of the bridge. Waits until it is gone.
    pub async fn kill(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.start_kill();
            if let Ok(status) = child.wait().await {
                self.status = Some(status);
            }
        }
    }

    /// SIGTERM (does not wait).
    pub fn terminate(&self) {
        if let Some(pid) = self.pid() {
            signal(pid, rustix::process::Signal::TERM);
        }
    }
}

impl Drop for TestBridge {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.start_kill();
        }
        if should_dump_on_drop() {
            dump_logs(&self.label, &self.log_files(), 200);
            self.family.keep.store(true, Ordering::SeqCst);
        }
    }
}
