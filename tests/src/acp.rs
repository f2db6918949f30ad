//! `AcpEnv`: a private project and home for one JSON-RPC agent under `moor run`, and the session
//! it runs in: an Agent Client Protocol agent (`moor-acp-agent`, this crate's small ACP agent, or
//! a real one: Gemini CLI, Codex through codex-acp) under the `acp` adapter, or the Codex CLI's
//! `codex app-server` under the `codex` adapter.

use std::path::{Path, PathBuf};
use std::time::Duration;

use moor_protocol::payload::PermissionDecision;
use moor_protocol::recovery::RecoveryBrief;
use moor_protocol::{kinds, Entry, SessionId};
use serde_json::{json, Value};
use tempfile::TempDir;

use crate::assert::{agent_kinds, first_of_kind};
use crate::bridge::{BridgeOpts, TestBridge};
use crate::http::LogTail;
use crate::server::{ServerOpts, TestServer};
use crate::util::WAIT;
use crate::util::{agent_pid, bin_path, installed_agent};

/// A project directory and a home for one agent.
#[derive(Debug)]
pub struct AcpEnv {
    /// Where the agent runs.
    pub project: PathBuf,
    /// The agent's `HOME`.
    pub home: PathBuf,
    /// Extra environment for the agent.
    pub envs: Vec<(String, String)>,
    /// The adapter `moor` is expected to pick (`acp` unless set).
    pub adapter: &'static str,
    dir: TempDir,
}

/// An ACP session under way.
#[derive(Debug)]
pub struct AcpSession {
    /// The session's id.
    pub id: SessionId,
    /// The `moor` running the agent.
    pub bridge: TestBridge,
    /// A poller of the session's log, which has seen the agent start.
    pub tail: LogTail,
    /// The `agent.start` entry.
    pub start: Entry,
}

impl AcpEnv {
    /// Lays out the directories.
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("moor-e2e-acp-")
            .tempdir()
            .expect("temp dir");
        for sub in ["home", "project"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("acp dirs");
        }
        Self {
            project: dir.path().join("project"),
            home: dir.path().join("home"),
            envs: Vec::new(),
            adapter: "acp",
            dir,
        }
    }

    /// A path in the project directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.project.join(name)
    }

    /// `moor-acp-agent`'s command line.
    pub fn test_agent() -> Vec<String> {
        vec![bin_path("moor-acp-agent").display().to_string()]
    }

    /// `moor run … -- command` for `session` on `server_url` (auto mode: `--mode acp` for an
    /// agent not named `gemini`).
    pub fn bridge(
        &self,
        server_url: &str,
        token: &str,
        session: &str,
        command: &[String],
    ) -> BridgeOpts {
        let mut opts = BridgeOpts::new(server_url, token, session, &[])
            .command(command)
            .cwd(&self.project)
            .env("HOME", self.home.display())
            .env("TMPDIR", self.dir.path().display())
            .env(
                "MOOR_ACP_AGENT_DIR",
                self.dir.path().join("agent-state").display(),
            );
        for (k, v) in &self.envs {
            opts = opts.env(k, v);
        }
        opts
    }

    /// Starts `command` for a new session `<prefix>-<random>` on `server` with the options
    /// `adjust` makes, and waits for the agent to start.
    pub async fn session(
        &self,
        server: &TestServer,
        prefix: &str,
        command: &[String],
        adjust: impl FnOnce(BridgeOpts) -> BridgeOpts,
    ) -> AcpSession {
        let name = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
        let bridge = adjust(self.bridge(&server.url(), server.token(), &name, command)).spawn();
        let id = server.api().wait_session(&name, WAIT).await.id;
        let mut tail = LogTail::new(server.api(), id);
        let start = tail
            .wait_kind(kinds::AGENT_START, 0, WAIT, |e| {
                e.payload["adapter"] == self.adapter
            })
            .await;
        AcpSession {
            id,
            bridge,
            tail,
            start,
        }
    }
}

impl Default for AcpEnv {
    fn default() -> Self {
        Self::new()
    }
}

/// Path of the installed `gemini` binary; panics with the fix when it is missing.
pub fn gemini_bin() -> PathBuf {
    installed_agent(
        "MOOR_GEMINI_BIN",
        "gemini-cli/node_modules/.bin/gemini",
        "the Gemini CLI",
        "install-agents",
    )
}

