//! Compaction end to end, on a real `moord` (SQLite) with a bridge connection and an SSE viewer
//! over real sockets: a session of 100,000 terminal-output entries is compacted while a viewer is
//! part way through reading it; the viewer is told what was removed (a `reset` naming each range
//! as compaction's steps reach past its cursor) and receives exactly the entries no reset said
//! were removed, a new reader's pages say the same, and the database shrinks on disk. `moord gc`
//! compacts a stopped server's data. A session's own policy, set by its
//! owner, compacts it and deletes it after it ended, and only its owner may set it.

use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use moor_e2e::http::{Api, RawBody};
use moor_e2e::sse::{SseItem, SseParser};
use moor_e2e::util::bin_path;
use moor_e2e::ws::RawBridge;
use moor_e2e::{eventually, ServerOpts, TestServer, WAIT};
use moor_protocol::api::SessionRetention;
use moor_protocol::bridge::BridgeToServer;
use moor_protocol::web::Reset;
use moor_protocol::{kinds, Entry, NewEntry, ProducerId, Seq};
use reqwest::{Method, StatusCode};

const ENTRIES: u64 = 100_000;
const FRAME: u64 = 1_000;
/// Every this many entries, one `agent.output` line that compaction keeps.
const KEPT_EVERY: u64 = 100;
const LONG: Duration = Duration::from_secs(180);
/// Entries older than about 4 ms are due.
const COMPACT_AFTER_HOURS: &str = "0.000001";

fn entry(i: u64) -> NewEntry {
    let (kind, payload) = if i.is_multiple_of(KEPT_EVERY) {
        (
            kinds::AGENT_OUTPUT,
            serde_json::json!({"stream": "stdout", "text": format!("line {i}")}),
        )
    } else {
        let bytes = format!(
            "{i:>8} output of a busy terminal agent, with colours \x1b[1;32m ok \x1b[0m\r\n"
        )
        .repeat(2);
        (
            kinds::AGENT_PTY_OUTPUT,
            serde_json::json!({"data": base64::engine::general_purpose::STANDARD.encode(bytes)}),
        )
    };
    NewEntry {
        producer_seq: i,
        ts: moor_protocol::now_ms(),
        kind: kind.to_owned(),
        payload,
    }
}

/// Streams `n` entries into session `name` from a fresh bridge connection, in frames of
/// [`FRAME`], and waits for the last ack.
async fn stream_session(server: &TestServer, name: &str, n: u64, make: impl Fn(u64) -> NewEntry) {
    let mut bridge = RawBridge::connect(server.addr(), Some(server.token()))
        .await
        .expect("bridge connects");
    bridge.hello(name, ProducerId::new()).await;
    let mut first = 1;
    while first <= n {
        let last = (first + FRAME - 1).min(n);
        let entries = (first..=last).map(&make).collect();
        bridge.send(&BridgeToServer::Entries { entries }).await;
        first = last + 1;
    }
    bridge.wait_ack(n, LONG).await;
}

/// Ends session `name` as its bridge does when its agent is done.
async fn end_session(server: &TestServer, name: &str) {
    let mut bridge = RawBridge::connect(server.addr(), Some(server.token()))
        .await
        .expect("bridge connects");
    bridge.hello(name, ProducerId::new()).await;
    bridge.send(&BridgeToServer::End).await;
    server.api().wait_ended(name, WAIT).await;
}

fn db_bytes(server: &TestServer) -> u64 {
    std::fs::read_dir(server.dir().join("data"))
        .expect("data dir")
        .filter_map(Result::ok)
        .filter(|f| f.file_name().to_string_lossy().starts_with("moor.db"))
        .map(|f| f.metadata().map_or(0, |m| m.len()))
        .sum()
}

