//! One connection's lifetime: connect, `Hello`/`Welcome`, then a single `select!` over incoming
//! frames, spool entries, receipts, heartbeats, the idle watchdog and shutdown.
//!
//! Every send is bounded by the idle timeout, so a half-open socket whose send buffer filled up
//! is detected as dead instead of hanging the loop (G5).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use moor_protocol::bridge::{BridgeToServer, Hello, ReceiptStatus, ServerToBridge, Welcome};
use moor_protocol::{kinds, Entry, PROTOCOL_VERSION};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::error::{Error as WsError, UrlError};
use tokio_tungstenite::tungstenite::handshake::client::Request;
use tokio_tungstenite::tungstenite::http::header::AUTHORIZATION;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use super::error::ConnectError;
use super::frames::{batch_budget, decode, encode, entries_message, entry_room, Incoming};
use super::{Closed, Io, Link, Ws};
use crate::spool::Spool;

/// How long a polite close on shutdown may take.
const CLOSE_GRACE: Duration = Duration::from_millis(250);
/// How long to look for an already-received close frame after a send failed.
const POST_MORTEM_READ: Duration = Duration::from_millis(100);

fn millis(d: Duration) -> u128 {
    d.as_millis()
}

impl Link {
    /// Run one connection until it ends. `retiring` is a socket the server asked us to leave;
    /// it is dropped once this connection is welcomed, so it serves until the last moment.
    pub(super) async fn try_session(
        &mut self,
        shutdown: &CancellationToken,
        retiring: Option<Box<Ws>>,
    ) -> Result<Closed, ConnectError> {
        self.welcomed_at = None;
        let limit = self.p.config.connect_timeout;
        let (mut ws, welcome) = tokio::select! {
            _ = shutdown.cancelled() => return Ok(Closed::Shutdown),
            r = tokio::time::timeout(limit, self.handshake()) => {
                r.map_err(|_| ConnectError::ConnectTimeout(millis(limit)))??
            }
        };
        drop(retiring);
        self.welcomed_at = Some(Instant::now());
        self.on_welcome(&mut ws, &welcome).await?;
        self.pump(ws, &welcome, shutdown).await
    }

    /// Connect, say `Hello`, and wait for `Welcome`.
    async fn handshake(&mut self) -> Result<(Ws, Welcome), ConnectError> {
        let mut request = self.url().into_client_request()?;
        let bearer = HeaderValue::from_str(&format!("Bearer {}", self.p.token.expose()))
            .map_err(|_| ConnectError::InvalidToken)?;
        request.headers_mut().insert(AUTHORIZATION, bearer);
        let stream = self.dial_server(&request).await?;
        let connector = crate::tls::ws_connector();
        let (mut ws, _response) =
            tokio_tungstenite::client_async_tls_with_config(request, stream, None, connector)
                .await?;
        let hello = BridgeToServer::Hello(Hello {
            version: PROTOCOL_VERSION,
            session: self.p.session.clone(),
            producer: self.p.producer,
            last_applied_input: self.p.ledger.last_applied(),
            uncertain_inputs: self.p.ledger.uncertain(),
            agent: self.p.agent.clone(),
            continues: self.p.continues,
        });
        ws.send(encode(&hello)?).await?;
        let mut last_error = String::new();
        loop {
            let msg = ws.next().await.ok_or(ConnectError::Closed {
                code: 1006,
                detail: String::new(),
            })??;
            match decode(msg) {
                Incoming::Frame(frame) => match *frame {
                    ServerToBridge::Welcome(welcome) => return Ok((ws, welcome)),
                    ServerToBridge::Error { code, message } => {
                        last_error = format!("{code:?}: {message}")
                    }
                    ServerToBridge::Heartbeat => {}
                    other => {
                        return Err(ConnectError::BadFrame(format!(
                            "expected welcome, got {other:?}"
                        )))
                    }
                },
                Incoming::Close(code, reason) => {
                    return Err(ConnectError::from_close(
                        code,
                        if reason.is_empty() {
                            last_error
                        } else {
                            reason
                        },
                    ))
                }
                Incoming::Other => {}
            }
        }
    }

