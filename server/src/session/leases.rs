//! Bridge leases: a bridge's presence as the server can prove it.
//!
//! A bridge connection holds a lease on its session, stored with this node's name
//! (`store::LeaseStore`) and renewed every [`Leases::renew_interval`] while the socket lives;
//! the connection deletes it when it ends, after recording `bridge.disconnected`. A lease that
//! outlives its connection means the node holding it is gone: at start a node claims the leases
//! its earlier run left (on SQLite, where it is alone, every lease at once), and every renewal
//! interval it claims the leases other nodes stopped renewing. Each claim is won by one node,
//! which records the connection's end: a `bridge.disconnected` keyed on the seq of the
//! connection's `bridge.connected`, so it is written once whoever writes it (the connection
//! itself, a sweep, or a newer connection taking the session over). The state follower folds
//! it and, when work was in flight, writes `session.interrupted` (see `session::states`).
//!
//! Part of the session core: calls `session::{log, states}` and `store`; never a transport.

use std::sync::Arc;
use std::time::Duration;

use moor_protocol::payload::BridgeDisconnected;
use moor_protocol::{close, kinds, now_ms, EntryBody, Seq, SessionId};
use tokio_util::sync::CancellationToken;

use super::log::Log;
use super::states::States;
use crate::store::{
    Append, Appended, Expired, IdemKey, Lease, LeaseStore, StoreError, StoreResult,
};

/// Why a restarted node ends the connections its earlier run held.
pub const CAUSE_RESTART: &str = "server restart";
/// Why a node ends a connection whose holder stopped renewing its lease.
pub const CAUSE_NODE_LOST: &str = "node lost";

/// Most leases read to say which listed sessions have a bridge on another node.
pub const MAX_HELD_ELSEWHERE: i64 = 20_000;

/// This node's bridge leases. Cheap to clone.
#[derive(Clone)]
pub struct Leases {
    store: Arc<dyn LeaseStore>,
    log: Log,
    states: States,
    node: Arc<str>,
    ttl: Duration,
    renew: Duration,
    /// No other node uses the database (SQLite): at start every lease is stale.
    alone: bool,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("node", &self.node)
            .field("ttl", &self.ttl)
            .field("renew", &self.renew)
            .finish_non_exhaustive()
    }
}

impl Leases {
    /// Leases held by `node` for `ttl`, renewed every `renew` (at most half the `ttl`, so one
    /// late renewal does not lose a lease). `alone`: no other node shares the database.
    pub fn new(
        store: Arc<dyn LeaseStore>,
        log: Log,
        states: States,
        node: &str,
        ttl: Duration,
        renew: Duration,
        alone: bool,
    ) -> Self {
        let ttl = ttl.max(Duration::from_millis(2));
        Self {
            store,
            log,
            states,
            node: node.into(),
            renew: renew.clamp(Duration::from_millis(1), ttl / 2),
            ttl,
            alone,
        }
    }

    /// How often a connection renews its lease, and how often a node sweeps for expired ones.
    pub fn renew_interval(&self) -> Duration {
        self.renew
    }

    /// How long a lease lasts unless renewed.
    pub fn duration(&self) -> Duration {
        self.ttl
    }

    fn expiry(&self) -> i64 {
        now_ms().saturating_add(self.ttl.as_millis() as i64)
    }

    /// A new connection takes `session` over: the lease of the connection before it, if one is
    /// stored, is removed and that connection's end recorded (before the new `bridge.connected`).
    pub async fn take_over(&self, session: SessionId) -> StoreResult<()> {
        if let Some(old) = self.store.take_lease(session).await? {
            let reason = "a newer bridge connection for this session took over";
            self.append_end(&old, reason, Some(close::SUPERSEDED))
                .await?;
        }
        Ok(())
    }

    /// Takes the lease for connection `connection`, whose `bridge.connected` is `connected_seq`;
    /// false when a later connection holds it already.
    pub async fn hold(
        &self,
        session: SessionId,
        connection: u64,
        connected_seq: Seq,
    ) -> StoreResult<bool> {
        let lease = Lease {
            session,
            node: self.node.to_string(),
            connection,
            connected_seq,
            expires_at: self.expiry(),
        };
        self.store.hold_lease(&lease).await
    }

    /// Renews the lease of connection `connected_seq`; false when it is lost (another node
    /// claimed it, or a newer connection took the session over): the connection must end.
    pub async fn renew(&self, session: SessionId, connected_seq: Seq) -> StoreResult<bool> {
        self.store
            .renew_lease(session, connected_seq, &self.node, self.expiry())
            .await
    }

    /// Gives up the lease of connection `connected_seq` (its end is recorded already).
    pub async fn release(&self, session: SessionId, connected_seq: Seq) {
        if let Err(e) = self.store.release_lease(session, connected_seq).await {
            // The lease expires, and a sweep finds the end recorded already.
            tracing::warn!(error = ?e, %session, "could not release a bridge lease");
        }
    }

