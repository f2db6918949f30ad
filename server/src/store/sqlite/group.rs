//! SQLite's group append: several sessions' batches in one transaction on the writer
//! connection, with a fixed handful of calls whatever the number of sessions: `BEGIN`, one read
//! (the sessions' heads and their producers' marks, aggregated into one row), one write (every
//! new row in one insert, marks and heads each in one update, sent together), `COMMIT`. Every
//! call, and every row read back, is a hand-off to SQLite's worker thread and back, which on
//! busy cores waits for a time slice and costs two thread wake-ups whatever the group's size;
//! so the statements of a step go in one call: the rows as bound values of multi-row inserts,
//! the marks and heads as JSON arrays expanded by `json_each`. The decisions themselves are `store::group`'s.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::LazyLock;

use anyhow::Context;
use moor_protocol::{ProducerId, Seq, SessionId};
use serde_json::json;
use sqlx::query::Query;
use sqlx::sqlite::SqliteArguments;
use sqlx::{Row, Sqlite, Transaction};

use super::SqliteStore;
use crate::store::access::stored_session;
use crate::store::append::{Lookup, NewRow, StoredEntry};
use crate::store::errors::db_error;
use crate::store::group::{self, decide_group, GroupLookup, GroupPart, Head, Written};
use crate::store::notify::NOTIFYING_KINDS;
use crate::store::{Appended, IdemKey, StoreResult};

/// Rows per `INSERT` statement: ten variables each, well within SQLite's 32,766 a statement.
const INSERT_ROWS: usize = 1000;

/// A producer's row in a session: `(session pk, producer) → (producer pk, mark)`.
type Producers = HashMap<(i64, ProducerId), (i64, u64)>;

impl SqliteStore {
    /// [`LogStore::append_group`](crate::store::LogStore::append_group) on SQLite.
    pub(super) async fn append_group_tx(
        &self,
        group: Vec<GroupPart>,
    ) -> StoreResult<Vec<StoreResult<Vec<Appended>>>> {
        let mut tx = self.writer.begin().await.map_err(db_error)?;
        let (mut heads, producers) = read_group(&mut tx, &group).await?;
        let mut lookup = SqliteGroupLookup {
            tx: &mut tx,
            spk: 0,
            stored_heads: heads.values().map(|h| (h.key, h.head)).collect(),
            stored_marks: producers.iter().map(|(k, (_, mark))| (*k, *mark)).collect(),
            producers,
        };
        let decided = decide_group(&mut lookup, &group, &mut heads).await?;
        let producers = lookup.producers;
        let marks: Vec<(i64, i64)> = decided
            .marks
            .iter()
            .filter_map(|((spk, p), mark)| Some((producers.get(&(*spk, *p))?.0, *mark as i64)))
            .collect();
        write_group(
            &mut tx,
            &decided.rows,
            &producers,
            &marks,
            &group::written(&heads),
        )
        .await?;
        tx.commit().await.map_err(db_error)?;
        self.append_txs.fetch_add(1, Ordering::Relaxed);
        let parts = decided.parts;
        Ok(group::outcomes(group, parts))
    }
}

/// The `(session id, producer)` pairs the group's producer entries name.
fn wanted_producers(group: &[GroupPart]) -> Vec<(String, String)> {
    let mut seen = HashSet::new();
    group
        .iter()
        .flat_map(|(s, batch)| {
            batch.iter().filter_map(move |a| match a.key {
                IdemKey::Producer { producer, .. } => Some((*s, producer)),
                _ => None,
            })
        })
        .filter(|pair| seen.insert(*pair))
        .map(|(s, p)| (s.to_string(), p.to_string()))
        .collect()
}

/// What the group's reads find, aggregated into one row: the sessions (pk, id, head, ended)
/// and the stored rows of the producers its entries name (pk, session pk, id, mark).
type GroupRows = (
    Vec<(i64, String, i64, Option<i64>)>,
    Vec<(i64, i64, String, i64)>,
);

