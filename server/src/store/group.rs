//! The dialect-independent half of a group append: several sessions' batches decided inside
//! ONE transaction, so that one commit (one fsync) makes all of them durable.
//!
//! Each store reads the heads of every session in the group at once (Postgres locks their rows
//! in id order, so two nodes grouping overlapping sessions cannot deadlock), prefetches the
//! producer marks the batches need, and then calls [`decide_group`], which runs
//! [`append::decide`](super::append::decide) session by session with the same rules as a
//! single append. What is left to the store is writing the rows, marks and heads it returns with
//! a few set-based statements, and committing. A session that is unknown, or ended while its
//! batch holds new work, gets its own error and takes no part; the others are unaffected.
//!
//! A batch that ends with [`IdemKey::End`](super::IdemKey::End) ends its session in the same
//! transaction: the store sets the session's end time with its head. It is refused whole when
//! the session has ended already, or when the session's head is not the one the writer read
//! (an input may have come in since, which the end would leave without an outcome).

use std::collections::HashMap;
use std::hash::Hash;

use moor_protocol::{ProducerId, SessionId};

use super::append::{self, Decision, Lookup, NewRow};
use super::{Append, Appended, StoreError, StoreResult};

/// One session's part of a group: its batch.
pub type GroupPart = (SessionId, Vec<Append>);

/// A session's row as the group transaction found it, advanced as its batches are decided.
#[derive(Debug, Clone)]
pub(crate) struct Head<K> {
    /// The dialect's key for the session's rows (SQLite: its integer pk; Postgres: its id).
    pub(crate) key: K,
    /// Its head seq.
    pub(crate) head: i64,
    /// Whether it has ended.
    pub(crate) ended: bool,
    /// The first seq written to it in this transaction, if any.
    pub(crate) first: Option<i64>,
    /// The timestamp of the last entry written to it in this transaction.
    pub(crate) last_ts: Option<i64>,
    /// When this transaction ended it (its `session.ended`'s time), if it did.
    pub(crate) ended_at: Option<i64>,
}

impl<K> Head<K> {
    /// A session as read from the database.
    pub(crate) fn new(key: K, head: i64, ended: bool) -> Self {
        Self {
            key,
            head,
            ended,
            first: None,
            last_ts: None,
            ended_at: None,
        }
    }
}

/// The lookups of a group transaction: [`Lookup`] for whichever session it is told to enter.
pub(crate) trait GroupLookup: Lookup {
    /// The dialect's session key.
    type Key: Clone + Eq + Hash + Send + Sync;

    /// Answers for the session `key` from now on.
    fn enter(&mut self, key: &Self::Key);

    /// The producer's mark moved to `mark` in this transaction (a later batch of the same
    /// session in the group must see it).
    fn advanced(&mut self, key: &Self::Key, producer: ProducerId, mark: u64);
}

/// A part's decisions: per entry, its outcome when nothing is written for it, and the seqs of
/// the rows written for it; or the part's own error.
pub(crate) type Decided = StoreResult<(Vec<Option<Appended>>, Vec<i64>)>;

/// What a group transaction has to write, and each part's decisions.
#[derive(Debug)]
pub(crate) struct Grouped<'a, K> {
    /// New rows of every session, each with its session's key.
    pub(crate) rows: Vec<(K, NewRow<'a>)>,
    /// Producer marks that moved: `(session key, producer) → mark`.
    pub(crate) marks: HashMap<(K, ProducerId), u64>,
    /// Per part, in order: its error, or what was decided per entry and the seqs written.
    pub(crate) parts: Vec<Decided>,
}

/// Decides every part of `group` against `heads` (the sessions found, by id), advancing them.
/// An error here is the whole transaction's: nothing may be committed.
pub(crate) async fn decide_group<'a, L: GroupLookup>(
    lookup: &mut L,
    group: &'a [GroupPart],
    heads: &mut HashMap<SessionId, Head<L::Key>>,
) -> StoreResult<Grouped<'a, L::Key>> {
    let mut out = Grouped {
        rows: Vec::new(),
        marks: HashMap::new(),
        parts: Vec::with_capacity(group.len()),
    };
    for (session, batch) in group {
        let Some(head) = heads.get_mut(session) else {
            out.parts.push(Err(StoreError::NotFound));
            continue;
        };
        if head.ended && batch.iter().any(Append::is_new_work) {
            out.parts.push(Err(StoreError::SessionEnded));
            continue;
        }
        let end = batch.last().and_then(Append::ends_at);
        if batch.iter().rev().skip(1).any(|a| a.ends_at().is_some()) {
            out.parts.push(Err(StoreError::Other(anyhow::anyhow!(
                "a session's end must be the last entry of its batch"
            ))));
            continue;
        }
        match end {
            Some(_) if head.ended => {
                out.parts.push(Err(StoreError::SessionEnded));
                continue;
            }
            Some(seen) if seen.0 as i64 != head.head => {
                out.parts.push(Err(StoreError::Conflict(
                    "the log moved on while the session was ending",
                )));
                continue;
            }
            _ => {}
        }
        lookup.enter(&head.key);
        let Decision {
            decided,
            rows,
            head: new_head,
            last_ts,
            plan,
        } = append::decide(lookup, batch, head.head).await?;
        for (producer, mark) in plan.advanced_marks() {
            lookup.advanced(&head.key, producer, mark);
            out.marks.insert((head.key.clone(), producer), mark);
        }
        if let Some(first) = rows.first() {
            head.first.get_or_insert(first.seq);
            head.last_ts = last_ts;
        }
        head.head = new_head;
        if end.is_some() {
            head.ended = true;
            head.ended_at = last_ts;
        }
        let seqs = rows.iter().map(|r| r.seq).collect();
        out.rows
            .extend(rows.into_iter().map(|r| (head.key.clone(), r)));
        out.parts.push(Ok((decided, seqs)));
    }
    Ok(out)
}

/// Each part's outcome once the transaction committed.
pub(crate) fn outcomes(
    group: Vec<GroupPart>,
    parts: Vec<Decided>,
) -> Vec<StoreResult<Vec<Appended>>> {
    group
        .into_iter()
        .zip(parts)
        .map(|((_, batch), part)| {
            part.map(|(decided, seqs)| append::outcomes(batch, decided, seqs))
        })
        .collect()
}

/// A session that got rows: `(key, first seq, head, last ts, ended at)`, for updating heads
/// (and the end time, when the rows ended it) and announcing ranges.
pub(crate) type Written<K> = (K, i64, i64, i64, Option<i64>);

/// The sessions that got rows.
pub(crate) fn written<K: Clone>(heads: &HashMap<SessionId, Head<K>>) -> Vec<Written<K>> {
    heads
        .values()
        .filter_map(|h| {
            Some((
                h.key.clone(),
                h.first?,
                h.head,
                h.last_ts.unwrap_or_default(),
                h.ended_at,
            ))
        })
        .collect()
}
