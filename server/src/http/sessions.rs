//! Session resources: list, get, delete, history paging, and closing a live bridge
//! (operators).
//!
//! Part of the HTTP transport: calls `access`, `store`, `blobs`, `retention`, `hub` and
//! `compress` (pages of `/entries` are gzipped for clients that ask); never
//! `sse` or `ws`.

use crate::extract::Json;
use axum::extract::{Path, RawQuery, State};
use std::fmt::Write as _;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use moor_protocol::api::{BridgeStatus, EntriesPage, Me, Role, SessionInfo, SessionStatus};
use moor_protocol::{Seq, SessionId};
use serde::Deserialize;

use crate::access::AuthUser;
use crate::access::{session_for, session_with_role};
use crate::compress;
use crate::error::ApiError;
use crate::hub::BridgeControl;
use crate::state::AppState;
use crate::store::{read_page_raw, Page, PageLimit, Range, RawEntry, SessionRow};
use crate::util::query_param;

/// Largest page of `/entries`.
const MAX_PAGE: u32 = 1000;
/// Page size when `limit` is absent.
const DEFAULT_PAGE: u32 = 100;
/// Most sessions in one list.
const MAX_LIST: u32 = 1000;
/// Sessions listed when `limit` is absent.
const DEFAULT_LIST: u32 = 200;

fn info(state: &AppState, row: SessionRow, role: Role) -> SessionInfo {
    SessionInfo {
        role,
        bridge: state.hub.bridge_status(row.id),
        watchers: state.hub.watchers(row.id),
        id: row.id,
        name: row.name,
        created_at: row.created_at,
        head_seq: row.head_seq,
        last_activity: row.last_ts,
        status: if row.ended_at.is_some() {
            SessionStatus::Ended
        } else {
            SessionStatus::Live
        },
        agent: row.agent,
        state: None,
    }
}

/// A bridge this node does not hold but whose lease another live node does: online, since a
/// time this node does not know.
fn held_elsewhere(bridge: &mut BridgeStatus) {
    if !bridge.online {
        *bridge = BridgeStatus {
            online: true,
            since: None,
            last_close_code: None,
            last_reason: None,
            spool_unacked: None,
        };
    }
}

/// A session's bridge link as this node can vouch for it (online when another live node holds
/// its lease).
pub(super) async fn bridge_status(state: &AppState, session: SessionId) -> BridgeStatus {
    let mut bridge = state.hub.bridge_status(session);
    if !bridge.online && state.leases.held_elsewhere_one(session).await {
        held_elsewhere(&mut bridge);
    }
    bridge
}

/// `GET /api/v1/me`: the caller's name, and whether it is an administrator or the bootstrap
/// admin token.
#[utoipa::path(
    get, path = "/me", operation_id = "me", tag = "access",
    responses((status = 200, description = "The caller", body = Me), crate::openapi::Unauthorized)
)]
pub(super) async fn me(AuthUser(who): AuthUser) -> Json<Me> {
    Json(Me {
        name: who.name,
        admin: who.admin,
        bootstrap: who.bootstrap,
    })
}

/// `GET /api/v1/sessions`: the sessions the caller has a role on, each with that role, newest
/// activity first. Queried by membership, so the cost follows the caller's own sessions.
#[utoipa::path(
    get, path = "/sessions", operation_id = "listSessions", tag = "sessions",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "Most sessions listed, 1 to 1000 (default 200): the ones with the newest activity"),
    ),
    responses(
        (status = 200, description = "The sessions the caller has a role on", body = Vec<SessionInfo>),
        crate::openapi::BadRequest,
        crate::openapi::Unauthorized,
    )
)]
pub(super) async fn list(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<SessionInfo>>, ApiError> {
    let limit = limit_param(query.as_deref(), DEFAULT_LIST, MAX_LIST)?;
    let member = (!who.admin).then_some(who.name.as_str());
    let rows = state.store.log.list_sessions(member, limit).await?;
    let elsewhere = state.leases.held_elsewhere().await;
    Ok(Json(
        rows.into_iter()
            .map(|(row, role)| {
                let mut info = info(&state, row, role);
                if elsewhere.contains(&info.id) {
                    held_elsewhere(&mut info.bridge);
                }
                info
            })
            .collect(),
    ))
}

/// The `limit` query parameter: `default` when absent, else 1 to `max`.
fn limit_param(query: Option<&str>, default: u32, max: u32) -> Result<u32, ApiError> {
    match query_param(query.unwrap_or(""), "limit") {
        None => Ok(default),
        Some(v) => v
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| ApiError::Invalid {
                field: "limit",
                reason: format!("{v:?} is not a number from 1 to {max}"),
            }),
    }
}

