//! Exporting a session, against real sessions: the real Claude Code CLI (fake model API) making
//! a Write tool call through the real `moor`, and a terminal agent under `moor run --adapter
//! pty`. The API's JSONL holds exactly the log's entries in order; its Markdown shows the prompt,
//! the assistant text, the tool call with its input and its result; `moord export` (with moord
//! serving) and `moor export` write the same bytes as the API; someone without a role on the
//! session gets nothing.

use std::process::Stdio;
use std::time::Duration;

use moor_e2e::util::bin_path;
use moor_e2e::{BridgeOpts, ClaudeEnv, ServerOpts, TestServer, WAIT};
use moor_protocol::{kinds, Entry};
use reqwest::Method;
use serde_json::json;

const FINISH: Duration = Duration::from_secs(60);

async fn export(server: &TestServer, token: &str, id: &str, format: &str) -> (u16, String, String) {
    let resp = reqwest::Client::new()
        .get(format!(
            "{}/api/v1/sessions/{id}/export?format={format}",
            server.url()
        ))
        .bearer_auth(token)
        .send()
        .await
        .expect("export request");
    let status = resp.status().as_u16();
    let ctype = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap_or_default().to_owned())
        .unwrap_or_default();
    (status, ctype, resp.text().await.expect("export body"))
}

fn jsonl(body: &str) -> Vec<Entry> {
    body.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("line {l:?}: {e}")))
        .collect()
}

/// Runs a binary to its end with a failure guard; its stdout.
async fn run(bin: &str, args: &[String]) -> String {
    let out = tokio::time::timeout(
        FINISH,
        tokio::process::Command::new(bin_path(bin))
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("finished in time")
    .expect("ran");
    assert!(
        out.status.success(),
        "{bin} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 export")
}

#[tokio::test]
async fn a_claude_session_exports_every_entry_as_jsonl_and_its_tool_calls_as_markdown() {
    // arrange: a real Claude Code session that writes a file through a tool call, then ends
    let env = ClaudeEnv::start().await;
    let server = TestServer::start(ServerOpts::new()).await;
    let mut session = env
        .session(
            &server,
            &server.url(),
            "export",
            &["--permission-mode", "acceptEdits"],
            |o| o,
        )
        .await;
    let file = env.file("exported.txt");
    let prompt = format!("[[write:{}:hello from the export test]]", file.display());
    let accepted = server
        .api()
        .post_input_kind(
            session.id,
            "p-1",
            kinds::INPUT_TEXT,
            json!({ "text": prompt }),
        )
        .await;
    session
        .tail
        .wait_kind(kinds::AGENT_RESULT, accepted.seq.0, FINISH, |_| true)
        .await;
    session.bridge.terminate();
    session.bridge.wait_exit(FINISH).await;
    server.api().wait_ended(&session.name, WAIT).await;
    let log = server.api().entries_all(session.id).await;
    let id = session.id.to_string();

    // act
    let (status, ctype, body) = export(&server, server.token(), &id, "jsonl").await;
    let (md_status, md_type, md) = export(&server, server.token(), &session.name, "markdown").await;

    // assert: JSONL is the whole log, in order, exactly as stored
    assert_eq!(status, 200, "{body}");
    assert_eq!(ctype, "application/x-ndjson");
    assert_eq!(jsonl(&body), log);
    assert!(log.iter().any(|e| e.kind == kinds::AGENT_TOOL_USE));
    // Markdown: the prompt, the tool call with its input, its result, the end
    assert_eq!(md_status, 200, "{md}");
    assert!(md_type.starts_with("text/markdown"), "{md_type}");
    assert!(
        md.starts_with(&format!("# Session {}\n", session.name)),
        "{md}"
    );
    assert!(md.contains(&prompt), "the prompt: {md}");
    assert!(md.contains("### Assistant"), "{md}");
    assert!(md.contains("**Tool call: Write**"), "{md}");
    assert!(
        md.contains("hello from the export test"),
        "the tool input: {md}"
    );
    assert!(md.contains("**Tool result**"), "{md}");
    assert!(md.contains("session ended"), "{md}");
    let call = md.find("**Tool call: Write**").expect("call");
    let result = md.find("**Tool result**").expect("result");
    assert!(
        md.find(&prompt).expect("prompt") < call && call < result,
        "{md}"
    );

    // act: the command lines, moord reading its store while it serves
    let moord = run(
        "moord",
        &[
            "--data-dir".into(),
            server.dir().join("data").display().to_string(),
            "export".into(),
            id.clone(),
        ],
    )
    .await;
    let moor_md = run(
        "moor",
        &[
            "export".into(),
            id.clone(),
            "--format".into(),
            "markdown".into(),
            "--server".into(),
            server.url(),
            "--token".into(),
            server.token().into(),
        ],
    )
    .await;
    // assert: the same bytes as the API
    assert_eq!(moord, body);
    assert_eq!(moor_md, md);
}

#[tokio::test]
async fn a_terminal_session_exports_its_output_as_text_and_only_to_those_with_a_role() {
    // arrange: a pty agent printing coloured lines, and a second account with no role on it
    let server = TestServer::start(ServerOpts::new()).await;
    let name = format!("export-pty-{}", uuid::Uuid::new_v4().simple());
    let mut bridge = BridgeOpts::new(&server.url(), server.token(), &name, &[])
        .flag("--mode", "pty")
        .command(&[
            "sh".into(),
            "-c".into(),
            r"printf '\033[1;32mgreen line\033[0m\r\n```stray\r\n'".into(),
        ])
        .spawn();
    bridge.wait_success(FINISH).await;
    let session = server.api().wait_ended(&name, WAIT).await;
    server
        .api()
        .add_user("stranger", "correct horse battery")
        .await;
    let login = server
        .api()
        .login("stranger", "correct horse battery")
        .await;
    let stranger = login["access_token"].as_str().expect("access token");

    // act
    let (status, _, md) = export(&server, server.token(), &name, "markdown").await;
    let (denied, _, _) = export(&server, stranger, &session.id.to_string(), "jsonl").await;
    let (bad, _, _) = export(&server, server.token(), &name, "html").await;
    let missing = server
        .api()
        .authed(Method::GET, "/api/v1/sessions/no-such-session/export", None)
        .await;

    // assert: the terminal text without escape sequences, in a block a stray fence cannot close
    assert_eq!(status, 200);
    assert!(
        md.contains("````text\ngreen line\n\u{200b}```stray\n````"),
        "{md}"
    );
    assert!(!md.contains('\u{1b}'), "{md}");
    assert_eq!(
        denied, 404,
        "a session the caller has no role on is not shown"
    );
    assert_eq!(bad, 400);
    assert_eq!(missing.status, 404);
}
