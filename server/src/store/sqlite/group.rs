//! SQLite's group append: several sessions' batches in one transaction on the writer
//! connection, with a fixed handful of statements whatever the number of sessions (their
//! heads in one read, their producers' marks in another, every new row in multi-row inserts,
//! marks and heads each in one update), because every statement is a hand-off to SQLite's
//! worker thread. The decisions themselves are `store::group`'s.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use moor_protocol::{ProducerId, Seq, SessionId};
use sqlx::{QueryBuilder, Row, Sqlite, Transaction};

use super::SqliteStore;
use crate::store::access::stored_session;
use crate::store::append::{Lookup, NewRow, StoredEntry};
use crate::store::errors::db_error;
use crate::store::group::{self, decide_group, next_chunk, GroupLookup, GroupPart, Head};
use crate::store::{Appended, IdemKey, StoreResult};

/// Rows (or keys) per multi-row statement. A few fixed sizes keep the statement cache small.
const CHUNKS: [usize; 4] = [256, 32, 4, 1];

/// A producer's row in a session: `(session pk, producer) → (producer pk, mark)`.
type Producers = HashMap<(i64, ProducerId), (i64, u64)>;

impl SqliteStore {
    /// [`LogStore::append_group`](crate::store::LogStore::append_group) on SQLite.
    pub(super) async fn append_group_tx(
        &self,
        group: Vec<GroupPart>,
    ) -> StoreResult<Vec<StoreResult<Vec<Appended>>>> {
        let mut tx = self.writer.begin().await.map_err(db_error)?;
        let mut heads = read_heads(&mut tx, &group).await?;
        let wanted = wanted_producers(&group, &heads);
        let producers = read_producers(&mut tx, &wanted).await?;
        let mut lookup = SqliteGroupLookup {
            tx: &mut tx,
            spk: 0,
            producers,
        };
        let decided = decide_group(&mut lookup, &group, &mut heads).await?;
        let producers = lookup.producers;
        insert_rows(&mut tx, &decided.rows, &producers).await?;
        let marks: Vec<(i64, i64)> = decided
            .marks
            .iter()
            .filter_map(|((spk, p), mark)| Some((producers.get(&(*spk, *p))?.0, *mark as i64)))
            .collect();
        update_marks(&mut tx, &marks).await?;
        update_heads(&mut tx, &group::written(&heads)).await?;
        tx.commit().await.map_err(db_error)?;
        self.append_txs.fetch_add(1, Ordering::Relaxed);
        let parts = decided.parts;
        Ok(group::outcomes(group, parts))
    }
}

/// The `(session pk, producer)` pairs the group's producer entries name.
fn wanted_producers(
    group: &[GroupPart],
    heads: &HashMap<SessionId, Head<i64>>,
) -> Vec<(i64, ProducerId)> {
    let mut seen = HashSet::new();
    group
        .iter()
        .filter_map(|(s, batch)| Some((heads.get(s)?.key, batch)))
        .flat_map(|(spk, batch)| {
            batch.iter().filter_map(move |a| match a.key {
                IdemKey::Producer { producer, .. } => Some((spk, producer)),
                _ => None,
            })
        })
        .filter(|pair| seen.insert(*pair))
        .collect()
}

/// The group's sessions that exist, by id.
async fn read_heads(
    tx: &mut Transaction<'_, Sqlite>,
    group: &[GroupPart],
) -> StoreResult<HashMap<SessionId, Head<i64>>> {
    let mut ids: Vec<String> = group.iter().map(|(s, _)| s.to_string()).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut heads = HashMap::with_capacity(ids.len());
    let mut rest = ids.as_slice();
    while !rest.is_empty() {
        let (chunk, tail) = next_chunk(rest, &CHUNKS);
        rest = tail;
        let mut qb = QueryBuilder::<Sqlite>::new(
            "SELECT pk, id, head_seq, ended_at FROM sessions WHERE id IN (",
        );
        let mut list = qb.separated(", ");
        for id in chunk {
            list.push_bind(id);
        }
        qb.push(")");
        for row in qb
            .build()
            .persistent(true)
            .fetch_all(&mut **tx)
            .await
            .map_err(db_error)?
        {
            let id = stored_session(row.try_get("id").map_err(db_error)?)?;
            let ended = row
                .try_get::<Option<i64>, _>("ended_at")
                .map_err(db_error)?
                .is_some();
            heads.insert(id, Head::new(row.get("pk"), row.get("head_seq"), ended));
        }
    }
    Ok(heads)
}

