//! Long-lived connections per account: SSE streams, viewer sockets and bridge sockets each take
//! a slot of their principal's while they live, up to `--max-streams-per-user`, so what one
//! account can hold open (and the memory that costs, see `docs/security.md`) is bounded.
//! Administrators are not counted: they are trusted, and load tests run as them.
//!
//! Calls nothing in the crate; the transports take slots when they accept a connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The open connections of every account. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Streams {
    open: Arc<Mutex<HashMap<String, u32>>>,
    max: u32,
}

/// One connection's slot; released when dropped.
#[derive(Debug)]
pub struct Slot {
    streams: Option<Streams>,
    who: String,
}

impl Streams {
    /// Registry allowing `max` open connections per account.
    pub fn new(max: u32) -> Self {
        Self {
            open: Arc::default(),
            max: max.max(1),
        }
    }

    /// A slot for a connection of `who` (`admin`: not counted), or `None` when the account has
    /// all its connections open.
    pub fn open(&self, who: &str, admin: bool) -> Option<Slot> {
        if admin {
            return Some(Slot {
                streams: None,
                who: String::new(),
            });
        }
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(who.to_owned()).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(Slot {
            streams: Some(self.clone()),
            who: who.to_owned(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Some(streams) = &self.streams else {
            return;
        };
        let mut open = streams.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.who) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.who);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_holds_at_most_its_slots_and_gets_them_back_when_they_close() {
        let streams = Streams::new(2);
        let a = streams.open("ann", false).unwrap();
        let _b = streams.open("ann", false).unwrap();
        assert!(streams.open("ann", false).is_none());
        assert!(streams.open("bob", false).is_some(), "per account");
        assert!(
            streams.open("root", true).is_some(),
            "administrators are not counted"
        );
        drop(a);
        assert!(streams.open("ann", false).is_some());
        assert!(
            streams.open.lock().unwrap().get("bob").is_none(),
            "closed accounts are forgotten"
        );
    }
}
