//! `moor host` end to end: a real `moor host` with a configuration of two projects and two
//! agents (Claude Code against the fake model API, and a PTY shell), driven through the
//! `/api/v1/machines` routes of a real `moord`, its link through the fault proxy.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use moor_e2e::claude::claude_bin;
use moor_e2e::http::RawBody;
use moor_e2e::metrics::{scrape, value};
use moor_e2e::{
    eventually, eventually_some, Api, BridgeOpts, ClaudeEnv, FaultProxy, LogTail, ServerOpts,
    TestBridge, TestServer, WAIT,
};
use moor_protocol::host::{ActionAccepted, MachineInfo};
use moor_protocol::{kinds, Entry, SessionId};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const FINISH: Duration = Duration::from_secs(60);

/// Kills the process groups of the sessions' `moor run`s when the test ends: they are their
/// own groups and outlive `moor host` by design.
#[derive(Default, Clone)]
struct Reaper(Arc<Mutex<Vec<i32>>>);

impl Reaper {
    fn adopt(&self, log: &[Entry]) {
        let mut pids = self.0.lock().expect("pids lock");
        for e in log.iter().filter(|e| e.kind == kinds::HOST_SESSION_STARTED) {
            let pid = e.payload["pid"]
                .as_i64()
                .expect("a started session names its pid") as i32;
            if !pids.contains(&pid) {
                pids.push(pid);
            }
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in self.0.lock().expect("pids lock").iter() {
            if let Some(pid) = rustix::process::Pid::from_raw(*pid) {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

struct Machine {
    server: TestServer,
    proxy: FaultProxy,
    host: TestBridge,
    id: String,
    log: SessionId,
    tail: LogTail,
    reaper: Reaper,
    keystrokes: u32,
    _dir: tempfile::TempDir,
}

/// A git work tree on `main` with one uncommitted file.
fn dirty_repo(dir: &Path) {
    std::fs::create_dir_all(dir).expect("mkdir");
    moor_e2e::util::git_work_tree(dir, &[("README", b"notes\n")]);
    std::fs::write(dir.join("draft.txt"), "unsaved").expect("write");
}

impl Machine {
    /// `moor host` through a proxy, with the projects `code` (`claude_project`, or a temp dir)
    /// and `notes`, and the agents `claude` and `shell`.
    async fn start(claude: Option<&ClaudeEnv>) -> Self {
        Self::start_on(ServerOpts::new(), claude).await
    }

    /// [`Machine::start`] on a `moord` started with `opts`.
    async fn start_on(opts: ServerOpts, claude: Option<&ClaudeEnv>) -> Self {
        Self::start_as(TestServer::start(opts).await, claude, None).await
    }

    /// [`Machine::start`] on `server`, `moor host` logged in with `token` (default: the
    /// admin token).
    async fn start_as(server: TestServer, claude: Option<&ClaudeEnv>, token: Option<&str>) -> Self {
        let proxy = FaultProxy::start(server.addr()).await;
        let dir = tempfile::Builder::new()
            .prefix("moor-e2e-host-")
            .tempdir()
            .expect("temp dir");
        let notes = dir.path().join("notes");
        dirty_repo(&notes);
        let code: PathBuf = claude.map_or_else(|| dir.path().to_owned(), |c| c.project.clone());
        let config = dir.path().join("host.toml");
        std::fs::write(
            &config,
            format!(
                "name = \"box\"\nmax_sessions = 2\n\
                 [projects.code]\ndir = {code:?}\n[projects.notes]\ndir = {notes:?}\n\
                 [agents.claude]\ncommand = [{claude:?}]\nmode = \"claude\"\n\
                 [agents.shell]\ncommand = [\"sh\"]\nmode = \"pty\"\n\
                 [agents.scribble]\ncommand = [\"sh\", \"-c\", {scribble:?}]\nmode = \"pty\"\n",
                claude = claude_program(claude.is_some()),
                scribble = SCRIBBLE,
            ),
        )
        .expect("write the configuration");
        // An interactive shell ignores SIGTERM: its stop is forced after a short grace.
        let token = token.unwrap_or(server.token()).to_owned();
        let mut opts = BridgeOpts::host(&proxy.url(), &token, &config).flag("--stop-grace", "1s");
        if let Some(c) = claude {
            opts = c.environment(opts);
        }
        let host = opts.spawn();
        let api = server.api();
        let m: MachineInfo = eventually_some(WAIT, "the machine registered and online", || {
            let api = api.clone();
            async move {
                let list: Vec<MachineInfo> = get(&api, "/api/v1/machines").await;
                list.into_iter().find(|m| m.link.online)
            }
        })
        .await;
        let log = api
            .session(&m.log_session)
            .await
            .expect("the log session")
            .id;
        Self {
            tail: LogTail::new(api, log),
            server,
            proxy,
            host,
            id: m.id,
            log,
            reaper: Reaper::default(),
            keystrokes: 0,
            _dir: dir,
        }
    }

    fn api(&self) -> Api {
        self.server.api()
    }

    /// The `notes` project's work tree.
    fn notes(&self) -> PathBuf {
        self._dir.path().join("notes")
    }

    async fn machine(&self) -> MachineInfo {
        get(&self.api(), &format!("/api/v1/machines/{}", self.id)).await
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let r = self
            .api()
            .authed(
                Method::POST,
                &format!("/api/v1/machines/{}{path}", self.id),
                Some(RawBody::Json(body)),
            )
            .await;
        (r.status, r.body)
    }

    /// Starts Claude Code in `code` with `prompt` and waits for the answer: the receipt, the
    /// session's id and a tail of its log.
    async fn claude_answered(&mut self, prompt: &str) -> (ActionAccepted, SessionId, LogTail) {
        let body = json!({"project": "code", "agent": "claude", "prompt": prompt,
                          "idempotency_key": "c1"});
        let cc = self.act("/sessions", body).await;
        self.applied(cc.seq).await;
        let id = self.api().wait_session(&cc.session, WAIT).await.id;
        let mut tail = LogTail::new(self.api(), id);
        tail.wait_kind(kinds::AGENT_RESULT, 0, FINISH, |_| true)
            .await;
        (cc, id, tail)
    }

    /// Asks the machine to `action` (`stop`, `resume`) its session `session`, with the key
    /// `key`: the receipt.
    async fn on_session(&self, session: &str, action: &str, key: &str) -> ActionAccepted {
        let path = format!("/sessions/{session}/{action}");
        self.act(&path, json!({ "idempotency_key": key })).await
    }

    async fn act(&self, path: &str, body: Value) -> ActionAccepted {
        let (status, body) = self.post(path, body).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body:?}");
        serde_json::from_value(body).expect("an ActionAccepted")
    }

    /// Asks for a shell in `notes` under `key`.
    async fn start_request(&self, key: &str) -> ActionAccepted {
        self.act(
            "/sessions",
            json!({"project": "notes", "agent": "shell", "idempotency_key": key}),
        )
        .await
    }

    /// Starts a shell in `notes` and waits for it to run: the receipt, its id, its log.
    async fn start_shell(&mut self, key: &str) -> (ActionAccepted, SessionId, LogTail) {
        let shell = self.start_request(key).await;
        self.applied(shell.seq).await;
        let id = self.api().wait_session(&shell.session, WAIT).await.id;
        let mut tail = LogTail::new(self.api(), id);
        tail.wait_kind(kinds::AGENT_START, 0, WAIT, |e| {
            e.payload["adapter"] == "pty"
        })
        .await;
        (shell, id, tail)
    }

    /// Types `text` into the terminal of session `id`.
    async fn keys(&mut self, id: SessionId, text: &str) {
        self.keystrokes += 1;
        let msg = format!("k{}", self.keystrokes);
        self.api()
            .post_input_kind(id, &msg, kinds::INPUT_KEYS, json!({ "text": text }))
            .await;
    }

    /// Waits for the action at `seq` to be applied; the machine's log so far.
    async fn applied(&mut self, seq: u64) -> Vec<Entry> {
        self.tail
            .wait_kind(kinds::INPUT_APPLIED, 0, WAIT, |e| {
                e.payload["input_seq"] == seq
            })
            .await;
        let log = self.api().entries_all(self.log).await;
        self.reaper.adopt(&log);
        assert!(
            !log.iter()
                .any(|e| e.kind == kinds::INPUT_FAILED && e.payload["input_seq"] == seq),
            "the action failed: {log:#?}"
        );
        log
    }

    /// Starts a shell in `notes` (uncommitted draft.txt) and waits until its start checkpoint
    /// is on the server, then stages a file in `notes` as the person at the machine would:
    /// the checkpoint's id, the shell's restore path and the state of `notes` (`work_state`).
    async fn restorable_checkpoint(&mut self) -> (String, String, Vec<String>) {
        let (shell, id, mut tail) = self.start_shell("restore-me").await;
        let cp = tail
            .wait_kind(kinds::CHECKPOINT_CREATED, 0, WAIT, |_| true)
            .await;
        let checkpoint = cp.payload["id"].as_str().expect("checkpoint id").to_owned();
        let api = self.api();
        eventually_some(WAIT, "the checkpoint on the server", || {
            let api = api.clone();
            let checkpoint = checkpoint.clone();
            async move {
                let list: Vec<Value> =
                    get(&api, &format!("/api/v1/sessions/{id}/checkpoints")).await;
                list.iter()
                    .any(|c| c["id"] == checkpoint.as_str())
                    .then_some(())
            }
        })
        .await;
        let notes = self.notes();
        std::fs::write(notes.join("staged.txt"), "in the index").expect("write");
        git(&notes, &["add", "staged.txt"]);
        let path = format!("/sessions/{}/restore", shell.session);
        (checkpoint, path, work_state(&notes))
    }

    /// The `host.session.started` entries for `session`.
    async fn starts(&self, session: &str) -> Vec<Entry> {
        let log = self.api().entries_all(self.log).await;
        self.reaper.adopt(&log);
        log.into_iter()
            .filter(|e| e.kind == kinds::HOST_SESSION_STARTED && e.payload["session"] == session)
            .collect()
    }
}

/// The `scribble` agent: changes the work tree the moment it starts, says so, then waits.
const SCRIBBLE: &str = "echo touched >> README && echo scribbled && exec sh";

/// The Claude Code CLI for the `claude` agent, or `false` (a program that exits at once) on a
/// machine whose test starts no Claude session.
fn claude_program(claude: bool) -> String {
    if claude {
        claude_bin().display().to_string()
    } else {
        "false".to_owned()
    }
}

async fn get<T: serde::de::DeserializeOwned>(api: &Api, path: &str) -> T {
    let r = api.authed(Method::GET, path, None).await;
    assert_eq!(r.status, StatusCode::OK, "GET {path}: {:?}", r.body);
    serde_json::from_value(r.body).expect("the expected body")
}

#[tokio::test]
async fn the_phone_starts_prompts_lists_stops_and_resumes_sessions_on_a_machine() {
    // arrange: a machine offering Claude Code and a shell in two projects
    let claude = ClaudeEnv::start().await;
    let mut m = Machine::start(Some(&claude)).await;
    let info = m.machine().await;
    assert_eq!((info.name.as_str(), info.max_sessions), ("box", 2));
    let notes = info.projects.iter().find(|p| p.name == "notes").unwrap();
    assert_eq!(
        (notes.branch.as_deref(), notes.dirty),
        (Some("main"), Some(true))
    );
    let agents: Vec<_> = info
        .agents
        .iter()
        .map(|a| (a.name.as_str(), a.mode.as_str()))
        .collect();
    assert_eq!(
        agents,
        [("claude", "claude"), ("scribble", "pty"), ("shell", "pty")]
    );

    // act: a shell in `notes`, driven from the API
    let (shell, shell_id, mut shell_tail) = m.start_shell("s1").await;
    let again = m.start_request("s1").await;
    assert!(again.duplicate && again.session == shell.session && again.seq == shell.seq);
    m.keys(shell_id, "echo from-$((6*7))-phone\r").await;
    shell_tail.wait_pty_output("from-42-phone", WAIT).await;

    // act: Claude Code in `code` with a first prompt
    let (cc, cc_id, mut cc_tail) = m.claude_answered("first question").await;
    assert!(claude
        .api
        .prompts()
        .iter()
        .any(|p| p.contains("first question")));

    // assert: the machine view lists both, online, with their phase
    let view = m.machine().await;
    assert_eq!(view.sessions.len(), 2, "{view:#?}");
    for s in &view.sessions {
        assert!(s.bridge.as_ref().is_some_and(|b| b.online), "{s:?}");
        assert!(s.phase.is_some() && !s.ended, "{s:?}");
    }

    // act: a third session is over the machine's limit of two: refused on the machine
    let third = m
        .act(
            "/sessions",
            json!({"project": "notes", "agent": "shell", "idempotency_key": "s3"}),
        )
        .await;
    let failed = m
        .tail
        .wait_kind(kinds::INPUT_FAILED, 0, WAIT, |e| {
            e.payload["input_seq"] == third.seq
        })
        .await;
    assert!(
        failed.payload["reason"].as_str().unwrap().contains("limit"),
        "{failed:?}"
    );

    // act: stop the shell
    let stop = m.on_session(&shell.session, "stop", "st1").await;
    m.tail
        .wait_kind(kinds::HOST_SESSION_EXITED, stop.seq, FINISH, |e| {
            e.payload["session"] == shell.session.as_str() && e.payload["stopped"] == true
        })
        .await;
    m.api()
        .wait_bridge_online(&shell.session, false, WAIT)
        .await;
    // The shell ignored SIGTERM: `moor run` forced it and still ended the session, saying so.
    let shell_id = m.api().session(&shell.session).await.unwrap().id;
    let mut shell_tail = LogTail::new(m.api(), shell_id);
    let exit = shell_tail
        .wait_kind(kinds::AGENT_EXIT, 0, WAIT, |_| true)
        .await;
    assert_eq!(exit.payload["signal"], 9, "{exit:?}");
    shell_tail
        .wait_kind(kinds::SESSION_ENDED, exit.seq.0, WAIT, |_| true)
        .await;

    // act: kill Claude's moor run (a crash), then resume it from the phone
    let pid = m.starts(&cc.session).await[0].payload["pid"]
        .as_i64()
        .unwrap() as i32;
    let pid = rustix::process::Pid::from_raw(pid).unwrap();
    rustix::process::kill_process_group(pid, rustix::process::Signal::KILL).unwrap();
    m.tail
        .wait_kind(kinds::HOST_SESSION_EXITED, 0, FINISH, |e| {
            e.payload["session"] == cc.session.as_str() && e.payload["stopped"] == false
        })
        .await;
    let resume = m.on_session(&cc.session, "resume", "r1").await;
    m.applied(resume.seq).await;
    assert_eq!(m.starts(&cc.session).await.len(), 2);
    let head = m.api().session(&cc.session).await.unwrap().head_seq.0;
    let n = claude.api.requests().len();
    m.api()
        .post_input(cc_id, "again-1", "second question")
        .await;
    cc_tail
        .wait_kind(kinds::AGENT_RESULT, head, FINISH, |_| true)
        .await;
    // The resumed Claude Code continued the conversation: the first question is in its history.
    let later = &claude.api.requests()[n..];
    assert!(
        later
            .iter()
            .any(|r| r.to_string().contains("first question")),
        "the resumed conversation lost its history"
    );

    // assert: the machine's log says who asked what, and what came of it
    let log = m.api().entries_all(m.log).await;
    let actions: Vec<_> = log
        .iter()
        .filter(|e| e.kind == kinds::INPUT_HOST)
        .map(|e| (e.author.as_str(), e.payload["action"].as_str().unwrap()))
        .collect();
    assert_eq!(
        actions,
        [
            ("user:admin", "start"),
            ("user:admin", "start"),
            ("user:admin", "start"),
            ("user:admin", "stop"),
            ("user:admin", "resume")
        ]
    );
    let applied = log
        .iter()
        .filter(|e| e.kind == kinds::INPUT_APPLIED)
        .count();
    let failed = log.iter().filter(|e| e.kind == kinds::INPUT_FAILED).count();
    assert_eq!((applied, failed), (4, 1));
    drop(m.host);
}

#[tokio::test]
async fn requests_naming_anything_not_offered_are_refused_and_change_nothing() {
    let mut m = Machine::start(None).await;
    // What a request would leave: the request itself, its receipts, a session it started. (The
    // machine's own entries, such as its connection, may still arrive while this runs.)
    let requests = |entries: Vec<Entry>| {
        entries
            .into_iter()
            .filter(|e| e.kind.starts_with("input.") || e.kind.starts_with("host."))
            .count()
    };
    let before = requests(m.api().entries_all(m.log).await);
    for body in [
        json!({"project": "notes", "agent": "bash", "idempotency_key": "a"}),
        json!({"project": "../etc", "agent": "shell", "idempotency_key": "b"}),
        json!({"project": "/home", "agent": "shell", "idempotency_key": "c"}),
        json!({"project": "notes", "agent": "shell", "command": "rm -rf /", "idempotency_key": "d"}),
        json!({"project": "notes", "agent": "shell -c id", "idempotency_key": "e"}),
        json!({"project": "notes", "agent": "shell", "idempotency_key": ""}),
    ] {
        let (status, answer) = m.post("/sessions", body.clone()).await;
        assert!(status.is_client_error(), "{body}: {status} {answer:?}");
    }
    // An action cannot be slipped in as an ordinary input either.
    let r = m
        .api()
        .authed(
            Method::POST,
            &format!("/api/v1/sessions/{}/inputs", m.log),
            Some(RawBody::Json(json!({"client_msg_id": "x", "kind": kinds::INPUT_HOST,
                "payload": {"action": "start", "session": "s", "project": "notes", "agent": "shell"}}))),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    let (status, _) = m
        .post("/sessions/nope/stop", json!({"idempotency_key": "f"}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        requests(m.api().entries_all(m.log).await),
        before,
        "a request or its outcome reached the machine's log"
    );
    assert!(m.machine().await.sessions.is_empty());

    // Another user sees no machine at all.
    m.api().add_user("eve", "correct horse battery").await;
    let eve = m.api().login("eve", "correct horse battery").await;
    let eve = Api::new(m.server.url(), eve["access_token"].as_str().unwrap());
    let list: Vec<MachineInfo> = get(&eve, "/api/v1/machines").await;
    assert!(list.is_empty());
    let r = eve
        .authed(Method::GET, &format!("/api/v1/machines/{}", m.id), None)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let _ = m.tail.refresh().await;
}

#[tokio::test]
async fn a_key_reused_for_another_start_is_refused_before_any_session_is_made() {
    let mut m = Machine::start(None).await;
    let shell = m.start_request("k").await;
    let would_be = shell.session.replace("-shell-", "-claude-");
    assert_ne!(would_be, shell.session);

    let (status, answer) = m
        .post(
            "/sessions",
            json!({"project": "code", "agent": "claude", "idempotency_key": "k"}),
        )
        .await;

    assert_eq!(status, StatusCode::CONFLICT, "{answer:?}");
    let names: Vec<String> = m
        .machine()
        .await
        .sessions
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(
        names,
        [shell.session.as_str()],
        "only the first request's session"
    );
    assert!(
        m.api().session(&would_be).await.is_none(),
        "no session was made for the refused request"
    );
    let again = m.start_request("k").await;
    assert!(again.duplicate && again.seq == shell.seq, "{again:?}");
    let _ = m.tail.refresh().await;
}

#[tokio::test]
async fn after_a_cut_link_and_a_moord_restart_the_machine_comes_back_and_applies_nothing_twice() {
    cut_and_restart(Machine::start(None).await).await;
}

#[tokio::test]
async fn on_postgres_the_machine_comes_back_after_a_cut_link_and_a_moord_restart() {
    let Some(db) = moor_e2e::pg::TestDb::create().await else {
        return;
    };
    cut_and_restart(Machine::start_on(db.node_opts("a", "host-test-admin-token"), None).await)
        .await;
}

async fn cut_and_restart(mut m: Machine) {
    let (shell, shell_id, mut shell_tail) = m.start_shell("s1").await;

    // act: cut every link through the proxy, then restart moord
    m.proxy.cut_all().await;
    m.server.restart().await;

    // assert: the machine is back online, truthfully, with its session
    let api = m.api();
    let id = m.id.clone();
    eventually_some(WAIT, "the machine online again", || {
        let (api, id) = (api.clone(), id.clone());
        async move {
            let info: MachineInfo = get(&api, &format!("/api/v1/machines/{id}")).await;
            (info.link.online && info.sessions.len() == 1).then_some(())
        }
    })
    .await;
    // the session keeps streaming
    m.keys(shell_id, "echo back-$((40+2))\r").await;
    shell_tail.wait_pty_output("back-42", FINISH).await;
    // the same request again is a duplicate, and nothing was started twice
    let again = m.start_request("s1").await;
    assert!(again.duplicate && again.seq == shell.seq);
    let stop = m.on_session(&shell.session, "stop", "st").await;
    m.applied(stop.seq).await;
    m.tail
        .wait_kind(kinds::HOST_SESSION_EXITED, stop.seq, FINISH, |e| {
            e.payload["stopped"] == true
        })
        .await;
    assert_eq!(m.starts(&shell.session).await.len(), 1);
    let log = m.api().entries_all(m.log).await;
    assert_eq!(
        log.iter()
            .filter(|e| e.kind == kinds::INPUT_APPLIED)
            .count(),
        2,
        "{log:#?}"
    );
    drop(m.host);
}

#[tokio::test]
async fn the_machine_link_is_counted_as_a_host_connection_and_its_sessions_as_bridges() {
    const METRICS_TOKEN: &str = "metrics-token-for-the-scraper";
    // arrange: a machine online
    let opts = ServerOpts::new().flag("--metrics-token", METRICS_TOKEN);
    let mut m = Machine::start_on(opts, None).await;
    let base = m.server.url();
    let open = |kind: &'static str| {
        let base = base.clone();
        async move {
            let s = scrape(&base, METRICS_TOKEN).await;
            value(&s, "moord_connections", &[("kind", kind)]).unwrap_or(-1.0)
        }
    };
    eventually(WAIT, "the machine's link counted as a host", || async {
        open("host").await == 1.0 && open("bridge").await == 0.0
    })
    .await;

    // act: a shell started on the machine
    m.start_shell("s1").await;

    // assert: its `moor run` is a bridge; the machine is still one host link
    eventually(WAIT, "the shell's link counted as a bridge", || async {
        open("bridge").await == 1.0 && open("host").await == 1.0
    })
    .await;

    // act: the links cut and kept from coming back
    m.proxy.refuse(true);
    m.proxy.cut_all().await;

    // assert: no host link, then one again once the machine can reconnect
    eventually(WAIT, "the host link gone", || async {
        open("host").await == 0.0
    })
    .await;
    m.proxy.refuse(false);
    eventually(WAIT, "the host link back", || async {
        open("host").await == 1.0
    })
    .await;
    drop(m.host);
}

#[tokio::test]
async fn a_restarted_host_keeps_track_of_the_sessions_it_started() {
    // arrange: two shells running on a machine that allows two
    let mut m = Machine::start(None).await;
    let (kept, kept_id, mut kept_tail) = m.start_shell("s1").await;
    let (gone, _, _) = m.start_shell("s2").await;

    // act: `moor host` crashes; one session's `moor run` dies while it is down; it starts again
    m.host.kill().await;
    let pid = m.starts(&gone.session).await[0].payload["pid"]
        .as_i64()
        .unwrap() as i32;
    let pid = rustix::process::Pid::from_raw(pid).unwrap();
    rustix::process::kill_process_group(pid, rustix::process::Signal::KILL).unwrap();
    m.api().wait_bridge_online(&gone.session, false, WAIT).await;
    m.host = m.host.respawn(&[]);

    // assert: the session that ended unseen is recorded as ended, its status unknown
    let exited = m
        .tail
        .wait_kind(kinds::HOST_SESSION_EXITED, 0, WAIT, |e| {
            e.payload["session"] == gone.session.as_str()
        })
        .await;
    assert_eq!(exited.payload["status_unknown"], true, "{exited:?}");
    assert_eq!(exited.payload["stopped"], false, "{exited:?}");
    // the one still running counts against the limit: one more fits, then none
    let third = m.start_request("s3").await;
    m.applied(third.seq).await;
    let fourth = m.start_request("s4").await;
    let failed = m
        .tail
        .wait_kind(kinds::INPUT_FAILED, 0, WAIT, |e| {
            e.payload["input_seq"] == fourth.seq
        })
        .await;
    assert!(
        failed.payload["reason"].as_str().unwrap().contains("limit"),
        "{failed:?}"
    );
    // and it is still this machine's to stop: it ends, and its end is recorded
    m.keys(kept_id, "echo still-$((40+2))\r").await;
    kept_tail.wait_pty_output("still-42", FINISH).await;
    let stop = m.on_session(&kept.session, "stop", "st").await;
    m.applied(stop.seq).await;
    m.tail
        .wait_kind(kinds::HOST_SESSION_EXITED, stop.seq, FINISH, |e| {
            e.payload["session"] == kept.session.as_str() && e.payload["stopped"] == true
        })
        .await;
    kept_tail
        .wait_kind(kinds::SESSION_ENDED, 0, FINISH, |_| true)
        .await;
}

/// `git -C dir args…`'s output; panics when git fails.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A credential for the machine `id`, minted by `api`'s user.
async fn mint_credential(api: &Api, id: &str) -> String {
    let minted = api
        .authed(
            Method::POST,
            &format!("/api/v1/machines/{id}/credential"),
            None,
        )
        .await;
    assert_eq!(minted.status, StatusCode::OK, "{:?}", minted.body);
    minted.body["token"].as_str().expect("a token").to_owned()
}

/// The `host.checkpoint.restored` entry in the machine's `log`.
fn restored(log: &[Entry]) -> &Entry {
    log.iter()
        .find(|e| e.kind == kinds::HOST_CHECKPOINT_RESTORED)
        .expect("host.checkpoint.restored in the machine's log")
}

/// What a person working in `dir` has: the branch checked out, its commit, the index, the
/// work tree's changes and a file's content.
fn work_state(dir: &Path) -> Vec<String> {
    vec![
        git(dir, &["symbolic-ref", "HEAD"]),
        git(dir, &["rev-parse", "HEAD"]),
        git(dir, &["ls-files", "--stage"]),
        git(dir, &["status", "--porcelain=v1", "-uall"]),
        git(dir, &["diff", "HEAD"]),
        std::fs::read_to_string(dir.join("draft.txt")).expect("draft.txt"),
    ]
}

#[tokio::test]
async fn the_phone_restores_a_sessions_checkpoint_into_a_new_branch_leaving_the_work_tree_alone() {
    // arrange: a shell in `notes` (uncommitted draft.txt); its start checkpoint uploaded; the
    // person at the machine has staged work too
    let mut m = Machine::start(None).await;
    let (checkpoint, path, before) = m.restorable_checkpoint().await;
    let notes = m.notes();

    // act: restore it into the branch `rescue`
    let body = json!({"checkpoint": checkpoint, "branch": "rescue", "idempotency_key": "r1"});
    let restore = m.act(&path, body.clone()).await;
    let log = m.applied(restore.seq).await;

    // assert: the branch points at the checkpoint's commit, which holds the draft; what the
    // person had (branch, HEAD, index, changes) is exactly as it was
    let done = restored(&log);
    assert_eq!(done.payload["branch"], "rescue");
    assert_eq!(done.payload["checkpoint"], checkpoint.as_str());
    assert_eq!(done.payload["input_seq"], restore.seq);
    let commit = done.payload["commit"].as_str().expect("commit");
    assert_eq!(git(&notes, &["rev-parse", "rescue"]).trim(), commit);
    assert_eq!(git(&notes, &["show", "rescue:draft.txt"]), "unsaved");
    assert_eq!(work_state(&notes), before);

    // act + assert: the same request again is the same action, applied once
    let again = m.act(&path, body).await;
    assert!(again.duplicate && again.seq == restore.seq, "{again:?}");

    // act + assert: a branch that exists is not overwritten; the machine says why
    let taken = m
        .act(
            &path,
            json!({"checkpoint": checkpoint, "branch": "rescue", "idempotency_key": "r2"}),
        )
        .await;
    let failed = m
        .tail
        .wait_kind(kinds::INPUT_FAILED, 0, WAIT, |e| {
            e.payload["input_seq"] == taken.seq
        })
        .await;
    assert!(
        failed.payload["reason"]
            .as_str()
            .is_some_and(|r| r.contains("rescue")),
        "{failed:?}"
    );
    assert_eq!(git(&notes, &["rev-parse", "rescue"]).trim(), commit);
    assert_eq!(work_state(&notes), before);

    // act + assert: an option, a path or another session's checkpoint is refused, and the
    // machine's log does not change
    let entries = m.api().entries_all(m.log).await.len();
    for (body, status) in [
        (
            json!({"checkpoint": checkpoint, "branch": "-f", "idempotency_key": "b1"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"checkpoint": checkpoint, "branch": "../../etc", "idempotency_key": "b2"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"checkpoint": "../../etc/passwd", "idempotency_key": "b3"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"checkpoint": "0123456789abcdef", "idempotency_key": "b4"}),
            StatusCode::NOT_FOUND,
        ),
        (
            json!({"checkpoint": checkpoint, "idempotency_key": "b5", "dir": "/tmp"}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        let (got, answer) = m.post(&path, body.clone()).await;
        assert!(
            got == status || (status.is_client_error() && got.is_client_error()),
            "{body}: {got} {answer:?}"
        );
    }
    assert_eq!(m.api().entries_all(m.log).await.len(), entries);
    let _ = m.tail.refresh().await;
}

/// The claims of a JWT, read without checking it (the server does that).
fn jwt_claims(token: &str) -> Value {
    use base64::Engine;
    let payload = token.split('.').nth(1).expect("a JWT has a payload");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .expect("base64url");
    serde_json::from_slice(&bytes).expect("JSON claims")
}

/// `MOOR_TOKEN` in the environment of process `pid`.
fn moor_token_of(pid: i64) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .find_map(|kv| kv.strip_prefix("MOOR_TOKEN=").map(str::to_owned))
}

#[tokio::test]
async fn a_machines_credential_reaches_only_its_own_sessions_and_routes() {
    // arrange: a machine running a shell, and another machine of the same owner
    let mut m = Machine::start(None).await;
    let (shell, _id, _tail) = m.start_shell("scoped").await;
    let api = m.api();
    let other = api
        .authed(
            Method::POST,
            "/api/v1/machines",
            Some(RawBody::Json(json!({
                "name": "other", "os": "linux", "version": "0", "projects": [],
                "agents": [], "max_sessions": 1
            }))),
        )
        .await;
    assert_eq!(other.status, StatusCode::OK, "{:?}", other.body);
    let other_id = other.body["id"].as_str().expect("an id").to_owned();
    let other_log = other.body["log_session"]
        .as_str()
        .expect("a log")
        .to_owned();

    // act: the credential moor host gave its session, and one minted for the machine
    let pid = m.starts(&shell.session).await[0].payload["pid"]
        .as_i64()
        .expect("a pid");
    let given = moor_token_of(pid).expect("the session runs with MOOR_TOKEN");
    let token = mint_credential(&api, &m.id).await;

    // assert: both are limited to this machine
    assert_eq!(jwt_claims(&given)["mch"], m.id.as_str(), "{given}");
    assert_eq!(jwt_claims(&token)["mch"], m.id.as_str());
    let host = Api::new(m.server.url(), token.as_str());
    let call = |method: Method, path: String, body: Option<Value>| {
        let host = host.clone();
        async move {
            host.authed(method, &path, body.map(RawBody::Json))
                .await
                .status
        }
    };
    for (method, path) in [
        (Method::GET, "/api/v1/sessions".to_owned()),
        (Method::GET, "/api/v1/machines".to_owned()),
        (Method::GET, format!("/api/v1/machines/{}", m.id)),
        (Method::GET, "/api/v1/me".to_owned()),
        (Method::GET, "/api/v1/offers".to_owned()),
        (Method::POST, "/api/v1/auth/logout".to_owned()),
        (
            Method::GET,
            format!("/api/v1/sessions/{}/members", shell.session),
        ),
        (
            Method::GET,
            format!("/api/v1/sessions/{}/events", shell.session),
        ),
        (
            Method::POST,
            format!("/api/v1/sessions/{}/share-links", shell.session),
        ),
        (Method::POST, format!("/api/v1/machines/{}/sessions", m.id)),
        (
            Method::POST,
            format!("/api/v1/machines/{other_id}/credential"),
        ),
    ] {
        let body = (method == Method::POST).then(|| json!({}));
        assert_eq!(
            call(method.clone(), path.clone(), body).await,
            StatusCode::FORBIDDEN,
            "{method} {path}"
        );
    }
    let users = json!({"name": "mallory", "password": "correct horse battery"});
    assert_eq!(
        call(Method::POST, "/api/v1/users".into(), Some(users)).await,
        StatusCode::FORBIDDEN
    );
    // Its own sessions it reads; another machine's log it does not see at all.
    for own in [&shell.session, &format!("host-{}", m.id)] {
        let path = format!("/api/v1/sessions/{own}");
        assert_eq!(call(Method::GET, path, None).await, StatusCode::OK, "{own}");
    }
    let path = format!("/api/v1/sessions/{other_log}/entries");
    assert_eq!(call(Method::GET, path, None).await, StatusCode::NOT_FOUND);
    // Its bridge link reaches neither another machine's log nor a session it would create.
    let addr = m.server.addr().to_string();
    for session in [other_log.as_str(), "made-up-by-the-machine"] {
        let refused = moor_e2e::bench::bridge(&addr, &token, session).await;
        let why = format!("{:?}", refused.expect_err("refused"));
        assert!(why.contains("4001"), "{session}: {why}");
    }
    // It registers its own machine again, and no other.
    let again = |name: &str| {
        json!({"name": name, "os": "linux", "version": "0", "projects": [], "agents": [],
               "max_sessions": 1})
    };
    assert_eq!(
        call(
            Method::POST,
            "/api/v1/machines".into(),
            Some(again("other"))
        )
        .await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        call(
            Method::POST,
            "/api/v1/machines".into(),
            Some(again("fresh"))
        )
        .await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        call(Method::POST, "/api/v1/machines".into(), Some(again("box"))).await,
        StatusCode::OK
    );
    // And it renews itself.
    let path = format!("/api/v1/machines/{}/credential", m.id);
    assert_eq!(call(Method::POST, path, None).await, StatusCode::OK);
}

/// How a test takes the machine's owner away.
#[derive(Debug, Clone, Copy)]
enum Revoke {
    /// The owner logs that login (device) out.
    Device,
    /// An administrator revokes the owner.
    User,
}

/// `moor host` logged in as a user: revoking `what` ends its link, refuses its credential,
/// and stops it.
async fn revoking_the_owner_stops_the_machine(what: Revoke) {
    // arrange: ann's machine, running on her login
    let server = TestServer::start(ServerOpts::new()).await;
    let admin = server.api();
    admin.add_user("ann", "correct horse battery").await;
    let pair = admin.login("ann", "correct horse battery").await;
    let access = pair["access_token"]
        .as_str()
        .expect("an access token")
        .to_owned();
    let ann = Api::new(server.url(), access.clone());
    let mut m = Machine::start_as(server, None, Some(&access)).await;
    let credential = Api::new(m.server.url(), mint_credential(&ann, &m.id).await);
    let log_path = format!("/api/v1/sessions/host-{}", m.id);
    assert_eq!(
        credential.authed(Method::GET, &log_path, None).await.status,
        StatusCode::OK
    );

    // act
    match what {
        Revoke::Device => {
            let r = ann.authed(Method::POST, "/api/v1/auth/logout", None).await;
            assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
        }
        Revoke::User => {
            let r = m
                .api()
                .authed(Method::POST, "/api/v1/users/ann/revoke", None)
                .await;
            assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
        }
    }

    // assert: the link ends, moor host stops, and the credential is refused
    let status = m.host.wait_exit(WAIT).await;
    assert!(!status.success(), "{}", m.host.stderr());
    assert!(
        m.host.stderr().contains("revoked"),
        "says why: {}",
        m.host.stderr()
    );
    m.tail
        .wait_kind(kinds::BRIDGE_DISCONNECTED, 0, WAIT, |_| true)
        .await;
    let machine = m.machine().await;
    assert!(!machine.link.online, "{machine:?}");
    assert_eq!(
        credential.authed(Method::GET, &log_path, None).await.status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn logging_out_the_device_a_machine_runs_on_stops_the_machine() {
    revoking_the_owner_stops_the_machine(Revoke::Device).await;
}

#[tokio::test]
async fn revoking_the_user_a_machine_runs_as_stops_the_machine() {
    revoking_the_owner_stops_the_machine(Revoke::User).await;
}

#[tokio::test]
async fn a_start_with_a_checkpoint_first_records_the_tree_before_the_agent_touches_it() {
    // arrange: `notes` has an uncommitted draft; `scribble` edits README as it starts
    let mut m = Machine::start(None).await;

    // act
    let started = m
        .act(
            "/sessions",
            json!({"project": "notes", "agent": "scribble", "checkpoint": true,
                   "idempotency_key": "cp1"}),
        )
        .await;
    let log = m.applied(started.seq).await;
    let id = m.api().wait_session(&started.session, WAIT).await.id;
    let mut tail = LogTail::new(m.api(), id);
    tail.wait_pty_output("scribbled", WAIT).await;
    let start = tail.wait_kind(kinds::AGENT_START, 0, WAIT, |_| true).await;
    let created = tail
        .wait_kind(kinds::CHECKPOINT_CREATED, 0, WAIT, |_| true)
        .await;

    // assert: the action asked for it, and it was recorded before the agent started
    let asked = log
        .iter()
        .find(|e| e.seq.0 == started.seq)
        .expect("the action");
    assert_eq!(asked.payload["checkpoint"], true, "{asked:?}");
    assert!(created.seq < start.seq, "{created:?} then {start:?}");
    assert_eq!(created.payload["reason"], "start");
    // It holds the draft, and README as it was before the agent wrote to it.
    let commit = created.payload["commit"].as_str().expect("a commit");
    assert_eq!(
        git(&m.notes(), &["show", &format!("{commit}:README")]),
        "notes\n"
    );
    assert_eq!(
        git(&m.notes(), &["show", &format!("{commit}:draft.txt")]),
        "unsaved"
    );
    let readme = std::fs::read_to_string(m.notes().join("README")).expect("README");
    assert_eq!(readme, "notes\ntouched\n");
}

#[tokio::test]
async fn resuming_an_ended_session_from_the_phone_continues_it_in_a_linked_session() {
    // arrange: Claude Code answered a first question, then was stopped (its session ended)
    let claude = ClaudeEnv::start().await;
    let mut m = Machine::start(Some(&claude)).await;
    let (cc, cc_id, mut cc_tail) = m.claude_answered("first question").await;
    let stop = m.on_session(&cc.session, "stop", "st1").await;
    m.applied(stop.seq).await;
    cc_tail
        .wait_kind(kinds::SESSION_ENDED, 0, FINISH, |_| true)
        .await;
    let conversation = m.api().session(&cc.session).await.expect("the session");
    let conversation = conversation
        .state
        .and_then(|s| s.agent.agent_session_id)
        .expect("Claude Code's session id");

    // act: resume it from the phone, twice with the same key
    let path = format!("/sessions/{}/resume", cc.session);
    let resume = m.act(&path, json!({"idempotency_key": "r1"})).await;
    let again = m.act(&path, json!({"idempotency_key": "r1"})).await;
    let log = m.applied(resume.seq).await;
    let next = m.api().wait_session(&resume.session, WAIT).await;
    let mut next_tail = LogTail::new(m.api(), next.id);
    let linked = next_tail
        .wait_kind(kinds::SESSION_CONTINUED_FROM, 0, WAIT, |_| true)
        .await;
    let start = next_tail
        .wait_kind(kinds::AGENT_START, 0, FINISH, |_| true)
        .await;
    let n = claude.api.requests().len();
    m.api()
        .post_input(next.id, "again-1", "second question")
        .await;
    next_tail
        .wait_kind(kinds::AGENT_RESULT, start.seq.0, FINISH, |_| true)
        .await;

    // assert: a new session, named once for the key, linked to the ended one
    assert_ne!(resume.session, cc.session);
    assert!(again.duplicate && again.session == resume.session && again.seq == resume.seq);
    assert_eq!(linked.payload["session"], cc_id.to_string(), "{linked:?}");
    let action = log
        .iter()
        .find(|e| e.seq.0 == resume.seq)
        .expect("the action");
    assert_eq!(
        (&action.payload["action"], &action.payload["continues"]),
        (&json!("resume"), &json!(cc.session)),
        "{action:?}"
    );
    // Claude Code resumed its own conversation: the first question is in its history.
    let command = start.payload.to_string();
    assert!(command.contains(&conversation), "{start:?}");
    let later = &claude.api.requests()[n..];
    assert!(
        later
            .iter()
            .any(|r| r.to_string().contains("first question")),
        "the continued conversation lost its history"
    );
    // The machine lists the continuation with its project and agent.
    let view = m.machine().await;
    let listed = view
        .sessions
        .iter()
        .find(|s| s.name == resume.session)
        .expect("listed");
    assert_eq!(
        (listed.project.as_str(), listed.agent.as_str()),
        ("code", "claude")
    );
    drop(m.host);
}

#[tokio::test]
async fn the_phone_restores_a_checkpoint_into_a_new_worktree_the_machine_places() {
    // arrange: the start checkpoint of a shell in `notes`, and staged work at the machine
    let mut m = Machine::start(None).await;
    let (checkpoint, path, before) = m.restorable_checkpoint().await;
    let notes = m.notes();

    // act: restore it into the branch `fix/rescue`, checked out in a new worktree
    let body = json!({"checkpoint": checkpoint, "branch": "fix/rescue", "worktree": true,
                      "idempotency_key": "w1"});
    let restore = m.act(&path, body).await;
    let log = m.applied(restore.seq).await;

    // assert: the machine says where; there the branch is checked out, holding the draft
    let done = restored(&log);
    let action = log
        .iter()
        .find(|e| e.seq.0 == restore.seq)
        .expect("the action");
    assert_eq!(action.payload["worktree"], true, "{action:?}");
    let worktree = PathBuf::from(done.payload["worktree"].as_str().expect("its path"));
    let state_dir = m.host.state_dir().canonicalize().expect("the state dir");
    assert!(
        worktree.starts_with(&state_dir) && worktree.ends_with("worktrees/notes/fix+rescue"),
        "{worktree:?} under {state_dir:?}"
    );
    assert_eq!(
        git(&worktree, &["symbolic-ref", "--short", "HEAD"]).trim(),
        "fix/rescue"
    );
    let commit = done.payload["commit"].as_str().expect("commit");
    assert_eq!(git(&worktree, &["rev-parse", "HEAD"]).trim(), commit);
    assert_eq!(
        std::fs::read_to_string(worktree.join("draft.txt")).expect("the draft"),
        "unsaved"
    );
    assert!(git(&worktree, &["status", "--porcelain"]).is_empty());
    // What the person had (branch, HEAD, index, changes) is exactly as it was.
    assert_eq!(work_state(&notes), before);

    // act + assert: a path in the request is refused, and the machine's log does not change
    let entries = m.api().entries_all(m.log).await.len();
    for body in [
        json!({"checkpoint": checkpoint, "worktree": "/tmp/x", "idempotency_key": "w2"}),
        json!({"checkpoint": checkpoint, "worktree": true, "path": "/tmp/x",
               "idempotency_key": "w3"}),
    ] {
        let (got, answer) = m.post(&path, body.clone()).await;
        assert!(got.is_client_error(), "{body}: {got} {answer:?}");
    }
    assert_eq!(m.api().entries_all(m.log).await.len(), entries);
}
