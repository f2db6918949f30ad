//! Sharing by name is an offer (session owners make it, the named user accepts or declines it):
//! an owner's `PUT …/members/{user}` for someone who is not a member stores an offer and is
//! answered the same whether an account has that name or not, and the session reaches the
//! user's list only when they accept. The offered user lists their offers, accepts or declines.
//!
//! Part of the HTTP transport: calls `access` and `store`; never `sse` or `ws`.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use moor_protocol::api::SessionOffer;
use moor_protocol::now_ms;

use crate::access::{revoke, AuthUser, Principal, Role};
use crate::error::ApiError;
use crate::extract::Json;
use crate::state::AppState;
use crate::store::{OfferLimits, OfferRow, Revocation, SessionRow};

/// How long an offer waits for its user: seven days.
pub(crate) const OFFER_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Pending offers per session (more: 409) and per user name from all sessions (more: dropped
/// with the same answer, so a flood from one owner cannot fill anyone's list).
pub(crate) const OFFER_LIMITS: OfferLimits = OfferLimits {
    per_session: 64,
    per_user: 20,
};

/// The answer to an offer, made or dropped alike: `202 {"status": "offered"}`.
fn offered() -> (StatusCode, Json<serde_json::Value>) {
    (
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "status": "offered" })),
    )
}

/// Offers `role` on `session` to `user` (someone with no role on it). Nothing in the answer,
/// its work or the owner's member list depends on whether an account has that name.
pub(crate) async fn offer(
    state: &AppState,
    who: &Principal,
    session: &SessionRow,
    user: &str,
    role: Role,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let now = now_ms();
    let row = OfferRow {
        session: session.id,
        principal: user.to_owned(),
        role,
        offered_by: who.name.clone(),
        offered_at: now,
        expires_at: now.saturating_add(OFFER_TTL.as_millis() as i64),
    };
    // Stored or dropped (past the name's bound), the answer is the same.
    state.store.access.offer(&row, OFFER_LIMITS).await?;
    Ok(offered())
}

/// `GET /api/v1/offers` (a user): the roles offered to the caller and not yet accepted,
/// newest first.
#[utoipa::path(
    get, path = "/offers", operation_id = "listOffers", tag = "access",
    responses(
        (status = 200, description = "The offers waiting for the caller, newest first", body = Vec<SessionOffer>),
        crate::openapi::Unauthorized,
    )
)]
pub(crate) async fn list_offers(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
) -> Result<Json<Vec<SessionOffer>>, ApiError> {
    let rows = state.store.access.offers_to(&who.name, now_ms()).await?;
    let mut offers = Vec::with_capacity(rows.len());
    for row in rows {
        // At most `OFFER_LIMITS.per_user` rows: one lookup each.
        let session = state
            .store
            .log
            .find_session(&row.session.to_string())
            .await?;
        offers.push(SessionOffer {
            session: row.session,
            name: session.name,
            role: row.role,
            offered_by: row.offered_by,
            offered_at: row.offered_at,
            expires_at: row.expires_at,
        });
    }
    Ok(Json(offers))
}

/// `POST /api/v1/offers/{session}/accept` (the offered user): the offered role becomes the
/// caller's. 404 when no live offer of that session is addressed to them.
#[utoipa::path(
    post, path = "/offers/{session}/accept", operation_id = "acceptOffer", tag = "access",
    params(("session" = String, Path, description = "Session id or name")),
    responses(
        (status = 200, description = "The caller is a member with the offered role", body = crate::openapi::Redeemed),
        crate::openapi::Unauthorized,
        crate::openapi::NotFound,
        crate::openapi::Conflict,
    )
)]
pub(crate) async fn accept_offer(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let session = offered_session(&state, &key).await?;
    let role = state
        .store
        .access
        .accept_offer(session.id, &who.name, now_ms())
        .await?
        .ok_or(ApiError::NotFound("offer"))?;
    // A role held before is replaced: its connections end and reconnect.
    let member = Revocation::Member {
        session: session.id,
        principal: who.name,
    };
    revoke(&state.auth, &state.store, member).await;
    Ok(Json(
        serde_json::json!({ "session": session.id, "role": role }),
    ))
}

/// `DELETE /api/v1/offers/{session}` (the offered user): declines the offer. 404 when there
/// is none.
#[utoipa::path(
    delete, path = "/offers/{session}", operation_id = "declineOffer", tag = "access",
    params(("session" = String, Path, description = "Session id or name")),
    responses(
        (status = 204, description = "The offer is gone"),
        crate::openapi::Unauthorized,
        crate::openapi::NotFound,
    )
)]
pub(crate) async fn decline_offer(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
) -> Result<StatusCode, ApiError> {
    let session = offered_session(&state, &key).await?;
    if !state
        .store
        .access
        .decline_offer(session.id, &who.name)
        .await?
    {
        return Err(ApiError::NotFound("offer"));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// The session `key` names, for an offer: an unknown session is the same 404 as a missing
/// offer.
async fn offered_session(state: &AppState, key: &str) -> Result<SessionRow, ApiError> {
    state
        .store
        .log
        .find_session(key)
        .await
        .map_err(ApiError::missing("offer"))
}
