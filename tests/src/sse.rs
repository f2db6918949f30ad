//! `SseClient`: a following SSE viewer that records everything it receives.
//!
//! It parses `id:`/`event:`/`data:` fields and comments, and when a stream ends or fails it
//! reconnects with `Last-Event-ID` (the last seq it got), like a browser's `EventSource`. A
//! `reset` event is recorded and ends the client, since the cursor cannot be honoured. Entries are
//! recorded as received, duplicates included, so tests can assert there are none.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use moor_protocol::web::{Reset, RESET_EVENT};
use moor_protocol::{Entry, SessionId};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Pause between a stream's end and the reconnect (pacing, like `EventSource`'s retry).
pub const RECONNECT_DELAY: Duration = Duration::from_millis(50);

/// What a viewer received so far.
#[derive(Debug, Clone, Default)]
pub struct ViewerState {
    /// Every entry received, in arrival order, duplicates included.
    pub entries: Vec<Entry>,
    /// Every reset received.
    pub resets: Vec<Reset>,
    /// Streams opened successfully (HTTP 200 / WebSocket upgraded).
    pub connections: u64,
    /// Keep-alive comments (SSE) or heartbeats (WebSocket) received.
    pub keepalives: u64,
    /// Failed connects, HTTP errors and stream errors, in plain words.
    pub errors: Vec<String>,
    /// Times a stream ended without an error (server closed it, e.g. lifetime cap).
    pub clean_ends: u64,
    /// The client stopped for good (after a reset, a 4xx answer, or `stop`).
    pub finished: bool,
}

impl ViewerState {
    /// Seq of the last entry received (0 if none).
    pub fn last_seq(&self) -> u64 {
        self.entries.last().map_or(0, |e| e.seq.0)
    }
}

/// Shared state plus a change notification; the waiting side of every viewer client.
#[derive(Debug, Clone)]
pub struct Recorder {
    state: Arc<Mutex<ViewerState>>,
    changed: Arc<watch::Sender<u64>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            changed: Arc::new(watch::channel(0).0),
        }
    }
}

impl Recorder {
    /// Changes the state and wakes waiters.
    pub fn update(&self, f: impl FnOnce(&mut ViewerState)) {
        f(&mut self.state.lock().expect("viewer state lock"));
        self.changed.send_modify(|v| *v += 1);
    }

    /// A copy of the state.
    pub fn snapshot(&self) -> ViewerState {
        self.state.lock().expect("viewer state lock").clone()
    }

    /// Runs `f` on the current state.
    pub fn with<T>(&self, f: impl FnOnce(&ViewerState) -> T) -> T {
        f(&self.state.lock().expect("viewer state lock"))
    }

