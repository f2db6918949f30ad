//! Remote input: `POST /api/v1/sessions/{id}/inputs`, also used by viewer WebSockets.
//! Idempotent by `client_msg_id`; the bridge picks inputs up from the log when it is connected,
//! or at its next handshake.

use axum::extract::{Path, State};
use axum::Json;
use moor_protocol::api::{InputAccepted, InputRequest};
use moor_protocol::{kinds, now_ms, BodyError, EntryBody, SessionId};

use crate::access::{session_for, Role};
use crate::auth::{AuthUser, Principal};
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::{Append, Appended, IdemKey};

/// Longest accepted `client_msg_id`.
const MAX_CLIENT_MSG_ID: usize = 128;

/// `POST /api/v1/sessions/{id}/inputs`.
pub(super) async fn create(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
    body: Result<bytes::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Json<InputAccepted>, ApiError> {
    let session = session_for(&state, &who, &key, Role::Controller).await?;
    let req: InputRequest = super::parse_json(body, state.config.max_body_bytes)?;
    Ok(Json(submit(&state, session.id, &who, req).await?))
}

/// Validates and appends one input.
pub(crate) async fn submit(
    state: &AppState,
    session: SessionId,
    who: &Principal,
    req: InputRequest,
) -> Result<InputAccepted, ApiError> {
    validate(&req)?;
    let append = Append {
        ts: now_ms(),
        kind: req.kind,
        author: who.author(),
        payload: req.payload,
        key: IdemKey::ClientMsg(req.client_msg_id),
    };
    let outcome = state.log.append(session, vec![append]).await?.pop();
    match outcome {
        Some(Appended::Stored(e)) => Ok(InputAccepted {
            seq: e.seq,
            duplicate: false,
        }),
        Some(Appended::Duplicate(seq)) => Ok(InputAccepted {
            seq,
            duplicate: true,
        }),
        other => Err(ApiError::Internal(anyhow::anyhow!(
            "unexpected input outcome {other:?}"
        ))),
    }
}

fn validate(req: &InputRequest) -> Result<(), ApiError> {
    if req.client_msg_id.is_empty() || req.client_msg_id.len() > MAX_CLIENT_MSG_ID {
        return Err(ApiError::Invalid {
            field: "client_msg_id",
            reason: format!("must be 1 to {MAX_CLIENT_MSG_ID} characters"),
        });
    }
    if !kinds::is_input(&req.kind) || !kinds::is_valid(&req.kind) {
        return Err(ApiError::Invalid {
            field: "kind",
            reason: format!(
                "{:?} is not an input kind (e.g. {:?})",
                req.kind,
                kinds::INPUT_TEXT
            ),
        });
    }
    // Other input kinds are checked by the bridge, which reports a malformed one as failed.
    let malformed = matches!(
        EntryBody::decode(&req.kind, &req.payload),
        Err(BodyError::Malformed(_))
    );
    if req.kind == kinds::INPUT_TEXT && malformed {
        return Err(ApiError::Invalid {
            field: "payload",
            reason: "input.text needs a string field \"text\"".into(),
        });
    }
    Ok(())
}
