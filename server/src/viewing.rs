//! What every viewer transport (SSE, viewer WebSockets) checks before it streams a session, in
//! one order: the cursor the request names (400), the session and the caller's role on it (404,
//! 403 below viewer), then a slot of the caller's streams (429 when all are open).
//!
//! Calls `access`, the session core's cursors and `streams`; never a transport.

use axum::http::HeaderMap;
use moor_protocol::Seq;
use tokio_util::sync::CancellationToken;

use crate::access::{session_with_role, Principal, Role};
use crate::error::ApiError;
use crate::session::cursor::cursor;
use crate::state::AppState;
use crate::store::SessionRow;
use crate::streams::Slot;

/// A viewer stream the caller may open.
#[derive(Debug)]
pub struct Opened {
    /// Where the stream starts (after this seq).
    pub cursor: Seq,
    /// The session streamed.
    pub session: SessionRow,
    /// The caller's role on it (viewer at least).
    pub role: Role,
    /// The caller's stream slot, held while the stream lives.
    pub slot: Slot,
    /// Cancelled at shutdown and when the caller's credential is revoked.
    pub stop: CancellationToken,
    /// Cancelled when the caller's role on the session is removed or changed.
    pub role_stop: CancellationToken,
}

/// Opens a viewer stream of the session `key` for `who`, resuming at the cursor that `headers`
/// (`Last-Event-ID`) or `query` (`?after=`) names.
pub async fn open_viewer_stream(
    state: &AppState,
    who: &Principal,
    key: &str,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<Opened, ApiError> {
    let cursor = cursor(headers, query)?;
    let (session, role) = session_with_role(&state.store, who, key, Role::Viewer).await?;
    let slot = state
        .streams
        .open(&who.name, who.admin)
        .ok_or(ApiError::RateLimited(1))?;
    Ok(Opened {
        stop: state.auth.revocations.token_for(who),
        role_stop: state.auth.revocations.member_token(who, session.id),
        cursor,
        session,
        role,
        slot,
    })
}
