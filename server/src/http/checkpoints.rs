//! Checkpoints (G7) and their content-addressed blobs: the bridge uploads blobs it is missing
//! (`POST /blobs/missing`, `PUT /blobs/{sha256}`) and then the manifest
//! (`PUT /sessions/{id}/checkpoints/{checkpoint}`); anyone with access lists them, reads one,
//! gets its diff as a patch, or downloads its files as a tar archive. A blob is read only by
//! someone who may read a session with a checkpoint naming it.
//!
//! Part of the HTTP transport: calls `access`, `blobs`, `store`; never `sse` or `ws`.

use crate::extract::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use moor_protocol::checkpoint::{
    is_checkpoint_id, is_sha256_hex, BlobStored, CheckpointManifest, CheckpointSummary,
    MissingBlobs, MissingBlobsRequest, StoredCheckpoint, MISSING_QUERY_MAX,
};

use crate::access::{session_for, Role};
use crate::access::{AuthUser, Principal};
use crate::blobs::{BlobError, BlobStore, MAX_BLOB_BYTES};
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::{CheckpointRow, StoreError};

/// Largest manifest accepted, bytes (a checkpoint of tens of thousands of files).
const MAX_MANIFEST_BYTES: usize = 64 * 1024 * 1024;
/// Largest archive built in memory, bytes.
const MAX_ARCHIVE_BYTES: u64 = 512 * 1024 * 1024;

fn blobs(state: &AppState) -> BlobStore {
    BlobStore::new(&state.config.data_dir)
}

fn checked_sha(sha256: &str) -> Result<(), ApiError> {
    checked(is_sha256_hex(sha256), "sha256", || {
        format!("{sha256:?} is not a lowercase hex SHA-256")
    })
}

fn checked_id(id: &str) -> Result<(), ApiError> {
    checked(is_checkpoint_id(id), "checkpoint", || {
        format!("{id:?} is not a checkpoint id (16 lowercase hex digits)")
    })
}

/// `Invalid { field, reason }` unless `ok`.
fn checked(ok: bool, field: &'static str, reason: impl FnOnce() -> String) -> Result<(), ApiError> {
    if ok {
        Ok(())
    } else {
        Err(ApiError::Invalid {
            field,
            reason: reason(),
        })
    }
}

fn not_found_as_checkpoint(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound => ApiError::NotFound("checkpoint"),
        e => e.into(),
    }
}

/// `POST /api/v1/blobs/missing`: which of these hashes the server lacks.
#[utoipa::path(
    post, path = "/blobs/missing", operation_id = "findMissingBlobs", tag = "checkpoints",
    request_body = MissingBlobsRequest,
    responses(
        (status = 200, description = "The hashes the server lacks", body = MissingBlobs),
        crate::openapi::BodyErrors,
    )
)]
pub(super) async fn missing(
    State(state): State<AppState>,
    _who: AuthUser,
    Json(req): Json<MissingBlobsRequest>,
) -> Result<Json<MissingBlobs>, ApiError> {
    if req.sha256.len() > MISSING_QUERY_MAX {
        return Err(ApiError::Invalid {
            field: "sha256",
            reason: format!("at most {MISSING_QUERY_MAX} hashes per request"),
        });
    }
    let store = blobs(&state);
    let mut missing = Vec::new();
    for sha in req.sha256 {
        checked_sha(&sha)?;
        if !store.contains(&sha).await {
            missing.push(sha);
        }
    }
    Ok(Json(MissingBlobs { missing }))
}