/// The stored rows of the `wanted` producers (missing ones are created when first needed).
async fn read_producers(
    tx: &mut Transaction<'_, Sqlite>,
    wanted: &[(i64, ProducerId)],
) -> StoreResult<Producers> {
    let mut found = HashMap::with_capacity(wanted.len());
    let mut rest = wanted;
    while !rest.is_empty() {
        let (chunk, tail) = next_chunk(rest, &CHUNKS);
        rest = tail;
        let mut qb = QueryBuilder::<Sqlite>::new(
            "SELECT pk, session_pk, producer_id, last_seq FROM producers \
             WHERE (session_pk, producer_id) IN (",
        );
        qb.push_values(chunk, |mut b, (spk, producer)| {
            b.push_bind(*spk).push_bind(producer.to_string());
        });
        qb.push(")");
        for row in qb
            .build()
            .persistent(true)
            .fetch_all(&mut **tx)
            .await
            .map_err(db_error)?
        {
            let producer: String = row.get("producer_id");
            let Ok(producer) = producer.parse::<ProducerId>() else {
                continue;
            };
            let mark = row.get::<i64, _>("last_seq") as u64;
            found.insert((row.get("session_pk"), producer), (row.get("pk"), mark));
        }
    }
    Ok(found)
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

    async fn producer_entry(
        &mut self,
        producer: ProducerId,
        seq: u64,
    ) -> StoreResult<Option<StoredEntry>> {
        let ppk = self
            .producers
            .get(&(self.spk, producer))
            .map(|p| p.0)
            .unwrap_or_default();
        let row = sqlx::query(
            "SELECT seq, kind, payload FROM entries \
             WHERE session_pk = ? AND producer_pk = ? AND producer_seq = ?",
        )
        .bind(self.spk)
        .bind(ppk)
        .bind(seq as i64)
        .fetch_optional(&mut **self.tx)
        .await
        .map_err(db_error)?;
        Ok(row.map(|r| StoredEntry {
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

/// Inserts the new rows of every session, a chunk of rows per statement.
async fn insert_rows(
    tx: &mut Transaction<'_, Sqlite>,
    rows: &[(i64, NewRow<'_>)],
    producers: &Producers,
) -> StoreResult<()> {
    let mut rest = rows;
    while !rest.is_empty() {
        let (chunk, tail) = next_chunk(rest, &CHUNKS);
        rest = tail;
        let mut qb = QueryBuilder::<Sqlite>::new(
            "INSERT INTO entries (session_pk, seq, ts, kind, author, payload, producer_pk, \
             producer_seq, client_msg_id, ref_seq) ",
        );
        qb.push_values(chunk, |mut b, (spk, row)| {
            let (producer, producer_seq, client_msg, ref_seq) = row.key_columns();
            let producer_pk = producer.and_then(|p| producers.get(&(*spk, p)).map(|p| p.0));
            b.push_bind(*spk)
                .push_bind(row.seq)
                .push_bind(row.append.ts)
                .push_bind(&row.append.kind)
                .push_bind(&row.append.author)
                .push_bind(&row.payload)
                .push_bind(producer_pk)
                .push_bind(producer_seq)
                .push_bind(client_msg.map(str::to_owned))
                .push_bind(ref_seq);
        });
        qb.build()
            .persistent(true)
            .execute(&mut **tx)
            .await
            .map_err(db_error)?;
    }
    Ok(())
}

/// Saves moved producer marks: `(producer pk, mark)`.
async fn update_marks(tx: &mut Transaction<'_, Sqlite>, marks: &[(i64, i64)]) -> StoreResult<()> {
    let mut rest = marks;
    while !rest.is_empty() {
        let (chunk, tail) = next_chunk(rest, &CHUNKS);
        rest = tail;
        let mut qb =
            QueryBuilder::<Sqlite>::new("UPDATE producers SET last_seq = v.column2 FROM (");
        qb.push_values(chunk, |mut b, (pk, mark)| {
            b.push_bind(*pk).push_bind(*mark);
        });
        qb.push(") AS v WHERE producers.pk = v.column1");
        qb.build()
            .persistent(true)
            .execute(&mut **tx)
            .await
            .map_err(db_error)?;
    }
    Ok(())
}

/// Moves the heads of the sessions that got rows: `(session pk, first, head, last ts)`.
async fn update_heads(
    tx: &mut Transaction<'_, Sqlite>,
    written: &[(i64, i64, i64, i64)],
) -> StoreResult<()> {
    let mut rest = written;
    while !rest.is_empty() {
        let (chunk, tail) = next_chunk(rest, &CHUNKS);
        rest = tail;
        let mut qb = QueryBuilder::<Sqlite>::new(
            "UPDATE sessions SET head_seq = v.column2, last_ts = v.column3 FROM (",
        );
        qb.push_values(chunk, |mut b, (pk, _first, head, last_ts)| {
            b.push_bind(*pk).push_bind(*head).push_bind(*last_ts);
        });
        qb.push(") AS v WHERE sessions.pk = v.column1");
        qb.build()
            .persistent(true)
            .execute(&mut **tx)
            .await
            .map_err(db_error)?;
    }
    Ok(())
}
