//! Checkpoints of the agent's git work tree (G7): taken with git plumbing through a temporary
//! index, kept under `refs/moor/checkpoints/<id>`, announced in the log as `checkpoint.created`,
//! uploaded content-addressed, and restorable anywhere.
//!
//! [`Checkpoints`] is what `moor run` starts: one task takes checkpoints (at start, after each
//! tool call that may change files, every interval when something changed, when the link drops,
//! and when the agent exits), another uploads them and retries until the server has them. Neither
//! ever blocks the agent; a slow or unreachable server only delays uploads. The rest —
//! [`snapshot`], [`describe`], [`restore`], [`upload`] — is blocking and also serves
//! `moor checkpoints`.

pub mod cli;
pub mod client;
pub mod commit;
pub mod describe;
pub mod git;
pub mod restore;
mod run;
pub mod snapshot;
pub mod upload;

use std::path::PathBuf;
use std::time::Duration;

pub use run::{CheckpointContext, Checkpoints};

/// Default `--checkpoint-interval`.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(120);
/// Default `--checkpoint-max-file-size`: larger files are skipped and listed.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// The most a file may be and still be checkpointed (the server's blob limit).
pub const MAX_FILE_BYTES_LIMIT: u64 = 64 * 1024 * 1024;

/// Checkpoint knobs of `moor run`.
#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    /// Take one this often when something changed.
    pub interval: Duration,
    /// Skip (and list) files larger than this.
    pub max_file_bytes: u64,
    /// After the session ends, how long `moor` waits for uploads still running.
    pub upload_grace: Duration,
    /// First delay before retrying a failed upload; doubles up to a minute.
    pub retry_initial: Duration,
    /// Take the start checkpoint (and spool its entry) before the agent starts, so it holds
    /// the work tree as it was before the agent touched anything (`moor run
    /// --checkpoint-first`); otherwise it is taken while the agent starts.
    pub before_start: bool,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self {
            interval: DEFAULT_INTERVAL,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            upload_grace: Duration::from_secs(30),
            retry_initial: Duration::from_millis(500),
            before_start: false,
        }
    }
}

/// Checkpoint failures, in words a person can act on.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// git failed or printed something unexpected.
    #[error(transparent)]
    Git(#[from] git::GitError),
    /// The directory is not a git work tree.
    #[error(transparent)]
    Probe(#[from] git::ProbeError),
    /// No such checkpoint.
    #[error("no checkpoint {0}")]
    NotFound(String),
    /// git does not have an object a checkpoint names.
    #[error("git object {0} is missing from this repository")]
    MissingObject(String),
    /// The base commit is not in this clone.
    #[error("the checkpoint's base commit {0} is not in this repository: fetch it first (git fetch origin {0}) or clone the repository the checkpoint was taken in")]
    BaseMissing(String),
    /// A merge or rebase is in progress.
    #[error("a {operation} is in progress in {}: finish or abort it first, or restore elsewhere with --branch NAME or --worktree PATH; nothing was changed", work_tree.display())]
    Busy {
        /// merge, rebase, …
        operation: String,
        /// Where.
        work_tree: PathBuf,
    },
    /// Restoring would destroy something not saved.
    #[error("{0}")]
    Unsafe(String),
    /// Content does not match its hash.
    #[error("corrupt checkpoint data: {0}; nothing was written to the work tree")]
    Corrupt(String),
    /// The server refused or could not be reached.
    #[error("{0}")]
    Server(String),
}

#[cfg(test)]
mod tests;