async fn gc(server: &TestServer, flags: &[&str]) -> String {
    let out = tokio::time::timeout(
        LONG,
        tokio::process::Command::new(bin_path("moord"))
            .arg("--data-dir")
            .arg(server.dir().join("data"))
            .args(flags)
            .arg("gc")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("moord gc finished in time")
    .expect("moord gc ran");
    assert!(
        out.status.success(),
        "moord gc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An SSE reader that reads only when asked.
struct Reader {
    response: reqwest::Response,
    parser: SseParser,
    entries: Vec<Entry>,
    /// Resets, each with the number of entries received before it.
    resets: Vec<(usize, Reset)>,
}

impl Reader {
    async fn open(server: &TestServer, session: moor_protocol::SessionId) -> Self {
        let response = reqwest::Client::new()
            .get(format!("{}/api/v1/sessions/{session}/events", server.url()))
            .bearer_auth(server.token())
            .send()
            .await
            .expect("stream opens");
        assert_eq!(response.status(), StatusCode::OK);
        Self {
            response,
            parser: SseParser::default(),
            entries: Vec::new(),
            resets: Vec::new(),
        }
    }

    /// Reads until `done` holds for what was read.
    async fn read_until(&mut self, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = tokio::time::Instant::now() + LONG;
        while !done(self) {
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .unwrap_or_else(|_| panic!("no {what} in time; got {} entries", self.entries.len()))
                .expect("stream reads")
                .unwrap_or_else(|| panic!("the stream ended before {what}"));
            for item in self.parser.feed(&chunk) {
                let SseItem::Event { event, data, id } = item else {
                    continue;
                };
                if event.as_deref() == Some("reset") {
                    assert_eq!(id, None, "a reset moves no cursor");
                    let reset: Reset = serde_json::from_str(&data).expect("reset decodes");
                    self.resets.push((self.entries.len(), reset));
                } else if event.as_deref() != Some("state") {
                    self.entries
                        .push(serde_json::from_str(&data).expect("entry decodes"));
                }
            }
        }
    }
}

fn compactable(e: &Entry) -> bool {
    e.kind == kinds::AGENT_PTY_OUTPUT || e.kind == kinds::AGENT_TEXT_DELTA
}

#[tokio::test]
async fn a_viewer_reading_while_the_log_is_compacted_is_told_what_went_and_gets_exactly_the_rest() {
    // arrange: 100,000 entries, 99 % terminal output; no compaction by the timer
    let server = TestServer::start(
        ServerOpts::new()
            .flag("--compact-after-hours", COMPACT_AFTER_HOURS)
            .flag("--retention-interval-ms", 3_600_000)
            .flag("--stall-timeout-ms", 600_000),
    )
    .await;
    stream_session(&server, "busy-terminal", ENTRIES, entry).await;
    let info = server.api().wait_session("busy-terminal", WAIT).await;
    let original = server.api().entries_all(info.id).await;
    let head = original.last().expect("a log").seq;
    assert!(
        original.len() as u64 > ENTRIES,
        "{} entries",
        original.len()
    );
    let disk_before = db_bytes(&server);
    // ... a viewer reads the first 10,000 entries, then stops reading
    let mut viewer = Reader::open(&server, info.id).await;
    viewer
        .read_until("10,000 entries", |r| r.entries.len() >= 10_000)
        .await;

    // act: compaction runs on request, in steps, while the server keeps feeding the viewer's
    // stream as far as the connection takes it
    let run = server
        .api()
        .authed(Method::POST, "/api/v1/retention/run", None)
        .await;
    assert_eq!(run.status, StatusCode::OK, "{:?}", run.body);
    assert_eq!(run.body["compacted_sessions"], 1, "{:?}", run.body);
    viewer
        .read_until("the head", |r| {
            r.entries.last().is_some_and(|e| e.seq == head)
        })
        .await;

    // assert: the compaction mark is near the head (the newest 1,000 entries are kept)
    let retention = server
        .api()
        .authed(
            Method::GET,
            &format!("/api/v1/sessions/{}/retention", info.id),
            None,
        )
        .await
        .body;
    let retention: SessionRetention = serde_json::from_value(retention).expect("retention");
    let through = retention.compacted_through;
    assert!(
        through.0 + 2_000 >= head.0 && through < head,
        "through {through}, head {head}"
    );
    // ... every reset came at the viewer's cursor and names a range and the kinds; compaction
    // ran in steps while the server kept reading pages for the viewer, so there may be several,
    // each moving the mark further, the last one reaching the final mark
    assert!(!viewer.resets.is_empty());
    let mut mark = Seq::ZERO;
    let mut ranges = Vec::new();
    for (at, reset) in &viewer.resets {
        let compacted = reset
            .compacted
            .as_ref()
            .expect("the reset says what was compacted");
        assert_eq!(
            compacted.after,
            viewer.entries[at - 1].seq,
            "a reset at the cursor"
        );
        assert!(
            compacted.through > mark,
            "each reset moves the mark: {:?}",
            viewer.resets
        );
        assert_eq!(
            compacted.kinds,
            [kinds::AGENT_PTY_OUTPUT, kinds::AGENT_TEXT_DELTA]
        );
        assert!(reset.reason.contains("compaction"), "{}", reset.reason);
        mark = compacted.through;
        ranges.push((compacted.after, compacted.through));
    }
    assert_eq!(mark, through);
    let last = viewer
        .resets
        .last()
        .and_then(|(_, r)| r.compacted.as_ref())
        .expect("a reset");
    assert_eq!(last.entries, retention.compacted_entries);
    // ... before the first, the log as it was; from there on, exactly the entries no reset
    // said were removed, in order
    let at = viewer.resets[0].0;
    assert_eq!(viewer.entries[..at], original[..at]);
    let named = |e: &Entry| ranges.iter().any(|(a, t)| e.seq > *a && e.seq <= *t);
    let kept: Vec<Entry> = original
        .iter()
        .filter(|e| !(compactable(e) && named(e)))
        .cloned()
        .collect();
    assert_eq!(viewer.entries.len(), kept.len());
    assert!(
        viewer.entries == kept,
        "the viewer got other entries than the resets leave"
    );
    println!("{} resets while reading: {ranges:?}", viewer.resets.len());
    let removed = original
        .iter()
        .filter(|e| compactable(e) && e.seq <= through)
        .count();
    assert_eq!(retention.compacted_entries, removed as u64);
    // ... a new reader's first page says the same; the log as stored is the kept entries
    let page = server.api().entries_after(info.id, 0, 1000).await;
    let missing = page.compacted.expect("a page below the mark says so");
    assert_eq!((missing.after, missing.through), (Seq::ZERO, through));
    let stored = server.api().entries_all(info.id).await;
    let all_kept: Vec<Entry> = original
        .iter()
        .filter(|e| !(compactable(e) && e.seq <= through))
        .cloned()
        .collect();
    assert_eq!(stored, all_kept);
    // ... and the database gave the space back
    let disk_after = db_bytes(&server);
    assert!(
        disk_after * 3 < disk_before,
        "on disk: {disk_before} bytes before, {disk_after} after"
    );
    println!("on disk: {disk_before} bytes before compaction, {disk_after} after");
}

#[tokio::test]
async fn moord_gc_compacts_a_stopped_servers_logs_and_the_restarted_server_serves_the_rest() {
    // arrange: a session of 3,000 entries; the server stopped
    let mut server = TestServer::start(ServerOpts::new()).await;
    stream_session(&server, "gc", 3_000, entry).await;
    let info = server.api().wait_session("gc", WAIT).await;
    let original = server.api().entries_all(info.id).await;
    server.terminate().await;

    // act
    let said = gc(&server, &["--compact-after-hours", COMPACT_AFTER_HOURS]).await;

    // assert: it says what it did, and the restarted server serves exactly the kept entries
    assert!(said.contains("compacted 1 sessions"), "{said}");
    server.restart().await;
    let page = server.api().entries_after(info.id, 0, 10).await;
    let through = page
        .compacted
        .expect("the first page says what was compacted")
        .through;
    let kept: Vec<Entry> = original
        .iter()
        .filter(|e| !(compactable(e) && e.seq <= through))
        .cloned()
        .collect();
    assert!(
        kept.len() < original.len() / 2,
        "{} of {} kept",
        kept.len(),
        original.len()
    );
    assert_eq!(server.api().entries_all(info.id).await, kept);
}

#[tokio::test]
async fn a_sessions_own_policy_compacts_it_and_deletes_it_after_it_ended_and_only_its_owner_sets_it(
) {
    // arrange: no server policy (no age bound, no cap, no deletion); retention every 100 ms;
    // two sessions of 3,000 terminal entries, a user who may view one of them
    let server = TestServer::start(
        ServerOpts::new()
            .flag("--compact-after-hours", 0)
            .flag("--max-log-bytes-per-session", 0)
            .flag("--retention-interval-ms", 100),
    )
    .await;
    stream_session(&server, "own-policy", 3_000, entry).await;
    stream_session(&server, "server-policy", 3_000, entry).await;
    let own = server.api().wait_session("own-policy", WAIT).await;
    let plain = server.api().wait_session("server-policy", WAIT).await;
    let path = format!("/api/v1/sessions/{}/retention", own.id);
    let put = |body: serde_json::Value| {
        let api = server.api();
        let path = path.clone();
        async move {
            api.authed(Method::PUT, &path, Some(RawBody::Json(body)))
                .await
        }
    };

    // act + assert: bad bounds are refused and change nothing
    for bad in [
        serde_json::json!({"compact_after_hours": 0}),
        serde_json::json!({"keep_ended_days": -1}),
        serde_json::json!({"max_log_bytes": 10}),
        serde_json::json!({"compact_after_hours": "soon"}),
    ] {
        let answer = put(bad.clone()).await;
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{bad}: {:?}",
            answer.body
        );
    }
    // ... the owner's policy is stored and shown with the server's and the one in effect
    let answer =
        put(serde_json::json!({"compact_after_hours": 0.00001, "keep_ended_days": 0.00002})).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    let shown: SessionRetention = serde_json::from_value(answer.body).expect("retention");
    assert_eq!(shown.own.compact_after_hours, Some(0.00001));
    assert_eq!(shown.server.compact_after_hours, None);
    assert_eq!(shown.effective.compact_after_hours, Some(0.00001));
    // ... and the timer compacts that session, not the other
    eventually(LONG, "the session's own policy to compact it", || async {
        let r = server.api().authed(Method::GET, &path, None).await;
        r.body["compacted_entries"].as_u64().unwrap_or(0) > 0
    })
    .await;
    let plain_log = server.api().entries_all(plain.id).await;
    assert!(plain_log.iter().filter(|e| compactable(e)).count() >= 2_900);
    let page = server.api().entries_after(plain.id, 0, 10).await;
    assert_eq!(page.compacted, None);
    // ... a viewer may read the policy but not set it
    let admin = server.api();
    admin.add_user("vera", "correct horse battery").await;
    let tokens = admin.login("vera", "correct horse battery").await;
    let vera = Api::new(
        server.url(),
        tokens["access_token"].as_str().expect("token"),
    );
    let offer = admin
        .authed(
            Method::PUT,
            &format!("/api/v1/sessions/{}/members/vera", own.id),
            Some(RawBody::Json(serde_json::json!({"role": "viewer"}))),
        )
        .await;
    assert!(offer.status.is_success(), "{:?}", offer.body);
    if offer.status == StatusCode::ACCEPTED {
        let accept = vera
            .authed(
                Method::POST,
                &format!("/api/v1/offers/{}/accept", own.id),
                None,
            )
            .await;
        assert!(accept.status.is_success(), "{:?}", accept.body);
    }
    assert_eq!(
        vera.authed(Method::GET, &path, None).await.status,
        StatusCode::OK
    );
    let refused = vera
        .authed(
            Method::PUT,
            &path,
            Some(RawBody::Json(serde_json::json!({}))),
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{:?}", refused.body);
    // ... once the session ends, its own keep_ended (1.7 s) deletes it, saying why
    end_session(&server, "own-policy").await;
    eventually(LONG, "the session's own policy to delete it", || async {
        server
            .api()
            .authed(Method::GET, &format!("/api/v1/sessions/{}", own.id), None)
            .await
            .status
            == StatusCode::GONE
    })
    .await;
    let gone = server
        .api()
        .authed(Method::GET, &format!("/api/v1/sessions/{}", own.id), None)
        .await;
    assert!(
        gone.body["message"]
            .as_str()
            .is_some_and(|m| m.contains("its owner asked")),
        "{:?}",
        gone.body
    );
}
