//! Remote input submission, for every transport that takes input (`POST …/inputs`, viewer
//! WebSockets): validates one input (a malformed payload of a known input kind is refused here,
//! not failed later by the bridge) and appends it through the [`Log`]. Idempotent by
//! `client_msg_id`: the same input again is answered with its stored seq, a different input
//! under a stored id is a conflict that carries the stored entry. The bridge picks inputs up
//! from the log when it is connected, or at its next handshake; the answer says which
//! (`queued`: no bridge holds the session's lease). The caller has checked the role already.
//! A permission decision is accepted only while its request is pending in the session's state
//! as of the log's head (G9): a decision for a request already answered, withdrawn, or asked
//! by an agent that is gone is refused with 409, never stored.
//!
//! Part of the session core: calls `session::log`, `store` and `error`; never a transport.

use crate::metrics::InputOutcome;
use moor_protocol::api::{InputAccepted, InputRequest};
use moor_protocol::{kinds, now_ms, BodyError, Entry, EntryBody, Seq, SessionId};

use super::leases::Leases;
use super::log::Log;
use super::states::States;
use crate::error::ApiError;
use crate::store::{Append, Appended, IdemKey, LogStore, Range};

/// Longest accepted `client_msg_id`.
const MAX_CLIENT_MSG_ID: usize = 128;

/// Validates and appends one input.
///
/// `author` is the caller's `Principal::author()`; `store` reads the input already stored under a repeated `client_msg_id`;
/// `leases` tells whether a bridge will be sent it now.
pub async fn submit(
    log: &Log,
    store: &dyn LogStore,
    leases: &Leases,
    states: &States,
    session: SessionId,
    author: String,
    req: InputRequest,
) -> Result<InputAccepted, ApiError> {
    let checked = async {
        validate(&req)?;
        require_pending(store, states, session, &req).await
    }
    .await;
    if let Err(e) = checked {
        log.metrics().input(InputOutcome::Refused);
        return Err(e);
    }
    submit_checked(log, store, leases, session, author, req).await
}

/// Appends an input its caller checked (`http::machines` checks an `input.host` action against
/// what the machine offers): idempotent by `client_msg_id`, as [`submit`].
pub async fn submit_checked(
    log: &Log,
    store: &dyn LogStore,
    leases: &Leases,
    session: SessionId,
    author: String,
    req: InputRequest,
) -> Result<InputAccepted, ApiError> {
    let result: Result<InputAccepted, ApiError> = async {
        let append = Append {
            ts: now_ms(),
            kind: req.kind.clone(),
            author: author.clone(),
            payload: req.payload.clone().into(),
            key: IdemKey::ClientMsg(req.client_msg_id.clone()),
        };
        let outcome = log.append(session, vec![append]).await?.pop();
        match outcome {
            Some(Appended::Stored(e)) => Ok(InputAccepted {
                seq: e.seq,
                duplicate: false,
                queued: !leases.is_held(session).await,
            }),
            Some(Appended::Duplicate(seq)) => {
                let stored = stored_input(store, session, seq).await?;
                same_request(stored, &author, &req)?;
                Ok(InputAccepted {
                    seq,
                    duplicate: true,
                    queued: !leases.is_held(session).await,
                })
            }
            other => Err(ApiError::Internal(anyhow::anyhow!(
                "unexpected input outcome {other:?}"
            ))),
        }
    }
    .await;
    log.metrics().input(match &result {
        Ok(a) if a.duplicate => InputOutcome::Duplicate,
        Ok(_) => InputOutcome::Accepted,
        Err(_) => InputOutcome::Refused,
    });
    result
}

/// Refuses with the 409 [`submit_checked`] would give an input whose `client_msg_id` the log
/// already holds for another request, so that a caller who makes something before submitting
/// (a machine's new session) makes nothing for a request that would be refused. A retry of the
/// same request passes.
pub async fn refuse_reused_id(
    store: &dyn LogStore,
    session: SessionId,
    author: &str,
    req: &InputRequest,
) -> Result<(), ApiError> {
    match store.client_msg_seq(session, &req.client_msg_id).await? {
        Some(seq) => same_request(stored_input(store, session, seq).await?, author, req),
        None => Ok(()),
    }
}

/// A 409 naming `stored` unless it is the input `req` from `author`.
fn same_request(stored: Entry, author: &str, req: &InputRequest) -> Result<(), ApiError> {
    if (
        stored.kind.as_str(),
        stored.author.as_str(),
        &stored.payload,
    ) == (req.kind.as_str(), author, &req.payload)
    {
        return Ok(());
    }
    Err(ApiError::InputConflict(Box::new((
        req.client_msg_id.clone(),
        stored,
    ))))
}

/// Refuses an `input.permission` whose request is not pending as of the log's head (or, with
/// no `request_id`, unless exactly one request is pending). A retry of a decision that was
/// stored and has since settled its request is refused too: the request is no longer pending.
async fn require_pending(
    store: &dyn LogStore,
    states: &States,
    session: SessionId,
    req: &InputRequest,
) -> Result<(), ApiError> {
    let Ok(EntryBody::InputPermission(decision)) = EntryBody::decode(&req.kind, &req.payload)
    else {
        return Ok(());
    };
    let head = store.find_session(&session.to_string()).await?.head_seq;
    let state = states.current(session, head).await?;
    let pending = &state.pending_permissions;
    let is_pending = match &decision.request_id {
        Some(id) => pending.iter().any(|p| &p.request_id == id),
        None => pending.len() == 1,
    };
    if is_pending {
        Ok(())
    } else {
        Err(ApiError::Conflict(match decision.request_id {
            Some(id) => format!("permission request {id:?} is not pending (answered, withdrawn, or its agent is gone)"),
            None => format!("{} permission requests are pending: name one with request_id", pending.len()),
        }))
    }
}

/// The input the store named as already holding a `client_msg_id`.
async fn stored_input(
    store: &dyn LogStore,
    session: SessionId,
    seq: Seq,
) -> Result<Entry, ApiError> {
    store
        .read(session, Range::After(Seq(seq.0.saturating_sub(1))), 1)
        .await?
        .pop()
        .filter(|e| e.seq == seq)
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("input {seq} is not stored")))
}

/// Checks one input as [`submit`] does before appending it: a 400 for a bad `client_msg_id`,
/// kind, or a payload that is not valid for a known input kind.
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
    if req.kind == kinds::INPUT_HOST {
        return Err(ApiError::Invalid {
            field: "kind",
            reason: "a machine's actions are asked for through /api/v1/machines".into(),
        });
    }
    // An input kind this server does not know is stored as it is, for a newer bridge.
    if let Err(BodyError::Malformed(e)) = EntryBody::decode(&req.kind, &req.payload) {
        return Err(ApiError::Invalid {
            field: "payload",
            reason: format!("not a valid {} payload: {e}", req.kind),
        });
    }
    Ok(())
}
