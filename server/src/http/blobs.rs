//! Content-addressed blobs of checkpoints, scoped by access: the bridge asks which blobs it
//! must send (`POST /blobs/missing`) and sends them (`PUT /blobs/{sha256}`); whoever may read a
//! session with a checkpoint naming a blob reads it (`GET /blobs/{sha256}`).
//!
//! Knowing a hash proves nothing, so nothing here answers from the hash alone. A caller
//! *knows* a blob when it sent it (the upload is recorded, and its bytes had to hash to the
//! name) or when a checkpoint of a session it is a member of names it; administrators know
//! every blob. `missing` calls every blob the caller does not know missing, so its answer tells
//! nothing about what others stored; `put_blob` reads, hashes and writes a blob the caller does
//! not know even when the same content is stored, and answers as for a new one.
//!
//! Part of the HTTP transport: calls `access`, `blobs`, `store`; never `sse` or `ws`.

use std::collections::HashSet;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use moor_protocol::checkpoint::{
    is_sha256_hex, BlobStored, MissingBlobs, MissingBlobsRequest, MISSING_QUERY_MAX,
};

use crate::access::{AuthUser, Principal, Role};
use crate::blobs::{BlobError, BlobStore};
use crate::error::ApiError;
use crate::extract::Json;
use crate::quota::QuotaError;
use crate::state::AppState;
use crate::store::io_full;

/// The blob store under the data directory.
pub(super) fn blobs(state: &AppState) -> BlobStore {
    BlobStore::new(&state.config.data_dir)
}

/// `Invalid { field, reason }` unless `ok`.
pub(super) fn checked(
    ok: bool,
    field: &'static str,
    reason: impl FnOnce() -> String,
) -> Result<(), ApiError> {
    if ok {
        Ok(())
    } else {
        Err(ApiError::Invalid {
            field,
            reason: reason(),
        })
    }
}

fn checked_sha(sha256: &str) -> Result<(), ApiError> {
    checked(is_sha256_hex(sha256), "sha256", || {
        format!("{sha256:?} is not a lowercase hex SHA-256")
    })
}

/// Of `sha256` (well-formed), the blobs `who` knows (see the module documentation); whether
/// they are stored is not looked at.
pub(super) async fn known_blobs(
    state: &AppState,
    who: &Principal,
    sha256: &[String],
) -> Result<HashSet<String>, ApiError> {
    if who.admin {
        return Ok(sha256.iter().cloned().collect());
    }
    let known = state
        .store
        .checkpoints
        .blobs_known_to(&who.name, sha256)
        .await?;
    Ok(known.into_iter().collect())
}

/// May `who` store blobs at all? Blobs exist for checkpoints, which only a session's owner
/// uploads: someone who owns no session has nothing to send (403). An account whose stored
/// checkpoint content has reached its quota may send no more (409, saying so).
async fn may_upload(state: &AppState, who: &Principal) -> Result<(), ApiError> {
    if who.admin {
        return Ok(());
    }
    let mine = state.store.access.memberships(&who.name).await?;
    if !mine.iter().any(|(_, role)| *role == Role::Owner) {
        return Err(ApiError::Forbidden);
    }
    let checkpoints = &*state.store.checkpoints;
    match state.quotas.may_store_blob(checkpoints, who).await {
        Ok(()) => Ok(()),
        Err(QuotaError::Exceeded(msg)) => Err(ApiError::Conflict(msg)),
        Err(QuotaError::Store(e)) => Err(e.into()),
    }
}

/// `POST /api/v1/blobs/missing`: which of these hashes the caller must send.
#[utoipa::path(
    post, path = "/blobs/missing", operation_id = "findMissingBlobs", tag = "checkpoints",
    request_body = MissingBlobsRequest,
    responses(
        (status = 200, description = "The hashes the caller must send: every one not stored, or stored but neither sent by the caller nor named by a checkpoint of a session it is a member of", body = MissingBlobs),
        crate::openapi::BodyErrors,
    )
)]
pub(super) async fn missing(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Json(req): Json<MissingBlobsRequest>,
) -> Result<Json<MissingBlobs>, ApiError> {
    checked(req.sha256.len() <= MISSING_QUERY_MAX, "sha256", || {
        format!("at most {MISSING_QUERY_MAX} hashes per request")
    })?;
    for sha in &req.sha256 {
        checked_sha(sha)?;
    }
    let known = known_blobs(&state, &who, &req.sha256).await?;
    let store = blobs(&state);
    let mut missing = Vec::new();
    for sha in req.sha256 {
        if !known.contains(&sha) || !store.contains(&sha).await {
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
        (status = 201, description = "Stored for the caller (new to it, whether or not others stored the same content)", body = BlobStored),
        (status = 200, description = "The caller had already sent it or may read it", body = BlobStored),
        crate::openapi::BadRequest, crate::openapi::Unauthorized, crate::openapi::Forbidden, crate::openapi::TooLarge,
    )
)]
pub(super) async fn put_blob(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(sha256): Path<String>,
    body: Body,
) -> Result<(StatusCode, Json<BlobStored>), ApiError> {
    checked_sha(&sha256)?;
    may_upload(&state, &who).await?;
    let known = known_blobs(&state, &who, std::slice::from_ref(&sha256))
        .await?
        .contains(&sha256);
    let max = state.config.checkpoints.max_blob_bytes;
    let (size, written) =
        blobs(&state)
            .put(&sha256, body, known, max)
            .await
            .map_err(|e| match e {
                e @ (BlobError::Mismatch { .. } | BlobError::Body(_)) => ApiError::Invalid {
                    field: "body",
                    reason: e.to_string(),
                },
                BlobError::TooLarge(max) => {
                    ApiError::TooLarge(usize::try_from(max).unwrap_or(usize::MAX))
                }
                BlobError::Io(e) if io_full(&e) => {
                    let e = anyhow::Error::new(e).context("store a blob");
                    state.hub.metrics().storage_refused(&e);
                    ApiError::StorageFull(e)
                }
                BlobError::Io(e) => {
                    ApiError::Internal(anyhow::Error::new(e).context("store a blob"))
                }
            })?;
    if written {
        state.hub.metrics().storage_written();
    }
    if !known {
        let now = moor_protocol::now_ms();
        state
            .store
            .checkpoints
            .record_blob_upload(&sha256, &who.name, size, now)
            .await?;
    }
    let status = if known {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((
        status,
        Json(BlobStored {
            sha256,
            size,
            created: !known,
        }),
    ))
}

/// Whether `who` may read blob `sha256`: administrators may read any; anyone else needs a role
/// (viewer or more) on a session with a checkpoint naming it. Sending a blob is not enough.
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
/// naming the blob (as if it did not exist). Streamed from disk.
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
    let file = blobs(&state)
        .open(&sha256)
        .await
        .map_err(|e| ApiError::Internal(anyhow::Error::new(e).context("read a blob")))?
        .ok_or(ApiError::NotFound("blob"))?;
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(file));
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        )],
        body,
    )
        .into_response())
}
