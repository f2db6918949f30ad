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
//! before that read began. A page's entries are handed out one by one as frames, or, for SSE,
//! as runs of the events the page holds ([`Tail::ready_sse`]). `next` and `wait` are
//! cancel-safe.
//!
//! A read the store answers as unavailable (a database restart, a node whose new connections
//! are refused for a moment) is retried every quarter second for up to 30 s, so a short outage
//! holds a viewer's stream rather than ending it; a longer one, or any other error, ends it.
//!
//! Compaction leaves gaps in the stored log. When a page says compaction removed entries after
//! the cursor, further than the tail has said already, the tail first returns a reset frame
//! ([`Frame::as_reset`]) naming what is missing, then the kept entries: never a silent gap.
//!
//! Part of the session core: calls `store` and `hub`; never a transport.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use moor_protocol::web::Reset;
use moor_protocol::{Seq, SessionId};
use tokio::sync::broadcast::{self, error::RecvError};

use crate::hub::{Frame, Hub};
use crate::metrics::Transport;
use crate::session::pages::SharedPage;
use crate::store::{LogStore, PageLimit, StoreError, StoreResult};

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
    /// Frames to return before anything else: a reset, or a live frame received by `wait`.
    backlog: VecDeque<Arc<Frame>>,
    /// The page read last and the index of its first entry not yet returned; returned after
    /// `backlog`.
    run: Option<(SharedPage, usize)>,
    live: bool,
    page_bytes: u64,
    /// The transport whose deliveries are counted, if any.
    counted: Option<Transport>,
    /// The furthest compaction mark this tail has reported.
    reported: Seq,
    /// When `rx` subscribed: a shared read of the log's last page must have begun since.
    subscribed: Instant,
    /// Since when the store has answered this tail's reads as unavailable, and when to try
    /// again: kept here, so a retry survives the caller dropping `wait` for another branch.
    unavailable: Option<(tokio::time::Instant, tokio::time::Instant)>,
}

/// How often a tail retries a read while the store is unavailable (a database restart, a
/// node's connections refused for a moment)...
const RETRY_EVERY: std::time::Duration = std::time::Duration::from_millis(250);
/// ...and for how long, before its stream ends with the error (the client reconnects).
const RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(30);

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
            run: None,
            live: false,
            page_bytes: DEFAULT_PAGE_BYTES,
            counted: None,
            reported: Seq::ZERO,
            subscribed,
            unavailable: None,
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
        if f.as_reset().is_none() {
            self.count(1);
        }
    }

    fn count(&self, entries: usize) {
        if let Some(t) = self.counted {
            self.hub.metrics().delivered(t, entries as u64);
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
        if let Some((page, at)) = self.run.take() {
            let f = Frame::stored(page.page.entries[at].clone());
            self.resume_run(page, at + 1);
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

    /// When the next entry is one of a page that several tails read from the store: the
    /// Server-Sent Events of it and of the following entries of its run (about 64 KiB), sliced
    /// from the text the page holds, not copied. `None` when the next entry is anything else;
    /// [`Tail::ready`] returns that.
    pub fn ready_sse(&mut self) -> Option<Bytes> {
        if !self.backlog.is_empty() {
            return None;
        }
        let (page, at) = self.run.take_if(|(page, _)| page.shared())?;
        let (events, n) = page.events(at);
        self.cursor = page.page.entries[at + n - 1].seq;
        self.count(n);
        self.resume_run(page, at + n);
        Some(events)
    }

    /// Keeps `page` as the run to return from entry `at` on, unless it has no entry there.
    fn resume_run(&mut self, page: SharedPage, at: usize) {
        if at < page.page.entries.len() {
            self.run = Some((page, at));
        }
    }

    /// Whether [`Tail::ready_sse`] has a run for the next entry.
    pub fn run_is_next(&self) -> bool {
        self.backlog.is_empty() && self.run.as_ref().is_some_and(|(page, _)| page.shared())
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
            self.wait().await?;
            if let Some(f) = self.ready() {
                return Ok(f);
            }
        }
    }

    /// Waits until an entry after the cursor is at hand, reading the store or the live stream
    /// as needed; [`Tail::ready`] (or [`Tail::ready_sse`]) then returns it.
    pub async fn wait(&mut self) -> StoreResult<()> {
        loop {
            if !self.backlog.is_empty() || self.run.is_some() {
                return Ok(());
            }
            if !self.live {
                let limit = PageLimit {
                    count: PAGE,
                    bytes: self.page_bytes,
                };
                if let Some((_, retry_at)) = self.unavailable {
                    tokio::time::sleep_until(retry_at).await;
                }
                let read = self
                    .hub
                    .pages()
                    .read(
                        &self.store,
                        self.session,
                        self.cursor,
                        limit,
                        self.subscribed,
                    )
                    .await;
                let page = match read {
                    Ok(page) => {
                        self.unavailable = None;
                        page
                    }
                    Err(e) => {
                        self.hub.metrics().store_errors.inc();
                        let now = tokio::time::Instant::now();
                        let since = self.unavailable.map_or(now, |(since, _)| since);
                        if matches!(e, StoreError::Unavailable(_)) && now - since < RETRY_FOR {
                            self.unavailable = Some((since, now + RETRY_EVERY));
                            continue;
                        }
                        return Err(e);
                    }
                };
                self.hub.metrics().replay_pages.inc();
                self.live = !page.page.more;
                let compacted = page.page.compacted.clone();
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
                if !page.page.entries.is_empty() {
                    self.run = Some((page, 0));
                }
                continue;
            }
            match self.rx.recv().await {
                Ok(f) if f.seq() <= self.cursor => {}
                Ok(f) if f.seq() == self.cursor.next() && !f.is_notice() => {
                    self.backlog.push_back(f);
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
