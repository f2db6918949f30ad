//! Bringing a checkpoint back: rebuilding its commit from the server's blobs (every object id
//! checked, so a corrupted download is caught, never written), and restoring it without
//! destroying anything — in place after a safety checkpoint of what is there now, onto a new
//! branch, or into a new worktree.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use moor_protocol::checkpoint::{BlobRef, CheckpointManifest, CheckpointReason};

use super::commit::{checkpoint_commit, REF_PREFIX};
use super::describe::{changes, sha256_hex, GITLINK};
use super::git::{lossy_line, GitError, Repo};
use super::snapshot::{take, TakeOptions, Taken, TempIndex};
use super::CheckpointError;

/// Where a restore puts the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Into this work tree, after a safety checkpoint of what is there now. Refused while a
    /// merge or rebase is in progress, or when it would overwrite a file that the safety
    /// checkpoint could not hold (ignored or over the size cap) unless `force`.
    InPlace {
        /// Overwrite ignored files in the way.
        force: bool,
    },
    /// A new branch at the checkpoint commit; the work tree is not touched.
    Branch(String),
    /// A new linked worktree at `path` checked out at the checkpoint (on a new branch if given).
    Worktree {
        /// Where.
        path: PathBuf,
        /// New branch name, else a detached HEAD.
        branch: Option<String>,
    },
}

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The checkpoint commit.
    pub commit: String,
    /// The safety checkpoint taken first (in-place restores).
    pub safety: Option<String>,
    /// Files written.
    pub written: usize,
    /// Files removed.
    pub removed: usize,
}

/// Rebuilds checkpoint `manifest` in `repo` from its blobs, checking every object id against
/// the manifest, and points `refs/moor/checkpoints/<id>` at it. Returns the commit.
pub fn import(
    repo: &Repo,
    manifest: &CheckpointManifest,
    mut blob: impl FnMut(&BlobRef) -> Result<Vec<u8>, CheckpointError>,
) -> Result<String, CheckpointError> {
    if let Some(existing) = checkpoint_commit(repo, &manifest.id)? {
        if existing != manifest.commit {
            return Err(CheckpointError::Corrupt(format!(
                "checkpoint {} is already here as commit {existing}, but the server says {}",
                manifest.id, manifest.commit
            )));
        }
        return Ok(existing);
    }
    if manifest.object_format != repo.object_format {
        return Err(CheckpointError::Corrupt(format!(
            "checkpoint {} is from a {} repository; this one uses {}",
            manifest.id, manifest.object_format, repo.object_format
        )));
    }
    if !repo.has_object(&manifest.commit)? {
        if let Some(base) = &manifest.base {
            if !repo.has_object(&format!("{base}^{{commit}}"))? {
                return Err(CheckpointError::BaseMissing(base.clone()));
            }
        }
        rebuild(repo, manifest, &mut blob)?;
    }
    repo.git()
        .args([
            "update-ref",
            &format!("{REF_PREFIX}{}", manifest.id),
            &manifest.commit,
            "",
        ])
        .run()?;
    Ok(manifest.commit.clone())
}

fn rebuild(
    repo: &Repo,
    manifest: &CheckpointManifest,
    blob: &mut impl FnMut(&BlobRef) -> Result<Vec<u8>, CheckpointError>,
) -> Result<(), CheckpointError> {
    let zero = "0".repeat(manifest.commit.len());
    let mut info: Vec<u8> = Vec::new();
    for f in &manifest.files {
        match (&f.mode, &f.oid) {
            (Some(mode), Some(oid)) => {
                if mode != GITLINK {
                    let (Some(sha256), Some(size)) = (&f.sha256, f.size) else {
                        return Err(CheckpointError::Corrupt(format!(
                            "the manifest has no content hash for {}",
                            f.path
                        )));
                    };
                    let wanted = BlobRef {
                        sha256: sha256.clone(),
                        size,
                    };
                    let bytes = blob(&wanted)?;
                    if sha256_hex(&bytes) != *sha256 {
                        return Err(CheckpointError::Corrupt(format!(
                            "the content of {} does not match its hash {sha256}",
                            f.path
                        )));
                    }
                    let written = write_object(repo, "blob", bytes)?;
                    if written != *oid {
                        return Err(CheckpointError::Corrupt(format!(
                            "the content of {} hashes to git object {written}, not {oid}",
                            f.path
                        )));
                    }
                }
                info.extend_from_slice(format!("{mode} {oid}\t{}\0", f.path).as_bytes());
            }
            _ => info.extend_from_slice(format!("0 {zero}\t{}\0", f.path).as_bytes()),
        }
    }
    let index = TempIndex::new(repo)?;
    if let Some(base) = &manifest.base {
        repo.git()
            .index(index.path())
            .args(["read-tree", base])
            .run()?;
    }
    if !info.is_empty() {
        repo.git()
            .index(index.path())
            .args(["update-index", "-z", "--index-info"])
            .stdin(info)
            .run()?;
    }
    let tree = lossy_line(&repo.git().index(index.path()).args(["write-tree"]).run()?);
    if tree != manifest.tree {
        return Err(CheckpointError::Corrupt(format!(
            "the rebuilt tree is {tree}, not the checkpoint's {}",
            manifest.tree
        )));
    }
    let commit = write_object(repo, "commit", manifest.commit_object.clone())?;
    if commit != manifest.commit {
        return Err(CheckpointError::Corrupt(format!(
            "the rebuilt commit is {commit}, not the checkpoint's {}",
            manifest.commit
        )));
    }
    Ok(())
}

