//! `moor`, the Mooring bridge: runs next to a coding agent, turns what it does into log entries
//! spooled durably on disk, streams them to `moord` over a self-healing WebSocket, and applies
//! remote input to the agent.
//!
//! [`Bridge`] is the whole of `moor run`; its parts are public so tests and benchmarks can drive
//! them directly: [`spool::Spool`] (append entries, watch the acked mark) and [`link::Link`]
//! (the reconnecting socket), with no agent process involved.
#![warn(missing_docs, unreachable_pub)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod adapter;
pub mod backoff;
mod bridge;
pub mod checkpoint;
pub mod cli;
pub mod config;
pub mod error;
pub mod host;
pub mod inputs;
pub mod link;
pub mod login;
pub mod metrics;
pub mod recover;
pub mod session_dir;
pub mod spool;
pub mod status;
pub mod tls;

pub use bridge::{run, Bridge, BridgeExit, BridgeHandle};
pub use config::{BridgeConfig, LinkConfig, Token};
pub use error::BridgeError;
pub use link::ConnectError;
