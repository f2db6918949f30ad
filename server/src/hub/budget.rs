//! The bytes of large entries the live fan-out may hold at once.
//!
//! An entry whose payload is over [`LIVE_PAYLOAD_BYTES`](super::LIVE_PAYLOAD_BYTES) (a chunk of
//! terminal output is up to 64 KiB, about 85 KiB as base64) is carried whole to subscribers
//! only while its session's fan-out, and the node's, hold less than their budget of such
//! entries; otherwise it goes as a notice and each subscriber reads it from the store. The
//! frame carried whole holds a [`Charge`] of its bytes against both budgets, given back when its
//! last copy is dropped: when the channel's slot is overwritten or every subscriber has received
//! it, and each has let it go. So a subscriber that lags keeps its session's large frames, and
//! the charge, only until the budget is spent; after that the session's large entries are
//! notices until it catches up.
//!
//! Without this, every large entry cost each subscriber a store read: a terminal session with a
//! viewer had `moord` reading back everything it had just written.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes of large entries one session's fan-out may hold whole.
pub const SESSION_LIVE_BYTES: usize = 4 << 20;

/// Bytes of large entries the node's fan-out may hold whole, across sessions.
pub const NODE_LIVE_BYTES: usize = 64 << 20;

/// The copies of its payload a frame carried whole may come to hold, each about the payload's
/// size: the stored text, its Server-Sent Event, its WebSocket frame and the parsed entry (for
/// the state follower's fold).
pub const COPIES: usize = 4;

/// A count of bytes held against a limit.
#[derive(Debug)]
pub struct Budget {
    used: AtomicUsize,
    limit: usize,
}

impl Budget {
    /// A budget of `limit` bytes, none of them held.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            used: AtomicUsize::new(0),
            limit,
        })
    }

    /// Bytes held now.
    #[cfg(test)]
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn take(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&u| u <= self.limit)
            })
            .is_ok()
    }

    fn give(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// Bytes held against a session's budget and the node's until dropped.
#[derive(Debug)]
pub struct Charge {
    bytes: usize,
    session: Arc<Budget>,
    node: Arc<Budget>,
}

impl Charge {
    /// Holds `bytes` against both budgets, or nothing if either would go over its limit.
    pub fn take(session: &Arc<Budget>, node: &Arc<Budget>, bytes: usize) -> Option<Self> {
        if !session.take(bytes) {
            return None;
        }
        if !node.take(bytes) {
            session.give(bytes);
            return None;
        }
        Some(Self {
            bytes,
            session: session.clone(),
            node: node.clone(),
        })
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.session.give(self.bytes);
        self.node.give(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_hold_both_budgets_until_dropped_and_none_is_taken_over_either_limit() {
        // arrange: two sessions' budgets of 10 bytes over a node budget of 15
        let node = Budget::new(15);
        let (a, b) = (Budget::new(10), Budget::new(10));
        // act and assert: a session's own limit refuses first
        let a1 = Charge::take(&a, &node, 6).expect("within both");
        assert!(
            Charge::take(&a, &node, 6).is_none(),
            "over the session's 10"
        );
        // the node's limit refuses across sessions, and a refusal holds nothing
        let b1 = Charge::take(&b, &node, 6).expect("12 of the node's 15");
        assert!(Charge::take(&b, &node, 4).is_none(), "over the node's 15");
        assert_eq!((a.used(), b.used(), node.used()), (6, 6, 12));
        // dropping a charge gives its bytes back to both
        drop(a1);
        assert_eq!((a.used(), node.used()), (0, 6));
        let b2 = Charge::take(&b, &node, 4).expect("room again");
        drop((b1, b2));
        assert_eq!((b.used(), node.used()), (0, 0));
    }
}
