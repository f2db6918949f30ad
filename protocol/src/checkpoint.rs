//! Checkpoints of the agent's git work tree (G7): what the bridge records in the log, what it
//! uploads, and what the server's checkpoint API answers.
//!
//! A checkpoint is a git commit the bridge writes under `refs/moor/checkpoints/<id>` without
//! touching the user's HEAD, branches, index or stash. Its parent is the commit HEAD pointed to
//! (the base); its tree is the work tree as it was (tracked changes, untracked files that are
//! not ignored, deletions, modes), minus files over the size cap, which are listed. The server
//! holds a [`CheckpointManifest`] per checkpoint and the changed files' contents as blobs keyed
//! by SHA-256, shared by every checkpoint and session that has the same content.

use serde::{Deserialize, Serialize};

use crate::ids::SessionId;

pub use crate::kinds::CHECKPOINT_CREATED;

/// Most changed files listed in a [`CHECKPOINT_CREATED`] entry; the manifest has them all.
pub const ENTRY_FILES_MAX: usize = 500;
/// Most skipped files listed in a [`CHECKPOINT_CREATED`] entry.
pub const ENTRY_SKIPPED_MAX: usize = 100;
/// Most hashes in one `POST /api/v1/blobs/missing`.
pub const MISSING_QUERY_MAX: usize = 10_000;

/// Why a checkpoint was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CheckpointReason {
    /// `moor run` started on a work tree with uncommitted changes.
    Start,
    /// A tool call that may change files finished.
    Tool,
    /// The periodic timer fired and something had changed.
    Interval,
    /// The link to the server dropped.
    LinkDown,
    /// The agent exited.
    Exit,
    /// Someone asked for one (`moor checkpoints create`).
    Manual,
    /// The state just before a `moor checkpoints restore` changed the work tree.
    BeforeRestore,
}

impl CheckpointReason {
    /// As written in entries and shown to people.
    pub fn name(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Tool => "tool",
            Self::Interval => "interval",
            Self::LinkDown => "link_down",
            Self::Exit => "exit",
            Self::Manual => "manual",
            Self::BeforeRestore => "before_restore",
        }
    }
}

/// How a file differs from the base commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ChangeStatus {
    /// New in the checkpoint.
    Added,
    /// Content or mode changed.
    Modified,
    /// Gone in the checkpoint.
    Deleted,
    /// Kind changed (file ↔ symlink ↔ submodule).
    TypeChanged,
}

/// One changed path of a checkpoint, against its base commit. Renames appear as a deletion and
/// an addition (the patch shows them as renames).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FileChange {
    /// Path from the work tree's root, `/`-separated.
    pub path: String,
    /// What happened to it.
    pub status: ChangeStatus,
    /// Git mode in the base (`100644`, `100755`, `120000`, `160000`), if it was there.
    pub old_mode: Option<String>,
    /// Git mode in the checkpoint, if it is there.
    pub mode: Option<String>,
    /// Git object id in the base.
    pub old_oid: Option<String>,
    /// Git object id in the checkpoint.
    pub oid: Option<String>,
    /// SHA-256 of the content in the checkpoint (the server's blob key); `None` for deletions
    /// and submodules.
    pub sha256: Option<String>,
    /// Size of the content in the checkpoint, bytes.
    pub size: Option<u64>,
    /// Lines added (`None` for binary files).
    pub insertions: Option<u64>,
    /// Lines removed (`None` for binary files).
    pub deletions: Option<u64>,
}

/// A file the checkpoint did not capture, and why. Its path holds the base's version (or
/// nothing, if it was untracked) in the checkpoint's tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SkippedFile {
    /// Path from the work tree's root.
    pub path: String,
    /// Its size, when it is a file.
    pub size: Option<u64>,
    /// In plain words.
    pub reason: String,
}

/// Totals of a checkpoint against its base.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DiffStat {
    /// Changed paths.
    pub files: u64,
    /// Lines added (text files).
    pub insertions: u64,
    /// Lines removed (text files).
    pub deletions: u64,
}

/// A blob the server stores, by content hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BlobRef {
    /// SHA-256 of the content, lowercase hex.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
}

/// Everything about one checkpoint: enough to rebuild its commit, byte for byte, in any clone
/// that has its base commit, from the server's blobs alone. Uploaded by the bridge with
/// `PUT /api/v1/sessions/{id}/checkpoints/{checkpoint}` once every blob it names is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckpointManifest {
    /// Checkpoint id (16 lowercase hex digits), unique across sessions.
    pub id: String,
    /// When it was taken, ms since the epoch.
    pub created_at: i64,
    /// Why it was taken.
    pub reason: CheckpointReason,
    /// The commit HEAD pointed to (`None`: no commit yet).
    pub base: Option<String>,
    /// The branch HEAD was on, if any.
    pub branch: Option<String>,
    /// The checkpoint's git tree.
    pub tree: String,
    /// The checkpoint's git commit.
    pub commit: String,
    /// The raw commit object (`git cat-file commit`), so a restore rebuilds the same commit id.
    pub commit_object: String,
    /// `sha1` or `sha256`: the repository's object format.
    pub object_format: String,
    /// A merge, rebase, cherry-pick, revert or bisect in progress when it was taken.
    pub repo_state: Option<String>,
    /// The work tree's path on the machine that took it.
    pub work_tree: String,
    /// Every changed path, sorted.
    pub files: Vec<FileChange>,
    /// Files left out.
    pub skipped: Vec<SkippedFile>,
    /// Totals.
    pub diffstat: DiffStat,
    /// `git diff --binary` from the base to the checkpoint, as a blob (`git apply`-able).
    pub patch: BlobRef,
}

