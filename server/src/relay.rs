//! The cluster relay: when several nodes share a Postgres store, turns the other nodes' notices
//! into this node's hub traffic, so any node serves any viewer and reaches any bridge, and
//! applies their revocations to this node's live connections.
//!
//! Entries committed elsewhere are read back from the store and published to the local hub;
//! consumers (`Tail`, the bridge link) already treat a frame that skips ahead as "read the store",
//! so a relayed range arriving after a local commit with a higher seq costs a query, never an
//! entry. After the notice feed was interrupted ([`Notice::Resync`]) or a store read failed, the
//! relay publishes each watched session's newest entry, which makes every consumer behind it
//! catch up from the store, and re-checks its bridges' claims and its live connections'
//! credentials. It does no I/O under hub locks.
//!
//! Calls `store`, `hub` and `access::revocations`; never a transport or the session core.

use std::time::Duration;

use moor_protocol::{now_ms, Seq, SessionId};
use tokio_util::sync::CancellationToken;

use crate::access::revocations::Revocations;
use crate::hub::{Frame, Hub};
use crate::store::{
    read_page_raw, Cluster, Notice, PageLimit, Range, RawEntry, Revocation, StoreError,
    StoreResult, Stores,
};

/// Entries read per query when relaying a range.
const PAGE: u32 = 1000;
/// Most bytes of entries read per store query (at least one entry).
const PAGE_BYTES: u64 = 2 << 20;
/// Pause before retrying a catch-up that failed (the database may be restarting).
const RETRY: Duration = Duration::from_millis(500);

/// Runs until `shutdown`; returns at once for a single-node store. Revocations announced by
/// other nodes end the matching connections in `revocations`.
pub async fn run(store: Stores, hub: Hub, revocations: Revocations, shutdown: CancellationToken) {
    let Some(cluster) = store.cluster.as_deref() else {
        return;
    };
    let mut feed = cluster.feed();
    let relay = Relay {
        store: &store,
        cluster,
        hub,
        revocations,
    };
    // A catch-up is owed: after a lost feed, or a notice whose entries could not be read.
    let mut behind = false;
    loop {
        let notice = tokio::select! {
            _ = shutdown.cancelled() => return,
            n = feed.next() => Some(n),
            _ = tokio::time::sleep(RETRY), if behind => None,
        };
        let catching_up = matches!(notice, None | Some(Notice::Resync));
        let result = match notice {
            Some(Notice::Resync) | None => relay.catch_up().await,
            Some(Notice::Entries {
                session,
                first,
                last,
            }) => relay.publish_range(session, first, last).await,
            Some(Notice::BridgeClaimed {
                session,
                epoch,
                producer,
            }) => {
                relay.hub.supersede_bridge(session, epoch, Some(producer));
                Ok(())
            }
            Some(Notice::Revoked(revocation)) => {
                relay.revocations.apply(&revocation);
                Ok(())
            }
        };
        match result {
            Ok(()) => behind = behind && !catching_up,
            Err(e) => {
                if !behind {
                    tracing::warn!(error = ?e, "relay could not read the store; catching up later");
                }
                behind = true;
            }
        }
    }
}

struct Relay<'a> {
    store: &'a Stores,
    cluster: &'a dyn Cluster,
    hub: Hub,
    revocations: Revocations,
}

impl Relay<'_> {
    /// Publishes `first..=last` of `session` if anyone here follows it.
    async fn publish_range(&self, session: SessionId, first: Seq, last: Seq) -> StoreResult<()> {
        let mut cursor = Seq(first.0.saturating_sub(1));
        // Bounded: each page moves the cursor forward by at least one.
        while cursor < last && self.hub.is_watched(session) {
            let want = (last.0 - cursor.0).min(u64::from(PAGE)) as u32;
            let limit = PageLimit {
                count: want,
                bytes: PAGE_BYTES,
            };
            // As stored: a relayed entry's events are made from its stored text, once for every
            // subscriber here, as for an entry committed on this node.
            let page = read_page_raw(&*self.store.log, session, Range::After(cursor), limit)
                .await?
                .entries;
            let Some(end) = page.last().map(|e| e.seq) else {
                break;
            };
            cursor = end;
            self.observe_delay(&page, last);
            self.hub.publish(
                session,
                page.into_iter()
                    .filter(|e| e.seq <= last)
                    .map(Frame::committed),
            );
        }
        Ok(())
    }

    /// Records, for each relayed entry of `page` up to `last`, how long after its commit on
    /// the other node it is published here (clocks of nodes are assumed in step; a negative
    /// delay from a skewed clock counts as none).
    fn observe_delay(&self, page: &[RawEntry], last: Seq) {
        let now = now_ms();
        let metrics = self.hub.metrics();
        for entry in page.iter().filter(|e| e.seq <= last) {
            let ms = u64::try_from(now.saturating_sub(entry.ts)).unwrap_or(0);
            metrics.relayed(Duration::from_millis(ms));
        }
    }

    /// Nudges every watched session with its newest entry, drops local bridge connections
    /// that another node claimed while notices were lost, and ends the connections of
    /// credentials and roles revoked meanwhile.
    async fn catch_up(&self) -> StoreResult<()> {
        self.recheck_revocations().await?;
        for session in self.hub.watched() {
            let (newest, _) = self
                .store
                .log
                .read_raw(session, Range::Before(Seq(i64::MAX as u64)), 1)
                .await?;
            self.hub
                .publish(session, newest.into_iter().map(Frame::committed));
        }
        let local = self.hub.bridge_epochs();
        if !local.is_empty() {
            let sessions: Vec<SessionId> = local.iter().map(|(s, _)| *s).collect();
            for (session, epoch) in self.cluster.bridge_epochs(&sessions).await? {
                if local.iter().any(|(s, e)| *s == session && *e < epoch) {
                    // Which bridge claimed it is not known here: told to reconnect if it still
                    // uses this connection (its new connection's claim then wins).
                    self.hub.supersede_bridge(session, epoch, None);
                }
            }
        }
        Ok(())
    }

    /// Checks every credential and role this node holds live connections for against the
    /// store, and applies the revocations whose notices were lost. (A role that was changed,
    /// not removed, cannot be told from here: its connections keep the old role until the
    /// next change.)
    async fn recheck_revocations(&self) -> StoreResult<()> {
        for held in self.revocations.held() {
            let revoked = match &held {
                Revocation::User(name) => match self.store.access.user(name).await {
                    Ok(user) => user.revoked_at.is_some(),
                    Err(StoreError::NotFound) => true,
                    Err(e) => return Err(e),
                },
                Revocation::Family(family) => {
                    self.store.access.active_family(family).await?.is_none()
                }
                Revocation::Member { session, principal } => self
                    .store
                    .access
                    .member_role(*session, principal)
                    .await?
                    .is_none(),
            };
            if revoked {
                self.revocations.apply(&held);
            }
        }
        Ok(())
    }
}