/// The group's sessions that exist, by id, and the stored rows of the producers its entries
/// name (missing ones are created when first needed): one statement, one row back.
async fn read_group(
    tx: &mut Transaction<'_, Sqlite>,
    group: &[GroupPart],
) -> StoreResult<(HashMap<SessionId, Head<i64>>, Producers)> {
    let ids: Vec<String> = group.iter().map(|(s, _)| s.to_string()).collect();
    let text: String = sqlx::query_scalar(
        "SELECT json_array(\
         (SELECT json_group_array(json_array(pk, id, head_seq, ended_at)) FROM sessions \
          WHERE id IN (SELECT value FROM json_each(?))), \
         (SELECT json_group_array(json_array(p.pk, p.session_pk, p.producer_id, p.last_seq)) \
          FROM json_each(?) AS k JOIN sessions s ON s.id = json_extract(k.value, '$[0]') \
          JOIN producers p ON p.session_pk = s.pk \
          AND p.producer_id = json_extract(k.value, '$[1]')))",
    )
    .bind(json!(ids).to_string())
    .bind(json!(wanted_producers(group)).to_string())
    .fetch_one(&mut **tx)
    .await
    .map_err(db_error)?;
    let (found, stored): GroupRows =
        serde_json::from_str(&text).context("decode an aggregated row")?;
    let mut heads = HashMap::with_capacity(found.len());
    for (pk, id, head, ended_at) in found {
        heads.insert(
            stored_session(&id)?,
            Head::new(pk, head, ended_at.is_some()),
        );
    }
    let mut producers = HashMap::with_capacity(stored.len());
    for (pk, spk, producer, mark) in stored {
        if let Ok(producer) = producer.parse::<ProducerId>() {
            producers.insert((spk, producer), (pk, mark as u64));
        }
    }
    Ok((heads, producers))
}

/// The producer's row in this session, created with mark 0 if new: its pk and its mark.
async fn ensure_producer(
    tx: &mut Transaction<'_, Sqlite>,
    spk: i64,
    producer: ProducerId,
) -> StoreResult<(i64, u64)> {
    let id = producer.to_string();
    sqlx::query(
        "INSERT INTO producers (session_pk, producer_id, last_seq) VALUES (?, ?, 0) \
         ON CONFLICT (session_pk, producer_id) DO NOTHING",
    )
    .bind(spk)
    .bind(&id)
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    let row =
        sqlx::query("SELECT pk, last_seq FROM producers WHERE session_pk = ? AND producer_id = ?")
            .bind(spk)
            .bind(&id)
            .fetch_one(&mut **tx)
            .await
            .map_err(db_error)?;
    Ok((row.get("pk"), row.get::<i64, _>("last_seq") as u64))
}

/// The idempotency lookups of a group, on the writer's open transaction: marks from the
/// prefetched producers, the rest by query in the session entered last.
struct SqliteGroupLookup<'c, 't> {
    tx: &'c mut Transaction<'t, Sqlite>,
    spk: i64,
    producers: Producers,
    /// Each session's head as stored before this transaction, by session pk.
    stored_heads: HashMap<i64, i64>,
    /// Each producer's mark as stored before this transaction.
    stored_marks: HashMap<(i64, ProducerId), u64>,
}

impl GroupLookup for SqliteGroupLookup<'_, '_> {
    type Key = i64;

    fn enter(&mut self, key: &i64) {
        self.spk = *key;
    }

    fn advanced(&mut self, key: &i64, producer: ProducerId, mark: u64) {
        if let Some(p) = self.producers.get_mut(&(*key, producer)) {
            p.1 = mark;
        }
    }
}

impl Lookup for SqliteGroupLookup<'_, '_> {
    async fn producer_mark(&mut self, producer: ProducerId) -> StoreResult<u64> {
        if let Some((_, mark)) = self.producers.get(&(self.spk, producer)) {
            return Ok(*mark);
        }
        let (pk, mark) = ensure_producer(self.tx, self.spk, producer).await?;
        self.producers.insert((self.spk, producer), (pk, mark));
        Ok(mark)
    }

