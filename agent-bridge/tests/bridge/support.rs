//! A scriptable stand-in for `moord`'s bridge endpoint, faithful to `protocol/src/bridge.rs`:
//! cumulative acks after "commit", dedupe of replayed producer seqs, 4005 on a gap, 4004 after
//! `End`. The real server is exercised by the workspace's e2e suite; this one lets the bridge's
//! own tests inject faults (drops, 401s, silence, `Move`, terminal closes) precisely.
//!
//! It listens on TCP, and [`FakeServer::dial`] also connects a link to it over in-memory pipes:
//! then nothing leaves the runtime, so timing tests run on tokio's paused clock and read the
//! [`Seen::log`] timeline in virtual time.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use moor_bridge::link::{Dial, DialFuture, Io};
use moor_protocol::bridge::{BridgeToServer, Hello, ReceiptStatus, ServerToBridge, Welcome};
use moor_protocol::{close, Entry, NewEntry, Seq, SessionId};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// What the fake server does, per accepted connection number (1-based, counting only upgrades
/// that were not refused).
#[derive(Debug, Clone, Default)]
pub struct Script {
    /// Leave this many connections unanswered first: no upgrade response, nothing at all.
    pub unanswered_first: u32,
    /// Refuse this many upgrades with HTTP 401 first (after the unanswered ones).
    pub reject_first: u32,
    /// Drop the TCP connection (no close frame, no ack) once a connection got this many entries.
    pub drop_after_entries: Option<u64>,
    /// On these connection numbers, say nothing after `Welcome` (a half-open link).
    pub silent_on: Vec<u32>,
    /// On these connection numbers, take entries but never commit or ack them.
    pub no_ack_on: Vec<u32>,
    /// On these connection numbers, send `Move` right after `Welcome`.
    pub move_on: Vec<u32>,
    /// On these connection numbers, serve for this many ms after `Welcome`, then close with
    /// 4009 (lifetime).
    pub close_after_ms: Vec<(u32, u64)>,
    /// Close the first connection with this code right after `Welcome`.
    pub close_first_with: Option<u16>,
    /// Answer the first `End` by closing with this code, without ending the session (an
    /// operator's close that reached the connection before the `End` was read).
    pub close_first_end_with: Option<u16>,
    /// Inputs to offer in `Welcome.pending_inputs` (those above `last_applied_input`).
    pub inputs: Vec<Entry>,
    /// Welcome timings.
    pub heartbeat_ms: u64,
    pub idle_ms: u64,
}

/// Everything the fake server saw and stored.
#[derive(Debug, Default)]
pub struct Seen {
    pub entries: Vec<NewEntry>,
    pub upgrades: u32,
    pub accepted: u32,
    pub hellos: Vec<Hello>,
    pub auth: Vec<String>,
    pub receipts: Vec<(Seq, ReceiptStatus)>,
    pub ended: bool,
    /// `End` frames received.
    pub ends: u32,
    pub gaps: u32,
    /// Entries received on `no_ack_on` connections (never committed).
    pub uncommitted: Vec<NewEntry>,
    /// What happened when, on tokio's clock (virtual under paused time).
    pub log: Vec<(Instant, Event)>,
}

/// A point on the fake server's timeline; numbers are upgrade numbers (1-based, refused ones
/// included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A WebSocket upgrade request arrived.
    Upgrade(u32),
    /// The connection got its `Welcome`.
    Welcomed(u32),
    /// A heartbeat arrived from the bridge.
    Heartbeat(u32),
    /// The bridge's side of the connection went away (or the server closed it).
    Gone(u32),
}

impl Seen {
    pub fn mark(&self) -> u64 {
        self.entries.len() as u64
    }

    /// When `event` happened (the first time).
    pub fn at(&self, event: Event) -> Instant {
        self.log
            .iter()
            .find(|(_, e)| *e == event)
            .unwrap_or_else(|| panic!("{event:?} never happened: {:#?}", self.log))
            .0
    }

    /// The times of every event `pick` selects, in order.
    pub fn times(&self, pick: impl Fn(&Event) -> bool) -> Vec<Instant> {
        self.log
            .iter()
            .filter(|(_, e)| pick(e))
            .map(|(t, _)| *t)
            .collect()
    }

