//! The `pty` adapter end to end: `moor` in a real terminal (the test holds the other end of a
//! pseudo-terminal), the program on moor's own PTY, viewers driving it through `moord`.

use std::time::Duration;

use moor_e2e::http::{contains, pty_bytes, RawBody};
use moor_e2e::{BridgeOpts, LogTail, ServerOpts, TermSession, TestServer, WAIT};
use moor_protocol::kinds;
use serde_json::json;

const FINISH: Duration = Duration::from_secs(60);

async fn wait_output(tail: &mut LogTail, needle: &str, timeout: Duration) {
    tail.wait_pty_output(needle, timeout).await;
}

struct Setup {
    server: TestServer,
    tail: LogTail,
    name: String,
}

async fn setup() -> (Setup, BridgeOpts) {
    let server = TestServer::start(ServerOpts::new()).await;
    let name = format!("pty-{}", uuid::Uuid::new_v4().simple());
    let opts = BridgeOpts::new(&server.url(), server.token(), &name, &[]);
    (
        Setup {
            tail: LogTail::new(server.api(), moor_protocol::SessionId(uuid::Uuid::nil())),
            server,
            name,
        },
        opts,
    )
}

impl Setup {
    async fn attach(&mut self) -> moor_protocol::SessionId {
        let id = self.server.api().wait_session(&self.name, WAIT).await.id;
        self.tail = LogTail::new(self.server.api(), id);
        id
    }

    /// Waits for the `agent.pty.resize` from `source` to `(cols, rows)`, then has the shell print
    /// its size (keys input number `n`) and waits for it.
    async fn assert_resized(
        &mut self,
        id: moor_protocol::SessionId,
        n: u32,
        source: &str,
        (cols, rows): (u16, u16),
    ) {
        self.tail
            .wait_kind(kinds::AGENT_PTY_RESIZE, 0, WAIT, |e| {
                e.payload["source"] == source && e.payload["cols"] == cols
            })
            .await;
        self.keys(id, n, "echo size=$(stty size)\r").await;
        wait_output(&mut self.tail, &format!("size={rows} {cols}"), WAIT).await;
    }

    async fn keys(&self, id: moor_protocol::SessionId, n: u32, text: &str) {
        self.server
            .api()
            .post_input_kind(
                id,
                &format!("k{n}"),
                kinds::INPUT_KEYS,
                json!({"text": text}),
            )
            .await;
    }
}

#[tokio::test]
async fn a_viewer_and_the_local_terminal_both_drive_bash_and_the_terminal_is_restored() {
    // arrange: moor in a real terminal, auto mode (stdin is a terminal, so pty)
    let (mut s, opts) = setup().await;
    let opts = opts.command(&["bash".into(), "--norc".into(), "--noprofile".into()]);
    let mut term = TermSession::spawn(&opts, 100, 30);
    let before = term.termios();
    let id = s.attach().await;
    s.tail
        .wait_kind(kinds::AGENT_START, 0, WAIT, |e| {
            e.payload["adapter"] == "pty"
        })
        .await;
    assert!(term.is_raw(), "moor puts its terminal in raw mode");

    // act: remote keystrokes, local keystrokes, both reach bash
    s.keys(id, 1, "echo remote-$((6*7))\r").await;
    wait_output(&mut s.tail, "remote-42", WAIT).await;
    term.type_bytes(b"echo local-$((40+2))\r").await;
    wait_output(&mut s.tail, "local-42", WAIT).await;
    term.wait_screen(b"remote-42", WAIT).await;
    term.wait_screen(b"moor: keys from admin applied", WAIT)
        .await;
    s.keys(id, 2, "exit 7\r").await;

    // assert: exit status passed through, session complete, terminal settings back
    let status = term.wait_exit(FINISH).await;
    assert_eq!(status.code(), Some(7));
    s.server.api().wait_ended(&s.name, WAIT).await;
    let after = term.termios();
    assert_eq!(after.local_modes, before.local_modes, "lflags restored");
    assert_eq!(after.input_modes, before.input_modes, "iflags restored");
    assert_eq!(after.output_modes, before.output_modes, "oflags restored");
    let log = s.server.api().entries_all(id).await;
    let exit = log.iter().find(|e| e.kind == kinds::AGENT_EXIT).unwrap();
    assert_eq!(exit.payload["code"], 7);
}

#[tokio::test]
async fn a_shell_agent_says_when_it_waits_at_its_prompt_and_which_command_holds_the_terminal() {
    // arrange: bash on moor's terminal
    let (mut s, opts) = setup().await;
    let opts = opts.command(&["bash".into(), "--norc".into(), "--noprofile".into()]);
    let mut term = TermSession::spawn(&opts, 100, 30);
    let id = s.attach().await;
    let start = s
        .tail
        .wait_kind(kinds::AGENT_START, 0, WAIT, |_| true)
        .await;
    assert_eq!(
        start.payload["capabilities"]["terminal_wait"], true,
        "{start:?}"
    );
    s.tail
        .wait_kind(kinds::AGENT_TERMINAL, 0, WAIT, |e| {
            e.payload["waiting"] == true
        })
        .await;

    // act: a command that runs until interrupted
    s.keys(id, 1, "sleep 600\r").await;
    let busy = s
        .tail
        .wait_kind(kinds::AGENT_TERMINAL, 0, WAIT, |e| {
            e.payload["waiting"] == false
        })
        .await;
    s.keys(id, 2, "\u{3}").await;
    let back = s
        .tail
        .wait_kind(kinds::AGENT_TERMINAL, busy.seq.0, WAIT, |e| {
            e.payload["waiting"] == true
        })
        .await;

    // assert: the command was named while it held the terminal, and the state says the shell
    // waits again
    assert_eq!(busy.payload["foreground"], "sleep", "{busy:?}");
    let api = s.server.api();
    let key = id.to_string();
    let state = moor_e2e::util::eventually_some(WAIT, "the fold to reach the prompt", || async {
        let state = api.session(&key).await?.state?;
        (state.head >= back.seq).then_some(state)
    })
    .await;
    let terminal = state.agent.terminal.expect("the terminal in the state");
    assert!(terminal.waiting, "{terminal:?}");
    assert_eq!(terminal.foreground, "bash");
    s.keys(id, 3, "exit\r").await;
    term.wait_exit(FINISH).await;
    let log = s.server.api().entries_all(id).await;
    let exit = log
        .iter()
        .position(|e| e.kind == kinds::AGENT_EXIT)
        .unwrap();
    assert!(
        log[exit..].iter().all(|e| e.kind != kinds::AGENT_TERMINAL),
        "nothing of the terminal after agent.exit"
    );
}