    /// Waits until `pred` holds (re-checked on every change); panics after `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        what: &str,
        mut pred: impl FnMut(&ViewerState) -> bool,
    ) {
        let mut rx = self.changed.subscribe();
        let waited = tokio::time::timeout(timeout, async {
            loop {
                if self.with(&mut pred) {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        if waited.is_err() {
            let s = self.snapshot();
            panic!(
                "timed out after {timeout:?} waiting for viewer: {what}; it has {} entries (last seq {}), {} connections, {} resets, errors (last 5): {:?}",
                s.entries.len(),
                s.last_seq(),
                s.connections,
                s.resets.len(),
                &s.errors[s.errors.len().saturating_sub(5)..]
            );
        }
    }
}

/// Options of an [`SseClient`].
#[derive(Debug, Clone)]
pub struct SseOpts {
    /// `?after=N` on the first connect.
    pub after: Option<u64>,
    /// `Last-Event-ID` on the first connect.
    pub last_event_id: Option<String>,
    /// Send the token as `?access_token=` instead of an `Authorization` header.
    pub token_in_query: bool,
    /// Reconnect when a stream ends or fails.
    pub follow: bool,
    /// Treat a stream silent for this long (not even a keep-alive) as dead and reconnect.
    pub idle_timeout: Option<Duration>,
}

impl Default for SseOpts {
    fn default() -> Self {
        Self {
            after: None,
            last_event_id: None,
            token_in_query: false,
            follow: true,
            idle_timeout: None,
        }
    }
}

/// A following SSE viewer of one session.
#[derive(Debug)]
pub struct SseClient {
    rec: Recorder,
    stop: CancellationToken,
}

impl SseClient {
    /// Starts following `GET {base}/api/v1/sessions/{session}/events`.
    pub fn connect(base: &str, token: &str, session: SessionId, opts: SseOpts) -> Self {
        let rec = Recorder::default();
        let stop = CancellationToken::new();
        let url = format!("{base}/api/v1/sessions/{session}/events");
        tokio::spawn(run(url, token.to_owned(), opts, rec.clone(), stop.clone()));
        Self { rec, stop }
    }

    /// The recorded state.
    pub fn recorder(&self) -> &Recorder {
        &self.rec
    }

    /// A copy of what was received.
    pub fn snapshot(&self) -> ViewerState {
        self.rec.snapshot()
    }

    /// Waits until `pred` holds; panics after `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        what: &str,
        pred: impl FnMut(&ViewerState) -> bool,
    ) {
        self.rec.wait_for(timeout, what, pred).await
    }

    /// Waits until the last entry received has seq `head`.
    pub async fn wait_seq(&self, head: u64, timeout: Duration) {
        self.wait_for(timeout, &format!("seq {head}"), |s| s.last_seq() >= head)
            .await
    }

    /// Stops the client.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

impl Drop for SseClient {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A loopback connection with a tiny receive buffer that asks for `session`'s events from the
/// start and never reads (a stalled viewer).
pub async fn stalled_reader(
    addr: std::net::SocketAddr,
    token: &str,
    session: &str,
) -> std::io::Result<tokio::net::TcpStream> {
    use tokio::io::AsyncWriteExt;
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(4096)?;
    let mut stream = socket.connect(addr).await?;
    let request = format!(
        "GET /api/v1/sessions/{session}/events?after=0 HTTP/1.1\r\nHost: moor\r\n\
         Authorization: Bearer {token}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    Ok(stream)
}

async fn run(url: String, token: String, opts: SseOpts, rec: Recorder, stop: CancellationToken) {
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .pool_max_idle_per_host(0)
        .build()
        .expect("reqwest client builds");
    let mut first = true;
    loop {
        let mut req = http
            .get(&url)
            .header(reqwest::header::ACCEPT, "text/event-stream");
        let mut query: Vec<(&str, String)> = Vec::new();
        if opts.token_in_query {
            query.push(("access_token", token.clone()));
        } else {
            req = req.bearer_auth(&token);
        }
        let last = rec.with(ViewerState::last_seq);
        if last > 0 {
            req = req.header("Last-Event-ID", last.to_string());
        } else if first {
            if let Some(after) = opts.after {
                query.push(("after", after.to_string()));
            }
            if let Some(id) = &opts.last_event_id {
                req = req.header("Last-Event-ID", id.clone());
            }
        } else if let Some(after) = opts.after {
            query.push(("after", after.to_string()));
        }
        first = false;
        if !query.is_empty() {
            req = req.query(&query);
        }

        let outcome = tokio::select! {
            _ = stop.cancelled() => break,
            o = one_stream(req, &opts, &rec) => o,
        };
        match outcome {
            Outcome::Stop => break,
            Outcome::Again if opts.follow => {}
            Outcome::Again => break,
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(RECONNECT_DELAY) => {}
        }
    }
    rec.update(|s| s.finished = true);
}

/// `e` and every error under it ("error sending request: … : Connection refused"), since the
/// outermost alone does not say what failed.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

enum Outcome {
    /// Reconnect (if following).
    Again,
    /// Do not reconnect.
    Stop,
}

async fn one_stream(req: reqwest::RequestBuilder, opts: &SseOpts, rec: &Recorder) -> Outcome {
    // A response that does not start within the idle timeout is as dead as a silent stream
    // (a request sent into a half-open link never gets one).
    let sent = match opts.idle_timeout {
        Some(t) => match tokio::time::timeout(t, req.send()).await {
            Ok(r) => r,
            Err(_) => {
                rec.update(|s| s.errors.push(format!("no response within {t:?}")));
                return Outcome::Again;
            }
        },
        None => req.send().await,
    };
    let resp = match sent {
        Ok(r) => r,
        Err(e) => {
            rec.update(|s| s.errors.push(format!("connect: {}", with_causes(&e))));
            return Outcome::Again;
        }
    };
    let status = resp.status();
    if !status.is_success() {
        // The error's body is bounded in time too: through a link that went half-open after
        // the status line, it would never end.
        let wait = opts.idle_timeout.unwrap_or(Duration::from_secs(10));
        let body = match tokio::time::timeout(wait, resp.text()).await {
            Ok(text) => text.unwrap_or_default(),
            Err(_) => format!("(no body within {wait:?})"),
        };
        rec.update(|s| s.errors.push(format!("http {status}: {body}")));
        // A 4xx will not get better by retrying (except rate limiting).
        return if status.is_client_error() && status.as_u16() != 429 {
            Outcome::Stop
        } else {
            Outcome::Again
        };
    }
    rec.update(|s| s.connections += 1);
    let mut body = resp.bytes_stream();
    let mut parser = SseParser::default();
    loop {
        let next = match opts.idle_timeout {
            Some(t) => match tokio::time::timeout(t, body.next()).await {
                Ok(n) => n,
                Err(_) => {
                    rec.update(|s| s.errors.push(format!("stream silent for {t:?}")));
                    return Outcome::Again;
                }
            },
            None => body.next().await,
        };
        let chunk = match next {
            None => {
                rec.update(|s| s.clean_ends += 1);
                return Outcome::Again;
            }
            Some(Err(e)) => {
                rec.update(|s| s.errors.push(format!("stream: {e}")));
                return Outcome::Again;
            }
            Some(Ok(c)) => c,
        };
        for item in parser.feed(&chunk) {
            match item {
                SseItem::Comment(_) => rec.update(|s| s.keepalives += 1),
                SseItem::Event { event, data, .. } if event.as_deref() == Some(RESET_EVENT) => {
                    match serde_json::from_str::<Reset>(&data) {
                        Ok(r) => rec.update(|s| s.resets.push(r)),
                        Err(e) => {
                            rec.update(|s| s.errors.push(format!("bad reset data {data:?}: {e}")))
                        }
                    }
                    return Outcome::Stop;
                }
                SseItem::Event { id, event, data } => match serde_json::from_str::<Entry>(&data) {
                    Ok(entry) => {
                        let mut problems = Vec::new();
                        if id.as_deref() != Some(entry.seq.0.to_string().as_str()) {
                            problems.push(format!(
                                "event id {id:?} differs from entry seq {}",
                                entry.seq
                            ));
                        }
                        if event.as_deref() != Some(entry.kind.as_str()) {
                            problems.push(format!(
                                "event name {event:?} differs from entry kind {}",
                                entry.kind
                            ));
                        }
                        rec.update(|s| {
                            s.errors.extend(problems);
                            s.entries.push(entry);
                        });
                    }
                    Err(e) => {
                        rec.update(|s| s.errors.push(format!("bad entry data {data:?}: {e}")))
                    }
                },
            }
        }
    }
}

/// One parsed SSE item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseItem {
    /// A `:` comment line (keep-alive).
    Comment(String),
    /// A dispatched event.
    Event {
        /// `id:` field.
        id: Option<String>,
        /// `event:` field.
        event: Option<String>,
        /// `data:` lines joined with `\n`.
        data: String,
    },
}

/// Incremental SSE parser (per the WHATWG event-stream format).
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    id: Option<String>,
    event: Option<String>,
    data: Option<String>,
}

impl SseParser {
    /// Feeds bytes; returns the items completed by them.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseItem> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
            let mut line: Vec<u8> = self.buf.drain(..=pos).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8_lossy(&line).into_owned();
            if line.is_empty() {
                if let Some(data) = self.data.take() {
                    out.push(SseItem::Event {
                        id: self.id.take(),
                        event: self.event.take(),
                        data,
                    });
                }
                self.id = None;
                self.event = None;
                continue;
            }
            if let Some(comment) = line.strip_prefix(':') {
                out.push(SseItem::Comment(comment.trim().to_owned()));
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line.as_str(), ""),
            };
            match field {
                "id" => self.id = Some(value.to_owned()),
                "event" => self.event = Some(value.to_owned()),
                "data" => match &mut self.data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(value);
                    }
                    None => self.data = Some(value.to_owned()),
                },
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_splits_events_comments_and_multiline_data() {
        let mut p = SseParser::default();
        let mut items = p.feed(b": keep-alive\n\nid: 3\nevent: agent.out");
        items.extend(p.feed(b"put\ndata: {\"a\":\r\ndata: 1}\n\n"));
        assert_eq!(
            items,
            vec![
                SseItem::Comment("keep-alive".into()),
                SseItem::Event {
                    id: Some("3".into()),
                    event: Some("agent.output".into()),
                    data: "{\"a\":\n1}".into()
                },
            ]
        );
    }
}