    pub fn texts(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter(|e| e.kind == "agent.output")
            .map(|e| e.payload["text"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

#[derive(Debug)]
pub struct FakeServer {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Seen>>,
    changed: watch::Receiver<u64>,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Debug)]
struct Shared {
    script: Script,
    seen: Arc<Mutex<Seen>>,
    changed: watch::Sender<u64>,
    session_id: SessionId,
}

impl Shared {
    fn update<T>(&self, f: impl FnOnce(&mut Seen) -> T) -> T {
        let out = f(&mut self.seen.lock().unwrap());
        self.changed.send_modify(|v| *v += 1);
        out
    }
}

impl FakeServer {
    pub async fn start(script: Script) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (tx, changed) = watch::channel(0);
        let shared = Arc::new(Shared {
            script,
            seen: seen.clone(),
            changed: tx,
            session_id: SessionId::new(),
        });
        let accepting = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(connection(stream, accepting.clone()));
            }
        });
        Self {
            addr,
            seen,
            changed,
            shared,
            task,
        }
    }

    /// Connects to this server over in-memory pipes instead of TCP (whatever the URL says).
    pub fn dial(&self) -> Arc<dyn Dial> {
        Arc::new(MemoryDial(self.shared.clone()))
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Wait (at most 60 s, a failure guard; virtual seconds on paused time) until `cond` holds.
    pub async fn wait_until(&self, what: &str, cond: impl Fn(&Seen) -> bool) {
        let mut changed = self.changed.clone();
        let wait = async {
            loop {
                if cond(&self.seen.lock().unwrap()) {
                    return;
                }
                changed.changed().await.unwrap();
            }
        };
        if tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .is_err()
        {
            panic!(
                "timed out waiting for {what}: {:#?}",
                self.seen.lock().unwrap()
            );
        }
    }
}

#[derive(Debug)]
struct MemoryDial(Arc<Shared>);

impl Dial for MemoryDial {
    fn dial<'a>(&'a self, _host: &'a str, _port: u16) -> DialFuture<'a> {
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        tokio::spawn(connection(theirs, self.0.clone()));
        Box::pin(async move { Ok(Box::new(ours) as Box<dyn Io>) })
    }
}

