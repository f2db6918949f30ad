//! `GET /api/v1/sessions/{id}/ws`: a viewer socket. The same cursor semantics as SSE (`?after=`),
//! entries as `ServerToViewer::Entry` frames, and inputs accepted in the other direction.
//!
//! Entries go out in batches of about [`WRITE_BATCH_BYTES`] from a [`Tail`] (one page of history
//! at most); a viewer that takes no write for the stall timeout is closed with `LAGGED`, and
//! resumes from its cursor.
//!
//! A transport: calls the session core, `access` and `viewing`; never `http` or `sse`.

use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use moor_protocol::error::ErrorCode;
use moor_protocol::web::{ServerToViewer, ViewerToServer};
use moor_protocol::{close, Seq, SessionId};

use crate::metrics::Transport;
use tokio::time::{interval, Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::{text, tune_viewer};

use crate::access::{AuthUser, Principal, Role};
use crate::error::ApiError;
use crate::session::cursor::check_cursor;
use crate::session::input::submit;
use crate::session::tail::Tail;
use crate::state::AppState;
use crate::viewing::{open_viewer_stream, Opened};

/// Upgrades after checking the token, the session and the cursor.
#[utoipa::path(
    get, path = "/sessions/{id}/ws", operation_id = "openViewerSocket", tag = "streams",
    params(
        ("id" = String, Path, description = "Session id or name"),
        ("after" = Option<u64>, Query, description = "Start after this seq (default 0)"),
        ("access_token" = Option<String>, Query, description = "The access token, for clients that cannot set headers (see the `access_token` security scheme)"),
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this seq; wins over `after`"),
    ),
    responses(
        (status = 101, description = "A viewer WebSocket: `ServerToViewer` frames out, `ViewerToServer` frames in (JSON text)"),
        (status = 400, description = "`invalid_cursor`: `after` or `Last-Event-ID` is not a seq number; or, as plain text, not a WebSocket upgrade request", content(
            (moor_protocol::error::ErrorBody = "application/json"),
            (String = "text/plain"),
        )),
        crate::openapi::LookupErrors,
        (status = 403, description = "A cross-origin WebSocket (an `Origin` not allowed)", content((String = "text/plain"))),
    )
)]
pub async fn upgrade(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    ws: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    let Opened {
        cursor,
        session,
        role,
        slot,
        stop,
        role_stop,
    } = open_viewer_stream(&state, &who, &key, &headers, query.as_deref()).await?;
    let viewer = Viewer {
        stop,
        role_stop,
        who,
        may_input: role >= Role::Controller,
    };
    let conns = state.conns.clone();
    let ws = tune_viewer(ws, &state.config);
    Ok(ws.on_upgrade(move |socket| {
        conns.track_future(async move {
            let _slot = slot;
            run(socket, state, viewer, session.id, cursor).await
        })
    }))
}

/// Who is on the other end of a viewer socket, and what they may do.
pub(crate) struct Viewer {
    who: Principal,
    /// Controller or owner: may send input.
    may_input: bool,
    /// Cancelled at shutdown and when the viewer's credential is revoked.
    stop: CancellationToken,
    /// Cancelled when the viewer's role on the session is removed or changed.
    role_stop: CancellationToken,
}

async fn run(socket: WebSocket, state: AppState, viewer: Viewer, session: SessionId, cursor: Seq) {
    let (tx, rx) = socket.split();
    serve(tx, rx, state, viewer, session, cursor).await
}

