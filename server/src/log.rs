//! Group commit in front of the store: every append for a session goes through that session's
//! committer task, which takes everything queued at that moment (a bridge batch, inputs, receipts
//! from any connection) and commits it in one transaction, then publishes the new entries to the
//! hub in seq order. One committer per session means publish order is commit order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::anyhow;
use moor_protocol::SessionId;
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;

use crate::hub::{Frame, Hub};
use crate::store::{Append, Appended, LogStore, StoreError, StoreResult};

/// Most entries committed in one transaction; more waits for the next one.
const MAX_GROUP_ENTRIES: usize = 8192;

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

type Queues = HashMap<SessionId, mpsc::UnboundedSender<Request>>;

struct Request {
    batch: Vec<Append>,
    reply: oneshot::Sender<StoreResult<Vec<Appended>>>,
}

/// Appends to session logs with group commit, then fans out. Cheap to clone.
#[derive(Clone)]
pub struct Log {
    store: Arc<dyn LogStore>,
    hub: Hub,
    tasks: TaskTracker,
    /// `None` once closed.
    queues: Arc<Mutex<Option<Queues>>>,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log").finish_non_exhaustive()
    }
}

impl Log {
    /// A log over `store` publishing to `hub`; committer tasks are spawned on `tasks`.
    pub fn new(store: Arc<dyn LogStore>, hub: Hub, tasks: TaskTracker) -> Self {
        Self {
            store,
            hub,
            tasks,
            queues: Arc::new(Mutex::new(Some(HashMap::new()))),
        }
    }

    /// Appends `batch` to `session` (one transaction, possibly shared with other appends to the
    /// same session) and returns each entry's outcome once committed and published.
    pub async fn append(
        &self,
        session: SessionId,
        batch: Vec<Append>,
    ) -> StoreResult<Vec<Appended>> {
        self.submit(session, batch)?.wait().await
    }

    /// Queues `batch` for `session` and returns at once. Batches submitted one after another
    /// commit in that order, so a connection can keep reading while earlier batches commit.
    pub fn submit(&self, session: SessionId, batch: Vec<Append>) -> StoreResult<Pending> {
        let (reply, rx) = oneshot::channel();
        if batch.is_empty() {
            let _ = reply.send(Ok(Vec::new()));
        } else {
            self.queue(session)?
                .send(Request { batch, reply })
                .map_err(|_| StoreError::Other(anyhow!("committer stopped")))?;
        }
        Ok(Pending(rx))
    }

    /// Stops accepting appends; committers finish what is queued and exit.
    pub fn close(&self) {
        self.queues.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    fn queue(&self, session: SessionId) -> StoreResult<mpsc::UnboundedSender<Request>> {
        let mut guard = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let queues = guard
            .as_mut()
            .ok_or_else(|| StoreError::Other(anyhow!("server shutting down")))?;
        if let Some(tx) = queues.get(&session) {
            return Ok(tx.clone());
        }
        let (tx, rx) = mpsc::unbounded_channel();
        queues.insert(session, tx.clone());
        self.tasks.spawn(commit_loop(
            self.store.clone(),
            self.hub.clone(),
            session,
            rx,
        ));
        Ok(tx)
    }
}

async fn commit_loop(
    store: Arc<dyn LogStore>,
    hub: Hub,
    session: SessionId,
    mut rx: mpsc::UnboundedReceiver<Request>,
) {
    while let Some(first) = rx.recv().await {
        let mut group = vec![first];
        let mut total = group[0].batch.len();
        while total < MAX_GROUP_ENTRIES {
            match rx.try_recv() {
                Ok(r) => {
                    total += r.batch.len();
                    group.push(r);
                }
                Err(_) => break,
            }
        }
        let mut replies = Vec::with_capacity(group.len());
        let all: Vec<Append> = group
            .into_iter()
            .flat_map(|r| {
                replies.push((r.reply, r.batch.len()));
                r.batch
            })
            .collect();
        let (n, started) = (all.len(), std::time::Instant::now());
        let result = store.append(session, all).await;
        tracing::debug!(%session, entries = n, elapsed_us = started.elapsed().as_micros() as u64, "group commit");
        match result {
            Ok(outcomes) => {
                hub.publish(
                    session,
                    outcomes.iter().filter_map(|o| match o {
                        Appended::Stored(e) => Some(Frame::new(e.clone())),
                        _ => None,
                    }),
                );
                let mut outcomes = outcomes.into_iter();
                for (reply, n) in replies {
                    let _ = reply.send(Ok(outcomes.by_ref().take(n).collect()));
                }
            }
            Err(e) => {
                tracing::error!(error = ?e, %session, "append failed");
                for (reply, _) in replies {
                    let _ = reply.send(Err(copy_error(&e)));
                }
            }
        }
    }
}

/// The same error for each request of a failed group.
fn copy_error(e: &StoreError) -> StoreError {
    match e {
        StoreError::NotFound => StoreError::NotFound,
        StoreError::SessionEnded => StoreError::SessionEnded,
        StoreError::Conflict(c) => StoreError::Conflict(c),
        StoreError::Unavailable(e) => StoreError::Unavailable(anyhow!("{e:#}")),
        StoreError::Other(e) => StoreError::Other(anyhow!("{e:#}")),
    }
}
