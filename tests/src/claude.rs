//! `ClaudeEnv`: what the real Claude Code CLI needs to run offline in a test — a fake Messages
//! API, its own `HOME` and `TMPDIR`, a project directory — and the `moor run` options that
//! start it through the bridge.
//!
//! The CLI is the pinned npm package that `scripts/install-claude-code` puts in
//! `.tools/claude-code` (`scripts/test` runs it first); `MOOR_CLAUDE_BIN` overrides the path.

use std::path::PathBuf;

use moor_protocol::{kinds, Entry, SessionId};
use tempfile::TempDir;

use crate::bridge::{BridgeOpts, TestBridge};
use crate::fake_api::FakeAnthropic;
use crate::http::LogTail;
use crate::server::TestServer;
use crate::util::WAIT;

/// A fake API plus a private home and project for one Claude Code session.
#[derive(Debug)]
pub struct ClaudeEnv {
    /// The fake Messages API the CLI talks to.
    pub api: FakeAnthropic,
    /// Where the CLI runs (its working directory, where its tools write).
    pub project: PathBuf,
    dir: TempDir,
}

/// A Claude Code session under way, started by [`ClaudeEnv::session`].
#[derive(Debug)]
pub struct ClaudeSession {
    /// The session's name.
    pub name: String,
    /// The session's id.
    pub id: SessionId,
    /// The `moor` running the CLI.
    pub bridge: TestBridge,
    /// A poller of the session's log, which has seen the agent start.
    pub tail: LogTail,
    /// The `agent.start` entry.
    pub start: Entry,
}

impl ClaudeSession {
    /// Sends `sig` to the Claude Code process itself (not to `moor`).
    pub fn signal_agent(&self, sig: rustix::process::Signal) -> rustix::io::Result<()> {
        rustix::process::kill_process(crate::util::agent_pid(&self.start), sig)
    }
}

/// Path of the installed `claude` binary; panics with the fix when it is missing.
pub fn claude_bin() -> PathBuf {
    crate::util::installed_agent(
        "MOOR_CLAUDE_BIN",
        "claude-code/node_modules/.bin/claude",
        "the Claude Code CLI",
        "install-claude-code",
    )
}

impl ClaudeEnv {
    /// Starts the fake API and lays out the directories.
    pub async fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("moor-e2e-claude-")
            .tempdir()
            .expect("temp dir");
        for sub in ["home", "tmp", "project"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("claude dirs");
        }
        Self {
            api: FakeAnthropic::start().await,
            project: dir.path().join("project"),
            dir,
        }
    }

    /// A path in the project directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.project.join(name)
    }

    /// Starts `moor run -- claude <args…>` for a new session `<prefix>-<random>` on `server`,
    /// connecting through `via` (the server's URL, or a proxy's) with the options `adjust` makes,
    /// and waits for the agent to start.
    pub async fn session(
        &self,
        server: &TestServer,
        via: &str,
        prefix: &str,
        args: &[&str],
        adjust: impl FnOnce(BridgeOpts) -> BridgeOpts,
    ) -> ClaudeSession {
        let name = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
        let bridge = adjust(self.bridge(via, server.token(), &name, args)).spawn();
        let id = server.api().wait_session(&name, WAIT).await.id;
        let mut tail = LogTail::new(server.api(), id);
        let start = tail
            .wait_kind(kinds::AGENT_START, 0, WAIT, |e| {
                e.payload["adapter"] == "claude"
            })
            .await;
        ClaudeSession {
            name,
            id,
            bridge,
            tail,
            start,
        }
    }

    /// `moor run … -- claude <args…>` for `session` on `server_url`, with the CLI's environment.
    pub fn bridge(
        &self,
        server_url: &str,
        token: &str,
        session: &str,
        args: &[&str],
    ) -> BridgeOpts {
        let mut command = vec![claude_bin().display().to_string()];
        command.extend(args.iter().map(|a| (*a).to_owned()));
        self.environment(
            BridgeOpts::new(server_url, token, session, &[])
                .command(&command)
                .cwd(&self.project),
        )
    }

    /// `opts` with the CLI's environment (its home, temp dir and the fake API), for `moor run`
    /// or for a `moor host` whose sessions run the CLI.
    pub fn environment(&self, opts: BridgeOpts) -> BridgeOpts {
        opts.env("HOME", self.dir.path().join("home").display())
            .env("TMPDIR", self.dir.path().join("tmp").display())
            .env("ANTHROPIC_BASE_URL", self.api.base_url())
            .env("ANTHROPIC_API_KEY", "sk-ant-fake-key")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            // A failing model API (`[[fail:529]]`) fails the turn after two retries, not ten.
            .env("CLAUDE_CODE_MAX_RETRIES", "2")
    }
}