async fn connection<S: AsyncRead + AsyncWrite + Unpin>(stream: S, shared: Arc<Shared>) {
    let upgrade = shared.update(|s| {
        s.upgrades += 1;
        s.log.push((Instant::now(), Event::Upgrade(s.upgrades)));
        s.upgrades
    });
    serve(stream, upgrade, &shared).await;
    shared.update(|s| s.log.push((Instant::now(), Event::Gone(upgrade))));
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(stream: S, upgrade: u32, shared: &Shared) {
    let unanswered = shared.script.unanswered_first;
    if upgrade <= unanswered {
        // Hold the connection and say nothing until the bridge gives up on it.
        let mut stream = stream;
        let _ = tokio::io::copy(&mut stream, &mut tokio::io::sink()).await;
        return;
    }
    let reject = upgrade <= unanswered + shared.script.reject_first;
    let auth = Arc::new(Mutex::new(String::new()));
    let auth_seen = auth.clone();
    // The signature is tungstenite's; the large error type is not ours to shrink.
    #[allow(clippy::result_large_err)]
    let callback = move |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        if let Some(value) = req.headers().get("authorization") {
            *auth_seen.lock().unwrap() = value.to_str().unwrap_or_default().to_owned();
        }
        if reject {
            let mut refused = ErrorResponse::new(Some("bad token".into()));
            *refused.status_mut() = StatusCode::UNAUTHORIZED;
            return Err(refused);
        }
        Ok(resp)
    };
    let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(stream, callback).await else {
        return;
    };
    let auth = auth.lock().unwrap().clone();
    let n = shared.update(|s| {
        s.accepted += 1;
        s.auth.push(auth);
        s.accepted
    });
    let Some(Ok(Message::Text(text))) = ws.next().await else {
        return;
    };
    let Ok(BridgeToServer::Hello(hello)) = serde_json::from_str(text.as_str()) else {
        return;
    };
    let script = &shared.script;
    let pending: Vec<Entry> = script
        .inputs
        .iter()
        .filter(|e| e.seq > hello.last_applied_input)
        .cloned()
        .collect();
    let mark = shared.update(|s| {
        s.hellos.push(hello);
        s.mark()
    });
    let welcome = ServerToBridge::Welcome(Welcome {
        version: moor_protocol::PROTOCOL_VERSION,
        session_id: shared.session_id,
        session_name: "fake".into(),
        producer_mark: mark,
        pending_inputs: pending,
        heartbeat_interval_ms: if script.heartbeat_ms == 0 {
            1000
        } else {
            script.heartbeat_ms
        },
        idle_timeout_ms: if script.idle_ms == 0 {
            5000
        } else {
            script.idle_ms
        },
        max_lifetime_ms: 0,
        max_frame_bytes: 0,
        web_url: "http://fake/s/fake".into(),
    });
    send(&mut ws, &welcome).await;
    shared.update(|s| s.log.push((Instant::now(), Event::Welcomed(upgrade))));
    if script.silent_on.contains(&n) {
        // Hold the socket open and say nothing, like a half-open connection.
        tokio::time::sleep(Duration::from_secs(60)).await;
        return;
    }
    if script.move_on.contains(&n) {
        send(
            &mut ws,
            &ServerToBridge::Move {
                reason: "lifetime".into(),
                close_in_ms: 5000,
            },
        )
        .await;
    }
    if n == 1 {
        if let Some(code) = script.close_first_with {
            close_with(&mut ws, code, "scripted").await;
            return;
        }
    }
    let mut received = 0u64;
    let lifetime = script
        .close_after_ms
        .iter()
        .find(|(on, _)| *on == n)
        .map(|(_, ms)| Duration::from_millis(*ms));
    let closing = async {
        match lifetime {
            Some(lifetime) => tokio::time::sleep(lifetime).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(closing);
    loop {
        let msg = tokio::select! {
            msg = ws.next() => msg,
            () = &mut closing => {
                close_with(&mut ws, close::LIFETIME, "lifetime").await;
                return;
            }
        };
        let Some(Ok(msg)) = msg else { break };
        let Message::Text(text) = msg else { continue };
        match serde_json::from_str::<BridgeToServer>(text.as_str()) {
            Ok(BridgeToServer::Entries { entries }) => {
                received += entries.len() as u64;
                if script.no_ack_on.contains(&n) {
                    shared.update(|s| s.uncommitted.extend(entries));
                    continue;
                }
                if script
                    .drop_after_entries
                    .is_some_and(|limit| received >= limit)
                {
                    return; // abrupt drop: no ack, no close frame
                }
                if let Err(code) = shared.update(|s| commit(s, entries)) {
                    close_with(&mut ws, code, "").await;
                    return;
                }
                let mark = shared.seen.lock().unwrap().mark();
                send(&mut ws, &ServerToBridge::Ack { producer_seq: mark }).await;
            }
            Ok(BridgeToServer::Receipt { input_seq, status }) => {
                shared.update(|s| s.receipts.push((input_seq, status)))
            }
            Ok(BridgeToServer::Heartbeat { .. }) => {
                shared.update(|s| s.log.push((Instant::now(), Event::Heartbeat(upgrade))));
                send(&mut ws, &ServerToBridge::Heartbeat).await
            }
            Ok(BridgeToServer::End) => {
                let refused = shared.update(|s| {
                    s.ends += 1;
                    s.ends == 1 && script.close_first_end_with.is_some()
                });
                if let (true, Some(code)) = (refused, script.close_first_end_with) {
                    close_with(&mut ws, code, "closed before the end was read").await;
                    return;
                }
                shared.update(|s| s.ended = true);
                close_with(&mut ws, close::SESSION_ENDED, "ended").await;
                return;
            }
            Ok(BridgeToServer::Hello(_)) | Err(_) => return,
        }
    }
}

/// Store contiguous entries once; replays must match; a gap is refused with 4005.
fn commit(seen: &mut Seen, entries: Vec<NewEntry>) -> Result<(), u16> {
    for entry in entries {
        let mark = seen.mark();
        if entry.producer_seq <= mark {
            if seen.entries[entry.producer_seq as usize - 1] != entry {
                return Err(close::CONTENT_MISMATCH);
            }
        } else if entry.producer_seq == mark + 1 {
            seen.entries.push(entry);
        } else {
            seen.gaps += 1;
            return Err(close::PRODUCER_GAP);
        }
    }
    Ok(())
}

async fn send<S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
    frame: &ServerToBridge,
) {
    let _ = ws
        .send(Message::text(serde_json::to_string(frame).unwrap()))
        .await;
}

/// Close the connection with `code`; a bridge already gone is fine.
async fn close_with<S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
    code: u16,
    reason: &str,
) {
    let frame = CloseFrame {
        code: CloseCode::from(code),
        reason: reason.into(),
    };
    let _ = ws.close(Some(frame)).await;
}
