//! `GET /sessions/{id}/checkpoints/{checkpoint}/changes`: the files that changed between two
//! checkpoints of a session (a turn, for the review on the phone), each with its unified diff,
//! bounded per file and per answer, one file paged with `?file=` and `?offset=`.
//!
//! Answers from the stored manifests, patches and contents only (see `diff`); the patches are
//! read as streams, contents over `diff::CONTENT_MAX_BYTES` are listed, not diffed, and one
//! answer reads at most [`CONTENTS_ANSWER_BYTES`] of contents to diff (past it, a file is listed
//! with a note and its diff is had alone, with `?file=`).
//!
//! Part of the HTTP transport: calls `access`, `blobs` (through `http::blobs`), `diff`, `store`.

use std::collections::HashMap;

use axum::extract::{Path, RawQuery, State};
use moor_protocol::checkpoint::{
    is_checkpoint_id, CheckpointChanges, CheckpointManifest, FileDiff, CHANGES_ANSWER_BYTES,
    CHANGES_FILES_MAX, CHANGES_FILE_BYTES, CHANGES_PAGE_BYTES,
};
use tokio::io::BufReader;

use super::blobs::{blobs, checked};
use crate::access::{session_for, AuthUser, Role};
use crate::diff::{
    consumed, content_diff, is_binary, plan, split_patch, Planned, Section, Source, Window,
    CONTENT_MAX_BYTES,
};
use crate::error::ApiError;
use crate::extract::Json;
use crate::state::AppState;
use crate::store::SessionRow;
use crate::util::query_param;

/// Most bytes of stored contents one answer reads to diff files both checkpoints changed.
const CONTENTS_ANSWER_BYTES: u64 = 8 * 1024 * 1024;
/// The note on a file left undiffed for that reason.
const NOT_DIFFED_HERE: &str = "not diffed in this answer: ask for this file alone";

async fn manifest(
    state: &AppState,
    session: &SessionRow,
    id: &str,
) -> Result<CheckpointManifest, ApiError> {
    checked(is_checkpoint_id(id), "checkpoint", || {
        format!("{id:?} is not a checkpoint id (16 lowercase hex digits)")
    })?;
    let row = state
        .store
        .checkpoints
        .checkpoint(session.id, id)
        .await
        .map_err(ApiError::missing("checkpoint"))?;
    Ok(serde_json::from_str(&row.manifest)
        .map_err(|e| anyhow::Error::new(e).context("parse a stored checkpoint manifest"))?)
}

/// The sections `wanted` of checkpoint `m`'s patch.
async fn sections(
    state: &AppState,
    m: &CheckpointManifest,
    wanted: &HashMap<String, (usize, usize)>,
    reverse: bool,
    budget: &mut usize,
) -> Result<HashMap<String, Section>, ApiError> {
    if wanted.is_empty() {
        return Ok(HashMap::new());
    }
    let patch = blobs(state)
        .open(&m.patch.sha256)
        .await
        .map_err(|e| ApiError::Internal(anyhow::Error::new(e).context("open a patch")))?
        .ok_or_else(|| anyhow::anyhow!("the patch of stored checkpoint {} is gone", m.id))?;
    split_patch(BufReader::new(patch), wanted, reverse, budget)
        .await
        .map_err(|e| ApiError::Internal(anyhow::Error::new(e).context("read a patch")))
}

/// A stored content as text for a diff, or why not: `Err((binary, note))`.
async fn content(
    state: &AppState,
    sha: Option<&str>,
) -> Result<Result<String, (bool, &'static str)>, ApiError> {
    let Some(sha) = sha else {
        return Ok(Ok(String::new()));
    };
    let store = blobs(state);
    if store.size(sha).await.is_some_and(|s| s > CONTENT_MAX_BYTES) {
        return Ok(Err((false, "too large to diff here")));
    }
    let bytes = store
        .read(sha, CONTENT_MAX_BYTES)
        .await
        .map_err(|e| ApiError::Internal(anyhow::Error::new(e).context("read a blob")))?
        .ok_or_else(|| anyhow::anyhow!("blob {sha} of a stored checkpoint is gone"))?;
    if is_binary(&bytes) {
        return Ok(Err((true, "binary")));
    }
    Ok(Ok(String::from_utf8_lossy(&bytes).into_owned()))
}

fn file_diff(p: &Planned, w: &Window, binary: bool, note: Option<&str>) -> FileDiff {
    FileDiff {
        path: p.path.clone(),
        old_path: None,
        status: p.status,
        binary,
        insertions: w.insertions,
        deletions: w.deletions,
        diff: w.text.clone(),
        offset: w.starts_at() as u64,
        diff_bytes: w.total as u64,
        truncated: w.truncated,
        note: note.map(str::to_owned),
    }
}

