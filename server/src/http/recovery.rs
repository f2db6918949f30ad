//! What was in flight: `GET /sessions/{id}/recovery` (the brief, JSON or Markdown) and
//! `GET /sessions/{id}/transcript` (the repaired conversation, Messages API shape or Markdown).
//!
//! Part of the HTTP transport: calls `access` and `store`; never `sse` or `ws`.

use crate::extract::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use moor_protocol::recovery::{brief as make_brief, RetryPolicy};
use moor_protocol::transcript::{markdown, repaired};
use moor_protocol::Seq;
use serde_json::json;

use crate::access::AuthUser;
use crate::access::{session_for, Role};
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::{read_page, PageLimit, Range};
use crate::util::query_param;

/// Entries read per query when building a transcript.
const PAGE: u32 = 1000;

/// `json` (default) or `markdown`, from `?format=` or the `Accept` header.
fn wants_markdown(headers: &HeaderMap, query: &str) -> Result<bool, ApiError> {
    match query_param(query, "format").as_deref() {
        Some("markdown") | Some("md") => Ok(true),
        Some("json") | Some("messages") => Ok(false),
        Some(other) => Err(ApiError::Invalid {
            field: "format",
            reason: format!("{other:?}: use json, messages or markdown"),
        }),
        None => Ok(headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/markdown"))),
    }
}

fn markdown_response(text: String) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/markdown; charset=utf-8"),
        )],
        text,
    )
        .into_response()
}

/// `GET /api/v1/sessions/{id}/recovery[?format=markdown]`.
#[utoipa::path(
    get, path = "/sessions/{id}/recovery", operation_id = "getRecoveryBrief", tag = "sessions",
    params(
        ("id" = String, Path, description = "Session id or name"),
        ("format" = Option<String>, Query, description = "`json` (default), or `markdown` (also chosen by `Accept: text/markdown`)"),
    ),
    responses((status = 200, description = "What was in flight, and what to do about it", content(
        (moor_protocol::recovery::RecoveryBrief = "application/json"),
        (String = "text/markdown"),
    )), crate::openapi::ReadErrors)
)]
pub(super) async fn brief(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let md = wants_markdown(&headers, query.as_deref().unwrap_or(""))?;
    let session = session_for(&state.store, &who, &key, Role::Viewer).await?;
    let current = state.states.current(session.id, session.head_seq).await?;
    let brief = make_brief(&current, RetryPolicy::default());
    Ok(if md {
        markdown_response(brief.to_markdown())
    } else {
        Json(brief).into_response()
    })
}

/// `GET /api/v1/sessions/{id}/transcript[?format=messages|markdown]`.
#[utoipa::path(
    get, path = "/sessions/{id}/transcript", operation_id = "getTranscript", tag = "sessions",
    params(
        ("id" = String, Path, description = "Session id or name"),
        ("format" = Option<String>, Query, description = "`json` (default), or `markdown` (also chosen by `Accept: text/markdown`); `messages` is the same as `json`"),
    ),
    responses((status = 200, description = "The repaired conversation", content(
        (crate::openapi::Transcript = "application/json"),
        (String = "text/markdown"),
    )), crate::openapi::ReadErrors)
)]
pub(super) async fn transcript(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let md = wants_markdown(&headers, query.as_deref().unwrap_or(""))?;
    let session = session_for(&state.store, &who, &key, Role::Viewer).await?;
    // The conversation needs the whole log; other kinds are skipped as they are read.
    let mut entries = Vec::new();
    let mut cursor = Seq::ZERO;
    loop {
        let limit = PageLimit {
            count: PAGE,
            bytes: state.config.max_page_bytes,
        };
        let page = read_page(&*state.store.log, session.id, Range::After(cursor), limit).await?;
        let Some(last) = page.entries.last() else {
            break;
        };
        cursor = last.seq;
        let full = page.more;
        entries.extend(page.entries.into_iter().filter(|e| {
            e.kind.starts_with("agent.")
                || e.kind == moor_protocol::kinds::INPUT_TEXT
                || e.kind.starts_with("session.")
        }));
        if !full {
            break;
        }
    }
    let messages = repaired(&entries);
    Ok(if md {
        markdown_response(markdown(&messages))
    } else {
        Json(json!({ "messages": messages })).into_response()
    })
}
