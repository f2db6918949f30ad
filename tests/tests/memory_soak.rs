//! The memory budget under a mix of attacks, end to end: while a real `moor` streams 10,000
//! entries to one `moord` and a normal SSE viewer reads them, a hostile bridge fills another
//! session with big entries, readers that never read open streams on both sessions, a bridge
//! sends a `hello` five times the frame limit, a checkpoint names one 8 MiB blob 150 times (with
//! false sizes, then true ones, and its archive is asked for), and a flood of requests carries
//! fresh made-up bearer tokens. The normal pair loses nothing, the stalled readers are cut off,
//! the hello is refused with 1009, the manifest with false sizes with 400 and the archive over
//! its bound with 409, the flood is limited by address, and `moord`'s anonymous memory
//! (`RssAnon` in `/proc/<pid>/status`, sampled throughout) stays under the budget that
//! `docs/security.md` adds up for these connections.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use moor_e2e::{eventually, lines, RawBridge, Rig, ServerOpts, SseClient, SseOpts, WAIT};
use moor_protocol::bridge::{AgentInfo, BridgeToServer, Hello};
use moor_protocol::{close, kinds, NewEntry, ProducerId, Seq, PROTOCOL_VERSION};
use serde_json::json;
use tokio::net::TcpStream;

const MIB: u64 = 1 << 20;
/// Entries of the hostile session, and their size.
const BIG_ENTRIES: u64 = 80;
const BIG_BYTES: usize = 512 * 1024;
/// Page bound and stall timeout the server runs with.
const PAGE_BYTES: u64 = MIB;
const STALL_MS: u64 = 1000;
/// What the connections of this test may add to `moord`'s anonymous memory, from
/// `docs/security.md`: five stalled viewers (a page read and parsed, two chunks of 64 KiB plus
/// an entry each: under 4 MiB), the normal viewer alike, the hostile bridge's batches in flight
/// (under four times the 4 MiB frame limit of frames, held parsed, as rows and as entries:
/// 48 MiB),
/// `moor`'s batches of small lines, and the refused hello read whole (20 MiB, held at most twice
/// while it is read), a checkpoint manifest held whole (under 1 MiB here; blobs stream to disk
/// and an archive over its bound is refused before it is built). SQLite's page cache comes on
/// top: see [`sqlite_cache`].
const CONNECTIONS: u64 = 6 * 4 * MIB + 48 * MIB + 8 * MIB + 40 * MIB + MIB;
/// Requests of the flood of made-up bearer tokens.
const FLOOD: usize = 400;
/// Requests a second (and ten times that as a burst) per principal or address.
const RATE: u64 = 25;

/// The SQLite writer's page cache: the pages it wrote, up to its 64 MiB (`docs/security.md`).
fn sqlite_cache(data_dir: &std::path::Path) -> u64 {
    let file = |name: &str| std::fs::metadata(data_dir.join(name)).map_or(0, |m| m.len());
    (file("moor.db") + file("moor.db-wal")).min(64 * MIB)
}

