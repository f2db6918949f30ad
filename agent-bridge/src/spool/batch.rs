//! What goes into the spool ([`Draft`], [`Record`]) and what comes back out ([`Batch`]).

use std::ops::Range;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use moor_protocol::payload::AgentPtyOutput;
use moor_protocol::{kinds, BodyError, EntryBody, NewEntry};
use serde_json::Value;

use super::segment::HEADER_LEN;
use super::SpoolError;

/// What the spool writes: an entry, spooled as its `NewEntry` JSON, or a piece of terminal
/// output, spooled as its raw bytes and read back as the `agent.pty.output` entry whose `data`
/// is their base64 (a third less to write and fsync, and no encoding until it is sent).
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// Any entry.
    Entry(Draft),
    /// An `agent.pty.output` entry, at most [`kinds::PTY_OUTPUT_MAX_BYTES`] of output.
    PtyOutput {
        /// When it was read, ms since the epoch.
        ts: i64,
        /// The bytes as the terminal gave them.
        bytes: Vec<u8>,
    },
}

impl From<Draft> for Record {
    fn from(draft: Draft) -> Self {
        Self::Entry(draft)
    }
}

/// First byte of a spooled [`Record::PtyOutput`]: `[PTY_OUTPUT][ts: i64 LE][bytes]`. A JSON
/// body starts with `{`, so the two never meet.
const PTY_OUTPUT: u8 = 0x01;
/// Bytes before the output in a spooled [`Record::PtyOutput`].
const PTY_HEAD: usize = 1 + 8;

impl Record {
    /// A piece of terminal output read now.
    pub fn pty_output(bytes: Vec<u8>) -> Self {
        Self::PtyOutput {
            ts: moor_protocol::now_ms(),
            bytes,
        }
    }

    /// The body spooled for this record with producer seq `seq`.
    pub(super) fn spooled(&self, seq: u64) -> serde_json::Result<Vec<u8>> {
        match self {
            Self::Entry(d) => serde_json::to_vec(&NewEntry {
                producer_seq: seq,
                ts: d.ts,
                kind: d.kind.clone(),
                payload: &d.payload,
            }),
            Self::PtyOutput { ts, bytes } => {
                let mut body = Vec::with_capacity(PTY_HEAD + bytes.len());
                body.push(PTY_OUTPUT);
                body.extend_from_slice(&ts.to_le_bytes());
                body.extend_from_slice(bytes);
                Ok(body)
            }
        }
    }
}

/// A spooled body as the `NewEntry` JSON it is, or `None` for raw terminal output, which
/// [`write_entry_json`] expands.
fn as_json(body: &[u8]) -> Option<&[u8]> {
    (body.first() != Some(&PTY_OUTPUT)).then_some(body)
}

/// Appends the `NewEntry` JSON of a spooled body with producer seq `seq` to `out`.
fn write_entry_json(seq: u64, body: &[u8], out: &mut Vec<u8>) -> Result<(), SpoolError> {
    if let Some(json) = as_json(body) {
        out.extend_from_slice(json);
        return Ok(());
    }
    let ts = body
        .get(1..PTY_HEAD)
        .and_then(|b| b.try_into().ok())
        .map(i64::from_le_bytes)
        .ok_or_else(|| SpoolError::Encode(format!("entry {seq}: a short terminal record")))?;
    let entry = NewEntry {
        producer_seq: seq,
        ts,
        kind: kinds::AGENT_PTY_OUTPUT.to_owned(),
        payload: AgentPtyOutput {
            data: STANDARD.encode(&body[PTY_HEAD..]),
        },
    };
    serde_json::to_writer(out, &entry).map_err(|e| SpoolError::Encode(e.to_string()))
}

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
    /// The batch of the records decoded from `buf` (their bodies at `bodies`, seqs from
    /// `first`): the spooled JSON as it lies in `buf`, or, when terminal output is among them,
    /// every entry's JSON written out afresh, as many as fit `max_bytes` (at least one).
    pub(super) fn decoded(
        first: u64,
        buf: Vec<u8>,
        bodies: Vec<Range<usize>>,
        max_bytes: usize,
    ) -> Result<Self, SpoolError> {
        if bodies.iter().all(|r| as_json(&buf[r.clone()]).is_some()) {
            return Ok(Self { first, buf, bodies });
        }
        let mut json = Vec::with_capacity(buf.len() * 4 / 3);
        let mut ranges = Vec::with_capacity(bodies.len());
        // Counted as `read_batch` counts spooled JSON, record headers included, so a batch ends
        // where it would had the output been spooled as JSON.
        let mut counted = 0;
        for (seq, body) in (first..).zip(&bodies) {
            let start = json.len();
            write_entry_json(seq, &buf[body.clone()], &mut json)?;
            counted += HEADER_LEN + json.len() - start;
            if counted > max_bytes && !ranges.is_empty() {
                json.truncate(start);
                break;
            }
            ranges.push(start..json.len());
        }
        Ok(Self {
            first,
            buf: json,
            bodies: ranges,
        })
    }

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
