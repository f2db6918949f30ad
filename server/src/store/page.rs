//! Pages of a log bounded in bytes as well as in count: a page stops at `count` entries or
//! `bytes` of payload, whichever comes first, and always holds at least one entry when the
//! range has any, so a reader always makes progress.
//!
//! Sized from [`LogStore::entry_sizes`] before anything is read, so a page of big entries never
//! exists in memory whole. Entries are immutable once committed; only compaction removes some,
//! and it moves the session's compaction mark in the same transaction. So the mark is read
//! before and after: when it has not moved, the read returned exactly the entries sized, and the
//! page says what compaction removed after its cursor; when it has, the page is read again.
//! Calls only the [`LogStore`] trait.

use moor_protocol::web::Compacted;
use moor_protocol::{Entry, SessionId};

use super::{LogStore, Range, RawEntry, StoreResult};

/// Reads of one page before giving up on a mark that keeps moving (a compaction step commits
/// at most every few milliseconds, a page reads in less).
const ATTEMPTS: usize = 4;

/// What an entry costs beyond its payload in a page (seq, ts, kind, author and the framing of
/// the JSON or SSE encoding), for the byte bound.
pub const ENTRY_OVERHEAD_BYTES: u64 = 256;

/// The bounds of one page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLimit {
    /// Most entries.
    pub count: u32,
    /// Most bytes of entries (payload plus [`ENTRY_OVERHEAD_BYTES`] each), except that the
    /// first entry is always included.
    pub bytes: u64,
}

/// One page of a log: of [`Entry`]s, or of [`RawEntry`]s as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<E = Entry> {
    /// The entries, ascending.
    pub entries: Vec<E>,
    /// The range holds more entries than the page.
    pub more: bool,
    /// For an `After` range: what compaction removed after its cursor, if anything.
    pub compacted: Option<Compacted>,
}

/// Reads one page of `range` within `limit`.
pub async fn read_page(
    store: &dyn LogStore,
    session: SessionId,
    range: Range,
    limit: PageLimit,
) -> StoreResult<Page> {
    let page = read_page_raw(store, session, range, limit).await?;
    Ok(Page {
        entries: page
            .entries
            .iter()
            .map(RawEntry::parse)
            .collect::<StoreResult<_>>()?,
        more: page.more,
        compacted: page.compacted,
    })
}

/// [`read_page`], the payloads as stored.
pub async fn read_page_raw(
    store: &dyn LogStore,
    session: SessionId,
    range: Range,
    limit: PageLimit,
) -> StoreResult<Page<RawEntry>> {
    let count = limit.count.max(1);
    let mut before = store.compaction(session).await?;
    for attempt in 1..=ATTEMPTS {
        let sizes = store
            .entry_sizes(session, range, count.saturating_add(1))
            .await?;
        let take = fitting(&sizes, count, limit.bytes);
        let entries = if take == 0 {
            Vec::new()
        } else {
            store.read_raw(session, range, take as u32).await?
        };
        let after = store.compaction(session).await?;
        if after.through == before.through || attempt == ATTEMPTS {
            // After the last attempt the page is still whole entries in order; what it may miss
            // is named by the mark read last.
            let compacted = match range {
                Range::After(cursor) => after.after(cursor),
                Range::Before(_) => None,
            };
            return Ok(Page {
                more: sizes.len() > take,
                entries,
                compacted,
            });
        }
        before = after;
    }
    unreachable!("the last attempt returns")
}

/// How many of the leading `sizes` fit in `count` entries and `bytes` (at least one).
fn fitting(sizes: &[u64], count: u32, bytes: u64) -> usize {
    let mut used = 0u64;
    let mut take = 0usize;
    for size in sizes.iter().take(count as usize) {
        let cost = size.saturating_add(ENTRY_OVERHEAD_BYTES);
        if take > 0 && used.saturating_add(cost) > bytes {
            break;
        }
        used = used.saturating_add(cost);
        take += 1;
    }
    take
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_stops_at_the_count_or_the_bytes_and_always_holds_one_entry() {
        let o = ENTRY_OVERHEAD_BYTES;
        assert_eq!(fitting(&[10, 10, 10], 2, 1 << 20), 2);
        assert_eq!(fitting(&[100, 100, 100], 10, 2 * (100 + o)), 2);
        assert_eq!(fitting(&[100, 100, 100], 10, 2 * (100 + o) - 1), 1);
        assert_eq!(fitting(&[1 << 30, 1], 10, 1024), 1);
        assert_eq!(fitting(&[], 10, 1024), 0);
    }
}
