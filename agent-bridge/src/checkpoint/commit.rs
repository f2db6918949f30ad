//! A checkpoint as git stores it: a commit under `refs/moor/checkpoints/<id>` whose message
//! carries [`CommitMeta`]. Taking (`snapshot`) writes this shape and describing reads it; both
//! depend on this module, never on each other's internals.

use moor_protocol::checkpoint::{CheckpointReason, SkippedFile};
use serde::{Deserialize, Serialize};

use super::git::{lossy_line, GitError, Repo};

/// Ref namespace of checkpoints.
pub const REF_PREFIX: &str = "refs/moor/checkpoints/";

/// What the commit message records beyond what git already has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommitMeta {
    /// Checkpoint id.
    pub id: String,
    /// Why it was taken.
    pub reason: CheckpointReason,
    /// ms since the epoch.
    pub created_at: i64,
    /// The session.
    pub session: String,
    /// Branch HEAD was on.
    pub branch: Option<String>,
    /// Operation in progress.
    pub repo_state: Option<String>,
    /// The work tree's path.
    pub work_tree: String,
    /// Files left out.
    pub skipped: Vec<SkippedFile>,
}

/// The commit a checkpoint id names, if it exists here.
pub fn checkpoint_commit(repo: &Repo, id: &str) -> Result<Option<String>, GitError> {
    let out = repo
        .git()
        .args([
            "rev-parse",
            "--verify",
            "-q",
            &format!("{REF_PREFIX}{id}^{{commit}}"),
        ])
        .run_allow(&[1])?;
    Ok(out.map(|o| lossy_line(&o)).filter(|s| !s.is_empty()))
}

/// Ids of the checkpoints in this repository, newest first.
pub fn list_ids(repo: &Repo) -> Result<Vec<String>, GitError> {
    let out = repo
        .git()
        .args([
            "for-each-ref",
            "--sort=-committerdate",
            "--format=%(refname)",
            REF_PREFIX,
        ])
        .run()?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| l.strip_prefix(REF_PREFIX))
        .map(str::to_owned)
        .collect())
}
