//! Bridge leases: a bridge's presence as the server can prove it.
//!
//! A bridge connection holds a lease on its session, stored with this node's name
//! (`store::LeaseStore`) and renewed every [`Leases::renew_interval`] while the socket lives:
//! the node renews all the leases its connections hold at once (one store write per interval,
//! not one per connection: with a thousand quiet bridges, per-connection renewals were a
//! hundred transactions a second on SQLite's one writer, each with its fsync, queued with the
//! group commit), and tells a connection whose lease was not renewed that it is lost. The
//! connection deletes its lease when it ends, after recording `bridge.disconnected`. A lease that
//! outlives its connection means the node holding it is gone: at start a node claims the leases
//! its earlier run left (on SQLite, where it is alone, every lease at once), and every renewal
//! interval it claims the leases other nodes stopped renewing. Each claim is won by one node,
//! which records the connection's end: a `bridge.disconnected` keyed on the seq of the
//! connection's `bridge.connected`, so it is written once whoever writes it (the connection
//! itself, a sweep, or a newer connection taking the session over). The state follower folds
//! it and, when work was in flight, writes `session.interrupted` (see `session::states`).
//!
//! Part of the session core: calls `session::{log, states}` and `store`; never a transport.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use moor_protocol::payload::BridgeDisconnected;
use moor_protocol::{close, kinds, now_ms, EntryBody, ProducerId, Seq, SessionId};
use tokio::sync::oneshot;
use tokio::time::Instant;
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
    /// The leases this node's connections hold, renewed together.
    held: Arc<Mutex<Held>>,
}

/// Why a connection's lease ended while its socket lived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseLost {
    /// Another node claimed it, or a newer connection took the session over.
    Taken,
    /// The store did not answer a renewal before the lease ran out.
    RanOut,
}

/// What a connection holds while its lease lives: dropping it gives the lease up (in memory;
/// the stored row goes with [`Leases::release`]).
#[derive(Debug)]
pub struct HeldLease {
    /// Fires when the lease is lost; the connection must then end.
    pub lost: oneshot::Receiver<LeaseLost>,
    key: (SessionId, Seq),
    held: Arc<Mutex<Held>>,
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        lock(&self.held).leases.remove(&self.key);
    }
}

/// The registry of held leases.
#[derive(Debug, Default)]
struct Held {
    /// Numbers registrations: a renewal judges only leases registered (stored) before it began.
    next: u64,
    leases: HashMap<(SessionId, Seq), Registered>,
}

#[derive(Debug)]
struct Registered {
    number: u64,
    /// The stored expiry is at least this (as of the last renewal that returned it).
    valid_until: Instant,
    lost: Option<oneshot::Sender<LeaseLost>>,
}