    /// Found without an index on `(producer, producer seq)`, which would cost every session a
    /// page of its own in every commit. A producer's seqs are stored without gaps and each takes
    /// a higher seq than the one before, so the `mark - seq` entries stored after `seq` lie
    /// below the head: the entry is at or below `head - (mark - seq)`. The walk down from there
    /// passes only what other writers (inputs, receipts, `moord`'s own entries) stored after it,
    /// and stops at this producer's first entry at or below `seq`: an earlier one means that
    /// `seq` was compacted away.
    async fn producer_entry(
        &mut self,
        producer: ProducerId,
        seq: u64,
    ) -> StoreResult<Option<StoredEntry>> {
        let Some(&(ppk, _)) = self.producers.get(&(self.spk, producer)) else {
            return Ok(None);
        };
        let head = self
            .stored_heads
            .get(&self.spk)
            .copied()
            .unwrap_or_default();
        let mark = self
            .stored_marks
            .get(&(self.spk, producer))
            .copied()
            .unwrap_or_default();
        let below = head.saturating_sub(mark.saturating_sub(seq) as i64);
        let row = sqlx::query(
            "SELECT seq, kind, payload, producer_seq FROM entries \
             WHERE session_pk = ? AND seq <= ? AND producer_pk = ? AND producer_seq <= ? \
             ORDER BY seq DESC LIMIT 1",
        )
        .bind(self.spk)
        .bind(below)
        .bind(ppk)
        .bind(seq as i64)
        .fetch_optional(&mut **self.tx)
        .await
        .map_err(db_error)?;
        Ok(row
            .filter(|r| r.get::<i64, _>("producer_seq") == seq as i64)
            .map(|r| StoredEntry {
                seq: r.get("seq"),
                kind: r.get("kind"),
                payload: r.get("payload"),
            }))
    }

    async fn client_msg_seq(&mut self, id: &str) -> StoreResult<Option<i64>> {
        sqlx::query_scalar("SELECT seq FROM entries WHERE session_pk = ? AND client_msg_id = ?")
            .bind(self.spk)
            .bind(id)
            .fetch_optional(&mut **self.tx)
            .await
            .map_err(db_error)
    }

    async fn receipt_seq(&mut self, kind: &str, input: Seq) -> StoreResult<Option<i64>> {
        sqlx::query_scalar(
            "SELECT seq FROM entries WHERE session_pk = ? AND kind = ? AND ref_seq = ?",
        )
        .bind(self.spk)
        .bind(kind)
        .bind(input.0 as i64)
        .fetch_optional(&mut **self.tx)
        .await
        .map_err(db_error)
    }
}

