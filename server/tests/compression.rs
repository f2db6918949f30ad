//! gzip on the wire, over real sockets on 127.0.0.1: pages of `/entries` and the SSE stream are
//! compressed for clients that send `Accept-Encoding: gzip`, decode to exactly what a client that
//! does not ask gets, and a compressed live stream still delivers each entry (and keep-alive) on
//! its own.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::io::{Read, Write};
use std::time::Duration;

use moor_server::ServerConfig;
use reqwest::header::{ACCEPT_ENCODING, CONTENT_ENCODING, VARY};
use tokio_util::sync::CancellationToken;

mod support;

use support::client::{output, Client, WAIT};
use support::{serve_on_loopback, Serving};

struct TestServer {
    client: Client,
    http: reqwest::Client,
    shutdown: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl TestServer {
    async fn spawn(tweak: impl FnOnce(&mut ServerConfig)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let server = support::build(dir.path(), "test-token", tweak).await;
        let Serving { addr, shutdown, .. } = serve_on_loopback(server).await;
        Self {
            client: Client::new(addr, "test-token"),
            http: reqwest::Client::new(),
            shutdown,
            _dir: dir,
        }
    }

    /// `GET path` with the admin token, asking for gzip or not. reqwest is built without its
    /// decompression features, so the body is what came over the wire.
    async fn get(&self, path: &str, gzip: bool) -> reqwest::Response {
        let mut req = self
            .http
            .get(format!("http://{}{path}", self.client.addr))
            .bearer_auth(&self.client.token);
        if gzip {
            req = req.header(ACCEPT_ENCODING, "gzip, deflate, br");
        }
        let resp = req.send().await.unwrap();
        assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
        resp
    }
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// A session `name` with `n` output entries of 300 characters after its `bridge.connected`.
async fn session_with(server: &TestServer, name: &str, n: u64) -> support::client::Ws {
    let mut ws = server.client.bridge(name).await.welcomed().unwrap();
    for seq in 1..=n {
        output(&mut ws, seq, 300).await.unwrap();
    }
    ws
}

/// Reads `resp` until `decode` of what arrived so far contains `needle` past its first `skip`
/// bytes; returns that decoding.
async fn read_until(
    resp: &mut reqwest::Response,
    decode: &mut impl FnMut(&[u8]) -> Vec<u8>,
    needle: &str,
    skip: usize,
) -> String {
    let found = async {
        loop {
            let chunk = resp.chunk().await.unwrap().expect("the stream went on");
            let text = String::from_utf8(decode(&chunk)).unwrap();
            if text.get(skip..).is_some_and(|t| t.contains(needle)) {
                return text;
            }
        }
    };
    tokio::time::timeout(WAIT, found)
        .await
        .unwrap_or_else(|_| panic!("{needle:?} never arrived"))
}

/// A streaming gunzip: each call gets the next bytes off the wire and returns everything
/// decoded so far.
fn streaming_gunzip() -> impl FnMut(&[u8]) -> Vec<u8> {
    let mut d = flate2::write::GzDecoder::new(Vec::new());
    move |bytes| {
        d.write_all(bytes).unwrap();
        d.flush().unwrap();
        d.get_ref().clone()
    }
}

fn plain() -> impl FnMut(&[u8]) -> Vec<u8> {
    let mut all = Vec::new();
    move |bytes| {
        all.extend_from_slice(bytes);
        all.clone()
    }
}

#[tokio::test]
async fn a_page_of_entries_is_gzipped_only_for_a_client_that_asks_and_decodes_to_the_plain_page() {
    // arrange
    let server = TestServer::spawn(|_| {}).await;
    let _ws = session_with(&server, "paged", 50).await;
    let path = "/api/v1/sessions/paged/entries?after=0&limit=1000";
    // act
    let plain = server.get(path, false).await;
    let zipped = server.get(path, true).await;
    // assert
    assert!(plain.headers().get(CONTENT_ENCODING).is_none());
    assert_eq!(zipped.headers()[CONTENT_ENCODING], "gzip");
    assert_eq!(zipped.headers()[VARY], "accept-encoding");
    let plain = plain.bytes().await.unwrap();
    let zipped = zipped.bytes().await.unwrap();
    assert!(plain.starts_with(b"{\"entries\":["));
    assert_eq!(gunzip(&zipped), plain);
    assert!(
        zipped.len() * 4 < plain.len(),
        "{} of {}",
        zipped.len(),
        plain.len()
    );
}

#[tokio::test]
async fn an_sse_catch_up_is_gzipped_only_for_a_client_that_asks_and_decodes_to_the_plain_stream() {
    // arrange: 200 entries, then bridge.connected is seq 1 and the last is 201
    let server = TestServer::spawn(|_| {}).await;
    let _ws = session_with(&server, "caught", 200).await;
    let path = "/api/v1/sessions/caught/events?after=0";
    // act
    let mut plain_resp = server.get(path, false).await;
    let mut zipped_resp = server.get(path, true).await;
    let end = "id: 201\n";
    let plain_text = read_until(&mut plain_resp, &mut plain(), end, 0).await;
    let zipped_text = read_until(&mut zipped_resp, &mut streaming_gunzip(), end, 0).await;
    // assert: the same events, byte for byte, up to the end of the last one
    assert!(plain_resp.headers().get(CONTENT_ENCODING).is_none());
    assert_eq!(zipped_resp.headers()[CONTENT_ENCODING], "gzip");
    assert!(plain_text.starts_with("retry: 1000\n\n"));
    let cut = |t: &str| {
        let at = t.find(end).unwrap();
        t[..at + t[at..].find("\n\n").unwrap() + 2].to_owned()
    };
    assert_eq!(cut(&zipped_text), cut(&plain_text));
    assert_eq!(cut(&plain_text).matches("\nid: ").count(), 201);
}

#[tokio::test]
async fn a_live_entry_and_keep_alives_arrive_through_a_gzip_sse_stream_without_further_traffic() {
    // arrange: a viewer caught up with a one-entry session, on a compressed stream
    let server = TestServer::spawn(|c| c.keepalive = Duration::from_millis(200)).await;
    let mut ws = session_with(&server, "live", 0).await;
    let mut events = server
        .get("/api/v1/sessions/live/events?after=0", true)
        .await;
    assert_eq!(events.headers()[CONTENT_ENCODING], "gzip");
    let mut decode = streaming_gunzip();
    let before = read_until(&mut events, &mut decode, "id: 1\n", 0).await;
    // act: one entry, and nothing after it
    output(&mut ws, 1, 300).await.unwrap();
    // assert: it is decodable from what has arrived, with no more traffic to push it out
    let text = read_until(&mut events, &mut decode, "id: 2\n", before.len()).await;
    let last = &text[text.find("id: 2\n").unwrap()..];
    assert!(last.contains(&"x".repeat(300)), "{last}");
    // and keep-alives still come through on the idle compressed stream after it
    read_until(&mut events, &mut decode, ": keep-alive\n\n", text.len()).await;
}

#[tokio::test]
async fn an_sse_stream_that_ends_ends_its_gzip_member_whole() {
    // arrange: streams end after a short lifetime
    let server = TestServer::spawn(|c| c.sse_lifetime = Duration::from_millis(300)).await;
    let _ws = session_with(&server, "ending", 3).await;
    let events = server
        .get("/api/v1/sessions/ending/events?after=0", true)
        .await;
    // act: read it to its end
    let body = tokio::time::timeout(WAIT, events.bytes())
        .await
        .unwrap()
        .unwrap();
    // assert: a complete gzip member (trailer checked by the decoder) holding every entry
    let text = String::from_utf8(gunzip(&body)).unwrap();
    assert!(text.starts_with("retry: 1000\n\n"), "{text}");
    assert!(text.contains("id: 4\n"), "{text}");
}
