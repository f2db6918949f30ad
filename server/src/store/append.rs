//! The dialect-independent half of one append transaction: deciding, entry by entry, whether it
//! is new (and which seq it gets), a duplicate of something stored, a content mismatch or a
//! producer gap, and assembling the outcomes once committed.
//!
//! Each store implements [`Lookup`] with its own SQL on its open transaction; the session row is
//! already locked (SQLite: the single writer; Postgres: `FOR UPDATE`), so what the lookups see
//! cannot change under the decision.

use std::future::Future;

use anyhow::Context;
use moor_protocol::{ProducerId, Seq};

use super::plan::{Check, Plan};
use super::{same_content, Append, Appended, IdemKey, RawEntry, StoreError, StoreResult};

/// An entry as stored, for comparing a replayed producer seq with it.
#[derive(Debug)]
pub(crate) struct StoredEntry {
    /// Its seq.
    pub(crate) seq: i64,
    /// Its kind.
    pub(crate) kind: String,
    /// Its payload as stored (JSON text).
    pub(crate) payload: String,
}

/// The idempotency lookups an append needs, answered inside the appending transaction.
pub(crate) trait Lookup: Send {
    /// Highest stored producer seq of `producer` in this session (0: none).
    fn producer_mark(
        &mut self,
        producer: ProducerId,
    ) -> impl Future<Output = StoreResult<u64>> + Send;

    /// The entry stored under `(producer, seq)`, if any.
    fn producer_entry(
        &mut self,
        producer: ProducerId,
        seq: u64,
    ) -> impl Future<Output = StoreResult<Option<StoredEntry>>> + Send;

    /// Seq of the input stored under `client_msg_id`, if any.
    fn client_msg_seq(&mut self, id: &str)
        -> impl Future<Output = StoreResult<Option<i64>>> + Send;

    /// Seq of the receipt of `kind` about `input`, if any.
    fn receipt_seq(
        &mut self,
        kind: &str,
        input: Seq,
    ) -> impl Future<Output = StoreResult<Option<i64>>> + Send;
}

/// A row about to be inserted.
#[derive(Debug)]
pub(crate) struct NewRow<'a> {
    /// Its seq.
    pub(crate) seq: i64,
    /// What to store.
    pub(crate) append: &'a Append,
    /// The payload's JSON text.
    pub(crate) payload: &'a str,
}

impl NewRow<'_> {
    /// The idempotency columns: `(producer_id, producer_seq, client_msg_id, ref_seq)`.
    pub(crate) fn key_columns(
        &self,
    ) -> (Option<ProducerId>, Option<i64>, Option<&str>, Option<i64>) {
        match &self.append.key {
            IdemKey::Producer { producer, seq } => (Some(*producer), Some(*seq as i64), None, None),
            IdemKey::ClientMsg(id) => (None, None, Some(id.as_str()), None),
            IdemKey::Receipt(input) => (None, None, None, Some(input.0 as i64)),
            IdemKey::End { .. } => (None, None, None, Some(0)),
            IdemKey::None => (None, None, None, None),
        }
    }
}

/// What an append transaction has to write, and what it has decided for each entry.
#[derive(Debug)]
pub(crate) struct Decision<'a> {
    /// Per entry of the batch: `Some` when nothing is written for it, `None` when it is in `rows`.
    pub(crate) decided: Vec<Option<Appended>>,
    /// New rows, in seq order.
    pub(crate) rows: Vec<NewRow<'a>>,
    /// The session's head after the rows.
    pub(crate) head: i64,
    /// Timestamp of the last new row.
    pub(crate) last_ts: Option<i64>,
    /// Producer marks, to be saved when they moved.
    pub(crate) plan: Plan,
}

