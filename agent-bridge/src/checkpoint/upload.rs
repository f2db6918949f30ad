//! The upload queue and one checkpoint's upload.
//!
//! A checkpoint is queued (manifest and patch under `<git common dir>/moor/pending/`) in the
//! same step that takes it, so an upload interrupted by anything — a dropped link, a killed
//! `moor` — is picked up by the next `moor run` (or `moor checkpoints push`) in that repository.
//! An upload asks the server which blobs it lacks and sends only those: content this account
//! already sent, or that a checkpoint of a session it belongs to names, is never sent again, and
//! a resumed upload skips what arrived before the drop. (The server does not say whether others
//! stored the same content: that would tell anyone what exists.)

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::{stream, TryStreamExt};
use moor_protocol::checkpoint::{BlobRef, CheckpointManifest};
use serde::{Deserialize, Serialize};

use super::client::{Client, ManifestPut};
use super::describe::{cat_blobs, sha256_hex, Described};
use super::git::{GitError, Repo};
use super::CheckpointError;

/// Blobs read from git per round, bytes (bounds memory while uploading).
const READ_ROUND_BYTES: u64 = 16 * 1024 * 1024;
/// Blob uploads in flight at once.
const PARALLEL_PUTS: usize = 4;
/// Manifest attempts when blobs vanish on the server between the upload and the manifest.
const MANIFEST_ATTEMPTS: usize = 3;

/// A checkpoint waiting for its upload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingUpload {
    /// The server's base URL.
    pub server: String,
    /// Session name or id on that server.
    pub session: String,
    /// What to upload.
    pub manifest: CheckpointManifest,
}

/// What an upload did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UploadStats {
    /// Blobs sent (the others were already on the server).
    pub blobs_sent: u64,
    /// Bytes of blob content sent.
    pub bytes_sent: u64,
    /// Bytes of manifest JSON sent.
    pub manifest_bytes: u64,
}

/// How an upload ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uploaded {
    /// The server holds the checkpoint.
    Done(UploadStats),
    /// The server does not know the session (yet); try again later.
    NoSession,
}

fn pending_dir(repo: &Repo) -> PathBuf {
    repo.moor_dir().join("pending")
}

/// Queues `described` for upload to `server` under `session`. Durable when it returns.
pub fn enqueue(
    repo: &Repo,
    server: &str,
    session: &str,
    described: &Described,
) -> Result<(), GitError> {
    let dir = pending_dir(repo);
    std::fs::create_dir_all(&dir)?;
    let id = &described.manifest.id;
    let pending = PendingUpload {
        server: server.to_owned(),
        session: session.to_owned(),
        manifest: described.manifest.clone(),
    };
    let json = serde_json::to_vec(&pending).map_err(|e| GitError::Parse(e.to_string()))?;
    write_durably(&dir.join(format!("{id}.patch")), &described.patch)?;
    // The manifest last: its presence means the patch is complete.
    write_durably(&dir.join(format!("{id}.json")), &json)?;
    Ok(())
}

