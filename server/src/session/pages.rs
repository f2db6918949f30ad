//! Pages of a session's history read once for all the tails that ask for them at about the same
//! time. When a thousand viewers attach to one session at once they read the same pages from the
//! same cursors, and one store read now serves them all instead of a thousand queued on the
//! store's readers.
//!
//! A shared read runs on a task of its own, so it finishes whatever becomes of the tail that
//! asked first (a stream that is no longer polled holds back no one), and a failed read is
//! retried by each waiter alone, which then sees the error itself.
//!
//! A page with more entries after it is kept for [`KEEP`]: its entries are committed and never
//! change (what compaction removes later was still there when the page was read, and the page
//! says what compaction had removed by then). The log's last page is never kept, and a tail takes
//! a last page only from a read that began after it subscribed to the live stream: anything
//! committed before that read is in the page, anything after reaches the tail live. A read that
//! began earlier may miss entries the tail's subscription did not see either; such a tail reads
//! alone. While the kept pages hold [`MAX_BYTES`], a tail reads alone too.
//!
//! A page that several tails asked for also keeps its entries' Server-Sent Events, in runs of
//! about [`RUN_BYTES`]: each run is made by the first tail that sends it over SSE and then sent as
//! it is by every other, so a thousand viewers catching up from one page cost one encoding of it,
//! and each viewer's chunks are slices of that text, not copies.
//!
//! Part of the session core: calls the store only.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use moor_protocol::{Seq, SessionId};
use tokio::sync::watch;

use crate::store::{
    read_page_raw, LogStore, Page, PageLimit, Range, RawEntry, StoreResult, ENTRY_OVERHEAD_BYTES,
};

/// How long a page with more entries after it serves other tails.
const KEEP: Duration = Duration::from_secs(2);

/// Most bytes of entries kept in all (payload plus [`ENTRY_OVERHEAD_BYTES`] each); their events,
/// where SSE tails made them, take about as much again.
const MAX_BYTES: usize = 16 << 20;

/// A page as shared by the tails that read it.
pub type SharedPage = Arc<PageRead>;

/// About how many bytes of events a run holds: runs are what SSE streams write as chunks.
const RUN_BYTES: usize = 64 * 1024;

/// A page read from the store, with its entries' Server-Sent Events in runs, laid out when an
/// SSE tail first asks for them, each made when one first asks for it.
#[derive(Debug)]
pub struct PageRead {
    /// The page as read.
    pub page: Page<RawEntry>,
    runs: OnceLock<Runs>,
    /// How many tails asked for the page.
    tails: Arc<AtomicUsize>,
}

/// Where a page's runs stand, and the runs made so far.
#[derive(Debug)]
struct Runs {
    /// The index of each run's first entry, ascending from 0.
    starts: Vec<usize>,
    /// Each run's size in bytes.
    sizes: Vec<usize>,
    made: Vec<OnceLock<Run>>,
}

/// Consecutive entries' events back to back.
#[derive(Debug)]
struct Run {
    text: Bytes,
    /// Where each entry's event ends in `text`.
    ends: Vec<usize>,
}

impl PageRead {
    /// A page just read by one tail for itself.
    pub fn new(page: Page<RawEntry>) -> Self {
        Self::asked_by(page, Arc::new(AtomicUsize::new(1)))
    }

    /// A page just read for the `tails` that asked for it, its events not made yet.
    fn asked_by(page: Page<RawEntry>, tails: Arc<AtomicUsize>) -> Self {
        Self {
            page,
            runs: OnceLock::new(),
            tails,
        }
    }

    /// The page's runs: each as many entries as make [`RUN_BYTES`] or just over, as an SSE
    /// chunk is filled.
    fn runs(&self) -> &Runs {
        self.runs.get_or_init(|| {
            let (mut starts, mut sizes) = (Vec::new(), Vec::new());
            for (i, e) in self.page.entries.iter().enumerate() {
                match sizes.last_mut() {
                    Some(size) if *size < RUN_BYTES => *size += e.sse_len(),
                    _ => {
                        starts.push(i);
                        sizes.push(e.sse_len());
                    }
                }
            }
            let made = starts.iter().map(|_| OnceLock::new()).collect();
            Runs {
                starts,
                sizes,
                made,
            }
        })
    }

