//! What `Bridge::run` can fail with: [`BridgeError`]. A single connection's failure is
//! [`crate::link::ConnectError`], owned by the link.

use std::path::PathBuf;

use crate::adapter::AdapterError;
use crate::link::ConnectError;
use crate::spool::SpoolError;

/// Why `moor run` failed.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// The configuration is unusable.
    #[error("{0}")]
    Config(String),
    /// Another `moor` holds this session's state directory.
    #[error(
        "another moor is already running session {session:?} with state dir {}; stop it first or use another --session",
        dir.display()
    )]
    Locked {
        /// The session as given.
        session: String,
        /// The locked directory.
        dir: PathBuf,
    },
    /// The session's state could not be opened or written.
    #[error("state dir {}: {source}", dir.display())]
    State {
        /// The directory involved.
        dir: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The spool failed.
    #[error("spool: {0}")]
    Spool(#[from] SpoolError),
    /// The agent could not be started or run.
    #[error(transparent)]
    Adapter(#[from] AdapterError),
    /// The link stopped for good (session ended elsewhere, superseded, revoked, ...).
    #[error(transparent)]
    Link(#[from] ConnectError),
}
