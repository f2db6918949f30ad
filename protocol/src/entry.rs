//! The log entry, the unit of everything Mooring stores and streams.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::Seq;

/// One stored entry of a session's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Entry {
    /// Position in the log, contiguous from 1.
    pub seq: Seq,
    /// Commit time, milliseconds since the Unix epoch.
    pub ts: i64,
    /// Namespaced kind (`agent.*`, `input.*`, `bridge.*`, `checkpoint.*`, `session.*`); see
    /// [`crate::kinds`]. Open-ended: clients keep and show kinds they do not know.
    pub kind: String,
    /// Who wrote it: `bridge`, `server`, or `user:<name>`.
    pub author: String,
    /// Kind-specific body.
    pub payload: Value,
}

/// An entry a bridge produced, before the server gave it a seq. Its payload is a JSON value;
/// `moord` reads it as the text it arrived in (`NewEntry<&RawValue>`, see
/// [`crate::bridge::Incoming`]), so what a bridge sent is what is stored, with no tree built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewEntry<P = Value> {
    /// The bridge's own counter, contiguous from 1 per `(session, producer)`; the idempotency key.
    pub producer_seq: u64,
    /// When the bridge saw it, milliseconds since the Unix epoch.
    pub ts: i64,
    /// Namespaced kind, see [`crate::kinds`].
    pub kind: String,
    /// Kind-specific body.
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub payload: P,
}
