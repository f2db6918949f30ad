//! Sharing endpoints (session owners): members (list, put, delete; a put for someone who is
//! not a member is an offer, see `offers`) and share links (create, list, redeem, revoke).
//! Roles are checked by `access`; a link's secret is stored only hashed and is answered once,
//! when the link is made.
//!
//! Part of the HTTP transport: calls `access` and `store`; never `sse` or `ws`.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use moor_protocol::api::{SessionMember, ShareLinkInfo};
use moor_protocol::now_ms;
use serde::Deserialize;

use crate::access::users::checked_user_name;
use crate::access::{random_secret, revoke, session_for, token_hash, AuthUser, Role};
use crate::error::ApiError;
use crate::extract::Json;
use crate::http::offers;
use crate::state::AppState;
use crate::store::{MemberRow, Revocation, ShareLinkRow, StoreError};

/// `GET /api/v1/sessions/{id}/members` (owner): everyone with a role on the session, and
/// every live offer of one (marked `pending`), by name.
#[utoipa::path(
    get, path = "/sessions/{id}/members", operation_id = "listMembers", tag = "access",
    params(("id" = String, Path, description = "Session id or name")),
    responses(
        (status = 200, description = "Everyone with a role on the session, and the pending offers of one", body = Vec<SessionMember>),
        crate::openapi::RoleErrors,
    )
)]
pub(crate) async fn list_members(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
) -> Result<Json<Vec<SessionMember>>, ApiError> {
    let session = session_for(&state.store, &who, &key, Role::Owner).await?;
    let rows = state.store.access.members(session.id).await?;
    let offers = state
        .store
        .access
        .session_offers(session.id, now_ms())
        .await?;
    let mut list: Vec<SessionMember> = rows.into_iter().map(member).collect();
    // A pending offer is listed under the name the owner typed, marked as such.
    for o in offers {
        if !list.iter().any(|m| m.principal == o.principal) {
            list.push(SessionMember {
                principal: o.principal,
                role: o.role,
                via_link: None,
                pending: true,
                offer_expires_at: Some(o.expires_at),
            });
        }
    }
    list.sort_by(|a, b| a.principal.cmp(&b.principal));
    Ok(Json(list))
}

/// `GET /api/v1/sessions/{id}/share-links` (owner): the session's links, live or not, newest
/// first, without their secrets.
#[utoipa::path(
    get, path = "/sessions/{id}/share-links", operation_id = "listShareLinks", tag = "access",
    params(("id" = String, Path, description = "Session id or name")),
    responses(
        (status = 200, description = "The session's share links, newest first, without secrets", body = Vec<ShareLinkInfo>),
        crate::openapi::RoleErrors,
    )
)]
pub(crate) async fn list_share_links(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
) -> Result<Json<Vec<ShareLinkInfo>>, ApiError> {
    let session = session_for(&state.store, &who, &key, Role::Owner).await?;
    let rows = state.store.access.share_links(session.id).await?;
    Ok(Json(rows.into_iter().map(|r| r.info).collect()))
}

fn member(row: MemberRow) -> SessionMember {
    SessionMember {
        role: row.role,
        principal: row.principal,
        via_link: row.via_link,
        pending: false,
        offer_expires_at: None,
    }
}

/// `PUT /api/v1/sessions/{id}/members/{user}`.
#[derive(Deserialize, utoipa::ToSchema)]
pub(crate) struct MemberRequest {
    /// The role to give.
    #[schema(value_type = Role)]
    role: String,
}