/// `RssAnon` of process `pid`, in bytes.
fn rss_anon(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("RssAnon:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Samples the peak `RssAnon` of `pid` on its own thread until dropped.
struct PeakSampler {
    peak: Arc<AtomicU64>,
}

impl PeakSampler {
    fn start(pid: u32) -> Self {
        let peak = Arc::new(AtomicU64::new(rss_anon(pid)));
        let seen = peak.clone();
        std::thread::spawn(move || {
            while Arc::strong_count(&seen) > 1 {
                seen.fetch_max(rss_anon(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Self { peak }
    }

    fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

/// A loopback connection with a tiny receive buffer that asks for a session's events from the
/// start and never reads.
async fn stalled_reader(addr: std::net::SocketAddr, token: &str, session: &str) -> TcpStream {
    moor_e2e::sse::stalled_reader(addr, token, session)
        .await
        .expect("stalled reader connects")
}

fn sha256(content: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(content)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A checkpoint manifest `id` whose patch is `patch` and that names the blob `sha` (claimed
/// `size` bytes) under 150 paths.
fn manifest_150(id: &str, patch: &[u8], sha: &str, size: u64) -> serde_json::Value {
    let files: Vec<_> = (0..150)
        .map(|i| {
            json!({"path": format!("f{i}"), "status": "added", "old_mode": null,
                   "mode": "100644", "old_oid": null, "oid": "x", "sha256": sha, "size": size,
                   "insertions": null, "deletions": null})
        })
        .collect();
    json!({
        "id": id, "created_at": 1, "reason": "tool", "base": null, "branch": null,
        "tree": "t", "commit": "c", "commit_object": "", "object_format": "sha1",
        "repo_state": null, "work_tree": "/w", "files": files, "skipped": [],
        "diffstat": {"files": 0, "insertions": 0, "deletions": 0},
        "patch": {"sha256": sha256(patch), "size": patch.len()},
    })
}

/// One 8 MiB blob named 150 times by a checkpoint of `session`: with false sizes (refused at
/// the upload), then with true ones (stored), whose archive (1.2 GiB by stored size) is refused
/// before it is built. Returns the three statuses.
async fn checkpoint_150(base: &str, token: &str, session: &str) -> [u16; 3] {
    let http = reqwest::Client::new();
    let big = vec![b'x'; 8 * MIB as usize];
    let patch = b"patch".to_vec();
    for blob in [&big, &patch] {
        let resp = http
            .put(format!("{base}/api/v1/blobs/{}", sha256(blob)))
            .bearer_auth(token)
            .body(blob.clone())
            .send()
            .await
            .expect("blob upload");
        assert!(resp.status().is_success(), "blob upload: {}", resp.status());
    }
    let put = |id: &str, size: u64| {
        http.put(format!("{base}/api/v1/sessions/{session}/checkpoints/{id}"))
            .bearer_auth(token)
            .json(&manifest_150(id, &patch, &sha256(&big), size))
            .send()
    };
    let lying = put("00000000000000b1", 0).await.expect("manifest").status();
    let honest = put("00000000000000b2", 8 * MIB)
        .await
        .expect("manifest")
        .status();
    let archive = http
        .get(format!(
            "{base}/api/v1/checkpoints/00000000000000b2/archive"
        ))
        .bearer_auth(token)
        .send()
        .await
        .expect("archive")
        .status();
    [lying.as_u16(), honest.as_u16(), archive.as_u16()]
}

/// `FLOOD` requests, each with a fresh made-up bearer token; the statuses seen.
async fn bearer_flood(base: &str) -> Vec<u16> {
    let http = reqwest::Client::new();
    let mut seen = Vec::with_capacity(FLOOD);
    for i in 0..FLOOD {
        let resp = http
            .get(format!("{base}/api/v1/sessions"))
            .bearer_auth(format!("junk{i}"))
            .send()
            .await
            .expect("flood request");
        seen.push(resp.status().as_u16());
    }
    seen
}

fn big_entries(first: u64, n: u64) -> Vec<NewEntry> {
    let filler = "x".repeat(BIG_BYTES);
    (first..first + n)
        .map(|i| NewEntry {
            producer_seq: i,
            ts: moor_protocol::now_ms(),
            kind: kinds::AGENT_OUTPUT.into(),
            payload: json!({"stream": "stdout", "text": format!("{i:06}{filler}")}),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_readers_an_oversized_hello_a_150x_manifest_and_a_bearer_flood_cost_the_normal_pair_nothing(
) {
    // arrange: moord with a small page bound and a short stall timeout; moor starts streaming
    let opts = ServerOpts::new()
        .flag("--max-page-bytes", PAGE_BYTES)
        .flag("--stall-timeout-ms", STALL_MS)
        .flag("--rate-limit", RATE);
    let mut rig = Rig::start(opts, &["count", "10000"]).await;
    let pid = rig.server.pid().expect("moord runs");
    let base = rss_anon(pid);
    let sampler = PeakSampler::start(pid);
    let viewer = SseClient::connect(
        &rig.server.url(),
        rig.server.token(),
        rig.id,
        SseOpts::default(),
    );
    let addr = rig.server.addr();
    let token = rig.server.token().to_owned();

    // act: a hostile bridge fills its session with big entries…
    let mut hostile = RawBridge::connect(addr, Some(&token))
        .await
        .expect("bridge socket");
    hostile.hello("hostile", ProducerId::new()).await;
    for first in (1..=BIG_ENTRIES).step_by(4) {
        let entries = big_entries(first, 4);
        hostile.send(&BridgeToServer::Entries { entries }).await;
    }
    hostile.wait_ack(BIG_ENTRIES, WAIT).await;
    // …readers that never read open streams on it and on the normal session…
    let mut stalled = Vec::new();
    for _ in 0..4 {
        stalled.push(stalled_reader(addr, &token, "hostile").await);
    }
    stalled.push(stalled_reader(addr, &token, &rig.name).await);
    // …and a hello five times the frame limit is sent.
    let mut oversized = RawBridge::connect(addr, Some(&token))
        .await
        .expect("bridge socket");
    let hello = BridgeToServer::Hello(Hello {
        version: PROTOCOL_VERSION,
        session: "oversized".into(),
        producer: ProducerId::new(),
        last_applied_input: Seq::ZERO,
        uncertain_inputs: vec![],
        continues: None,
        agent: AgentInfo {
            command: vec!["x".repeat(20 << 20)],
            ..Default::default()
        },
    });
    oversized
        .send_text(serde_json::to_string(&hello).expect("hello encodes"))
        .await;
    let refused = oversized.expect_close(WAIT).await;
    // …a checkpoint names one big blob 150 times, and made-up bearers flood the API.
    let url = rig.server.url();
    let checkpoint = checkpoint_150(&url, &token, "hostile").await;
    let flood = bearer_flood(&url).await;

    // assert: the hello is refused with 1009 and made no session
    assert_eq!(refused.code, close::MESSAGE_TOO_BIG, "{refused:?}");
    assert!(rig.api.session("oversized").await.is_none());
    // the false sizes are refused, the archive over its bound too, before it is built
    assert_eq!(
        checkpoint,
        [400, 201, 409],
        "false sizes, true sizes, archive"
    );
    // the flood is answered 401 until its address runs out of requests, then 429
    assert!(flood.iter().all(|s| *s == 401 || *s == 429), "{flood:?}");
    assert!(
        flood.contains(&429),
        "made-up bearers are limited by address"
    );
    // the stalled readers of the big entries are cut off (the one on the normal session may fit
    // all it is sent in the sockets' buffers, and then waits like any idle reader)
    let api = rig.api.clone();
    eventually(WAIT, "the stalled readers to be cut off", || {
        let api = api.clone();
        async move {
            let list = api.sessions().await;
            list.iter()
                .find(|s| s.name == "hostile")
                .is_some_and(|s| s.watchers == 0)
        }
    })
    .await;
    // the normal pair loses nothing: moor's log is complete, and the viewer saw exactly it
    let log = rig.finish(&lines(10_000)).await;
    let head = log.last().expect("log").seq.0;
    viewer.wait_seq(head, WAIT).await;
    let seen = viewer.snapshot();
    assert_eq!(seen.entries, log, "the viewer saw exactly the log");
    // and moord stayed under the budget
    let grew = sampler.peak().saturating_sub(base);
    let budget = CONNECTIONS + sqlite_cache(&rig.server.dir().join("data"));
    eprintln!(
        "moord anonymous memory: {base} bytes at the start, peak growth {grew} bytes, budget {budget}"
    );
    assert!(
        grew < budget,
        "moord's anonymous memory grew by {grew} bytes, over the {budget} byte budget"
    );
    drop(stalled);
}
