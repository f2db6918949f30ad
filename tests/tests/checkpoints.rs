//! Checkpoints (G7) end to end: the real `moor` checkpointing real git repositories while an
//! agent works in them, the real `moord` storing them, and `moor checkpoints restore` bringing
//! them back into a fresh clone from the server's copy alone.
//!
//! The agents are shell loops the test drives (remote `input.text` lines, or files it creates);
//! every wait is for an event (an entry, a listed checkpoint, a process exit), bounded by a
//! timeout that only guards against hangs.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use moor_e2e::claude::ClaudeSession;
use moor_e2e::util::{bin_path, fresh_clone, git, git_state, git_work_tree};
use moor_e2e::{
    eventually, eventually_some, BridgeOpts, ClaudeEnv, FaultProxy, LogTail, ServerOpts,
    TestBridge, TestServer, WAIT,
};
use moor_protocol::checkpoint::{
    CheckpointChanges, CheckpointSummary, FileDiff, FileDiffStatus, StoredCheckpoint,
    CHANGES_FILE_BYTES, CHANGES_PAGE_BYTES, CHECKPOINT_CREATED,
};
use moor_protocol::payload::PermissionDecision;
use moor_protocol::{kinds, SessionId};
use reqwest::{Method, StatusCode};
use serde_json::json;
use tempfile::TempDir;

const FINISH: Duration = Duration::from_secs(60);

fn write(dir: &Path, path: &str, content: impl AsRef<[u8]>) {
    let full = dir.join(path);
    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
    std::fs::write(full, content).unwrap();
}

/// A repository with one commit of assorted files, in a temp dir.
fn project() -> (TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("moor-e2e-ckpt-")
        .tempdir()
        .unwrap();
    let repo = dir.path().join("work");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    write(&repo, ".gitignore", "*.log\n");
    write(&repo, "README.md", "# project\n");
    write(&repo, "old.txt", "to be renamed\n");
    write(&repo, "gone.txt", "to be deleted\n");
    write(&repo, "run.sh", "#!/bin/sh\necho run\n");
    write(
        &repo,
        "data.bin",
        (0..2048u32).map(|i| (i % 251) as u8).collect::<Vec<u8>>(),
    );
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    (dir, repo)
}