/// One viewer connection over any pair of socket halves (a WebSocket's, or in-memory channels
/// in tests).
#[tracing::instrument(skip_all, fields(session.id = %session))]
pub(crate) async fn serve<W, R>(
    tx: W,
    rx: R,
    state: AppState,
    viewer: Viewer,
    session: SessionId,
    cursor: Seq,
) where
    W: Sink<Message, Error = axum::Error> + Send + 'static,
    R: Stream<Item = Result<Message, axum::Error>> + Send + 'static,
{
    let (mut tx, mut rx) = super::halves(tx, rx);
    let mut tail = Tail::new(state.store.log.clone(), &state.hub, session, cursor)
        .page_bytes(state.config.max_page_bytes)
        .counted(Transport::Ws);
    let _watching = state.hub.watching(session);
    let _open = state.hub.metrics().viewer_open(Transport::Ws);
    let head = match state.store.log.find_session(&session.to_string()).await {
        Ok(s) => s.head_seq,
        Err(e) => {
            tracing::error!(error = ?e, "viewer socket could not read the session");
            return super::close(&mut tx, &mut rx, close::SERVER_ERROR, "store unavailable").await;
        }
    };
    if let Some(reset) = check_cursor(cursor, head) {
        let _ = tx.send(text(&ServerToViewer::Reset(reset))).await;
        return super::close(&mut tx, &mut rx, close::NORMAL, "cursor reset").await;
    }
    let cfg = state.config.clone();
    let mut heartbeat = interval(cfg.keepalive.max(Duration::from_millis(10)));
    heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last_rx = Instant::now();
    loop {
        tokio::select! {
            _ = viewer.role_stop.cancelled() => {
                // Also cancelled at shutdown (a child of its token): say which it was.
                if !state.shutdown.is_cancelled() {
                    return super::close(&mut tx, &mut rx, close::UNAUTHORIZED, "your role on this session changed; reconnect").await;
                }
                return super::close(&mut tx, &mut rx, close::GOING_AWAY, "server shutting down; reconnect").await;
            }
            _ = viewer.stop.cancelled() => {
                if !state.shutdown.is_cancelled() {
                    return super::close(&mut tx, &mut rx, close::UNAUTHORIZED, "credentials revoked").await;
                }
                return super::close(&mut tx, &mut rx, close::GOING_AWAY, "server shutting down; reconnect").await;
            }
            _ = tokio::time::sleep_until(last_rx + cfg.idle_timeout) => {
                return super::close(&mut tx, &mut rx, close::HEARTBEAT_TIMEOUT, "no frame within the idle timeout").await;
            }
            _ = heartbeat.tick() => {
                match tokio::time::timeout(cfg.stall_timeout, tx.send(text(&ServerToViewer::Heartbeat))).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return,
                    Err(_) => return lagged(&state, &mut tx, &mut rx).await,
                }
            }
            next = tail.next() => match next {
                Ok(f) => match tokio::time::timeout(cfg.stall_timeout, write_batch(&mut tx, &mut tail, f)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return,
                    Err(_) => return lagged(&state, &mut tx, &mut rx).await,
                },
                Err(e) => {
                    tracing::error!(error = ?e, "viewer tail failed");
                    return super::close(&mut tx, &mut rx, close::SERVER_ERROR, "store unavailable; reconnect").await;
                }
            },
            msg = rx.next() => {
                last_rx = Instant::now();
                let reply = match msg {
                    Some(Ok(Message::Text(t))) if super::too_big(&t, &cfg) => Err((close::MESSAGE_TOO_BIG, "frame over the size limit".to_owned())),
                    // Boxed: an input's submission is a large future that an idle viewer's
                    // task would otherwise carry inline for its whole life.
                    Some(Ok(Message::Text(t))) => Box::pin(on_frame(&state, &viewer, session, &t)).await,
                    Some(Ok(Message::Binary(_))) => Err((close::BAD_FRAME, "binary frames are not accepted".to_owned())),
                    Some(Ok(Message::Close(_))) | None => return,
                    Some(Ok(_)) => Ok(None),
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "viewer socket read failed");
                        return super::close(&mut tx, &mut rx, close::MESSAGE_TOO_BIG, "frame refused").await;
                    }
                };
                match reply {
                    Ok(Some(frame)) => if tx.send(text(&frame)).await.is_err() { return; },
                    Ok(None) => {}
                    Err((code, reason)) => return super::close(&mut tx, &mut rx, code, &reason).await,
                }
            }
        }
    }
}

/// Closes a viewer that took nothing for the stall timeout with `LAGGED`, waiting for the close
/// frame no longer than that either: it may not get through a full socket.
async fn lagged(state: &AppState, tx: &mut super::Tx, rx: &mut super::Rx) {
    state.hub.metrics().cut_off(Transport::Ws);
    let stall = state.config.stall_timeout;
    let closing = super::close(
        tx,
        rx,
        close::LAGGED,
        "viewer too slow; reconnect with your cursor",
    );
    let _ = tokio::time::timeout(stall, closing).await;
}

/// A batch of entries stops once it holds this many bytes (or 256 entries).
const WRITE_BATCH_BYTES: usize = 64 * 1024;

/// Writes `first` and the entries ready after it, up to a batch, and flushes.
async fn write_batch(
    tx: &mut super::Tx,
    tail: &mut Tail,
    first: std::sync::Arc<crate::hub::Frame>,
) -> Result<(), axum::Error> {
    let mut bytes = first.ws().len();
    tx.feed(Message::Text(first.ws().into())).await?;
    let mut count = 1;
    while count < 256 && bytes < WRITE_BATCH_BYTES {
        let Some(f) = tail.ready() else { break };
        bytes += f.ws().len();
        count += 1;
        tx.feed(Message::Text(f.ws().into())).await?;
    }
    tx.flush().await
}

