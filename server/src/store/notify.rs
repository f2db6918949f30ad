//! [`NotifyStore`]: the notification outbox and Web Push subscriptions, written once for both
//! engines.
//!
//! An outbox row is inserted in the transaction that commits each entry of a notifying kind
//! ([`NOTIFYING_KINDS`]): on Postgres by a trigger on `entries` (migration 0012), on SQLite by
//! the group append, the only path that inserts entries there, in the same call as the entries
//! (a trigger cost a sub-program per inserted row, notifying or not; migration 0022). Senders claim rows until a deadline; a row whose claim lapsed (its sender
//! crashed) is claimed again, and Postgres nodes skip each other's locked rows
//! (`FOR UPDATE SKIP LOCKED`), so each row goes to one sender at a time.

use async_trait::async_trait;
use moor_protocol::notify::QuietHours;
use moor_protocol::{kinds, Seq, SessionId};

use super::StoreResult;

/// The kinds of entries that may notify somebody: each gets an outbox row in its commit. The
/// same list as the Postgres trigger's (migration 0012).
pub const NOTIFYING_KINDS: [&str; 9] = [
    kinds::AGENT_PERMISSION_REQUEST,
    kinds::AGENT_PERMISSION_RESOLVED,
    kinds::AGENT_RESULT,
    kinds::AGENT_STALLED,
    kinds::AGENT_EXIT,
    kinds::AGENT_RESTART,
    kinds::BRIDGE_DISCONNECTED,
    kinds::INPUT_FAILED,
    kinds::SESSION_ENDED,
];

/// Most outbox rows one claim returns.
pub const CLAIM_LIMIT: i64 = 500;

/// Most rows one session may have waiting in the outbox; beyond it the oldest are dropped
/// (a flood of notifying entries cannot grow the table without bound).
pub const MAX_PENDING_PER_SESSION: i64 = 1_000;

/// Most Web Push subscriptions one principal may hold; adding another replaces the oldest.
pub const MAX_SUBSCRIPTIONS_PER_PRINCIPAL: i64 = 16;

/// Most ntfy and webhook sinks one principal may hold.
pub const MAX_SINKS_PER_PRINCIPAL: i64 = 8;

/// Most targets whose delivery is recorded for one outbox row (beyond it a retry may reach a
/// target twice); with [`MAX_TARGET_BYTES`], bounds the delivery state of a pending row to
/// about 30 KB.
pub const MAX_TARGETS_PER_ROW: usize = 256;

/// Longest target name recorded (`push:<id>`, `sink:<id>`), in bytes; a longer one is not
/// recorded.
pub const MAX_TARGET_BYTES: usize = 80;

/// Most sessions one principal may mute.
pub const MAX_MUTED_SESSIONS_PER_PRINCIPAL: i64 = 256;

/// What a principal muted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MutesRow {
    /// Muted classes (their wire names), sorted.
    pub classes: Vec<String>,
    /// Muted sessions, oldest mute first.
    pub sessions: Vec<SessionId>,
}

/// A self-hosted sink (ntfy topic or webhook) of a principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkRow {
    /// Its id.
    pub id: String,
    /// The user it notifies.
    pub principal: String,
    /// `ntfy` or `webhook`.
    pub kind: String,
    /// Its label.
    pub label: String,
    /// Where to POST.
    pub url: String,
    /// ntfy: an access token (empty for none); webhook: the signing key.
    pub secret: String,
    /// When it was added (ms).
    pub created_at: i64,
}

/// One outbox row as claimed: the entry that caused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    /// Its id (commit order).
    pub id: i64,
    /// The entry's session.
    pub session: SessionId,
    /// The entry's seq.
    pub seq: Seq,
    /// The entry's kind.
    pub kind: String,
    /// The entry's timestamp (ms since the epoch).
    pub ts: i64,
    /// Failed attempts so far.
    pub attempts: u32,
}

/// What became of an outbox row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboxState {
    /// Waiting to be sent (or retried).
    Pending,
    /// Delivered (or folded into a delivered notification).
    Sent,
    /// Given up, with a recorded reason.
    Dropped,
}