    /// Whether a live node holds a bridge lease on `session` now. When the store cannot say,
    /// no: nothing proves that a bridge will get what is sent.
    pub async fn is_held(&self, session: SessionId) -> bool {
        match self.store.live_lease(session, now_ms()).await {
            Ok(lease) => lease.is_some(),
            Err(e) => {
                tracing::warn!(error = ?e, %session, "could not read the bridge lease");
                false
            }
        }
    }

    /// The sessions whose bridges other nodes hold now (none when this node is alone on its
    /// database: then this node's hub knows every bridge). At most [`MAX_HELD_ELSEWHERE`];
    /// empty when the store cannot say, since nothing proves those bridges are there.
    pub async fn held_elsewhere(&self) -> std::collections::HashSet<SessionId> {
        if self.alone {
            return Default::default();
        }
        match self.store.live_sessions(now_ms(), MAX_HELD_ELSEWHERE).await {
            Ok(sessions) => sessions.into_iter().collect(),
            Err(e) => {
                tracing::warn!(error = ?e, "could not read the bridge leases");
                Default::default()
            }
        }
    }

    /// Whether another node holds the bridge of `session` now (never when this node is alone).
    pub async fn held_elsewhere_one(&self, session: SessionId) -> bool {
        !self.alone && self.is_held(session).await
    }

    /// At start: ends the connections an earlier run of this node held (on a database no other
    /// node uses, every lease stored). Returns how many were ended.
    pub async fn sweep_at_start(&self) -> StoreResult<usize> {
        let which = if self.alone {
            Expired::All
        } else {
            Expired::BeforeOrHeldBy(now_ms(), &self.node)
        };
        self.sweep(which, CAUSE_RESTART).await
    }

    /// Ends the connections whose leases expired (their nodes are gone). Returns how many.
    pub async fn sweep_expired(&self) -> StoreResult<usize> {
        self.sweep(Expired::Before(now_ms()), CAUSE_NODE_LOST).await
    }

    async fn sweep(&self, which: Expired<'_>, cause: &str) -> StoreResult<usize> {
        let claimed = self
            .store
            .claim_expired(which, &self.node, self.expiry())
            .await?;
        for lease in &claimed {
            let reason = format!(
                "{cause}: node {} no longer holds the bridge connection",
                lease.node
            );
            match self.append_end(lease, &reason, None).await {
                Ok(()) | Err(StoreError::NotFound) => {
                    self.release(lease.session, lease.connected_seq).await
                }
                // The claim expires and a later sweep tries again.
                Err(e) => {
                    tracing::warn!(error = ?e, session = %lease.session, "could not record a lost bridge")
                }
            }
        }
        Ok(claimed.len())
    }

    /// Sweeps for expired leases every renewal interval until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(self.renew) => {}
            }
            if let Err(e) = self.sweep_expired().await {
                tracing::warn!(error = ?e, "bridge lease sweep failed; retrying");
            }
        }
    }

    /// Records the end of `lease`'s connection (once: keyed on its `bridge.connected`), then
    /// has the session's state fold it, so an interruption is recorded now rather than when
    /// someone next looks.
    async fn append_end(&self, lease: &Lease, reason: &str, code: Option<u16>) -> StoreResult<()> {
        let entry = disconnected(lease.connection, Some(lease.connected_seq), reason, code);
        let seq = match self.log.append(lease.session, vec![entry]).await {
            Ok(mut outcomes) => match outcomes.pop() {
                Some(Appended::Stored(e)) => e.seq,
                _ => return Ok(()),
            },
            Err(StoreError::SessionEnded) => return Ok(()),
            Err(e) => return Err(e),
        };
        let states = self.states.clone();
        let session = lease.session;
        tokio::spawn(async move {
            if let Err(e) = states.current(session, seq).await {
                tracing::warn!(error = ?e, %session, "state did not fold a lost bridge");
            }
        });
        Ok(())
    }
}

/// The `bridge.disconnected` entry for connection `connection`. With `connected_seq` (the seq
/// of its `bridge.connected`) it is keyed on it, so whichever node records the end writes it
/// once.
pub fn disconnected(
    connection: u64,
    connected_seq: Option<Seq>,
    reason: &str,
    close_code: Option<u16>,
) -> Append {
    let body = EntryBody::from(BridgeDisconnected {
        connection,
        reason: Some(reason.to_owned()),
        close_code,
    });
    Append {
        ts: now_ms(),
        kind: body.kind().into(),
        author: kinds::AUTHOR_SERVER.into(),
        payload: body.payload(),
        key: connected_seq.map_or(IdemKey::None, IdemKey::Receipt),
    }
}