/// `GET /api/v1/sessions/{id}/checkpoints/{checkpoint}/changes`: per-file diffs between two
/// checkpoints of the session.
#[utoipa::path(
    get, path = "/sessions/{id}/checkpoints/{checkpoint}/changes", operation_id = "getCheckpointChanges", tag = "checkpoints",
    params(
        ("id" = String, Path, description = "Session id or name"),
        ("checkpoint" = String, Path, description = "The checkpoint at the end"),
        ("from" = Option<String>, Query, description = "The checkpoint at the start (same session); without it, the base commit"),
        ("file" = Option<String>, Query, description = "Only this file (its path at the end), a page of its diff"),
        ("offset" = Option<u64>, Query, description = "With `file`: the byte of its diff to start at (a previous answer's `offset` plus the length of its `diff`)"),
        ("summary" = Option<bool>, Query, description = "`true`: the files and their counts, no diff text"),
    ),
    responses(
        (status = 200, description = "The files that changed, each with (a page of) its unified diff", body = CheckpointChanges),
        crate::openapi::ReadErrors,
    )
)]
pub(super) async fn changes(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path((key, to_id)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Json<CheckpointChanges>, ApiError> {
    let q = |name| query.as_deref().and_then(|q| query_param(q, name));
    let session = session_for(&state.store, &who, &key, Role::Viewer).await?;
    let to = manifest(&state, &session, &to_id).await?;
    let mut from = match q("from").filter(|f| !f.is_empty()) {
        Some(id) => Some(manifest(&state, &session, &id).await?),
        None => None,
    };
    let mut note = None;
    if from.as_ref().is_some_and(|f| f.base != to.base) {
        // Each patch is against its own base: with two bases, what is unchanged in one is
        // not known to be unchanged in the other.
        from = None;
        note = Some(
            "the base commit changed between the two checkpoints (a commit was made): these \
             are the changes since the new base"
                .to_owned(),
        );
    }
    let file = q("file");
    let offset: usize = match q("offset") {
        Some(o) => o.parse().map_err(|_| ApiError::Invalid {
            field: "offset",
            reason: format!("{o:?} is not a byte offset"),
        })?,
        None => 0,
    };
    let summary = q("summary").is_some_and(|s| s == "true" || s == "1");

    // Which files, and how much of each one's diff.
    let mut planned = plan(from.as_ref(), &to);
    let mut listed_total = planned.len();
    let (per_file, mut budget) = match &file {
        Some(path) => {
            planned.retain(|p| &p.path == path);
            if planned.is_empty() {
                return Err(ApiError::NotFound("file"));
            }
            (CHANGES_PAGE_BYTES, CHANGES_PAGE_BYTES)
        }
        None if summary => (0, 0),
        None => {
            planned.truncate(CHANGES_FILES_MAX);
            (CHANGES_FILE_BYTES, CHANGES_ANSWER_BYTES)
        }
    };
    let start = if file.is_some() { offset } else { 0 };
    let want = |s: Source| -> HashMap<String, (usize, usize)> {
        planned
            .iter()
            .filter(|p| p.source == s)
            .map(|p| (p.path.clone(), (start, per_file)))
            .collect()
    };
    let later = sections(&state, &to, &want(Source::ToPatch), false, &mut budget).await?;
    let earlier = match &from {
        Some(f) => {
            sections(
                &state,
                f,
                &want(Source::FromPatchReversed),
                true,
                &mut budget,
            )
            .await?
        }
        None => HashMap::new(),
    };
    let (gone_later, gone_earlier) = (consumed(&later), consumed(&earlier));
    let mut contents_left = CONTENTS_ANSWER_BYTES;

    // One answer per planned file.
    let mut files = Vec::with_capacity(planned.len());
    for p in &planned {
        let f = match &p.source {
            Source::ToPatch | Source::FromPatchReversed => {
                let reverse = p.source == Source::FromPatchReversed;
                let (found, gone) = if reverse {
                    (&earlier, &gone_earlier)
                } else {
                    (&later, &gone_later)
                };
                match found.get(&p.path) {
                    Some(s) => {
                        let mut f = file_diff(p, &s.window, s.binary, None);
                        if let Some(old) = &s.renamed_from {
                            f.status = moor_protocol::checkpoint::FileDiffStatus::Renamed;
                            if reverse {
                                // Renamed back: the earlier checkpoint's new path is the old one.
                                f.old_path = Some(p.path.clone());
                                f.path = old.clone();
                            } else {
                                f.old_path = Some(old.clone());
                            }
                        }
                        f
                    }
                    None if gone.contains(&p.path) => {
                        // The other half of a rename, listed with it.
                        listed_total -= 1;
                        continue;
                    }
                    None => file_diff(p, &Window::default(), false, Some("not in the patch")),
                }
            }
            Source::Nothing(why) => file_diff(p, &Window::default(), false, Some(why)),
            Source::Contents { old, new } => {
                let store = blobs(&state);
                let mut size = 0;
                for sha in [old, new].into_iter().flatten() {
                    size += store.size(sha).await.unwrap_or(0).min(CONTENT_MAX_BYTES);
                }
                if size > contents_left {
                    // Diffing costs time: past the answer's share, the file is listed and its
                    // diff is had alone (`?file=`).
                    let mut f = file_diff(p, &Window::default(), false, Some(NOT_DIFFED_HERE));
                    f.truncated = true;
                    files.push(f);
                    continue;
                }
                contents_left -= size;
                let mut w = Window::new(start, per_file.min(budget), false);
                let (old, new) = (
                    content(&state, old.as_deref()).await?,
                    content(&state, new.as_deref()).await?,
                );
                match (old, new) {
                    (Ok(old), Ok(new)) => {
                        w = tokio::task::spawn_blocking(move || {
                            content_diff(&old, &new, &mut w);
                            w
                        })
                        .await
                        .map_err(|e| anyhow::Error::new(e).context("diff two contents"))?;
                        budget = budget.saturating_sub(w.text.len());
                        file_diff(p, &w, false, None)
                    }
                    (Err((binary, why)), _) | (_, Err((binary, why))) => {
                        let note = (!binary).then_some(why);
                        file_diff(p, &Window::default(), binary, note)
                    }
                }
            }
        };
        files.push(f);
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));

    // What was left out.
    let files_total = if file.is_some() {
        files.len()
    } else {
        listed_total
    };
    let truncated = files.len() < files_total || files.iter().any(|f| f.truncated);
    Ok(Json(CheckpointChanges {
        from: from.map(|f| f.id),
        to: to.id,
        base: to.base,
        insertions: files.iter().map(|f| f.insertions).sum(),
        deletions: files.iter().map(|f| f.deletions).sum(),
        files_total: files_total as u64,
        files,
        truncated,
        note,
    }))
}
