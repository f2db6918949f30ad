//! The retention task: on a timer, deletes the sessions the policy says are too old and
//! finishes deleting the ones their owners deleted, in bounded batches (see
//! [`crate::store::retention`]), compacts the logs the policy says are due (old raw terminal
//! output and text deltas, or the oldest of a log over its size cap), then deletes the blob files
//! no checkpoint names any more and gives SQLite's freed pages back to the file system.
//!
//! Calls only `store`, `blobs` and `config`.

use std::time::Duration;

use moor_protocol::now_ms;
use tokio_util::sync::CancellationToken;

use crate::blobs::BlobStore;
use crate::config::RetentionConfig;
use crate::store::{StoreResult, Stores, Sweep};

/// Pages of free space one run gives back (4 KiB each: 64 MiB).
const VACUUM_PAGES: u32 = 16_384;

/// Most sessions one run looks at for compaction (the most uncompacted first).
const COMPACT_SESSIONS_PER_RUN: u32 = 10_000;

/// What compaction did in one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compacted {
    /// Sessions it removed entries from.
    pub sessions: u64,
    /// Entries it removed.
    pub entries: u64,
    /// Payload bytes it removed.
    pub bytes: u64,
}

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Run {
    /// Sessions deleted and their rows.
    pub sweep: Sweep,
    /// Logs compacted.
    pub compacted: Compacted,
}

impl Run {
    /// Its figures, as the API and `moord gc` report them.
    pub fn figures(&self) -> moor_protocol::api::RetentionRun {
        moor_protocol::api::RetentionRun {
            retired_sessions: self.sweep.retired.len() as u64,
            finished_sessions: self.sweep.finished.len() as u64,
            entries_deleted: self.sweep.entries_deleted,
            blobs_deleted: self.sweep.orphan_blobs.len() as u64,
            compacted_sessions: self.compacted.sessions,
            compacted_entries: self.compacted.entries,
            compacted_bytes: self.compacted.bytes,
        }
    }
}

/// The reason the policy records on a session it deletes.
pub fn policy_reason(keep: Duration) -> String {
    let days = keep.as_secs_f64() / 86_400.0;
    format!("the server keeps ended sessions for {days} days")
}

/// Deletes the files of blobs no checkpoint names any more. A failure is logged: the blob is
/// unreachable already (no checkpoint names it), it only takes space.
pub async fn remove_blobs(blobs: &BlobStore, orphans: &[String]) {
    for sha in orphans {
        if let Err(e) = blobs.remove(sha).await {
            tracing::warn!(blob = %sha, error = %e, "could not delete an unreferenced blob");
        }
    }
}

/// One run: deletion batches until there is no more work, another node holds the batch, or
/// `batches_per_run` batches ran; then compaction steps, each session until it has nothing
/// due or `batches_per_run` steps ran in all. Returns what they did in total.
pub async fn run_once(
    store: &Stores,
    blobs: &BlobStore,
    config: &RetentionConfig,
) -> StoreResult<Run> {
    let total = sweep(store, blobs, config).await?;
    let compacted = compact(store, config).await?;
    let freed =
        total.entries_deleted > 0 || !total.finished.is_empty() || !total.orphan_blobs.is_empty();
    if freed || compacted.entries > 0 {
        store.retention.reclaim_space(VACUUM_PAGES).await?;
    }
    if freed {
        tracing::info!(
            retired = total.retired.len(),
            finished = total.finished.len(),
            entries = total.entries_deleted,
            blobs = total.orphan_blobs.len(),
            "retention deleted old sessions"
        );
    }
    if compacted.entries > 0 {
        tracing::info!(
            sessions = compacted.sessions,
            entries = compacted.entries,
            bytes = compacted.bytes,
            "compaction removed old terminal output and text deltas"
        );
    }
    Ok(Run {
        sweep: total,
        compacted,
    })
}

async fn sweep(store: &Stores, blobs: &BlobStore, config: &RetentionConfig) -> StoreResult<Sweep> {
    let mut total = Sweep::default();
    let reason = config.keep_ended.map(policy_reason).unwrap_or_default();
    for _ in 0..config.batches_per_run.max(1) {
        let now = now_ms();
        let before = config
            .keep_ended
            .map(|keep| now.saturating_sub(i64::try_from(keep.as_millis()).unwrap_or(i64::MAX)));
        let Some(sweep) = store
            .retention
            .retention_batch(
                before,
                now,
                &reason,
                config.batch_sessions,
                config.batch_entries,
            )
            .await?
        else {
            break;
        };
        let idle =
            sweep.retired.is_empty() && sweep.finished.is_empty() && sweep.entries_deleted == 0;
        total.retired.extend(sweep.retired);
        total.finished.extend(sweep.finished);
        total.entries_deleted += sweep.entries_deleted;
        if idle {
            break;
        }
    }
    let now = now_ms();
    let before =
        now.saturating_sub(i64::try_from(config.blob_grace.as_millis()).unwrap_or(i64::MAX));
    for _ in 0..config.batches_per_run.max(1) {
        let orphans = store
            .retention
            .collect_blobs(before, now, config.batch_entries)
            .await?;
        remove_blobs(blobs, &orphans).await;
        let last = orphans.len() < config.batch_entries as usize;
        total.orphan_blobs.extend(orphans);
        if last {
            break;
        }
    }
    Ok(total)
}

/// Compaction steps over the sessions that may have work (see
/// [`crate::store::RetentionStore::compact_session`]).
async fn compact(store: &Stores, config: &RetentionConfig) -> StoreResult<Compacted> {
    let server = config.policy();
    let mut done = Compacted::default();
    let candidates = store
        .retention
        .compact_candidates(server.compacts(), COMPACT_SESSIONS_PER_RUN)
        .await?;
    let mut steps = config.batches_per_run.max(1);
    for candidate in candidates {
        let policy = candidate.policy.stricter(server);
        if !policy.compacts() {
            continue;
        }
        let mut touched = false;
        loop {
            if steps == 0 {
                return Ok(done);
            }
            steps -= 1;
            let step = store
                .retention
                .compact_session(candidate.session, policy, now_ms(), config.batch_entries)
                .await?;
            // Another node is running retention: it will do this too.
            let Some(step) = step else { return Ok(done) };
            done.entries += step.entries_deleted;
            done.bytes += step.bytes_deleted;
            touched |= step.entries_deleted > 0;
            if step.finished {
                break;
            }
        }
        done.sessions += u64::from(touched);
    }
    Ok(done)
}

/// Runs [`run_once`] every `config.interval` until `shutdown`.
pub async fn run(
    store: Stores,
    blobs: BlobStore,
    config: RetentionConfig,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(config.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = run_once(&store, &blobs, &config).await {
            tracing::warn!(error = %e, "retention batch failed; retrying at the next interval");
        }
    }
}
