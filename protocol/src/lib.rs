//! Wire types shared by `moord`, `moor` and the web client.
//!
//! This crate holds data and pure logic only: no async runtime, no framework. Every frame that
//! crosses a socket and every HTTP body is defined here, so both ends agree by construction.
#![warn(missing_docs)]

pub mod api;
pub mod bridge;
pub mod checkpoint;
pub mod close;
pub mod debug;
pub mod entry;
pub mod error;
pub mod ids;
pub mod kinds;
pub mod manifest;
pub mod notify;
pub mod payload;
pub mod recovery;
pub mod state;
pub mod transcript;
pub mod web;
pub mod work;

pub use entry::{Entry, NewEntry};
pub use error::ErrorCode;
pub use ids::{ProducerId, Seq, SessionId};
pub use payload::{BodyError, EntryBody};

/// Version of the bridge and viewer wire protocol. Sent in the first frame of every connection;
/// a peer with a different major version is refused with [`close::VERSION_MISMATCH`].
pub const PROTOCOL_VERSION: u32 = 1;

/// Current wall-clock time as milliseconds since the Unix epoch, the unit of every `ts` field.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
