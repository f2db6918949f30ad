//! Live fan-out: per-session broadcast of committed entries, and the registry of live bridge
//! connections, each of which gets its session's inputs (and nothing else) on its own channel.
//!
//! Entries are published only after they are committed (write, then fan out), in seq order, by
//! the session's committer. Subscribers subscribe *before* reading the backlog and drop what
//! they already have by seq. The hub never does I/O while holding its lock.
//!
//! Calls nothing in the crate: the session core and the relay publish to it, transports subscribe.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bytes::{Bytes, BytesMut};
use moor_protocol::api::BridgeStatus;
use moor_protocol::web::{Reset, ServerToViewer, RESET_EVENT};
use moor_protocol::{close, now_ms, Entry, ProducerId, Seq, SessionId};
use tokio::sync::{broadcast, mpsc};

use crate::session::pages::SharedPages;
use crate::store::RawEntry;

mod budget;

use budget::{Budget, Charge};
pub use budget::{COPIES as LIVE_COPIES, NODE_LIVE_BYTES, SESSION_LIVE_BYTES};

/// Live entries buffered per session before a slow subscriber lags (and is resynchronised from
/// the store).
const CHANNEL_CAPACITY: usize = 1024;
/// Slots of a session's channel while one subscriber reads it (a live session nobody watches:
/// its state follower) and batches are small. A channel's slots are allocated up front, about
/// 40 bytes each, so a full one would cost an idle session 40 KiB. The topic grows to its full
/// capacity when a second subscriber arrives or a batch fills half of it; the receivers of the
/// small channel then see it closed and resubscribe, reading what they missed from the store.
const FIRST_CAPACITY: usize = 16;

/// Entries whose payload encodes to at most this go to subscribers whole: a lagging subscriber
/// keeps the channel's frames alive, so what the channel holds of them per session stays within
/// `CHANNEL_CAPACITY` times this. A larger entry goes whole while its session's and the node's
/// budgets for large entries have room ([`SESSION_LIVE_BYTES`], [`NODE_LIVE_BYTES`]), and
/// otherwise as a notice without the payload, which subscribers read from the store.
pub const LIVE_PAYLOAD_BYTES: usize = 8 * 1024;

/// A committed entry with its encodings, made once and shared by every subscriber. A frame read
/// from the store keeps the entry as stored ([`RawEntry`]): its encodings are made from the stored
/// text, and the entry is parsed only if someone asks for it ([`Frame::entry`]).
#[derive(Debug)]
pub struct Frame {
    seq: Seq,
    /// The entry (for a notice, without its payload); made from `raw` on first use.
    entry: OnceLock<Arc<Entry>>,
    /// The entry as the store holds it (its text), for a frame committed or read from the store.
    raw: Option<RawEntry>,
    /// Published to every subscriber (a committed entry), not read by one reader catching up:
    /// its SSE event is made once and copied.
    live: bool,
    /// Only says that the entry was committed: its payload is in the store.
    notice: bool,
    /// Not an entry: tells a reader at `seq` what compaction removed after it.
    reset: Option<Box<Reset>>,
    sse: OnceLock<Bytes>,
    ws: OnceLock<String>,
    /// The payload's length as JSON, measured once (for the live-payload bound and metrics).
    payload_bytes: OnceLock<usize>,
    /// For a large entry carried whole to subscribers: its bytes, held against the fan-out's
    /// budgets until the frame is dropped.
    _charge: Option<Charge>,
}

impl Frame {
    fn with(seq: Seq, entry: Option<Arc<Entry>>, raw: Option<RawEntry>) -> Self {
        Self {
            seq,
            entry: entry.map(OnceLock::from).unwrap_or_default(),
            live: raw.is_none(),
            raw,
            notice: false,
            reset: None,
            sse: OnceLock::new(),
            ws: OnceLock::new(),
            payload_bytes: OnceLock::new(),
            _charge: None,
        }
    }

    /// Wraps a committed entry.
    pub fn new(entry: Arc<Entry>) -> Arc<Self> {
        Arc::new(Self::with(entry.seq, Some(entry), None))
    }

    /// Wraps an entry read from the store, as stored.
    pub fn stored(raw: RawEntry) -> Arc<Self> {
        Arc::new(Self::with(raw.seq, None, Some(raw)))
    }