impl AcpEnv {
    /// The environment Gemini CLI needs to run offline against `api`: an API key and base URL,
    /// API-key auth, no folder trust prompt, no usage statistics, one attempt per request, and no
    /// relaunch as a child (which would ignore SIGTERM).
    pub fn for_gemini(api: &crate::fake_gemini::FakeGemini) -> Self {
        let mut env = Self::new();
        let settings = serde_json::json!({
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
            "privacy": {"usageStatisticsEnabled": false},
            "general": {"maxAttempts": 1, "disableAutoUpdate": true},
        });
        let dir = env.home.join(".gemini");
        std::fs::create_dir_all(&dir).expect("gemini settings dir");
        std::fs::write(dir.join("settings.json"), settings.to_string()).expect("gemini settings");
        env.envs = vec![
            ("GEMINI_API_KEY".into(), "fake-gemini-key".into()),
            ("GOOGLE_GEMINI_BASE_URL".into(), api.base_url()),
            ("GEMINI_CLI_NO_RELAUNCH".into(), "true".into()),
        ];
        env
    }

    /// `gemini -m gemini-2.5-flash` (a fixed model: no routing requests); auto mode adds `--acp`.
    pub fn gemini_command() -> Vec<String> {
        vec![
            gemini_bin().display().to_string(),
            "-m".into(),
            "gemini-2.5-flash".into(),
        ]
    }
}

/// How long a turn may take on a loaded machine (a failure guard).
pub const FINISH: Duration = Duration::from_secs(60);

/// A session running an ACP agent under `moor`, on its own `moord`.
#[derive(Debug)]
pub struct AcpRun {
    /// The agent's directories.
    pub env: AcpEnv,
    /// The server.
    pub server: TestServer,
    /// The session.
    pub s: AcpSession,
    inputs: u32,
}

