//! The state the log's submitters and its committer share: each session's queue of requests and
//! byte budget, the list of sessions with something ready, and the store and hub the committer
//! writes to (the pipeline is described in `log.rs`).
//!
//! Part of the session core: holds handles to `store` and `hub`, calls neither.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use moor_protocol::SessionId;
use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore};

use crate::hub::Hub;
use crate::store::{Append, Appended, LogStore, StoreResult};

/// Bytes of entries (as JSON, roughly) one session may have queued or committing; a batch
/// larger than this waits until the session has nothing else in flight.
pub const SESSION_QUEUE_BYTES: usize = 8 << 20;

/// One submitted batch, waiting in its session's queue or committing.
pub(super) struct Request {
    pub(super) batch: Vec<Append>,
    pub(super) reply: oneshot::Sender<StoreResult<Vec<Appended>>>,
    /// Its share of the session's budget, given back when the request is answered.
    pub(super) _room: Option<OwnedSemaphorePermit>,
}

/// A session's queue and budget.
pub(super) struct SessionQueue {
    pub(super) requests: VecDeque<Request>,
    pub(super) room: Arc<Semaphore>,
}

impl SessionQueue {
    pub(super) fn new() -> Self {
        Self {
            requests: VecDeque::new(),
            room: Arc::new(Semaphore::new(SESSION_QUEUE_BYTES)),
        }
    }

    /// Nothing queued, committing or waiting for room: the queue may go.
    pub(super) fn idle(&self) -> bool {
        self.requests.is_empty()
            && self.room.available_permits() == SESSION_QUEUE_BYTES
            && Arc::strong_count(&self.room) == 1
    }
}

/// Every session's queue, and which have something ready.
#[derive(Default)]
pub(super) struct Queues {
    pub(super) sessions: HashMap<SessionId, SessionQueue>,
    /// Sessions with requests queued, each once, oldest first.
    pub(super) ready: VecDeque<SessionId>,
    /// No more appends are taken; the committer exits once everything queued is answered.
    pub(super) closed: bool,
}

impl Queues {
    /// Something is ready and the log still takes appends: a group may wait for company.
    pub(super) fn worth_waiting(&self) -> bool {
        !self.closed && !self.ready.is_empty()
    }
}

/// What the committer and the submitters share.
pub(super) struct Shared {
    pub(super) store: Arc<dyn LogStore>,
    pub(super) hub: Hub,
    pub(super) queues: Mutex<Queues>,
    /// Told when a session becomes ready or the log closes.
    pub(super) wake: Notify,
}

impl Shared {
    pub(super) fn queues(&self) -> MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }
}
