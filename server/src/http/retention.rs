//! Retention over HTTP: a session's own policy (`GET` and `PUT /api/v1/sessions/{id}/retention`)
//! and a run on request (`POST /api/v1/retention/run`, administrators). The owner may ask for a
//! session to be deleted sooner after it ends, compacted sooner, or capped smaller than the
//! server's policy says, never kept longer: the stricter bound applies.
//!
//! Part of the HTTP transport: calls `access`, `config`, `retention`, `blobs` and `store`; never
//! `sse` or `ws`.

use axum::extract::{Path, State};
use moor_protocol::api::{RetentionPolicy, RetentionRun, Role, SessionRetention};
use moor_protocol::SessionId;

use crate::access::{session_for, AuthUser};
use crate::blobs::BlobStore;
use crate::error::ApiError;
use crate::extract::Json;
use crate::state::AppState;
use crate::store::{Compaction, Policy};

/// Longest a session may be kept after it ended, in days (a hundred years).
const MAX_KEEP_DAYS: f64 = 36_500.0;
/// Longest compaction may wait, in hours (a hundred years).
const MAX_COMPACT_HOURS: f64 = MAX_KEEP_DAYS * 24.0;
/// Smallest log size cap, in bytes: below it a cap would compact what a viewer just saw.
const MIN_LOG_BYTES: u64 = 1 << 20;

const DAY_MS: f64 = 86_400_000.0;
const HOUR_MS: f64 = 3_600_000.0;

/// `GET /api/v1/sessions/{id}/retention`.
#[utoipa::path(
    get, path = "/sessions/{id}/retention", operation_id = "getSessionRetention", tag = "sessions",
    params(("id" = String, Path, description = "Session id or name")),
    responses(
        (status = 200, description = "The session's retention", body = SessionRetention),
        crate::openapi::RoleErrors,
    )
)]
pub(super) async fn get(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
) -> Result<Json<SessionRetention>, ApiError> {
    let session = session_for(&state.store, &who, &key, Role::Viewer).await?;
    answer(&state, session.id).await
}

/// `PUT /api/v1/sessions/{id}/retention`: the owner replaces the session's own policy; a bound
/// left out (or `null`) follows the server's.
#[utoipa::path(
    put, path = "/sessions/{id}/retention", operation_id = "putSessionRetention", tag = "sessions",
    params(("id" = String, Path, description = "Session id or name")),
    request_body = RetentionPolicy,
    responses(
        (status = 200, description = "The session's retention, as now in effect", body = SessionRetention),
        crate::openapi::RoleBodyErrors,
    )
)]
pub(super) async fn put(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
    Json(own): Json<RetentionPolicy>,
) -> Result<Json<SessionRetention>, ApiError> {
    let session = session_for(&state.store, &who, &key, Role::Owner).await?;
    let policy = parse(own)?;
    state
        .store
        .retention
        .set_session_policy(session.id, policy)
        .await?;
    tracing::info!(session = %session.id, by = %who.name, ?policy, "session retention set");
    answer(&state, session.id).await
}

/// `POST /api/v1/retention/run` (administrators): one retention and compaction run now, on
/// this node, with the server's policy; answers what it did.
#[utoipa::path(
    post, path = "/retention/run", operation_id = "runRetention", tag = "server",
    responses(
        (status = 200, description = "What the run did", body = RetentionRun),
        crate::openapi::Unauthorized, crate::openapi::Forbidden,
    )
)]
pub(super) async fn run(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
) -> Result<Json<RetentionRun>, ApiError> {
    if !who.admin {
        return Err(ApiError::Forbidden);
    }
    let blobs = BlobStore::new(&state.config.data_dir);
    let run = crate::retention::run_once(&state.store, &blobs, &state.config.retention).await?;
    tracing::info!(by = %who.name, ?run, "retention run on request");
    Ok(Json(run.figures()))
}

