//! Group commit in front of the store: every append for a session goes through that session's
//! committer task, which takes everything queued at that moment (a bridge batch, inputs, receipts
//! from any connection) and commits it in one transaction, then publishes the new entries to the
//! hub in seq order. One committer per session means publish order is commit order.
//!
//! A committer with nothing queued for [`COMMITTER_IDLE`] retires: it removes itself from the
//! map and exits, and the next append starts a new one. Appends are queued while holding the
//! map's lock and a committer retires only under that lock with its queue empty, so an append
//! never lands in a queue nobody reads, and there is never more than one committer per session.
//!
//! Part of the session core: calls `store` and `hub`; never a transport.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::anyhow;
use moor_protocol::SessionId;
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;

use crate::hub::{Frame, Hub};
use crate::store::{Append, Appended, LogStore, StoreError, StoreResult};

/// Most entries committed in one transaction; more waits for the next one.
const MAX_GROUP_ENTRIES: usize = 8192;
/// How long a session's committer waits for work before it retires.
pub const COMMITTER_IDLE: Duration = Duration::from_secs(60);

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
            self.queue(session, Request { batch, reply })?;
        }
        Ok(Pending(rx))
    }

    /// Sessions with a live committer.
    pub fn committers(&self) -> usize {
        let guard = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        guard.as_ref().map_or(0, |q| q.len())
    }

    /// Stops accepting appends; committers finish what is queued and exit.
    pub fn close(&self) {
        self.queues.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// Queues `request` on the session's committer, starting one if there is none. Sends under
    /// the map's lock (a send never blocks), which is what lets committers retire race-free.
    fn queue(&self, session: SessionId, request: Request) -> StoreResult<()> {
        let mut guard = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let queues = guard
            .as_mut()
            .ok_or_else(|| StoreError::Other(anyhow!("server shutting down")))?;
        let tx = queues.entry(session).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            self.tasks.spawn(commit_loop(
                self.store.clone(),
                self.hub.clone(),
                self.queues.clone(),
                session,
                rx,
            ));
            tx
        });
        tx.send(request)
            .map_err(|_| StoreError::Other(anyhow!("committer stopped")))
    }
}

/// Removes the committer of `session` from `queues` if nothing is queued for it; `false` if
/// something is (it keeps running).
fn retire(
    queues: &Mutex<Option<Queues>>,
    session: SessionId,
    rx: &mpsc::UnboundedReceiver<Request>,
) -> bool {
    let mut guard = queues.lock().unwrap_or_else(|p| p.into_inner());
    if !rx.is_empty() {
        return false;
    }
    if let Some(queues) = guard.as_mut() {
        queues.remove(&session);
    }
    true
}

async fn commit_loop(
    store: Arc<dyn LogStore>,
    hub: Hub,
    queues: Arc<Mutex<Option<Queues>>>,
    session: SessionId,
    mut rx: mpsc::UnboundedReceiver<Request>,
) {
    loop {
        let first = tokio::select! {
            first = rx.recv() => match first {
                Some(first) => first,
                None => return,
            },
            _ = tokio::time::sleep(COMMITTER_IDLE) => {
                if retire(&queues, session, &rx) {
                    return;
                }
                continue;
            }
        };
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

#[cfg(test)]
mod tests {
    use moor_protocol::payload::InputText;
    use moor_protocol::{kinds, EntryBody, Seq};

    use super::*;
    use crate::store::IdemKey;

    fn entry(n: u64) -> Append {
        Append {
            ts: 0,
            kind: kinds::INPUT_TEXT.into(),
            author: "user:test".into(),
            payload: EntryBody::from(InputText {
                text: n.to_string(),
            })
            .payload(),
            key: IdemKey::ClientMsg(format!("m{n}")),
        }
    }

    fn seq(outcome: &[Appended]) -> Seq {
        match outcome {
            [Appended::Stored(e)] => e.seq,
            other => panic!("expected one stored entry, got {other:?}"),
        }
    }

    /// A log over a real SQLite store in a temp dir (kept alive by the returned guard), with
    /// one open session.
    async fn log_on_sqlite() -> (tempfile::TempDir, Log, SessionId) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("moor.db").display());
        let store = crate::store::connect(&url).await.unwrap().log;
        let session = store.open_session("s", None).await.unwrap().id;
        let log = Log::new(store, Hub::default(), TaskTracker::new());
        (dir, log, session)
    }

    #[tokio::test]
    async fn an_idle_committer_retires_and_the_next_append_starts_a_new_one_in_order() {
        // arrange: a real SQLite store (opened on real time), then paused time
        let (_dir, log, session) = log_on_sqlite().await;
        assert_eq!(
            seq(&log.append(session, vec![entry(1)]).await.unwrap()),
            Seq(1)
        );
        assert_eq!(log.committers(), 1);
        // act: nothing to do for longer than the idle time (paused time; the store's I/O runs on
        // real time, as paused time would run on to the pool's timeouts while it waits)
        tokio::time::pause();
        tokio::time::sleep(COMMITTER_IDLE - Duration::from_secs(1)).await;
        let before = log.committers();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = log.committers();
        tokio::time::resume();
        // assert: it stayed until the idle time, then left; the next append starts a new one
        assert_eq!((before, after), (1, 0));
        assert_eq!(
            seq(&log.append(session, vec![entry(2)]).await.unwrap()),
            Seq(2)
        );
        assert_eq!(log.committers(), 1);
    }

    #[tokio::test]
    async fn appends_racing_a_retiring_committer_are_all_committed_once_and_in_order() {
        // arrange
        let (_dir, log, session) = log_on_sqlite().await;
        // act: each round lets the committer reach its idle deadline on paused time and submits
        // at that very instant, before it runs (odd rounds) or after it has run (even rounds)
        let mut seqs = Vec::new();
        for n in 1..=20u64 {
            seqs.push(seq(&log
                .append(session, vec![entry(2 * n - 1)])
                .await
                .unwrap()));
            tokio::time::pause();
            tokio::time::advance(COMMITTER_IDLE).await;
            if n % 2 == 0 {
                tokio::task::yield_now().await;
            }
            let mut racing = log.submit(session, vec![entry(2 * n)]).unwrap();
            tokio::time::resume();
            seqs.push(seq(&racing.wait().await.unwrap()));
            assert!(log.committers() <= 1);
        }
        // assert: every append committed once, in submission order
        assert_eq!(seqs, (1..=40).map(Seq).collect::<Vec<_>>());
    }
}
