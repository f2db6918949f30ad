//! Postgres' group append: several sessions' batches in one transaction. The sessions' rows
//! are locked with one `SELECT … ORDER BY id FOR UPDATE` (always in id order, so nodes grouping
//! overlapping sessions cannot deadlock), marks are read and written with one statement each,
//! rows are inserted with one `UNNEST`, and the heads move with one update that also announces
//! each session's new range on `moor_entries` (delivered at commit, one notice per session,
//! in the same format as ever). The decisions themselves are `store::group`'s.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use moor_protocol::{ProducerId, Seq, SessionId};
use sqlx::{PgConnection, Postgres, Row, Transaction};

use super::lookup::PgLookup;
use super::{PgStore, ENTRIES_CHANNEL};
use crate::store::access::stored_session;
use crate::store::append::{Lookup, NewRow, StoredEntry};
use crate::store::errors::db_error;
use crate::store::group::{self, decide_group, GroupLookup, GroupPart, Head, Written};
use crate::store::{Appended, IdemKey, StoreResult};

/// A producer's mark in a session: `(session id, producer) → mark`.
type Marks = HashMap<(String, ProducerId), u64>;

impl PgStore {
    /// [`LogStore::append_group`](crate::store::LogStore::append_group) on Postgres.
    pub(super) async fn append_group_tx(
        &self,
        group: Vec<GroupPart>,
    ) -> StoreResult<Vec<StoreResult<Vec<Appended>>>> {
        let mut tx = self.pool.begin().await.map_err(db_error)?;
        let mut heads = lock_heads(&mut tx, &group).await?;
        let marks = read_marks(&mut tx, &group, &heads).await?;
        let mut lookup = PgGroupLookup {
            conn: &mut tx,
            sid: String::new(),
            marks,
        };
        let decided = decide_group(&mut lookup, &group, &mut heads).await?;
        insert_rows(&mut tx, &decided.rows).await?;
        save_marks(&mut tx, &decided.marks).await?;
        self.move_heads(&mut tx, &group::written(&heads)).await?;
        tx.commit().await.map_err(db_error)?;
        self.append_txs.fetch_add(1, Ordering::Relaxed);
        let parts = decided.parts;
        Ok(group::outcomes(group, parts))
    }

    /// Moves the heads of the sessions that got rows, `(id, first, head, last ts)`, and
    /// announces each range (the notices are delivered at commit, so whoever reads after one
    /// sees the rows).
    async fn move_heads(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        written: &[Written<String>],
    ) -> StoreResult<()> {
        if written.is_empty() {
            return Ok(());
        }
        let mut ids = Vec::with_capacity(written.len());
        let mut heads = Vec::with_capacity(written.len());
        let mut tss = Vec::with_capacity(written.len());
        let mut ends = Vec::with_capacity(written.len());
        let mut notices = Vec::with_capacity(written.len());
        for (sid, first, head, ts, ended_at) in written {
            ids.push(sid.as_str());
            heads.push(*head);
            tss.push(*ts);
            ends.push(*ended_at);
            notices.push(format!("{sid} {first} {head} {}", self.node));
        }
        sqlx::query(
            "WITH v AS (SELECT * FROM UNNEST($1::uuid[], $2::bigint[], $3::bigint[], $4::bigint[], \
             $5::text[]) AS v(id, head, ts, ended_at, notice)), \
             u AS (UPDATE sessions s SET head_seq = v.head, last_ts = v.ts, \
             ended_at = COALESCE(s.ended_at, v.ended_at) FROM v WHERE s.id = v.id) \
             SELECT pg_notify($6, v.notice) FROM v",
        )
        .bind(ids)
        .bind(heads)
        .bind(tss)
        .bind(ends)
        .bind(notices)
        .bind(ENTRIES_CHANNEL)
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
        Ok(())
    }
}

/// Locks the rows of the group's sessions that exist, in id order, and reads their heads.
async fn lock_heads(
    tx: &mut Transaction<'_, Postgres>,
    group: &[GroupPart],
) -> StoreResult<HashMap<SessionId, Head<String>>> {
    let ids: Vec<String> = group
        .iter()
        .map(|(s, _)| s.to_string())
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let rows = sqlx::query(
        "SELECT id::text AS id, head_seq, ended_at FROM sessions WHERE id = ANY($1::uuid[]) \
         ORDER BY id FOR UPDATE",
    )
    .bind(ids)
    .fetch_all(&mut **tx)
    .await
    .map_err(db_error)?;
    let mut heads = HashMap::with_capacity(rows.len());
    for row in rows {
        let sid: String = row.try_get("id").map_err(db_error)?;
        let ended = row
            .try_get::<Option<i64>, _>("ended_at")
            .map_err(db_error)?
            .is_some();
        let head: i64 = row.try_get("head_seq").map_err(db_error)?;
        heads.insert(stored_session(&sid)?, Head::new(sid, head, ended));
    }
    Ok(heads)
}