async fn answer(state: &AppState, session: SessionId) -> Result<Json<SessionRetention>, ApiError> {
    let (own, compaction): (Policy, Compaction) =
        state.store.retention.session_policy(session).await?;
    let server = state.config.retention.policy();
    Ok(Json(SessionRetention {
        own: shown(own),
        server: shown(server),
        effective: shown(own.stricter(server)),
        compacted_through: compaction.through,
        compacted_entries: compaction.entries,
        compacted_bytes: compaction.bytes,
    }))
}

/// A positive, finite number of `unit` no larger than `max`, in milliseconds.
fn duration_ms(
    value: Option<f64>,
    field: &'static str,
    max: f64,
    unit_ms: f64,
) -> Result<Option<i64>, ApiError> {
    match value {
        None => Ok(None),
        Some(v) if v.is_finite() && v > 0.0 && v <= max => Ok(Some((v * unit_ms).ceil() as i64)),
        Some(v) => Err(ApiError::Invalid {
            field,
            reason: format!("{v} is not a number greater than 0 and at most {max}"),
        }),
    }
}

fn parse(own: RetentionPolicy) -> Result<Policy, ApiError> {
    let max_log_bytes = match own.max_log_bytes {
        Some(b) if b < MIN_LOG_BYTES => {
            return Err(ApiError::Invalid {
                field: "max_log_bytes",
                reason: format!("{b} is below the smallest cap, {MIN_LOG_BYTES} bytes"),
            })
        }
        b => b,
    };
    Ok(Policy {
        keep_ended_ms: duration_ms(
            own.keep_ended_days,
            "keep_ended_days",
            MAX_KEEP_DAYS,
            DAY_MS,
        )?,
        compact_after_ms: duration_ms(
            own.compact_after_hours,
            "compact_after_hours",
            MAX_COMPACT_HOURS,
            HOUR_MS,
        )?,
        max_log_bytes,
    })
}

fn shown(p: Policy) -> RetentionPolicy {
    RetentionPolicy {
        keep_ended_days: p.keep_ended_ms.map(|ms| ms as f64 / DAY_MS),
        compact_after_hours: p.compact_after_ms.map(|ms| ms as f64 / HOUR_MS),
        max_log_bytes: p.max_log_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_is_parsed_within_its_bounds_and_shown_back() {
        let own = RetentionPolicy {
            keep_ended_days: Some(2.0),
            compact_after_hours: Some(0.5),
            max_log_bytes: Some(8 << 20),
        };
        let p = parse(own).unwrap();
        assert_eq!(p.keep_ended_ms, Some(2 * 86_400_000));
        assert_eq!(p.compact_after_ms, Some(1_800_000));
        assert_eq!(shown(p), own);
        for bad in [
            RetentionPolicy {
                keep_ended_days: Some(0.0),
                ..Default::default()
            },
            RetentionPolicy {
                keep_ended_days: Some(f64::NAN),
                ..Default::default()
            },
            RetentionPolicy {
                compact_after_hours: Some(-1.0),
                ..Default::default()
            },
            RetentionPolicy {
                compact_after_hours: Some(1e12),
                ..Default::default()
            },
            RetentionPolicy {
                max_log_bytes: Some(1024),
                ..Default::default()
            },
        ] {
            assert!(
                matches!(parse(bad), Err(ApiError::Invalid { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_stricter_bound_applies() {
        let server = Policy {
            keep_ended_ms: Some(10),
            compact_after_ms: None,
            max_log_bytes: Some(100),
        };
        let own = Policy {
            keep_ended_ms: Some(20),
            compact_after_ms: Some(5),
            max_log_bytes: Some(50),
        };
        assert_eq!(
            own.stricter(server),
            Policy {
                keep_ended_ms: Some(10),
                compact_after_ms: Some(5),
                max_log_bytes: Some(50),
            }
        );
        assert!(!Policy::default().compacts());
    }
}
