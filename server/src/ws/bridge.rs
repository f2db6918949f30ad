//! `GET /api/v1/bridge`: one bridge connection's lifetime.
//!
//! Handshake (`Hello` → `Welcome` with the producer mark and pending inputs), then one loop over:
//! entry batches (committed, then acked), receipts, heartbeats both ways, an idle watchdog, the
//! lifetime cap (`Move`, then close), control requests from the hub (superseded, operator close)
//! and shutdown. Every way out records a `bridge.disconnected` entry.
//!
//! A transport: calls the session core, `access`, `hub` and `store`; never `http` or `sse`.

use std::collections::VecDeque;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use futures_util::{FutureExt, Sink, SinkExt, Stream, StreamExt};
use moor_protocol::bridge::{
    BridgeToServer, Hello, Incoming, ReceiptStatus, ServerToBridge, Welcome,
};
use moor_protocol::error::ErrorCode;
use moor_protocol::host::HOST_ADAPTER;
use moor_protocol::payload::{
    BridgeConnected, InputApplied, InputDelivered, InputFailed, InputUncertain,
    SessionContinuedFrom, SessionContinuedIn, SessionLink,
};
use moor_protocol::{close, kinds, EntryBody, NewEntry, Seq, SessionId, PROTOCOL_VERSION};
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio::time::{interval, Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::{halves, text, Rx, Tx};
use crate::access::{role_on, AuthUser, Principal, Role};
use crate::error::ApiError;
use crate::hub::{input_feed, BridgeControl, InputFeed};
use crate::quota::{Live, QuotaError};
use crate::session::leases::{disconnected, HeldLease, LeaseLost};
use crate::session::log::Pending;
use crate::state::AppState;
use crate::store::{Append, Appended, IdemKey, Payload, SessionRow, StoreError, StoreResult};
use crate::util::sleep_until_opt;

/// Most entries merged from consecutive ready frames into one append.
const MAX_MERGED_ENTRIES: usize = 4096;
/// Batches committing at once for one connection; beyond this the socket is not read, which
/// pushes back on the bridge through TCP.
const MAX_INFLIGHT_BATCHES: usize = 8;
/// Close reason for a bridge attaching to a session it does not own (or cannot see).
const NOT_YOURS: &str = "session not found or not yours; pick another session name";
/// Most pending inputs sent in a `Welcome`; later ones follow as `Input` frames.
const WELCOME_INPUTS: u32 = 1000;
/// Largest agent description (`hello.agent` as JSON) a session stores.
pub const MAX_AGENT_BYTES: usize = 16 * 1024;

/// Upgrades an authenticated request to a bridge link.
#[utoipa::path(
    get, path = "/bridge", operation_id = "openBridgeSocket", tag = "streams",
    params(
        ("access_token" = Option<String>, Query, description = "The access token, for clients that cannot set headers (see the `access_token` security scheme)"),
    ),
    responses(
        (status = 101, description = "The bridge link: `BridgeToServer` frames in, `ServerToBridge` frames out (JSON text), starting with `Hello` and `Welcome`"),
        (status = 400, description = "Not a WebSocket upgrade request", content((String = "text/plain"))),
        crate::openapi::Unauthorized,
        (status = 403, description = "A cross-origin WebSocket (an `Origin` not allowed)", content((String = "text/plain"))),
    )
)]
pub async fn upgrade(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    ws: WebSocketUpgrade,
) -> Response {
    let Some(slot) = state.streams.open(&who.name, who.admin) else {
        return crate::error::ApiError::RateLimited(1).into_response();
    };
    let conns = state.conns.clone();
    super::tune(ws, &state.config).on_upgrade(move |socket| {
        conns.track_future(async move {
            let _slot = slot;
            run(socket, state, who).await
        })
    })
}

