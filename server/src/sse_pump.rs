//! An SSE response's body (for [`crate::sse`]), polled by hyper on the connection's own task: each chunk goes from
//! the stream's [`Tail`](crate::session::tail::Tail) to the socket with no task or channel in
//! between.
//!
//! hyper stops polling a body while it cannot write what it holds, so a reader that stopped
//! reading would keep its stream (its tail, the account's slot) for as long as its connection
//! lives. A body therefore marks when it handed hyper a chunk and has not been asked for the
//! next one since, and a sweeper shared by the node's streams cuts off those marked for longer
//! than the stall timeout: it drops the stream (releasing all it holds) and leaves the body a
//! last comment saying why, given once hyper asks again, then the end. The reader resumes with
//! `Last-Event-ID` like after any other end.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::time::Instant;

use crate::compress::GzipStream;
use crate::hub::Hub;
use crate::metrics::{Open, Transport};
use crate::streams::Slot;

/// The last words to a reader cut off for not reading.
const STALLED: &[u8] = b": reader too slow; reconnect with Last-Event-ID\n\n";

type Events = Pin<Box<dyn Stream<Item = Result<Bytes, Infallible>> + Send>>;

/// An SSE response's body: the stream's chunks, gzipped when asked for.
#[derive(Debug)]
pub struct Pump {
    shared: Arc<Pumped>,
}

/// What a [`Pump`] shares with the sweeper.
struct Pumped {
    state: Mutex<Pumping>,
    /// The sweeper's clock.
    clock: Instant,
    /// When (milliseconds on `clock`, plus one) this body handed hyper a chunk and has not been
    /// asked for the next since; 0 while it is asked and waits for its stream.
    owed_since: AtomicU64,
}

enum Pumping {
    Live(Box<Live>),
    /// What is left to give hyper: a last chunk, or nothing (the end).
    Ending(Option<Bytes>),
}

struct Live {
    events: Events,
    gzip: Option<GzipStream>,
    hub: Hub,
    _slot: Slot,
    _open: Open,
}

impl Pump {
    /// The body for `events`, counted as an open SSE viewer and holding `slot` until it ends
    /// or is cut off; registered with `stalls`.
    pub fn new(
        events: impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
        stalls: &Stalls,
        slot: Slot,
        hub: Hub,
        gzip: Option<GzipStream>,
    ) -> Self {
        let live = Live {
            events: Box::pin(events),
            gzip,
            _open: hub.metrics().viewer_open(Transport::Sse),
            hub,
            _slot: slot,
        };
        let shared = Arc::new(Pumped {
            state: Mutex::new(Pumping::Live(Box::new(live))),
            clock: stalls.inner.clock,
            owed_since: AtomicU64::new(0),
        });
        stalls.register(&shared);
        Self { shared }
    }
}

impl Pumped {
    fn lock(&self) -> MutexGuard<'_, Pumping> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this body has been owed a poll since before `now` (on the sweeper's clock)
    /// minus `stall`.
    fn stalled(&self, now: u64, stall: u64) -> bool {
        let since = self.owed_since.load(Ordering::Relaxed);
        since != 0 && now.saturating_sub(since) >= stall
    }

    /// Ends the stream of a reader that took nothing for the stall timeout.
    fn cut_off(&self) {
        let mut state = self.lock();
        let Pumping::Live(live) = &mut *state else {
            return;
        };
        tracing::debug!("sse reader stalled; ending its stream");
        live.hub.metrics().cut_off(Transport::Sse);
        let last = match &mut live.gzip {
            None => Bytes::from_static(STALLED),
            Some(z) => {
                let mut last = z.chunk(STALLED).to_vec();
                last.extend_from_slice(&z.finish());
                Bytes::from(last)
            }
        };
        *state = Pumping::Ending(Some(last));
    }
}

impl Stream for Pump {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let shared = &self.shared;
        let mut state = shared.lock();
        let live = match &mut *state {
            Pumping::Ending(last) => return Poll::Ready(last.take().map(Ok)),
            Pumping::Live(live) => live,
        };
        match live.events.poll_next_unpin(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                let chunk = match &mut live.gzip {
                    None => chunk,
                    // Every chunk compressed and flushed on its own: a live entry is never
                    // held back for more traffic.
                    Some(z) => z.chunk(&chunk),
                };
                shared
                    .owed_since
                    .store(millis_since(shared.clock), Ordering::Relaxed);
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(None) => {
                // The end of the stream ends the gzip member too.
                let last = live.gzip.as_mut().map(GzipStream::finish);
                *state = Pumping::Ending(None);
                shared.owed_since.store(0, Ordering::Relaxed);
                Poll::Ready(last.map(Ok))
            }
            Poll::Ready(Some(Err(never))) => match never {},
            Poll::Pending => {
                // Nothing ready: an idle stream does not keep its compressor.
                if let Some(z) = &mut live.gzip {
                    z.rest();
                }
                shared.owed_since.store(0, Ordering::Relaxed);
                Poll::Pending
            }
        }
    }
}

/// Milliseconds since `clock`, plus one (so that 0 can mean "never").
fn millis_since(clock: Instant) -> u64 {
    u64::try_from(clock.elapsed().as_millis())
        .unwrap_or(u64::MAX - 1)
        .saturating_add(1)
}

/// A node's SSE bodies, swept for readers that stopped reading. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Stalls {
    inner: Arc<StallsInner>,
}

#[derive(Debug)]
struct StallsInner {
    /// How long a body may be owed a poll before its stream is cut off.
    stall: Duration,
    clock: Instant,
    registry: Mutex<Registry>,
}