    /// The byte stream to the server `request` goes to (port by scheme when the URL has none).
    async fn dial_server(&self, request: &Request) -> Result<Box<dyn Io>, ConnectError> {
        let uri = request.uri();
        let bad_url = |e| ConnectError::from(WsError::Url(e));
        let host = uri.host().ok_or_else(|| bad_url(UrlError::NoHostName))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = match (uri.port_u16(), uri.scheme_str()) {
            (Some(port), _) => port,
            (None, Some("wss")) => 443,
            (None, Some("ws")) => 80,
            (None, _) => return Err(bad_url(UrlError::UnsupportedUrlScheme)),
        };
        self.dial
            .dial(host, port)
            .await
            .map_err(|e| ConnectError::from(WsError::Io(e)))
    }

    /// Check the welcome, trim the spool to the server's mark, and take the pending inputs.
    async fn on_welcome(&mut self, ws: &mut Ws, welcome: &Welcome) -> Result<(), ConnectError> {
        if welcome.version != PROTOCOL_VERSION {
            return Err(ConnectError::VersionMismatch {
                ours: PROTOCOL_VERSION,
                server: welcome.version,
            });
        }
        let dropped_upto = self.p.spool.dropped_upto();
        if welcome.producer_mark < dropped_upto {
            return Err(ConnectError::ServerBehind {
                mark: welcome.producer_mark,
                dropped_upto,
            });
        }
        self.p.spool.resume_after(welcome.producer_mark)?;
        if let Err(e) = self.p.ledger.uncertain_reported() {
            tracing::warn!(error = %e, "could not record that uncertain inputs were reported");
        }
        self.session_id.send_replace(Some(welcome.session_id));
        let resend = self.p.spool.durable().saturating_sub(welcome.producer_mark);
        self.p.status.connected(welcome, resend);
        let idle = Self::timings(welcome.heartbeat_interval_ms, welcome.idle_timeout_ms).1;
        for entry in &welcome.pending_inputs {
            self.deliver(ws, entry.clone(), idle).await?;
        }
        Ok(())
    }

    /// Acknowledge receipt of an input and queue it for the adapter.
    async fn deliver(
        &mut self,
        ws: &mut Ws,
        entry: Entry,
        idle: Duration,
    ) -> Result<(), ConnectError> {
        if !kinds::is_input(&entry.kind) || entry.seq <= self.p.ledger.last_applied() {
            tracing::debug!(seq = %entry.seq, kind = %entry.kind, "not delivering");
            return Ok(());
        }
        let receipt = BridgeToServer::Receipt {
            input_seq: entry.seq,
            status: ReceiptStatus::Delivered,
        };
        send(ws, encode(&receipt)?, idle).await?;
        // The receiver is gone only when nobody applies inputs any more (a benchmark).
        let _ = self.inputs_tx.send(entry);
        Ok(())
    }

