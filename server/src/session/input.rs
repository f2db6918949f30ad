//! Remote input submission, for every transport that takes input (`POST …/inputs`, viewer
//! WebSockets): validates one input and appends it through the [`Log`]. Idempotent by
//! `client_msg_id`; the bridge picks inputs up from the log when it is connected, or at its next
//! handshake. The caller has checked the role already.
//!
//! Part of the session core: calls `session::log`, `store` and `error`; never a transport.

use moor_protocol::api::{InputAccepted, InputRequest};
use moor_protocol::{kinds, now_ms, BodyError, EntryBody, SessionId};

use super::log::Log;
use crate::error::ApiError;
use crate::store::{Append, Appended, IdemKey};

/// Longest accepted `client_msg_id`.
const MAX_CLIENT_MSG_ID: usize = 128;

/// Validates and appends one input.
///
/// `author` is the caller's `Principal::author()`.
pub async fn submit(
    log: &Log,
    session: SessionId,
    author: String,
    req: InputRequest,
) -> Result<InputAccepted, ApiError> {
    validate(&req)?;
    let append = Append {
        ts: now_ms(),
        kind: req.kind,
        author,
        payload: req.payload,
        key: IdemKey::ClientMsg(req.client_msg_id),
    };
    let outcome = log.append(session, vec![append]).await?.pop();
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

/// Checks one input as [`submit`] does before appending it: a 400 for a bad `client_msg_id`,
/// kind or `input.text` payload.
pub fn validate(req: &InputRequest) -> Result<(), ApiError> {
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