/// `PUT /api/v1/sessions/{id}/members/{user}` `{role}` (owner): changes a member's role, or
/// offers the role to someone who is not a member (`202 {"status": "offered"}`, the same
/// whether an account has that name or not; they accept or decline it). Administrators, who
/// manage the accounts, give the role directly (404 for an unknown user). Taking the owner role
/// from the session's last owner is a 409, as is an offer past the session's pending offers.
#[utoipa::path(
    put, path = "/sessions/{id}/members/{user}", operation_id = "putMember", tag = "access",
    params(
        ("id" = String, Path, description = "Session id or name"),
        ("user" = String, Path, description = "The user name"),
    ),
    request_body = MemberRequest,
    responses(
        (status = 202, description = "The role is offered to the user (said the same whether an account has the name or not)", body = crate::openapi::OfferMade),
        (status = 204, description = "The member (or, for an administrator, the user) has the role on the session"),
        crate::openapi::RoleBodyErrors,
        crate::openapi::Conflict,
    )
)]
pub(crate) async fn put_member(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path((key, user)): Path<(String, String)>,
    Json(req): Json<MemberRequest>,
) -> Result<Response, ApiError> {
    let role = Role::parse(&req.role).ok_or_else(|| ApiError::Invalid {
        field: "role",
        reason: "one of viewer, controller, owner".into(),
    })?;
    checked_user_name("user", &user)?;
    let session = session_for(&state.store, &who, &key, Role::Owner).await?;
    if who.admin {
        match state.store.access.user(&user).await {
            Ok(u) if u.revoked_at.is_none() => {}
            Ok(_) | Err(StoreError::NotFound) => return Err(ApiError::NotFound("user")),
            Err(e) => return Err(e.into()),
        }
    } else if state
        .store
        .access
        .member_role(session.id, &user)
        .await?
        .is_none()
    {
        return Ok(offers::offer(&state, &who, &session, &user, role)
            .await?
            .into_response());
    }
    state
        .store
        .access
        .set_member(session.id, &user, role)
        .await?;
    // Their open connections carry the old role: end them (they reconnect with the new one).
    let member = Revocation::Member {
        session: session.id,
        principal: user,
    };
    revoke(&state.auth, &state.store, member).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `DELETE /api/v1/sessions/{id}/members/{user}` (owner): stops sharing with `user` (their
/// role, or the offer of one); the session's last owner cannot be removed (409).
#[utoipa::path(
    delete, path = "/sessions/{id}/members/{user}", operation_id = "deleteMember", tag = "access",
    params(
        ("id" = String, Path, description = "Session id or name"),
        ("user" = String, Path, description = "The user name"),
    ),
    responses(
        (status = 204, description = "The user has no role on the session and no offer of one any more"),
        crate::openapi::RoleErrors,
        crate::openapi::Conflict,
    )
)]
pub(crate) async fn delete_member(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path((key, user)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let session = session_for(&state.store, &who, &key, Role::Owner).await?;
    state.store.access.remove_member(session.id, &user).await?;
    let member = Revocation::Member {
        session: session.id,
        principal: user,
    };
    revoke(&state.auth, &state.store, member).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Longest a share link may live.
const MAX_LINK_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// Most uses of one share link.
const MAX_LINK_USES: i64 = 1000;

/// `POST /api/v1/sessions/{id}/share-links`.
#[derive(Deserialize, utoipa::ToSchema)]
pub(crate) struct NewShareLink {
    /// The role the link grants.
    #[schema(value_type = Role)]
    role: String,
    /// Seconds it stays valid (default one day).
    #[serde(default)]
    expires_in: Option<u64>,
    /// How many people may redeem it (default 1).
    #[serde(default)]
    uses: Option<i64>,
}

/// `POST /api/v1/sessions/{id}/share-links` `{role, expires_in?, uses?}` (owner): a link that
/// grants `role` to whoever logs in and redeems it. The secret is in the answer only.
#[utoipa::path(
    post, path = "/sessions/{id}/share-links", operation_id = "createShareLink", tag = "access",
    params(("id" = String, Path, description = "Session id or name")),
    request_body = NewShareLink,
    responses(
        (status = 201, description = "The new link, with its secret (shown this once)", body = crate::openapi::ShareLinkCreated),
        crate::openapi::RoleBodyErrors,
    )
)]
pub(crate) async fn create_share_link(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
    Json(req): Json<NewShareLink>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let session = session_for(&state.store, &who, &key, Role::Owner).await?;
    let role = Role::parse(&req.role).ok_or_else(|| ApiError::Invalid {
        field: "role",
        reason: "one of viewer, controller, owner".into(),
    })?;
    let ttl = Duration::from_secs(req.expires_in.unwrap_or(24 * 3600)).min(MAX_LINK_TTL);
    let uses = req.uses.unwrap_or(1);
    if !(1..=MAX_LINK_USES).contains(&uses) {
        return Err(ApiError::Invalid {
            field: "uses",
            reason: format!("1 to {MAX_LINK_USES}"),
        });
    }
    let secret = random_secret();
    let now = now_ms();
    let row = ShareLinkRow {
        info: ShareLinkInfo {
            id: uuid::Uuid::new_v4().to_string(),
            role,
            created_by: who.name.clone(),
            created_at: now,
            expires_at: now.saturating_add(ttl.as_millis() as i64),
            uses_left: uses,
            max_uses: Some(uses),
            revoked_at: None,
        },
        token_hash: token_hash(&secret),
        session: session.id,
    };
    state.store.access.create_share_link(&row).await?;
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({
            "id": row.info.id,
            "token": secret,
            "url": format!("{}/#/join&link={secret}", state.public_url),
            "role": row.info.role,
            "expires_at": row.info.expires_at,
            "uses": uses,
        })),
    ))
}