    /// Whether more than one tail asked for the page, so that its events, made once, serve
    /// several. A tail alone on a page writes its entries into chunks of its own instead, one
    /// at a time: runs live as long as the page, and for one reader would only double what it
    /// holds.
    pub fn shared(&self) -> bool {
        self.tails.load(Ordering::Relaxed) > 1
    }

    /// The Server-Sent Events of the entries from index `from` to the end of its run, as a
    /// slice of the run's text (made on first use), and how many entries they are.
    pub fn events(&self, from: usize) -> (Bytes, usize) {
        let runs = self.runs();
        let r = runs.starts.partition_point(|&s| s <= from) - 1;
        let first = runs.starts[r];
        let last = runs
            .starts
            .get(r + 1)
            .copied()
            .unwrap_or(self.page.entries.len());
        let run = runs.made[r].get_or_init(|| {
            let entries = &self.page.entries[first..last];
            let mut text = BytesMut::with_capacity(runs.sizes[r]);
            let mut ends = Vec::with_capacity(entries.len());
            for e in entries {
                e.write_sse(&mut text);
                ends.push(text.len());
            }
            Run {
                text: text.freeze(),
                ends,
            }
        });
        let at = match from - first {
            0 => 0,
            i => run.ends[i - 1],
        };
        (run.text.slice(at..), last - from)
    }

    /// What the page's entries take, in the units of [`MAX_BYTES`]. Its events, once made,
    /// take about as much again.
    fn bytes(&self) -> usize {
        self.page
            .entries
            .iter()
            .map(|e| e.payload().len() + ENTRY_OVERHEAD_BYTES as usize)
            .sum()
    }
}

type Key = (SessionId, Seq, PageLimit);

/// Where a shared read stands.
#[derive(Debug, Clone)]
enum Outcome {
    /// Not ended yet.
    Reading,
    /// It failed: each tail reads on its own.
    Failed,
    /// The page.
    Read(SharedPage),
}

/// Pages being read or recently read, by session, cursor and bounds.
#[derive(Debug, Default)]
pub struct SharedPages {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    slots: HashMap<Key, Slot>,
    /// What the kept pages hold, in bytes.
    bytes: usize,
    /// Numbers the slots, so a read ending late touches only its own.
    made: u64,
}

#[derive(Debug)]
struct Slot {
    id: u64,
    /// When its read began.
    began: Instant,
    outcome: watch::Receiver<Outcome>,
    /// How many tails asked for its page.
    tails: Arc<AtomicUsize>,
    /// Its page's size once read and kept, counted in [`Inner::bytes`].
    bytes: usize,
}

impl Slot {
    fn new(id: u64, began: Instant, outcome: watch::Receiver<Outcome>) -> Self {
        Self {
            id,
            began,
            outcome,
            tails: Arc::new(AtomicUsize::new(1)),
            bytes: 0,
        }
    }
}

impl SharedPages {
    /// The page of `session` after `cursor` within `limit`, for a tail that subscribed to the
    /// session's live stream at `subscribed`: read by a shared read begun now or a moment ago,
    /// or by this caller alone (see the module documentation for when).
    pub async fn read(
        self: &Arc<Self>,
        store: &Arc<dyn LogStore>,
        session: SessionId,
        cursor: Seq,
        limit: PageLimit,
        subscribed: Instant,
    ) -> StoreResult<SharedPage> {
        let key = (session, cursor, limit);
        let shared = self.shared(store, key, Instant::now());
        if let Some((began, mut outcome)) = shared {
            let page = match outcome
                .wait_for(|o| !matches!(o, Outcome::Reading))
                .await
                .as_deref()
            {
                Ok(Outcome::Read(page)) => Some(Arc::clone(page)),
                _ => None,
            };
            if let Some(page) = page.filter(|p| p.page.more || began >= subscribed) {
                return Ok(page);
            }
        }
        read_page_raw(&**store, session, Range::After(cursor), limit)
            .await
            .map(|page| Arc::new(PageRead::new(page)))
    }

