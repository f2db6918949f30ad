//! Taking a checkpoint: the work tree as it is, written as a commit under
//! `refs/moor/checkpoints/<id>`, through a temporary index.
//!
//! The user's index is only read (copied, with its timestamp, so git's stat cache still saves
//! rehashing unchanged files); HEAD, branches, the stash and the working files are never
//! written. Plumbing only: `ls-files`, `update-index`, `write-tree`, `commit-tree`, `update-ref`.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use moor_protocol::checkpoint::{CheckpointReason, SkippedFile};

use super::commit::{CommitMeta, REF_PREFIX};
use super::describe::{describe, Described};
use super::git::{lossy_line, nul_split, GitError, Repo};
use super::CheckpointError;

/// Most skipped files recorded in the commit message.
const SKIPPED_RECORDED: usize = 1000;
/// Identity of checkpoint commits (they are nobody's work but the user's; this says who
/// wrote the commit object).
const IDENTITY: (&str, &str) = ("moor", "moor@localhost");

/// What to take.
#[derive(Debug, Clone)]
pub struct TakeOptions {
    /// Why.
    pub reason: CheckpointReason,
    /// Files larger than this are skipped (and listed).
    pub max_file_bytes: u64,
    /// The session it belongs to, recorded in the commit.
    pub session: String,
    /// Take nothing if the tree equals `last_tree` or the base commit's tree.
    pub only_if_changed: bool,
    /// The last checkpoint's tree.
    pub last_tree: Option<String>,
}

/// What [`take`] did.
#[derive(Debug)]
pub enum Taken {
    /// Nothing changed since the last checkpoint (or against the base): no checkpoint.
    Unchanged {
        /// The work tree's tree now.
        tree: String,
    },
    /// A new checkpoint.
    New(Box<Described>),
}

/// A temporary index file in moor's directory of the repository, removed when dropped.
#[derive(Debug)]
pub struct TempIndex(PathBuf);

impl TempIndex {
    /// A fresh, not yet existing, index path.
    pub fn new(repo: &Repo) -> Result<Self, GitError> {
        let dir = repo.moor_dir().join("tmp");
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir.join(format!("index-{}", new_id()))))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempIndex {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_file(self.0.with_extension("lock"));
    }
}

/// A new checkpoint id: 16 random lowercase hex digits.
pub fn new_id() -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    id[..16].to_owned()
}

/// Takes a checkpoint of `repo`'s work tree.
pub fn take(repo: &Repo, opts: &TakeOptions) -> Result<Taken, CheckpointError> {
    let base = repo.head()?;
    let branch = repo.branch()?;
    let index = TempIndex::new(repo)?;
    seed_index(repo, index.path(), base.as_deref())?;
    let skipped = update_index(repo, index.path(), base.as_deref(), opts.max_file_bytes)?;
    let tree = lossy_line(&repo.git().index(index.path()).args(["write-tree"]).run()?);
    let base_tree = match &base {
        Some(b) => repo.tree_of(b)?,
        None => repo.empty_tree().to_owned(),
    };
    if opts.only_if_changed && (opts.last_tree.as_ref() == Some(&tree) || tree == base_tree) {
        return Ok(Taken::Unchanged { tree });
    }
    let id = new_id();
    let created_at = moor_protocol::now_ms();
    let mut recorded = skipped;
    recorded.truncate(SKIPPED_RECORDED);
    let meta = CommitMeta {
        id: id.clone(),
        reason: opts.reason,
        created_at,
        session: opts.session.clone(),
        branch,
        repo_state: repo.operation_in_progress().map(str::to_owned),
        work_tree: repo.work_tree.display().to_string(),
        skipped: recorded,
    };
    let message = format!(
        "moor checkpoint {id} ({})\n\n{}\n",
        opts.reason.name(),
        serde_json::to_string(&meta).map_err(|e| GitError::Parse(e.to_string()))?
    );
    let date = format!("@{} +0000", created_at.div_euclid(1000));
    let mut git = repo
        .git()
        .env("GIT_AUTHOR_NAME", IDENTITY.0)
        .env("GIT_AUTHOR_EMAIL", IDENTITY.1)
        .env("GIT_COMMITTER_NAME", IDENTITY.0)
        .env("GIT_COMMITTER_EMAIL", IDENTITY.1)
        .env("GIT_AUTHOR_DATE", &date)
        .env("GIT_COMMITTER_DATE", &date)
        .args(["commit-tree", "--no-gpg-sign", &tree]);
    if let Some(base) = &base {
        git = git.args(["-p", base]);
    }
    let commit = lossy_line(&git.stdin(message).run()?);
    // Create-only: an empty old value makes a clash an error rather than an overwrite.
    repo.git()
        .args(["update-ref", &format!("{REF_PREFIX}{id}"), &commit, ""])
        .run()?;
    Ok(Taken::New(Box::new(describe(repo, &id)?)))
}