    /// Wraps an entry just committed, as stored: its encodings are made from the stored text,
    /// once for every subscriber.
    pub fn committed(raw: RawEntry) -> Arc<Self> {
        Arc::new(Self {
            live: true,
            ..Self::with(raw.seq, None, Some(raw))
        })
    }

    /// The entry, parsed from the stored text on first use for a frame read from the store.
    pub fn entry(&self) -> &Arc<Entry> {
        self.entry.get_or_init(|| {
            let raw = self.raw.as_ref();
            let parsed = raw.map(RawEntry::parse);
            match parsed {
                Some(Ok(e)) => Arc::new(e),
                other => {
                    if let Some(Err(e)) = other {
                        tracing::error!(seq = %self.seq, error = %e, "a stored entry does not parse");
                    }
                    Arc::new(Entry {
                        seq: self.seq,
                        ts: raw.map_or(0, |r| r.ts),
                        kind: raw.map(|r| r.kind().to_owned()).unwrap_or_default(),
                        author: raw.map(|r| r.author().to_owned()).unwrap_or_default(),
                        payload: serde_json::Value::Null,
                    })
                }
            }
        })
    }

    /// The entry's kind.
    pub fn kind(&self) -> &str {
        match &self.raw {
            Some(raw) => raw.kind(),
            None => &self.entry().kind,
        }
    }

    /// The length of the entry's payload encoded as JSON, measured on first use.
    pub fn payload_bytes(&self) -> usize {
        *self.payload_bytes.get_or_init(|| match &self.raw {
            Some(raw) => raw.payload().len(),
            None => encoded_len(&self.entry().payload),
        })
    }

    /// What live subscribers get for this entry: the frame itself when its payload is at most
    /// [`LIVE_PAYLOAD_BYTES`]; a copy holding a charge against `session` and `node` when a
    /// larger one fits both; else a notice without the payload.
    fn for_subscribers(self: &Arc<Self>, session: &Arc<Budget>, node: &Arc<Budget>) -> Arc<Self> {
        let bytes = self.payload_bytes();
        if bytes <= LIVE_PAYLOAD_BYTES {
            return self.clone();
        }
        if let Some(charge) = Charge::take(session, node, bytes.saturating_mul(budget::COPIES)) {
            let entry = self.entry.get().cloned();
            return Arc::new(Self {
                live: true,
                payload_bytes: OnceLock::from(bytes),
                _charge: Some(charge),
                ..Self::with(self.seq, entry, self.raw.clone())
            });
        }
        // The notice's fields, without parsing the payload left out.
        let (ts, kind, author) = match &self.raw {
            Some(raw) => (raw.ts, raw.kind().to_owned(), raw.author().to_owned()),
            None => {
                let e = self.entry();
                (e.ts, e.kind.clone(), e.author.clone())
            }
        };
        let entry = Entry {
            seq: self.seq,
            ts,
            kind,
            author,
            payload: serde_json::Value::Null,
        };
        let mut notice = Self::with(self.seq, Some(Arc::new(entry)), None);
        notice.notice = true;
        Arc::new(notice)
    }

    /// A reset for a reader whose cursor is `at`: it moves no cursor and is no entry. Only
    /// [`crate::session::tail::Tail`] makes these, for what compaction removed after `at`.
    pub fn reset(at: Seq, reset: Reset) -> Arc<Self> {
        let entry = Entry {
            seq: at,
            ts: now_ms(),
            kind: RESET_EVENT.to_owned(),
            author: "server".to_owned(),
            payload: serde_json::Value::Null,
        };
        let mut frame = Self::with(at, Some(Arc::new(entry)), None);
        frame.reset = Some(Box::new(reset));
        Arc::new(frame)
    }

    /// The reset this frame carries instead of an entry, if it is one.
    pub fn as_reset(&self) -> Option<&Reset> {
        self.reset.as_deref()
    }

    /// Whether this only announces the entry, whose payload must be read from the store.
    pub fn is_notice(&self) -> bool {
        self.notice
    }

    /// The entry's seq.
    pub fn seq(&self) -> Seq {
        self.seq
    }