/// `POST /api/v1/share-links/redeem`.
#[derive(Deserialize, utoipa::ToSchema)]
pub(crate) struct Redeem {
    /// The link's secret.
    token: String,
}

/// `POST /api/v1/share-links/redeem` `{token}` (a logged-in user): joins the session with the
/// link's role (an existing role is kept). 404 for an unknown, expired, used-up or revoked link.
#[utoipa::path(
    post, path = "/share-links/redeem", operation_id = "redeemShareLink", tag = "access",
    request_body = Redeem,
    responses(
        (status = 200, description = "The caller joined the session", body = crate::openapi::Redeemed),
        crate::openapi::BodyLookupErrors,
    )
)]
pub(crate) async fn redeem_share_link(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Json(req): Json<Redeem>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if who.admin {
        return Err(ApiError::Invalid {
            field: "token",
            reason: "the admin owns every session already".into(),
        });
    }
    let (session, role) = state
        .store
        .access
        .redeem_share_link(&token_hash(&req.token), &who.name, now_ms())
        .await?
        .ok_or(ApiError::NotFound("share link"))?;
    Ok(Json(
        serde_json::json!({ "session": session, "role": role }),
    ))
}

/// `POST /api/v1/share-links/preview` `{token}`, open to anyone holding the secret (no login):
/// what the link would grant, without spending a use, so the page a share link opens can say
/// what you are joining and as which role before asking you to log in. 404 exactly when
/// redeeming would be refused.
#[utoipa::path(
    post, path = "/share-links/preview", operation_id = "previewShareLink", tag = "access", security(()),
    request_body = Redeem,
    responses(
        (status = 200, description = "What the link grants", body = crate::openapi::LinkPreview),
        crate::openapi::BodyLookupErrors,
    )
)]
pub(crate) async fn preview_share_link(
    State(state): State<AppState>,
    Json(req): Json<Redeem>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (session, role, by) = state
        .store
        .access
        .share_link_preview(&token_hash(&req.token), now_ms())
        .await?
        .ok_or(ApiError::NotFound("share link"))?;
    let row = state
        .store
        .log
        .find_session(&session.to_string())
        .await
        .map_err(ApiError::missing("share link"))?;
    Ok(Json(serde_json::json!({
        "session": session,
        "name": row.name,
        "role": role,
        "created_by": by,
    })))
}

/// `DELETE /api/v1/share-links/{id}` (the session's owner): the link stops working, and the
/// people who joined through it lose their role and their live connections (409 when that
/// would remove the session's last owner).
#[utoipa::path(
    delete, path = "/share-links/{id}", operation_id = "revokeShareLink", tag = "access",
    params(("id" = String, Path, description = "The share link's id")),
    responses(
        (status = 204, description = "The link is revoked and the people who joined through it removed"),
        crate::openapi::RoleErrors,
        crate::openapi::Conflict,
    )
)]
pub(crate) async fn revoke_share_link(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let session = state
        .store
        .access
        .share_link_session(&id)
        .await
        .map_err(ApiError::missing("share link"))?;
    session_for(&state.store, &who, &session.to_string(), Role::Owner)
        .await
        .map_err(|e| match e {
            ApiError::NotFound(_) => ApiError::NotFound("share link"),
            e => e,
        })?;
    let (session, members) = state.store.access.revoke_share_link(&id, now_ms()).await?;
    for principal in members {
        revoke(
            &state.auth,
            &state.store,
            Revocation::Member { session, principal },
        )
        .await;
    }
    Ok(StatusCode::NO_CONTENT)
}
