//! `GET /sessions/{id}/export`: a session's whole log as JSONL or Markdown, streamed.
//!
//! The export itself is the session core's (`session::export`); this maps the request, checks
//! the caller may read the session, and streams the chunks into the response body.
//!
//! Part of the HTTP transport: calls `access` and `session`; never `sse` or `ws`.

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use tokio::sync::mpsc;

use super::checkpoints::attachment;
use crate::access::AuthUser;
use crate::access::{session_for, Role};
use crate::error::ApiError;
use crate::session::export::{export as write_export, Format, CHUNKS_IN_FLIGHT};
use crate::state::AppState;
use crate::util::query_param;

/// `jsonl` (default) or `markdown` from `?format=`.
fn format_param(query: &str) -> Result<Format, ApiError> {
    match query_param(query, "format") {
        None => Ok(Format::Jsonl),
        Some(v) => Format::parse(&v).ok_or_else(|| ApiError::Invalid {
            field: "format",
            reason: format!("{v:?}: use jsonl or markdown"),
        }),
    }
}

/// A file name made of the session name's safe characters.
fn file_name(name: &str, format: Format) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    format!("moor-session-{safe}.{}", format.extension())
}

/// `GET /api/v1/sessions/{id}/export[?format=jsonl|markdown]`.
#[utoipa::path(
    get, path = "/sessions/{id}/export", operation_id = "exportSession", tag = "sessions",
    params(
        ("id" = String, Path, description = "Session id or name"),
        ("format" = Option<String>, Query, description = "`jsonl` (default: every entry, one JSON object a line) or `markdown` (the transcript with tool calls and results)"),
    ),
    responses(
        (status = 200, description = "The log up to its head when the export began, streamed as a download", content(
            (String = "application/x-ndjson"),
            (String = "text/markdown"),
        )),
        crate::openapi::ReadErrors,
    )
)]
pub(super) async fn export(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let format = format_param(query.as_deref().unwrap_or(""))?;
    let session = session_for(&state.store, &who, &key, Role::Viewer).await?;
    let disposition = format!(
        "attachment; filename=\"{}\"",
        file_name(&session.name, format)
    );
    let (tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let store = state.store.log.clone();
    let page_bytes = state.config.max_page_bytes;
    let id = session.id;
    state.tasks.spawn(async move {
        if let Err(e) = write_export(store, session, format, page_bytes, tx).await {
            tracing::warn!(session = %id, error = %e, "session export cut short");
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    Ok(attachment(
        format.content_type(),
        disposition,
        Body::from_stream(stream),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_keep_only_safe_characters() {
        assert_eq!(
            file_name("a b/\"c\".x", Format::Markdown),
            "moor-session-a_b__c_.x.md"
        );
    }
}