impl OutboxState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Sent => "sent",
            Self::Dropped => "dropped",
        }
    }

    pub(crate) fn parse(s: &str) -> Self {
        match s {
            "sent" => Self::Sent,
            "dropped" => Self::Dropped,
            _ => Self::Pending,
        }
    }
}

/// An outbox row's fate, for inspection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxStatus {
    /// Its state.
    pub state: OutboxState,
    /// Failed attempts.
    pub attempts: u32,
    /// Why it was dropped, or why its last attempt failed.
    pub reason: Option<String>,
}

/// A browser's Web Push subscription, owned by a principal and labelled by device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushSubscriptionRow {
    /// Its id.
    pub id: String,
    /// The user it notifies.
    pub principal: String,
    /// The device label its owner gave.
    pub device: String,
    /// The push service URL.
    pub endpoint: String,
    /// The browser's P-256 public key (base64url, uncompressed point).
    pub p256dh: String,
    /// The browser's auth secret (base64url, 16 bytes).
    pub auth: String,
    /// When it was added (ms).
    pub created_at: i64,
}

/// The outbox and the subscriptions.
#[async_trait]
pub trait NotifyStore: Send + Sync + std::fmt::Debug {
    /// Claims up to `limit` pending rows due at `now` whose claim (if any) lapsed, for `node`
    /// until `until`; oldest first. A row is returned to one caller until its claim lapses.
    async fn claim_outbox(
        &self,
        node: &str,
        now: i64,
        until: i64,
        limit: i64,
    ) -> StoreResult<Vec<OutboxRow>>;

    /// Settles rows `ids` that `node` still claims as `state` with `reason` at `now`; how many
    /// it did.
    async fn settle_outbox(
        &self,
        ids: &[i64],
        node: &str,
        state: OutboxState,
        reason: Option<&str>,
        now: i64,
    ) -> StoreResult<u64>;

    /// Keeps the outbox bounded: deletes rows settled before `settled_before`, and drops (as
    /// settled at `now`) the oldest unclaimed pending rows of any session holding more than
    /// `max_pending` pending rows. How many rows it deleted and dropped.
    async fn prune_outbox(
        &self,
        settled_before: i64,
        max_pending: i64,
        now: i64,
    ) -> StoreResult<(u64, u64)>;

    /// How many outbox rows there are in each state: (pending, sent, dropped).
    async fn outbox_counts(&self) -> StoreResult<(u64, u64, u64)>;

    /// Puts row `id` that `node` still claims back as pending, due at `next_at`; with a
    /// `failure`, counts a failed attempt and records why (without, the row is only deferred).
    async fn retry_outbox(
        &self,
        id: i64,
        node: &str,
        next_at: i64,
        failure: Option<&str>,
    ) -> StoreResult<bool>;

    /// The fate of the row for entry `seq` of `session`, if the entry notified.
    async fn outbox_status(
        &self,
        session: SessionId,
        seq: Seq,
    ) -> StoreResult<Option<OutboxStatus>>;

    /// Stores `sub` (a known endpoint changes owner and keys); keeps at most
    /// [`MAX_SUBSCRIPTIONS_PER_PRINCIPAL`] per principal, dropping the oldest.
    async fn put_subscription(&self, sub: &PushSubscriptionRow) -> StoreResult<()>;

    /// The subscriptions of `principal`, oldest first.
    async fn subscriptions(&self, principal: &str) -> StoreResult<Vec<PushSubscriptionRow>>;

    /// Removes `principal`'s subscription `id`; whether there was one.
    async fn remove_subscription(&self, principal: &str, id: &str) -> StoreResult<bool>;

    /// Removes the subscription at `endpoint` (the push service said it is gone).
    async fn remove_endpoint(&self, endpoint: &str) -> StoreResult<bool>;

    /// Adds `sink` unless its principal already has [`MAX_SINKS_PER_PRINCIPAL`]; whether it
    /// was added.
    async fn add_sink(&self, sink: &SinkRow) -> StoreResult<bool>;