/// `GET /api/v1/sessions/{id}` (id or name).
#[utoipa::path(
    get, path = "/sessions/{id}", operation_id = "getSession", tag = "sessions",
    params(("id" = String, Path, description = "Session id or name")),
    responses(
        (status = 200, description = "The session, with its derived state", body = SessionInfo),
        crate::openapi::LookupErrors,
    )
)]
pub(super) async fn get(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
) -> Result<Json<SessionInfo>, ApiError> {
    let (row, role) = session_with_role(&state.store, &who, &key, Role::Viewer).await?;
    let derived = state.states.current(row.id, row.head_seq).await?;
    let mut info = info(&state, row, role);
    info.bridge = bridge_status(&state, info.id).await;
    info.state = Some((*derived).clone());
    Ok(Json(info))
}

fn seq_param(query: &str, name: &'static str) -> Result<Option<Seq>, ApiError> {
    query_param(query, name)
        .map(|v| {
            v.parse::<u64>()
                .map(Seq)
                .map_err(|_| ApiError::InvalidCursor(v))
        })
        .transpose()
}

/// `DELETE /api/v1/sessions/{id}`: the owner deletes an ended session. It is gone from lists
/// and lookups at once (410 with the reason for its id); its log and checkpoints are deleted by
/// the retention task's next batches, and the blobs no other checkpoint names after a grace
/// period (`--blob-grace-secs`).
#[utoipa::path(
    delete, path = "/sessions/{id}", operation_id = "deleteSession", tag = "sessions",
    params(("id" = String, Path, description = "Session id or name")),
    responses(
        (status = 204, description = "Deleted"),
        crate::openapi::RoleErrors,
        crate::openapi::Conflict,
        crate::openapi::Gone,
    )
)]
pub(super) async fn delete(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
) -> Result<StatusCode, ApiError> {
    let session = session_for(&state.store, &who, &key, Role::Owner).await?;
    let reason = format!("deleted by {}", who.name);
    state
        .store
        .retention
        .retire_session(session.id, moor_protocol::now_ms(), &reason)
        .await?;
    tracing::info!(session = %session.id, by = %who.name, "session deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/v1/sessions/{id}/entries?after=N|before=N&limit=M`.
#[utoipa::path(
    get, path = "/sessions/{id}/entries", operation_id = "listEntries", tag = "sessions",
    params(
        ("id" = String, Path, description = "Session id or name"),
        ("after" = Option<u64>, Query, description = "Entries after this seq, ascending (default: from the start)"),
        ("before" = Option<u64>, Query, description = "The page of entries just before this seq (not with `after`)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "Page size, 1 to 1000 (default 100); a page also stops at `--max-page-bytes` of entries (always holding at least one), and `has_more` says whether the log goes on"),
    ),
    responses(
        (status = 200, description = "A page of the log", body = EntriesPage),
        crate::openapi::ReadErrors,
    )
)]
pub(super) async fn entries(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let session = session_for(&state.store, &who, &key, Role::Viewer).await?;
    let limit = limit_param(query.as_deref(), DEFAULT_PAGE, MAX_PAGE)?;
    let query = query.unwrap_or_default();
    let range = match (seq_param(&query, "after")?, seq_param(&query, "before")?) {
        (Some(_), Some(_)) => {
            return Err(ApiError::Invalid {
                field: "after",
                reason: "give after or before, not both".into(),
            })
        }
        (_, Some(b)) => Range::Before(b),
        (a, None) => Range::After(a.unwrap_or(Seq::ZERO)),
    };
    let page = read_page_raw(
        &*state.store.log,
        session.id,
        range,
        PageLimit {
            count: limit,
            bytes: state.config.max_page_bytes,
        },
    )
    .await?;
    let json = entries_page_json(&page, session.head_seq);
    let gzip = compress::accepts_gzip(&headers);
    let mut resp = match gzip {
        true => compress::gzip(json.as_bytes()).into_response(),
        false => json.into_response(),
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    match gzip {
        true => compress::mark_gzip(h),
        false => compress::mark_vary(h),
    }
    Ok(resp)
}

/// An [`EntriesPage`] as JSON, written from the entries as stored: the same text serde makes of
/// it, without parsing and re-encoding every payload.
fn entries_page_json(page: &Page<RawEntry>, head_seq: Seq) -> String {
    let bytes: usize = page.entries.iter().map(|e| e.payload().len() + 96).sum();
    let mut out = String::with_capacity(bytes + 128);
    out.push_str("{\"entries\":[");
    for (i, entry) in page.entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        entry.write_json(&mut out);
    }
    let _ = write!(out, "],\"head_seq\":{head_seq},\"has_more\":{}", page.more);
    if let Some(compacted) = &page.compacted {
        out.push_str(",\"compacted\":");
        out.push_str(&serde_json::to_string(compacted).unwrap_or_default());
    }
    out.push('}');
    out
}

/// Body of `POST /api/v1/sessions/{id}/bridge/close`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(super) struct CloseBridge {
    /// A WebSocket close code the bridge is sent (1000 to 4999, not 1004 to 1006 or 1015).
    code: u16,
    /// The close reason.
    #[serde(default)]
    reason: String,
}

