//! Tailing one session's log from a cursor: the backlog from the store, then live entries from
//! the hub, with no gap and no duplicate at the seam.
//!
//! The subscription is made before the first store read, so nothing committed in between can be
//! missed; live entries at or below the cursor are dropped. A gap in the live stream (a lagged
//! receiver) or a notice of an entry too big for the live stream switches back to reading the
//! store from the cursor, and so does a closed channel (the hub replaced it with a bigger one),
//! after subscribing again. Store reads are pages bounded in count and bytes, so what a tail holds
//! is at most one page (and at least one entry); tails reading the same page at once share one
//! read ([`crate::session::pages`]), which hands the log's last page only to a tail subscribed
//! before that read began. `next` is cancel-safe.
//!
//! Compaction leaves gaps in the stored log. When a page says compaction removed entries after
//! the cursor, further than the tail has said already, the tail first returns a reset frame
//! ([`Frame::as_reset`]) naming what is missing, then the kept entries: never a silent gap.
//!
//! Part of the session core: calls `store` and `hub`; never a transport.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use moor_protocol::web::Reset;
use moor_protocol::{Seq, SessionId};
use tokio::sync::broadcast::{self, error::RecvError};

use crate::hub::{Frame, Hub};
use crate::metrics::Transport;
use crate::store::{LogStore, PageLimit, StoreResult};

/// Most entries read from the store per query while catching up.
const PAGE: u32 = 1000;
/// Most bytes of entries read per query unless set with [`Tail::page_bytes`].
const DEFAULT_PAGE_BYTES: u64 = 2 << 20;

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
    page_bytes: u64,
    /// The transport whose deliveries are counted, if any.
    counted: Option<Transport>,
    /// The furthest compaction mark this tail has reported.
    reported: Seq,
    /// When `rx` subscribed: a shared read of the log's last page must have begun since.
    subscribed: Instant,
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
        let subscribed = Instant::now();
        Self {
            hub: hub.clone(),
            store,
            session,
            cursor,
            rx,
            backlog: VecDeque::new(),
            live: false,
            page_bytes: DEFAULT_PAGE_BYTES,
            counted: None,
            reported: Seq::ZERO,
            subscribed,
        }
    }

    /// Bounds each store read to `bytes` of entries (and at least one entry).
    pub fn page_bytes(mut self, bytes: u64) -> Self {
        self.page_bytes = bytes.max(1);
        self
    }

    /// Counts the entries returned as deliveries to viewers on `transport`.
    pub fn counted(mut self, transport: Transport) -> Self {
        self.counted = Some(transport);
        self
    }

    fn delivered(&self, f: &Frame) {
        if f.as_reset().is_some() {
            return;
        }
        if let Some(t) = self.counted {
            self.hub.metrics().delivered(t, 1);
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
            self.delivered(&f);
            return Some(f);
        }
        if !self.live {
            return None;
        }
        loop {
            match self.rx.try_recv() {
                Ok(f) if f.seq() <= self.cursor => continue,
                Ok(f) if f.seq() == self.cursor.next() && !f.is_notice() => {
                    self.cursor = f.seq();
                    self.delivered(&f);
                    return Some(f);
                }
                Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) => {
                    self.hub.metrics().viewer_lagged.inc();
                    self.live = false;
                    return None;
                }
                Err(broadcast::error::TryRecvError::Closed) => {
                    self.resubscribe();
                    return None;
                }
                Err(broadcast::error::TryRecvError::Empty) => return None,
            }
        }
    }

    /// The session's channel was replaced (it grew) or dropped: subscribe again, then read what
    /// was committed since from the store.
    fn resubscribe(&mut self) {
        self.rx = self.hub.subscribe(self.session);
        self.subscribed = Instant::now();
        self.live = false;
    }

    /// The next entry after the cursor; waits for one to be committed if none is.
    pub async fn next(&mut self) -> StoreResult<Arc<Frame>> {
        loop {
            if let Some(f) = self.backlog.pop_front() {
                self.cursor = f.seq();
                self.delivered(&f);
                return Ok(f);
            }
            if !self.live {
                let limit = PageLimit {
                    count: PAGE,
                    bytes: self.page_bytes,
                };
                let page = self
                    .hub
                    .pages()
                    .read(
                        &self.store,
                        self.session,
                        self.cursor,
                        limit,
                        self.subscribed,
                    )
                    .await
                    .inspect_err(|_| {
                        self.hub.metrics().store_errors.inc();
                    })?;
                self.hub.metrics().replay_pages.inc();
                self.live = !page.more;
                let compacted = page.compacted.clone();
                if let Some(compacted) = compacted.filter(|c| c.through > self.reported) {
                    self.reported = compacted.through;
                    let head = self
                        .store
                        .find_session(&self.session.to_string())
                        .await?
                        .head_seq;
                    let reason = format!(
                        "compaction removed the {} entries after {} up to {}; the kept ones follow",
                        compacted.kinds.join(" and "),
                        compacted.after,
                        compacted.through
                    );
                    self.backlog.push_back(Frame::reset(
                        self.cursor,
                        Reset {
                            reason,
                            head_seq: head,
                            compacted: Some(compacted),
                        },
                    ));
                }
                self.backlog
                    .extend(page.entries.iter().cloned().map(Frame::stored));
                continue;
            }
            match self.rx.recv().await {
                Ok(f) if f.seq() <= self.cursor => {}
                Ok(f) if f.seq() == self.cursor.next() && !f.is_notice() => {
                    self.cursor = f.seq();
                    self.delivered(&f);
                    return Ok(f);
                }
                // A hole in the live stream, or an entry announced without its payload: the
                // store has what is missing.
                Ok(_) | Err(RecvError::Lagged(_)) => {
                    self.hub.metrics().viewer_lagged.inc();
                    self.live = false;
                }
                Err(RecvError::Closed) => self.resubscribe(),
            }
        }
    }
}
