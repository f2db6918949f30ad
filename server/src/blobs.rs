//! Content-addressed blobs on disk (`<data-dir>/blobs/ab/<sha256>`): the contents of
//! checkpointed files, shared by every checkpoint of every session that has the same bytes.
//!
//! A blob is written to a temp file while its SHA-256 is computed, fsynced, and renamed into
//! place only if the hash is the name it was uploaded under; so a stored blob is always whole
//! and always what its name says, and a corrupted upload leaves nothing behind. It holds no
//! locks and knows nothing about checkpoints, sessions or who may read what: the HTTP layer
//! decides that, and says whether the caller already holds a blob (`put`'s `known`).
//!
//! Calls nothing in the crate; the HTTP layer maps its errors.

use std::path::{Path, PathBuf};

use axum::body::Body;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Why a blob was not stored.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// The content does not hash to the name it was uploaded under.
    #[error("content hash mismatch: the body hashes to {actual}, not {expected}")]
    Mismatch {
        /// The name.
        expected: String,
        /// What the body hashes to.
        actual: String,
    },
    /// Over the limit it was stored with.
    #[error("blob larger than {0} bytes")]
    TooLarge(u64),
    /// The body could not be read (client went away).
    #[error("reading the upload: {0}")]
    Body(String),
    /// The disk.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The blob directory.
#[derive(Debug, Clone)]
pub struct BlobStore {
    root: PathBuf,
}

impl BlobStore {
    /// Blobs under `<data_dir>/blobs`.
    pub fn new(data_dir: &Path) -> Self {
        Self {
            root: data_dir.join("blobs"),
        }
    }

    /// Where blob `sha256` (already validated as lowercase hex) lives.
    pub fn path(&self, sha256: &str) -> PathBuf {
        self.root.join(&sha256[..2]).join(sha256)
    }

    /// Whether it is stored.
    pub async fn contains(&self, sha256: &str) -> bool {
        self.size(sha256).await.is_some()
    }

    /// Its stored size, if stored: the only size of a blob to trust (a manifest's are claims).
    pub async fn size(&self, sha256: &str) -> Option<u64> {
        tokio::fs::metadata(self.path(sha256))
            .await
            .ok()
            .map(|m| m.len())
    }

    /// Deletes it; a blob that is not stored is no error.
    pub async fn remove(&self, sha256: &str) -> std::io::Result<()> {
        match tokio::fs::remove_file(self.path(sha256)).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Opens it for reading, if stored.
    pub async fn open(&self, sha256: &str) -> std::io::Result<Option<tokio::fs::File>> {
        match tokio::fs::File::open(self.path(sha256)).await {
            Ok(file) => Ok(Some(file)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Its content, if stored and at most `limit` bytes (else an `InvalidData` error).
    pub async fn read(&self, sha256: &str, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
        let Some(file) = self.open(sha256).await? else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        file.take(limit + 1).read_to_end(&mut bytes).await?;
        if bytes.len() as u64 > limit {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("blob {sha256} is larger than {limit} bytes"),
            ));
        }
        Ok(Some(bytes))
    }

    /// Stores `body` as blob `sha256`, at most `max` bytes. Returns its size and whether it was
    /// written. A blob already stored is answered at once only when `known` (the caller already
    /// holds it); otherwise the body is read, hashed and written like a new one, so the answer
    /// and its timing tell nothing about what others stored.
    pub async fn put(
        &self,
        sha256: &str,
        body: Body,
        known: bool,
        max: u64,
    ) -> Result<(u64, bool), BlobError> {
        let path = self.path(sha256);
        if known {
            if let Ok(meta) = tokio::fs::metadata(&path).await {
                return Ok((meta.len(), false));
            }
        }
        let tmp_dir = self.root.join("tmp");
        tokio::fs::create_dir_all(&tmp_dir).await?;
        let tmp = tmp_dir.join(uuid::Uuid::new_v4().simple().to_string());
        let result = self.write_checked(sha256, body, max, &tmp, &path).await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        result
    }

    async fn write_checked(
        &self,
        sha256: &str,
        body: Body,
        max: u64,
        tmp: &Path,
        path: &Path,
    ) -> Result<(u64, bool), BlobError> {
        // Blobs are the user's files: readable by moord's user only.
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(tmp)
            .await?;
        let mut hasher = Sha256::new();
        let mut size: u64 = 0;
        let mut stream = body.into_data_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| BlobError::Body(e.to_string()))?;
            size += chunk.len() as u64;
            if size > max {
                return Err(BlobError::TooLarge(max));
            }
            hasher.update(&chunk);
            file.write_all(&chunk).await?;
        }
        let actual = hex(&hasher.finalize());
        if actual != sha256 {
            return Err(BlobError::Mismatch {
                expected: sha256.to_owned(),
                actual,
            });
        }
        file.sync_all().await?;
        drop(file);
        let dir = path.parent().unwrap_or(&self.root).to_owned();
        tokio::fs::create_dir_all(&dir).await?;
        tokio::fs::rename(tmp, path).await?;
        // The rename is durable once the directory is.
        tokio::task::spawn_blocking(move || std::fs::File::open(dir).and_then(|d| d.sync_all()))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))??;
        Ok((size, true))
    }
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}