/// Decides every entry of `batch`, given the session's current `head`.
pub(crate) async fn decide<'a, L: Lookup>(
    lookup: &mut L,
    batch: &'a [Append],
    head: i64,
) -> StoreResult<Decision<'a>> {
    let mut d = Decision {
        decided: Vec::with_capacity(batch.len()),
        rows: Vec::with_capacity(batch.len()),
        head,
        last_ts: None,
        plan: Plan::default(),
    };
    for append in batch {
        let outcome = match &append.key {
            IdemKey::Producer { producer, seq } => {
                let mark = match d.plan.mark(*producer) {
                    Some(m) => m,
                    None => {
                        let m = lookup.producer_mark(*producer).await?;
                        d.plan.set_mark(*producer, m);
                        m
                    }
                };
                match d.plan.check_producer(*producer, *seq, mark) {
                    Check::Next => None,
                    Check::Replay => {
                        let stored = lookup.producer_entry(*producer, *seq).await?;
                        let outcome = replay_outcome(stored, append, *seq)?;
                        // What follows a diverging entry must not be stored either.
                        if matches!(outcome, Appended::Mismatch { .. }) {
                            d.plan.poison(*producer);
                        }
                        Some(outcome)
                    }
                    Check::Gap { expected } => Some(Appended::Gap {
                        expected,
                        got: *seq,
                    }),
                }
            }
            IdemKey::ClientMsg(id) => match d.plan.seen_client_msg(id) {
                Some(seq) => Some(Appended::Duplicate(seq)),
                None => lookup
                    .client_msg_seq(id)
                    .await?
                    .map(|s| Appended::Duplicate(Seq(s as u64))),
            },
            IdemKey::Receipt(input) => match d.plan.seen_receipt(&append.kind, *input) {
                Some(seq) => Some(Appended::Duplicate(seq)),
                None => lookup
                    .receipt_seq(&append.kind, *input)
                    .await?
                    .map(|s| Appended::Duplicate(Seq(s as u64))),
            },
            IdemKey::End { .. } | IdemKey::None => None,
        };
        if outcome.is_none() {
            d.head += 1;
            d.plan.record(&append.key, &append.kind, Seq(d.head as u64));
            d.last_ts = Some(append.ts);
            d.rows.push(NewRow {
                seq: d.head,
                append,
                payload: append.payload.text(),
            });
        }
        d.decided.push(outcome);
    }
    Ok(d)
}

/// The outcome of each entry once the transaction committed: `decided` from [`decide`], and the
/// seqs of the new rows in order.
pub(crate) fn outcomes(
    batch: Vec<Append>,
    decided: Vec<Option<Appended>>,
    stored_seqs: Vec<i64>,
) -> Vec<Appended> {
    let mut seqs = stored_seqs.into_iter();
    batch
        .into_iter()
        .zip(decided)
        .map(|(a, d)| {
            d.unwrap_or_else(|| {
                let seq = Seq(seqs.next().unwrap_or_default() as u64);
                Appended::Stored(RawEntry::new(
                    seq,
                    a.ts,
                    &a.kind,
                    &a.author,
                    a.payload.text(),
                ))
            })
        })
        .collect()
}

fn replay_outcome(
    stored: Option<StoredEntry>,
    append: &Append,
    producer_seq: u64,
) -> StoreResult<Appended> {
    // The mark says this producer seq is stored: a missing row was compacted (only entries of
    // the compacted kinds ever are), else the store is inconsistent.
    let Some(row) = stored else {
        if moor_protocol::web::COMPACTED_KINDS.contains(&append.kind.as_str()) {
            return Ok(Appended::Duplicate(Seq::ZERO));
        }
        return Err(StoreError::Other(anyhow::anyhow!(
            "producer seq {producer_seq} below the mark but not stored"
        )));
    };
    let stored_payload: serde_json::Value =
        serde_json::from_str(&row.payload).context("stored payload is not json")?;
    Ok(if same_content(&row.kind, &stored_payload, append) {
        Appended::Duplicate(Seq(row.seq as u64))
    } else {
        Appended::Mismatch { producer_seq }
    })
}