/// Whether `who` owns `session` (administrators own every session).
async fn owns(state: &AppState, who: &Principal, session: SessionId) -> anyhow::Result<bool> {
    let row = match state.store.log.find_session(&session.to_string()).await {
        Ok(row) => row,
        Err(StoreError::NotFound) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let role = role_on(&state.store, who, &row).await?;
    Ok(matches!(role, Some(Role::Owner)))
}

/// The ended session a new session continues, when `hello` names one that `who` owns and
/// `session` has nothing in its log yet (its first handshake).
async fn continues(
    state: &AppState,
    who: &Principal,
    hello: &Hello,
    session: &crate::store::SessionRow,
) -> Option<SessionLink> {
    let from = hello.continues.filter(|from| *from != session.id)?;
    if session.head_seq != Seq::ZERO || !owns(state, who, from).await.unwrap_or(false) {
        return None;
    }
    let row = state.store.log.find_session(&from.to_string()).await.ok()?;
    Some(SessionLink {
        session: row.id,
        name: row.name,
    })
}

/// Whether `who`, whose handshake just created `session`, may attach to it: the first
/// principal to claim the new session owns it (two handshakes creating one name race for it).
/// A session that existed before the handshake is never claimed, whoever left it: only its
/// owners (and administrators) attach to it.
async fn claims(state: &AppState, who: &Principal, session: SessionId) -> anyhow::Result<bool> {
    match state.store.access.claim_session(session, &who.name).await {
        Ok(true) => Ok(true),
        Ok(false) => owns(state, who, session).await,
        Err(e) => Err(e.into()),
    }
}

/// Closes a handshake whose store call (`what`) failed: retryable, never terminal (a database
/// blip must not stop a bridge for good); a full disk says so ([`close::STORAGE_FULL`]).
async fn store_unavailable(tx: &mut Tx, rx: &mut Rx, what: &str, e: anyhow::Error) {
    let ending = store_failed(what, e);
    super::close(
        tx,
        rx,
        ending.code.unwrap_or(close::SERVER_ERROR),
        &ending.reason,
    )
    .await
}

/// The ending for a store call (`what`) that failed: a full disk is [`storage_full`] (warned
/// once per episode elsewhere); anything else is logged and retried as a server error.
fn store_failed(what: &str, e: anyhow::Error) -> Ending {
    // The session ended while this handshake ran (its check of the session came first).
    if matches!(
        e.downcast_ref::<StoreError>(),
        Some(StoreError::SessionEnded)
    ) {
        return Ending::close(close::SESSION_ENDED, "session has ended");
    }
    let full = match e.downcast_ref::<StoreError>() {
        Some(s) => matches!(s, StoreError::Full(_)),
        None => matches!(e.downcast_ref::<ApiError>(), Some(ApiError::StorageFull(_))),
    };
    if full {
        return storage_full();
    }
    tracing::error!(error = ?e, "bridge handshake could not {what}");
    Ending::close(close::SERVER_ERROR, "store unavailable; retry")
}

/// Closes a handshake refused by a quota: an `error` frame with the whole message, then
/// [`close::QUOTA_EXCEEDED`] (a store failure is [`close::SERVER_ERROR`], retried).
async fn refuse_quota(tx: &mut Tx, rx: &mut Rx, e: QuotaError) {
    let (code, msg) = match e {
        QuotaError::Exceeded(msg) => (close::QUOTA_EXCEEDED, msg),
        QuotaError::Store(e) => {
            tracing::error!(error = ?e, "bridge handshake could not read the account's usage");
            (close::SERVER_ERROR, "store unavailable; retry".to_owned())
        }
    };
    if code == close::QUOTA_EXCEEDED {
        let error = ServerToBridge::Error {
            code: ErrorCode::Forbidden,
            message: msg.clone(),
        };
        let _ = tx.send(text(&error)).await;
    }
    super::close(tx, rx, code, &msg).await
}

/// Why a connection ended: the close code sent (if any) and a reason for the log.
struct Ending {
    code: Option<u16>,
    reason: String,
}

impl Ending {
    fn close(code: u16, reason: impl Into<String>) -> Self {
        Self {
            code: Some(code),
            reason: reason.into(),
        }
    }
    fn lost(reason: impl Into<String>) -> Self {
        Self {
            code: None,
            reason: reason.into(),
        }
    }
}

/// A batch handed to the committer whose outcome is not known yet.
struct InFlight {
    commit: Pending,
    producer_seqs: Vec<u64>,
    /// Size of the frames the batch came in.
    bytes: usize,
}

/// Whether another frame may be read: fewer than [`MAX_INFLIGHT_BATCHES`] batches, holding less
/// than twice the frame limit, are committing.
fn may_read(inflight: &VecDeque<InFlight>, max_frame_bytes: usize) -> bool {
    let bytes: usize = inflight.iter().map(|f| f.bytes).sum();
    inflight.len() < MAX_INFLIGHT_BATCHES && bytes < max_frame_bytes.saturating_mul(2)
}

struct Conn {
    /// Batches submitted in order and not yet acked; acks go out in the same order.
    inflight: VecDeque<InFlight>,
    state: AppState,
    session: SessionId,
    /// This connection's id in the hub.
    conn_id: u64,
    hello: Hello,
    tx: Tx,
    /// Highest input seq sent to this bridge.
    delivered: Seq,
    /// Seq of this connection's `bridge.connected`, once written: names its lease.
    connected: Option<Seq>,
    /// This connection's lease, renewed by the node while it is held.
    lease: Option<HeldLease>,
    /// The ended session this new one continues, linked both ways at the welcome.
    continued_from: Option<SessionLink>,
    /// Inputs after `delivered` may be in the store but not in the feed (the welcome's page was
    /// full, or a re-read failed): the next feed item re-reads them from the store.
    behind: bool,
    /// Cancelled at shutdown and when the bridge's credential is revoked.
    stop: CancellationToken,
    /// Cancelled when the bridge's principal stops owning the session.
    role_stop: CancellationToken,
    /// The session's state follower runs while this is held.
    _watching: tokio::sync::watch::Receiver<std::sync::Arc<moor_protocol::state::SessionState>>,
    /// The session counts as live for its owner's quotas while this is held; appends are
    /// charged to it.
    live: Live,
}

async fn run(socket: WebSocket, state: AppState, who: Principal) {
    let (tx, rx) = socket.split();
    serve(tx, rx, state, who).await
}

/// One bridge connection over any pair of socket halves (a WebSocket's, or in-memory channels
/// in tests): handshake, the connection loop, and the disconnect record.
#[tracing::instrument(skip_all)]
pub(crate) async fn serve<W, R>(tx: W, rx: R, state: AppState, who: Principal)
where
    W: Sink<Message, Error = axum::Error> + Send + 'static,
    R: Stream<Item = Result<Message, axum::Error>> + Send + 'static,
{
    let (tx, rx) = halves(tx, rx);
    // The handshake and the checks before the loop are boxed: one-off steps whose futures the
    // connection's task would otherwise carry inline for its whole life.
    let Some(Opened {
        mut conn,
        mut rx,
        session,
        inputs,
        control_rx,
        _open,
    }) = Box::pin(open(tx, rx, &state, who)).await
    else {
        return;
    };
    let conn_id = conn.conn_id;
    // So are the welcome and the steps after the loop.
    let ending = match Box::pin(conn.start(&session.name, conn_id)).await {
        Ok(()) => conn.serve(&mut rx, inputs, control_rx).await,
        Err(end) => end,
    };
    // Record the disconnect before closing, so whoever sees the close can also see it logged;
    // keyed on the connection's `bridge.connected`, so a sweep that found its lease expired
    // (or a newer connection that took over) and recorded the end first is not repeated. The
    // lease goes once the end is recorded (a crash in between leaves it to a sweep), and this
    // node shows the bridge offline only then, when inputs already say they are queued.
    let entry = disconnected(conn_id, conn.connected, &ending.reason, ending.code);
    match Box::pin(state.log.append(session.id, vec![entry])).await {
        Ok(_) | Err(StoreError::SessionEnded) => {}
        Err(e) => tracing::warn!(error = ?e, "could not record bridge disconnect"),
    }
    if let Some(connected) = conn.connected {
        Box::pin(state.leases.release(session.id, connected)).await;
    }
    state
        .hub
        .detach_bridge(session.id, conn_id, ending.code, &ending.reason);
    if let Some(code) = ending.code {
        super::close(&mut conn.tx, &mut rx, code, &ending.reason).await;
    }
}

/// What [`open`] hands the connection loop.
struct Opened {
    conn: Conn,
    rx: Rx,
    session: SessionRow,
    inputs: mpsc::Receiver<InputFeed>,
    control_rx: mpsc::UnboundedReceiver<BridgeControl>,
    /// Counts the connection while it lives.
    _open: crate::metrics::Open,
}

/// The handshake and every check before the connection loop; `None` when the connection was
/// refused (and closed).
async fn open(mut tx: Tx, mut rx: Rx, state: &AppState, who: Principal) -> Option<Opened> {
    let open = state.hub.metrics().bridge_open();
    let stop = state.auth.revocations.token_for(&who);
    let hello = match handshake(state, &mut rx).await {
        Ok(h) => h,
        Err(end) => {
            if let Some(code) = end.code {
                super::close(&mut tx, &mut rx, code, &end.reason).await;
            }
            return None;
        }
    };
    // Counted as a bridge until its hello says it is a machine's link.
    let _open = if hello.agent.adapter == HOST_ADAPTER {
        drop(open);
        state.hub.metrics().host_open()
    } else {
        open
    };
    // Someone else's session is refused before anything of this bridge is written to it.
    let existing = match state.store.log.find_session(&hello.session).await {
        Ok(s) => Some(s.id),
        Err(StoreError::NotFound) => None,
        Err(e) => {
            store_unavailable(&mut tx, &mut rx, "read the session", e.into()).await;
            return None;
        }
    };
    match existing {
        Some(id) => match owns(state, &who, id).await {
            Ok(true) => {}
            Ok(false) => {
                super::close(&mut tx, &mut rx, close::UNAUTHORIZED, NOT_YOURS).await;
                return None;
            }
            Err(e) => {
                store_unavailable(&mut tx, &mut rx, "check the owner", e).await;
                return None;
            }
        },
        // A host credential creates no session: moord made its machine's before asking.
        None if who.machine.is_some() => {
            super::close(&mut tx, &mut rx, close::UNAUTHORIZED, NOT_YOURS).await;
            return None;
        }
        None => {
            if let Err(e) = state.quotas.may_create(&*state.store.access, &who).await {
                refuse_quota(&mut tx, &mut rx, e).await;
                return None;
            }
        }
    }
    let session = match state
        .store
        .log
        .open_session(&hello.session, Some(&hello.agent))
        .await
    {
        Ok(s) if s.ended_at.is_some() => {
            let msg = format!("session {} has ended; start a new one", s.name);
            let _ = tx
                .send(text(&ServerToBridge::Error {
                    code: ErrorCode::SessionEnded,
                    message: msg.clone(),
                }))
                .await;
            super::close(&mut tx, &mut rx, close::SESSION_ENDED, &msg).await;
            return None;
        }
        Ok(s) => {
            if existing.is_none() {
                match claims(state, &who, s.id).await {
                    Ok(true) => {}
                    Ok(false) => {
                        super::close(&mut tx, &mut rx, close::UNAUTHORIZED, NOT_YOURS).await;
                        return None;
                    }
                    Err(e) => {
                        store_unavailable(&mut tx, &mut rx, "claim the session", e).await;
                        return None;
                    }
                }
            }
            s
        }
        Err(e) => {
            store_unavailable(&mut tx, &mut rx, "open the session", e.into()).await;
            return None;
        }
    };
    let continued_from = continues(state, &who, &hello, &session).await;
    let live = match state
        .quotas
        .attach(&*state.store.access, &who, session.id)
        .await
    {
        Ok(live) => live,
        Err(e) => {
            refuse_quota(&mut tx, &mut rx, e).await;
            return None;
        }
    };
    // With several nodes, the claim tells the others to close their connection for the session.
    let epoch = match &state.store.cluster {
        Some(cluster) => match cluster.claim_bridge(session.id, hello.producer).await {
            Ok(epoch) => epoch,
            Err(e) => {
                store_unavailable(&mut tx, &mut rx, "claim the session", e.into()).await;
                return None;
            }
        },
        None => 0,
    };
    let (control_tx, control_rx) = mpsc::unbounded_channel();
    let (inputs_tx, inputs) = input_feed();
    let conn_id = state.hub.attach_bridge(
        session.id,
        hello.producer,
        control_tx,
        inputs_tx,
        epoch,
        session.head_seq,
    );
    let conn = Conn {
        // Keep the session's state current while a bridge feeds it (interruption records
        // need it): the follower runs while someone watches.
        _watching: state.states.watch(session.id),
        live,
        inflight: VecDeque::new(),
        state: state.clone(),
        session: session.id,
        conn_id,
        hello,
        tx,
        delivered: Seq::ZERO,
        behind: false,
        connected: None,
        lease: None,
        continued_from,
        role_stop: state.auth.revocations.member_token(&who, session.id),
        stop,
    };
    Some(Opened {
        conn,
        rx,
        session,
        inputs,
        control_rx,
        _open,
    })
}

/// Reads and checks `Hello`.
async fn handshake(state: &AppState, rx: &mut Rx) -> Result<Hello, Ending> {
    let first = tokio::time::timeout(state.config.idle_timeout, rx.next())
        .await
        .map_err(|_| Ending::close(close::HEARTBEAT_TIMEOUT, "no hello within the idle timeout"))?;
    let hello = match first {
        // The hello is held to the same limit as every other frame.
        Some(Ok(Message::Text(t))) if super::too_big(&t, &state.config) => {
            return Err(Ending::close(
                close::MESSAGE_TOO_BIG,
                format!(
                    "hello of {} bytes is over the {} byte frame limit",
                    t.len(),
                    state.config.max_frame_bytes
                ),
            ))
        }
        Some(Ok(Message::Text(t))) => match serde_json::from_str::<BridgeToServer>(&t) {
            Ok(BridgeToServer::Hello(h)) => h,
            Ok(_) => {
                return Err(Ending::close(
                    close::BAD_FRAME,
                    "expected hello as the first frame",
                ))
            }
            Err(e) => return Err(Ending::close(close::BAD_FRAME, format!("bad hello: {e}"))),
        },
        Some(Ok(_)) => {
            return Err(Ending::close(
                close::BAD_FRAME,
                "expected a text hello frame",
            ))
        }
        Some(Err(_)) => return Err(Ending::close(close::MESSAGE_TOO_BIG, "hello refused")),
        None => return Err(Ending::lost("closed before hello")),
    };
    if hello.version != PROTOCOL_VERSION {
        return Err(Ending::close(
            close::VERSION_MISMATCH,
            version_mismatch(hello.version),
        ));
    }
    if hello.session.is_empty() || hello.session.len() > 128 {
        return Err(Ending::close(
            close::INVALID_SESSION,
            "session name must be 1 to 128 characters",
        ));
    }
    // A UUID names a session only in its canonical form: another spelling would be stored as a
    // name that shadows (or collides with) the id.
    if uuid::Uuid::parse_str(&hello.session).is_ok_and(|u| u.to_string() != hello.session) {
        return Err(Ending::close(
            close::INVALID_SESSION,
            "session ids are lower-case hyphenated UUIDs; use that form, or a name that is not a UUID",
        ));
    }
    // The description is stored with the session and read with every list of sessions.
    let agent_bytes = serde_json::to_string(&hello.agent).map_or(usize::MAX, |a| a.len());
    if agent_bytes > MAX_AGENT_BYTES {
        return Err(Ending::close(
            close::BAD_FRAME,
            format!("agent description of {agent_bytes} bytes is over {MAX_AGENT_BYTES}"),
        ));
    }
    Ok(hello)
}

impl Conn {
    /// Takes the session over from the connection before (recording its end if nobody has),
    /// welcomes the bridge and takes the session's lease.
    async fn start(&mut self, name: &str, conn_id: u64) -> Result<(), Ending> {
        let leases = self.state.leases.clone();
        let failed = |e: anyhow::Error| store_failed("welcome the bridge", e);
        leases
            .take_over(self.session, self.hello.producer)
            .await
            .map_err(|e| failed(e.into()))?;
        // The end of the connection before, and an interruption it caused, come before this
        // connection's `bridge.connected` (and so before its agent's entries).
        let head = self
            .state
            .store
            .log
            .find_session(&self.session.to_string())
            .await
            .map_err(|e| failed(e.into()))?
            .head_seq;
        self.until_folded(head).await;
        match self.welcome(name, conn_id).await {
            Ok(true) => {
                self.link_continued(name).await;
                Ok(())
            }
            // Taken over while starting (the later connection may have attached to the hub
            // first, or be another node's): the lease's holder says whose it is.
            Ok(false) => {
                let leases = &self.state.leases;
                let (code, reason) = leases.lost_to(self.session, self.hello.producer).await;
                Err(Ending::close(code, reason))
            }
            Err(e) => Err(failed(e)),
        }
    }

    /// Points the ended session this one continues (if any) to this one. Its own pointer back
    /// went in with its first `bridge.connected`; a failure here leaves only that one.
    async fn link_continued(&mut self, name: &str) {
        let Some(from) = self.continued_from.take() else {
            return;
        };
        let to = SessionLink {
            session: self.session,
            name: name.to_owned(),
        };
        let entry = Append::server(SessionContinuedIn { to });
        if let Err(e) = self.state.log.append(from.session, vec![entry]).await {
            tracing::warn!(error = ?e, from = %from.session, "could not link the session it continues");
        }
    }

    /// Settles inputs the bridge reported, records the connection, takes the session's lease
    /// and sends `Welcome`; false (and no `Welcome`) when a newer connection holds the lease.
    async fn welcome(&mut self, name: &str, conn_id: u64) -> anyhow::Result<bool> {
        let store = self.state.store.log.clone();
        let hello = &self.hello;
        let mut settle: Vec<Append> = hello
            .uncertain_inputs
            .iter()
            .map(|s| Append::receipt(*s, InputUncertain { input_seq: *s }))
            .collect();
        let unsettled = store
            .unsettled_inputs(self.session, hello.last_applied_input)
            .await?;
        settle.extend(
            unsettled
                .into_iter()
                .filter(|s| !hello.uncertain_inputs.contains(s))
                .map(|s| {
                    let applied = InputApplied {
                        input_seq: s,
                        reported: Some("handshake".into()),
                    };
                    Append::receipt(s, applied)
                }),
        );
        if let Some(from) = self.continued_from.clone() {
            settle.push(Append::server(SessionContinuedFrom { from }));
        }
        settle.push(Append::server(BridgeConnected {
            connection: conn_id,
            producer: Some(hello.producer),
            agent: Some(hello.agent.clone()),
        }));
        let connected = match self.state.log.append(self.session, settle).await?.pop() {
            Some(Appended::Stored(e)) => e.seq,
            other => anyhow::bail!("bridge.connected was not stored: {other:?}"),
        };
        self.connected = Some(connected);
        match self
            .state
            .leases
            .hold(self.session, conn_id, connected)
            .await?
        {
            Some(lease) => self.lease = Some(lease),
            None => return Ok(false),
        }
        let pending = store
            .inputs_after(self.session, hello.last_applied_input, WELCOME_INPUTS)
            .await?;
        // Everything committed up to our own `bridge.connected` is covered by that read, and
        // the feed (attached before it) has everything later, unless the page was full.
        self.behind = pending.len() >= WELCOME_INPUTS as usize;
        self.delivered = pending
            .last()
            .map(|e| e.seq)
            .unwrap_or(hello.last_applied_input);
        let cfg = &self.state.config;
        let welcome = Welcome {
            version: PROTOCOL_VERSION,
            session_id: self.session,
            session_name: name.to_owned(),
            producer_mark: store.producer_mark(self.session, hello.producer).await?,
            pending_inputs: pending,
            heartbeat_interval_ms: cfg.heartbeat_interval.as_millis() as u64,
            idle_timeout_ms: cfg.idle_timeout.as_millis() as u64,
            max_lifetime_ms: cfg.bridge_max_lifetime.as_millis() as u64,
            max_frame_bytes: cfg.max_frame_bytes as u64,
            web_url: self.state.session_url(self.session),
        };
        self.tx
            .send(text(&ServerToBridge::Welcome(welcome)))
            .await?;
        // Inputs committed after the Welcome query but before our subscription caught up are
        // picked up by `forward_input`, which compares against `delivered`.
        Ok(true)
    }

    async fn serve(
        &mut self,
        rx: &mut Rx,
        mut inputs: mpsc::Receiver<InputFeed>,
        mut control: mpsc::UnboundedReceiver<BridgeControl>,
    ) -> Ending {
        let cfg = self.state.config.clone();
        let started = Instant::now();
        let lifetime =
            (!cfg.bridge_max_lifetime.is_zero()).then(|| started + cfg.bridge_max_lifetime);
        let mut move_at = lifetime.map(|end| end.checked_sub(cfg.move_notice).unwrap_or(started));
        let mut heartbeat = interval(cfg.heartbeat_interval);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut last_rx = Instant::now();
        // One timer for the idle timeout, moved on only when it fires early: arming a new one
        // on every pass of the loop (every frame and every commit) costs more than the frame.
        let idle = tokio::time::sleep_until(last_rx + cfg.idle_timeout);
        tokio::pin!(idle);
        let mut lookahead: Lookahead = VecDeque::new();
        let shutdown = self.state.shutdown.clone();
        let stop = self.stop.clone();
        let role_stop = self.role_stop.clone();
        let mut inputs_open = true;
        loop {
            let result = tokio::select! {
                biased;
                _ = shutdown.cancelled() => {
                    // Ack what is committing now, so the bridge need not resend it.
                    let _ = self.settle_all().await;
                    let _ = self.send(&ServerToBridge::Move { reason: "server shutting down".into(), close_in_ms: 0 }).await;
                    return Ending::close(close::GOING_AWAY, "server shutting down; reconnect");
                }
                // After shutdown: both fire together (the stop token is a child of shutdown's),
                // and shutdown, above, wins.
                _ = stop.cancelled() => {
                    return Ending::close(close::UNAUTHORIZED, "credentials revoked");
                }
                _ = role_stop.cancelled() => {
                    return Ending::close(close::UNAUTHORIZED, "no longer the owner of this session");
                }
                cmd = control.recv() => match cmd {
                    Some(BridgeControl::Close { code, reason }) => return Ending::close(code, reason),
                    None => Ok(()),
                },
                _ = &mut idle => {
                    let due = last_rx + cfg.idle_timeout;
                    if Instant::now() < due {
                        idle.as_mut().reset(due);
                        Ok(())
                    } else {
                        return Ending::close(close::HEARTBEAT_TIMEOUT, "no frame from the bridge within the idle timeout");
                    }
                }
                _ = sleep_until_opt(lifetime) => {
                    let _ = self.settle_all().await;
                    return Ending::close(close::LIFETIME, "connection lifetime reached; reconnect");
                }
                _ = sleep_until_opt(move_at) => {
                    move_at = None;
                    let close_in_ms = cfg.move_notice.as_millis() as u64;
                    self.send(&ServerToBridge::Move { reason: "connection lifetime cap".into(), close_in_ms }).await
                }
                _ = heartbeat.tick() => self.send(&ServerToBridge::Heartbeat).await,
                lost = lease_lost(&mut self.lease) => {
                    let _ = self.settle_all().await;
                    return match lost {
                        LeaseLost::Taken => Ending::close(close::SERVER_ERROR, "this server no longer holds the bridge's lease; reconnect"),
                        LeaseLost::RanOut => Ending::close(close::SERVER_ERROR, "the bridge's lease could not be renewed; reconnect"),
                    };
                }
                input = inputs.recv(), if inputs_open => match input {
                    Some(input) => Box::pin(self.forward_input(input)).await,
                    // Detached by a newer connection, which also tells this one to close.
                    None => {
                        inputs_open = false;
                        Ok(())
                    }
                },
                committed = next_commit(&mut self.inflight), if !self.inflight.is_empty() => {
                    // A slow commit is not silence from the bridge.
                    last_rx = Instant::now();
                    let (outcomes, producer_seqs) = committed;
                    match Box::pin(self.settle(outcomes, producer_seqs)).await {
                        Ok(_) => Ok(()),
                        Err(end) => return end,
                    }
                }
                msg = next_message(&mut lookahead, rx), if may_read(&self.inflight, cfg.max_frame_bytes) => {
                    last_rx = Instant::now();
                    match msg {
                        Some(Ok(Message::Text(t))) if super::too_big(&t, &cfg) => {
                            return Ending::close(close::MESSAGE_TOO_BIG, format!("frame of {} bytes is over the {} byte limit", t.len(), cfg.max_frame_bytes));
                        }
                        Some(Ok(Message::Text(t))) => match Box::pin(self.on_frame(&t, &mut lookahead, rx)).await {
                            Ok(()) => Ok(()),
                            Err(end) => return end,
                        },
                        Some(Ok(Message::Binary(_))) => return Ending::close(close::BAD_FRAME, "binary frames are not accepted"),
                        Some(Ok(Message::Close(frame))) => {
                            let code = frame.as_ref().map(|f| f.code);
                            return Ending { code: None, reason: format!("bridge closed the link ({})", code.map(close::describe).unwrap_or("no code")) };
                        }
                        Some(Ok(_)) => Ok(()),
                        Some(Err(e)) => {
                            let too_big = e.to_string().contains("too long") || e.to_string().contains("size");
                            return if too_big {
                                Ending::close(close::MESSAGE_TOO_BIG, format!("frame refused: {e}"))
                            } else {
                                Ending::lost(format!("connection lost: {e}"))
                            };
                        }
                        None => return Ending::lost("connection lost without a close frame"),
                    }
                }
            };
            if let Err(e) = result {
                return Ending::lost(format!("send failed: {e}"));
            }
        }
    }

    async fn send(&mut self, frame: &ServerToBridge) -> Result<(), axum::Error> {
        self.tx.send(text(frame)).await
    }

    /// Sends live inputs the bridge has not had yet: the feed's input, or after a gap (or
    /// while `behind`) every input after the last one delivered, from the store. Anything at or
    /// below `delivered` is old news (the welcome's page and the feed overlap).
    async fn forward_input(&mut self, input: InputFeed) -> Result<(), axum::Error> {
        let entries = match input {
            InputFeed::Input(f) if !self.behind => {
                if f.seq() <= self.delivered {
                    return Ok(());
                }
                vec![(**f.entry()).clone()]
            }
            InputFeed::Input(_) | InputFeed::Resync => {
                self.behind = false;
                self.reread_inputs().await
            }
        };
        for entry in entries {
            self.delivered = entry.seq;
            self.send(&ServerToBridge::Input { entry }).await?;
        }
        Ok(())
    }

    /// Inputs after the last one delivered, from the store.
    async fn reread_inputs(&mut self) -> Vec<moor_protocol::Entry> {
        match self
            .state
            .store
            .log
            .inputs_after(self.session, self.delivered, WELCOME_INPUTS)
            .await
        {
            Ok(entries) => entries,
            Err(e) => {
                // The next feed item tries again.
                self.behind = true;
                tracing::error!(error = ?e, "could not re-read inputs");
                Vec::new()
            }
        }
    }

    async fn on_frame(
        &mut self,
        raw: &str,
        lookahead: &mut Lookahead,
        rx: &mut Rx,
    ) -> Result<(), Ending> {
        let frame = Incoming::read(raw)
            .map_err(|e| Ending::close(close::BAD_FRAME, format!("bad frame: {e}")))?;
        let frame = match frame {
            Incoming::Entries(entries) => {
                let mut entries = entries.into_iter().map(sent).collect();
                let merged = merge_ready(
                    &mut entries,
                    lookahead,
                    rx,
                    self.state.config.max_frame_bytes,
                );
                return self.submit_in_order(entries, raw.len() + merged).await;
            }
            Incoming::Other(frame) => frame,
        };
        match frame {
            // `Incoming::read` reads every entries frame as `Incoming::Entries`.
            BridgeToServer::Entries { .. } => Err(Ending::close(
                close::BAD_FRAME,
                "bad frame: entries not read as entries",
            )),
            BridgeToServer::Receipt { input_seq, status } => {
                let body: EntryBody = match status {
                    ReceiptStatus::Delivered => InputDelivered { input_seq }.into(),
                    ReceiptStatus::Applied => InputApplied {
                        input_seq,
                        reported: None,
                    }
                    .into(),
                    ReceiptStatus::Failed { reason } => InputFailed { input_seq, reason }.into(),
                };
                self.state
                    .log
                    .append(self.session, vec![Append::receipt(input_seq, body)])
                    .await
                    .map_err(store_ending)?;
                Ok(())
            }
            BridgeToServer::Heartbeat { spool_unacked } => {
                if let Some(depth) = spool_unacked {
                    self.state
                        .hub
                        .bridge_spool(self.session, self.conn_id, depth);
                }
                Ok(())
            }
            BridgeToServer::End => {
                // Everything sent before `End` must be stored (and acked) first.
                self.settle_all().await?;
                // If this connection's twin (half-open, or on another node) ended the session
                // first, it wrote the end; this one only closes.
                crate::session::end::end(
                    &self.state.log,
                    &*self.state.store.log,
                    self.session,
                    self.delivered,
                    WELCOME_INPUTS,
                )
                .await
                .map_err(store_ending)?;
                Err(Ending::close(close::SESSION_ENDED, "session ended"))
            }
            BridgeToServer::Hello(_) => Err(Ending::close(
                close::BAD_FRAME,
                "hello may only be the first frame",
            )),
        }
    }

    /// Hands a batch (`bytes` on the wire) to the committer. An entry that ends or replaces the
    /// agent (`agent.exit`, `agent.restart`, `agent.start`) is committed, and folded into the
    /// session's state, before anything after it is submitted: an interruption it causes (which
    /// the state follower records) then lands right after it, before the agent's next entries,
    /// whatever the timing.
    async fn submit_in_order(
        &mut self,
        mut entries: Vec<Sent>,
        bytes: usize,
    ) -> Result<(), Ending> {
        while let Some(at) = entries.iter().position(|e| changes_agent(&e.kind)) {
            let rest = entries.split_off(at + 1);
            self.submit_entries(entries, bytes).await?;
            if let Some(seq) = self.settle_all().await? {
                self.until_folded(seq).await;
            }
            entries = rest;
        }
        if entries.is_empty() {
            return Ok(());
        }
        self.submit_entries(entries, bytes).await
    }

    /// Waits (bounded) until the session's state has folded `seq`, and so recorded any
    /// interruption up to it.
    async fn until_folded(&mut self, seq: Seq) {
        if let Err(e) = self.state.states.current(self.session, seq).await {
            tracing::warn!(error = ?e, session = %self.session, "state did not fold the agent's change in time");
        }
    }

    /// Validates a batch (`bytes` on the wire) and hands it to the committer; its ack follows from [`Conn::settle`].
    async fn submit_entries(&mut self, entries: Vec<Sent>, bytes: usize) -> Result<(), Ending> {
        if let Some(bad) = entries.iter().find(|e| !bridge_may_write(&e.kind)) {
            return Err(self
                .refuse(
                    ErrorCode::BadRequest,
                    close::BAD_FRAME,
                    format!("kind {:?} may not be written by a bridge", bad.kind),
                )
                .await);
        }
        let payload_bytes = entries.iter().map(|e| e.payload.text().len() as u64).sum();
        if let Err(QuotaError::Exceeded(msg)) = self.live.charge_log(payload_bytes) {
            return Err(self
                .refuse(ErrorCode::Forbidden, close::QUOTA_EXCEEDED, msg)
                .await);
        }
        let producer = self.hello.producer;
        #[cfg(debug_assertions)]
        let entries = injected_bug(entries);
        let producer_seqs: Vec<u64> = entries.iter().map(|e| e.producer_seq).collect();
        let batch: Vec<Append> = entries
            .into_iter()
            .map(|e| Append {
                ts: e.ts,
                kind: e.kind,
                author: kinds::AUTHOR_BRIDGE.into(),
                payload: e.payload,
                key: IdemKey::Producer {
                    producer,
                    seq: e.producer_seq,
                },
            })
            .collect();
        let commit = self
            .state
            .log
            .submit(self.session, batch)
            .await
            .map_err(store_ending)?;
        self.inflight.push_back(InFlight {
            commit,
            producer_seqs,
            bytes,
        });
        Ok(())
    }

    /// Waits for every batch in flight and settles it in order; the seq of the last entry.
    async fn settle_all(&mut self) -> Result<Option<Seq>, Ending> {
        let mut last = None;
        while let Some(mut f) = self.inflight.pop_front() {
            let outcomes = f.commit.wait().await;
            last = self.settle(outcomes, f.producer_seqs).await?.or(last);
        }
        Ok(last)
    }

    /// Acks a committed batch, or refuses the connection for a gap or a content mismatch; the
    /// seq of its last entry.
    async fn settle(
        &mut self,
        outcomes: StoreResult<Vec<Appended>>,
        producer_seqs: Vec<u64>,
    ) -> Result<Option<Seq>, Ending> {
        let producer = self.hello.producer;
        let outcomes = outcomes.map_err(store_ending)?;
        let mut acked = None;
        let mut last = None;
        for (o, pseq) in outcomes.iter().zip(producer_seqs) {
            match o {
                Appended::Stored(e) => {
                    acked = Some(pseq);
                    last = Some(e.seq);
                }
                Appended::Duplicate(seq) => {
                    acked = Some(pseq);
                    last = Some(*seq);
                }
                Appended::Mismatch { producer_seq } => {
                    self.ack(acked).await;
                    let msg = format!("producer seq {producer_seq} was replayed with content different from the stored entry; refusing it");
                    tracing::error!(session = %self.session, %producer, producer_seq, "content mismatch on replay");
                    return Err(self
                        .refuse(ErrorCode::ContentMismatch, close::CONTENT_MISMATCH, msg)
                        .await);
                }
                Appended::Gap { expected, got } => {
                    self.ack(acked).await;
                    let msg = format!("producer seq {got} skips ahead; expected {expected}. Reconnect and resend from the mark");
                    return Err(self
                        .refuse(ErrorCode::ProducerGap, close::PRODUCER_GAP, msg)
                        .await);
                }
            }
        }
        self.ack(acked).await;
        Ok(last)
    }

    /// Acks everything up to `producer_seq`: it and all before it are committed.
    async fn ack(&mut self, producer_seq: Option<u64>) {
        if let Some(producer_seq) = producer_seq {
            let _ = self.send(&ServerToBridge::Ack { producer_seq }).await;
        }
    }

    async fn refuse(&mut self, code: ErrorCode, close_code: u16, message: String) -> Ending {
        let _ = self
            .send(&ServerToBridge::Error {
                code,
                message: message.clone(),
            })
            .await;
        Ending::close(close_code, message)
    }
}

/// Whether a bridge may write an entry of `kind`: a well-formed kind, and not one the server
/// writes itself (`bridge.*`, `input.*`, `session.ended`).
pub fn bridge_may_write(kind: &str) -> bool {
    kinds::is_valid(kind)
        && !kind.starts_with("bridge.")
        && !kind.starts_with("input.")
        && kind != kinds::SESSION_ENDED
}

/// Whether an entry of `kind` ends or replaces the agent process, which settles the work it had
/// in flight.
fn changes_agent(kind: &str) -> bool {
    matches!(
        kind,
        kinds::AGENT_EXIT | kinds::AGENT_RESTART | kinds::AGENT_START
    )
}

/// The outcome of the oldest batch in flight (cancel-safe: it stays queued until it resolves).
/// Resolves when the connection's lease is lost; never while it lives (or if none is held).
async fn lease_lost(lease: &mut Option<HeldLease>) -> LeaseLost {
    match lease.as_mut() {
        Some(l) => match (&mut l.lost).await {
            Ok(why) => why,
            // The node dropped the sender: it is shutting down, which ends the connection.
            Err(_) => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

async fn next_commit(inflight: &mut VecDeque<InFlight>) -> (StoreResult<Vec<Appended>>, Vec<u64>) {
    let Some(front) = inflight.front_mut() else {
        return std::future::pending().await;
    };
    let outcomes = front.commit.wait().await;
    let producer_seqs = inflight
        .pop_front()
        .map(|f| f.producer_seqs)
        .unwrap_or_default();
    (outcomes, producer_seqs)
}

/// The next message: one already looked at, else the socket's.
async fn next_message(
    lookahead: &mut Lookahead,
    rx: &mut Rx,
) -> Option<Result<Message, axum::Error>> {
    match lookahead.pop_front() {
        Some(m) => m,
        None => rx.next().await,
    }
}

/// Socket reads taken while merging batches, to be handled next (`None`: the stream ended).
type Lookahead = VecDeque<Option<Result<Message, axum::Error>>>;

/// Merges entry batches that are already readable into `entries` (group commit for one
/// bridge), until the merged frames hold `max_frame_bytes` (so a batch costs at most twice the
/// frame limit); the first frame of another type is kept for the main loop. Returns the size of
/// the frames merged.
fn merge_ready(
    entries: &mut Vec<Sent>,
    lookahead: &mut Lookahead,
    rx: &mut Rx,
    max_frame_bytes: usize,
) -> usize {
    let mut merged = 0usize;
    while entries.len() < MAX_MERGED_ENTRIES && lookahead.is_empty() && merged < max_frame_bytes {
        let Some(msg) = rx.next().now_or_never() else {
            break;
        };
        if let Some(Ok(Message::Text(t))) = &msg {
            // An oversized frame is left to the main loop, which refuses it.
            if t.len() > max_frame_bytes {
                lookahead.push_back(msg);
                break;
            }
            if let Ok(Incoming::Entries(more)) = Incoming::read(t) {
                merged += t.len();
                entries.extend(more.into_iter().map(sent));
                continue;
            }
        }
        lookahead.push_back(msg);
    }
    merged
}

/// An entry as a bridge sent it, its payload the text it arrived in.
type Sent = NewEntry<Payload>;

fn sent(e: NewEntry<&RawValue>) -> Sent {
    NewEntry {
        producer_seq: e.producer_seq,
        ts: e.ts,
        kind: e.kind,
        payload: Payload::sent(e.payload),
    }
}

/// A deliberate bug for the soak's checker to catch, in debug builds only:
/// `MOOR_INJECT_BUG=swap-entries` swaps the contents of two `agent.output` entries of one batch
/// (each keeps its producer seq), once per process.
#[cfg(debug_assertions)]
fn injected_bug(mut entries: Vec<Sent>) -> Vec<Sent> {
    use std::sync::atomic::{AtomicBool, Ordering};
    static DONE: AtomicBool = AtomicBool::new(false);
    let Ok(bug) = std::env::var("MOOR_INJECT_BUG") else {
        return entries;
    };
    let outputs: Vec<usize> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == kinds::AGENT_OUTPUT)
        .map(|(i, _)| i)
        .collect();
    let &[a, b, ..] = outputs.as_slice() else {
        return entries;
    };
    if bug != "swap-entries" || DONE.swap(true, Ordering::SeqCst) {
        return entries;
    }
    tracing::warn!(bug, "injecting a bug on purpose (MOOR_INJECT_BUG)");
    let payload = entries[a].payload.clone();
    entries[a].payload = std::mem::replace(&mut entries[b].payload, payload);
    entries
}

fn store_ending(e: StoreError) -> Ending {
    match e {
        StoreError::SessionEnded => Ending::close(close::SESSION_ENDED, "session has ended"),
        // Warned once per episode by the committer, not once per bridge batch.
        StoreError::Full(_) => storage_full(),
        e => {
            tracing::error!(error = ?e, "bridge append failed");
            Ending::close(
                close::SERVER_ERROR,
                "server could not store entries; reconnect",
            )
        }
    }
}

/// A retryable refusal for a full disk: nothing of the batch (or the handshake) was stored, so
/// the bridge keeps its spool and resends from the mark once it is welcomed again.
fn storage_full() -> Ending {
    Ending::close(
        close::STORAGE_FULL,
        "server disk full: nothing stored; keep the spool and retry",
    )
}

/// The close reason for a bridge speaking protocol `theirs`: which side to upgrade.
pub(crate) fn version_mismatch(theirs: u32) -> String {
    let upgrade = if theirs < PROTOCOL_VERSION {
        "upgrade moor to this moord's release"
    } else {
        "this moord is older than moor: upgrade moord"
    };
    format!("moor speaks protocol {theirs}, moord speaks {PROTOCOL_VERSION}; {upgrade}")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use moor_protocol::bridge::AgentInfo;
    use moor_protocol::ProducerId;
    use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

    use super::*;
    use crate::state::testing;

    /// What the bridge saw, and when (virtual time since the first frame after the welcome).
    #[derive(Debug, PartialEq)]
    enum Seen {
        Heartbeat,
        Move { close_in_ms: u64 },
        Close(u16),
    }

    /// Connects a bridge to session `name` and reads the `Welcome` (on real time: the
    /// handshake reads and writes the store); returns the peer's ends.
    async fn attach(
        state: &AppState,
        name: &str,
        who: Principal,
    ) -> (UnboundedSender<Message>, UnboundedReceiver<Message>) {
        let ((tx, rx), to_server, mut from_server) = testing::socket();
        let hello = Hello {
            version: PROTOCOL_VERSION,
            session: name.into(),
            producer: ProducerId::new(),
            last_applied_input: Seq::ZERO,
            uncertain_inputs: vec![],
            continues: None,
            agent: AgentInfo::default(),
        };
        to_server.send(text(&BridgeToServer::Hello(hello))).unwrap();
        tokio::spawn(serve(tx, rx, state.clone(), who));
        match from_server.recv().await {
            Some(Message::Text(t)) => assert!(matches!(
                serde_json::from_str(&t).unwrap(),
                ServerToBridge::Welcome(_)
            )),
            other => panic!("expected a welcome, got {other:?}"),
        }
        (to_server, from_server)
    }

    /// Every frame until the close, with its virtual arrival time relative to the first.
    async fn frames_until_close(
        from_server: &mut UnboundedReceiver<Message>,
    ) -> Vec<(Duration, Seen)> {
        let mut seen = Vec::new();
        let mut first = None;
        while let Some(m) = from_server.recv().await {
            let at = *first.get_or_insert_with(Instant::now);
            let frame = match m {
                Message::Text(t) => match serde_json::from_str(&t).unwrap() {
                    ServerToBridge::Heartbeat => Seen::Heartbeat,
                    ServerToBridge::Move { close_in_ms, .. } => Seen::Move { close_in_ms },
                    other => panic!("unexpected frame {other:?}"),
                },
                Message::Close(Some(f)) => Seen::Close(f.code),
                other => panic!("unexpected message {other:?}"),
            };
            let done = matches!(frame, Seen::Close(_));
            seen.push((Instant::now() - at, frame));
            if done {
                break;
            }
        }
        seen
    }

    /// `a` and `b` are the same instant, give or take the real time between the connection's
    /// start (its timers begin on real time, during the handshake's store I/O) and the pause:
    /// a few milliseconds on an idle machine, hundreds on a loaded one. The timings asserted are
    /// seconds apart.
    fn about(a: Duration, b: Duration) -> bool {
        a.abs_diff(b) < Duration::from_secs(1)
    }

    // The close frame goes out after the disconnect is recorded, and the store's I/O lets paused
    // time run on to its next timer: when the loop ended is read from the heartbeats, which stop.

    #[tokio::test]
    async fn a_silent_bridge_gets_heartbeats_at_the_interval_then_is_closed_at_the_idle_timeout() {
        // arrange
        let t = testing::state(|c| {
            c.heartbeat_interval = Duration::from_secs(10);
            c.idle_timeout = Duration::from_secs(35);
        })
        .await;
        let (_to_server, mut from_server) = attach(&t.state, "quiet", Principal::bootstrap()).await;
        // act: the bridge says nothing for a long (virtual) while
        tokio::time::pause();
        let seen = frames_until_close(&mut from_server).await;
        // assert: heartbeats at 0, 10, 20 and 30 s, no heartbeat at 40 s (the loop ended in
        // between), and the idle-timeout close no earlier than 35 s
        let kinds: Vec<&Seen> = seen.iter().map(|(_, s)| s).collect();
        assert_eq!(
            kinds,
            [
                &Seen::Heartbeat,
                &Seen::Heartbeat,
                &Seen::Heartbeat,
                &Seen::Heartbeat,
                &Seen::Close(close::HEARTBEAT_TIMEOUT)
            ]
        );
        for (i, (at, _)) in seen.iter().take(4).enumerate() {
            assert!(about(*at, Duration::from_secs(10) * i as u32), "{seen:?}");
        }
        assert!(seen[4].0 >= Duration::from_secs(35), "{seen:?}");
    }

    #[tokio::test]
    async fn a_bridge_that_keeps_talking_is_never_timed_out_and_silence_after_is() {
        // arrange
        let t = testing::state(|c| {
            c.heartbeat_interval = Duration::from_secs(7);
            c.idle_timeout = Duration::from_secs(30);
        })
        .await;
        let (to_server, mut from_server) = attach(&t.state, "chatty", Principal::bootstrap()).await;
        tokio::time::pause();
        let reader = tokio::spawn(async move { frames_until_close(&mut from_server).await });
        // act: a heartbeat every 20 s for two minutes, then silence
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_secs(20)).await;
            to_server
                .send(text(&BridgeToServer::Heartbeat {
                    spool_unacked: None,
                }))
                .unwrap();
        }
        // assert: the server's heartbeats (every 7 s) go on through 147 s, 27 s into the
        // silence, and stop before 154 s: the watchdog fired at 150 s, 30 s after the last frame
        let seen = reader.await.unwrap();
        let (closed_at, last) = seen.last().unwrap();
        assert_eq!(last, &Seen::Close(close::HEARTBEAT_TIMEOUT), "{seen:?}");
        let beats: Vec<Duration> = seen
            .iter()
            .filter(|(_, s)| *s == Seen::Heartbeat)
            .map(|(at, _)| *at)
            .collect();
        assert_eq!(beats.len(), 22, "{seen:?}");
        assert!(about(beats[21], Duration::from_secs(147)), "{seen:?}");
        assert!(*closed_at >= Duration::from_secs(150), "{seen:?}");
    }

    #[tokio::test]
    async fn the_lifetime_cap_sends_the_move_notice_then_closes_with_lifetime() {
        // arrange
        let t = testing::state(|c| {
            c.heartbeat_interval = Duration::from_secs(25);
            c.idle_timeout = Duration::from_secs(600);
            c.bridge_max_lifetime = Duration::from_secs(60);
            c.move_notice = Duration::from_secs(5);
        })
        .await;
        let (_to_server, mut from_server) =
            attach(&t.state, "capped", Principal::bootstrap()).await;
        // act
        tokio::time::pause();
        let seen = frames_until_close(&mut from_server).await;
        // assert: heartbeats at 0, 25, 50 s; the move at 55 s; then (no heartbeat at 75 s) the
        // lifetime close, no earlier than 60 s
        let expected = [
            (0, Seen::Heartbeat),
            (25, Seen::Heartbeat),
            (50, Seen::Heartbeat),
            (55, Seen::Move { close_in_ms: 5000 }),
            (60, Seen::Close(close::LIFETIME)),
        ];
        assert_eq!(seen.len(), expected.len(), "{seen:?}");
        for ((at, got), (secs, want)) in seen.iter().zip(expected) {
            assert_eq!(got, &want, "{seen:?}");
            if secs < 60 {
                assert!(about(*at, Duration::from_secs(secs)), "{seen:?}");
            } else {
                assert!(*at >= Duration::from_secs(secs), "{seen:?}");
            }
        }
    }

    #[tokio::test]
    async fn a_revoked_credential_closes_the_bridge_with_unauthorized() {
        // arrange
        let t = testing::state(|c| c.idle_timeout = Duration::from_secs(600)).await;
        let (_to_server, mut from_server) = attach(
            &t.state,
            "revoked",
            Principal::for_user("ann".into(), Some("f1".into())),
        )
        .await;
        tokio::time::pause();
        // act
        t.state
            .auth
            .revocations
            .apply(&crate::store::Revocation::User("ann".into()));
        // assert
        let seen = frames_until_close(&mut from_server).await;
        assert_eq!(
            seen.last().map(|(_, s)| s),
            Some(&Seen::Close(close::UNAUTHORIZED))
        );
    }
}