    /// The sinks of `principal`, oldest first.
    async fn sinks(&self, principal: &str) -> StoreResult<Vec<SinkRow>>;

    /// Removes `principal`'s sink `id`; whether there was one.
    async fn remove_sink(&self, principal: &str, id: &str) -> StoreResult<bool>;

    /// Records that `targets` took the notification of rows `ids` (those `node` still claims
    /// as pending) at `at`. A row keeps at most [`MAX_TARGETS_PER_ROW`] targets, none longer
    /// than [`MAX_TARGET_BYTES`]; the rest are not recorded. How many (row, target) pairs are
    /// new.
    async fn record_deliveries(
        &self,
        ids: &[i64],
        node: &str,
        targets: &[String],
        at: i64,
    ) -> StoreResult<u64>;

    /// The targets that took any of rows `ids`, each with how many of them it took.
    async fn deliveries(&self, ids: &[i64]) -> StoreResult<Vec<(String, u64)>>;

    /// What `principal` muted.
    async fn mutes(&self, principal: &str) -> StoreResult<MutesRow>;

    /// Mutes (or unmutes) `class` (a wire name the caller checked) for `principal`.
    async fn mute_class(&self, principal: &str, class: &str, muted: bool) -> StoreResult<()>;

    /// Mutes (or unmutes) `session` for `principal` at `at`; false when muting it would pass
    /// [`MAX_MUTED_SESSIONS_PER_PRINCIPAL`].
    async fn mute_session(
        &self,
        principal: &str,
        session: SessionId,
        muted: bool,
        at: i64,
    ) -> StoreResult<bool>;

    /// Whether `principal` muted `session` or `class`.
    async fn is_muted(&self, principal: &str, session: SessionId, class: &str)
        -> StoreResult<bool>;

    /// `principal`'s quiet hours, if set.
    async fn quiet_hours(&self, principal: &str) -> StoreResult<Option<QuietHours>>;

    /// Sets (`Some`, checked by the caller) or clears (`None`) `principal`'s quiet hours.
    async fn set_quiet_hours(&self, principal: &str, quiet: Option<&QuietHours>)
        -> StoreResult<()>;
}