fn lock(held: &Mutex<Held>) -> MutexGuard<'_, Held> {
    held.lock().unwrap_or_else(|p| p.into_inner())
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
            held: Arc::default(),
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

    /// A new connection of bridge `producer` takes `session` over: the lease of the connection
    /// before it, if one is stored, is removed and that connection's end recorded (before the
    /// new `bridge.connected`), as superseded by the same bridge or by another one.
    pub async fn take_over(&self, session: SessionId, producer: ProducerId) -> StoreResult<()> {
        if let Some(old) = self.store.take_lease(session).await? {
            let (code, reason) = self.superseded(session, old.connected_seq, producer).await;
            self.append_end(&old, reason, Some(code)).await?;
        }
        Ok(())
    }

    /// How a connection of bridge `producer` ends when [`Leases::hold`] found that a later
    /// connection holds `session`: superseded by the same bridge (which reconnects if it still
    /// uses this one) or by another.
    pub async fn lost_to(&self, session: SessionId, producer: ProducerId) -> (u16, &'static str) {
        match self.store.live_lease(session, now_ms()).await {
            Ok(Some(winner)) => {
                self.superseded(session, winner.connected_seq, producer)
                    .await
            }
            Ok(None) => close::superseded(true),
            Err(e) => {
                tracing::warn!(error = ?e, %session, "could not read the bridge lease");
                close::superseded(true)
            }
        }
    }

    /// The close between a connection of bridge `producer` and the connection whose
    /// `bridge.connected` is at `other_seq`: one of them took `session` over from the other.
    /// Another bridge only when the log says so; a bridge told to stop on a guess would leave
    /// its agent unreachable, while one told to reconnect takes the session back at worst.
    async fn superseded(
        &self,
        session: SessionId,
        other_seq: Seq,
        producer: ProducerId,
    ) -> (u16, &'static str) {
        let other = match self.log.entry_at(session, other_seq).await {
            Ok(Some(entry)) => match entry.body() {
                Ok(EntryBody::BridgeConnected(c)) => c.producer,
                _ => None,
            },
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = ?e, %session, "could not read the connection before");
                None
            }
        };
        close::superseded(other.is_none_or(|p| p == producer))
    }

    /// Takes the lease for connection `connection`, whose `bridge.connected` is `connected_seq`;
    /// `None` when a later connection holds it already. The node renews it from then on, until
    /// the returned handle is dropped.
    pub async fn hold(
        &self,
        session: SessionId,
        connection: u64,
        connected_seq: Seq,
    ) -> StoreResult<Option<HeldLease>> {
        let stored_at = Instant::now();
        let lease = Lease {
            session,
            node: self.node.to_string(),
            connection,
            connected_seq,
            expires_at: self.expiry(),
        };
        if !self.store.hold_lease(&lease).await? {
            return Ok(None);
        }
        let (tx, lost) = oneshot::channel();
        let key = (session, connected_seq);
        let mut held = lock(&self.held);
        let number = held.next;
        held.next += 1;
        held.leases.insert(
            key,
            Registered {
                number,
                valid_until: stored_at + self.ttl,
                lost: Some(tx),
            },
        );
        Ok(Some(HeldLease {
            lost,
            key,
            held: self.held.clone(),
        }))
    }

    /// Renews every lease this node's connections hold, in one store write (per
    /// [`RENEW_CHUNK`](crate::store::RENEW_CHUNK) sessions), and tells each connection whose
    /// lease was not renewed that it is lost. When the store fails, only leases that have run
    /// out by now are lost: the next renewal tries again. Returns how many were renewed.
    pub async fn renew_held(&self) -> usize {
        let started = Instant::now();
        let (judged, sessions) = {
            let held = lock(&self.held);
            let sessions: Vec<SessionId> = held.leases.keys().map(|(s, _)| *s).collect();
            (held.next, sessions)
        };
        if sessions.is_empty() {
            return 0;
        }
        let result = self
            .store
            .renew_leases(&self.node, &sessions, self.expiry())
            .await;
        let mut held = lock(&self.held);
        match result {
            Ok(renewed) => {
                let renewed: HashSet<(SessionId, Seq)> = renewed.into_iter().collect();
                for (key, lease) in held.leases.iter_mut() {
                    if renewed.contains(key) {
                        lease.valid_until = started + self.ttl;
                    } else if lease.number < judged {
                        lease.tell(LeaseLost::Taken);
                    }
                }
                renewed.len()
            }
            Err(e) => {
                tracing::warn!(error = ?e, leases = held.leases.len(), "could not renew the bridge leases; retrying");
                let now = Instant::now();
                for lease in held.leases.values_mut() {
                    if lease.valid_until <= now {
                        lease.tell(LeaseLost::RanOut);
                    }
                }
                0
            }
        }
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
        // A lease this node holds and renewed in time needs no store read (on SQLite, that
        // read would wait behind the group commit on the one writer connection).
        if self.holds(session) {
            return true;
        }
        match self.store.live_lease(session, now_ms()).await {
            Ok(lease) => lease.is_some(),
            Err(e) => {
                tracing::warn!(error = ?e, %session, "could not read the bridge lease");
                false
            }
        }
    }

    /// Whether one of this node's connections holds a lease on `session` that its last
    /// renewal kept valid until after now.
    fn holds(&self, session: SessionId) -> bool {
        let now = Instant::now();
        lock(&self.held)
            .leases
            .iter()
            .any(|((s, _), l)| *s == session && l.lost.is_some() && l.valid_until > now)
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

    /// Every renewal interval until `shutdown`: renews this node's leases, then sweeps for
    /// expired ones.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(self.renew) => {}
            }
            self.renew_held().await;
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

