//! The server's checkpoint and blob API, as the bridge and `moor checkpoints` use it.

use std::time::Duration;

use moor_protocol::checkpoint::{
    BlobStored, CheckpointManifest, CheckpointSummary, MissingBlobs, MissingBlobsRequest,
    StoredCheckpoint, MISSING_QUERY_MAX,
};
use reqwest::StatusCode;

use super::CheckpointError;
use crate::config::Token;
use crate::recover::http_base;

/// A client for one server. A token from `moor login` renews itself: a 401 refreshes it and
/// the request is sent once more, so uploads keep working past the access token's lifetime.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    token: Token,
    http: reqwest::Client,
}

/// What a manifest upload answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestPut {
    /// Stored (or already stored with the same content).
    Stored,
    /// The server lacks some blobs it names.
    MissingBlobs,
    /// The session does not exist on this server.
    NoSession,
}

impl Client {
    /// A client for the server at `server` (any URL form `moor run` accepts).
    pub fn new(server: &str, token: Token) -> Result<Self, CheckpointError> {
        let http = crate::tls::http_client()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(300))
            .build()
            .map_err(|e| CheckpointError::Server(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self {
            base: http_base(server).map_err(|e| CheckpointError::Server(e.to_string()))?,
            token,
            http,
        })
    }

    /// The server's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn url(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.base)
    }

    /// Sends the request `build` makes with the current token; on a 401, renews the token (when
    /// it can be renewed) and sends a fresh request once more.
    async fn send(
        &self,
        build: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, CheckpointError> {
        let resp = build(&self.http)
            .bearer_auth(self.token.expose())
            .send()
            .await
            .map_err(net)?;
        if resp.status() != StatusCode::UNAUTHORIZED || !self.token.refresh().await {
            return Ok(resp);
        }
        build(&self.http)
            .bearer_auth(self.token.expose())
            .send()
            .await
            .map_err(net)
    }

    async fn fail(what: &str, resp: reqwest::Response) -> CheckpointError {
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        let message = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
            .unwrap_or(body);
        CheckpointError::Server(format!("{what}: {status}: {message}"))
    }

    /// Which of `hashes` the server does not have.
    pub async fn missing(&self, hashes: &[String]) -> Result<Vec<String>, CheckpointError> {
        let mut out = Vec::new();
        for chunk in hashes.chunks(MISSING_QUERY_MAX) {
            let resp = self
                .send(|http| {
                    http.post(self.url("/blobs/missing"))
                        .json(&MissingBlobsRequest {
                            sha256: chunk.to_vec(),
                        })
                })
                .await?;
            if !resp.status().is_success() {
                return Err(Self::fail("asking which blobs are missing", resp).await);
            }
            let answer: MissingBlobs = resp.json().await.map_err(net)?;
            out.extend(answer.missing);
        }
        Ok(out)
    }

    /// Uploads one blob. `None`: the server takes no blobs from this account yet, because it
    /// owns no session there (the bridge's first connection creates it).
    pub async fn put_blob(
        &self,
        sha256: &str,
        bytes: Vec<u8>,
    ) -> Result<Option<BlobStored>, CheckpointError> {
        let bytes = bytes::Bytes::from(bytes);
        let resp = self
            .send(|http| {
                http.put(self.url(&format!("/blobs/{sha256}")))
                    .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                    .body(bytes.clone())
            })
            .await?;
        if resp.status() == StatusCode::FORBIDDEN {
            return Ok(None);
        }
        if !resp.status().is_success() {
            return Err(Self::fail(&format!("uploading blob {sha256}"), resp).await);
        }
        resp.json().await.map(Some).map_err(net)
    }

    /// Uploads a checkpoint's manifest for `session` (name or id).
    pub async fn put_manifest(
        &self,
        session: &str,
        manifest: &CheckpointManifest,
    ) -> Result<ManifestPut, CheckpointError> {
        let resp = self
            .send(|http| {
                http.put(self.url(&format!("/sessions/{session}/checkpoints/{}", manifest.id)))
                    .json(manifest)
            })
            .await?;
        match resp.status() {
            s if s.is_success() => Ok(ManifestPut::Stored),
            StatusCode::NOT_FOUND => Ok(ManifestPut::NoSession),
            StatusCode::CONFLICT => {
                let body = resp.text().await.unwrap_or_default();
                if body.contains("missing blobs") {
                    Ok(ManifestPut::MissingBlobs)
                } else {
                    Err(CheckpointError::Server(format!(
                        "uploading checkpoint {}: 409: {body}",
                        manifest.id
                    )))
                }
            }
            _ => Err(Self::fail(&format!("uploading checkpoint {}", manifest.id), resp).await),
        }
    }

    /// A stored checkpoint.
    pub async fn checkpoint(&self, id: &str) -> Result<StoredCheckpoint, CheckpointError> {
        let path = format!("/checkpoints/{id}");
        let resp = self
            .get(&path, Some(id), &format!("fetching checkpoint {id}"))
            .await?;
        resp.json().await.map_err(net)
    }

    /// A session's stored checkpoints, newest first.
    pub async fn list(&self, session: &str) -> Result<Vec<CheckpointSummary>, CheckpointError> {
        let path = format!("/sessions/{session}/checkpoints");
        let doing = format!("listing the checkpoints of {session}");
        let resp = self.get(&path, None, &doing).await?;
        resp.json().await.map_err(net)
    }

    /// A checkpoint's patch.
    pub async fn diff(&self, id: &str) -> Result<Vec<u8>, CheckpointError> {
        let path = format!("/checkpoints/{id}/diff");
        let resp = self
            .get(&path, Some(id), &format!("fetching the diff of {id}"))
            .await?;
        Ok(resp.bytes().await.map_err(net)?.to_vec())
    }

    /// One blob's content (checked by the caller).
    pub async fn blob(&self, sha256: &str) -> Result<Vec<u8>, CheckpointError> {
        let path = format!("/blobs/{sha256}");
        let resp = self
            .get(&path, None, &format!("downloading blob {sha256}"))
            .await?;
        Ok(resp.bytes().await.map_err(net)?.to_vec())
    }

    /// GET `path` and keep only a success: a 404 is [`CheckpointError::NotFound`] when the
    /// checkpoint `id` is what the path names, any other failure a server error about `doing`.
    async fn get(
        &self,
        path: &str,
        id: Option<&str>,
        doing: &str,
    ) -> Result<reqwest::Response, CheckpointError> {
        let resp = self.send(|http| http.get(self.url(path))).await?;
        match (resp.status(), id) {
            (StatusCode::NOT_FOUND, Some(id)) => Err(CheckpointError::NotFound(id.to_owned())),
            (status, _) if !status.is_success() => Err(Self::fail(doing, resp).await),
            _ => Ok(resp),
        }
    }
}

fn net(e: reqwest::Error) -> CheckpointError {
    CheckpointError::Server(format!("cannot reach the server: {e}"))
}
