//! [`LeaseStore`]: bridge leases, written once for both engines.
//!
//! A bridge's presence is a lease stored with the node that holds its socket: one row per
//! session (`bridge_leases`), renewed by the holder while the socket lives (a node renews all
//! its leases together, in one statement per [`RENEW_CHUNK`] sessions), deleted when the
//! connection ends. A lease that outlives its holder (the node crashed, or lost the database)
//! expires; any node may then claim it with one conditional `UPDATE` that only one node wins,
//! and records the connection's end. The table has the same columns on SQLite and Postgres and
//! both drivers take `$n` placeholders, so [`lease_store!`] expands one implementation for each
//! store type.

use async_trait::async_trait;
use moor_protocol::{Seq, SessionId};

use super::StoreResult;

/// One bridge connection's lease on its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The session.
    pub session: SessionId,
    /// The node holding the connection.
    pub node: String,
    /// The holder's id for the connection (as in `bridge.connected`).
    pub connection: u64,
    /// Seq of the connection's `bridge.connected`: names the connection in the log, and keys
    /// the one `bridge.disconnected` written for it.
    pub connected_seq: Seq,
    /// When the lease ends unless renewed (ms since the epoch, the holder's clock).
    pub expires_at: i64,
}

/// Which leases a sweep claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired<'a> {
    /// Leases that expired before this time (ms).
    Before(i64),
    /// Leases that expired before this time, and every lease held by this node name (a node
    /// restarting under the same name holds none of them any more).
    BeforeOrHeldBy(i64, &'a str),
    /// Every lease: a node alone on its database (SQLite) at start.
    All,
}

/// Most leases one sweep claims; the next sweep takes the rest.
pub const SWEEP_LIMIT: i64 = 500;

/// Most sessions named in one renewal statement (well under both engines' limit on bound
/// parameters).
pub const RENEW_CHUNK: usize = 500;

/// Bridge leases.
#[async_trait]
pub trait LeaseStore: Send + Sync + std::fmt::Debug {
    /// Removes and returns the lease on `session`, whoever holds it: a new connection takes
    /// the session over and records the end of the connection the lease named.
    async fn take_lease(&self, session: SessionId) -> StoreResult<Option<Lease>>;

    /// Stores `lease` unless a lease for a later connection (a higher `connected_seq`) is
    /// stored; returns whether `lease` is now the session's.
    async fn hold_lease(&self, lease: &Lease) -> StoreResult<bool>;

    /// Moves the expiry of the leases `node` holds on `sessions` (unclaimed) to `expires_at`,
    /// in as few statements as the list allows ([`RENEW_CHUNK`] sessions each); returns the
    /// leases renewed, each with its connection's `connected_seq`. A session missing from the
    /// answer, or answered with another connection, has lost its lease: its connection must end.
    async fn renew_leases(
        &self,
        node: &str,
        sessions: &[SessionId],
        expires_at: i64,
    ) -> StoreResult<Vec<(SessionId, Seq)>>;

    /// Deletes the lease of connection `connected_seq`, if it is still stored; returns whether
    /// it was.
    async fn release_lease(&self, session: SessionId, connected_seq: Seq) -> StoreResult<bool>;

    /// The lease on `session` that a live node holds at `now` (not expired, not claimed).
    async fn live_lease(&self, session: SessionId, now: i64) -> StoreResult<Option<Lease>>;

    /// The sessions whose leases live nodes hold at `now`, at most `limit` of them.
    async fn live_sessions(&self, now: i64, limit: i64) -> StoreResult<Vec<SessionId>>;

    /// Claims up to [`SWEEP_LIMIT`] leases that `which` names for `node` until `until`, each
    /// by a conditional `UPDATE` that one node wins: a lease is returned to one caller only
    /// (unless that caller, too, lets its claim expire). The caller records each connection's
    /// end, then releases the lease.
    async fn claim_expired(
        &self,
        which: Expired<'_>,
        node: &str,
        until: i64,
    ) -> StoreResult<Vec<Lease>>;
}

