//! Viewer streams: what SSE events and viewer WebSocket frames carry.
//!
//! SSE: `id:` is the entry's seq, `event:` its kind, `data:` the [`crate::Entry`] as JSON. A
//! cursor the server cannot honour gets one `event: reset` whose data is a [`Reset`], and the
//! stream ends. Keep-alive comments (`: keep-alive`) come every keep-alive interval.

use serde::{Deserialize, Serialize};

use crate::api::{InputAccepted, InputRequest};
pub use crate::compaction::{Compacted, COMPACTED_KINDS};
use crate::entry::Entry;
use crate::error::ErrorCode;
use crate::ids::Seq;

/// SSE event name for [`Reset`].
pub const RESET_EVENT: &str = "reset";

/// The cursor cannot be honoured as it is. Without `compacted`, the stream ends: start again
/// from `head_seq` or from 0. With `compacted`, the stream goes on: entries after the cursor
/// were removed by compaction, and the kept ones follow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Reset {
    /// Why, in plain words.
    pub reason: String,
    /// The session's current head.
    pub head_seq: Seq,
    /// What compaction removed after the cursor, when that is the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub compacted: Option<Compacted>,
}

/// Frames a WebSocket viewer sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ViewerToServer {
    /// Post an input, as `POST /inputs` would.
    Input(InputRequest),
    /// Keep the connection alive.
    Heartbeat,
}

/// Frames the server sends to a WebSocket viewer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerToViewer {
    /// A log entry.
    Entry(Entry),
    /// The cursor cannot be honoured; the server closes after this frame.
    Reset(Reset),
    /// An input from this connection was stored.
    InputAccepted {
        /// The viewer's id for it.
        client_msg_id: String,
        /// Where it went.
        #[serde(flatten)]
        accepted: InputAccepted,
    },
    /// Keep-alive.
    Heartbeat,
    /// A frame was refused.
    Error {
        /// Machine-readable code.
        code: ErrorCode,
        /// What happened.
        message: String,
    },
}
