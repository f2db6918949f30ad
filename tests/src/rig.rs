//! `Rig`: the usual arrangement of a test — `moord`, a fault proxy in front of it, and a `moor`
//! streaming one session through the proxy — plus the usual ending: the bridge exits 0, the
//! session ends, and the log holds exactly what the agent printed.

use std::time::Duration;

use moor_protocol::{kinds, Entry, SessionId};

use crate::assert::{agent_texts, assert_complete_session};
use crate::bridge::{BridgeOpts, TestBridge};
use crate::http::{Api, LogTail};
use crate::proxy::FaultProxy;
use crate::server::{ServerOpts, TestServer};

pub use crate::util::WAIT;
/// Bound for a whole stream to finish once it is running.
pub const FINISH: Duration = Duration::from_secs(50);

/// A server, a proxy in front of it and a bridge streaming through the proxy.
#[derive(Debug)]
pub struct Rig {
    /// The server.
    pub server: TestServer,
    /// The proxy the bridge goes through.
    pub proxy: FaultProxy,
    /// The bridge.
    pub bridge: TestBridge,
    /// API client talking to the server directly.
    pub api: Api,
    /// The session's name.
    pub name: String,
    /// The session's id.
    pub id: SessionId,
    /// A poller of the session's log, for waiting on progress.
    pub tail: LogTail,
}

impl Rig {
    /// Starts everything with `moor-test-agent <agent…>` and waits for the session to exist.
    pub async fn start(server_opts: ServerOpts, agent: &[&str]) -> Self {
        Self::start_with(server_opts, agent, |b| b).await
    }

    /// Like [`Rig::start`], letting the caller add bridge flags.
    pub async fn start_with(
        server_opts: ServerOpts,
        agent: &[&str],
        bridge_opts: impl FnOnce(BridgeOpts) -> BridgeOpts,
    ) -> Self {
        let server = TestServer::start(server_opts).await;
        let proxy = FaultProxy::start(server.addr()).await;
        let name = format!("s-{}", uuid::Uuid::new_v4().simple());
        let bridge =
            bridge_opts(BridgeOpts::new(&proxy.url(), server.token(), &name, agent)).spawn();
        let api = server.api();
        let id = api.wait_session(&name, WAIT).await.id;
        let tail = LogTail::new(api.clone(), id);
        Self {
            server,
            proxy,
            bridge,
            api,
            name,
            id,
            tail,
        }
    }

    /// Waits for a `bridge.disconnected` after seq `after` that `gone` accepts, then for the
    /// `bridge.connected` that follows it; returns the disconnect.
    pub async fn wait_reconnect(&mut self, after: u64, gone: impl Fn(&Entry) -> bool) -> Entry {
        let disconnected = self
            .tail
            .wait_kind(kinds::BRIDGE_DISCONNECTED, after, WAIT, gone)
            .await;
        self.tail
            .wait_kind(kinds::BRIDGE_CONNECTED, disconnected.seq.0, WAIT, |_| true)
            .await;
        disconnected
    }

    /// Once the last bridge has exited: waits for the session to end, and returns the whole log
    /// and what the agent printed on stdout.
    pub async fn ended_log(&self) -> (Vec<Entry>, Vec<String>) {
        self.api.wait_ended(&self.name, WAIT).await;
        let entries = self.api.entries_all(self.id).await;
        let stdout = agent_texts(&entries, "stdout");
        (entries, stdout)
    }

    /// The usual ending: the bridge exits 0, the session ends, and the log is contiguous and
    /// holds exactly `expected_stdout`. Returns the whole log.
    pub async fn finish(&mut self, expected_stdout: &[String]) -> Vec<Entry> {
        self.bridge.wait_success(FINISH).await;
        self.api.wait_ended(&self.name, WAIT).await;
        let entries = self.api.entries_all(self.id).await;
        assert_complete_session(&entries, expected_stdout);
        entries
    }
}

/// A shell script running as the agent under `--mode lines`, started by [`shell_session`].
#[derive(Debug)]
pub struct ShellSession {
    /// The `moor` running it.
    pub bridge: TestBridge,
    /// The session's id.
    pub id: SessionId,
    /// A poller of the session's log, which has seen the agent start.
    pub tail: LogTail,
    /// The `agent.start` entry.
    pub start: Entry,
}

/// Starts `moor run --mode lines -- sh -c <script>` for a new session `<prefix>-<random>` on
/// `server` and waits for the agent to start.
pub async fn shell_session(server: &TestServer, prefix: &str, script: &str) -> ShellSession {
    let name = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
    let command = ["sh", "-c", script].map(String::from);
    let bridge = BridgeOpts::new(&server.url(), server.token(), &name, &[])
        .command(&command)
        .flag("--mode", "lines")
        .spawn();
    let id = server.api().wait_session(&name, WAIT).await.id;
    let mut tail = LogTail::new(server.api(), id);
    let start = tail.wait_kind(kinds::AGENT_START, 0, WAIT, |_| true).await;
    ShellSession {
        bridge,
        id,
        tail,
        start,
    }
}
