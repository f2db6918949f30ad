//! Tailing one session's log from a cursor: the backlog from the store, then live entries from
//! the hub, with no gap and no duplicate at the seam.
//!
//! The subscription is made before the first store read, so nothing committed in between can be
//! missed; live entries at or below the cursor are dropped. A gap in the live stream (a lagged
//! receiver) switches back to reading the store from the cursor. `next` is cancel-safe.
//!
//! Part of the session core: calls `store` and `hub`; never a transport.

use std::collections::VecDeque;
use std::sync::Arc;

use moor_protocol::{Seq, SessionId};
use tokio::sync::broadcast::{self, error::RecvError};

use crate::hub::{Frame, Hub};
use crate::store::{LogStore, Range, StoreError, StoreResult};

/// Entries read from the store per query while catching up.
const PAGE: u32 = 1000;

/// An ordered, gap-free, duplicate-free stream of one session's entries after a cursor.
#[derive(Debug)]
pub struct Tail {
    hub: Hub,
    store: Arc<dyn LogStore>,
    session: SessionId,
    cursor: Seq,
    rx: broadcast::Receiver<Arc<Frame>>,
    backlog: VecDeque<Arc<Frame>>,
    live: bool,
}

impl Drop for Tail {
    fn drop(&mut self) {
        self.hub.release(self.session);
    }
}

impl Tail {
    /// Starts tailing `session` after `cursor`. Subscribes immediately.
    pub fn new(store: Arc<dyn LogStore>, hub: &Hub, session: SessionId, cursor: Seq) -> Self {
        let rx = hub.subscribe(session);
        Self {
            hub: hub.clone(),
            store,
            session,
            cursor,
            rx,
            backlog: VecDeque::new(),
            live: false,
        }
    }

    /// The session tailed.
    pub fn session(&self) -> SessionId {
        self.session
    }

    /// Seq of the last entry returned (or the starting cursor).
    pub fn cursor(&self) -> Seq {
        self.cursor
    }

    /// Entries already at hand, without waiting: for coalescing writes.
    pub fn ready(&mut self) -> Option<Arc<Frame>> {
        if let Some(f) = self.backlog.pop_front() {
            self.cursor = f.seq();
            return Some(f);
        }
        if !self.live {
            return None;
        }
        loop {
            match self.rx.try_recv() {
                Ok(f) if f.seq() <= self.cursor => continue,
                Ok(f) if f.seq() == self.cursor.next() => {
                    self.cursor = f.seq();
                    return Some(f);
                }
                Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) => {
                    self.live = false;
                    return None;
                }
                Err(_) => return None,
            }
        }
    }

    /// The next entry after the cursor; waits for one to be committed if none is.
    pub async fn next(&mut self) -> StoreResult<Arc<Frame>> {
        loop {
            if let Some(f) = self.backlog.pop_front() {
                self.cursor = f.seq();
                return Ok(f);
            }
            if !self.live {
                let page = self
                    .store
                    .read(self.session, Range::After(self.cursor), PAGE)
                    .await?;
                self.live = (page.len() as u32) < PAGE;
                self.backlog
                    .extend(page.into_iter().map(|e| Frame::new(Arc::new(e))));
                continue;
            }
            match self.rx.recv().await {
                Ok(f) if f.seq() <= self.cursor => {}
                Ok(f) if f.seq() == self.cursor.next() => {
                    self.cursor = f.seq();
                    return Ok(f);
                }
                // A hole in the live stream: the store has what is missing.
                Ok(_) | Err(RecvError::Lagged(_)) => self.live = false,
                Err(RecvError::Closed) => {
                    return Err(StoreError::Other(anyhow::anyhow!("fan-out closed")));
                }
            }
        }
    }
}