/// The stored marks of the producers the group's entries name (a producer not stored has 0).
async fn read_marks(
    tx: &mut Transaction<'_, Postgres>,
    group: &[GroupPart],
    heads: &HashMap<SessionId, Head<String>>,
) -> StoreResult<Marks> {
    let wanted: HashSet<(&str, ProducerId)> = group
        .iter()
        .filter_map(|(s, batch)| Some((heads.get(s)?.key.as_str(), batch)))
        .flat_map(|(sid, batch)| {
            batch.iter().filter_map(move |a| match a.key {
                IdemKey::Producer { producer, .. } => Some((sid, producer)),
                _ => None,
            })
        })
        .collect();
    let mut marks: Marks = wanted
        .iter()
        .map(|(sid, p)| (((*sid).to_owned(), *p), 0))
        .collect();
    if wanted.is_empty() {
        return Ok(marks);
    }
    let (sids, producers): (Vec<&str>, Vec<String>) =
        wanted.iter().map(|(s, p)| (*s, p.to_string())).unzip();
    let rows = sqlx::query(
        "SELECT p.session_id::text AS sid, p.producer_id::text AS pid, p.last_seq FROM producers p \
         JOIN UNNEST($1::uuid[], $2::uuid[]) AS k(sid, pid) \
         ON p.session_id = k.sid AND p.producer_id = k.pid",
    )
    .bind(sids)
    .bind(producers)
    .fetch_all(&mut **tx)
    .await
    .map_err(db_error)?;
    for row in rows {
        let sid: String = row.try_get("sid").map_err(db_error)?;
        let pid: String = row.try_get("pid").map_err(db_error)?;
        let mark: i64 = row.try_get("last_seq").map_err(db_error)?;
        if let Ok(producer) = pid.parse::<ProducerId>() {
            marks.insert((sid, producer), mark as u64);
        }
    }
    Ok(marks)
}

/// Inserts the new rows of every session with one statement (arrays, not a VALUES list, so
/// there is a single prepared statement).
async fn insert_rows(
    tx: &mut Transaction<'_, Postgres>,
    rows: &[(String, NewRow<'_>)],
) -> StoreResult<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let n = rows.len();
    let mut sids = Vec::with_capacity(n);
    let mut seqs = Vec::with_capacity(n);
    let mut tss = Vec::with_capacity(n);
    let mut kinds = Vec::with_capacity(n);
    let mut authors = Vec::with_capacity(n);
    let mut payloads = Vec::with_capacity(n);
    let mut producers = Vec::with_capacity(n);
    let mut producer_seqs = Vec::with_capacity(n);
    let mut client_msgs = Vec::with_capacity(n);
    let mut ref_seqs = Vec::with_capacity(n);
    for (sid, row) in rows {
        let (producer, producer_seq, client_msg, ref_seq) = row.key_columns();
        sids.push(sid.as_str());
        seqs.push(row.seq);
        tss.push(row.append.ts);
        kinds.push(row.append.kind.as_str());
        authors.push(row.append.author.as_str());
        payloads.push(row.payload);
        producers.push(producer.map(|p| p.to_string()));
        producer_seqs.push(producer_seq);
        client_msgs.push(client_msg);
        ref_seqs.push(ref_seq);
    }
    sqlx::query(
        "INSERT INTO entries (session_id, seq, ts, kind, author, payload, producer_id, \
         producer_seq, client_msg_id, ref_seq) \
         SELECT * FROM UNNEST($1::uuid[], $2::bigint[], $3::bigint[], $4::text[], $5::text[], \
         $6::text[], $7::uuid[], $8::bigint[], $9::text[], $10::bigint[])",
    )
    .bind(sids)
    .bind(seqs)
    .bind(tss)
    .bind(kinds)
    .bind(authors)
    .bind(payloads)
    .bind(producers)
    .bind(producer_seqs)
    .bind(client_msgs)
    .bind(ref_seqs)
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

/// Saves the producer marks that moved.
async fn save_marks(
    tx: &mut Transaction<'_, Postgres>,
    marks: &HashMap<(String, ProducerId), u64>,
) -> StoreResult<()> {
    if marks.is_empty() {
        return Ok(());
    }
    let mut sids = Vec::with_capacity(marks.len());
    let mut producers = Vec::with_capacity(marks.len());
    let mut seqs = Vec::with_capacity(marks.len());
    for ((sid, producer), mark) in marks {
        sids.push(sid.as_str());
        producers.push(producer.to_string());
        seqs.push(*mark as i64);
    }
    sqlx::query(
        "INSERT INTO producers (session_id, producer_id, last_seq) \
         SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::bigint[]) \
         ON CONFLICT (session_id, producer_id) DO UPDATE SET last_seq = excluded.last_seq",
    )
    .bind(sids)
    .bind(producers)
    .bind(seqs)
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

/// The idempotency lookups of a group, on its open transaction: marks from the prefetched
/// ones, the rest by query in the session entered last.
struct PgGroupLookup<'c> {
    conn: &'c mut PgConnection,
    sid: String,
    marks: Marks,
}

impl PgGroupLookup<'_> {
    fn session(&mut self) -> PgLookup<'_> {
        PgLookup::new(&mut *self.conn, &self.sid)
    }
}

impl GroupLookup for PgGroupLookup<'_> {
    type Key = String;

    fn enter(&mut self, key: &String) {
        key.clone_into(&mut self.sid);
    }

    fn advanced(&mut self, key: &String, producer: ProducerId, mark: u64) {
        self.marks.insert((key.clone(), producer), mark);
    }
}

impl Lookup for PgGroupLookup<'_> {
    async fn producer_mark(&mut self, producer: ProducerId) -> StoreResult<u64> {
        match self.marks.get(&(self.sid.clone(), producer)) {
            Some(mark) => Ok(*mark),
            None => self.session().producer_mark(producer).await,
        }
    }

    async fn producer_entry(
        &mut self,
        producer: ProducerId,
        seq: u64,
    ) -> StoreResult<Option<StoredEntry>> {
        self.session().producer_entry(producer, seq).await
    }

    async fn client_msg_seq(&mut self, id: &str) -> StoreResult<Option<i64>> {
        self.session().client_msg_seq(id).await
    }

    async fn receipt_seq(&mut self, kind: &str, input: Seq) -> StoreResult<Option<i64>> {
        self.session().receipt_seq(kind, input).await
    }
}
