//! The server's Prometheus metrics: one [`Metrics`] per server, carried by the hub so that the
//! committer, the tails and the transports count without any new plumbing.
//!
//! Every handle is resolved once, here: counting is an atomic add, with no lock, no label
//! lookup and no allocation per entry. Histograms are observed once per group commit. Values
//! that are cheaper to read than to keep up to date (live sessions, resident memory) are read
//! when scraped, by [`Metrics::render`]; the memory budget they are compared with is fixed at
//! start ([`Metrics::with_memory_budget`]). Notification deliveries are labelled by sink and
//! outcome, a handful of pairs looked up once per delivery (a network round trip each).
//!
//! Calls nothing in the crate.

use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

/// The content type of [`Metrics::render`]'s text (OpenMetrics, which Prometheus scrapes).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labeled<M> = Family<[(&'static str, &'static str); 1], M>;
type Labeled2<M> = Family<[(&'static str, &'static str); 2], M>;

/// Open connections of one kind for as long as it lives.
#[derive(Debug)]
pub struct Open(Gauge);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Which transport a viewer reads from.
#[derive(Debug, Clone, Copy)]
pub enum Transport {
    /// Server-sent events.
    Sse,
    /// The viewer WebSocket.
    Ws,
}

/// Where a notification went.
#[derive(Debug, Clone, Copy)]
pub enum NotifySink {
    /// A browser's Web Push subscription.
    WebPush,
    /// An ntfy topic.
    Ntfy,
    /// A signed webhook.
    Webhook,
    /// A sink of a kind this server does not know (refused).
    Other,
}

impl NotifySink {
    /// The sink for a stored sink row's `kind`.
    pub fn of_kind(kind: &str) -> Self {
        match kind {
            "ntfy" => Self::Ntfy,
            "webhook" => Self::Webhook,
            _ => Self::Other,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::WebPush => "webpush",
            Self::Ntfy => "ntfy",
            Self::Webhook => "webhook",
            Self::Other => "other",
        }
    }
}

/// How one attempt to deliver a notification to one target ended.
#[derive(Debug, Clone, Copy)]
pub enum NotifyOutcome {
    /// The push service or sink took it.
    Sent,
    /// The push service said the subscription no longer exists (it is removed).
    Gone,
    /// A transient failure: tried again later.
    Retry,
    /// Refused for good for this notification.
    Failed,
}

impl NotifyOutcome {
    fn label(self) -> &'static str {
        match self {
            Self::Sent => "sent",
            Self::Gone => "gone",
            Self::Retry => "retry",
            Self::Failed => "failed",
        }
    }
}

/// The notification sender's metrics: the outbox's size and the deliveries' outcomes.
#[derive(Debug, Clone, Default)]
pub struct NotifyMetrics {
    /// Rows in the notification outbox, by state (as this node's sender last counted them).
    pub outbox: OutboxGauges,
    deliveries: Labeled2<Counter>,
}

impl NotifyMetrics {
    /// One delivery attempt to `sink` ended with `outcome`.
    pub fn delivered(&self, sink: NotifySink, outcome: NotifyOutcome) {
        self.deliveries
            .get_or_create(&[("sink", sink.label()), ("outcome", outcome.label())])
            .inc();
    }
}

/// How an input request ended.
#[derive(Debug, Clone, Copy)]
pub enum InputOutcome {
    /// Appended to the log.
    Accepted,
    /// A repeated `client_msg_id` with the same content: answered with the stored seq.
    Duplicate,
    /// Refused: invalid, a repeated id with other content, or an error.
    Refused,
}

/// The server's metrics (see `docs/operating.md` for their meanings).
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    bridges: Gauge,
    hosts: Gauge,
    sse: Gauge,
    ws_viewers: Gauge,
    live_sessions: Gauge,
    /// Entries newly stored.
    pub entries_appended: Counter,
    /// Bytes of the stored entries' payloads, as JSON.
    pub bytes_appended: Counter,
    commit_seconds: Histogram,
    group_entries: Histogram,
    deliveries_sse: Counter,
    deliveries_ws: Counter,
    /// Tails that fell behind the live stream and read the store to catch up.
    pub viewer_lagged: Counter,
    cut_off_sse: Counter,
    cut_off_ws: Counter,
    /// Store pages read by tails (replays and catch-ups).
    pub replay_pages: Counter,
    inputs_accepted: Counter,
    inputs_duplicate: Counter,
    inputs_refused: Counter,
    /// Failed store operations on the append and replay paths and the readiness probe.
    pub store_errors: Counter,
    resident: Gauge,
    storage_full: Gauge,
    storage_full_refusals: Counter,
    /// The notification sender's outbox and deliveries.
    pub notify: NotifyMetrics,
    relay_delay: Histogram,
}

/// The notification outbox's size, by row state.
#[derive(Debug, Clone, Default)]
pub struct OutboxGauges {
    pending: Gauge,
    sent: Gauge,
    dropped: Gauge,
}