    /// The SSE event: `id:` seq, `event:` kind, `data:` the entry as JSON.
    pub fn sse(&self) -> &Bytes {
        self.sse.get_or_init(|| {
            if let Some(reset) = &self.reset {
                // No `id:`: a reset moves no cursor.
                let data = serde_json::to_string(reset).unwrap_or_default();
                return Bytes::from(format!("event: {RESET_EVENT}\ndata: {data}\n\n"));
            }
            if let Some(raw) = &self.raw {
                let mut out = BytesMut::with_capacity(raw.sse_len());
                raw.write_sse(&mut out);
                return out.freeze();
            }
            let data = serde_json::to_string(&**self.entry()).unwrap_or_default();
            Bytes::from(format!(
                "id: {}\nevent: {}\ndata: {}\n\n",
                self.seq,
                self.kind(),
                data
            ))
        })
    }

    /// Appends [`Frame::sse`] to `out`. A frame read from the store belongs to the one reader
    /// catching up, so its event is written straight into that reader's buffer from the stored
    /// text and not kept; a live frame's event is made once for every subscriber and copied.
    pub fn write_sse(&self, out: &mut BytesMut) {
        match &self.raw {
            Some(raw) if !self.live && self.sse.get().is_none() => raw.write_sse(out),
            _ => out.extend_from_slice(self.sse()),
        }
    }

    /// The viewer WebSocket frame (`ServerToViewer::Entry`).
    pub fn ws(&self) -> &str {
        self.ws.get_or_init(|| {
            if let Some(reset) = &self.reset {
                return serde_json::to_string(&ServerToViewer::Reset((**reset).clone()))
                    .unwrap_or_default();
            }
            match &self.raw {
                // `{"type":"entry",` and the entry's own fields, as serde tags the variant.
                Some(raw) => {
                    let mut out = String::with_capacity(raw.payload().len() + 96);
                    out.push_str("{\"type\":\"entry\",");
                    raw.write_fields(&mut out);
                    out
                }
                None => serde_json::to_string(&ServerToViewer::Entry((**self.entry()).clone()))
                    .unwrap_or_default(),
            }
        })
    }
}