#[tokio::test]
async fn remote_and_local_resizes_reach_the_program() {
    let (mut s, opts) = setup().await;
    let opts = opts.command(&["bash".into(), "--norc".into(), "--noprofile".into()]);
    let mut term = TermSession::spawn(&opts, 90, 20);
    let id = s.attach().await;
    s.tail
        .wait_kind(kinds::AGENT_START, 0, WAIT, |e| {
            e.payload["cols"] == 90 && e.payload["rows"] == 20
        })
        .await;

    // remote resize
    s.server
        .api()
        .post_input_kind(
            id,
            "r1",
            kinds::INPUT_RESIZE,
            json!({"cols": 132, "rows": 43}),
        )
        .await;
    s.assert_resized(id, 1, "remote", (132, 43)).await;

    // local resize of moor's own window
    term.resize(61, 17);
    s.assert_resized(id, 2, "local", (61, 17)).await;

    // a malformed resize is refused at the POST; one the terminal cannot take is failed by the
    // bridge with a reason; the session goes on
    let malformed =
        json!({"client_msg_id": "r2", "kind": kinds::INPUT_RESIZE, "payload": {"cols": 0}});
    let refused = s
        .server
        .api()
        .authed(
            reqwest::Method::POST,
            &format!("/api/v1/sessions/{id}/inputs"),
            Some(RawBody::Json(malformed)),
        )
        .await;
    assert_eq!(
        refused.status,
        reqwest::StatusCode::BAD_REQUEST,
        "{:?}",
        refused.body
    );
    let bad = s
        .server
        .api()
        .post_input_kind(id, "r3", kinds::INPUT_RESIZE, json!({"cols": 0, "rows": 0}))
        .await;
    s.tail
        .wait_kind(kinds::INPUT_FAILED, 0, WAIT, |e| {
            e.payload["input_seq"] == bad.seq.0
        })
        .await;
    s.keys(id, 3, "exit\r").await;
    assert!(term.wait_exit(FINISH).await.success());
}

#[tokio::test]
async fn ten_megabytes_of_random_bytes_arrive_in_the_log_byte_for_byte() {
    // arrange: 10 MB of random bytes (every value, invalid UTF-8, escape bytes) in a file
    let (mut s, opts) = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("random.bin");
    let data = moor_e2e::util::random_bytes(10 * 1024 * 1024, 7);
    std::fs::write(&file, &data).unwrap();
    // The program turns output processing off (raw), as any binary-printing program must, so
    // the terminal passes its bytes through unchanged.
    let script = format!("stty raw -echo && cat {}", file.display());
    let mut bridge = opts
        .flag("--mode", "pty")
        .command(&["sh".into(), "-c".into(), script])
        .spawn();
    let id = s.attach().await;

    // act
    bridge.wait_success(FINISH).await;
    s.server.api().wait_ended(&s.name, WAIT).await;

    // assert
    let log = s.server.api().entries_all(id).await;
    let got = pty_bytes(&log);
    assert_eq!(got.len(), data.len(), "byte count");
    assert!(got == data, "bytes differ");
    let chunks = log
        .iter()
        .filter(|e| e.kind == kinds::AGENT_PTY_OUTPUT)
        .count();
    assert!(
        chunks <= 10 * 1024 * 1024 / 4096,
        "output is batched, not one entry per read: {chunks} entries"
    );
}

#[tokio::test]
async fn a_full_screen_editor_runs_and_a_viewer_can_edit_and_save_with_it() {
    let (mut s, opts) = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("note.txt");
    let opts = opts.command(&[
        "vi".into(),
        "-u".into(),
        "NONE".into(),
        file.display().to_string(),
    ]);
    let mut term = TermSession::spawn(&opts, 80, 24);
    let id = s.attach().await;
    // vi switches to the alternate screen or at least positions the cursor: escape sequences
    s.tail
        .wait_for(WAIT, "vi drew its screen", |es| {
            contains(&pty_bytes(es), b"\x1b[")
        })
        .await;
    s.keys(id, 1, "ihello from the phone\x1b").await;
    wait_output(&mut s.tail, "hello from the phone", WAIT).await;
    s.keys(id, 2, ":wq\r").await;
    let status = term.wait_exit(FINISH).await;
    assert!(
        status.success(),
        "moor exited with {status}; screen:\n{}",
        String::from_utf8_lossy(&term.screen())
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap().trim_end(),
        "hello from the phone"
    );
    term.wait_screen(b"hello from the phone", WAIT).await;
    assert!(!term.is_raw(), "terminal restored after vi and moor exit");
}
