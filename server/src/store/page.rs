//! Pages of a log bounded in bytes as well as in count: a page stops at `count` entries or
//! `bytes` of payload, whichever comes first, and always holds at least one entry when the
//! range has any, so a reader always makes progress.
//!
//! Sized by [`LogStore::fit_page`] from the stored payload lengths before anything is read, so a
//! page of big entries never exists in memory whole. Entries are immutable once committed; only
//! compaction removes some, and it moves the session's compaction mark in the same transaction.
//! So the mark is read in the statement that sizes the page and again in the one that reads it:
//! when it has not moved, the read returned exactly the entries sized, and the page says what
//! compaction removed after its cursor; when it has, the page is read again. Two statements a
//! page.
//! Calls only the [`LogStore`] trait.

use moor_protocol::web::Compacted;
use moor_protocol::{Entry, Seq, SessionId};

use super::{LogStore, Range, RawEntry, StoreResult};

/// Reads of one page before giving up on a mark that keeps moving (a compaction step commits
/// at most every few milliseconds, a page reads in less).
const ATTEMPTS: usize = 4;

/// What an entry costs beyond its payload in a page (seq, ts, kind, author and the framing of
/// the JSON or SSE encoding), for the byte bound.
pub const ENTRY_OVERHEAD_BYTES: u64 = 256;

/// The bounds of one page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PageLimit {
    /// Most entries.
    pub count: u32,
    /// Most bytes of entries (payload plus [`ENTRY_OVERHEAD_BYTES`] each), except that the
    /// first entry is always included.
    pub bytes: u64,
}

/// What of a range makes one page ([`LogStore::fit_page`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageFit {
    /// How many entries, from the start of the range: those within the page's count and bytes,
    /// and always the first when the range has any.
    pub take: u32,
    /// The range holds more entries than that.
    pub more: bool,
    /// The session's compaction mark ([`Compaction::through`](super::Compaction)) when the page
    /// was sized.
    pub compacted_through: Seq,
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
    for attempt in 1..=ATTEMPTS {
        let fit = store
            .fit_page(session, range, PageLimit { count, ..limit })
            .await?;
        let (entries, after) = match fit.take {
            0 => (Vec::new(), store.compaction(session).await?),
            take => store.read_raw(session, range, take).await?,
        };
        if after.through == fit.compacted_through || attempt == ATTEMPTS {
            // After the last attempt the page is still whole entries in order; what it may miss
            // is named by the mark read last.
            let compacted = match range {
                Range::After(cursor) => after.after(cursor),
                Range::Before(_) => None,
            };
            return Ok(Page {
                more: fit.more,
                entries,
                compacted,
            });
        }
    }
    unreachable!("the last attempt returns")
}