impl Registered {
    /// Tells the connection its lease is lost (once).
    fn tell(&mut self, why: LeaseLost) {
        if let Some(tx) = self.lost.take() {
            let _ = tx.send(why);
        }
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
        payload: body.payload().into(),
        key: connected_seq.map_or(IdemKey::None, IdemKey::Receipt),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Node `node-a`'s leases over a real SQLite store in `dir` (30 s, renewed every 10 s).
    async fn sqlite_leases(dir: &tempfile::TempDir) -> (crate::store::Stores, Log, Leases) {
        let (_, store, log, states) = super::super::on_sqlite(dir).await;
        let ttl = Duration::from_secs(30);
        let leases = Leases::new(
            store.leases.clone(),
            log.clone(),
            states,
            "node-a",
            ttl,
            ttl / 3,
            false,
        );
        (store, log, leases)
    }

    #[tokio::test]
    async fn a_renewal_keeps_the_nodes_leases_and_tells_each_connection_that_lost_its_own() {
        // arrange: a real SQLite store, three connections on this node holding their leases
        let dir = tempfile::tempdir().unwrap();
        let (store, _log, leases) = sqlite_leases(&dir).await;
        let mut held = Vec::new();
        for name in ["kept", "taken-over", "claimed"] {
            let s = store.log.open_session(name, None).await.unwrap().id;
            let lease = leases.hold(s, 1, Seq(5)).await.unwrap().expect("held");
            held.push((s, lease));
        }
        let [(kept, mut kept_lease), (taken, mut taken_lease), (claimed, mut claimed_lease)] =
            <[_; 3]>::try_from(held).unwrap();
        let before = store.leases.live_lease(kept, 0).await.unwrap().unwrap();

        // act: a newer connection takes one session over; another node claims the other's
        // lease (as if this node had stopped renewing); then this node renews
        assert!(store.leases.take_lease(taken).await.unwrap().is_some());
        let newer = Lease {
            session: claimed,
            node: "node-b".into(),
            connection: 2,
            connected_seq: Seq(9),
            expires_at: now_ms() + 60_000,
        };
        assert!(store.leases.hold_lease(&newer).await.unwrap());
        let renewed = leases.renew_held().await;

        // assert: one lease renewed (its expiry moved on), the two others told they are lost,
        // and the kept one not told anything
        assert_eq!(renewed, 1);
        let after = store.leases.live_lease(kept, 0).await.unwrap().unwrap();
        assert!(after.expires_at >= before.expires_at);
        assert_eq!(taken_lease.lost.try_recv(), Ok(LeaseLost::Taken));
        assert_eq!(claimed_lease.lost.try_recv(), Ok(LeaseLost::Taken));
        assert_eq!(
            kept_lease.lost.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        );
        assert!(leases.is_held(kept).await);
        let _ = (taken, claimed);

        // a connection that ends drops its lease from the renewals
        drop(kept_lease);
        drop(taken_lease);
        drop(claimed_lease);
        assert_eq!(leases.renew_held().await, 0);
    }

    /// Appends connection `connection`'s `bridge.connected` for bridge `producer`; its seq.
    async fn connected(
        log: &Log,
        session: SessionId,
        connection: u64,
        producer: ProducerId,
    ) -> Seq {
        let body = EntryBody::from(moor_protocol::payload::BridgeConnected {
            connection,
            producer: Some(producer),
            agent: None,
        });
        let entry = Append {
            ts: now_ms(),
            kind: body.kind().into(),
            author: kinds::AUTHOR_SERVER.into(),
            payload: body.payload().into(),
            key: IdemKey::None,
        };
        match log.append(session, vec![entry]).await.unwrap().pop() {
            Some(Appended::Stored(e)) => e.seq,
            other => panic!("not stored: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_connection_superseded_by_its_own_bridge_is_told_to_reconnect_by_another_to_stop() {
        // arrange: bridge `mine` connects twice; the later connection (its `bridge.connected`
        // later in the log) holds the lease, as when the earlier attempt reached the hub first
        let dir = tempfile::tempdir().unwrap();
        let (store, log, leases) = sqlite_leases(&dir).await;
        let (mine, other) = (ProducerId::new(), ProducerId::new());
        let s = store.log.open_session("raced", None).await.unwrap().id;
        let earlier = connected(&log, s, 1, mine).await;
        let later = connected(&log, s, 2, mine).await;
        let _held = leases.hold(s, 2, later).await.unwrap().expect("held");

        // act + assert: the earlier connection cannot hold the lease; it is the same bridge's,
        // so it is told to reconnect (4013), and only a connection of another bridge to stop
        assert!(leases.hold(s, 1, earlier).await.unwrap().is_none());
        assert_eq!(
            leases.lost_to(s, mine).await.0,
            close::SUPERSEDED_BY_SAME_BRIDGE
        );
        assert_eq!(leases.lost_to(s, other).await.0, close::SUPERSEDED);

        // act: another bridge takes the session over, then `mine` takes it back
        leases.take_over(s, other).await.unwrap();
        let others = connected(&log, s, 3, other).await;
        let _theirs = leases.hold(s, 3, others).await.unwrap().expect("held");
        leases.take_over(s, mine).await.unwrap();

        // assert: each end is recorded once, as superseded by another bridge (4003): `mine`'s
        // connection 2 by `other`, then `other`'s connection 3 by `mine`
        let ends: Vec<(u64, Option<u16>)> = store
            .log
            .read(s, crate::store::Range::After(Seq::ZERO), 100)
            .await
            .unwrap()
            .iter()
            .filter_map(|e| match e.body() {
                Ok(EntryBody::BridgeDisconnected(d)) => Some((d.connection, d.close_code)),
                _ => None,
            })
            .collect();
        assert_eq!(
            ends,
            vec![(2, Some(close::SUPERSEDED)), (3, Some(close::SUPERSEDED))]
        );

        // act + assert: `mine` connects again (4) and then once more: the next connection
        // takes over from its own bridge's, whose end says so (4013)
        let again = connected(&log, s, 4, mine).await;
        let _ours = leases.hold(s, 4, again).await.unwrap().expect("held");
        leases.take_over(s, mine).await.unwrap();
        let last = store
            .log
            .read(s, crate::store::Range::Before(Seq(u64::MAX >> 1)), 1)
            .await
            .unwrap();
        match last[0].body() {
            Ok(EntryBody::BridgeDisconnected(d)) => {
                assert_eq!(
                    (d.connection, d.close_code),
                    (4, Some(close::SUPERSEDED_BY_SAME_BRIDGE))
                )
            }
            other => panic!("expected the end of connection 4, got {other:?}"),
        }
    }
}
