//! The committer behind [`Log`](super::log::Log): one task that takes whatever is ready from
//! every session, commits it as one store transaction, publishes each session's new entries and
//! answers each request in order (the pipeline is described in `log.rs`).
//!
//! Part of the session core: calls `store` and `hub`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use moor_protocol::SessionId;

use super::queues::{Queues, Request, Shared};
use crate::hub::Frame;
use crate::store::{Appended, GroupPart, StoreError, StoreResult};

/// Most entries committed in one transaction; more waits for the next one. A batch is never
/// split, so a single larger batch makes a larger transaction on its own.
const MAX_GROUP_ENTRIES: usize = 8192;

/// Groups remembered to decide whether a group is worth waiting for: if all of them were one
/// and the same session, nothing else would join it.
const GROUPS_REMEMBERED: usize = 16;

/// One session's requests in a group, oldest first.
struct Part {
    session: SessionId,
    requests: Vec<Request>,
}

/// Commits what is ready, group after group, until the log is closed and everything queued
/// is answered. When the committer was idle and other sessions were active lately, it first
/// waits `window` for them to join the group: one commit (one fsync, one write of each shared
/// page) for several sessions' entries instead of one each, at the price of at most `window`
/// of latency. A busy committer never waits: what arrived during a commit is the next group.
pub(super) async fn commit_loop(shared: Arc<Shared>, window: Duration) {
    let mut active = Active::default();
    loop {
        let parts = {
            let mut q = shared.queues();
            let parts = take_group(&mut q);
            if parts.is_empty() && q.closed {
                return;
            }
            parts
        };
        if parts.is_empty() {
            // A wake-up sent since the queues were looked at is kept, so none is missed.
            shared.wake.notified().await;
            if !window.is_zero() && active.others() && shared.queues().worth_waiting() {
                tokio::time::sleep(window).await;
            }
            continue;
        }
        active.note(&parts);
        commit(&shared, parts).await;
    }
}

/// Who committed in the last [`GROUPS_REMEMBERED`] groups: each group's first session, and
/// whether it held others.
#[derive(Default)]
struct Active {
    groups: VecDeque<(SessionId, bool)>,
}

impl Active {
    fn note(&mut self, parts: &[Part]) {
        let Some(first) = parts.first() else {
            return;
        };
        if self.groups.len() == GROUPS_REMEMBERED {
            self.groups.pop_front();
        }
        self.groups.push_back((first.session, parts.len() > 1));
    }

    /// More than one session committed lately, so another may join a group that waits.
    fn others(&self) -> bool {
        let mut groups = self.groups.iter();
        let Some(&(first, several)) = groups.next() else {
            return false;
        };
        several || groups.any(|&(s, several)| several || s != first)
    }
}

/// Takes the ready sessions' requests, oldest session first, up to [`MAX_GROUP_ENTRIES`]
/// entries; a session left with requests goes back to the end of the ready list. A request
/// that ends its session is a part of its own: the store checks the session's head before
/// it, and refuses it whole, which must not refuse a neighbour's entries with it.
fn take_group(q: &mut Queues) -> Vec<Part> {
    let mut parts = Vec::new();
    let mut total = 0;
    let mut full = false;
    while !full && total < MAX_GROUP_ENTRIES {
        let Some(session) = q.ready.pop_front() else {
            break;
        };
        let Some(queue) = q.sessions.get_mut(&session) else {
            continue;
        };
        let mut requests = Vec::new();
        while let Some(r) = queue.requests.pop_front() {
            if !(requests.is_empty() && parts.is_empty())
                && total + r.batch.len() > MAX_GROUP_ENTRIES
            {
                queue.requests.push_front(r);
                full = true;
                break;
            }
            let ends = r.batch.last().is_some_and(|a| a.ends_at().is_some());
            if ends && !requests.is_empty() {
                queue.requests.push_front(r);
                break;
            }
            total += r.batch.len();
            requests.push(r);
            if ends {
                break;
            }
        }
        if !queue.requests.is_empty() {
            q.ready.push_back(session);
        }
        if !requests.is_empty() {
            parts.push(Part { session, requests });
        }
    }
    parts
}