/// Writes `bytes` into `repo` as an object of `object_type`, as they are (no attribute filters),
/// and returns its id.
fn write_object(
    repo: &Repo,
    object_type: &str,
    bytes: impl Into<Vec<u8>>,
) -> Result<String, GitError> {
    let args = [
        "hash-object",
        "-w",
        "-t",
        object_type,
        "--no-filters",
        "--stdin",
    ];
    Ok(lossy_line(&repo.git().args(args).stdin(bytes).run()?))
}

/// Restores checkpoint `id` (already in `repo`: see [`import`]) to `target`. `safety` says how
/// to take the safety checkpoint of an in-place restore (its reason is set here).
pub fn restore(
    repo: &Repo,
    id: &str,
    target: &Target,
    safety: TakeOptions,
) -> Result<Restored, CheckpointError> {
    let commit =
        checkpoint_commit(repo, id)?.ok_or_else(|| CheckpointError::NotFound(id.to_owned()))?;
    match target {
        Target::Branch(name) => {
            repo.git()
                .args(["branch", "--no-track", name, &commit])
                .run()?;
            Ok(Restored {
                commit,
                safety: None,
                written: 0,
                removed: 0,
            })
        }
        Target::Worktree { path, branch } => {
            let mut git = repo.git().args(["worktree", "add"]);
            git = match branch {
                Some(b) => git.args(["-b", b]),
                None => git.args(["--detach"]),
            };
            git.args([path.as_os_str(), commit.as_ref()]).run()?;
            Ok(Restored {
                commit,
                safety: None,
                written: 0,
                removed: 0,
            })
        }
        Target::InPlace { force } => in_place(repo, id, &commit, *force, safety),
    }
}

fn in_place(
    repo: &Repo,
    id: &str,
    commit: &str,
    force: bool,
    mut safety: TakeOptions,
) -> Result<Restored, CheckpointError> {
    if let Some(op) = repo.operation_in_progress() {
        return Err(CheckpointError::Busy {
            operation: op.to_owned(),
            work_tree: repo.work_tree.clone(),
        });
    }
    let target_tree = repo.tree_of(commit)?;
    safety.reason = CheckpointReason::BeforeRestore;
    safety.only_if_changed = false;
    let Taken::New(before) = take(repo, &safety)? else {
        return Err(GitError::Parse("safety checkpoint".into()).into());
    };
    let before = before.manifest;
    let plan = changes(repo, &before.tree, &target_tree)?;
    for c in &plan {
        if let Some(s) = before.skipped.iter().find(|s| s.path == c.path) {
            return Err(CheckpointError::Unsafe(format!(
                "restoring would change {}, which the safety checkpoint {} could not hold ({}); \
                 nothing was changed. Restore with --branch or --worktree instead",
                c.path, before.id, s.reason
            )));
        }
        let absent_before = c.old_mode.is_none();
        if absent_before && !force && exists(&repo.work_tree.join(&c.path)) {
            return Err(CheckpointError::Unsafe(format!(
                "restoring would overwrite {}, which git ignores, so the safety checkpoint {} does \
                 not hold it; nothing was changed. Move it away, or pass --force",
                c.path, before.id
            )));
        }
    }
    let mut removed = 0;
    for c in plan.iter().filter(|c| c.mode.is_none()) {
        if c.old_mode.as_deref() == Some(GITLINK) {
            continue;
        }
        let path = repo.work_tree.join(&c.path);
        match std::fs::remove_file(&path) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(GitError::Io(e).into()),
        }
        prune_empty_dirs(&repo.work_tree, &path);
    }
    let writes: Vec<&str> = plan
        .iter()
        .filter(|c| c.mode.as_deref().is_some_and(|m| m != GITLINK))
        .map(|c| c.path.as_str())
        .collect();
    if !writes.is_empty() {
        let index = TempIndex::new(repo)?;
        repo.git()
            .index(index.path())
            .args(["read-tree", &target_tree])
            .run()?;
        let list: Vec<u8> = writes
            .iter()
            .flat_map(|p| [p.as_bytes(), b"\0"].concat())
            .collect();
        repo.git()
            .index(index.path())
            .args(["checkout-index", "-f", "-z", "--stdin"])
            .stdin(list)
            .run()?;
    }
    let _ = id;
    Ok(Restored {
        commit: commit.to_owned(),
        safety: Some(before.id),
        written: writes.len(),
        removed,
    })
}

fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// Removes the now empty directories between `file` and `root`.
fn prune_empty_dirs(root: &Path, file: &Path) {
    let mut dir = file.parent();
    while let Some(d) = dir {
        if d == root || !d.starts_with(root) || d.as_os_str().as_bytes().is_empty() {
            break;
        }
        if std::fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}