/// `PUT /api/v1/blobs/{sha256}`: stores a blob if its content hashes to its name.
#[utoipa::path(
    put, path = "/blobs/{sha256}", operation_id = "putBlob", tag = "checkpoints",
    params(("sha256" = String, Path, description = "SHA-256 of the blob, lowercase hex")),
    request_body(description = "The blob's bytes", content(("application/octet-stream"))),
    responses(
        (status = 201, description = "Stored", body = BlobStored),
        (status = 200, description = "Already stored", body = BlobStored),
        crate::openapi::BodyErrors,
    )
)]
pub(super) async fn put_blob(
    State(state): State<AppState>,
    _who: AuthUser,
    Path(sha256): Path<String>,
    body: Body,
) -> Result<(StatusCode, Json<BlobStored>), ApiError> {
    checked_sha(&sha256)?;
    match blobs(&state).put(&sha256, body).await {
        Ok((size, created)) => {
            let status = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok((
                status,
                Json(BlobStored {
                    sha256,
                    size,
                    created,
                }),
            ))
        }
        Err(e @ BlobError::Mismatch { .. }) => Err(ApiError::Invalid {
            field: "body",
            reason: e.to_string(),
        }),
        Err(BlobError::TooLarge(_)) => Err(ApiError::TooLarge(MAX_BLOB_BYTES as usize)),
        Err(e @ BlobError::Body(_)) => Err(ApiError::Invalid {
            field: "body",
            reason: e.to_string(),
        }),
        Err(BlobError::Io(e)) => Err(ApiError::Internal(
            anyhow::Error::new(e).context("store a blob"),
        )),
    }
}

/// Whether `who` may read blob `sha256`: administrators may read any; anyone else needs a role
/// (viewer or more) on a session with a checkpoint naming it.
async fn may_read_blob(state: &AppState, who: &Principal, sha256: &str) -> Result<bool, ApiError> {
    if who.admin {
        return Ok(true);
    }
    let sessions = state.store.checkpoints.blob_sessions(sha256).await?;
    if sessions.is_empty() {
        return Ok(false);
    }
    let mine = state.store.access.memberships(&who.name).await?;
    Ok(mine.iter().any(|(s, _)| sessions.contains(s)))
}

/// `GET /api/v1/blobs/{sha256}`: 404 unless the caller may read a session with a checkpoint
/// naming the blob (as if it did not exist).
#[utoipa::path(
    get, path = "/blobs/{sha256}", operation_id = "getBlob", tag = "checkpoints",
    params(("sha256" = String, Path, description = "SHA-256 of the blob, lowercase hex")),
    responses(
        (status = 200, description = "The blob's bytes", content(("application/octet-stream"))),
        crate::openapi::ReadErrors,
    )
)]
pub(super) async fn get_blob(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(sha256): Path<String>,
) -> Result<Response, ApiError> {
    checked_sha(&sha256)?;
    if !may_read_blob(&state, &who, &sha256).await? {
        return Err(ApiError::NotFound("blob"));
    }
    let bytes = blobs(&state)
        .read(&sha256)
        .await
        .map_err(|e| ApiError::Internal(anyhow::Error::new(e).context("read a blob")))?
        .ok_or(ApiError::NotFound("blob"))?;
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        )],
        bytes,
    )
        .into_response())
}

/// `PUT /api/v1/sessions/{id}/checkpoints/{checkpoint}`: the manifest, once every blob it
/// names is stored (else 409 naming the missing ones). Idempotent.
#[utoipa::path(
    put, path = "/sessions/{id}/checkpoints/{checkpoint}", operation_id = "putCheckpoint", tag = "checkpoints",
    params(
        ("id" = String, Path, description = "Session id or name"),
        ("checkpoint" = String, Path, description = "Checkpoint id: 16 lowercase hex digits"),
    ),
    request_body = CheckpointManifest,
    responses(
        (status = 201, description = "Stored", body = CheckpointSummary),
        (status = 200, description = "Already stored", body = CheckpointSummary),
        crate::openapi::RoleBodyErrors, crate::openapi::Conflict,
    )
)]
pub(super) async fn put(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path((key, id)): Path<(String, String)>,
    body: Body,
) -> Result<(StatusCode, Json<CheckpointSummary>), ApiError> {
    checked_id(&id)?;
    let bytes = axum::body::to_bytes(body, MAX_MANIFEST_BYTES)
        .await
        .map_err(|_| ApiError::TooLarge(MAX_MANIFEST_BYTES))?;
    let manifest: CheckpointManifest =
        serde_json::from_slice(&bytes).map_err(|e| ApiError::Invalid {
            field: "body",
            reason: e.to_string(),
        })?;
    if manifest.id != id {
        return Err(ApiError::Invalid {
            field: "id",
            reason: format!("the manifest is for {}, not {id}", manifest.id),
        });
    }
    let store = blobs(&state);
    let mut missing = Vec::new();
    for b in manifest.blobs() {
        checked_sha(&b.sha256)?;
        if !store.contains(&b.sha256).await {
            missing.push(b.sha256);
        }
    }
    if !missing.is_empty() {
        return Err(ApiError::Conflict(format!(
            "missing blobs: {}",
            missing.join(", ")
        )));
    }
    // Checkpoints are taken by the session's bridge, which runs as its owner.
    let session = session_for(&state.store, &who, &key, Role::Owner).await?;
    let summary = manifest.summary();
    let row = CheckpointRow {
        id: id.clone(),
        session: session.id,
        created_at: manifest.created_at,
        summary: serde_json::to_string(&summary).map_err(anyhow::Error::from)?,
        manifest: serde_json::to_string(&manifest).map_err(anyhow::Error::from)?,
        blobs: manifest.blobs().into_iter().map(|b| b.sha256).collect(),
    };
    let created = state.store.checkpoints.save_checkpoint(&row).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(summary)))
}