/// Commits `parts` in one transaction (or, if that fails as a whole, each session in its own),
/// then publishes and answers.
async fn commit(shared: &Shared, mut parts: Vec<Part>) {
    let sizes: Vec<Vec<usize>> = parts
        .iter()
        .map(|p| p.requests.iter().map(|r| r.batch.len()).collect())
        .collect();
    let group: Vec<GroupPart> = parts
        .iter_mut()
        .map(|p| {
            let batch = p
                .requests
                .iter_mut()
                .flat_map(|r| std::mem::take(&mut r.batch))
                .collect();
            (p.session, batch)
        })
        .collect();
    let entries: usize = group.iter().map(|(_, b)| b.len()).sum();
    let started = Instant::now();
    let results = commit_group(shared, group).await;
    shared.hub.metrics().commit(entries, started.elapsed());
    tracing::debug!(
        sessions = parts.len(),
        entries,
        elapsed_us = started.elapsed().as_micros() as u64,
        "group commit"
    );
    let sessions: Vec<SessionId> = parts.iter().map(|p| p.session).collect();
    for ((part, sizes), result) in parts.into_iter().zip(sizes).zip(results) {
        answer(shared, part, sizes, result);
    }
    let mut q = shared.queues();
    for session in sessions {
        if q.sessions.get(&session).is_some_and(|s| s.idle()) {
            q.sessions.remove(&session);
        }
    }
}

/// One transaction for the whole group; if it fails as a whole and holds several sessions,
/// one transaction per session, so that a session's failure is only its own.
async fn commit_group(shared: &Shared, group: Vec<GroupPart>) -> Vec<StoreResult<Vec<Appended>>> {
    let n = group.len();
    let retry = (n > 1).then(|| group.clone());
    match shared.store.append_group(group).await {
        Ok(results) if results.len() == n => results,
        Ok(_) => failed_all(
            n,
            &StoreError::Other(anyhow!("the store lost a part of a group")),
        ),
        Err(e) => match retry {
            // A full disk fails every session alike, and is warned once per episode.
            _ if matches!(e, StoreError::Full(_)) => failed_all(n, &e),
            None => {
                tracing::error!(error = ?e, "append failed");
                failed_all(n, &e)
            }
            Some(parts) => {
                tracing::warn!(error = ?e, sessions = n, "group append failed; retrying each session alone");
                let mut results = Vec::with_capacity(n);
                for (session, batch) in parts {
                    let result = shared.store.append(session, batch).await;
                    match &result {
                        Ok(_) | Err(StoreError::Full(_)) => {}
                        Err(e) => tracing::error!(error = ?e, %session, "append failed"),
                    }
                    results.push(result);
                }
                results
            }
        },
    }
}

fn failed_all(n: usize, e: &StoreError) -> Vec<StoreResult<Vec<Appended>>> {
    (0..n).map(|_| Err(copy_error(e))).collect()
}

/// Publishes a committed part's new entries, then answers its requests in order, each with
/// its own outcomes (`sizes`: entries per request).
fn answer(shared: &Shared, part: Part, sizes: Vec<usize>, result: StoreResult<Vec<Appended>>) {
    match result {
        Ok(outcomes) => {
            let frames: Vec<_> = outcomes
                .iter()
                .filter_map(|o| match o {
                    Appended::Stored(e) => Some(Frame::committed(e.clone())),
                    _ => None,
                })
                .collect();
            shared.hub.metrics().storage_written();
            count_stored(shared, &frames);
            shared.hub.publish(part.session, frames);
            let mut outcomes = outcomes.into_iter();
            for (request, n) in part.requests.into_iter().zip(sizes) {
                let _ = request.reply.send(Ok(outcomes.by_ref().take(n).collect()));
            }
        }
        Err(e) => {
            shared.hub.metrics().store_errors.inc();
            if let StoreError::Full(cause) = &e {
                shared.hub.metrics().storage_refused(cause);
            }
            for request in part.requests {
                let _ = request.reply.send(Err(copy_error(&e)));
            }
        }
    }
}

/// Counts the entries newly stored and their payload bytes (measured once per frame, which
/// the hub's live-payload bound reuses): two atomic adds per part.
fn count_stored(shared: &Shared, frames: &[Arc<Frame>]) {
    let bytes: usize = frames.iter().map(|f| f.payload_bytes()).sum();
    let metrics = shared.hub.metrics();
    metrics.entries_appended.inc_by(frames.len() as u64);
    metrics.bytes_appended.inc_by(bytes as u64);
}

/// The same error for each request of a failed group.
fn copy_error(e: &StoreError) -> StoreError {
    match e {
        StoreError::NotFound => StoreError::NotFound,
        StoreError::SessionEnded => StoreError::SessionEnded,
        StoreError::Conflict(c) => StoreError::Conflict(c),
        StoreError::Unavailable(e) => StoreError::Unavailable(anyhow!("{e:#}")),
        StoreError::Full(e) => StoreError::Full(anyhow!("{e:#}")),
        StoreError::Other(e) => StoreError::Other(anyhow!("{e:#}")),
    }
}
