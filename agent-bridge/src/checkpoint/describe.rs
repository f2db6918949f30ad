//! From a checkpoint commit to its [`CheckpointManifest`]: the changed paths against the base,
//! their content hashes, the diffstat and the patch. Proportional to the change, never to the
//! repository: only changed blobs are read.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;

use moor_protocol::checkpoint::{BlobRef, ChangeStatus, CheckpointManifest, DiffStat, FileChange};
use sha2::{Digest, Sha256};

use super::commit::{checkpoint_commit, CommitMeta};
use super::git::{nul_split, GitError, Repo};
use super::CheckpointError;

/// Mode of a submodule entry: its "content" is a commit in another repository.
pub const GITLINK: &str = "160000";

/// A checkpoint's manifest and its patch.
#[derive(Debug, Clone)]
pub struct Described {
    /// The manifest.
    pub manifest: CheckpointManifest,
    /// `git diff --binary` from the base (the bytes behind `manifest.patch`).
    pub patch: Vec<u8>,
}

/// Describes checkpoint `id` of `repo`.
pub fn describe(repo: &Repo, id: &str) -> Result<Described, CheckpointError> {
    let commit =
        checkpoint_commit(repo, id)?.ok_or_else(|| CheckpointError::NotFound(id.to_owned()))?;
    let raw = repo.git().args(["cat-file", "commit", &commit]).run()?;
    let commit_object =
        String::from_utf8(raw).map_err(|_| GitError::Parse(format!("cat-file commit {commit}")))?;
    let (tree, base, meta) = parse_commit(&commit_object)
        .ok_or_else(|| GitError::Parse(format!("checkpoint commit {commit}")))?;
    let from = base.clone().unwrap_or_else(|| repo.empty_tree().to_owned());
    let mut files = changes(repo, &from, &tree)?;
    let mut diffstat = DiffStat {
        files: files.len() as u64,
        ..DiffStat::default()
    };
    for f in &files {
        diffstat.insertions += f.insertions.unwrap_or(0);
        diffstat.deletions += f.deletions.unwrap_or(0);
    }
    // Content hashes of everything the checkpoint holds that the base did not.
    let wanted: Vec<String> = files
        .iter()
        .filter(|f| f.mode.as_deref().is_some_and(|m| m != GITLINK))
        .filter_map(|f| f.oid.clone())
        .collect();
    let mut hashes: HashMap<String, (String, u64)> = HashMap::new();
    cat_blobs(repo, &wanted, |oid, bytes| {
        hashes.insert(oid.to_owned(), (sha256_hex(bytes), bytes.len() as u64));
        Ok(())
    })?;
    for f in &mut files {
        if let Some((sha, size)) = f.oid.as_ref().and_then(|o| hashes.get(o)) {
            f.sha256 = Some(sha.clone());
            f.size = Some(*size);
        }
    }
    let patch = repo
        .git()
        .args([
            "diff-tree",
            "-r",
            "-p",
            "--binary",
            "-M",
            "--full-index",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            &from,
            &tree,
        ])
        .run()?;
    let manifest = CheckpointManifest {
        id: id.to_owned(),
        created_at: meta.created_at,
        reason: meta.reason,
        base,
        branch: meta.branch,
        tree,
        commit,
        commit_object,
        object_format: repo.object_format.clone(),
        repo_state: meta.repo_state,
        work_tree: meta.work_tree,
        files,
        skipped: meta.skipped,
        diffstat,
        patch: BlobRef {
            sha256: sha256_hex(&patch),
            size: patch.len() as u64,
        },
    };
    Ok(Described { manifest, patch })
}

/// Tree, parent and moor's metadata of a raw checkpoint commit.
fn parse_commit(raw: &str) -> Option<(String, Option<String>, CommitMeta)> {
    let (headers, message) = raw.split_once("\n\n")?;
    let mut tree = None;
    let mut parent = None;
    for line in headers.lines() {
        if let Some(t) = line.strip_prefix("tree ") {
            tree = Some(t.to_owned());
        } else if let Some(p) = line.strip_prefix("parent ") {
            parent = Some(p.to_owned());
        }
    }
    let json = message.lines().find(|l| l.starts_with('{'))?;
    let meta: CommitMeta = serde_json::from_str(json).ok()?;
    Some((tree?, parent, meta))
}

