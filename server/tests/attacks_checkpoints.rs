//! Checkpoints and blobs attacked by an ordinary account, over real sockets against a real
//! SQLite store: each test is one finding of the hostile-tenants review, tried as the attacker
//! tried it, and shows it now fails safely.
//!
//! Sessions, users and memberships are arranged directly in the store (a second handle on the
//! server's database); everything the attacker does goes through the HTTP API.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::time::Duration;

use moor_protocol::SessionId;
use moor_server::store::{CheckpointRow, Role, Stores};
use moor_server::ServerConfig;
use reqwest::StatusCode;
use serde_json::{json, Value};
use sha2::Digest;
use tokio_util::sync::DropGuard;

mod support;

use support::client::Client;
use support::DataDir;

const PASSWORD: &str = "correct horse battery";
const MIB: usize = 1 << 20;

/// The server under attack; stops when dropped, and then its data directory goes.
struct Target {
    _stop: DropGuard,
    addr: std::net::SocketAddr,
    base: String,
    http: reqwest::Client,
    store: Stores,
    dir: DataDir,
}

impl Target {
    /// A server whose store already holds `sessions`, each owned by the user named with it.
    async fn with(sessions: &[(&str, &str)]) -> (Self, Vec<SessionId>) {
        Self::with_config(sessions, |_| {}).await
    }

    /// [`Self::with`], with the server's configuration as `tweak` leaves it.
    async fn with_config(
        sessions: &[(&str, &str)],
        tweak: impl FnOnce(&mut ServerConfig),
    ) -> (Self, Vec<SessionId>) {
        let dir = DataDir::new("moor-attack");
        std::fs::create_dir_all(&*dir).unwrap();
        let url = format!("sqlite:{}", dir.join("moor.db").display());
        let store = moor_server::store::connect(&url).await.unwrap();
        let hash = moor_server::access::password::hash(PASSWORD).unwrap();
        for user in ["ann", "eve", "mallory"] {
            store
                .access
                .create_user(user, &hash, false, 1)
                .await
                .unwrap();
        }
        let mut ids = Vec::new();
        for (name, owner) in sessions {
            let id = store.log.open_session(name, None).await.unwrap().id;
            store
                .access
                .set_member(id, owner, Role::Owner)
                .await
                .unwrap();
            ids.push(id);
        }
        let server = support::build(&dir, "attacks-admin-token", |c| {
            c.database_url = Some(url);
            tweak(c);
        })
        .await;
        let served = support::serve_on_loopback(server).await;
        let target = Self {
            _stop: served.shutdown.drop_guard(),
            addr: served.addr,
            base: format!("http://{}/api/v1", served.addr),
            http: reqwest::Client::new(),
            store,
            dir,
        };
        (target, ids)
    }

    async fn login(&self, name: &str) -> String {
        Client::login(self.addr, name, PASSWORD).await.token
    }

    async fn send(&self, method: &str, path: &str, token: &str, body: Body) -> reqwest::Response {
        let req = self
            .http
            .request(method.parse().unwrap(), format!("{}{path}", self.base))
            .bearer_auth(token);
        let req = match body {
            Body::None => req,
            Body::Json(v) => req.json(&v),
            Body::Bytes(b) => req.body(b),
        };
        req.send().await.unwrap()
    }

    async fn put_blob(&self, token: &str, content: &[u8]) -> StatusCode {
        let path = format!("/blobs/{}", sha(content));
        let body = Body::Bytes(content.to_vec());
        self.send("PUT", &path, token, body).await.status()
    }

    async fn put_manifest(&self, token: &str, session: &str, m: &Value) -> StatusCode {
        let path = format!(
            "/sessions/{session}/checkpoints/{}",
            m["id"].as_str().unwrap()
        );
        let body = Body::Json(m.clone());
        self.send("PUT", &path, token, body).await.status()
    }

