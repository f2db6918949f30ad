//! `Record`: what a local stand-in service (the push service, the notification sink receiver)
//! has received, shared between its request handlers and the test, with a wait that wakes on
//! every request; `StandIn`: such a service served on 127.0.0.1 with its record. A stand-in
//! also keeps the requests it refused as invalid; tests expect none, so a wait fails as soon as
//! there is one.

use std::fmt::Debug;
use std::net::SocketAddr;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use tokio::sync::Notify;
use tokio_util::sync::DropGuard;

/// The state a stand-in keeps of its requests.
pub trait Received: Debug + Default {
    /// What arrived, shown when a wait times out.
    fn arrived(&self) -> &dyn Debug;
}

/// What a stand-in keeps: the state of its requests (`T`, which this derefs to) and the
/// requests it refused as invalid.
#[derive(Debug, Default)]
pub(crate) struct Kept<T> {
    state: T,
    /// Requests refused as invalid, each with the reason.
    pub(crate) rejections: Vec<String>,
}

impl<T> Deref for Kept<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.state
    }
}

impl<T> DerefMut for Kept<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.state
    }
}

/// A stand-in's state, cloned into its handlers.
#[derive(Debug)]
pub(crate) struct Record<T> {
    /// The stand-in's name in failure messages ("push service").
    name: &'static str,
    state: Arc<Mutex<Kept<T>>>,
    changed: Arc<Notify>,
}

impl<T> Clone for Record<T> {
    fn clone(&self) -> Self {
        Self {
            name: self.name,
            state: self.state.clone(),
            changed: self.changed.clone(),
        }
    }
}

impl<T> Record<T> {
    /// The state, for reading or for changes no wait needs to see.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Kept<T>> {
        // A test that panicked while holding it has failed already; its state is still worth
        // showing.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T: Received> Record<T> {
    /// An empty record for the stand-in `name`.
    pub(crate) fn new(name: &'static str) -> Self {
        Self {
            name,
            state: Arc::default(),
            changed: Arc::new(Notify::new()),
        }
    }

    /// Records a request with `f`, then wakes the waits.
    pub(crate) fn update<R>(&self, f: impl FnOnce(&mut Kept<T>) -> R) -> R {
        let out = f(&mut self.lock());
        self.changed.notify_waiters();
        out
    }

    /// Waits until `done` holds for the state (checked on every request), or panics after
    /// `timeout` (a failure guard) with what arrived; panics at once on a rejected request.
    pub(crate) async fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        mut done: impl FnMut(&T) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Registered before the check, so a request recorded in between still wakes us.
            let changed = self.changed.notified();
            {
                let state = self.lock();
                assert!(
                    state.rejections.is_empty(),
                    "the {} rejected requests: {:?}",
                    self.name,
                    state.rejections
                );
                if done(&state) {
                    return;
                }
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                panic!(
                    "{}: {what} did not happen within {timeout:?}; received {:#?}",
                    self.name,
                    self.lock().arrived()
                );
            }
        }
    }
}

/// A stand-in served on 127.0.0.1, with what it received; stops when dropped.
#[derive(Debug)]
pub struct StandIn<T> {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    /// What it received.
    pub(crate) record: Record<T>,
    /// Stops the server when dropped.
    _stop: DropGuard,
}

impl<T: Received + Send + 'static> StandIn<T> {
    /// Binds 127.0.0.1:0 and serves `routes`, which record into a new record of `name`.
    pub(crate) async fn serve(name: &'static str, routes: Router<Record<T>>) -> Self {
        let record = Record::new(name);
        let app = routes.with_state(record.clone());
        let (addr, stop) = crate::util::serve_loopback(app, name).await;
        Self {
            addr,
            record,
            _stop: stop.drop_guard(),
        }
    }
}

impl<T> StandIn<T> {
    /// Requests refused as invalid, each with the reason: tests expect none.
    pub fn rejections(&self) -> Vec<String> {
        self.record.lock().rejections.clone()
    }
}
