//! Pages of a session's history read once for all the tails that ask for them at about the same
//! time. When a thousand viewers attach to one session at once they read the same pages from the
//! same cursors, and one store read now serves them all instead of a thousand queued on the
//! store's readers.
//!
//! Only a page with more entries after it is kept: its entries are committed and never change
//! (what compaction removes later was still there when the page was read, and the page says what
//! compaction had removed by then). The last page of a log is read afresh by every tail, so a tail
//! reaching the end sees what was appended since. Kept pages live [`KEEP`] at most, and no page
//! is kept while those kept hold [`MAX_BYTES`]; a page that cannot be kept is read by its tail
//! alone, as before. A tail checks seqs at the seam with the live stream, so an older page could
//! never hide an entry.
//!
//! Part of the session core: calls the store only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use moor_protocol::{Seq, SessionId};
use tokio::sync::OnceCell;

use crate::store::{
    read_page_raw, LogStore, Page, PageLimit, Range, RawEntry, StoreResult, ENTRY_OVERHEAD_BYTES,
};

/// How long a page read for one tail serves others.
const KEEP: Duration = Duration::from_secs(2);

/// Most bytes of entries kept in all (payload plus [`ENTRY_OVERHEAD_BYTES`] each).
const MAX_BYTES: usize = 16 << 20;

/// A page as shared by the tails that read it.
pub type SharedPage = Arc<Page<RawEntry>>;

type Key = (SessionId, Seq, PageLimit);

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
}

#[derive(Debug)]
struct Slot {
    page: Arc<OnceCell<SharedPage>>,
    born: Instant,
    /// Its size once read, counted in [`Inner::bytes`].
    bytes: usize,
}

impl SharedPages {
    /// The page of `session` after `cursor` within `limit`: read by this caller, or by another
    /// that asked for the same page a moment ago (the first caller reads; the others wait for
    /// its read).
    pub async fn read(
        &self,
        store: &dyn LogStore,
        session: SessionId,
        cursor: Seq,
        limit: PageLimit,
    ) -> StoreResult<SharedPage> {
        let key = (session, cursor, limit);
        let read = || async {
            read_page_raw(store, session, Range::After(cursor), limit)
                .await
                .map(Arc::new)
        };
        let Some(cell) = self.lock().slot(key, Instant::now()) else {
            return read().await;
        };
        let page = Arc::clone(cell.get_or_try_init(read).await?);
        self.lock().read(&key, &cell, &page);
        Ok(page)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Inner {
    /// The slot of `key`, made if there is room; `None` if there is not.
    fn slot(&mut self, key: Key, now: Instant) -> Option<Arc<OnceCell<SharedPage>>> {
        self.slots.retain(|_, slot| {
            let keep = now.duration_since(slot.born) < KEEP;
            if !keep {
                self.bytes -= slot.bytes;
            }
            keep
        });
        if let Some(slot) = self.slots.get(&key) {
            return Some(Arc::clone(&slot.page));
        }
        (self.bytes < MAX_BYTES).then(|| {
            let page = Arc::new(OnceCell::new());
            let slot = Slot {
                page: Arc::clone(&page),
                born: now,
                bytes: 0,
            };
            self.slots.insert(key, slot);
            page
        })
    }

    /// `page` was read into `cell`, the slot of `key`: kept and counted if more entries follow
    /// it, dropped if it is the log's last.
    fn read(&mut self, key: &Key, cell: &Arc<OnceCell<SharedPage>>, page: &SharedPage) {
        let Some(slot) = self
            .slots
            .get_mut(key)
            .filter(|s| Arc::ptr_eq(&s.page, cell))
        else {
            return;
        };
        if !page.more {
            self.bytes -= slot.bytes;
            self.slots.remove(key);
        } else if slot.bytes == 0 {
            slot.bytes = page
                .entries
                .iter()
                .map(|e| e.payload().len() + ENTRY_OVERHEAD_BYTES as usize)
                .sum();
            self.bytes += slot.bytes;
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
                payload: json!({"stream": "stdout", "text": format!("line {i}")}),
                key: IdemKey::None,
            })
            .collect()
    }

    #[tokio::test]
    async fn tails_asking_for_the_same_page_at_once_share_one_read_but_not_the_logs_end() {
        // arrange: a session of 250 entries, pages of 100
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("pages.db").display());
        let log = connect_as(&url, "test").await.unwrap().log;
        let store = &*log;
        let session = store.open_session("s", None).await.unwrap().id;
        store.append(session, outputs(250)).await.unwrap();
        let pages = SharedPages::default();
        let limit = PageLimit {
            count: 100,
            bytes: 1 << 20,
        };

        // act: twenty tails at 0 at once; then two at the log's last page
        let first: Vec<SharedPage> = futures_util::future::try_join_all(
            (0..20).map(|_| pages.read(store, session, Seq::ZERO, limit)),
        )
        .await
        .unwrap();
        let end = pages.read(store, session, Seq(200), limit).await.unwrap();
        store.append(session, outputs(1)).await.unwrap();
        let end_again = pages.read(store, session, Seq(200), limit).await.unwrap();

        // assert
        assert!(first.iter().all(|p| Arc::ptr_eq(p, &first[0])), "one read");
        let seqs: Vec<u64> = first[0].entries.iter().map(|e| e.seq.0).collect();
        assert_eq!(seqs, (1..=100).collect::<Vec<_>>());
        assert!(first[0].more);
        assert_eq!((end.entries.len(), end.more), (50, false));
        assert_eq!(end_again.entries.len(), 51, "the end is read afresh");
        let inner = pages.lock();
        assert_eq!(
            inner.slots.len(),
            1,
            "only the page with more after it is kept"
        );
        assert!(inner.bytes > 0);
    }

    #[test]
    fn a_kept_page_is_read_again_once_it_is_older_than_its_keep_and_none_is_kept_past_the_bound() {
        let mut inner = Inner::default();
        let limit = PageLimit {
            count: 10,
            bytes: 1,
        };
        let key = (SessionId(uuid::Uuid::new_v4()), Seq::ZERO, limit);
        let t0 = Instant::now();
        let first = inner.slot(key, t0).unwrap();
        let entry = RawEntry::new(Seq(1), 0, kinds::AGENT_OUTPUT, "bridge", "{}");
        let page = Arc::new(Page {
            entries: vec![entry],
            more: true,
            compacted: None,
        });
        first.set(Arc::clone(&page)).unwrap();
        inner.read(&key, &first, &page);
        assert_eq!(inner.bytes, 2 + ENTRY_OVERHEAD_BYTES as usize);

        let soon = inner.slot(key, t0 + KEEP / 2).unwrap();
        let later = inner.slot(key, t0 + KEEP).unwrap();

        assert!(Arc::ptr_eq(&soon, &first), "kept");
        assert!(
            !Arc::ptr_eq(&later, &first),
            "a new read once older than KEEP"
        );
        assert_eq!(inner.bytes, 0, "the old page is no longer counted");
        inner.bytes = MAX_BYTES;
        let other = (SessionId(uuid::Uuid::new_v4()), Seq::ZERO, limit);
        assert!(
            inner.slot(other, t0 + KEEP).is_none(),
            "no room: read alone"
        );
    }
}