/// The agents a test leaves behind when it kills `moor` (as a crash does) are stopped with it:
/// an npm-launched agent that does not exit when its stdin closes (codex-acp) would outlive
/// the test. Each agent runs in a process group of its own, named by its `agent.start` pid.
impl Drop for AcpRun {
    fn drop(&mut self) {
        for e in self
            .s
            .tail
            .entries
            .iter()
            .filter(|e| e.kind == kinds::AGENT_START)
        {
            let pid = e.payload["pid"]
                .as_i64()
                .and_then(|p| i32::try_from(p).ok());
            if let Some(pid) = pid.and_then(rustix::process::Pid::from_raw) {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

impl AcpRun {
    /// `moor run [flags] -- command` in `env` on a new server; waits for the agent to start.
    pub async fn start(env: AcpEnv, command: &[String], flags: &[(&str, &str)]) -> Self {
        let server = TestServer::start(ServerOpts::new()).await;
        let s = env
            .session(&server, "acp", command, |o| {
                flags.iter().fold(o, |o, (k, v)| o.flag(k, v))
            })
            .await;
        Self {
            env,
            server,
            s,
            inputs: 0,
        }
    }

    /// Posts an input of `kind`; returns its seq.
    pub async fn input(&mut self, kind: &str, payload: Value) -> u64 {
        self.inputs += 1;
        let msg = format!("in-{}", self.inputs);
        let accepted = self
            .server
            .api()
            .post_input_kind(self.s.id, &msg, kind, payload)
            .await;
        accepted.seq.0
    }

    /// Posts a prompt; returns its seq.
    pub async fn prompt(&mut self, text: &str) -> u64 {
        self.input(kinds::INPUT_TEXT, json!({ "text": text })).await
    }

    /// Waits for an entry of `kind` after `after`.
    pub async fn wait(&mut self, kind: &str, after: u64) -> Entry {
        self.s.tail.wait_kind(kind, after, FINISH, |_| true).await
    }

    /// Answers the permission request `request`; returns the input's seq.
    pub async fn decide(&mut self, request: &Entry, decision: PermissionDecision) -> u64 {
        let payload = crate::http::permission_answer(request, decision);
        self.input(kinds::INPUT_PERMISSION, payload).await
    }

    /// The entries fetched so far after `seq`.
    pub fn after(&self, seq: u64) -> Vec<Entry> {
        self.s
            .tail
            .entries
            .iter()
            .filter(|e| e.seq.0 > seq)
            .cloned()
            .collect()
    }

    /// `moor` and the agent (its whole process group) killed at once, as a machine crash would;
    /// returns the server's `session.interrupted` entry, written after `after`.
    pub async fn crash(&mut self, after: u64) -> Entry {
        self.s.bridge.kill().await;
        // Already gone is fine: the point is that nothing of it runs on.
        let _ = self.s.signal_agent_group(rustix::process::Signal::KILL);
        self.s
            .tail
            .wait_kind("session.interrupted", after, FINISH, |_| true)
            .await
    }

    /// Prompts `"[[<tool>:touch FILE]]"` (`tool` is the agent's script marker: `bash`, or `tool`
    /// for `moor-acp-agent`) and answers its permission request with `decision`; asserts that
    /// nothing ran before the decision and that the file exists exactly when it was allowed,
    /// and, when allowed, that the turn logged the call as a `Bash` tool use of `touch FILE`.
    pub async fn touch_if(
        &mut self,
        tool: &str,
        file: &Path,
        decision: PermissionDecision,
    ) -> Decided {
        let seq = self
            .prompt(&format!("[[{tool}:touch {}]]", file.display()))
            .await;
        let request = self.wait(kinds::AGENT_PERMISSION_REQUEST, seq).await;
        assert!(!file.exists(), "nothing runs before a person decides");
        let decided = self.decide(&request, decision).await;
        let result = self.wait(kinds::AGENT_RESULT, decided).await;
        if decision == PermissionDecision::Allow {
            assert!(file.exists(), "allowed: the command ran");
            let turn = self.after(seq);
            let tool = first_of_kind(&turn, kinds::AGENT_TOOL_USE);
            assert_eq!(tool.payload["name"], "Bash", "{tool:?}");
            assert_eq!(
                tool.payload["input"]["command"],
                format!("touch {}", file.display()),
                "{tool:?}"
            );
        } else {
            assert!(!file.exists(), "denied: the command did not run");
        }
        Decided {
            seq,
            request,
            decided,
            result,
        }
    }

    /// Waits for the agent's `agent.session`; returns the agent's own session id.
    pub async fn conversation(&mut self) -> Value {
        let session = self.wait(kinds::AGENT_SESSION, 0).await;
        session.payload["agent_session_id"].clone()
    }

    /// `moor run --session X` again after the crash that wrote `interrupted`; returns the new
    /// `moor` and its `agent.restart` entry.
    pub async fn run_again(&mut self, interrupted: &Entry) -> (TestBridge, Entry) {
        let again = self.s.bridge.respawn(&[]);
        let restart = self.wait(kinds::AGENT_RESTART, interrupted.seq.0).await;
        (again, restart)
    }

    /// Prompts `prompt` (a script that makes the model stream go silent), waits for the
    /// watchdog's `agent.stalled` and interrupts the turn; asserts the stall is reported for the
    /// streaming phase and the interrupt ends the turn as cancelled.
    pub async fn stall_then_interrupt(&mut self, prompt: &str) -> Stalled {
        let seq = self.prompt(prompt).await;
        let stalled = self.wait(kinds::AGENT_STALLED, seq).await;
        let interrupt = self.input(kinds::INPUT_INTERRUPT, json!({})).await;
        let result = self.wait(kinds::AGENT_RESULT, interrupt).await;
        assert_eq!(stalled.payload["phase"], "streaming", "{stalled:?}");
        assert_eq!(result.payload["subtype"], "cancelled", "{result:?}");
        Stalled {
            seq,
            stalled,
            interrupt,
            result,
        }
    }

    /// Prompts `text` and waits for its turn to end without an error: the agent still takes
    /// prompts. Returns the prompt's seq.
    pub async fn prompt_answered(&mut self, text: &str) -> u64 {
        let seq = self.prompt(text).await;
        let result = self.wait(kinds::AGENT_RESULT, seq).await;
        assert_eq!(result.payload["is_error"], false, "{result:?}");
        seq
    }

    /// One finished turn (`remember the word heron`), then `moor` and the agent killed while
    /// an allowed `command` runs (prompted as `"[[<tool>:COMMAND]]"`); asserts that the
    /// recovery brief names the cut-off command. Returns the `session.interrupted` entry and
    /// the brief.
    pub async fn crash_mid_command(&mut self, tool: &str, command: &str) -> (Entry, RecoveryBrief) {
        self.prompt_answered("remember the word heron").await;
        let seq = self.prompt(&format!("[[{tool}:{command}]]")).await;
        let request = self.wait(kinds::AGENT_PERMISSION_REQUEST, seq).await;
        let decided = self.decide(&request, PermissionDecision::Allow).await;
        self.wait(kinds::AGENT_PERMISSION_RESOLVED, decided).await;
        let interrupted = self.crash(decided).await;
        assert!(interrupted.seq.0 > decided, "{interrupted:?}");
        let brief = self.brief().await;
        assert_uncertain(&brief, command);
        (interrupted, brief)
    }

    /// After a restart whose brief quotes the cut-off `command`, the fake model asks to run it
    /// again: asserts it is asked for, not run unasked, and says no; waits for the turn to end.
    pub async fn deny_the_rerun(&mut self, restart: &Entry, command: &str) {
        let asked = self
            .wait(kinds::AGENT_PERMISSION_REQUEST, restart.seq.0)
            .await;
        assert_eq!(asked.payload["input"]["command"], command, "{asked:?}");
        let denied = self.decide(&asked, PermissionDecision::Deny).await;
        self.wait(kinds::AGENT_RESULT, denied).await;
    }

    /// After the crash that wrote `interrupted` while `command` ran (see
    /// [`crash_mid_command`](Self::crash_mid_command)): `moor run --session X` again, the rerun
    /// of `command` the brief prompts denied, then a question about the first turn; asserts the
    /// agent's own session `conversation` was continued. Returns the new `moor`, its
    /// `agent.restart` and the question's seq.
    pub async fn continue_and_ask(
        &mut self,
        interrupted: &Entry,
        conversation: &Value,
        command: &str,
    ) -> (TestBridge, Entry, u64) {
        let (again, restart) = self.run_again(interrupted).await;
        self.deny_the_rerun(&restart, command).await;
        let question = self.prompt("which word?").await;
        self.wait(kinds::AGENT_RESULT, question).await;
        assert_continued(&restart, conversation, command);
        (again, restart, question)
    }

    /// The first entry of `kind` after `seq`; panics when there is none yet.
    pub fn first_after(&self, seq: u64, kind: &str) -> Entry {
        first_of_kind(&self.after(seq), kind).clone()
    }

    /// The session's recovery brief.
    pub async fn brief(&self) -> RecoveryBrief {
        let resp = self
            .server
            .api()
            .authed(
                reqwest::Method::GET,
                &format!("/api/v1/sessions/{}/recovery", self.s.id),
                None,
            )
            .await;
        serde_json::from_value(resp.body).expect("brief json")
    }
}

/// A permission request answered, and the turn's end.
#[derive(Debug)]
pub struct Decided {
    /// The prompt's seq.
    pub seq: u64,
    /// The `agent.permission.request`.
    pub request: Entry,
    /// The decision's input seq.
    pub decided: u64,
    /// The turn's `agent.result`.
    pub result: Entry,
}

/// A stalled turn, interrupted.
#[derive(Debug)]
pub struct Stalled {
    /// The prompt's seq.
    pub seq: u64,
    /// The `agent.stalled` entry.
    pub stalled: Entry,
    /// The interrupt's input seq.
    pub interrupt: u64,
    /// The turn's `agent.result`.
    pub result: Entry,
}

/// Asserts that the recovery brief names `command` among the calls cut off.
pub fn assert_uncertain(brief: &RecoveryBrief, command: &str) {
    assert!(
        brief
            .uncertain
            .iter()
            .any(|t| t.target.as_deref() == Some(command)),
        "the brief names the cut-off command {command:?}: {brief:#?}"
    );
}

/// The agent entries of a turn that makes one call, allowed by a person, and then answers.
pub const ALLOWED_CALL_TURN: [&str; 6] = [
    "agent.tool_use",
    "agent.permission.request",
    "agent.permission.resolved",
    "agent.tool_result",
    "agent.text",
    "agent.result",
];

/// Asserts that the allowed call of `turn` was announced, asked for, decided, and only then
/// run, successfully, before the turn ended.
pub fn assert_ran_after_the_decision(turn: &[Entry]) {
    let kinds_seen = agent_kinds(turn);
    let at = |k: &str| {
        kinds_seen
            .iter()
            .position(|x| *x == k)
            .unwrap_or(usize::MAX)
    };
    assert!(
        at("agent.tool_use") < at("agent.permission.request")
            && at("agent.permission.request") < at("agent.permission.resolved")
            && at("agent.permission.resolved") < at("agent.tool_result")
            && at("agent.tool_result") < at("agent.result"),
        "{kinds_seen:?}"
    );
    let tool_result = first_of_kind(turn, kinds::AGENT_TOOL_RESULT);
    assert_eq!(tool_result.payload["is_error"], false, "{tool_result:?}");
}

/// Asserts that `restart` (an `agent.restart`) continued the agent's own session
/// `conversation`, with a first prompt (the brief) that quotes the cut-off `command`.
pub fn assert_continued(restart: &Entry, conversation: &Value, command: &str) {
    assert_eq!(restart.payload["reason"], "continued", "{restart:?}");
    assert_eq!(
        restart.payload["agent_session_id"], *conversation,
        "{restart:?}"
    );
    assert!(
        restart.payload["prompt"]
            .as_str()
            .is_some_and(|p| p.contains(command)),
        "the brief quotes {command:?}: {restart:?}"
    );
}

/// Path of the installed `codex-acp` launcher; panics with the fix when it is missing.
pub fn codex_acp_bin() -> PathBuf {
    installed_agent(
        "MOOR_CODEX_ACP_BIN",
        "codex-acp/node_modules/.bin/codex-acp",
        "codex-acp",
        "install-agents",
    )
}

impl AcpEnv {
    /// The environment Codex (through codex-acp) needs to run offline against `api`: a custom
    /// model provider on the Responses API in `$CODEX_HOME/config.toml`, every command but the
    /// known-safe ones asked for (`untrusted`), no sandbox (it needs bubblewrap), no analytics.
    pub fn for_codex(api: &crate::fake_openai::FakeOpenAi) -> Self {
        Self::with_codex_config(api, "approval_policy = \"untrusted\"\n")
    }

    /// The environment the Codex CLI's `codex app-server` needs to run offline against `api`:
    /// as [`Self::for_codex`], without `approval_policy` (Codex 0.171 refuses `untrusted` there;
    /// `moor` asks for it when it starts the thread). `moor` is expected to pick the `codex`
    /// adapter.
    pub fn for_codex_app_server(api: &crate::fake_openai::FakeOpenAi) -> Self {
        let mut env = Self::with_codex_config(api, "");
        env.adapter = "codex";
        env
    }

    fn with_codex_config(api: &crate::fake_openai::FakeOpenAi, policy: &str) -> Self {
        let mut env = Self::new();
        let codex_home = env.home.join(".codex");
        std::fs::create_dir_all(&codex_home).expect("codex home");
        let config = format!(
            "model = \"gpt-5-codex\"\nmodel_provider = \"fake\"\n{policy}\
             sandbox_mode = \"danger-full-access\"\n\n[model_providers.fake]\nname = \"fake\"\n\
             base_url = \"{}\"\nenv_key = \"FAKE_OPENAI_KEY\"\nwire_api = \"responses\"\n\n\
             [analytics]\nenabled = false\n",
            api.base_url()
        );
        std::fs::write(codex_home.join("config.toml"), config).expect("codex config");
        env.envs = vec![
            ("CODEX_HOME".into(), codex_home.display().to_string()),
            ("FAKE_OPENAI_KEY".into(), "fake-openai-key".into()),
        ];
        env
    }

    /// `codex-acp` (auto mode picks the acp adapter by its name).
    pub fn codex_command() -> Vec<String> {
        vec![codex_acp_bin().display().to_string()]
    }

    /// `codex` (auto mode picks the codex adapter by its name and adds `app-server`).
    pub fn codex_app_server_command() -> Vec<String> {
        vec![codex_bin().display().to_string()]
    }
}

/// Path of the installed Codex CLI launcher; panics with the fix when it is missing.
pub fn codex_bin() -> PathBuf {
    installed_agent(
        "MOOR_CODEX_BIN",
        "codex/node_modules/.bin/codex",
        "the Codex CLI",
        "install-agents",
    )
}

impl AcpSession {
    /// Sends `sig` to the agent's process group (an npm launcher and the program it started).
    pub fn signal_agent_group(&self, sig: rustix::process::Signal) -> rustix::io::Result<()> {
        rustix::process::kill_process_group(agent_pid(&self.start), sig)
    }
}