/// `GET /api/v1/sessions/{id}/checkpoints`: newest first.
#[utoipa::path(
    get, path = "/sessions/{id}/checkpoints", operation_id = "listCheckpoints", tag = "checkpoints",
    params(("id" = String, Path, description = "Session id or name")),
    responses(
        (status = 200, description = "The session's checkpoints, newest first", body = Vec<CheckpointSummary>),
        crate::openapi::Unauthorized,
        crate::openapi::NotFound,
    )
)]
pub(super) async fn list(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
) -> Result<Json<Vec<CheckpointSummary>>, ApiError> {
    let session = session_for(&state.store, &who, &key, Role::Viewer).await?;
    let rows = state.store.checkpoints.list_checkpoints(session.id).await?;
    let summaries = rows
        .iter()
        .map(|r| serde_json::from_str(&r.summary))
        .collect::<Result<Vec<CheckpointSummary>, _>>()
        .map_err(|e| anyhow::Error::new(e).context("stored checkpoint summary"))?;
    Ok(Json(summaries))
}

/// A stored checkpoint, if the caller may see its session (else 404, like the session).
async fn stored(state: &AppState, who: &Principal, id: &str) -> Result<StoredCheckpoint, ApiError> {
    checked_id(id)?;
    let row = state
        .store
        .checkpoints
        .checkpoint(id)
        .await
        .map_err(not_found_as_checkpoint)?;
    let manifest = serde_json::from_str(&row.manifest)
        .map_err(|e| anyhow::Error::new(e).context("stored checkpoint manifest"))?;
    session_for(&state.store, who, &row.session.to_string(), Role::Viewer)
        .await
        .map_err(|e| match e {
            ApiError::NotFound(_) => ApiError::NotFound("checkpoint"),
            e => e,
        })?;
    Ok(StoredCheckpoint {
        session: row.session,
        manifest,
    })
}

/// `GET /api/v1/checkpoints/{checkpoint}`: the session and the manifest.
#[utoipa::path(
    get, path = "/checkpoints/{checkpoint}", operation_id = "getCheckpoint", tag = "checkpoints",
    params(("checkpoint" = String, Path, description = "Checkpoint id: 16 lowercase hex digits")),
    responses(
        (status = 200, description = "The checkpoint's session and manifest", body = StoredCheckpoint),
        crate::openapi::ReadErrors,
    )
)]
pub(super) async fn get(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(id): Path<String>,
) -> Result<Json<StoredCheckpoint>, ApiError> {
    Ok(Json(stored(&state, &who, &id).await?))
}

async fn blob_for(state: &AppState, sha256: &str) -> Result<Vec<u8>, ApiError> {
    blobs(state)
        .read(sha256)
        .await
        .map_err(|e| ApiError::Internal(anyhow::Error::new(e).context("read a blob")))?
        .ok_or_else(|| {
            ApiError::Internal(anyhow::anyhow!(
                "blob {sha256} of a stored checkpoint is gone"
            ))
        })
}