impl OutboxGauges {
    /// Records a count of (pending, sent, dropped) rows.
    pub fn set(&self, (pending, sent, dropped): (u64, u64, u64)) {
        let g = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.pending.set(g(pending));
        self.sent.set(g(sent));
        self.dropped.set(g(dropped));
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh set, registered under `moord_` (resident memory under `process_`), without a
    /// memory budget.
    pub fn new() -> Self {
        Self::with_memory_budget(None)
    }

    /// A fresh set whose `moord_memory_budget_bytes` is `budget` (not exported without one).
    pub fn with_memory_budget(budget: Option<u64>) -> Self {
        let mut root = Registry::default();
        let resident = Gauge::default();
        root.register_with_unit(
            "process_resident_memory",
            "Resident memory of the server process",
            Unit::Bytes,
            resident.clone(),
        );
        let r = root.sub_registry_with_prefix("moord");
        if let Some(bytes) = budget {
            let gauge: Gauge = Gauge::default();
            gauge.set(i64::try_from(bytes).unwrap_or(i64::MAX));
            r.register_with_unit(
                "memory_budget",
                "The memory the server may use: --memory-budget-bytes, else its cgroup's limit",
                Unit::Bytes,
                gauge,
            );
        }
        let connections = Labeled::<Gauge>::default();
        r.register(
            "connections",
            "Open connections by kind: bridge sockets, machine links (moor host), SSE streams, viewer WebSockets",
            connections.clone(),
        );
        let live_sessions = Gauge::default();
        r.register(
            "live_sessions",
            "Sessions whose bridge is connected to this node",
            live_sessions.clone(),
        );
        let entries_appended = Counter::default();
        r.register(
            "entries_appended",
            "Entries newly stored in the log",
            entries_appended.clone(),
        );
        let bytes_appended = Counter::default();
        r.register_with_unit(
            "appended",
            "Payload bytes (as JSON) of the entries newly stored",
            Unit::Bytes,
            bytes_appended.clone(),
        );
        // 100 µs .. ~6.5 s.
        let commit_seconds = Histogram::new(exponential_buckets(0.0001, 4.0, 9));
        r.register_with_unit(
            "commit_duration",
            "Time one group commit (one store transaction) took",
            Unit::Seconds,
            commit_seconds.clone(),
        );
        // 1 .. 8192 entries.
        let group_entries = Histogram::new(exponential_buckets(1.0, 4.0, 8));
        r.register(
            "commit_group_entries",
            "Entries in one group commit",
            group_entries.clone(),
        );
        let deliveries = Labeled::<Counter>::default();
        r.register(
            "viewer_deliveries",
            "Entries delivered to viewers, by transport",
            deliveries.clone(),
        );
        let viewer_lagged = Counter::default();
        r.register(
            "viewer_lagged",
            "Times a viewer fell behind the live stream and caught up from the store",
            viewer_lagged.clone(),
        );
        let cut_off = Labeled::<Counter>::default();
        r.register(
            "viewer_cut_off",
            "Viewers disconnected for reading nothing within the stall timeout, by transport",
            cut_off.clone(),
        );
        let replay_pages = Counter::default();
        r.register(
            "replay_pages",
            "Pages of entries read from the store for viewers (replays and catch-ups)",
            replay_pages.clone(),
        );
        let inputs = Labeled::<Counter>::default();
        r.register("inputs", "Input requests by outcome", inputs.clone());
        let store_errors = Counter::default();
        r.register(
            "store_errors",
            "Failed store operations (appends, replay reads, readiness probes)",
            store_errors.clone(),
        );
        let storage_full = Gauge::default();
        r.register(
            "storage_full",
            "1 while the last write to the database or the data dir failed for a full disk, else 0",
            storage_full.clone(),
        );
        let storage_full_refusals = Counter::default();
        r.register(
            "storage_full_refusals",
            "Writes (append batches, blob uploads) refused because the disk was full",
            storage_full_refusals.clone(),
        );
        let outbox = Labeled::<Gauge>::default();
        r.register(
            "notify_outbox_rows",
            "Rows in the notification outbox by state (pending, sent, dropped), as last counted by this node's sender",
            outbox.clone(),
        );
        // One statement per label: a family's guard must be dropped before the next insert.
        let state = |s| outbox.get_or_create(&[("state", s)]).clone();
        let notify_outbox = OutboxGauges {
            pending: state("pending"),
            sent: state("sent"),
            dropped: state("dropped"),
        };
        let deliveries_by_sink = Labeled2::<Counter>::default();
        r.register(
            "notifications",
            "Notification delivery attempts by sink (webpush, ntfy, webhook) and outcome (sent, gone, retry, failed)",
            deliveries_by_sink.clone(),
        );
        // 1 ms .. ~8 s.
        let relay_delay = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        r.register_with_unit(
            "relay_delay",
            "Time from an entry's commit on another node to its publication here by the cluster relay",
            Unit::Seconds,
            relay_delay.clone(),
        );
        let conn = |kind| connections.get_or_create(&[("kind", kind)]).clone();
        let transport = |f: &Labeled<Counter>, t| f.get_or_create(&[("transport", t)]).clone();
        let input = |o| inputs.get_or_create(&[("outcome", o)]).clone();
        Self {
            bridges: conn("bridge"),
            hosts: conn("host"),
            sse: conn("sse"),
            ws_viewers: conn("ws_viewer"),
            live_sessions,
            entries_appended,
            bytes_appended,
            commit_seconds,
            group_entries,
            deliveries_sse: transport(&deliveries, "sse"),
            deliveries_ws: transport(&deliveries, "ws"),
            viewer_lagged,
            cut_off_sse: transport(&cut_off, "sse"),
            cut_off_ws: transport(&cut_off, "ws"),
            replay_pages,
            inputs_accepted: input("accepted"),
            inputs_duplicate: input("duplicate"),
            inputs_refused: input("refused"),
            store_errors,
            resident,
            storage_full,
            storage_full_refusals,
            notify: NotifyMetrics {
                outbox: notify_outbox,
                deliveries: deliveries_by_sink,
            },
            relay_delay,
            registry: root,
        }
    }

    /// Counts a bridge socket until the guard drops.
    pub fn bridge_open(&self) -> Open {
        Self::open(&self.bridges)
    }

    /// Counts a machine link (`moor host`) until the guard drops.
    pub fn host_open(&self) -> Open {
        Self::open(&self.hosts)
    }

    /// An entry committed on another node `delay` ago reached this node's hub.
    pub fn relayed(&self, delay: Duration) {
        self.relay_delay.observe(delay.as_secs_f64());
    }

    /// Counts a viewer stream on `transport` until the guard drops.
    pub fn viewer_open(&self, transport: Transport) -> Open {
        Self::open(match transport {
            Transport::Sse => &self.sse,
            Transport::Ws => &self.ws_viewers,
        })
    }

    fn open(gauge: &Gauge) -> Open {
        gauge.inc();
        Open(gauge.clone())
    }

    /// One group commit of `entries` entries that took `took`.
    pub fn commit(&self, entries: usize, took: Duration) {
        self.commit_seconds.observe(took.as_secs_f64());
        self.group_entries.observe(entries as f64);
    }

    /// `n` entries written to a viewer on `transport`.
    pub fn delivered(&self, transport: Transport, n: u64) {
        match transport {
            Transport::Sse => self.deliveries_sse.inc_by(n),
            Transport::Ws => self.deliveries_ws.inc_by(n),
        };
    }

    /// A viewer on `transport` cut off for not reading.
    pub fn cut_off(&self, transport: Transport) {
        match transport {
            Transport::Sse => self.cut_off_sse.inc(),
            Transport::Ws => self.cut_off_ws.inc(),
        };
    }

    /// One input request ended with `outcome`.
    pub fn input(&self, outcome: InputOutcome) {
        match outcome {
            InputOutcome::Accepted => self.inputs_accepted.inc(),
            InputOutcome::Duplicate => self.inputs_duplicate.inc(),
            InputOutcome::Refused => self.inputs_refused.inc(),
        };
    }

    /// A write was refused for a full disk (`cause`). Warns once per episode, not once per
    /// refusal: only when the disk was not already known to be full.
    pub fn storage_refused(&self, cause: &anyhow::Error) {
        self.storage_full_refusals.inc();
        if self.storage_full.set(1) == 0 {
            tracing::warn!(error = ?cause, "storage full: refusing appends and uploads until space is freed; reads go on");
        }
    }

    /// A write succeeded: if the disk was full, the episode is over.
    pub fn storage_written(&self) {
        if self.storage_full.get() != 0 && self.storage_full.set(0) != 0 {
            tracing::warn!("storage has space again: appends and uploads resume");
        }
    }

    /// The exposition text, with `live_sessions` as of now and the process's resident memory.
    pub fn render(&self, live_sessions: usize) -> String {
        self.live_sessions
            .set(i64::try_from(live_sessions).unwrap_or(i64::MAX));
        if let Some(bytes) = resident_bytes() {
            self.resident.set(bytes);
        }
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// Resident set size from `/proc/self/statm` (Linux); `None` elsewhere.
fn resident_bytes() -> Option<i64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: i64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // The page size is 4 KiB on every Linux target the server is built for but a few arm64
    // kernels; statm counts in the kernel's pages.
    Some(pages.saturating_mul(page_size()))
}

fn page_size() -> i64 {
    // Without libc: read it from the auxiliary vector the kernel wrote for the process.
    let Ok(auxv) = std::fs::read("/proc/self/auxv") else {
        return 4096;
    };
    const AT_PAGESZ: u64 = 6;
    for pair in auxv.chunks_exact(16) {
        let (key, value) = pair.split_at(8);
        let key = u64::from_ne_bytes(key.try_into().unwrap_or_default());
        if key == AT_PAGESZ {
            let value = u64::from_ne_bytes(value.try_into().unwrap_or_default());
            return i64::try_from(value).unwrap_or(4096);
        }
    }
    4096
}