/// Path → (git mode, content) of a work tree's files, without `.git` and ignored `*.log`.
fn files(root: &Path) -> BTreeMap<String, (String, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            if rel == ".git" || rel.ends_with(".log") {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap().display().to_string();
                out.insert(rel, ("120000".into(), target.into_bytes()));
            } else if meta.is_dir() {
                stack.push(path);
            } else {
                let exec = meta.permissions().mode() & 0o111 != 0;
                let mode = if exec { "100755" } else { "100644" };
                out.insert(rel, (mode.into(), std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

/// A shell agent in `repo` that runs each stdin line and then says `done <n>`.
fn shell_agent(server: &TestServer, name: &str, repo: &Path) -> BridgeOpts {
    let script = r#"n=0; while IFS= read -r cmd; do n=$((n+1)); eval "$cmd"; echo "done $n"; done"#;
    BridgeOpts::new(&server.url(), server.token(), name, &[])
        .command(&["bash".into(), "-c".into(), script.into()])
        .cwd(repo)
}

struct Shell {
    server: TestServer,
    bridge: TestBridge,
    id: SessionId,
    name: String,
    tail: LogTail,
    sent: u32,
}

impl Shell {
    async fn start(repo: &Path, flags: &[(&str, &str)]) -> Self {
        let server = TestServer::start(ServerOpts::new()).await;
        let name = format!("ckpt-{}", uuid::Uuid::new_v4().simple());
        let mut opts = shell_agent(&server, &name, repo);
        for (k, v) in flags {
            opts = opts.flag(k, v);
        }
        let bridge = opts.spawn();
        let id = server.api().wait_session(&name, WAIT).await.id;
        let tail = LogTail::new(server.api(), id);
        Self {
            server,
            bridge,
            id,
            name,
            tail,
            sent: 0,
        }
    }

    /// Runs `cmd` in the agent and waits until it is done.
    async fn run(&mut self, cmd: &str) {
        self.sent += 1;
        let n = self.sent;
        self.server
            .api()
            .post_input(self.id, &format!("cmd-{n}"), cmd)
            .await;
        let done = format!("done {n}");
        self.tail
            .wait_kind(kinds::AGENT_OUTPUT, 0, WAIT, |e| e.payload["text"] == done)
            .await;
    }

    /// Ends the agent (EOF on its stdin is not available remotely: `exit`), waits for the
    /// session to end and `moor` to exit 0.
    async fn exit(&mut self) {
        self.sent += 1;
        let n = self.sent;
        self.server
            .api()
            .post_input(self.id, &format!("cmd-{n}"), "exit 0")
            .await;
        self.bridge.wait_success(FINISH).await;
        self.server.api().wait_ended(&self.name, WAIT).await;
    }

    async fn checkpoints(&self) -> Vec<CheckpointSummary> {
        list(&self.server, &self.name).await
    }
}

async fn list(server: &TestServer, session: &str) -> Vec<CheckpointSummary> {
    let r = server
        .api()
        .authed(
            Method::GET,
            &format!("/api/v1/sessions/{session}/checkpoints"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    serde_json::from_value(r.body).unwrap()
}

async fn stored(server: &TestServer, id: &str) -> StoredCheckpoint {
    let r = server
        .api()
        .authed(Method::GET, &format!("/api/v1/checkpoints/{id}"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    serde_json::from_value(r.body).unwrap()
}

/// `moor checkpoints <args…>` in `dir`.
async fn moor_checkpoints(dir: &Path, server: &TestServer, args: &[&str]) -> Output {
    tokio::process::Command::new(bin_path("moor"))
        .arg("checkpoints")
        .args(args)
        .args(["--server", &server.url(), "--token", server.token()])
        .current_dir(dir)
        .output()
        .await
        .expect("moor runs")
}

/// `moor checkpoints restore <id>` in `dir`, which must fail; its standard error.
async fn restore_refused(dir: &Path, server: &TestServer, id: &str) -> String {
    let out = moor_checkpoints(dir, server, &["restore", id]).await;
    assert!(!out.status.success(), "restore {id} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_restored_from_the_server_alone_reproduces_the_work_tree_in_a_fresh_clone() {
    // arrange: the user has staged work of their own and a stash
    let (_dir, repo) = project();
    write(&repo, "README.md", "# stashed\n");
    git(&repo, &["stash", "push", "-q"]);
    write(&repo, "README.md", "# project, staged by the user\n");
    git(&repo, &["add", "README.md"]);
    let before = git_state(&repo);
    let mut s = Shell::start(&repo, &[("--checkpoint-interval", "1h")]).await;

    // act: the agent changes every kind of thing, then exits
    s.run("echo edited >> README.md && mv old.txt new.txt && rm gone.txt && chmod +x run.sh")
        .await;
    s.run("printf '\\x00\\x01\\x02binary' > data.bin && mkdir -p src/deep && echo 'fn main() {}' > src/deep/main.rs").await;
    s.run("ln -s src/deep/main.rs link && echo noise > build.log")
        .await;
    s.exit().await;

    // assert: the log announced it, the server holds it, the user's git state is untouched
    let entries = s.server.api().entries_all(s.id).await;
    let created: Vec<CheckpointSummary> = entries
        .iter()
        .filter(|e| e.kind == CHECKPOINT_CREATED)
        .map(|e| serde_json::from_value(e.payload.clone()).unwrap())
        .collect();
    let last = created.last().expect("a checkpoint.created entry");
    let listed = s.checkpoints().await;
    assert_eq!(
        listed.first().map(|c| &c.id),
        Some(&last.id),
        "uploaded before moor exited"
    );
    assert_eq!(
        git_state(&repo),
        before,
        "index, HEAD, branches and stash are byte-identical"
    );
    let paths: Vec<&str> = last.files.iter().map(|f| f.path.as_str()).collect();
    for p in [
        "README.md",
        "old.txt",
        "new.txt",
        "gone.txt",
        "run.sh",
        "data.bin",
        "link",
    ] {
        assert!(paths.contains(&p), "{p} missing from {paths:?}");
    }
    assert!(
        !paths.contains(&"build.log"),
        "ignored files are not captured"
    );

    // act: restore into a fresh clone, from the server alone
    let (_keep, clone) = fresh_clone(&repo);
    let out = moor_checkpoints(&clone, &s.server, &["restore", &last.id]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // assert: every file and mode
    assert_eq!(files(&clone), files(&repo));
    assert!(String::from_utf8_lossy(&out.stdout).contains("(from the server)"));

    // The patch applies to the base in another fresh clone and gives the same tree.
    let r = s
        .server
        .api()
        .authed(
            Method::GET,
            &format!("/api/v1/checkpoints/{}/diff", last.id),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let patch = r.body.as_str().unwrap().to_owned();
    let (_keep2, other) = fresh_clone(&repo);
    write(&other, "checkpoint.patch", &patch);
    git(&other, &["apply", "--binary", "checkpoint.patch"]);
    std::fs::remove_file(other.join("checkpoint.patch")).unwrap();
    assert_eq!(files(&other), files(&repo));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_holds_the_changed_files_with_their_modes() {
    let (_dir, repo) = project();
    let mut s = Shell::start(&repo, &[("--checkpoint-interval", "1h")]).await;
    s.run("echo new > added.txt && chmod +x run.sh").await;
    s.exit().await;
    let id = s.checkpoints().await[0].id.clone();
    let resp = reqwest::Client::new()
        .get(format!(
            "{}/api/v1/checkpoints/{id}/archive",
            s.server.url()
        ))
        .bearer_auth(s.server.token())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let tar = resp.bytes().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.tar"), &tar).unwrap();
    let out = std::process::Command::new("tar")
        .args(["-tvf", "a.tar"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("-rwxr-xr-x") && l.ends_with("run.sh")),
        "{listing}"
    );
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("-rw-r--r--") && l.ends_with("added.txt")),
        "{listing}"
    );
    assert!(
        listing.contains(&format!("MOOR-CHECKPOINT-{id}.json")),
        "{listing}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_with_sigkill_leaves_its_changes_in_the_last_checkpoint() {
    // arrange: an agent that writes, says so with its pid, then hangs
    let (_dir, repo) = project();
    let server = TestServer::start(ServerOpts::new()).await;
    let name = format!("ckpt-{}", uuid::Uuid::new_v4().simple());
    let script =
        "echo unsaved > work.txt && echo more >> README.md && echo \"pid $$\" && exec sleep 600";
    let mut bridge = BridgeOpts::new(&server.url(), server.token(), &name, &[])
        .command(&["bash".into(), "-c".into(), script.into()])
        .cwd(&repo)
        .flag("--checkpoint-interval", "1h")
        .spawn();
    let id = server.api().wait_session(&name, WAIT).await.id;
    let mut tail = LogTail::new(server.api(), id);
    let said = tail
        .wait_kind(kinds::AGENT_OUTPUT, 0, WAIT, |e| {
            e.payload["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("pid "))
        })
        .await;
    let pid: u32 = said.payload["text"].as_str().unwrap()[4..].parse().unwrap();

    // act
    moor_e2e::util::signal(pid, rustix::process::Signal::KILL);

    // assert: moor ends the session after checkpointing what the agent left
    bridge.wait_exit(FINISH).await;
    let last = list(&server, &name)
        .await
        .into_iter()
        .next()
        .expect("a checkpoint");
    let manifest = stored(&server, &last.id).await.manifest;
    let paths: Vec<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["README.md", "work.txt"]);
    let (_keep, clone) = fresh_clone(&repo);
    let out = moor_checkpoints(&clone, &server, &["restore", &last.id]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(clone.join("work.txt")).unwrap(),
        "unsaved\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_link_down_checkpoints_are_taken_locally_and_uploaded_when_it_returns() {
    // arrange: the bridge reaches the server through a proxy; the agent works when `go` exists
    let (dir, repo) = project();
    let server = TestServer::start(ServerOpts::new()).await;
    let proxy = FaultProxy::start(server.addr()).await;
    let name = format!("ckpt-{}", uuid::Uuid::new_v4().simple());
    let go = dir.path().join("go");
    let finish = dir.path().join("finish");
    let script = format!(
        "while [ ! -e {go} ]; do sleep 0.05; done; echo offline-work > offline.txt; \
         while [ ! -e {finish} ]; do sleep 0.05; done",
        go = go.display(),
        finish = finish.display()
    );
    let mut bridge = BridgeOpts::new(&proxy.url(), server.token(), &name, &[])
        .command(&["bash".into(), "-c".into(), script])
        .cwd(&repo)
        .flag("--checkpoint-interval", "200ms")
        .spawn();
    let api = server.api();
    api.wait_session(&name, WAIT).await;
    api.wait_bridge_online(&name, true, WAIT).await;

    // act: cut the link and keep it down; the agent works meanwhile
    proxy.refuse(true);
    proxy.cut_all().await;
    api.wait_bridge_online(&name, false, WAIT).await;
    std::fs::write(&go, "").unwrap();

    // assert: a checkpoint with the offline work exists locally, queued, not on the server
    let pending_dir = repo.join(".git/moor/pending");
    let local_id = eventually_some(WAIT, "a local checkpoint holding offline.txt", || {
        let pending_dir = pending_dir.clone();
        async move {
            std::fs::read_dir(&pending_dir)
                .ok()?
                .filter_map(Result::ok)
                .find_map(|e| {
                    let text = std::fs::read_to_string(e.path()).ok()?;
                    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
                    let files = v["manifest"]["files"].as_array()?;
                    files
                        .iter()
                        .any(|f| f["path"] == "offline.txt")
                        .then(|| v["manifest"]["id"].as_str().unwrap().to_owned())
                })
        }
    })
    .await;
    assert!(git(&repo, &["for-each-ref", "refs/moor/checkpoints"]).contains(&local_id));
    assert!(list(&server, &name).await.iter().all(|c| c.id != local_id));

    // act: the link comes back
    proxy.refuse(false);

    // assert: uploaded without anything else happening
    eventually(WAIT, "the offline checkpoint on the server", || {
        let (server, name, local_id) = (&server, &name, &local_id);
        async move { list(server, name).await.iter().any(|c| &c.id == local_id) }
    })
    .await;
    // The entry travels over the bridge link, separately from the upload: wait for it too.
    let session = api.session(&name).await.unwrap().id;
    eventually(WAIT, "the checkpoint.created entry in the log", || {
        let (api, local_id) = (&api, &local_id);
        async move {
            api.entries_all(session)
                .await
                .iter()
                .any(|e| e.kind == CHECKPOINT_CREATED && e.payload["id"] == local_id.as_str())
        }
    })
    .await;
    std::fs::write(&finish, "").unwrap();
    bridge.wait_success(FINISH).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors_and_overwrites_nothing() {
    // arrange: one uploaded checkpoint
    let (_dir, repo) = project();
    let mut s = Shell::start(&repo, &[("--checkpoint-interval", "1h")]).await;
    s.run("echo mine > mine.txt && echo changed > README.md")
        .await;
    s.exit().await;
    let id = s.checkpoints().await[0].id.clone();
    let api = s.server.api();

    // an unknown checkpoint id: 404 from the API, a clear error from moor, nothing touched
    let r = api
        .authed(Method::GET, "/api/v1/checkpoints/0123456789abcdef", None)
        .await;
    assert_eq!(
        (r.status, r.body["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let r = api
        .authed(Method::GET, "/api/v1/checkpoints/..%2F..%2Fetc", None)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let (_keep, clone) = fresh_clone(&repo);
    let on_disk = files(&clone);
    let err = restore_refused(&clone, &s.server, "0123456789abcdef").await;
    assert!(
        err.contains("no checkpoint 0123456789abcdef: not in this repository, and not on"),
        "{err}"
    );
    assert_eq!(files(&clone), on_disk);

    // a corrupted upload (content does not hash to its name): refused, nothing stored
    let name = "a".repeat(64);
    let resp = reqwest::Client::new()
        .put(format!("{}/api/v1/blobs/{name}", s.server.url()))
        .bearer_auth(s.server.token())
        .body("not what the name says")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("content hash mismatch"),
        "{body}"
    );
    let r = api
        .authed(Method::GET, &format!("/api/v1/blobs/{name}"), None)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = api
        .authed(
            Method::POST,
            "/api/v1/blobs/missing",
            Some(moor_e2e::http::RawBody::Json(json!({"sha256": [name]}))),
        )
        .await;
    assert_eq!(r.body["missing"][0], name.as_str());
    // A manifest naming blobs the server lacks is refused too.
    let mut manifest = stored(&s.server, &id).await.manifest;
    manifest.id = "00000000000000aa".into();
    manifest.patch.sha256 = name.clone();
    let r = api
        .authed(
            Method::PUT,
            &format!("/api/v1/sessions/{}/checkpoints/00000000000000aa", s.name),
            Some(moor_e2e::http::RawBody::Json(
                serde_json::to_value(&manifest).unwrap(),
            )),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert!(r.body["message"]
        .as_str()
        .unwrap()
        .contains("missing blobs"));

    // a blob corrupted on the server's disk: the restore refuses it and writes nothing
    let m = stored(&s.server, &id).await.manifest;
    let sha = m
        .files
        .iter()
        .find(|f| f.path == "mine.txt")
        .unwrap()
        .sha256
        .clone()
        .unwrap();
    let blob = s.server.dir().join("data/blobs").join(&sha[..2]).join(&sha);
    std::fs::write(&blob, "tampered\n").unwrap();
    let err = restore_refused(&clone, &s.server, &id).await;
    assert!(
        err.contains("corrupt checkpoint data") && err.contains("mine.txt"),
        "{err}"
    );
    assert_eq!(files(&clone), on_disk);
    assert_eq!(git(&clone, &["for-each-ref", "refs/moor"]), "");

    // a repository in the middle of a rebase: refused, nothing overwritten, rebase intact
    git(&repo, &["checkout", "-q", "-b", "side", "HEAD"]);
    git(&repo, &["stash", "push", "-q", "--include-untracked"]);
    write(&repo, "gone.txt", "side edit\n");
    git(&repo, &["commit", "-q", "-am", "side"]);
    git(&repo, &["checkout", "-q", "main"]);
    write(&repo, "gone.txt", "main edit\n");
    git(&repo, &["commit", "-q", "-am", "main"]);
    git(&repo, &["checkout", "-q", "side"]);
    let rebase = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=Dev",
            "-c",
            "user.email=dev@example.com",
            "rebase",
            "main",
        ])
        .current_dir(&repo)
        .output()
        .unwrap();
    assert!(!rebase.status.success(), "the rebase stops on a conflict");
    let before = (files(&repo), git_state(&repo));
    let err = restore_refused(&repo, &s.server, &id).await;
    assert!(
        err.contains("a rebase is in progress") && err.contains("nothing was changed"),
        "{err}"
    );
    assert_eq!((files(&repo), git_state(&repo)), before);
    assert!(repo.join(".git/rebase-merge").exists() || repo.join(".git/rebase-apply").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moor_says_at_start_when_the_directory_is_not_a_git_work_tree() {
    let plain = tempfile::tempdir().unwrap();
    let server = TestServer::start(ServerOpts::new()).await;
    let name = format!("plain-{}", uuid::Uuid::new_v4().simple());
    let mut bridge = BridgeOpts::new(&server.url(), server.token(), &name, &[])
        .command(&["true".into()])
        .cwd(plain.path())
        .spawn();
    bridge.wait_success(FINISH).await;
    let err = bridge.stderr();
    assert!(
        err.contains(&format!(
            "checkpoints are off: {} is not in a git work tree",
            plain.path().display()
        )),
        "{err}"
    );
}

/// Claude Code working in a git repository, its bridge checkpointing after tool calls (the
/// interval, an hour, never comes).
async fn claude_on_a_git_repo(server: &TestServer) -> (ClaudeEnv, ClaudeSession) {
    let env = ClaudeEnv::start().await;
    git_work_tree(&env.project, &[("README.md", b"# p\n")]);
    let session = env
        .session(server, &server.url(), "claude", &[], |o| {
            o.flag("--checkpoint-interval", "1h")
        })
        .await;
    (env, session)
}

/// Asks Claude Code to write `file` and allows the write when it asks; the prompt's seq.
async fn write_allowed(server: &TestServer, claude: &mut ClaudeSession, file: &Path) -> u64 {
    let prompt = format!("[[write:{}:hi from the fake model]]", file.display());
    let seq = server
        .api()
        .post_input(claude.id, "p1", &prompt)
        .await
        .seq
        .0;
    let request = claude
        .tail
        .wait_kind(kinds::AGENT_PERMISSION_REQUEST, seq, FINISH, |_| true)
        .await;
    server
        .api()
        .answer_permission(claude.id, "allow-1", &request, PermissionDecision::Allow)
        .await;
    seq
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_writing_a_file_is_followed_by_a_checkpoint() {
    // arrange: Claude Code's project is a git repository
    let server = TestServer::start(ServerOpts::new()).await;
    let (env, mut claude) = claude_on_a_git_repo(&server).await;
    let file = env.file("hello.txt");

    // act
    let seq = write_allowed(&server, &mut claude, &file).await;

    // assert: a checkpoint taken because of the tool call, holding the file
    let cp = claude
        .tail
        .wait_kind(CHECKPOINT_CREATED, seq, FINISH, |e| {
            e.payload["reason"] == "tool"
        })
        .await;
    assert_eq!(cp.payload["files"][0]["path"], "hello.txt");
    let tool_result = claude
        .tail
        .entries
        .iter()
        .find(|e| e.kind == kinds::AGENT_TOOL_RESULT)
        .expect("the tool result came first");
    assert!(tool_result.seq < cp.seq);
    claude.bridge.terminate();
    claude.bridge.wait_exit(FINISH).await;
}

/// `GET /api/v1/sessions/{session}/checkpoints/{to}/changes` with `query`: status and body.
async fn changes(s: &Shell, to: &str, query: &str) -> (StatusCode, serde_json::Value) {
    let r = s
        .server
        .api()
        .authed(
            Method::GET,
            &format!(
                "/api/v1/sessions/{}/checkpoints/{to}/changes{query}",
                s.name
            ),
            None,
        )
        .await;
    (r.status, r.body)
}

/// The newest uploaded checkpoint whose changed paths include every one of `paths`.
async fn checkpoint_with(s: &Shell, paths: &[&str]) -> CheckpointSummary {
    eventually_some(
        FINISH,
        &format!("a checkpoint holding {paths:?}"),
        || async {
            s.checkpoints()
                .await
                .into_iter()
                .find(|c| paths.iter().all(|p| c.files.iter().any(|f| f.path == *p)))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_changes_between_two_checkpoints_are_listed_per_file_with_bounded_paged_diffs() {
    // arrange: a first turn, checkpointed; then a second that edits a file again, writes a
    // 5,000-line file and a binary one, renames one and brings a deleted one back
    let (_dir, repo) = project();
    let mut s = Shell::start(&repo, &[("--checkpoint-interval", "300ms")]).await;
    s.run("echo one >> README.md && rm gone.txt").await;
    let first = checkpoint_with(&s, &["README.md", "gone.txt"]).await;
    s.run(
        "echo two >> README.md && seq 1 5000 | sed 's/^/line /' > big.txt && \
         printf '\\x00\\x01PNG' > pic.bin && mv old.txt new.txt && git checkout -q -- gone.txt",
    )
    .await;
    let second = eventually_some(FINISH, "a checkpoint of the whole second turn", || async {
        s.checkpoints().await.into_iter().find(|c| {
            let has = |p: &str| c.files.iter().any(|f| f.path == p);
            has("big.txt") && has("pic.bin") && has("new.txt") && !has("gone.txt")
        })
    })
    .await;

    // act
    let (status, body) = changes(&s, &second.id, &format!("?from={}", first.id)).await;

    // assert: each file once, from the right source, bounded
    assert_eq!(status, StatusCode::OK, "{body:?}");
    let answer: CheckpointChanges = serde_json::from_value(body).unwrap();
    assert_eq!(answer.from.as_deref(), Some(first.id.as_str()));
    let files: BTreeMap<&str, &FileDiff> =
        answer.files.iter().map(|f| (f.path.as_str(), f)).collect();
    assert_eq!(
        files.keys().copied().collect::<Vec<_>>(),
        ["README.md", "big.txt", "gone.txt", "new.txt", "pic.bin"]
    );
    assert_eq!(answer.files_total, 5);
    let readme = files["README.md"];
    assert_eq!(readme.status, FileDiffStatus::Modified);
    assert_eq!(readme.diff, "@@ -1,2 +1,3 @@\n # project\n one\n+two\n");
    assert_eq!((readme.insertions, readme.deletions), (1, 0));
    let gone = files["gone.txt"];
    assert_eq!(gone.status, FileDiffStatus::Added);
    assert_eq!(gone.diff, "@@ -0,0 +1 @@\n+to be deleted\n");
    let renamed = files["new.txt"];
    assert_eq!(renamed.status, FileDiffStatus::Renamed);
    assert_eq!(renamed.old_path.as_deref(), Some("old.txt"));
    let pic = files["pic.bin"];
    assert!(pic.binary && pic.diff.is_empty() && !pic.truncated);
    let big = files["big.txt"];
    assert_eq!((big.status, big.insertions), (FileDiffStatus::Added, 5000));
    assert!(big.truncated && big.diff.len() <= CHANGES_FILE_BYTES);
    assert!(answer.truncated);

    // act: page through the large file
    let mut text = big.diff.clone();
    let mut pages = 1;
    loop {
        let (status, body) = changes(
            &s,
            &second.id,
            &format!("?from={}&file=big.txt&offset={}", first.id, text.len()),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body:?}");
        let page: CheckpointChanges = serde_json::from_value(body).unwrap();
        let f = &page.files[0];
        assert_eq!(f.offset as usize, text.len());
        assert!(f.diff.len() <= CHANGES_PAGE_BYTES && !f.diff.is_empty());
        text.push_str(&f.diff);
        pages += 1;
        if !f.truncated {
            assert_eq!(f.diff_bytes as usize, text.len());
            break;
        }
    }

    // assert: the pages add up to the whole diff, line by line
    let expected: String = std::iter::once("@@ -0,0 +1,5000 @@\n".to_owned())
        .chain((1..=5000).map(|i| format!("+line {i}\n")))
        .collect();
    assert_eq!(text, expected);
    assert!(pages >= 2, "{pages} pages");

    // Without `from`: against the base commit; the restored file is no change at all.
    let (_, body) = changes(&s, &second.id, "?summary=true").await;
    let since_base: CheckpointChanges = serde_json::from_value(body).unwrap();
    let paths: Vec<&str> = since_base.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["README.md", "big.txt", "new.txt", "pic.bin"]);
    assert!(since_base.files.iter().all(|f| f.diff.is_empty()));
    assert_eq!(since_base.insertions, 5000 + 2);

    // What the server does not hold is 404.
    for query in [
        "?from=ffffffffffffffff".to_owned(),
        "?file=run.sh".to_owned(),
    ] {
        let (status, body) = changes(&s, &second.id, &query).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{query}: {body:?}");
    }
    let (status, _) = changes(&s, "ffffffffffffffff", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    s.exit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_code_turn_is_bounded_by_the_checkpoints_around_it_and_its_changes_are_listed() {
    // arrange: Claude Code's project is a git repository
    let server = TestServer::start(ServerOpts::new()).await;
    let (env, mut claude) = claude_on_a_git_repo(&server).await;
    let file = env.file("hello.txt");

    // act: one turn that writes a file
    let seq = write_allowed(&server, &mut claude, &file).await;
    claude
        .tail
        .wait_kind(kinds::AGENT_RESULT, seq, FINISH, |_| true)
        .await;
    claude
        .tail
        .wait_kind(CHECKPOINT_CREATED, seq, FINISH, |e| {
            e.payload["reason"] == "tool"
        })
        .await;

    // assert: the rule of the review (web/src/views/review.ts): the turn starts at the last
    // checkpoint before its prompt (none: the base commit) and ends at the last one before the
    // next prompt; the checkpoint of its edit is after the tool's result (and, as Claude Code
    // writes them, after the turn's `agent.result` too)
    let entries = server.api().entries_all(claude.id).await;
    let from = entries
        .iter()
        .rfind(|e| e.seq.0 < seq && e.kind == CHECKPOINT_CREATED)
        .map(|e| e.payload["id"].as_str().unwrap().to_owned());
    assert_eq!(
        from, None,
        "a clean tree at the start: no checkpoint before the turn"
    );
    let end = entries
        .iter()
        .rfind(|e| e.seq.0 > seq && e.kind == CHECKPOINT_CREATED)
        .unwrap();
    let tool_result = entries
        .iter()
        .find(|e| e.kind == kinds::AGENT_TOOL_RESULT)
        .unwrap();
    assert!(tool_result.seq < end.seq);
    let to = end.payload["id"].as_str().unwrap().to_owned();
    let answer: CheckpointChanges =
        eventually_some(FINISH, "the turn's checkpoint uploaded", || async {
            let r = server
                .api()
                .authed(
                    Method::GET,
                    &format!("/api/v1/sessions/{}/checkpoints/{to}/changes", claude.id),
                    None,
                )
                .await;
            (r.status == StatusCode::OK).then(|| serde_json::from_value(r.body).unwrap())
        })
        .await;
    assert_eq!(answer.files.len(), 1);
    assert_eq!(answer.files[0].path, "hello.txt");
    assert_eq!(answer.files[0].status, FileDiffStatus::Added);
    assert!(
        answer.files[0].diff.contains("+hi from the fake model"),
        "{:?}",
        answer.files[0].diff
    );
    claude.bridge.terminate();
    claude.bridge.wait_exit(FINISH).await;
}