/// `POST /api/v1/sessions/{id}/bridge/close`: close the session's live bridge connection with a
/// given code (the bridge reconnects unless the code is terminal).
#[utoipa::path(
    post, path = "/sessions/{id}/bridge/close", operation_id = "closeBridge", tag = "sessions",
    params(("id" = String, Path, description = "Session id or name")),
    request_body = CloseBridge,
    responses(
        (status = 204, description = "The live bridge connection was closed with the code"),
        crate::openapi::RoleBodyErrors,
    )
)]
pub(super) async fn close_bridge(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
    Json(req): Json<CloseBridge>,
) -> Result<StatusCode, ApiError> {
    let session = session_for(&state.store, &who, &key, Role::Owner).await?;
    if !(1000..=4999).contains(&req.code) || matches!(req.code, 1004..=1006 | 1015) {
        return Err(ApiError::Invalid {
            field: "code",
            reason: format!("{} cannot be sent in a close frame", req.code),
        });
    }
    if state.hub.control_bridge(
        session.id,
        BridgeControl::Close {
            code: req.code,
            reason: req.reason,
        },
    ) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("live bridge"))
    }
}

#[cfg(test)]
mod tests {
    use moor_protocol::web::Compacted;
    use moor_protocol::Entry;

    use super::*;

    #[test]
    fn a_page_written_from_stored_entries_is_the_json_serde_makes_of_it() {
        let entries: Vec<Entry> = [
            serde_json::json!({"text": "quotes \" backslash \\ newline \n ü 🚀"}),
            serde_json::json!([1, 2.5, null, {"a": true}]),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, payload)| Entry {
            seq: Seq(i as u64 + 7),
            ts: 1_733_000_000_000,
            kind: "agent.output".into(),
            author: "bridge:\"x\"".into(),
            payload,
        })
        .collect();
        let raw = |e: &Entry| {
            let payload = serde_json::to_string(&e.payload).unwrap();
            RawEntry::new(e.seq, e.ts, &e.kind, &e.author, &payload)
        };
        let compacted = Compacted {
            after: Seq(1),
            through: Seq(6),
            kinds: vec!["agent.pty.output".into()],
            entries: 5,
            bytes: 500,
        };
        for (entries, more, compacted) in [
            (entries.clone(), true, Some(compacted)),
            (entries[..1].to_vec(), false, None),
            (Vec::new(), false, None),
        ] {
            let page = Page {
                entries: entries.iter().map(raw).collect(),
                more,
                compacted: compacted.clone(),
            };
            let typed = EntriesPage {
                entries,
                head_seq: Seq(9),
                has_more: more,
                compacted,
            };
            assert_eq!(
                entries_page_json(&page, Seq(9)),
                serde_json::to_string(&typed).unwrap()
            );
        }
    }
}