/// Length of `value` encoded as JSON, without building the encoding.
pub(crate) fn encoded_len(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

/// Inputs waiting for a live bridge connection before the hub stops queueing them and asks it
/// to read the store instead.
const BRIDGE_INPUT_CAPACITY: usize = 256;

/// What the hub hands the live bridge connection of a session: its inputs, in seq order.
#[derive(Debug, Clone)]
pub enum InputFeed {
    /// A committed input; every entry before it has been looked at.
    Input(Arc<Frame>),
    /// Entries were skipped (relayed from another node after a higher seq, or not queued while
    /// the channel was full): read the inputs after the last one delivered from the store,
    /// which holds everything up to the entry that revealed the gap.
    Resync,
}

/// The sending end of a bridge connection's input feed.
pub type InputSender = mpsc::Sender<InputFeed>;

/// A bridge connection's input feed, with room for [`BRIDGE_INPUT_CAPACITY`] inputs.
pub fn input_feed() -> (InputSender, mpsc::Receiver<InputFeed>) {
    mpsc::channel(BRIDGE_INPUT_CAPACITY)
}

/// What the hub can ask a live bridge connection to do.
#[derive(Debug, Clone)]
pub enum BridgeControl {
    /// Close with this code and reason.
    Close {
        /// WebSocket close code.
        code: u16,
        /// Reason sent in the close frame.
        reason: String,
    },
}

#[derive(Debug)]
struct Topic {
    tx: broadcast::Sender<Arc<Frame>>,
    /// The channel has its full capacity.
    grown: bool,
    /// The large entries its fan-out holds whole.
    budget: Arc<Budget>,
}

impl Topic {
    fn new(capacity: usize) -> Self {
        let first = capacity.min(FIRST_CAPACITY);
        Self {
            tx: broadcast::channel(first).0,
            grown: first == capacity,
            budget: Budget::new(SESSION_LIVE_BYTES),
        }
    }

    /// Replaces the small channel with a full one; the old one's receivers see it closed.
    fn grow(&mut self, capacity: usize) {
        if !self.grown {
            self.tx = broadcast::channel(capacity).0;
            self.grown = true;
        }
    }
}

#[derive(Debug)]
struct Link {
    conn: u64,
    /// The claim epoch of the connection (0 on a single node).
    epoch: u64,
    /// The bridge (producer) on this connection; `None` for a placeholder without one.
    producer: Option<ProducerId>,
    /// Highest epoch claimed for this session on another node: local connections below it are
    /// superseded.
    claimed_elsewhere: u64,
    /// The bridge that made that claim, when known.
    claimed_by: Option<ProducerId>,
    control: Option<mpsc::UnboundedSender<BridgeControl>>,
    /// The connection's input feed, while it is attached here.
    inputs: Option<InputSender>,
    /// Highest seq looked at for the feed: everything up to it was handed over or covered by
    /// a `Resync`.
    seen: Seq,
    /// A feed item was dropped on a full channel: the next one must be a `Resync`.
    overflowed: bool,
    status: BridgeStatus,
}

impl Link {
    /// Hands `frame` to the bridge's input feed if it is an input; a gap before it becomes a
    /// `Resync`. Never blocks (called under the hub's lock).
    fn feed(&mut self, frame: &Arc<Frame>) {
        let Some(tx) = &self.inputs else {
            return;
        };
        let seq = frame.seq();
        if seq <= self.seen {
            return;
        }
        let contiguous = seq == self.seen.next();
        self.seen = seq;
        let item = if self.overflowed || !contiguous {
            InputFeed::Resync
        } else if moor_protocol::kinds::is_input(frame.kind()) {
            InputFeed::Input(frame.clone())
        } else {
            return;
        };
        self.overflowed = match tx.try_send(item) {
            Ok(()) => false,
            Err(mpsc::error::TrySendError::Full(_)) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        };
    }
}

#[derive(Debug)]
struct Inner {
    topics: HashMap<SessionId, Topic>,
    links: HashMap<SessionId, Link>,
    /// Live viewer streams (SSE and WebSocket) per session.
    viewers: HashMap<SessionId, u32>,
    next_conn: u64,
    capacity: usize,
}

/// Cheap to clone; one per server.
#[derive(Debug, Clone)]
pub struct Hub {
    inner: Arc<Mutex<Inner>>,
    metrics: Arc<crate::metrics::Metrics>,
    /// Pages of history shared by the tails catching up at once.
    pages: Arc<SharedPages>,
    /// The large entries the node's fan-out holds whole, across sessions.
    live_budget: Arc<Budget>,
}

impl Default for Hub {
    fn default() -> Self {
        Self::with_capacity(CHANNEL_CAPACITY)
    }
}

impl Hub {
    /// A hub whose per-session channels buffer `capacity` entries before a subscriber lags.
    pub fn with_capacity(capacity: usize) -> Self {
        let inner = Inner {
            topics: HashMap::new(),
            links: HashMap::new(),
            viewers: HashMap::new(),
            next_conn: 0,
            capacity: capacity.max(1),
        };
        Self {
            inner: Arc::new(Mutex::new(inner)),
            metrics: Arc::default(),
            pages: Arc::default(),
            live_budget: Budget::new(NODE_LIVE_BYTES),
        }
    }

    /// The same hub counting into `metrics` instead of a fresh set.
    pub fn with_metrics(mut self, metrics: crate::metrics::Metrics) -> Self {
        self.metrics = Arc::new(metrics);
        self
    }

    /// The server's metrics.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }

    /// The pages of history the tails of this server read through.
    pub fn pages(&self) -> &Arc<SharedPages> {
        &self.pages
    }

    /// Sessions whose bridge is connected here.
    pub fn live_sessions(&self) -> usize {
        self.lock().links.len()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave the maps half-updated in a way that
        // matters more than losing the server, so recover the guard.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Receives every entry of `session` committed from now on, until the receiver says the
    /// channel is closed: then subscribe again and read what was committed since from the store
    /// (a session's channel is replaced when it grows, see [`FIRST_CAPACITY`]).
    pub fn subscribe(&self, session: SessionId) -> broadcast::Receiver<Arc<Frame>> {
        let mut inner = self.lock();
        let capacity = inner.capacity;
        let topic = inner
            .topics
            .entry(session)
            .or_insert_with(|| Topic::new(capacity));
        if topic.tx.receiver_count() > 0 {
            topic.grow(capacity);
        }
        topic.tx.subscribe()
    }

    /// Announces committed entries, in seq order: to the session's subscribers, and its inputs
    /// to its live bridge connection here, if any.
    pub fn publish(&self, session: SessionId, frames: impl IntoIterator<Item = Arc<Frame>>) {
        let (tx, budget, frames) = {
            let mut inner = self.lock();
            let frames: Vec<Arc<Frame>> = frames.into_iter().collect();
            if let Some(link) = inner.links.get_mut(&session) {
                for f in &frames {
                    link.feed(f);
                }
            }
            let capacity = inner.capacity;
            match inner.topics.get_mut(&session) {
                Some(t) if t.tx.receiver_count() > 0 => {
                    if frames.len() > FIRST_CAPACITY / 2 {
                        t.grow(capacity);
                    }
                    (t.tx.clone(), t.budget.clone(), frames)
                }
                _ => return,
            }
        };
        for f in frames {
            // No receivers is fine: nobody is watching.
            let _ = tx.send(f.for_subscribers(&budget, &self.live_budget));
        }
    }

    /// Drops the topic of `session` when the one receiver still counted is the caller's, which
    /// is about to go: otherwise every session ever watched would keep its channel.
    pub(crate) fn release(&self, session: SessionId) {
        let mut inner = self.lock();
        if inner
            .topics
            .get(&session)
            .is_some_and(|t| t.tx.receiver_count() <= 1)
        {
            inner.topics.remove(&session);
        }
    }

    /// Registers a new connection of bridge `producer` for `session` with its claim `epoch` (0
    /// on a single node), returning its connection number. The connection it supersedes, if
    /// any, is told to close: with 4013 when it is the same bridge's (which reconnects if it
    /// still uses that one: this may be an attempt it gave up on, arriving late), else 4003. A
    /// connection whose epoch another node has already outbid is told the same at once. The
    /// session's inputs committed after `head` (its head when the connection read it, before
    /// attaching) go to `inputs`.
    pub fn attach_bridge(
        &self,
        session: SessionId,
        producer: ProducerId,
        control: mpsc::UnboundedSender<BridgeControl>,
        inputs: InputSender,
        epoch: u64,
        head: Seq,
    ) -> u64 {
        let mut inner = self.lock();
        inner.next_conn += 1;
        let conn = inner.next_conn;
        let (claimed_elsewhere, claimed_by) = inner
            .links
            .get(&session)
            .map_or((0, None), |l| (l.claimed_elsewhere, l.claimed_by));
        if epoch < claimed_elsewhere {
            let _ = control.send(superseded(claimed_by.is_none_or(|p| p == producer)));
        }
        let old = inner.links.insert(
            session,
            Link {
                conn,
                epoch,
                producer: Some(producer),
                claimed_elsewhere,
                claimed_by,
                control: Some(control),
                inputs: Some(inputs),
                seen: head,
                overflowed: false,
                status: BridgeStatus {
                    online: true,
                    since: Some(now_ms()),
                    last_close_code: None,
                    last_reason: None,
                    spool_unacked: None,
                },
            },
        );
        if let Some(old) = old {
            if let Some(control) = old.control {
                let _ = control.send(superseded(old.producer == Some(producer)));
            }
        }
        conn
    }

    /// Another node claimed `session`'s bridge with `epoch` for bridge `producer` (`None` when
    /// not known): closes the local connection if it is older (with 4003 only when `producer`
    /// is known to be another bridge), and remembers the claim for connections still being set
    /// up here.
    pub fn supersede_bridge(&self, session: SessionId, epoch: u64, producer: Option<ProducerId>) {
        let mut inner = self.lock();
        let link = inner.links.entry(session).or_insert_with(|| Link {
            conn: 0,
            epoch: 0,
            producer: None,
            claimed_elsewhere: 0,
            claimed_by: None,
            control: None,
            inputs: None,
            seen: Seq::ZERO,
            overflowed: false,
            status: offline(),
        });
        if epoch > link.claimed_elsewhere {
            link.claimed_elsewhere = epoch;
            link.claimed_by = producer;
        }
        if link.epoch < epoch {
            if let Some(control) = link.control.take() {
                // Another bridge only when the claim says so: a bridge told to stop on a guess
                // would leave its agent unreachable, one told to reconnect takes the session
                // back at worst (a claim found while notices were lost names no bridge).
                let same = producer.is_none_or(|p| link.producer == Some(p));
                let _ = control.send(superseded(same));
            }
        }
    }

    /// The claim epoch of every bridge connected to this node.
    pub fn bridge_epochs(&self) -> Vec<(SessionId, u64)> {
        let inner = self.lock();
        inner
            .links
            .iter()
            .filter(|(_, l)| l.control.is_some())
            .map(|(s, l)| (*s, l.epoch))
            .collect()
    }

    /// Whether anyone on this node follows `session`'s entries (a subscriber, or its bridge).
    pub fn is_watched(&self, session: SessionId) -> bool {
        let inner = self.lock();
        inner
            .topics
            .get(&session)
            .is_some_and(|t| t.tx.receiver_count() > 0)
            || inner
                .links
                .get(&session)
                .is_some_and(|l| l.inputs.is_some())
    }

    /// The sessions someone on this node follows (subscribers or a bridge).
    pub fn watched(&self) -> Vec<SessionId> {
        let inner = self.lock();
        let sessions: std::collections::HashSet<SessionId> = inner
            .topics
            .iter()
            .filter(|(_, t)| t.tx.receiver_count() > 0)
            .map(|(s, _)| *s)
            .chain(
                inner
                    .links
                    .iter()
                    .filter(|(_, l)| l.inputs.is_some())
                    .map(|(s, _)| *s),
            )
            .collect();
        sessions.into_iter().collect()
    }

    /// Records that connection `conn` ended, unless a newer one has taken its place.
    pub fn detach_bridge(
        &self,
        session: SessionId,
        conn: u64,
        close_code: Option<u16>,
        reason: &str,
    ) {
        let mut inner = self.lock();
        if let Some(link) = inner.links.get_mut(&session) {
            if link.conn == conn {
                link.control = None;
                link.inputs = None;
                link.status = BridgeStatus {
                    online: false,
                    since: Some(now_ms()),
                    last_close_code: close_code,
                    last_reason: Some(reason.to_owned()),
                    spool_unacked: None,
                };
            }
        }
    }

    /// Records the spool depth connection `conn` of `session` reported (0 is kept as none),
    /// unless a newer connection has taken its place.
    pub fn bridge_spool(&self, session: SessionId, conn: u64, unacked: u64) {
        let mut inner = self.lock();
        if let Some(link) = inner.links.get_mut(&session) {
            if link.conn == conn && link.status.online {
                link.status.spool_unacked = (unacked > 0).then_some(unacked);
            }
        }
    }

    /// Asks the live bridge of `session` to do something; false when none is connected here.
    pub fn control_bridge(&self, session: SessionId, cmd: BridgeControl) -> bool {
        let inner = self.lock();
        inner
            .links
            .get(&session)
            .and_then(|l| l.control.as_ref())
            .is_some_and(|c| c.send(cmd).is_ok())
    }

    /// Counts a live viewer of `session` for as long as the returned guard lives.
    pub fn watching(&self, session: SessionId) -> Watching {
        *self.lock().viewers.entry(session).or_default() += 1;
        Watching {
            hub: self.clone(),
            session,
        }
    }

    /// How many viewers watch `session` on this server now.
    pub fn watchers(&self, session: SessionId) -> u32 {
        self.lock().viewers.get(&session).copied().unwrap_or(0)
    }

    /// The bridge link of `session` as this server sees it.
    pub fn bridge_status(&self, session: SessionId) -> BridgeStatus {
        let inner = self.lock();
        inner
            .links
            .get(&session)
            .map(|l| l.status.clone())
            .unwrap_or_else(offline)
    }
}

fn offline() -> BridgeStatus {
    BridgeStatus {
        online: false,
        since: None,
        last_close_code: None,
        last_reason: None,
        spool_unacked: None,
    }
}

/// The close for a connection a later one took over; `same_bridge`: both are one bridge's.
fn superseded(same_bridge: bool) -> BridgeControl {
    let (code, reason) = close::superseded(same_bridge);
    BridgeControl::Close {
        code,
        reason: reason.into(),
    }
}

/// A live viewer, counted in [`Hub::watchers`] until dropped.
#[derive(Debug)]
pub struct Watching {
    hub: Hub,
    session: SessionId,
}

impl Drop for Watching {
    fn drop(&mut self) {
        let mut inner = self.hub.lock();
        if let Some(n) = inner.viewers.get_mut(&self.session) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                inner.viewers.remove(&self.session);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use moor_protocol::kinds;

    use super::*;

    #[test]
    fn a_committed_frames_event_is_made_once_for_every_subscriber_a_stored_ones_per_reader() {
        let raw = RawEntry::new(Seq(7), 1, kinds::AGENT_OUTPUT, "bridge", r#"{"text":"hi"}"#);
        let committed = Frame::committed(raw.clone());
        let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
        committed.write_sse(&mut a);
        committed.write_sse(&mut b);
        assert_eq!(a, b);
        assert_eq!(committed.sse.get().map(|e| &e[..]), Some(&a[..]), "kept");
        let stored = Frame::stored(raw);
        let mut c = BytesMut::new();
        stored.write_sse(&mut c);
        assert_eq!(c, a);
        assert!(
            stored.sse.get().is_none(),
            "written from the text, not kept"
        );
    }

    #[test]
    fn a_frame_read_from_the_store_encodes_as_the_entry_would() {
        let payloads = [
            serde_json::json!({"text": "plain", "n": 1, "nested": {"b": [1, 2.5, null]}}),
            serde_json::json!({"text": "quotes \" backslash \\ newline \n tab \t ü 🚀 \u{1}"}),
            serde_json::Value::Null,
            serde_json::json!("a string payload"),
        ];
        for (i, payload) in payloads.into_iter().enumerate() {
            let entry = Entry {
                seq: Seq(i as u64 + 1),
                ts: 1_733_000_000_000 + i as i64,
                kind: kinds::AGENT_OUTPUT.into(),
                author: "user:ann \"the\" admin".into(),
                payload,
            };
            let payload = serde_json::to_string(&entry.payload).unwrap();
            let raw = RawEntry::new(entry.seq, entry.ts, &entry.kind, &entry.author, &payload);
            assert_eq!(raw.json(), serde_json::to_string(&entry).unwrap());
            let live = Frame::new(Arc::new(entry.clone()));
            let stored = Frame::stored(raw);
            let mut written = BytesMut::from(&b"before"[..]);
            stored.write_sse(&mut written);
            assert_eq!(
                &written[6..],
                &live.sse()[..],
                "written from the stored text"
            );
            assert_eq!(stored.sse(), live.sse());
            assert_eq!(stored.ws(), live.ws());
            assert_eq!(stored.payload_bytes(), live.payload_bytes());
            assert_eq!(stored.kind(), live.kind());
            assert_eq!(**stored.entry(), entry);
        }
    }

    fn frame(seq: u64, kind: &str) -> Arc<Frame> {
        Frame::new(Arc::new(Entry {
            seq: Seq(seq),
            ts: 0,
            kind: kind.into(),
            author: "test".into(),
            payload: serde_json::Value::Null,
        }))
    }

    fn attach(hub: &Hub, session: SessionId, head: u64) -> mpsc::Receiver<InputFeed> {
        let (control, _) = mpsc::unbounded_channel();
        let (tx, rx) = input_feed();
        hub.attach_bridge(session, ProducerId::new(), control, tx, 0, Seq(head));
        rx
    }

    fn drain(rx: &mut mpsc::Receiver<InputFeed>) -> Vec<Option<u64>> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|f| match f {
                InputFeed::Input(f) => Some(f.seq().0),
                InputFeed::Resync => None,
            })
            .collect()
    }

    #[test]
    fn large_entries_go_whole_while_the_sessions_budget_has_room_and_as_notices_beyond_it() {
        // arrange: a subscriber of a session, and entries of 100 KiB of payload
        let hub = Hub::default();
        let session = SessionId::new();
        let mut rx = hub.subscribe(session);
        let payload = format!(r#"{{"data":"{}"}}"#, "x".repeat(100 << 10));
        let large = |seq: u64| {
            Frame::committed(RawEntry::new(
                Seq(seq),
                0,
                kinds::AGENT_PTY_OUTPUT,
                "bridge",
                &payload,
            ))
        };
        let fit = SESSION_LIVE_BYTES / (payload.len() * LIVE_COPIES);
        // act: one more than the budget holds, one at a time (a larger batch would make the hub
        // replace the channel with a full one), with nobody receiving
        for seq in 1..=fit as u64 + 1 {
            hub.publish(session, [large(seq)]);
        }
        // assert: those that fit came whole, the next as a notice
        let got: Vec<bool> = (0..=fit)
            .map(|_| rx.try_recv().unwrap().is_notice())
            .collect();
        assert!(got[..fit].iter().all(|notice| !notice), "{got:?}");
        assert!(got[fit], "the one over the budget is a notice");
        // act: the channel lets its frames go once received (they were, above); the next
        // large entry has room again
        hub.publish(session, [large(fit as u64 + 2)]);
        let next = rx.try_recv().unwrap();
        assert!(!next.is_notice());
        assert_eq!(
            next.entry().payload["data"].as_str().map(str::len),
            Some(100 << 10)
        );
        assert!(
            next.sse().len() > 100 << 10,
            "the event carries the payload"
        );
    }

    #[test]
    fn the_bridge_gets_its_sessions_inputs_and_nothing_else() {
        // arrange
        let hub = Hub::default();
        let (mine, other) = (SessionId::new(), SessionId::new());
        let mut rx = attach(&hub, mine, 2);
        // act
        hub.publish(other, [frame(1, kinds::INPUT_TEXT)]);
        hub.publish(
            mine,
            [
                frame(3, "agent.text"),
                frame(4, kinds::INPUT_TEXT),
                frame(5, kinds::INPUT_DELIVERED),
                frame(6, kinds::INPUT_TEXT),
            ],
        );
        // assert: seqs 4 and 6 only, in order; the session counts as followed for the relay
        assert_eq!(drain(&mut rx), [Some(4), Some(6)]);
        assert!(hub.is_watched(mine) && !hub.is_watched(other));
    }

    #[test]
    fn a_gap_or_a_full_feed_becomes_one_resync_and_old_frames_are_ignored() {
        // arrange
        let hub = Hub::default();
        let session = SessionId::new();
        let mut rx = attach(&hub, session, 0);
        // act: seq 3 arrives before 2 (relayed late), then 2, then a duplicate of 3
        hub.publish(session, [frame(1, kinds::INPUT_TEXT)]);
        hub.publish(session, [frame(3, kinds::INPUT_TEXT)]);
        hub.publish(
            session,
            [frame(2, kinds::INPUT_TEXT), frame(3, kinds::INPUT_TEXT)],
        );
        // assert
        assert_eq!(drain(&mut rx), [Some(1), None]);
        // act: more inputs than the feed holds, then one more once it has room
        let n = BRIDGE_INPUT_CAPACITY as u64 + 10;
        hub.publish(session, (4..4 + n).map(|s| frame(s, kinds::INPUT_TEXT)));
        let queued = drain(&mut rx);
        hub.publish(session, [frame(4 + n, kinds::INPUT_TEXT)]);
        // assert: what fitted, then a resync in place of the rest
        assert_eq!(queued.len(), BRIDGE_INPUT_CAPACITY);
        assert_eq!(drain(&mut rx), [None]);
    }

    #[test]
    fn a_detached_bridge_gets_nothing_more() {
        let hub = Hub::default();
        let session = SessionId::new();
        let mut rx = attach(&hub, session, 0);
        hub.detach_bridge(session, 1, None, "gone");
        hub.publish(session, [frame(1, kinds::INPUT_TEXT)]);
        assert!(drain(&mut rx).is_empty());
        assert!(!hub.is_watched(session));
    }

    #[test]
    fn a_claim_from_another_node_stops_the_local_bridge_only_when_it_names_another_bridge() {
        let hub = Hub::default();
        let mine = ProducerId::new();
        let attach = |session: SessionId| {
            let (tx, mut rx) = mpsc::unbounded_channel();
            hub.attach_bridge(session, mine, tx, input_feed().0, 1, Seq::ZERO);
            move || match rx.try_recv() {
                Ok(BridgeControl::Close { code, .. }) => Some(code),
                _ => None,
            }
        };
        // claimed by this bridge's later connection on another node: reconnect
        let s = SessionId::new();
        let mut told = attach(s);
        hub.supersede_bridge(s, 2, Some(mine));
        assert_eq!(told(), Some(close::SUPERSEDED_BY_SAME_BRIDGE));
        // a claim found while notices were lost names no bridge: reconnect, not stop
        let s = SessionId::new();
        let mut told = attach(s);
        hub.supersede_bridge(s, 2, None);
        assert_eq!(told(), Some(close::SUPERSEDED_BY_SAME_BRIDGE));
        // another bridge claimed it: stop
        let s = SessionId::new();
        let mut told = attach(s);
        hub.supersede_bridge(s, 2, Some(ProducerId::new()));
        assert_eq!(told(), Some(close::SUPERSEDED));
    }
}
