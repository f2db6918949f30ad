//! The Postgres side of [`Cluster`]: bridge claims (an epoch column on the session row, bumped
//! and announced in one statement) and the `LISTEN` feed of the other nodes' notices.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use moor_protocol::{ProducerId, Seq, SessionId};
use sqlx::postgres::{PgListener, PgPool};
use sqlx::Row;

use super::rows::session_id;
use super::{PgStore, BRIDGES_CHANNEL, ENTRIES_CHANNEL, REVOCATIONS_CHANNEL};
use crate::store::errors::db_error;
use crate::store::{Cluster, Notice, NoticeFeed, Revocation, StoreResult};

/// First pause before reconnecting the listen connection; doubles up to [`RELISTEN_MAX`].
const RELISTEN_INITIAL: Duration = Duration::from_millis(50);
/// Longest pause between reconnect attempts.
const RELISTEN_MAX: Duration = Duration::from_secs(2);
/// While the database stays unreachable, one warning per this many failed attempts.
const WARN_EVERY: u32 = 30;

#[async_trait]
impl Cluster for PgStore {
    fn node_id(&self) -> &str {
        &self.node
    }

    async fn claim_bridge(&self, session: SessionId, producer: ProducerId) -> StoreResult<u64> {
        let sid = session.to_string();
        // One statement, so the bump and its notice commit together.
        let epoch: i64 = sqlx::query_scalar(
            "WITH c AS (UPDATE sessions SET bridge_epoch = bridge_epoch + 1 \
             WHERE id = $1::uuid RETURNING bridge_epoch) \
             SELECT c.bridge_epoch FROM c, \
             LATERAL (SELECT pg_notify($2, $1 || ' ' || c.bridge_epoch::text || ' ' || $4 || ' ' || $3)) n",
        )
        .bind(&sid)
        .bind(BRIDGES_CHANNEL)
        .bind(&*self.node)
        .bind(producer.to_string())
        .fetch_one(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(epoch as u64)
    }

    async fn announce_revocation(&self, revocation: &Revocation) -> StoreResult<()> {
        let node = &*self.node;
        let payload = match revocation {
            Revocation::User(name) => format!("user {name} {node}"),
            Revocation::Family(family) => format!("family {family} {node}"),
            Revocation::Member { session, principal } => {
                format!("member {session} {principal} {node}")
            }
        };
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(REVOCATIONS_CHANNEL)
            .bind(payload)
            .execute(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    async fn bridge_epochs(&self, sessions: &[SessionId]) -> StoreResult<Vec<(SessionId, u64)>> {
        let ids: Vec<String> = sessions.iter().map(ToString::to_string).collect();
        let rows = sqlx::query(
            "SELECT id::text AS id, bridge_epoch FROM sessions WHERE id = ANY($1::uuid[])",
        )
        .bind(ids)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter()
            .map(|r| {
                let epoch: i64 = r.try_get("bridge_epoch").map_err(db_error)?;
                Ok((session_id(r, "id")?, epoch as u64))
            })
            .collect()
    }

    fn feed(&self) -> Box<dyn NoticeFeed> {
        Box::new(PgFeed {
            pool: self.listen.clone(),
            node: self.node.to_string(),
            listener: None,
            failures: 0,
            listening: self.listening.clone(),
        })
    }

    fn listening(&self) -> bool {
        self.listening.load(Ordering::Relaxed)
    }
}

/// `LISTEN` on every channel through one connection, rebuilt whenever it fails.
struct PgFeed {
    pool: PgPool,
    node: String,
    listener: Option<PgListener>,
    failures: u32,
    /// The store's flag, kept equal to `listener.is_some()`.
    listening: Arc<AtomicBool>,
}

impl Drop for PgFeed {
    fn drop(&mut self) {
        self.listening.store(false, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for PgFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgFeed")
            .field("node", &self.node)
            .field("listening", &self.listener.is_some())
            .finish()
    }
}

impl PgFeed {
    async fn listen(&self) -> Result<PgListener, sqlx::Error> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        // A lost connection is rebuilt here, not inside `try_recv`, so that the `Resync` this
        // feed yields always comes after the new `LISTEN` is in place.
        listener.eager_reconnect(false);
        listener
            .listen_all([ENTRIES_CHANNEL, BRIDGES_CHANNEL, REVOCATIONS_CHANNEL])
            .await?;
        Ok(listener)
    }

    fn backoff(&self) -> Duration {
        let shift = self.failures.saturating_sub(1).min(10);
        (RELISTEN_INITIAL * 2u32.pow(shift)).min(RELISTEN_MAX)
    }
}

#[async_trait]
impl NoticeFeed for PgFeed {
    async fn next(&mut self) -> Notice {
        loop {
            let Some(listener) = self.listener.as_mut() else {
                match self.listen().await {
                    Ok(l) => {
                        if self.failures > 0 {
                            tracing::info!(node = %self.node, "listening for other nodes again");
                        }
                        self.listener = Some(l);
                        self.listening.store(true, Ordering::Relaxed);
                        self.failures = 0;
                        return Notice::Resync;
                    }
                    Err(e) => {
                        self.failures += 1;
                        if self.failures % WARN_EVERY == 1 {
                            tracing::warn!(error = %e, attempts = self.failures, "cannot listen for other nodes; retrying");
                        }
                        tokio::time::sleep(self.backoff()).await;
                        continue;
                    }
                }
            };
            match listener.try_recv().await {
                Ok(Some(n)) => {
                    if let Some(notice) = parse(n.channel(), n.payload(), &self.node) {
                        return notice;
                    }
                }
                Ok(None) => {
                    tracing::warn!("lost the listen connection; reconnecting and catching up");
                    self.listener = None;
                    self.listening.store(false, Ordering::Relaxed);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "listen connection failed; reconnecting and catching up");
                    self.listener = None;
                    self.listening.store(false, Ordering::Relaxed);
                }
            }
        }
    }
}

/// A notice from its channel and payload; `None` for this node's own notices and for anything
/// malformed (ignored: notices are hints, the store is the truth).
fn parse(channel: &str, payload: &str, own_node: &str) -> Option<Notice> {
    match channel {
        ENTRIES_CHANNEL => {
            let mut parts = payload.splitn(4, ' ');
            let (sid, first, last) = (parts.next()?, parts.next()?, parts.next()?);
            (parts.next()? != own_node).then_some(())?;
            Some(Notice::Entries {
                session: sid.parse().ok()?,
                first: Seq(first.parse().ok()?),
                last: Seq(last.parse().ok()?),
            })
        }
        BRIDGES_CHANNEL => {
            let mut parts = payload.splitn(4, ' ');
            let (sid, epoch, producer) = (parts.next()?, parts.next()?, parts.next()?);
            (parts.next()? != own_node).then_some(())?;
            Some(Notice::BridgeClaimed {
                session: sid.parse().ok()?,
                epoch: epoch.parse().ok()?,
                producer: producer.parse().ok()?,
            })
        }
        REVOCATIONS_CHANNEL => {
            let (kind, rest) = payload.split_once(' ')?;
            let (revocation, node) = match kind {
                "user" | "family" => {
                    let (arg, node) = rest.split_once(' ')?;
                    let r = if kind == "user" {
                        Revocation::User(arg.to_owned())
                    } else {
                        Revocation::Family(arg.to_owned())
                    };
                    (r, node)
                }
                "member" => {
                    let mut parts = rest.splitn(3, ' ');
                    let (sid, principal) = (parts.next()?, parts.next()?);
                    let r = Revocation::Member {
                        session: sid.parse().ok()?,
                        principal: principal.to_owned(),
                    };
                    (r, parts.next()?)
                }
                _ => return None,
            };
            (node != own_node).then_some(Notice::Revoked(revocation))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_from_other_nodes_parse_and_own_ones_are_skipped() {
        let sid = SessionId::new();
        assert_eq!(
            parse(ENTRIES_CHANNEL, &format!("{sid} 3 7 node b"), "a"),
            Some(Notice::Entries {
                session: sid,
                first: Seq(3),
                last: Seq(7)
            })
        );
        assert_eq!(parse(ENTRIES_CHANNEL, &format!("{sid} 3 7 a"), "a"), None);
        let producer = ProducerId::new();
        assert_eq!(
            parse(BRIDGES_CHANNEL, &format!("{sid} 9 {producer} node b"), "a"),
            Some(Notice::BridgeClaimed {
                session: sid,
                epoch: 9,
                producer
            })
        );
        assert_eq!(parse(BRIDGES_CHANNEL, "garbage", "a"), None);
        assert_eq!(
            parse(REVOCATIONS_CHANNEL, "user ann node b", "a"),
            Some(Notice::Revoked(Revocation::User("ann".into())))
        );
        assert_eq!(
            parse(REVOCATIONS_CHANNEL, "family f-1_x node b", "a"),
            Some(Notice::Revoked(Revocation::Family("f-1_x".into())))
        );
        assert_eq!(
            parse(
                REVOCATIONS_CHANNEL,
                &format!("member {sid} vic node b"),
                "a"
            ),
            Some(Notice::Revoked(Revocation::Member {
                session: sid,
                principal: "vic".into()
            }))
        );
        assert_eq!(parse(REVOCATIONS_CHANNEL, "user ann a", "a"), None);
        assert_eq!(parse(REVOCATIONS_CHANNEL, "group x node b", "a"), None);
    }
}
