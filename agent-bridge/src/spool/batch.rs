//! What goes into the spool ([`Draft`]) and what comes back out ([`Batch`]).

use std::ops::Range;

use moor_protocol::{BodyError, EntryBody, NewEntry};
use serde_json::Value;

use super::SpoolError;

/// An entry to spool; the spool assigns its producer seq.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    /// When it happened, ms since the epoch.
    pub ts: i64,
    /// Entry kind, see `moor_protocol::kinds`.
    pub kind: String,
    /// Kind-specific body.
    pub payload: Value,
}

impl Draft {
    /// A draft of `body`'s kind and payload, stamped with the current time.
    pub fn new(body: impl Into<EntryBody>) -> Self {
        Self::at(moor_protocol::now_ms(), body)
    }

    /// A draft of `body` stamped `ts`.
    pub fn at(ts: i64, body: impl Into<EntryBody>) -> Self {
        let (kind, payload) = body.into().to_parts();
        Self { ts, kind, payload }
    }

    /// The typed body, as [`moor_protocol::Entry::body`].
    pub fn body(&self) -> Result<EntryBody, BodyError> {
        EntryBody::decode(&self.kind, &self.payload)
    }
}

/// Contiguous records read back from the spool, as the exact JSON bytes that were spooled.
#[derive(Debug)]
pub struct Batch {
    pub(super) first: u64,
    pub(super) buf: Vec<u8>,
    pub(super) bodies: Vec<Range<usize>>,
}

impl Batch {
    /// Seq of the first entry.
    pub fn first(&self) -> u64 {
        self.first
    }

    /// Seq of the last entry.
    pub fn last(&self) -> u64 {
        self.first + self.bodies.len() as u64 - 1
    }

    /// Number of entries (never 0).
    pub fn len(&self) -> usize {
        self.bodies.len()
    }

    /// Always false: an empty read yields no batch.
    pub fn is_empty(&self) -> bool {
        self.bodies.is_empty()
    }

    /// Each entry's `NewEntry` JSON, in seq order.
    pub fn bodies(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.bodies.iter().map(|r| &self.buf[r.clone()])
    }

    /// The entries decoded.
    pub fn entries(&self) -> Result<Vec<NewEntry>, SpoolError> {
        self.bodies()
            .map(|b| serde_json::from_slice(b).map_err(|e| SpoolError::Encode(e.to_string())))
            .collect()
    }
}