impl CheckpointManifest {
    /// Every blob the manifest names: the patch and each captured file's content.
    pub fn blobs(&self) -> Vec<BlobRef> {
        let mut out = vec![self.patch.clone()];
        for f in &self.files {
            if let (Some(sha256), Some(size)) = (&f.sha256, f.size) {
                out.push(BlobRef {
                    sha256: sha256.clone(),
                    size,
                });
            }
        }
        out.sort_by(|a, b| a.sha256.cmp(&b.sha256));
        out.dedup_by(|a, b| a.sha256 == b.sha256);
        out
    }

    /// The summary: what the log entry and the list show.
    pub fn summary(&self) -> CheckpointSummary {
        CheckpointSummary {
            id: self.id.clone(),
            created_at: self.created_at,
            reason: self.reason,
            base: self.base.clone(),
            branch: self.branch.clone(),
            commit: self.commit.clone(),
            repo_state: self.repo_state.clone(),
            diffstat: self.diffstat,
            files: self
                .files
                .iter()
                .take(ENTRY_FILES_MAX)
                .map(|f| FileListed {
                    path: f.path.clone(),
                    status: f.status,
                })
                .collect(),
            files_total: self.files.len() as u64,
            skipped: self
                .skipped
                .iter()
                .take(ENTRY_SKIPPED_MAX)
                .cloned()
                .collect(),
            skipped_total: self.skipped.len() as u64,
        }
    }
}

/// A changed path as listed in a summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FileListed {
    /// Path from the work tree's root.
    pub path: String,
    /// What happened to it.
    pub status: ChangeStatus,
}

/// The payload of a [`CHECKPOINT_CREATED`] entry (written by the bridge when it took the
/// checkpoint, before the upload) and an item of `GET /api/v1/sessions/{id}/checkpoints`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckpointSummary {
    /// Checkpoint id.
    pub id: String,
    /// When it was taken, ms since the epoch.
    pub created_at: i64,
    /// Why.
    pub reason: CheckpointReason,
    /// Base commit.
    pub base: Option<String>,
    /// Branch HEAD was on.
    pub branch: Option<String>,
    /// The checkpoint commit (under `refs/moor/checkpoints/<id>` on the machine).
    pub commit: String,
    /// A merge or rebase in progress, if any.
    pub repo_state: Option<String>,
    /// Totals.
    pub diffstat: DiffStat,
    /// Changed paths (at most [`ENTRY_FILES_MAX`]).
    pub files: Vec<FileListed>,
    /// How many paths changed in all.
    pub files_total: u64,
    /// Files left out (at most [`ENTRY_SKIPPED_MAX`]).
    pub skipped: Vec<SkippedFile>,
    /// How many files were left out in all.
    pub skipped_total: u64,
}

/// `GET /api/v1/checkpoints/{id}`: a stored checkpoint and the session it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StoredCheckpoint {
    /// The session that uploaded it.
    pub session: SessionId,
    /// Its manifest.
    pub manifest: CheckpointManifest,
}

/// `POST /api/v1/blobs/missing`: which of these does the server not have?
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MissingBlobsRequest {
    /// SHA-256 hashes, lowercase hex (at most [`MISSING_QUERY_MAX`]).
    pub sha256: Vec<String>,
}

/// Answer to [`MissingBlobsRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MissingBlobs {
    /// The hashes the server does not have, in the order asked.
    pub missing: Vec<String>,
}

/// Answer to `PUT /api/v1/blobs/{sha256}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BlobStored {
    /// The blob's hash.
    pub sha256: String,
    /// Its size.
    pub size: u64,
    /// False when the server already had it.
    pub created: bool,
}

/// Most files listed in one [`CheckpointChanges`]; `files_total` says how many changed.
pub const CHANGES_FILES_MAX: usize = 1000;
/// Most bytes of one file's diff in a [`CheckpointChanges`] of every file.
pub const CHANGES_FILE_BYTES: usize = 32 * 1024;
/// Most bytes of diff text, all files together, in one [`CheckpointChanges`].
pub const CHANGES_ANSWER_BYTES: usize = 256 * 1024;
/// Most bytes of diff text in one page of one file (`?file=`).
pub const CHANGES_PAGE_BYTES: usize = 64 * 1024;
/// Longest diff line kept; the rest of a longer line is replaced by `…`.
pub const CHANGES_LINE_BYTES: usize = 1000;

/// How a file differs between the two ends of a [`CheckpointChanges`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FileDiffStatus {
    /// Not there at the start, there at the end.
    Added,
    /// Content or mode changed.
    Modified,
    /// There at the start, gone at the end.
    Deleted,
    /// Moved from `old_path` (possibly with changes).
    Renamed,
    /// Kind changed (file ↔ symlink ↔ submodule).
    TypeChanged,
}

