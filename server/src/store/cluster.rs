//! What nodes sharing one database tell each other, in dialect-independent terms.
//!
//! A store shared by several `moord` nodes (Postgres) announces, after commit, every range of
//! entries appended, every bridge claim and every revocation; each node's relay (`crate::relay`) turns the notices
//! into hub traffic. Notices are hints: one may be lost (a dropped listen connection), so after any
//! interruption the feed says [`Notice::Resync`] and the node catches up by query.

use std::fmt::Debug;

use async_trait::async_trait;
use moor_protocol::{ProducerId, Seq, SessionId};

use super::StoreResult;

/// One announcement from another node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Another node committed entries `first..=last` to `session`.
    Entries {
        /// The session.
        session: SessionId,
        /// First new seq.
        first: Seq,
        /// Last new seq.
        last: Seq,
    },
    /// A bridge connection for `session` was claimed on another node with `epoch`: any local
    /// connection with a lower epoch is superseded.
    BridgeClaimed {
        /// The session.
        session: SessionId,
        /// The claim's epoch (higher is newer).
        epoch: u64,
        /// The bridge that claimed it (a local connection of the same bridge is told it may
        /// reconnect).
        producer: ProducerId,
    },
    /// A credential or role was revoked on another node: end this node's live connections
    /// opened with it.
    Revoked(Revocation),
    /// The feed was interrupted and is listening again: notices may have been lost in between,
    /// so the node must catch up by query. Also the first notice of every feed.
    Resync,
}

/// What a revocation takes away; every node ends the live connections it holds for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revocation {
    /// Every connection of a user.
    User(String),
    /// Every connection opened with a token of one family (a login or a device).
    Family(String),
    /// A principal's connections to one session through their role (removed or changed).
    Member {
        /// The session.
        session: SessionId,
        /// The member.
        principal: String,
    },
}

/// A node's subscription to the other nodes' notices.
#[async_trait]
pub trait NoticeFeed: Send + Debug {
    /// The next notice. Reconnects by itself (with backoff) when its connection is lost, and
    /// then yields [`Notice::Resync`]; it never ends, so callers stop it by dropping it.
    async fn next(&mut self) -> Notice;
}

/// Coordination between nodes that share one store. A single-node store (SQLite) has none.
#[async_trait]
pub trait Cluster: Send + Sync + Debug {
    /// This node's name, as given by `--node-id` (or generated).
    fn node_id(&self) -> &str;

    /// Claims `session`'s bridge for a new connection on this node: returns an epoch higher than
    /// every earlier claim, and tells the other nodes ([`Notice::BridgeClaimed`]).
    async fn claim_bridge(&self, session: SessionId, producer: ProducerId) -> StoreResult<u64>;

    /// Tells the other nodes about a revocation (after it is stored), so they end their live
    /// connections for it too ([`Notice::Revoked`]).
    async fn announce_revocation(&self, revocation: &Revocation) -> StoreResult<()>;

    /// The latest claim epoch of each of `sessions` (sessions never claimed: 0).
    async fn bridge_epochs(&self, sessions: &[SessionId]) -> StoreResult<Vec<(SessionId, u64)>>;

    /// Starts listening to the other nodes' notices.
    fn feed(&self) -> Box<dyn NoticeFeed>;

    /// Whether a feed of this node is connected and listening right now.
    fn listening(&self) -> bool;
}
