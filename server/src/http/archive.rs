//! `GET /checkpoints/{checkpoint}/archive`: a checkpoint's files as a tar, streamed.
//!
//! The archive is planned from what the blob store holds, never from the manifest's claims:
//! each entry's size is its blob's stored size, and the sum of those is bounded
//! (`CheckpointLimits::max_archive_bytes`, else 409) before a byte is sent. The tar is then
//! written on a blocking thread into a small bounded channel that the response body drains, so
//! a download costs a few chunks of memory however large it is, and a reader that stops reading
//! stops the writer. Paths are checked again (a manifest stored before the checks existed may
//! hold `..` or a path through a symbolic link): such a checkpoint is refused, not archived.
//!
//! Part of the HTTP transport: calls `blobs` (through `http::blobs`) and `http::checkpoints`.

use std::io::{Read, Write};
use std::path::PathBuf;

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use moor_protocol::checkpoint::CheckpointManifest;
use moor_protocol::manifest::{check_manifest, MODE_SYMLINK, PATH_MAX_BYTES};
use tokio::sync::mpsc;

use super::blobs::blobs;
use super::checkpoints::{attachment, stored};
use crate::access::AuthUser;
use crate::error::ApiError;
use crate::state::AppState;

/// Bytes per chunk sent to the response body.
const CHUNK_BYTES: usize = 64 * 1024;
/// Chunks buffered between the tar writer and the socket.
const CHUNKS_IN_FLIGHT: usize = 4;

/// One entry of the archive, planned from the store.
enum Planned {
    /// A regular file: its blob on disk, its stored size and its mode bits.
    File {
        path: String,
        blob: PathBuf,
        size: u64,
        mode: u32,
    },
    /// A symbolic link and its target (read from its blob, at most `PATH_MAX_BYTES`).
    Link { path: String, target: String },
}

fn conflict(id: &str, why: impl std::fmt::Display) -> ApiError {
    ApiError::Conflict(format!(
        "checkpoint {id} cannot be archived: {why}; restore it with \
         `moor checkpoints restore {id}` instead"
    ))
}

/// The entries of `m`'s archive, with the stored sizes, refused (409) over `max` bytes.
async fn plan(
    state: &AppState,
    id: &str,
    m: &CheckpointManifest,
    max: u64,
) -> Result<Vec<Planned>, ApiError> {
    check_manifest(m).map_err(|e| conflict(id, e))?;
    let store = blobs(state);
    let gone = |sha: &str| ApiError::Internal(anyhow::anyhow!("blob {sha} of {id} is gone"));
    let mut out = Vec::with_capacity(m.files.len());
    let mut total: u64 = 0;
    for f in &m.files {
        let (Some(mode), Some(sha)) = (f.mode.as_deref(), f.sha256.as_deref()) else {
            continue;
        };
        if mode == MODE_SYMLINK {
            let target = store
                .read(sha, PATH_MAX_BYTES as u64)
                .await
                .map_err(|e| conflict(id, e))?
                .ok_or_else(|| gone(sha))?;
            out.push(Planned::Link {
                path: f.path.clone(),
                target: String::from_utf8_lossy(&target).into_owned(),
            });
            continue;
        }
        let size = store.size(sha).await.ok_or_else(|| gone(sha))?;
        total = total.saturating_add(size);
        if total > max {
            return Err(conflict(
                id,
                format!("its files hold more than {max} bytes, the most an archive may"),
            ));
        }
        out.push(Planned::File {
            path: f.path.clone(),
            blob: store.path(sha),
            size,
            mode: if mode == "100755" { 0o755 } else { 0o644 },
        });
    }
    Ok(out)
}

/// A `Write` that hands full chunks to the response body, waiting while the body is behind.
struct ChunkSender {
    tx: mpsc::Sender<std::io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl ChunkSender {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buf,
            Vec::with_capacity(CHUNK_BYTES),
        ));
        self.tx.blocking_send(Ok(chunk)).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the download was dropped")
        })
    }
}

impl Write for ChunkSender {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = data.len().min(CHUNK_BYTES - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK_BYTES {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// Writes the planned archive, then the manifest as `MOOR-CHECKPOINT-<id>.json`.
fn write_tar(
    out: ChunkSender,
    entries: Vec<Planned>,
    manifest: &[u8],
    id: &str,
    mtime: u64,
) -> std::io::Result<()> {
    let mut tar = tar::Builder::new(out);
    let header = |mode: u32, size: u64| {
        let mut h = tar::Header::new_gnu();
        h.set_mtime(mtime);
        h.set_mode(mode);
        h.set_size(size);
        h
    };
    for entry in entries {
        match entry {
            Planned::File {
                path,
                blob,
                size,
                mode,
            } => {
                let file = std::fs::File::open(blob)?;
                // Exactly the stored size: a header never promises more than follows it.
                let mut body = file.take(size);
                let mut h = header(mode, size);
                tar.append_data(&mut h, &path, &mut body)?;
            }
            Planned::Link { path, target } => {
                let mut h = header(0o777, 0);
                h.set_entry_type(tar::EntryType::Symlink);
                tar.append_link(&mut h, &path, target)?;
            }
        }
    }
    let mut h = header(0o644, manifest.len() as u64);
    tar.append_data(&mut h, format!("MOOR-CHECKPOINT-{id}.json"), manifest)?;
    tar.into_inner()?.flush()
}

/// `GET /api/v1/checkpoints/{checkpoint}/archive`: a tar of the files the checkpoint added or
/// changed, with their modes, and `MOOR-CHECKPOINT-<id>.json` (the manifest: base commit,
/// deletions, skipped files).
#[utoipa::path(
    get, path = "/checkpoints/{checkpoint}/archive", operation_id = "getCheckpointArchive", tag = "checkpoints",
    params(
        ("checkpoint" = String, Path, description = "Checkpoint id: 16 lowercase hex digits"),
        ("session" = Option<String>, Query, description = "The session (id or name) holding it; needed only when several sessions you may read hold this id"),
    ),
    responses(
        (status = 200, description = "A tar of the files the checkpoint added or changed, and its manifest, streamed", content(("application/x-tar"))),
        crate::openapi::ReadErrors,
        crate::openapi::Conflict,
    )
)]
pub(super) async fn archive(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let cp = stored(&state, &who, &id, query.as_deref()).await?;
    let max = state.config.checkpoints.max_archive_bytes;
    let entries = plan(&state, &id, &cp.manifest, max).await?;
    let manifest = serde_json::to_vec_pretty(&cp.manifest).map_err(anyhow::Error::from)?;
    let mtime = (cp.manifest.created_at / 1000).max(0) as u64;
    let (tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let name = id.clone();
    tokio::task::spawn_blocking(move || {
        let out = ChunkSender {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK_BYTES),
        };
        if let Err(e) = write_tar(out, entries, &manifest, &name, mtime) {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                tracing::warn!(checkpoint = %name, error = %e, "checkpoint archive cut short");
                // The body ends in an error, so the client sees a broken download.
                let _ = tx.blocking_send(Err(e));
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    Ok(attachment(
        "application/x-tar",
        format!("attachment; filename=\"moor-checkpoint-{id}.tar\""),
        Body::from_stream(stream),
    ))
}
