//! What an owner sees of a session's sharing: its members and its share links. Read-only; the
//! changes (`PUT`/`DELETE` members, creating and revoking links) live in `access::http`. A link's
//! secret is stored only hashed and never leaves this module.

use axum::extract::{Path, State};
use axum::Json;
use moor_protocol::api::{SessionMember, ShareLinkInfo};

use super::{session_for, Role};
use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::{MemberRow, ShareLinkRow};

/// `GET /api/v1/sessions/{id}/members` (owner): everyone with a role on the session, by name.
pub(crate) async fn list_members(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
) -> Result<Json<Vec<SessionMember>>, ApiError> {
    let session = session_for(&state, &who, &key, Role::Owner).await?;
    let rows = state.store.access.members(session.id).await?;
    Ok(Json(rows.into_iter().map(member).collect()))
}

/// `GET /api/v1/sessions/{id}/share-links` (owner): the session's links, live or not, newest
/// first, without their secrets.
pub(crate) async fn list_share_links(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
) -> Result<Json<Vec<ShareLinkInfo>>, ApiError> {
    let session = session_for(&state, &who, &key, Role::Owner).await?;
    let rows = state.store.access.share_links(session.id).await?;
    Ok(Json(rows.into_iter().map(link).collect()))
}

fn member(row: MemberRow) -> SessionMember {
    SessionMember {
        role: row.role,
        principal: row.principal,
        via_link: row.via_link,
    }
}

fn link(row: ShareLinkRow) -> ShareLinkInfo {
    ShareLinkInfo {
        role: row.role,
        id: row.id,
        created_by: row.created_by,
        created_at: row.created_at,
        expires_at: row.expires_at,
        uses_left: row.uses_left,
        max_uses: row.max_uses,
        revoked_at: row.revoked_at,
    }
}
