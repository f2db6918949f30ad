//! Checkpoints (G7): the bridge uploads the blobs a checkpoint names (`http::blobs`), then its
//! manifest (`PUT /sessions/{id}/checkpoints/{checkpoint}`); anyone with access lists them,
//! reads one, or gets its diff as a patch (its archive: `http::archive`).
//!
//! A checkpoint is keyed by its session and its id. Uploading one takes the owner role on the
//! session, checked before the body is read; the manifest is bounded, parsed and checked by
//! [`moor_protocol::manifest::parse_manifest`], and may name only blobs the uploader knows (see
//! `http::blobs`), each with the size the store holds. `GET /checkpoints/{checkpoint}` looks the
//! id up among the sessions the caller may read; `?session=` picks one when several hold it.
//!
//! Part of the HTTP transport: calls `access`, `blobs`, `store`; never `sse` or `ws`.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use moor_protocol::checkpoint::{
    is_checkpoint_id, CheckpointManifest, CheckpointSummary, StoredCheckpoint,
};
use moor_protocol::manifest::parse_manifest;

use super::blobs::{blobs, checked, known_blobs};
use crate::access::{role_on, session_for, AuthUser, Principal, Role};
use crate::error::ApiError;
use crate::extract::Json;
use crate::state::AppState;
use crate::store::{CheckpointRow, StoreError};
use crate::util::query_param;

fn checked_id(id: &str) -> Result<(), ApiError> {
    checked(is_checkpoint_id(id), "checkpoint", || {
        format!("{id:?} is not a checkpoint id (16 lowercase hex digits)")
    })
}

/// The manifest in `body`, read only up to the configured limit.
async fn read_manifest(state: &AppState, body: Body) -> Result<CheckpointManifest, ApiError> {
    let max = state.config.checkpoints.max_manifest_bytes;
    let bytes = axum::body::to_bytes(body, max)
        .await
        .map_err(|_| ApiError::TooLarge(max))?;
    parse_manifest(&bytes).map_err(|e| ApiError::Invalid {
        field: e.field,
        reason: e.reason,
    })
}

/// Refuses a manifest naming a blob the uploader does not know or the store lacks (409, which
/// the bridge answers by sending them), or claiming a size other than the stored one (400).
async fn check_blobs(
    state: &AppState,
    who: &Principal,
    m: &CheckpointManifest,
) -> Result<(), ApiError> {
    let names: Vec<String> = m.blobs().into_iter().map(|b| b.sha256).collect();
    let known = known_blobs(state, who, &names).await?;
    let store = blobs(state);
    let mut stored: HashMap<&str, u64> = HashMap::new();
    let mut missing = Vec::new();
    for sha in &names {
        match store.size(sha).await {
            Some(size) if known.contains(sha) => {
                stored.insert(sha, size);
            }
            _ => missing.push(sha.as_str()),
        }
    }
    if !missing.is_empty() {
        return Err(ApiError::Conflict(format!(
            "missing blobs: {}",
            missing.join(", ")
        )));
    }
    let claims = std::iter::once(("patch", Some(&m.patch.sha256), Some(m.patch.size))).chain(
        m.files
            .iter()
            .map(|f| (f.path.as_str(), f.sha256.as_ref(), f.size)),
    );
    for (what, sha, claimed) in claims {
        let Some(sha) = sha else { continue };
        let size = stored.get(sha.as_str()).copied();
        if claimed != size {
            return Err(ApiError::Invalid {
                field: "files",
                reason: format!(
                    "{what:?} claims {claimed:?} bytes, but blob {sha} holds {}",
                    size.unwrap_or(0)
                ),
            });
        }
    }
    Ok(())
}