/// The bodies registered and not yet forgotten, and whether a sweeper runs.
#[derive(Debug, Default)]
struct Registry {
    /// Dropped bodies are forgotten at the next sweep, or when registering finds this list at
    /// `prune_at`: so it never holds more than twice the live bodies (plus a floor), however
    /// fast streams open and close between sweeps.
    bodies: Vec<Weak<Pumped>>,
    prune_at: usize,
    sweeping: bool,
}

/// The fewest entries at which registering prunes the list.
const PRUNE_FLOOR: usize = 64;

impl Registry {
    fn prune(&mut self) {
        self.bodies.retain(|b| b.strong_count() > 0);
        self.prune_at = (2 * self.bodies.len()).max(PRUNE_FLOOR);
        if self.bodies.capacity() > 2 * self.prune_at {
            self.bodies.shrink_to(self.prune_at);
        }
    }
}

impl std::fmt::Debug for Pumped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pumped")
            .field("owed_since", &self.owed_since)
            .finish_non_exhaustive()
    }
}

impl Stalls {
    /// A registry cutting off readers that take nothing for `stall`.
    pub fn new(stall: Duration) -> Self {
        Self {
            inner: Arc::new(StallsInner {
                stall: stall.max(Duration::from_millis(1)),
                clock: Instant::now(),
                registry: Mutex::default(),
            }),
        }
    }

    /// Adds `body`, starting a sweeper when none runs.
    fn register(&self, body: &Arc<Pumped>) {
        let mut registry = self.inner.lock();
        if registry.bodies.len() >= registry.prune_at {
            registry.prune();
        }
        registry.bodies.push(Arc::downgrade(body));
        if !registry.sweeping {
            registry.sweeping = true;
            tokio::spawn(sweep(Arc::downgrade(&self.inner)));
        }
    }
}

impl StallsInner {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Every quarter of the stall timeout, cuts off the bodies owed a poll for longer than it; ends
/// when no body is left (the next one starts another) or the registry is gone.
async fn sweep(inner: Weak<StallsInner>) {
    let every = match inner.upgrade() {
        Some(inner) => (inner.stall / 4).max(Duration::from_millis(10)),
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let stall = u64::try_from(inner.stall.as_millis()).unwrap_or(u64::MAX);
        let now = millis_since(inner.clock);
        let stalled: Vec<Arc<Pumped>> = {
            let mut registry = inner.lock();
            registry.prune();
            if registry.bodies.is_empty() {
                registry.sweeping = false;
                return;
            }
            registry
                .bodies
                .iter()
                .filter_map(Weak::upgrade)
                .filter(|b| b.stalled(now, stall))
                .collect()
        };
        for body in stalled {
            body.cut_off();
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::stream;

    use super::*;
    use crate::streams::Streams;

    const STALL: Duration = Duration::from_secs(30);

    /// A body of two chunks and then nothing, holding `ann`'s only stream slot.
    fn body(stalls: &Stalls, streams: &Streams) -> Pump {
        let events = stream::iter([Ok(Bytes::from_static(b"a")), Ok(Bytes::from_static(b"b"))])
            .chain(stream::pending());
        let slot = streams.open("ann", false).expect("a free slot");
        Pump::new(events, stalls, slot, Hub::default(), None)
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_not_asked_for_more_within_the_stall_timeout_is_cut_off_with_a_farewell() {
        // arrange: hyper took a chunk and never came back for the next
        let (stalls, streams) = (Stalls::new(STALL), Streams::new(1));
        let mut body = body(&stalls, &streams);
        assert_eq!(body.next().await.unwrap().unwrap(), "a");
        // act
        tokio::time::sleep(STALL + STALL / 2).await;
        // assert: the stream let go of what it held, and the body says why, then ends
        assert!(streams.open("ann", false).is_some(), "the slot is free");
        assert_eq!(body.next().await.unwrap().unwrap(), STALLED);
        assert!(body.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn streams_opened_and_closed_between_sweeps_leave_a_bounded_registry() {
        // arrange: one reader stays; no sweep runs while the time stands still
        let (stalls, streams) = (Stalls::new(STALL), Streams::new(2));
        let _stays = body(&stalls, &streams);
        // act: 10,000 streams open and close before the next sweep
        for _ in 0..10_000 {
            drop(body(&stalls, &streams));
        }
        // assert: the dropped bodies were forgotten as they piled up
        let registry = stalls.inner.lock();
        assert!(
            registry.bodies.len() <= PRUNE_FLOOR && registry.bodies.capacity() <= 4 * PRUNE_FLOOR,
            "{} bodies held in room for {}",
            registry.bodies.len(),
            registry.bodies.capacity()
        );
        assert_eq!(
            registry
                .bodies
                .iter()
                .filter(|b| b.strong_count() > 0)
                .count(),
            1
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_waiting_for_its_stream_is_never_cut_off() {
        // arrange: hyper took both chunks and is waiting for more
        let (stalls, streams) = (Stalls::new(STALL), Streams::new(1));
        let mut body = body(&stalls, &streams);
        assert_eq!(body.next().await.unwrap().unwrap(), "a");
        assert_eq!(body.next().await.unwrap().unwrap(), "b");
        // act: nothing comes for four stall timeouts
        let waited = tokio::time::timeout(4 * STALL, body.next()).await;
        // assert
        assert!(waited.is_err(), "nothing to give");
        assert!(
            streams.open("ann", false).is_none(),
            "the stream holds its slot"
        );
    }
}