fn write_durably(path: &std::path::Path, bytes: &[u8]) -> Result<(), GitError> {
    let tmp = path.with_extension("tmp");
    let file = std::fs::File::create(&tmp)?;
    std::io::Write::write_all(&mut &file, bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Checkpoints waiting for an upload, oldest first.
pub fn pending(repo: &Repo) -> Vec<PendingUpload> {
    let Ok(dir) = std::fs::read_dir(pending_dir(repo)) else {
        return Vec::new();
    };
    let mut out: Vec<PendingUpload> = dir
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice(&b).ok())
        .collect();
    out.sort_by_key(|p| p.manifest.created_at);
    out
}

/// Forgets a queued upload (done).
pub fn dequeue(repo: &Repo, id: &str) {
    let dir = pending_dir(repo);
    let _ = std::fs::remove_file(dir.join(format!("{id}.json")));
    let _ = std::fs::remove_file(dir.join(format!("{id}.patch")));
}

/// Uploads one queued checkpoint: the blobs the server lacks, then the manifest.
pub async fn upload(
    repo: &Repo,
    client: &Client,
    p: &PendingUpload,
) -> Result<Uploaded, CheckpointError> {
    let m = &p.manifest;
    let mut stats = UploadStats::default();
    for _ in 0..MANIFEST_ATTEMPTS {
        let blobs = m.blobs();
        let hashes: Vec<String> = blobs.iter().map(|b| b.sha256.clone()).collect();
        let missing = client.missing(&hashes).await?;
        if !missing.is_empty() {
            let wanted: Vec<BlobRef> = blobs
                .into_iter()
                .filter(|b| missing.contains(&b.sha256))
                .collect();
            if !send_blobs(repo, client, m, &wanted, &mut stats).await? {
                return Ok(Uploaded::NoSession);
            }
        }
        stats.manifest_bytes = serde_json::to_vec(m).map(|v| v.len() as u64).unwrap_or(0);
        match client.put_manifest(&p.session, m).await? {
            ManifestPut::Stored => return Ok(Uploaded::Done(stats)),
            ManifestPut::NoSession => return Ok(Uploaded::NoSession),
            ManifestPut::MissingBlobs => continue,
        }
    }
    Err(CheckpointError::Server(format!(
        "the server keeps asking for blobs of checkpoint {} after they were sent",
        m.id
    )))
}

/// Reads `wanted` from git (or the queued patch) in bounded rounds and uploads each. False
/// when the server refused them because this account owns no session there yet.
async fn send_blobs(
    repo: &Repo,
    client: &Client,
    m: &CheckpointManifest,
    wanted: &[BlobRef],
    stats: &mut UploadStats,
) -> Result<bool, CheckpointError> {
    let oid_of: HashMap<&str, &str> = m
        .files
        .iter()
        .filter_map(|f| Some((f.sha256.as_deref()?, f.oid.as_deref()?)))
        .collect();
    let mut round: Vec<BlobRef> = Vec::new();
    let mut round_bytes = 0;
    let mut rounds: Vec<Vec<BlobRef>> = Vec::new();
    for b in wanted {
        if round_bytes + b.size > READ_ROUND_BYTES && !round.is_empty() {
            rounds.push(std::mem::take(&mut round));
            round_bytes = 0;
        }
        round_bytes += b.size;
        round.push(b.clone());
    }
    rounds.push(round);
    for round in rounds {
        let mut contents: Vec<(String, Vec<u8>)> = Vec::new();
        let mut oids: Vec<String> = Vec::new();
        let mut oid_sha: HashMap<String, String> = HashMap::new();
        for b in &round {
            if b.sha256 == m.patch.sha256 {
                let path = pending_dir(repo).join(format!("{}.patch", m.id));
                let bytes = tokio::fs::read(&path).await.map_err(GitError::Io)?;
                contents.push((b.sha256.clone(), bytes));
            } else if let Some(oid) = oid_of.get(b.sha256.as_str()) {
                oids.push((*oid).to_owned());
                oid_sha.insert((*oid).to_owned(), b.sha256.clone());
            }
        }
        let repo2 = repo.clone();
        let from_git = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            cat_blobs(&repo2, &oids, |oid, bytes| {
                out.push((oid.to_owned(), bytes.to_vec()));
                Ok(())
            })
            .map(|()| out)
        })
        .await
        .map_err(|e| CheckpointError::Server(format!("reading blobs failed: {e}")))??;
        for (oid, bytes) in from_git {
            if let Some(sha) = oid_sha.get(&oid) {
                contents.push((sha.clone(), bytes));
            }
        }
        for (sha, bytes) in &contents {
            // The work tree is not read here, only git's objects, so this cannot change under
            // us; a mismatch is a bug or a corrupt object store, never to be uploaded.
            if sha256_hex(bytes) != *sha {
                return Err(CheckpointError::Corrupt(format!(
                    "blob {sha} of checkpoint {} does not hash to its name",
                    m.id
                )));
            }
        }
        stats.blobs_sent += contents.len() as u64;
        stats.bytes_sent += contents.iter().map(|(_, b)| b.len() as u64).sum::<u64>();
        let refused = AtomicBool::new(false);
        stream::iter(contents.into_iter().map(Ok::<_, CheckpointError>))
            .try_for_each_concurrent(PARALLEL_PUTS, |(sha, bytes)| {
                let refused = &refused;
                async move {
                    if client.put_blob(&sha, bytes).await?.is_none() {
                        refused.store(true, Ordering::Relaxed);
                    }
                    Ok(())
                }
            })
            .await?;
        if refused.load(Ordering::Relaxed) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Uploads every queued checkpoint meant for `client`'s server. Returns how many remain.
pub async fn push_all(
    repo: &Repo,
    client: &Client,
) -> Result<(usize, UploadStats), CheckpointError> {
    let mut total = UploadStats::default();
    let mut left = 0;
    for p in pending(repo) {
        if p.server != client.base() {
            left += 1;
            continue;
        }
        match upload(repo, client, &p).await? {
            Uploaded::Done(s) => {
                dequeue(repo, &p.manifest.id);
                total.blobs_sent += s.blobs_sent;
                total.bytes_sent += s.bytes_sent;
                total.manifest_bytes += s.manifest_bytes;
            }
            Uploaded::NoSession => left += 1,
        }
    }
    Ok((left, total))
}
