//! Group commit in front of the store, across sessions. The pipeline of an append:
//!
//! 1. **Room.** [`Log::submit`] (and [`Log::append`]) first waits for room in the session's
//!    byte budget, [`SESSION_QUEUE_BYTES`] of entries queued or committing. A bridge sending
//!    faster than the store commits is held at its socket (its connection stops reading), not
//!    in memory (G10). The server's own bookkeeping, submitted with [`Log::submit_now`], does
//!    not wait: it must never wait on the committer that feeds it.
//! 2. **Queue.** The request joins its session's queue (`queues.rs`); a session with anything
//!    queued is on the ready list once, in the order it became ready.
//! 3. **Commit.** One committer task (`commit.rs`) takes whatever is ready from every session,
//!    up to `MAX_GROUP_ENTRIES` entries, and hands it to the store as ONE transaction
//!    ([`LogStore::append_group`]): one commit and one fsync for all of them. Whatever arrives
//!    meanwhile waits for the next transaction, so a group is everything that arrived during
//!    one commit under heavy load. An idle committer woken while other sessions have been
//!    writing lately first waits a commit window (about a millisecond) for them to join, so
//!    many quiet sessions share commits; a lone session never waits.
//! 4. **Publish and answer.** After the commit, each session's new entries go to the hub in seq
//!    order, then each request is answered in submission order (a bridge's ack follows from
//!    that answer, so never before the commit: G2), and its bytes go back to the budget.
//!
//! One committer means a session is never in two transactions at once: seqs follow submission
//! order and publish order is commit order. A group that fails as a whole is retried session by
//! session, so one session's failure stays its own.
//!
//! Part of the session core: calls `store` and `hub`; never a transport.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::anyhow;
use moor_protocol::{Entry, Seq, SessionId};
use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit};
use tokio_util::task::TaskTracker;

use super::commit::commit_loop;
pub use super::queues::SESSION_QUEUE_BYTES;
use super::queues::{Queues, Request, SessionQueue, Shared};
use crate::hub::Hub;
use crate::store::{Append, Appended, LogStore, Range, StoreError, StoreResult};

/// A submitted append: resolves to the outcomes once committed and published.
#[derive(Debug)]
pub struct Pending(oneshot::Receiver<StoreResult<Vec<Appended>>>);

impl Pending {
    /// Waits for the commit. Cancel-safe: dropping the future keeps the result for a later call.
    pub async fn wait(&mut self) -> StoreResult<Vec<Appended>> {
        (&mut self.0)
            .await
            .map_err(|_| StoreError::Other(anyhow!("committer stopped")))?
    }
}

/// Appends to session logs with group commit across sessions, then fans out. Cheap to clone.
#[derive(Clone)]
pub struct Log {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log").finish_non_exhaustive()
    }
}

impl Log {
    /// A log over `store` publishing to `hub`; its committer task is spawned on `tasks` and
    /// runs until [`Log::close`]. An idle committer waits up to `window` for other sessions
    /// to join a group (zero: never waits).
    pub fn new(store: Arc<dyn LogStore>, hub: Hub, tasks: TaskTracker, window: Duration) -> Self {
        let shared = Arc::new(Shared {
            store,
            hub,
            queues: Mutex::new(Queues::default()),
            wake: Notify::new(),
        });
        tasks.spawn(commit_loop(shared.clone(), window));
        Self { shared }
    }

    /// Appends `batch` to `session` (one transaction, possibly shared with other appends to
    /// this and other sessions) and returns each entry's outcome once committed and published.
    pub async fn append(
        &self,
        session: SessionId,
        batch: Vec<Append>,
    ) -> StoreResult<Vec<Appended>> {
        self.submit(session, batch).await?.wait().await
    }

    /// The entry at `seq` of `session`, if it is stored.
    pub async fn entry_at(&self, session: SessionId, seq: Seq) -> StoreResult<Option<Entry>> {
        let after = Range::After(Seq(seq.0.saturating_sub(1)));
        let found = self.shared.store.read(session, after, 1).await?;
        Ok(found.into_iter().find(|e| e.seq == seq))
    }

    /// Queues `batch` for `session` once the session has room for it, and returns without
    /// waiting for the commit. Batches submitted one after another commit in that order, so a
    /// connection can keep reading while earlier batches commit. Cancel-safe: nothing is queued
    /// until it returns.
    pub async fn submit(&self, session: SessionId, batch: Vec<Append>) -> StoreResult<Pending> {
        if batch.is_empty() {
            return Ok(answered());
        }
        let bytes = batch.iter().map(append_bytes).sum::<usize>();
        let room = {
            let mut q = self.shared.queues();
            if q.closed {
                return Err(shutting_down());
            }
            q.sessions
                .entry(session)
                .or_insert_with(SessionQueue::new)
                .room
                .clone()
        };
        let permits = bytes.clamp(1, SESSION_QUEUE_BYTES) as u32;
        let permit = room
            .acquire_many_owned(permits)
            .await
            .map_err(|_| shutting_down())?;
        self.queue(session, batch, Some(permit))
    }

    /// Queues `batch` for `session` at once, outside its budget: for the server's own entries,
    /// written by tasks that must not wait on the committer.
    pub fn submit_now(&self, session: SessionId, batch: Vec<Append>) -> StoreResult<Pending> {
        if batch.is_empty() {
            return Ok(answered());
        }
        self.queue(session, batch, None)
    }

    /// The server's metrics (the hub's).
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        self.shared.hub.metrics()
    }

    /// Stops accepting appends; the committer answers what is queued and exits.
    pub fn close(&self) {
        self.shared.queues().closed = true;
        self.shared.wake.notify_one();
    }

    fn queue(
        &self,
        session: SessionId,
        batch: Vec<Append>,
        room: Option<OwnedSemaphorePermit>,
    ) -> StoreResult<Pending> {
        let (reply, rx) = oneshot::channel();
        let request = Request {
            batch,
            reply,
            _room: room,
        };
        {
            let mut q = self.shared.queues();
            if q.closed {
                return Err(shutting_down());
            }
            let queue = q.sessions.entry(session).or_insert_with(SessionQueue::new);
            let was_empty = queue.requests.is_empty();
            queue.requests.push_back(request);
            if was_empty {
                q.ready.push_back(session);
            }
        }
        self.shared.wake.notify_one();
        Ok(Pending(rx))
    }
}

/// A `Pending` already answered with no outcomes (an empty batch).
fn answered() -> Pending {
    let (reply, rx) = oneshot::channel();
    let _ = reply.send(Ok(Vec::new()));
    Pending(rx)
}

fn shutting_down() -> StoreError {
    StoreError::Other(anyhow!("server shutting down"))
}

/// About the bytes `append` takes as JSON: what the budget counts.
fn append_bytes(append: &Append) -> usize {
    append.kind.len() + append.author.len() + append.payload.text().len() + 32
}

#[cfg(test)]
mod tests;
