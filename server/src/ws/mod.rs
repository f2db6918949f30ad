//! WebSocket ingress: the bridge link and viewer sockets. Upgrade, handshake, decode, dispatch,
//! close codes. Knows nothing about the storage dialect. A transport: calls the session core,
//! `access` and the hub, never `http` or `sse`. The loops run over [`Tx`]/[`Rx`], so tests drive
//! them in memory on paused time.

pub mod bridge;
pub mod viewer;

use std::future::Future;
use std::pin::Pin;

use axum::extract::ws::{CloseFrame, Message, WebSocketUpgrade};
use futures_util::{Sink, SinkExt, Stream, StreamExt};

use crate::config::ServerConfig;

/// Messages up to this many times the configured limit are read whole and refused with a clean
/// 1009 close; only larger ones hit the transport's hard limit, which cannot be answered as
/// cleanly because the rest of the frame is left unread.
const HARD_LIMIT_FACTOR: usize = 8;

/// The sending half of a socket the connection loops write to: a WebSocket's, or an in-memory
/// channel's in tests (the loops never know which).
pub(crate) type Tx = Pin<Box<dyn Sink<Message, Error = axum::Error> + Send>>;
/// The receiving half of a socket the connection loops read from.
pub(crate) type Rx = Pin<Box<dyn Stream<Item = Result<Message, axum::Error>> + Send>>;

/// Boxes the two halves of a socket for the connection loops.
pub(crate) fn halves<W, R>(tx: W, rx: R) -> (Tx, Rx)
where
    W: Sink<Message, Error = axum::Error> + Send + 'static,
    R: Stream<Item = Result<Message, axum::Error>> + Send + 'static,
{
    (Box::pin(tx), Box::pin(rx))
}

/// Applies the configured limits and small buffers (axum's defaults cost ~130 KiB a socket).
pub(crate) fn tune(ws: WebSocketUpgrade, cfg: &ServerConfig) -> WebSocketUpgrade {
    let hard = cfg.max_frame_bytes.saturating_mul(HARD_LIMIT_FACTOR);
    ws.max_message_size(hard)
        .max_frame_size(hard)
        .read_buffer_size(4 * 1024)
        .write_buffer_size(0)
        .max_write_buffer_size(cfg.max_frame_bytes.saturating_mul(2).max(64 * 1024))
}

/// Read buffer of a viewer socket. Viewers send small frames (inputs, pings), and tungstenite
/// zero-fills its read buffer to full capacity before every read, so every idle viewer keeps
/// all of it resident: 512 bytes instead of the 4 KiB bridges get for their large batches (a
/// larger frame is read in several reads, into a buffer grown for it).
const VIEWER_READ_BUFFER_BYTES: usize = 512;

/// [`tune`] for a viewer socket: a smaller read buffer.
pub(crate) fn tune_viewer(ws: WebSocketUpgrade, cfg: &ServerConfig) -> WebSocketUpgrade {
    tune(ws, cfg).read_buffer_size(VIEWER_READ_BUFFER_BYTES)
}

/// How long a closing side waits for the peer's answering close frame.
const CLOSE_LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// Sends a close frame, then reads (and discards) until the peer answers or hangs up.
///
/// Dropping the socket straight after the close frame would let the kernel answer the peer's
/// unread bytes with a TCP reset, which can overtake the close frame: the peer would see a reset
/// instead of the code, and retry where it should have stopped (superseded, content mismatch).
///
/// Boxed: a connection closes once, and its task should not carry this future inline for its
/// whole life.
pub(crate) fn close<'a>(
    tx: &'a mut Tx,
    rx: &'a mut Rx,
    code: u16,
    reason: &str,
) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
    // Close reasons are limited to 123 bytes by the protocol.
    let reason = reason.to_owned();
    Box::pin(close_inline(tx, rx, code, reason))
}

async fn close_inline(tx: &mut Tx, rx: &mut Rx, code: u16, mut reason: String) {
    while reason.len() > 123 {
        reason.pop();
    }
    if tx
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })))
        .await
        .is_ok()
    {
        let _ = tokio::time::timeout(CLOSE_LINGER, async {
            loop {
                match rx.next().await {
                    Some(Ok(Message::Close(_))) | None => break,
                    Some(Ok(_)) => {}
                    // The stream is unusable (e.g. a frame over the hard limit is half read):
                    // give the peer a moment to read our close before the reset it may cause.
                    Some(Err(_)) => {
                        tokio::time::sleep(CLOSE_LINGER / 4).await;
                        break;
                    }
                }
            }
        })
        .await;
    }
    let _ = tx.close().await;
}

/// Whether a received text message exceeds the configured limit.
pub(crate) fn too_big(text: &str, cfg: &ServerConfig) -> bool {
    text.len() > cfg.max_frame_bytes
}

/// Serialises a frame for the wire.
pub(crate) fn text<T: serde::Serialize>(frame: &T) -> Message {
    Message::Text(serde_json::to_string(frame).unwrap_or_default().into())
}