/// One changed file of a [`CheckpointChanges`], with (a page of) its unified diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FileDiff {
    /// Path from the work tree's root at the end.
    pub path: String,
    /// Path at the start, for a rename.
    pub old_path: Option<String>,
    /// What happened to it.
    pub status: FileDiffStatus,
    /// A binary file: named, never diffed (`diff` is empty).
    pub binary: bool,
    /// Lines added (0 for binary files).
    pub insertions: u64,
    /// Lines removed (0 for binary files).
    pub deletions: u64,
    /// The unified diff's hunks (`@@ … @@` headers and ` `/`+`/`-` lines, no file header),
    /// from byte `offset`, whole lines only; lines longer than [`CHANGES_LINE_BYTES`] are cut.
    pub diff: String,
    /// Where `diff` starts in the file's whole diff, bytes.
    pub offset: u64,
    /// Size of the file's whole diff, bytes.
    pub diff_bytes: u64,
    /// More of the diff follows `diff`: ask again with `?file=` and `offset` + its length.
    pub truncated: bool,
    /// Why there is no diff, when there is none for another reason than binary content
    /// (too large to diff, content not captured, a submodule).
    pub note: Option<String>,
}

/// `GET /api/v1/sessions/{id}/checkpoints/{checkpoint}/changes`: the files that changed
/// between two checkpoints of a session (or between the base commit and one), each with its
/// unified diff, bounded ([`CHANGES_FILE_BYTES`] per file, [`CHANGES_ANSWER_BYTES`] in all,
/// [`CHANGES_PAGE_BYTES`] per page of one file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckpointChanges {
    /// The checkpoint at the start; `None`: the base commit of `to`.
    pub from: Option<String>,
    /// The checkpoint at the end.
    pub to: String,
    /// The base commit of `to`.
    pub base: Option<String>,
    /// The changed files, by path (at most [`CHANGES_FILES_MAX`]; with `?file=`, that one).
    pub files: Vec<FileDiff>,
    /// How many files changed in all.
    pub files_total: u64,
    /// Lines added, over the files listed.
    pub insertions: u64,
    /// Lines removed, over the files listed.
    pub deletions: u64,
    /// Something was left out: files past the list, or diff text (see each file's `truncated`).
    pub truncated: bool,
    /// Said when the answer is not what was asked (the base commit changed between the two
    /// checkpoints, so the changes since `to`'s base are shown).
    pub note: Option<String>,
}

/// Whether `s` is a SHA-256 in lowercase hex.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `s` is a well-formed checkpoint id: 16 lowercase hex digits.
pub fn is_checkpoint_id(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An added file of `mode`.
    pub(crate) fn file(path: &str, mode: &str) -> FileChange {
        FileChange {
            path: path.into(),
            status: ChangeStatus::Added,
            old_mode: None,
            mode: Some(mode.into()),
            old_oid: None,
            oid: Some("x".into()),
            sha256: Some("a".repeat(64)),
            size: Some(1),
            insertions: None,
            deletions: None,
        }
    }

    /// A manifest of `files`, otherwise well-formed.
    pub(crate) fn manifest(files: Vec<FileChange>) -> CheckpointManifest {
        CheckpointManifest {
            id: "0123456789abcdef".into(),
            created_at: 1,
            reason: CheckpointReason::Tool,
            base: None,
            branch: None,
            tree: "t".into(),
            commit: "c".into(),
            commit_object: String::new(),
            object_format: "sha1".into(),
            repo_state: None,
            work_tree: "/w".into(),
            files,
            skipped: vec![],
            diffstat: DiffStat::default(),
            patch: BlobRef {
                sha256: "b".repeat(64),
                size: 1,
            },
        }
    }

    #[test]
    fn ids_and_hashes_are_strictly_lowercase_hex() {
        assert!(is_checkpoint_id("0123456789abcdef"));
        assert!(!is_checkpoint_id("0123456789ABCDEF"));
        assert!(!is_checkpoint_id("../etc/passwd000"));
        assert!(is_sha256_hex(&"a".repeat(64)));
        assert!(!is_sha256_hex(&"a".repeat(63)));
        assert!(!is_sha256_hex(&"g".repeat(64)));
    }

    #[test]
    fn a_manifest_names_each_blob_once() {
        let file = |path: &str, sha: &str| FileChange {
            sha256: Some(sha.into()),
            ..file(path, "100644")
        };
        let files = vec![file("a", "bb"), file("b", "bb"), file("c", "aa")];
        let m = CheckpointManifest {
            patch: BlobRef {
                sha256: "cc".into(),
                size: 3,
            },
            ..manifest(files)
        };
        let names: Vec<_> = m.blobs().into_iter().map(|b| b.sha256).collect();
        assert_eq!(names, ["aa", "bb", "cc"]);
        let s = m.summary();
        assert_eq!(s.files_total, 3);
        assert_eq!(
            serde_json::to_value(s.reason).unwrap(),
            serde_json::json!("tool")
        );
    }
}