    /// The connected loop.
    async fn pump(
        &mut self,
        mut ws: Ws,
        welcome: &Welcome,
        shutdown: &CancellationToken,
    ) -> Result<Closed, ConnectError> {
        let (heartbeat_every, idle) =
            Self::timings(welcome.heartbeat_interval_ms, welcome.idle_timeout_ms);
        let mut heartbeat =
            tokio::time::interval_at(Instant::now() + heartbeat_every, heartbeat_every);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let watchdog = tokio::time::sleep(idle);
        tokio::pin!(watchdog);
        let spool = self.p.spool.clone();
        let mut durable_rx = spool.subscribe_durable();
        // Batches fit the server's frame limit: a larger frame is closed with 1009, and the
        // same batch would be sent again on every reconnect.
        let (window, batch_max, batch_bytes, entry_bytes) = (
            self.p.config.window.max(1),
            self.p.config.batch_max.max(1),
            batch_budget(self.p.config.batch_max_bytes, welcome.max_frame_bytes),
            entry_room(welcome.max_frame_bytes),
        );
        // Highest seq sent on this connection; the server holds everything up to its mark.
        let mut sent = welcome.producer_mark;
        let mut last_tx = Instant::now();
        let mut end_sent_here = false;
        let mut finish_open = true;
        let mut last_error = String::new();
        // The spool depth the server last heard from this connection (a fresh link holds none):
        // told at once when entries wait, then on a heartbeat tick whenever it changed.
        let mut reported = 0;
        if spool.unacked() > 0 {
            reported = report_spool(&mut ws, &spool, idle).await?;
            last_tx = Instant::now();
        }
        loop {
            let durable = *durable_rx.borrow_and_update();
            let acked = spool.acked();
            let in_flight = sent.saturating_sub(acked);
            let can_send = sent < durable && in_flight < window;
            // Receipts first: once the session has ended there is no next `Hello` to re-derive them.
            let all_told = acked >= durable && sent >= durable && self.receipts_rx.is_empty();
            if *self.finish_rx.borrow() && !end_sent_here && all_told {
                send(&mut ws, encode(&BridgeToServer::End)?, idle).await?;
                self.end_sent = true;
                end_sent_here = true;
            }
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => {
                    let _ = tokio::time::timeout(CLOSE_GRACE, ws.close(None)).await;
                    return Ok(Closed::Shutdown);
                }
                msg = ws.next() => {
                    watchdog.as_mut().reset(Instant::now() + idle);
                    let msg = msg.ok_or(ConnectError::Closed { code: 1006, detail: String::new() })??;
                    let frame = match decode(msg) {
                        Incoming::Frame(frame) => *frame,
                        Incoming::Close(code, reason) => {
                            return Err(ConnectError::from_close(code, if reason.is_empty() { last_error } else { reason }));
                        }
                        Incoming::Other => continue,
                    };
                    match frame {
                        ServerToBridge::Ack { producer_seq } => spool.ack(producer_seq)?,
                        ServerToBridge::Input { entry } => self.deliver(&mut ws, entry, idle).await?,
                        ServerToBridge::Heartbeat => {}
                        ServerToBridge::Move { reason, close_in_ms } => {
                            tracing::info!(%reason, close_in_ms, "server asked to move");
                            self.p.status.moving(&reason);
                            return Ok(Closed::Moved(Box::new(ws)));
                        }
                        ServerToBridge::Error { code, message } => {
                            tracing::warn!(?code, %message, "server reported an error");
                            last_error = format!("{code:?}: {message}");
                        }
                        ServerToBridge::Welcome(_) => tracing::warn!("ignoring a second welcome"),
                    }
                }
                Some(receipt) = self.receipts_rx.recv() => {
                    let frame = BridgeToServer::Receipt { input_seq: receipt.input_seq, status: receipt.status };
                    send(&mut ws, encode(&frame)?, idle).await?;
                    last_tx = Instant::now();
                }
                _ = heartbeat.tick() => {
                    // Anything sent recently already proves we are alive; a changed spool depth
                    // is told anyway, at most once an interval.
                    if last_tx.elapsed() >= heartbeat_every / 2 || spool.unacked() != reported {
                        reported = report_spool(&mut ws, &spool, idle).await?;
                        last_tx = Instant::now();
                    }
                }
                () = &mut watchdog => return Err(ConnectError::Idle(millis(idle))),
                () = std::future::ready(()), if can_send => {
                    let room = usize::try_from(window - in_flight).unwrap_or(usize::MAX).min(batch_max);
                    if let Some(batch) = spool.read_batch(sent + 1, room, batch_bytes)? {
                        send(&mut ws, entries_message(&batch, entry_bytes)?, idle).await?;
                        sent = batch.last();
                        last_tx = Instant::now();
                    }
                }
                _ = durable_rx.changed(), if !can_send => {}
                changed = self.finish_rx.changed(), if finish_open => finish_open = changed.is_ok(),
            }
        }
    }
}

/// Sends a heartbeat carrying the spool's depth; returns the depth told.
async fn report_spool(ws: &mut Ws, spool: &Spool, limit: Duration) -> Result<u64, ConnectError> {
    let depth = spool.unacked();
    let frame = BridgeToServer::Heartbeat {
        spool_unacked: Some(depth),
    };
    send(ws, encode(&frame)?, limit).await?;
    Ok(depth)
}

/// Send one message, treating a send that cannot complete within `limit` as a dead link.
async fn send(ws: &mut Ws, msg: Message, limit: Duration) -> Result<(), ConnectError> {
    match tokio::time::timeout(limit, ws.send(msg)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(close_behind(ws).await.unwrap_or_else(|| err.into())),
        Err(_) => Err(ConnectError::SendStalled(millis(limit))),
    }
}

/// After a failed send, look for a close frame that already arrived. A server that closes
/// while we stream (say with 4003, superseded) may reset the TCP connection; our next write
/// then fails before we ever read its close frame, and the close code, which decides between
/// reconnecting and stopping, would be lost.
async fn close_behind(ws: &mut Ws) -> Option<ConnectError> {
    for _ in 0..64 {
        match tokio::time::timeout(POST_MORTEM_READ, ws.next()).await {
            Ok(Some(Ok(msg))) => {
                if let Incoming::Close(code, reason) = decode(msg) {
                    return Some(ConnectError::from_close(code, reason));
                }
            }
            _ => return None,
        }
    }
    None
}