/// Changed paths between two trees, with numstat.
pub fn changes(repo: &Repo, from: &str, to: &str) -> Result<Vec<FileChange>, GitError> {
    let raw = repo
        .git()
        .args(["diff-tree", "-r", "-z", "--no-renames", from, to])
        .run()?;
    let numstat = repo
        .git()
        .args([
            "diff-tree",
            "-r",
            "-z",
            "--no-renames",
            "--numstat",
            from,
            to,
        ])
        .run()?;
    let mut stats: HashMap<Vec<u8>, (Option<u64>, Option<u64>)> = HashMap::new();
    for rec in nul_split(&numstat) {
        let mut parts = rec.splitn(3, |b| *b == b'\t');
        let (Some(ins), Some(del), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let num = |s: &[u8]| std::str::from_utf8(s).ok().and_then(|s| s.parse().ok());
        stats.insert(path.to_vec(), (num(ins), num(del)));
    }
    let zero = |oid: &str| oid.bytes().all(|b| b == b'0');
    let mut out = Vec::new();
    let mut records = nul_split(&raw);
    while let Some(header) = records.next() {
        let Some(path) = records.next() else { break };
        let header = String::from_utf8_lossy(header);
        // ":<old mode> <new mode> <old oid> <new oid> <status>"
        let fields: Vec<&str> = header.trim_start_matches(':').split(' ').collect();
        let [old_mode, mode, old_oid, oid, status] = fields[..] else {
            return Err(GitError::Parse("diff-tree --raw".into()));
        };
        let status = match status.chars().next() {
            Some('A') => ChangeStatus::Added,
            Some('D') => ChangeStatus::Deleted,
            Some('T') => ChangeStatus::TypeChanged,
            _ => ChangeStatus::Modified,
        };
        let (insertions, deletions) = stats.get(path).copied().unwrap_or((None, None));
        let some = |mode: &str, oid: &str| (!zero(mode)).then(|| (mode.to_owned(), oid.to_owned()));
        let old = some(old_mode, old_oid);
        let new = some(mode, oid).filter(|_| !zero(oid) || mode == GITLINK);
        out.push(FileChange {
            path: String::from_utf8_lossy(path).into_owned(),
            status,
            old_mode: old.as_ref().map(|o| o.0.clone()),
            old_oid: old.map(|o| o.1),
            mode: new.as_ref().map(|n| n.0.clone()),
            oid: new.map(|n| n.1),
            sha256: None,
            size: None,
            insertions,
            deletions,
        });
    }
    Ok(out)
}

/// Streams the contents of blobs `oids` through `each` (`git cat-file --batch`), one at a
/// time: memory is bounded by the largest blob, not by their sum.
pub fn cat_blobs(
    repo: &Repo,
    oids: &[String],
    mut each: impl FnMut(&str, &[u8]) -> Result<(), CheckpointError>,
) -> Result<(), CheckpointError> {
    if oids.is_empty() {
        return Ok(());
    }
    let mut child = repo
        .git()
        .args(["cat-file", "--batch"])
        .into_command()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(GitError::Spawn)?;
    let input: Vec<u8> = oids
        .iter()
        .flat_map(|o| format!("{o}\n").into_bytes())
        .collect();
    let mut pipe = child
        .stdin
        .take()
        .ok_or(GitError::Parse("cat-file stdin".into()))?;
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(&input);
    });
    let stdout = child
        .stdout
        .take()
        .ok_or(GitError::Parse("cat-file stdout".into()))?;
    let mut reader = BufReader::new(stdout);
    let result = (|| {
        let mut header = String::new();
        let mut buf = Vec::new();
        for oid in oids {
            header.clear();
            reader.read_line(&mut header).map_err(GitError::Io)?;
            // "<oid> <type> <size>\n" or "<oid> missing\n"
            let fields: Vec<&str> = header.split_whitespace().collect();
            let size: usize = match fields[..] {
                [_, _, size] => size
                    .parse()
                    .map_err(|_| GitError::Parse(format!("cat-file header {header:?}")))?,
                _ => return Err(CheckpointError::MissingObject(oid.clone())),
            };
            buf.resize(size + 1, 0);
            reader.read_exact(&mut buf).map_err(GitError::Io)?;
            each(oid, &buf[..size])?;
        }
        Ok(())
    })();
    drop(reader);
    let _ = writer.join();
    let _ = child.wait();
    result
}

/// SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}