/// Implements [`LeaseStore`] for `$store`, a store over `$db` with an inherent `writes()` pool.
macro_rules! lease_store {
    ($store:ident, $db:ty) => {
        mod lease_store {
            use moor_protocol::{Seq, SessionId};
            use sqlx::Row;

            use super::$store;
            use $crate::store::access::stored_session;
            use $crate::store::errors::db_error;
            use $crate::store::lease::{Expired, Lease, LeaseStore, RENEW_CHUNK, SWEEP_LIMIT};
            use $crate::store::StoreResult;

            const COLUMNS: &str = "session_id, node, connection, connected_seq, expires_at";

            fn lease(row: &<$db as sqlx::Database>::Row) -> StoreResult<Lease> {
                let sid: String = row.try_get("session_id").map_err(db_error)?;
                let connection: i64 = row.try_get("connection").map_err(db_error)?;
                let connected_seq: i64 = row.try_get("connected_seq").map_err(db_error)?;
                Ok(Lease {
                    session: stored_session(&sid)?,
                    node: row.try_get("node").map_err(db_error)?,
                    connection: connection as u64,
                    connected_seq: Seq(connected_seq as u64),
                    expires_at: row.try_get("expires_at").map_err(db_error)?,
                })
            }

            type Query<'q> = sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments<'q>>;

            impl $store {
                /// Runs `query` (which changes at most one lease); whether it changed one.
                async fn changed_lease(&self, query: Query<'_>) -> StoreResult<bool> {
                    let done = query.execute(self.writes()).await.map_err(db_error)?;
                    Ok(done.rows_affected() > 0)
                }
            }

            #[async_trait::async_trait]
            impl LeaseStore for $store {
                async fn take_lease(&self, session: SessionId) -> StoreResult<Option<Lease>> {
                    let row = sqlx::query(&format!(
                        "DELETE FROM bridge_leases WHERE session_id = $1 RETURNING {COLUMNS}"
                    ))
                    .bind(session.to_string())
                    .fetch_optional(self.writes())
                    .await
                    .map_err(db_error)?;
                    row.as_ref().map(lease).transpose()
                }

                async fn hold_lease(&self, l: &Lease) -> StoreResult<bool> {
                    let query = sqlx::query(
                        "INSERT INTO bridge_leases \
                         (session_id, node, connection, connected_seq, expires_at) \
                         VALUES ($1, $2, $3, $4, $5) \
                         ON CONFLICT (session_id) DO UPDATE SET node = excluded.node, \
                         connection = excluded.connection, \
                         connected_seq = excluded.connected_seq, \
                         expires_at = excluded.expires_at, claimed_by = NULL \
                         WHERE bridge_leases.connected_seq < excluded.connected_seq",
                    )
                    .bind(l.session.to_string())
                    .bind(&l.node)
                    .bind(l.connection as i64)
                    .bind(l.connected_seq.0 as i64)
                    .bind(l.expires_at);
                    self.changed_lease(query).await
                }

                async fn renew_leases(
                    &self,
                    node: &str,
                    sessions: &[SessionId],
                    expires_at: i64,
                ) -> StoreResult<Vec<(SessionId, Seq)>> {
                    let mut renewed = Vec::with_capacity(sessions.len());
                    for chunk in sessions.chunks(RENEW_CHUNK) {
                        let listed: Vec<String> =
                            (0..chunk.len()).map(|i| format!("${}", i + 3)).collect();
                        let sql = format!(
                            "UPDATE bridge_leases SET expires_at = $1 WHERE node = $2 \
                             AND claimed_by IS NULL AND session_id IN ({}) \
                             RETURNING session_id, connected_seq",
                            listed.join(", ")
                        );
                        let mut query = sqlx::query(&sql).bind(expires_at).bind(node);
                        for s in chunk {
                            query = query.bind(s.to_string());
                        }
                        let rows = query.fetch_all(self.writes()).await.map_err(db_error)?;
                        for row in &rows {
                            let sid: String = row.try_get("session_id").map_err(db_error)?;
                            let seq: i64 = row.try_get("connected_seq").map_err(db_error)?;
                            renewed.push((stored_session(&sid)?, Seq(seq as u64)));
                        }
                    }
                    Ok(renewed)
                }

                async fn release_lease(
                    &self,
                    session: SessionId,
                    connected_seq: Seq,
                ) -> StoreResult<bool> {
                    let query = sqlx::query(
                        "DELETE FROM bridge_leases WHERE session_id = $1 AND connected_seq = $2",
                    )
                    .bind(session.to_string())
                    .bind(connected_seq.0 as i64);
                    self.changed_lease(query).await
                }

                async fn live_lease(
                    &self,
                    session: SessionId,
                    now: i64,
                ) -> StoreResult<Option<Lease>> {
                    let row = sqlx::query(&format!(
                        "SELECT {COLUMNS} FROM bridge_leases WHERE session_id = $1 \
                         AND expires_at > $2 AND claimed_by IS NULL"
                    ))
                    .bind(session.to_string())
                    .bind(now)
                    .fetch_optional(self.writes())
                    .await
                    .map_err(db_error)?;
                    row.as_ref().map(lease).transpose()
                }

                async fn live_sessions(&self, now: i64, limit: i64) -> StoreResult<Vec<SessionId>> {
                    let rows = sqlx::query(
                        "SELECT session_id FROM bridge_leases \
                         WHERE expires_at > $1 AND claimed_by IS NULL LIMIT $2",
                    )
                    .bind(now)
                    .bind(limit)
                    .fetch_all(self.writes())
                    .await
                    .map_err(db_error)?;
                    rows.iter()
                        .map(|r| {
                            stored_session(&r.try_get::<String, _>("session_id").map_err(db_error)?)
                        })
                        .collect()
                }

                async fn claim_expired(
                    &self,
                    which: Expired<'_>,
                    node: &str,
                    until: i64,
                ) -> StoreResult<Vec<Lease>> {
                    let (before, held_by) = match which {
                        Expired::Before(t) => (t, None),
                        Expired::BeforeOrHeldBy(t, n) => (t, Some(n)),
                        Expired::All => (i64::MAX, None),
                    };
                    // The condition is repeated outside the subquery: Postgres checks it again
                    // on a row another node updated first, so only one node claims it.
                    let rows = sqlx::query(&format!(
                        "UPDATE bridge_leases SET claimed_by = $1, expires_at = $2 \
                         WHERE session_id IN (SELECT session_id FROM bridge_leases \
                         WHERE expires_at < $3 OR node = $4 LIMIT $5) \
                         AND (expires_at < $3 OR node = $4) RETURNING {COLUMNS}"
                    ))
                    .bind(node)
                    .bind(until)
                    .bind(before)
                    .bind(held_by)
                    .bind(SWEEP_LIMIT)
                    .fetch_all(self.writes())
                    .await
                    .map_err(db_error)?;
                    rows.iter().map(lease).collect()
                }
            }
        }
    };
}

pub(crate) use lease_store;