/// `PUT /api/v1/sessions/{id}/checkpoints/{checkpoint}`: the manifest, once every blob it
/// names is stored and known to the uploader (else 409 naming the others). Idempotent.
#[utoipa::path(
    put, path = "/sessions/{id}/checkpoints/{checkpoint}", operation_id = "putCheckpoint", tag = "checkpoints",
    params(
        ("id" = String, Path, description = "Session id or name"),
        ("checkpoint" = String, Path, description = "Checkpoint id: 16 lowercase hex digits, unique within the session"),
    ),
    request_body = CheckpointManifest,
    responses(
        (status = 201, description = "Stored", body = CheckpointSummary),
        (status = 200, description = "Already stored", body = CheckpointSummary),
        crate::openapi::BadRequest, crate::openapi::Unauthorized, crate::openapi::Forbidden, crate::openapi::NotFound, crate::openapi::Conflict, crate::openapi::TooLarge,
    )
)]
pub(super) async fn put(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path((key, id)): Path<(String, String)>,
    body: Body,
) -> Result<(StatusCode, Json<CheckpointSummary>), ApiError> {
    checked_id(&id)?;
    // Checkpoints are taken by the session's bridge, which runs as its owner; nothing of the
    // body is read for anyone else.
    let session = session_for(&state.store, &who, &key, Role::Owner).await?;
    let manifest = read_manifest(&state, body).await?;
    checked(manifest.id == id, "id", || {
        format!("the manifest is for {}, not {id}", manifest.id)
    })?;
    check_blobs(&state, &who, &manifest).await?;
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
        crate::openapi::LookupErrors,
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

fn as_checkpoint(e: ApiError) -> ApiError {
    match e {
        ApiError::NotFound(_) => ApiError::NotFound("checkpoint"),
        e => e,
    }
}

/// Checkpoint `id` of the session `?session=` names or, without it, of the one session the
/// caller may read that holds it (several: 409 asking for `?session=`). Sessions the caller may
/// not read are answered as if they did not hold it.
pub(super) async fn stored(
    state: &AppState,
    who: &Principal,
    id: &str,
    query: Option<&str>,
) -> Result<StoredCheckpoint, ApiError> {
    checked_id(id)?;
    let session = match query.and_then(|q| query_param(q, "session")) {
        Some(key) => {
            session_for(&state.store, who, &key, Role::Viewer)
                .await
                .map_err(as_checkpoint)?
                .id
        }
        None => {
            let mut readable = Vec::new();
            for s in state.store.checkpoints.checkpoint_sessions(id).await? {
                let row = match state.store.log.find_session(&s.to_string()).await {
                    Ok(row) => row,
                    Err(StoreError::NotFound) => continue,
                    Err(e) => return Err(e.into()),
                };
                if role_on(&state.store, who, &row).await?.is_some() {
                    readable.push(s);
                }
            }
            match readable.as_slice() {
                [] => return Err(ApiError::NotFound("checkpoint")),
                [one] => *one,
                several => {
                    return Err(ApiError::Conflict(format!(
                        "{} sessions you may read hold checkpoint {id}; name one with \
                         ?session= ({})",
                        several.len(),
                        several
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )))
                }
            }
        }
    };
    let row = state
        .store
        .checkpoints
        .checkpoint(session, id)
        .await
        .map_err(ApiError::missing("checkpoint"))?;
    let manifest = serde_json::from_str(&row.manifest)
        .map_err(|e| anyhow::Error::new(e).context("stored checkpoint manifest"))?;
    Ok(StoredCheckpoint {
        session: row.session,
        manifest,
    })
}

/// `GET /api/v1/checkpoints/{checkpoint}`: the session and the manifest.
#[utoipa::path(
    get, path = "/checkpoints/{checkpoint}", operation_id = "getCheckpoint", tag = "checkpoints",
    params(
        ("checkpoint" = String, Path, description = "Checkpoint id: 16 lowercase hex digits"),
        ("session" = Option<String>, Query, description = "The session (id or name) holding it; needed only when several sessions you may read hold this id"),
    ),
    responses(
        (status = 200, description = "The checkpoint's session and manifest", body = StoredCheckpoint),
        crate::openapi::ReadErrors,
        crate::openapi::Conflict,
    )
)]
pub(super) async fn get(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<StoredCheckpoint>, ApiError> {
    Ok(Json(stored(&state, &who, &id, query.as_deref()).await?))
}

/// A download named `disposition`, of type `content_type`.
pub(super) fn attachment(content_type: &'static str, disposition: String, body: Body) -> Response {
    let mut resp = body.into_response();
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
    params(
        ("checkpoint" = String, Path, description = "Checkpoint id: 16 lowercase hex digits"),
        ("session" = Option<String>, Query, description = "The session (id or name) holding it; needed only when several sessions you may read hold this id"),
    ),
    responses(
        (status = 200, description = "The patch from the base commit, for `git apply`", content((String = "text/x-diff"))),
        crate::openapi::ReadErrors,
        crate::openapi::Conflict,
    )
)]
pub(super) async fn diff(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let cp = stored(&state, &who, &id, query.as_deref()).await?;
    let patch = blobs(&state)
        .open(&cp.manifest.patch.sha256)
        .await
        .map_err(|e| ApiError::Internal(anyhow::Error::new(e).context("read a patch")))?
        .ok_or_else(|| {
            ApiError::Internal(anyhow::anyhow!(
                "the patch of stored checkpoint {id} is gone"
            ))
        })?;
    Ok(attachment(
        "text/x-diff; charset=utf-8",
        format!("inline; filename=\"moor-checkpoint-{id}.patch\""),
        Body::from_stream(tokio_util::io::ReaderStream::new(patch)),
    ))
}
