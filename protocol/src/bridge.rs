//! Frames between a bridge (`moor`) and `moord` on `GET /api/v1/bridge`, all JSON text frames.
//!
//! Flow: the bridge sends [`BridgeToServer::Hello`]; the server answers
//! [`ServerToBridge::Welcome`] with its producer mark and the inputs still to deliver. The bridge
//! then sends its spool above the mark in [`BridgeToServer::Entries`] batches, and the server acks
//! each batch with [`ServerToBridge::Ack`] once it has committed. Both sides send
//! `Heartbeat` every `heartbeat_interval_ms` and close a connection that stays silent for
//! `idle_timeout_ms`.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::entry::{Entry, NewEntry};
use crate::error::ErrorCode;
use crate::ids::{ProducerId, Seq, SessionId};

/// Frames the bridge sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BridgeToServer {
    /// First frame of every connection.
    Hello(Hello),
    /// A batch of spooled entries, producer seqs contiguous and ascending.
    Entries {
        /// The entries, in producer order.
        entries: Vec<NewEntry>,
    },
    /// The bridge received, applied or failed to apply an input.
    Receipt {
        /// The input's seq in the log.
        input_seq: Seq,
        /// What happened to it.
        status: ReceiptStatus,
    },
    /// Sent every heartbeat interval when nothing else is sent, and also while the bridge's
    /// spool depth changed since it last said (at most once an interval), and right after the
    /// welcome when entries wait in the spool.
    Heartbeat {
        /// Entries in the bridge's spool that the server has not acknowledged yet (absent from
        /// bridges that do not report it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spool_unacked: Option<u64>,
    },
    /// The agent is gone and everything it produced has been acked: end the session.
    End,
}

/// The bridge's opening frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Hello {
    /// [`crate::PROTOCOL_VERSION`] of the bridge.
    pub version: u32,
    /// Session name or id to attach to; created if it is a name not seen before.
    pub session: String,
    /// This bridge's producer identity (kept on its disk with the spool).
    pub producer: ProducerId,
    /// The highest input seq the bridge has applied (or given up on).
    pub last_applied_input: Seq,
    /// Inputs whose application was interrupted by a bridge crash: they may or may not have
    /// reached the agent, and the bridge will not replay them.
    #[serde(default)]
    pub uncertain_inputs: Vec<Seq>,
    /// What the bridge runs.
    pub agent: AgentInfo,
    /// The ended session this one continues (`moor resume`); the server links the two logs
    /// when this handshake creates the session and the bridge's user owns the ended one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<SessionId>,
}

/// What a bridge runs and where.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentInfo {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Working directory of the agent.
    pub cwd: String,
    /// Host name of the bridge's machine.
    pub host: String,
    /// Adapter in use (`lines`, `pty`, `claude`).
    pub adapter: String,
}

/// What happened to an input on the bridge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ReceiptStatus {
    /// The bridge has it.
    Delivered,
    /// Written to the agent.
    Applied,
    /// Could not be applied.
    Failed {
        /// Why, in plain words.
        reason: String,
    },
}

/// A bridge frame as `moord` reads it. An `Entries` frame is read without building its
/// payloads: each stays the JSON text it arrived in, borrowed from the frame, so storing and
/// relaying it costs a copy, not a parse and an encoding. Every other frame is read whole.
#[derive(Debug)]
pub enum Incoming<'a> {
    /// The entries of a [`BridgeToServer::Entries`] frame, payloads as sent.
    Entries(Vec<NewEntry<&'a RawValue>>),
    /// Any other frame.
    Other(BridgeToServer),
}

impl<'a> Incoming<'a> {
    /// Reads one text frame. An `Entries` frame yields the entries that reading it as a
    /// [`BridgeToServer`] yields, each payload as its text
    /// (`incoming_reads_entries_as_the_frame_type_does`).
    pub fn read(text: &'a str) -> serde_json::Result<Self> {
        /// The frame's tag alone; every other field is skipped unread.
        #[derive(Deserialize)]
        struct Tag<'t> {
            #[serde(rename = "type", borrow)]
            kind: std::borrow::Cow<'t, str>,
        }
        /// An `Entries` frame's body, read straight into its fields (the derived reader of the
        /// tagged [`BridgeToServer`] buffers the whole frame first, and cannot keep raw text).
        #[derive(Deserialize)]
        struct Entries<'e> {
            #[serde(borrow)]
            entries: Vec<NewEntry<&'e RawValue>>,
        }
        // Bridges write the tag first; only another order needs the tag read on its own.
        let entries = text.starts_with(r#"{"type":"entries","#)
            || serde_json::from_str::<Tag<'_>>(text).is_ok_and(|tag| tag.kind == "entries");
        match entries {
            true => serde_json::from_str::<Entries<'a>>(text).map(|e| Self::Entries(e.entries)),
            false => serde_json::from_str(text).map(Self::Other),
        }
    }
}

/// Frames the server sends to a bridge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerToBridge {
    /// Answer to `Hello`.
    Welcome(Welcome),
    /// Every producer seq up to and including this one is committed.
    Ack {
        /// Highest committed producer seq of this bridge.
        producer_seq: u64,
    },
    /// A remote input for the agent.
    Input {
        /// The input entry as stored.
        entry: Entry,
    },
    /// Sent every heartbeat interval when nothing else is sent.
    Heartbeat,
    /// Open a new connection now; this one will close soon (lifetime cap or server drain).
    Move {
        /// Why, in plain words.
        reason: String,
        /// Milliseconds until the server closes this connection.
        close_in_ms: u64,
    },
    /// Sent just before the server closes the connection because of an error.
    Error {
        /// Machine-readable code.
        code: ErrorCode,
        /// What happened.
        message: String,
    },
}

/// The server's answer to `Hello`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Welcome {
    /// [`crate::PROTOCOL_VERSION`] of the server.
    pub version: u32,
    /// The session's id.
    pub session_id: SessionId,
    /// The session's name.
    pub session_name: String,
    /// Highest producer seq stored for this bridge; resend everything above it.
    pub producer_mark: u64,
    /// Inputs with seq above `last_applied_input`, oldest first.
    pub pending_inputs: Vec<Entry>,
    /// How often each side sends a heartbeat.
    pub heartbeat_interval_ms: u64,
    /// Silence longer than this means the connection is dead.
    pub idle_timeout_ms: u64,
    /// The server closes a connection after this long (0 = never); expect `Move` before it.
    pub max_lifetime_ms: u64,
    /// The largest frame the server takes from the bridge, in bytes; a larger one is closed
    /// with 1009. 0: not said (a server older than this field).
    #[serde(default)]
    pub max_frame_bytes: u64,
    /// Where people can watch this session.
    pub web_url: String,
}