    /// Sends only the head of a request announcing `length` bytes of body; the status of the
    /// answer that comes without the body.
    async fn head_only(&self, method: &str, path: &str, token: &str, length: usize) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let head = format!(
            "{method} /api/v1{path} HTTP/1.1\r\nHost: {}\r\n\
             Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
             Content-Length: {length}\r\n\r\n",
            self.addr
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        let mut answer = [0u8; 12];
        tokio::time::timeout(Duration::from_secs(10), tcp.read_exact(&mut answer))
            .await
            .expect("an answer without the body")
            .unwrap();
        std::str::from_utf8(&answer[9..12])
            .unwrap()
            .parse()
            .unwrap()
    }

    fn blob_on_disk(&self, sha: &str) -> bool {
        self.dir.join("blobs").join(&sha[..2]).join(sha).exists()
    }
}

enum Body {
    None,
    Json(Value),
    Bytes(Vec<u8>),
}

fn sha(content: &[u8]) -> String {
    moor_server::blobs::hex(&sha2::Sha256::digest(content))
}

/// A changed file of a manifest: path, git mode, content SHA-256, claimed size.
type File<'a> = (&'a str, &'a str, &'a str, u64);

/// A manifest `id` whose patch is `patch` and whose files are `files`.
fn manifest(id: &str, patch: &[u8], files: &[File]) -> Value {
    let files: Vec<Value> = files
        .iter()
        .map(|(path, mode, sha, size)| {
            json!({"path": path, "status": "added", "old_mode": null, "mode": mode,
                   "old_oid": null, "oid": "x", "sha256": sha, "size": size,
                   "insertions": null, "deletions": null})
        })
        .collect();
    json!({
        "id": id, "created_at": 1, "reason": "tool", "base": null, "branch": null,
        "tree": "t", "commit": "c", "commit_object": "", "object_format": "sha1",
        "repo_state": null, "work_tree": "/w", "files": files, "skipped": [],
        "diffstat": {"files": 0, "insertions": 0, "deletions": 0},
        "patch": {"sha256": sha(patch), "size": patch.len()},
    })
}