/// Writes what the group decided: every new row of every session, the moved producer marks
/// `(producer pk, mark)` and the heads of the sessions that got rows `(session pk, first, head,
/// last ts)`. Whole chunks of [`INSERT_ROWS`] rows go as one statement each, the same text every
/// time, so SQLite compiles it once per connection; the rest of the rows, the outbox rows, the
/// marks and the heads go as one call of three or four statements (an empty list makes its
/// statement a no-op), compiled for this group only.
async fn write_group(
    tx: &mut Transaction<'_, Sqlite>,
    rows: &[(i64, NewRow<'_>)],
    producers: &Producers,
    marks: &[(i64, i64)],
    written: &[Written<i64>],
) -> StoreResult<()> {
    if rows.is_empty() && marks.is_empty() && written.is_empty() {
        return Ok(());
    }
    let whole = rows.len() - rows.len() % INSERT_ROWS;
    for chunk in rows[..whole].chunks(INSERT_ROWS) {
        bind_rows(sqlx::query(&WHOLE_CHUNK), chunk, producers)
            .execute(&mut **tx)
            .await
            .map_err(db_error)?;
    }
    let rest = &rows[whole..];
    // The rows as bound values of a multi-row insert, within SQLite's limit on variables:
    // SQLite reads them as they are, with no JSON to parse per row and column. The marks and
    // heads (one per producer and session) go as JSON arrays.
    let mut sql = String::new();
    if !rest.is_empty() {
        sql.push_str(&insert_rows(rest.len()));
        sql.push_str("; ");
    }
    // An outbox row for each entry of a notifying kind, in the entries' own transaction.
    let notifying: Vec<_> = rows
        .iter()
        .filter(|(_, row)| NOTIFYING_KINDS.contains(&row.append.kind.as_str()))
        .map(|(spk, row)| (spk, row.seq, row.append.kind.as_str(), row.append.ts))
        .collect();
    let outbox = (!notifying.is_empty())
        .then(|| serde_json::to_string(&notifying))
        .transpose()
        .context("encode the group's outbox rows")?;
    if outbox.is_some() {
        sql.push_str(
            "INSERT INTO notify_outbox (session_id, seq, kind, ts) \
             SELECT (SELECT id FROM sessions WHERE pk = json_extract(j.value, '$[0]')), \
             json_extract(j.value, '$[1]'), json_extract(j.value, '$[2]'), \
             json_extract(j.value, '$[3]') FROM json_each(?) AS j WHERE true ORDER BY j.key \
             ON CONFLICT DO NOTHING; ",
        );
    }
    sql.push_str(
        "UPDATE producers SET last_seq = json_extract(j.value, '$[1]') FROM json_each(?) AS j \
         WHERE producers.pk = json_extract(j.value, '$[0]'); \
         UPDATE sessions SET head_seq = json_extract(j.value, '$[2]'), \
         last_ts = json_extract(j.value, '$[3]'), \
         ended_at = COALESCE(ended_at, json_extract(j.value, '$[4]')) FROM json_each(?) AS j \
         WHERE sessions.pk = json_extract(j.value, '$[0]')",
    );
    // Without rows of its own the call's text is one of two (with or without the outbox), worth
    // keeping compiled; with rows it is this group's alone.
    let mut query = bind_rows(
        sqlx::query(&sql).persistent(rest.is_empty()),
        rest,
        producers,
    );
    if let Some(outbox) = outbox {
        query = query.bind(outbox);
    }
    query
        .bind(json!(marks).to_string())
        .bind(json!(written).to_string())
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
    Ok(())
}

/// `INSERT INTO entries` of `n` rows of bound values.
fn insert_rows(n: usize) -> String {
    let values = vec!["(?,?,?,?,?,?,?,?,?,?)"; n].join(",");
    format!(
        "INSERT INTO entries (session_pk, seq, ts, kind, author, payload, producer_pk, \
         producer_seq, client_msg_id, ref_seq) VALUES {values}"
    )
}

/// The insert of a whole chunk of [`INSERT_ROWS`] rows.
static WHOLE_CHUNK: LazyLock<String> = LazyLock::new(|| insert_rows(INSERT_ROWS));

/// Binds `rows` to `query`, ten values a row in the order of [`insert_rows`].
fn bind_rows<'q>(
    mut query: Query<'q, Sqlite, SqliteArguments<'q>>,
    rows: &'q [(i64, NewRow<'_>)],
    producers: &Producers,
) -> Query<'q, Sqlite, SqliteArguments<'q>> {
    for (spk, row) in rows {
        let (producer, producer_seq, client_msg, ref_seq) = row.key_columns();
        let producer_pk = producer.and_then(|p| producers.get(&(*spk, p)).map(|p| p.0));
        query = query
            .bind(*spk)
            .bind(row.seq)
            .bind(row.append.ts)
            .bind(row.append.kind.as_str())
            .bind(row.append.author.as_str())
            .bind(row.payload)
            .bind(producer_pk)
            .bind(producer_seq)
            .bind(client_msg)
            .bind(ref_seq);
    }
    query
}