fn attachment(content_type: &'static str, disposition: String, bytes: Vec<u8>) -> Response {
    let mut resp = bytes.into_response();
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(v) = HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    resp
}

/// `GET /api/v1/checkpoints/{checkpoint}/diff`: the patch from the base commit (`git apply`).
#[utoipa::path(
    get, path = "/checkpoints/{checkpoint}/diff", operation_id = "getCheckpointDiff", tag = "checkpoints",
    params(("checkpoint" = String, Path, description = "Checkpoint id: 16 lowercase hex digits")),
    responses(
        (status = 200, description = "The patch from the base commit, for `git apply`", content((String = "text/x-diff"))),
        crate::openapi::ReadErrors,
    )
)]
pub(super) async fn diff(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let cp = stored(&state, &who, &id).await?;
    let patch = blob_for(&state, &cp.manifest.patch.sha256).await?;
    Ok(attachment(
        "text/x-diff; charset=utf-8",
        format!("inline; filename=\"moor-checkpoint-{id}.patch\""),
        patch,
    ))
}

/// `GET /api/v1/checkpoints/{checkpoint}/archive`: a tar of the files the checkpoint added or
/// changed, with their modes, and `MOOR-CHECKPOINT-<id>.json` (the manifest: base commit,
/// deletions, skipped files).
#[utoipa::path(
    get, path = "/checkpoints/{checkpoint}/archive", operation_id = "getCheckpointArchive", tag = "checkpoints",
    params(("checkpoint" = String, Path, description = "Checkpoint id: 16 lowercase hex digits")),
    responses(
        (status = 200, description = "A tar of the files the checkpoint added or changed, and its manifest", content(("application/x-tar"))),
        crate::openapi::ReadErrors, crate::openapi::Conflict,
    )
)]
pub(super) async fn archive(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let cp = stored(&state, &who, &id).await?;
    let m = &cp.manifest;
    let total: u64 = m.files.iter().filter_map(|f| f.size).sum();
    if total > MAX_ARCHIVE_BYTES {
        return Err(ApiError::Conflict(format!(
            "the checkpoint holds {total} bytes, more than an archive may ({MAX_ARCHIVE_BYTES}); \
             restore it with `moor checkpoints restore {id}` instead"
        )));
    }
    let mut tar = tar::Builder::new(Vec::new());
    let mtime = (m.created_at / 1000).max(0) as u64;
    for f in &m.files {
        let (Some(mode), Some(sha)) = (f.mode.as_deref(), f.sha256.as_deref()) else {
            continue;
        };
        let bytes = blob_for(&state, sha).await?;
        let mut h = tar::Header::new_gnu();
        h.set_mtime(mtime);
        let result = if mode == "120000" {
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_mode(0o777);
            h.set_size(0);
            let target = String::from_utf8_lossy(&bytes).into_owned();
            tar.append_link(&mut h, &f.path, target)
        } else {
            h.set_mode(if mode == "100755" { 0o755 } else { 0o644 });
            h.set_size(bytes.len() as u64);
            tar.append_data(&mut h, &f.path, bytes.as_slice())
        };
        result.map_err(|e| anyhow::Error::new(e).context("build a checkpoint archive"))?;
    }
    let manifest = serde_json::to_vec_pretty(m).map_err(anyhow::Error::from)?;
    let mut h = tar::Header::new_gnu();
    h.set_mtime(mtime);
    h.set_mode(0o644);
    h.set_size(manifest.len() as u64);
    tar.append_data(
        &mut h,
        format!("MOOR-CHECKPOINT-{id}.json"),
        manifest.as_slice(),
    )
    .map_err(|e| anyhow::Error::new(e).context("build a checkpoint archive"))?;
    let bytes = tar
        .into_inner()
        .map_err(|e| anyhow::Error::new(e).context("build a checkpoint archive"))?;
    Ok(attachment(
        "application/x-tar",
        format!("attachment; filename=\"moor-checkpoint-{id}.tar\""),
        bytes,
    ))
}