/// Starts the temporary index from the user's (a copy keeping its mtime, so git's racy-clean
/// rules still hold), or from the base commit's tree when there is no index yet.
fn seed_index(repo: &Repo, index: &Path, base: Option<&str>) -> Result<(), GitError> {
    let user_index = repo.git_dir.join("index");
    match std::fs::metadata(&user_index) {
        Ok(meta) => {
            let bytes = std::fs::read(&user_index)?;
            std::fs::write(index, bytes)?;
            let file = std::fs::File::options().write(true).open(index)?;
            file.set_modified(meta.modified()?)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(base) = base {
                repo.git().index(index).args(["read-tree", base]).run()?;
            }
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// Brings the temporary index to the work tree's content: modified, deleted, unmerged and
/// untracked (not ignored) paths, except the ones skipped, which keep the base's version.
fn update_index(
    repo: &Repo,
    index: &Path,
    base: Option<&str>,
    max_file_bytes: u64,
) -> Result<Vec<SkippedFile>, GitError> {
    let changed = repo
        .git()
        .index(index)
        .args(["ls-files", "-z", "-m", "-o", "--exclude-standard"])
        .run()?;
    let unmerged = repo
        .git()
        .index(index)
        .args(["ls-files", "-z", "-u"])
        .run()?;
    let mut paths: BTreeSet<Vec<u8>> = nul_split(&changed).map(<[u8]>::to_vec).collect();
    // "<mode> <oid> <stage>\t<path>"
    for record in nul_split(&unmerged) {
        if let Some(tab) = record.iter().position(|b| *b == b'\t') {
            paths.insert(record[tab + 1..].to_vec());
        }
    }
    let mut skipped = Vec::new();
    let mut skipped_paths: Vec<String> = Vec::new();
    let mut update: Vec<u8> = Vec::new();
    for raw in &paths {
        let shown = String::from_utf8_lossy(raw).into_owned();
        let Ok(path) = std::str::from_utf8(raw) else {
            skipped.push(SkippedFile {
                path: shown,
                size: None,
                reason: "the path is not valid UTF-8".into(),
            });
            continue;
        };
        if path.ends_with('/') {
            skipped.push(SkippedFile {
                path: path.to_owned(),
                size: None,
                reason: "a nested git repository (not a submodule)".into(),
            });
            continue;
        }
        let full = repo.work_tree.join(OsStr::from_bytes(raw));
        if let Ok(meta) = std::fs::symlink_metadata(&full) {
            if meta.is_file() && meta.len() > max_file_bytes {
                skipped.push(SkippedFile {
                    path: path.to_owned(),
                    size: Some(meta.len()),
                    reason: format!("larger than the checkpoint size cap ({max_file_bytes} bytes)"),
                });
                skipped_paths.push(path.to_owned());
                continue;
            }
        }
        update.extend_from_slice(raw);
        update.push(0);
    }
    if !update.is_empty() {
        // `git update-index` reading NUL-terminated paths: adds, updates or removes each.
        let update_index = |paths: Vec<u8>| {
            repo.git()
                .index(index)
                .args([
                    "update-index",
                    "--add",
                    "--remove",
                    "--replace",
                    "-z",
                    "--stdin",
                ])
                .stdin(paths)
                .run()
        };
        if update_index(update.clone()).is_err() {
            // One bad path (unreadable, vanished mid-way into a directory…) must not lose the
            // rest: add them one by one and list the ones git refuses.
            for raw in nul_split(&update) {
                let path = String::from_utf8_lossy(raw).into_owned();
                if let Err(e) = update_index([raw, b"\0"].concat()) {
                    skipped.push(SkippedFile {
                        path: path.clone(),
                        size: None,
                        reason: format!("git could not read it: {e}"),
                    });
                    skipped_paths.push(path);
                }
            }
        }
    }
    if !skipped_paths.is_empty() {
        keep_base_version(repo, index, base, &skipped_paths)?;
    }
    Ok(skipped)
}

/// Puts the base's version of `paths` (or nothing) into the temporary index.
fn keep_base_version(
    repo: &Repo,
    index: &Path,
    base: Option<&str>,
    paths: &[String],
) -> Result<(), GitError> {
    let list: Vec<u8> = paths
        .iter()
        .flat_map(|p| [p.as_bytes(), b"\0"].concat())
        .collect();
    repo.git()
        .index(index)
        .args(["update-index", "--force-remove", "-z", "--stdin"])
        .stdin(list)
        .run()?;
    let Some(base) = base else { return Ok(()) };
    let entries = repo
        .git()
        .env("GIT_LITERAL_PATHSPECS", "1")
        .args(["ls-tree", "-z", "--full-tree", base, "--"])
        .args(paths)
        .run()?;
    if !entries.is_empty() {
        repo.git()
            .index(index)
            .args(["update-index", "-z", "--index-info"])
            .stdin(entries)
            .run()?;
    }
    Ok(())
}
