//! What compaction removed from a log, as a reader is told it (in a replay page and in a
//! `reset`).

use serde::{Deserialize, Serialize};

use crate::ids::Seq;

/// Entries of the [`COMPACTED_KINDS`] with seq in `(after, through]` are no longer stored;
/// every other entry of that range is, and follows in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Compacted {
    /// The reader's cursor.
    pub after: Seq,
    /// The last seq compaction has gone through.
    pub through: Seq,
    /// The kinds removed from that range.
    pub kinds: Vec<String>,
    /// Entries compaction has removed from this session in all.
    pub entries: u64,
    /// Bytes of payload compaction has removed from this session in all.
    pub bytes: u64,
}

/// The entry kinds compaction removes: raw terminal output and streamed text deltas. The
/// complete texts, tool records, inputs and their receipts, state snapshots and checkpoints stay.
pub const COMPACTED_KINDS: [&str; 2] = [
    crate::kinds::AGENT_PTY_OUTPUT,
    crate::kinds::AGENT_TEXT_DELTA,
];