/// Implements [`NotifyStore`] for `$store`, a store over `$db` with an inherent `writes()`
/// pool; `$lock` is appended to the claim's row selection (Postgres: `FOR UPDATE SKIP LOCKED`).
macro_rules! notify_store {
    ($store:ident, $db:ty, $lock:literal) => {
        mod notify_store {
            use moor_protocol::notify::QuietHours;
            use moor_protocol::{Seq, SessionId};
            use sqlx::Row;

            use super::$store;
            use $crate::store::access::stored_session;
            use $crate::store::errors::db_error;
            use $crate::store::notify::{
                NotifyStore, OutboxRow, OutboxState, OutboxStatus, PushSubscriptionRow, SinkRow,
                MutesRow, MAX_MUTED_SESSIONS_PER_PRINCIPAL, MAX_SINKS_PER_PRINCIPAL,
                MAX_SUBSCRIPTIONS_PER_PRINCIPAL, MAX_TARGETS_PER_ROW, MAX_TARGET_BYTES,
            };
            use $crate::store::StoreResult;

            const SUB_COLUMNS: &str = "id, principal, device, endpoint, p256dh, auth, created_at";

            fn subscription(
                row: &<$db as sqlx::Database>::Row,
            ) -> StoreResult<PushSubscriptionRow> {
                Ok(PushSubscriptionRow {
                    id: row.try_get("id").map_err(db_error)?,
                    principal: row.try_get("principal").map_err(db_error)?,
                    device: row.try_get("device").map_err(db_error)?,
                    endpoint: row.try_get("endpoint").map_err(db_error)?,
                    p256dh: row.try_get("p256dh").map_err(db_error)?,
                    auth: row.try_get("auth").map_err(db_error)?,
                    created_at: row.try_get("created_at").map_err(db_error)?,
                })
            }

            #[async_trait::async_trait]
            impl NotifyStore for $store {
                async fn claim_outbox(
                    &self,
                    node: &str,
                    now: i64,
                    until: i64,
                    limit: i64,
                ) -> StoreResult<Vec<OutboxRow>> {
                    let rows = sqlx::query(concat!(
                        "UPDATE notify_outbox SET claimed_by = $1, claimed_until = $2 \
                         WHERE id IN (SELECT id FROM notify_outbox WHERE state = 'pending' \
                         AND next_at <= $3 AND (claimed_until IS NULL OR claimed_until <= $3) \
                         ORDER BY id LIMIT $4",
                        $lock,
                        ") RETURNING id, session_id, seq, kind, ts, attempts"
                    ))
                    .bind(node)
                    .bind(until)
                    .bind(now)
                    .bind(limit)
                    .fetch_all(self.writes())
                    .await
                    .map_err(db_error)?;
                    let mut out = rows
                        .iter()
                        .map(|row| {
                            let sid: String = row.try_get("session_id").map_err(db_error)?;
                            let seq: i64 = row.try_get("seq").map_err(db_error)?;
                            let attempts: i64 = row.try_get("attempts").map_err(db_error)?;
                            Ok(OutboxRow {
                                id: row.try_get("id").map_err(db_error)?,
                                session: stored_session(&sid)?,
                                seq: Seq(seq as u64),
                                kind: row.try_get("kind").map_err(db_error)?,
                                ts: row.try_get("ts").map_err(db_error)?,
                                attempts: attempts.clamp(0, u32::MAX as i64) as u32,
                            })
                        })
                        .collect::<StoreResult<Vec<_>>>()?;
                    out.sort_by_key(|r| r.id);
                    Ok(out)
                }

                async fn settle_outbox(
                    &self,
                    ids: &[i64],
                    node: &str,
                    state: OutboxState,
                    reason: Option<&str>,
                    now: i64,
                ) -> StoreResult<u64> {
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    let mut n = 0;
                    for id in ids {
                        let done = sqlx::query(
                            "UPDATE notify_outbox SET state = $1, reason = $2, \
                             claimed_by = NULL, claimed_until = NULL, settled_at = $5 \
                             WHERE id = $3 AND claimed_by = $4 AND state = 'pending'",
                        )
                        .bind(state.as_str())
                        .bind(reason)
                        .bind(*id)
                        .bind(node)
                        .bind(now)
                        .execute(&mut *tx)
                        .await
                        .map_err(db_error)?;
                        n += done.rows_affected();
                        if done.rows_affected() > 0 {
                            // A settled row is never sent again: its delivery state is spent.
                            sqlx::query("DELETE FROM notify_deliveries WHERE outbox_id = $1")
                                .bind(*id)
                                .execute(&mut *tx)
                                .await
                                .map_err(db_error)?;
                        }
                    }
                    tx.commit().await.map_err(db_error)?;
                    Ok(n)
                }

                async fn prune_outbox(
                    &self,
                    settled_before: i64,
                    max_pending: i64,
                    now: i64,
                ) -> StoreResult<(u64, u64)> {
                    let deleted = sqlx::query(
                        "DELETE FROM notify_outbox WHERE state <> 'pending' \
                         AND settled_at < $1",
                    )
                    .bind(settled_before)
                    .execute(self.writes())
                    .await
                    .map_err(db_error)?
                    .rows_affected();
                    let reason = format!(
                        "more than {max_pending} notifications of the session were waiting"
                    );
                    let dropped = sqlx::query(
                        "UPDATE notify_outbox SET state = 'dropped', reason = $1, \
                         settled_at = $2, claimed_by = NULL, claimed_until = NULL \
                         WHERE state = 'pending' \
                         AND (claimed_until IS NULL OR claimed_until <= $2) \
                         AND session_id IN (SELECT session_id FROM notify_outbox \
                           WHERE state = 'pending' GROUP BY session_id HAVING COUNT(*) > $3) \
                         AND id NOT IN (SELECT o.id FROM notify_outbox o \
                           WHERE o.session_id = notify_outbox.session_id \
                           AND o.state = 'pending' ORDER BY o.id DESC LIMIT $3)",
                    )
                    .bind(reason)
                    .bind(now)
                    .bind(max_pending)
                    .execute(self.writes())
                    .await
                    .map_err(db_error)?
                    .rows_affected();
                    // Delivery state lives only while its row is pending (rows dropped above,
                    // or settled by a sender that died before deleting it, leave theirs).
                    sqlx::query(
                        "DELETE FROM notify_deliveries WHERE NOT EXISTS \
                         (SELECT 1 FROM notify_outbox o WHERE o.id = notify_deliveries.outbox_id \
                          AND o.state = 'pending')",
                    )
                    .execute(self.writes())
                    .await
                    .map_err(db_error)?;
                    Ok((deleted, dropped))
                }

                async fn outbox_counts(&self) -> StoreResult<(u64, u64, u64)> {
                    let rows = sqlx::query(
                        "SELECT state, COUNT(*) AS n FROM notify_outbox GROUP BY state",
                    )
                    .fetch_all(self.writes())
                    .await
                    .map_err(db_error)?;
                    let mut counts = (0, 0, 0);
                    for row in rows {
                        let state: String = row.try_get("state").map_err(db_error)?;
                        let n: i64 = row.try_get("n").map_err(db_error)?;
                        let n = n.max(0) as u64;
                        match OutboxState::parse(&state) {
                            OutboxState::Pending => counts.0 = n,
                            OutboxState::Sent => counts.1 = n,
                            OutboxState::Dropped => counts.2 = n,
                        }
                    }
                    Ok(counts)
                }

                async fn retry_outbox(
                    &self,
                    id: i64,
                    node: &str,
                    next_at: i64,
                    failure: Option<&str>,
                ) -> StoreResult<bool> {
                    let done = sqlx::query(
                        "UPDATE notify_outbox SET attempts = attempts + $5, next_at = $1, \
                         reason = COALESCE($2, reason), claimed_by = NULL, \
                         claimed_until = NULL \
                         WHERE id = $3 AND claimed_by = $4 AND state = 'pending'",
                    )
                    .bind(next_at)
                    .bind(failure)
                    .bind(id)
                    .bind(node)
                    .bind(i64::from(failure.is_some()))
                    .execute(self.writes())
                    .await
                    .map_err(db_error)?;
                    Ok(done.rows_affected() > 0)
                }

                async fn outbox_status(
                    &self,
                    session: SessionId,
                    seq: Seq,
                ) -> StoreResult<Option<OutboxStatus>> {
                    let row = sqlx::query(
                        "SELECT state, attempts, reason FROM notify_outbox \
                         WHERE session_id = $1 AND seq = $2",
                    )
                    .bind(session.to_string())
                    .bind(seq.0 as i64)
                    .fetch_optional(self.writes())
                    .await
                    .map_err(db_error)?;
                    row.map(|row| {
                        let state: String = row.try_get("state").map_err(db_error)?;
                        let attempts: i64 = row.try_get("attempts").map_err(db_error)?;
                        Ok(OutboxStatus {
                            state: OutboxState::parse(&state),
                            attempts: attempts.clamp(0, u32::MAX as i64) as u32,
                            reason: row.try_get("reason").map_err(db_error)?,
                        })
                    })
                    .transpose()
                }

                async fn put_subscription(&self, s: &PushSubscriptionRow) -> StoreResult<()> {
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    sqlx::query(
                        "INSERT INTO push_subscriptions \
                         (id, principal, device, endpoint, p256dh, auth, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7) \
                         ON CONFLICT (endpoint) DO UPDATE SET id = excluded.id, \
                         principal = excluded.principal, device = excluded.device, \
                         p256dh = excluded.p256dh, auth = excluded.auth, \
                         created_at = excluded.created_at",
                    )
                    .bind(&s.id)
                    .bind(&s.principal)
                    .bind(&s.device)
                    .bind(&s.endpoint)
                    .bind(&s.p256dh)
                    .bind(&s.auth)
                    .bind(s.created_at)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    sqlx::query(
                        "DELETE FROM push_subscriptions WHERE principal = $1 AND id NOT IN \
                         (SELECT id FROM push_subscriptions WHERE principal = $1 \
                          ORDER BY created_at DESC, id DESC LIMIT $2)",
                    )
                    .bind(&s.principal)
                    .bind(MAX_SUBSCRIPTIONS_PER_PRINCIPAL)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    tx.commit().await.map_err(db_error)
                }

                async fn subscriptions(
                    &self,
                    principal: &str,
                ) -> StoreResult<Vec<PushSubscriptionRow>> {
                    let rows = sqlx::query(&format!(
                        "SELECT {SUB_COLUMNS} FROM push_subscriptions WHERE principal = $1 \
                         ORDER BY created_at, id"
                    ))
                    .bind(principal)
                    .fetch_all(self.writes())
                    .await
                    .map_err(db_error)?;
                    rows.iter().map(subscription).collect()
                }

                async fn remove_subscription(
                    &self,
                    principal: &str,
                    id: &str,
                ) -> StoreResult<bool> {
                    remove_owned(self, "push_subscriptions", principal, id).await
                }

                async fn remove_endpoint(&self, endpoint: &str) -> StoreResult<bool> {
                    let done = sqlx::query("DELETE FROM push_subscriptions WHERE endpoint = $1")
                        .bind(endpoint)
                        .execute(self.writes())
                        .await
                        .map_err(db_error)?;
                    Ok(done.rows_affected() > 0)
                }

                async fn add_sink(&self, s: &SinkRow) -> StoreResult<bool> {
                    // The count and the insert in one statement; two nodes adding at the same
                    // instant could each pass the count (the bound then holds per node).
                    let done = sqlx::query(
                        "INSERT INTO notify_sinks \
                         (id, principal, kind, label, url, secret, created_at) \
                         SELECT $1, $2, $3, $4, $5, $6, $7 WHERE \
                         (SELECT COUNT(*) FROM notify_sinks WHERE principal = $2) < $8",
                    )
                    .bind(&s.id)
                    .bind(&s.principal)
                    .bind(&s.kind)
                    .bind(&s.label)
                    .bind(&s.url)
                    .bind(&s.secret)
                    .bind(s.created_at)
                    .bind(MAX_SINKS_PER_PRINCIPAL)
                    .execute(self.writes())
                    .await
                    .map_err(db_error)?;
                    Ok(done.rows_affected() > 0)
                }

                async fn sinks(&self, principal: &str) -> StoreResult<Vec<SinkRow>> {
                    let rows = sqlx::query(
                        "SELECT id, principal, kind, label, url, secret, created_at \
                         FROM notify_sinks WHERE principal = $1 ORDER BY created_at, id",
                    )
                    .bind(principal)
                    .fetch_all(self.writes())
                    .await
                    .map_err(db_error)?;
                    rows.iter()
                        .map(|row| {
                            Ok(SinkRow {
                                id: row.try_get("id").map_err(db_error)?,
                                principal: row.try_get("principal").map_err(db_error)?,
                                kind: row.try_get("kind").map_err(db_error)?,
                                label: row.try_get("label").map_err(db_error)?,
                                url: row.try_get("url").map_err(db_error)?,
                                secret: row.try_get("secret").map_err(db_error)?,
                                created_at: row.try_get("created_at").map_err(db_error)?,
                            })
                        })
                        .collect()
                }

                async fn remove_sink(&self, principal: &str, id: &str) -> StoreResult<bool> {
                    remove_owned(self, "notify_sinks", principal, id).await
                }

                async fn record_deliveries(
                    &self,
                    ids: &[i64],
                    node: &str,
                    targets: &[String],
                    at: i64,
                ) -> StoreResult<u64> {
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    let mut n = 0;
                    for chunk in ids.chunks(IDS_CHUNK) {
                        let sql = format!(
                            "INSERT INTO notify_deliveries (outbox_id, target, at) \
                             SELECT id, $1, $2 FROM notify_outbox WHERE claimed_by = $3 \
                             AND state = 'pending' AND (SELECT COUNT(*) FROM notify_deliveries d \
                               WHERE d.outbox_id = notify_outbox.id) < $4 \
                             AND id IN ({}) ON CONFLICT DO NOTHING",
                            placeholders(5, chunk.len())
                        );
                        for target in targets.iter().filter(|t| t.len() <= MAX_TARGET_BYTES) {
                            let mut q = sqlx::query(&sql)
                                .bind(target)
                                .bind(at)
                                .bind(node)
                                .bind(MAX_TARGETS_PER_ROW as i64);
                            for id in chunk {
                                q = q.bind(*id);
                            }
                            n += q.execute(&mut *tx).await.map_err(db_error)?.rows_affected();
                        }
                    }
                    tx.commit().await.map_err(db_error)?;
                    Ok(n)
                }

                async fn deliveries(&self, ids: &[i64]) -> StoreResult<Vec<(String, u64)>> {
                    let mut took = std::collections::BTreeMap::<String, u64>::new();
                    for chunk in ids.chunks(IDS_CHUNK) {
                        let sql = format!(
                            "SELECT target, COUNT(*) AS n FROM notify_deliveries \
                             WHERE outbox_id IN ({}) GROUP BY target",
                            placeholders(1, chunk.len())
                        );
                        let mut q = sqlx::query(&sql);
                        for id in chunk {
                            q = q.bind(*id);
                        }
                        for row in q.fetch_all(self.writes()).await.map_err(db_error)? {
                            let n: i64 = row.try_get("n").map_err(db_error)?;
                            let target: String = row.try_get("target").map_err(db_error)?;
                            *took.entry(target).or_default() += n.max(0) as u64;
                        }
                    }
                    Ok(took.into_iter().collect())
                }

                async fn mutes(&self, principal: &str) -> StoreResult<MutesRow> {
                    let classes = sqlx::query(
                        "SELECT class FROM notify_muted_classes WHERE principal = $1 \
                         ORDER BY class",
                    )
                    .bind(principal)
                    .fetch_all(self.writes())
                    .await
                    .map_err(db_error)?
                    .iter()
                    .map(|row| row.try_get("class").map_err(db_error))
                    .collect::<StoreResult<Vec<String>>>()?;
                    let sessions = sqlx::query(
                        "SELECT session_id FROM notify_muted_sessions WHERE principal = $1 \
                         ORDER BY at, session_id",
                    )
                    .bind(principal)
                    .fetch_all(self.writes())
                    .await
                    .map_err(db_error)?
                    .iter()
                    .map(|row| stored_session(&row.try_get::<String, _>("session_id").map_err(db_error)?))
                    .collect::<StoreResult<Vec<_>>>()?;
                    Ok(MutesRow { classes, sessions })
                }

                async fn mute_class(
                    &self,
                    principal: &str,
                    class: &str,
                    muted: bool,
                ) -> StoreResult<()> {
                    let sql = if muted {
                        "INSERT INTO notify_muted_classes (principal, class) VALUES ($1, $2) \
                         ON CONFLICT DO NOTHING"
                    } else {
                        "DELETE FROM notify_muted_classes WHERE principal = $1 AND class = $2"
                    };
                    sqlx::query(sql)
                        .bind(principal)
                        .bind(class)
                        .execute(self.writes())
                        .await
                        .map_err(db_error)?;
                    Ok(())
                }

                async fn mute_session(
                    &self,
                    principal: &str,
                    session: SessionId,
                    muted: bool,
                    at: i64,
                ) -> StoreResult<bool> {
                    if !muted {
                        sqlx::query(
                            "DELETE FROM notify_muted_sessions \
                             WHERE principal = $1 AND session_id = $2",
                        )
                        .bind(principal)
                        .bind(session.to_string())
                        .execute(self.writes())
                        .await
                        .map_err(db_error)?;
                        return Ok(true);
                    }
                    // The count and the insert in one statement, as for sinks.
                    sqlx::query(
                        "INSERT INTO notify_muted_sessions (principal, session_id, at) \
                         SELECT $1, $2, $3 WHERE (SELECT COUNT(*) FROM notify_muted_sessions \
                         WHERE principal = $1) < $4 ON CONFLICT DO NOTHING",
                    )
                    .bind(principal)
                    .bind(session.to_string())
                    .bind(at)
                    .bind(MAX_MUTED_SESSIONS_PER_PRINCIPAL)
                    .execute(self.writes())
                    .await
                    .map_err(db_error)?;
                    let held = sqlx::query(
                        "SELECT 1 AS one FROM notify_muted_sessions \
                         WHERE principal = $1 AND session_id = $2",
                    )
                    .bind(principal)
                    .bind(session.to_string())
                    .fetch_optional(self.writes())
                    .await
                    .map_err(db_error)?;
                    Ok(held.is_some())
                }

                async fn is_muted(
                    &self,
                    principal: &str,
                    session: SessionId,
                    class: &str,
                ) -> StoreResult<bool> {
                    let row = sqlx::query(
                        "SELECT 1 AS one WHERE EXISTS (SELECT 1 FROM notify_muted_sessions \
                         WHERE principal = $1 AND session_id = $2) OR EXISTS (SELECT 1 \
                         FROM notify_muted_classes WHERE principal = $1 AND class = $3)",
                    )
                    .bind(principal)
                    .bind(session.to_string())
                    .bind(class)
                    .fetch_optional(self.writes())
                    .await
                    .map_err(db_error)?;
                    Ok(row.is_some())
                }

                async fn quiet_hours(&self, principal: &str) -> StoreResult<Option<QuietHours>> {
                    let row = sqlx::query(
                        "SELECT start_at, end_at, time_zone FROM notify_quiet_hours \
                         WHERE principal = $1",
                    )
                    .bind(principal)
                    .fetch_optional(self.writes())
                    .await
                    .map_err(db_error)?;
                    row.map(|r| {
                        Ok(QuietHours {
                            start: r.try_get("start_at").map_err(db_error)?,
                            end: r.try_get("end_at").map_err(db_error)?,
                            time_zone: r.try_get("time_zone").map_err(db_error)?,
                        })
                    })
                    .transpose()
                }

                async fn set_quiet_hours(
                    &self,
                    principal: &str,
                    quiet: Option<&QuietHours>,
                ) -> StoreResult<()> {
                    let query = match quiet {
                        Some(q) => sqlx::query(
                            "INSERT INTO notify_quiet_hours (principal, start_at, end_at, time_zone) \
                             VALUES ($1, $2, $3, $4) ON CONFLICT (principal) DO UPDATE SET \
                             start_at = excluded.start_at, end_at = excluded.end_at, \
                             time_zone = excluded.time_zone",
                        )
                        .bind(principal)
                        .bind(&q.start)
                        .bind(&q.end)
                        .bind(&q.time_zone),
                        None => sqlx::query("DELETE FROM notify_quiet_hours WHERE principal = $1")
                            .bind(principal),
                    };
                    query.execute(self.writes()).await.map_err(db_error)?;
                    Ok(())
                }
            }

            /// Most row ids bound in one statement (well under both engines' parameter limits).
            const IDS_CHUNK: usize = 500;

            /// `$first, $first+1, …` for `n` parameters.
            fn placeholders(first: usize, n: usize) -> String {
                (first..first + n)
                    .map(|i| format!("${i}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }

            /// Deletes the row `id` of `principal` in `table` (a subscription or a sink); whether
            /// there was one.
            async fn remove_owned(
                store: &$store,
                table: &str,
                principal: &str,
                id: &str,
            ) -> StoreResult<bool> {
                let done = sqlx::query(&format!(
                    "DELETE FROM {table} WHERE principal = $1 AND id = $2"
                ))
                .bind(principal)
                .bind(id)
                .execute(store.writes())
                .await
                .map_err(db_error)?;
                Ok(done.rows_affected() > 0)
            }
        }
    };
}
pub(crate) use notify_store;