/// This process's resident memory (the server runs in it), bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn high_2_an_archive_is_built_from_stored_sizes_bounded_and_streamed() {
    // arrange: a manifest naming one 8 MiB blob 150 times with size 0, stored before uploads
    // were checked (so only the archive stands between it and 1.26 GB of tar).
    let (t, ids) = Target::with(&[("s1", "ann")]).await;
    let ann = t.login("ann").await;
    let big = vec![b'x'; 8 * MIB];
    let big_sha = sha(&big);
    assert_eq!(t.put_blob(&ann, &big).await, StatusCode::CREATED);
    assert_eq!(t.put_blob(&ann, b"patch").await, StatusCode::CREATED);
    let paths: Vec<String> = (0..150).map(|i| format!("f{i}")).collect();
    let zero: Vec<_> = paths
        .iter()
        .map(|p| (p.as_str(), "100644", big_sha.as_str(), 0))
        .collect();
    let hostile = manifest("00000000000000a1", b"patch", &zero);
    let row = CheckpointRow {
        id: "00000000000000a1".into(),
        session: ids[0],
        created_at: 1,
        summary: "{}".into(),
        manifest: hostile.to_string(),
        blobs: vec![big_sha.clone(), sha(b"patch")],
    };
    t.store.checkpoints.save_checkpoint(&row).await.unwrap();

    // act + assert: the same manifest uploaded now is refused for its false sizes…
    let mut again = hostile.clone();
    again["id"] = json!("00000000000000a2");
    let refused = t.put_manifest(&ann, "s1", &again).await;
    assert_eq!(
        refused,
        StatusCode::BAD_REQUEST,
        "claimed sizes must match stored ones"
    );
    // …and the stored one is refused by the archive's bound, before any byte is built.
    let before = rss();
    let resp = t
        .send(
            "GET",
            "/checkpoints/00000000000000a1/archive",
            &ann,
            Body::None,
        )
        .await;
    assert_eq!(
        resp.status(),
        StatusCode::CONFLICT,
        "150 x 8 MiB by stored size is over 512 MiB"
    );
    assert!(
        rss() < before + 64 * MIB as u64,
        "nothing was built in memory"
    );

    // An archive within the bound (24 x 8 MiB, true sizes) streams in bounded memory.
    let honest: Vec<_> = paths[..24]
        .iter()
        .map(|p| (p.as_str(), "100644", big_sha.as_str(), big.len() as u64))
        .collect();
    let m = manifest("00000000000000a3", b"patch", &honest);
    assert_eq!(t.put_manifest(&ann, "s1", &m).await, StatusCode::CREATED);
    let before = rss();
    let mut resp = t
        .send(
            "GET",
            "/checkpoints/00000000000000a3/archive",
            &ann,
            Body::None,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let (mut total, mut peak, mut first) = (0usize, before, Vec::new());
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(60), resp.chunk())
        .await
        .expect("archive in time")
        .unwrap()
    {
        if first.len() < 512 {
            first.extend_from_slice(&chunk[..chunk.len().min(512 - first.len())]);
        }
        if total / MIB != (total + chunk.len()) / MIB {
            peak = peak.max(rss());
        }
        total += chunk.len();
    }
    assert!(total > 24 * 8 * MIB, "every file whole: {total} bytes");
    let header = tar::Header::from_byte_slice(&first);
    assert_eq!(
        header.size().unwrap(),
        big.len() as u64,
        "the stored size, not the claim"
    );
    let grew = peak.saturating_sub(before);
    eprintln!(
        "a {total}-byte archive streamed; RSS grew by {} KiB at most",
        grew / 1024
    );
    assert!(
        grew < 48 * MIB as u64,
        "a 192 MiB archive cost {} MiB of memory",
        grew / MIB as u64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn medium_5_another_sessions_blob_can_be_neither_named_read_nor_probed() {
    // arrange: ann's checkpoint in s1 names her .env; eve owns s2 and knows its hash.
    let (t, _) = Target::with(&[("s1", "ann"), ("s2", "eve")]).await;
    let (ann, eve) = (t.login("ann").await, t.login("eve").await);
    let secret: &[u8] = b"DATABASE_PASSWORD=hunter2\n";
    assert_eq!(t.put_blob(&ann, secret).await, StatusCode::CREATED);
    assert_eq!(t.put_blob(&ann, b"p1").await, StatusCode::CREATED);
    let theirs = manifest(
        "00000000000000b1",
        b"p1",
        &[(".env", "100644", &sha(secret), secret.len() as u64)],
    );
    assert_eq!(
        t.put_manifest(&ann, "s1", &theirs).await,
        StatusCode::CREATED
    );
    let never_stored = sha(b"never stored anywhere");

    // act: eve probes, names it in her own checkpoint, and asks for it.
    let asked = json!({"sha256": [sha(secret), never_stored.clone()]});
    let resp = t
        .send("POST", "/blobs/missing", &eve, Body::Json(asked))
        .await;
    let missing: Value = resp.json().await.unwrap();
    assert_eq!(t.put_blob(&eve, b"p2").await, StatusCode::CREATED);
    let hers = manifest(
        "00000000000000b2",
        b"p2",
        &[("stolen", "100644", &sha(secret), secret.len() as u64)],
    );
    let named = t.put_manifest(&eve, "s2", &hers).await;
    let read = t
        .send("GET", &format!("/blobs/{}", sha(secret)), &eve, Body::None)
        .await
        .status();
    let wrong_bytes = t
        .send(
            "PUT",
            &format!("/blobs/{}", sha(secret)),
            &eve,
            Body::Bytes(b"guess".to_vec()),
        )
        .await
        .status();

    // assert
    assert_eq!(
        missing["missing"],
        json!([sha(secret), never_stored]),
        "stored and never stored look alike"
    );
    assert_eq!(
        named,
        StatusCode::CONFLICT,
        "a manifest may name only blobs its uploader knows"
    );
    assert_eq!(read, StatusCode::NOT_FOUND);
    assert_eq!(wrong_bytes, StatusCode::BAD_REQUEST);
    let listed = t
        .send("GET", "/sessions/s2/checkpoints", &eve, Body::None)
        .await;
    assert_eq!(
        listed.json::<Value>().await.unwrap(),
        json!([]),
        "nothing stored for eve"
    );
    // Only someone who holds the content can send it, and is then answered as for new content.
    assert_eq!(t.put_blob(&eve, secret).await, StatusCode::CREATED);
    assert_eq!(
        t.put_blob(&ann, secret).await,
        StatusCode::OK,
        "ann already sent it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn medium_6_a_checkpoint_id_taken_in_another_session_neither_blocks_nor_replaces_yours() {
    // arrange
    let (t, ids) = Target::with(&[("s1", "ann"), ("s2", "eve")]).await;
    let (ann, eve) = (t.login("ann").await, t.login("eve").await);
    assert_eq!(t.put_blob(&ann, b"ann's patch").await, StatusCode::CREATED);
    assert_eq!(t.put_blob(&eve, b"eve's patch").await, StatusCode::CREATED);
    let id = "00000000000000c1";

    // act: eve takes the id she saw in ann's log first, then adds ann to her session.
    let taken = t
        .put_manifest(&eve, "s2", &manifest(id, b"eve's patch", &[]))
        .await;
    let mine = t
        .put_manifest(&ann, "s1", &manifest(id, b"ann's patch", &[]))
        .await;
    let patch_of = |resp: Value| {
        resp["manifest"]["patch"]["sha256"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let before = t
        .send("GET", &format!("/checkpoints/{id}"), &ann, Body::None)
        .await;
    let before = patch_of(before.json().await.unwrap());
    t.store
        .access
        .set_member(ids[1], "ann", Role::Viewer)
        .await
        .unwrap();
    let ambiguous = t
        .send("GET", &format!("/checkpoints/{id}"), &ann, Body::None)
        .await
        .status();
    let named = t
        .send(
            "GET",
            &format!("/checkpoints/{id}?session=s1"),
            &ann,
            Body::None,
        )
        .await;

    // assert
    assert_eq!((taken, mine), (StatusCode::CREATED, StatusCode::CREATED));
    assert_eq!(before, sha(b"ann's patch"));
    assert_eq!(
        ambiguous,
        StatusCode::CONFLICT,
        "never eve's manifest in place of ann's"
    );
    assert_eq!(patch_of(named.json().await.unwrap()), sha(b"ann's patch"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn medium_10_blobs_need_a_session_and_manifests_are_bounded_after_the_owner_check() {
    // arrange: mallory owns no session.
    let (t, _) = Target::with(&[("s1", "ann")]).await;
    let (ann, mallory) = (t.login("ann").await, t.login("mallory").await);
    let blob = vec![b'm'; MIB];
    let path = "/sessions/s1/checkpoints/00000000000000d1";

    // act
    let stored = t.put_blob(&mallory, &blob).await;
    // A 64 MiB manifest announced, not a byte of it sent: the answer must not wait for it.
    let not_owner = t.head_only("PUT", path, &mallory, 64 * MIB).await;
    let over = Body::Bytes(vec![b' '; 16 * MIB + 1]);
    let owner = t.send("PUT", path, &ann, over).await.status();

    // assert
    assert_eq!(stored, StatusCode::FORBIDDEN);
    assert!(!t.blob_on_disk(&sha(&blob)), "nothing written for mallory");
    assert_eq!(not_owner, 404, "refused before the body is read");
    assert_eq!(
        owner,
        StatusCode::PAYLOAD_TOO_LARGE,
        "manifests are bounded (16 MiB)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn medium_10_one_account_cannot_store_more_checkpoint_content_than_its_quota() {
    // arrange: each account may have stored 2 MiB of checkpoint content.
    let quota = |c: &mut ServerConfig| c.max_blob_bytes_per_account = 2 * MIB as u64;
    let (t, _) = Target::with_config(&[("s1", "ann"), ("s2", "eve")], quota).await;
    let (ann, eve) = (t.login("ann").await, t.login("eve").await);
    let (first, more) = (vec![b'a'; 2 * MIB], vec![b'b'; MIB]);

    // act
    let within = t.put_blob(&ann, &first).await;
    let over = t.put_blob(&ann, &more).await;
    let other = t.put_blob(&eve, &more).await;

    // assert: the quota is the account's own: ann is refused, eve is not
    assert_eq!(within, StatusCode::CREATED);
    assert_eq!(over, StatusCode::CONFLICT, "ann's quota is used up");
    assert_eq!(other, StatusCode::CREATED, "eve has her own quota");
    assert!(t.blob_on_disk(&sha(&first)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn low_unsafe_archive_paths_are_refused_with_400_and_nothing_is_stored() {
    // arrange
    let (t, _) = Target::with(&[("s1", "ann")]).await;
    let ann = t.login("ann").await;
    assert_eq!(t.put_blob(&ann, b"patch").await, StatusCode::CREATED);
    assert_eq!(t.put_blob(&ann, b"/etc").await, StatusCode::CREATED);
    let (link, file) = (sha(b"/etc"), sha(b"patch"));
    let cases: Vec<(&str, Vec<File>)> = vec![
        (
            "through a symlink",
            vec![("d", "120000", &link, 4), ("d/passwd", "100644", &file, 5)],
        ),
        ("parent", vec![("../outside", "100644", &file, 5)]),
        ("absolute", vec![("/etc/cron.d/x", "100644", &file, 5)]),
        (
            "duplicate",
            vec![("a", "100644", &file, 5), ("a", "100755", &file, 5)],
        ),
    ];

    for (i, (what, files)) in cases.into_iter().enumerate() {
        // act
        let m = manifest(&format!("00000000000000e{i}"), b"patch", &files);
        let status = t.put_manifest(&ann, "s1", &m).await;
        // assert
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}");
    }
    let listed = t
        .send("GET", "/sessions/s1/checkpoints", &ann, Body::None)
        .await;
    assert_eq!(listed.json::<Value>().await.unwrap(), json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_changes_of_a_huge_patch_are_answered_in_bounded_bytes_and_only_to_members() {
    // arrange: a 30 MB patch of one file: 200,000 lines and one line of 8 MiB
    let (t, _) = Target::with(&[("s1", "ann"), ("s2", "eve")]).await;
    let ann = t.login("ann").await;
    let mut patch = b"diff --git a/big.txt b/big.txt\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n+++ b/big.txt\n@@ -0,0 +1,200001 @@\n".to_vec();
    patch.push(b'+');
    patch.extend(std::iter::repeat_n(b'y', 8 * MIB));
    patch.push(b'\n');
    for i in 0..200_000 {
        patch.extend_from_slice(format!("+{i:0>100}\n").as_bytes());
    }
    let content = b"the file as stored";
    assert_eq!(t.put_blob(&ann, &patch).await, StatusCode::CREATED);
    assert_eq!(t.put_blob(&ann, content).await, StatusCode::CREATED);
    let content_sha = sha(content);
    let files = [(
        "big.txt",
        "100644",
        content_sha.as_str(),
        content.len() as u64,
    )];
    let m = manifest("00000000000000b1", &patch, &files);
    assert_eq!(t.put_manifest(&ann, "s1", &m).await, StatusCode::CREATED);
    drop(patch);

    // act
    let before = rss();
    let path = "/sessions/s1/checkpoints/00000000000000b1/changes";
    let resp = t.send("GET", path, &ann, Body::None).await;

    // assert: the whole file is counted, a window of it is sent
    assert_eq!(resp.status(), StatusCode::OK);
    let body = resp.bytes().await.unwrap();
    assert!(body.len() < 64 * 1024, "{} bytes answered", body.len());
    assert!(rss() < before + 64 * MIB as u64, "the patch was streamed");
    let answer: Value = serde_json::from_slice(&body).unwrap();
    let f = &answer["files"][0];
    assert_eq!(f["path"], "big.txt");
    assert_eq!(f["insertions"], 200_001);
    assert_eq!(f["truncated"], true);
    let first = f["diff"].as_str().unwrap().lines().nth(1).unwrap();
    assert!(
        first.len() < 1100 && first.ends_with('…'),
        "a long line is cut"
    );

    // A page of the file is bounded too; a member of another session learns nothing.
    let page = t
        .send(
            "GET",
            &format!("{path}?file=big.txt&offset=2000000"),
            &ann,
            Body::None,
        )
        .await;
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.bytes().await.unwrap().len() < 80 * 1024);
    let eve = t.login("eve").await;
    let refused = t.send("GET", path, &eve, Body::None).await;
    assert_eq!(refused.status(), StatusCode::NOT_FOUND);
}