/// Handles one frame from the viewer: an answer to send, or a close code and reason.
async fn on_frame(
    state: &AppState,
    viewer: &Viewer,
    session: SessionId,
    raw: &str,
) -> Result<Option<ServerToViewer>, (u16, String)> {
    let frame: ViewerToServer =
        serde_json::from_str(raw).map_err(|e| (close::BAD_FRAME, format!("bad frame: {e}")))?;
    match frame {
        ViewerToServer::Heartbeat => Ok(None),
        ViewerToServer::Input(req) if !viewer.may_input => Ok(Some(ServerToViewer::Error {
            code: ErrorCode::Forbidden,
            message: format!(
                "input {:?} refused: viewers cannot send input",
                req.client_msg_id
            ),
        })),
        ViewerToServer::Input(req) => {
            let id = req.client_msg_id.clone();
            Ok(Some(
                match submit(
                    &state.log,
                    &*state.store.log,
                    &state.leases,
                    &state.states,
                    session,
                    viewer.who.author(),
                    req,
                )
                .await
                {
                    Ok(accepted) => ServerToViewer::InputAccepted {
                        client_msg_id: id,
                        accepted,
                    },
                    Err(e) => ServerToViewer::Error {
                        code: e.status_and_code().1,
                        message: e.to_string(),
                    },
                },
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use moor_protocol::close;

    use super::*;
    use crate::state::testing;

    #[tokio::test]
    async fn a_silent_viewer_gets_heartbeats_at_the_keepalive_then_is_closed_at_the_idle_timeout() {
        // arrange
        let t = testing::state(|c| {
            c.keepalive = Duration::from_secs(15);
            c.idle_timeout = Duration::from_secs(40);
        })
        .await;
        let session = t
            .state
            .store
            .log
            .open_session("watched", None)
            .await
            .unwrap();
        let ((tx, rx), _to_server, mut from_server) = testing::socket();
        let viewer = Viewer {
            who: Principal::bootstrap(),
            may_input: false,
            stop: CancellationToken::new(),
            role_stop: CancellationToken::new(),
        };
        tokio::spawn(serve(
            tx,
            rx,
            t.state.clone(),
            viewer,
            session.id,
            Seq::ZERO,
        ));
        // The first heartbeat goes out at once, once the backlog (none) is read on real time.
        let first = from_server.recv().await;
        assert!(matches!(first, Some(Message::Text(_))), "{first:?}");
        // act: the viewer stays silent
        tokio::time::pause();
        let start = Instant::now();
        let mut seen = Vec::new();
        while let Some(m) = from_server.recv().await {
            let closed = matches!(m, Message::Close(_));
            seen.push((Instant::now() - start, m));
            if closed {
                break;
            }
        }
        // assert: heartbeats 15 and 30 s after the first, then the idle-timeout close 40 s after
        // the socket opened (nothing is written to the store on the way out, so the close is on
        // time). The timers started on real time, before the pause: the real time between the
        // first heartbeat and the pause (long on a loaded machine) comes off every time measured
        // from the pause, so the gaps between frames are what is exact.
        assert_eq!(seen.len(), 3, "{seen:?}");
        let beat = text(&ServerToViewer::Heartbeat);
        assert_eq!((&seen[0].1, &seen[1].1), (&beat, &beat), "{seen:?}");
        let about = |got: Duration, want: u64| {
            got.abs_diff(Duration::from_secs(want)) < Duration::from_millis(100)
        };
        // (The first no later than the keepalive after the pause, give or take the timer's
        // rounding of its deadline up to the next millisecond.)
        assert!(seen[0].0 < Duration::from_millis(15_100), "{seen:?}");
        assert!(about(seen[1].0 - seen[0].0, 15), "{seen:?}");
        // The close counts from the socket's start, the heartbeats from the first one sent: the
        // close comes 10 s after the second, less however late that first one went out (a few
        // milliseconds; more on a loaded machine).
        let to_close = seen[2].0 - seen[1].0;
        assert!(
            to_close > Duration::from_secs(9) && to_close < Duration::from_millis(10_100),
            "{seen:?}"
        );
        match &seen[2] {
            (_, Message::Close(Some(f))) => assert_eq!(f.code, close::HEARTBEAT_TIMEOUT),
            other => panic!("expected the close, got {other:?}"),
        }
    }
}