    /// The read of `key` in flight or kept, or a new one begun at `now`; `None` when there is no
    /// room for another. With the time its read began.
    fn shared(
        self: &Arc<Self>,
        store: &Arc<dyn LogStore>,
        key: Key,
        now: Instant,
    ) -> Option<(Instant, watch::Receiver<Outcome>)> {
        let mut inner = self.lock();
        inner.expire(now);
        if let Some(slot) = inner.slots.get(&key) {
            slot.tails.fetch_add(1, Ordering::Relaxed);
            return Some((slot.began, slot.outcome.clone()));
        }
        if inner.bytes >= MAX_BYTES {
            return None;
        }
        inner.made += 1;
        let id = inner.made;
        let (tx, outcome) = watch::channel(Outcome::Reading);
        let slot = Slot::new(id, now, outcome.clone());
        let tails = Arc::clone(&slot.tails);
        inner.slots.insert(key, slot);
        drop(inner);
        let (pages, store) = (Arc::clone(self), Arc::clone(store));
        tokio::spawn(async move {
            let (session, cursor, limit) = key;
            let page = read_page_raw(&*store, session, Range::After(cursor), limit)
                .await
                .ok()
                .map(|page| Arc::new(PageRead::asked_by(page, tails)));
            pages.lock().ended(&key, id, page.as_ref());
            let _ = tx.send(page.map_or(Outcome::Failed, Outcome::Read));
        });
        Some((now, outcome))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Inner {
    /// Forgets the slots older than [`KEEP`].
    fn expire(&mut self, now: Instant) {
        let bytes = &mut self.bytes;
        self.slots.retain(|_, slot| {
            let keep = now.duration_since(slot.began) < KEEP;
            if !keep {
                *bytes -= slot.bytes;
            }
            keep
        });
    }

    /// The read of slot `id` (of `key`) ended with `page`: a page with more entries after it is
    /// kept and counted; a failed read and the log's last page are forgotten.
    fn ended(&mut self, key: &Key, id: u64, page: Option<&SharedPage>) {
        let Some(slot) = self.slots.get_mut(key).filter(|s| s.id == id) else {
            return;
        };
        match page {
            Some(page) if page.page.more => {
                slot.bytes = page.bytes();
                self.bytes += slot.bytes;
            }
            _ => {
                self.slots.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use moor_protocol::kinds;
    use serde_json::json;

    use super::*;
    use crate::store::{connect_as, Append, IdemKey};

    fn outputs(n: usize) -> Vec<Append> {
        (0..n)
            .map(|i| Append {
                ts: 0,
                kind: kinds::AGENT_OUTPUT.into(),
                author: kinds::AUTHOR_BRIDGE.into(),
                payload: json!({"stream": "stdout", "text": format!("line {i}")}).into(),
                key: IdemKey::None,
            })
            .collect()
    }

    const LIMIT: PageLimit = PageLimit {
        count: 100,
        bytes: 1 << 20,
    };

    async fn store_with(dir: &tempfile::TempDir, n: usize) -> (Arc<dyn LogStore>, SessionId) {
        let url = format!("sqlite:{}", dir.path().join("pages.db").display());
        let log = connect_as(&url, "test").await.unwrap().log;
        let session = log.open_session("s", None).await.unwrap().id;
        log.append(session, outputs(n)).await.unwrap();
        (log, session)
    }

    #[tokio::test]
    async fn tails_asking_for_the_same_page_at_once_share_one_read_but_not_the_logs_end() {
        // arrange: a session of 250 entries, pages of 100
        let dir = tempfile::tempdir().unwrap();
        let (store, session) = store_with(&dir, 250).await;
        let pages = Arc::new(SharedPages::default());
        let subscribed = Instant::now();

        // act: twenty tails at 0 at once; then two at the log's last page, an entry between them
        let first: Vec<SharedPage> = futures_util::future::try_join_all(
            (0..20).map(|_| pages.read(&store, session, Seq::ZERO, LIMIT, subscribed)),
        )
        .await
        .unwrap();
        let end = pages
            .read(&store, session, Seq(200), LIMIT, subscribed)
            .await
            .unwrap();
        store.append(session, outputs(1)).await.unwrap();
        let end_again = pages
            .read(&store, session, Seq(200), LIMIT, subscribed)
            .await
            .unwrap();

        // assert
        assert!(first.iter().all(|p| Arc::ptr_eq(p, &first[0])), "one read");
        let seqs: Vec<u64> = first[0].page.entries.iter().map(|e| e.seq.0).collect();
        assert_eq!(seqs, (1..=100).collect::<Vec<_>>());
        assert!(first[0].page.more);
        assert_eq!((end.page.entries.len(), end.page.more), (50, false));
        assert_eq!(end_again.page.entries.len(), 51, "the end is read afresh");
        let inner = pages.lock();
        assert_eq!(
            inner.slots.len(),
            1,
            "only the page with more after it is kept"
        );
        assert!(inner.bytes > 0);
    }

    #[tokio::test]
    async fn a_tail_subscribed_after_a_last_page_was_read_reads_it_again_alone() {
        // arrange: a last page read, then an entry committed, then a tail subscribing
        let dir = tempfile::tempdir().unwrap();
        let (store, session) = store_with(&dir, 50).await;
        let pages = Arc::new(SharedPages::default());
        let began = Instant::now();
        let (_, mut outcome) = pages
            .shared(&store, (session, Seq::ZERO, LIMIT), began)
            .unwrap();
        let early = outcome
            .wait_for(|o| !matches!(o, Outcome::Reading))
            .await
            .unwrap()
            .clone();
        store.append(session, outputs(1)).await.unwrap();
        // The slot of a last page is forgotten once read; put it back as if a read of it were
        // still being shared when the tail asks.
        let (tx, rx) = watch::channel(early.clone());
        pages
            .lock()
            .slots
            .insert((session, Seq::ZERO, LIMIT), Slot::new(0, began, rx));
        let subscribed = Instant::now();

        // act
        let page = pages
            .read(&store, session, Seq::ZERO, LIMIT, subscribed)
            .await
            .unwrap();

        // assert: the shared page missed the entry the tail's subscription did not see
        let Outcome::Read(early) = early else {
            panic!("the shared read failed")
        };
        assert_eq!(early.page.entries.len(), 50);
        assert_eq!(page.page.entries.len(), 51, "read alone, with the entry");
        drop(tx);
    }

    #[test]
    fn a_kept_page_is_read_again_once_older_than_its_keep_and_none_is_kept_past_the_bound() {
        let mut inner = Inner::default();
        let key = (SessionId(uuid::Uuid::new_v4()), Seq::ZERO, LIMIT);
        let t0 = Instant::now();
        let (_tx, rx) = watch::channel(Outcome::Reading);
        inner.slots.insert(key, Slot::new(7, t0, rx));
        let entry = RawEntry::new(Seq(1), 0, kinds::AGENT_OUTPUT, "bridge", "{}");
        let page = Arc::new(PageRead::new(Page {
            entries: vec![entry],
            more: true,
            compacted: None,
        }));
        inner.ended(&key, 6, Some(&page));
        assert_eq!(inner.bytes, 0, "another slot's read changes nothing");
        inner.ended(&key, 7, Some(&page));
        assert_eq!(inner.bytes, 2 + ENTRY_OVERHEAD_BYTES as usize);

        inner.expire(t0 + KEEP / 2);
        assert!(inner.slots.contains_key(&key), "kept");
        inner.expire(t0 + KEEP);
        assert!(inner.slots.is_empty(), "gone once older than KEEP");
        assert_eq!(inner.bytes, 0, "and no longer counted");
    }

    #[tokio::test]
    async fn no_read_is_shared_while_the_kept_pages_fill_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let (store, session) = store_with(&dir, 1).await;
        let pages = Arc::new(SharedPages::default());
        pages.lock().bytes = MAX_BYTES;
        assert!(pages
            .shared(&store, (session, Seq::ZERO, LIMIT), Instant::now())
            .is_none());
    }
}
