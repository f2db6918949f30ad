//! WebSocket ingress: the bridge link and viewer sockets. Upgrade, handshake, decode, dispatch,
//! close codes. Knows nothing about the storage dialect.

pub mod bridge;
pub mod viewer;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use futures_util::stream::SplitSink;
use futures_util::SinkExt;

use crate::config::ServerConfig;

/// Applies the configured limits and small buffers (axum's defaults cost ~130 KiB a socket).
pub(crate) fn tune(ws: WebSocketUpgrade, cfg: &ServerConfig) -> WebSocketUpgrade {
    ws.max_message_size(cfg.max_frame_bytes)
        .max_frame_size(cfg.max_frame_bytes)
        .read_buffer_size(4 * 1024)
        .write_buffer_size(0)
        .max_write_buffer_size(cfg.max_frame_bytes.saturating_mul(2).max(64 * 1024))
}

/// Sends a close frame; errors are ignored because the peer may already be gone.
pub(crate) async fn close(tx: &mut SplitSink<WebSocket, Message>, code: u16, reason: &str) {
    // Close reasons are limited to 123 bytes by the protocol.
    let mut reason = reason.to_owned();
    while reason.len() > 123 {
        reason.pop();
    }
    let _ = tx.send(Message::Close(Some(CloseFrame { code, reason: reason.into() }))).await;
    let _ = tx.close().await;
}

/// Serialises a frame for the wire.
pub(crate) fn text<T: serde::Serialize>(frame: &T) -> Message {
    Message::Text(serde_json::to_string(frame).unwrap_or_default().into())
}
