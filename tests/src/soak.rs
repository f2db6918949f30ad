//! The seeded chaos soak: real `moord` nodes (one on SQLite, or two on Postgres), several real
//! `moor` bridges running `moor-test-agent` (lines and PTY, trickles and bursts, small and large
//! lines, one on a login with short-lived, rotating tokens), SSE and WebSocket viewers, inputs
//! with idempotency keys, and faults drawn from the seed, many at once. At the end the
//! [invariant checker](crate::invariants) reads everything back.
//!
//! Same seed, same schedule: [`schedule`] is a pure function of the seed and the plan. What the
//! processes do in between is as timing-dependent as on a real machine; the checker does not care.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use moor_protocol::{kinds, SessionId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::net::TcpStream;

use crate::bridge::{BridgeOpts, TestBridge};
use crate::http::{Api, RawBody};
use crate::invariants::{self, InputRecord, Output, Run, SessionObs, Verdict, ViewerRecord};
use crate::pg::{LocalCluster, TestDb};
use crate::proxy::{FaultProxy, Shape};
use crate::server::{ServerOpts, TestServer};
use crate::sse::{SseClient, SseOpts};
use crate::util::signal;
use crate::ws::WsViewer;

/// Where the nodes keep the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// One node, SQLite.
    Sqlite,
    /// Two nodes sharing a Postgres database.
    Postgres,
}

impl std::str::FromStr for Store {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sqlite" => Ok(Self::Sqlite),
            "postgres" => Ok(Self::Postgres),
            _ => Err(format!("unknown store {s:?} (sqlite or postgres)")),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// Seeds the schedule, the agents' shapes and the inputs.
    pub seed: u64,
    /// How long faults are injected (the run then settles and is checked).
    pub duration: Duration,
    /// SQLite or Postgres.
    pub store: Store,
    /// Restart the machine's Postgres cluster as one of the faults (Postgres only).
    pub pg_restart: bool,
    /// `MOOR_INJECT_BUG` for `moord` (debug builds): a deliberate bug the checker must catch.
    pub inject_bug: Option<String>,
    /// Add a bridge on a user's login whose access token lives 3 s (refresh-token rotation
    /// under the same faults).
    pub token_bridge: bool,
}

/// A fault the scheduler injects.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// TCP RST on every live connection through a proxy.
    Reset {
        /// Which proxy.
        proxy: usize,
    },
    /// Plain FIN on every live connection through a proxy (WebSocket 1006).
    Cut {
        /// Which proxy.
        proxy: usize,
    },
    /// Live connections through a proxy stop forwarding, sockets kept open, for `ms`.
    HalfOpen {
        /// Which proxy.
        proxy: usize,
        /// How long.
        ms: u64,
    },
    /// New connections through a proxy refused and live ones cut, for `ms`.
    Unreachable {
        /// Which proxy.
        proxy: usize,
        /// How long.
        ms: u64,
    },
    /// Latency and a bandwidth limit on a proxy, for `ms`.
    SlowLink {
        /// Which proxy.
        proxy: usize,
        /// How long.
        ms: u64,
        /// Added to every chunk.
        latency_ms: u64,
        /// Bandwidth.
        bytes_per_sec: u64,
    },
    /// The server closes a bridge's socket with `code`.
    CloseCode {
        /// Which bridge.
        bridge: usize,
        /// The close code.
        code: u16,
    },
    /// SIGKILL to a `moord`, then a restart on the same data.
    KillServer {
        /// Which node.
        node: usize,
    },
    /// SIGSTOP to a `moord`, SIGCONT after `ms`.
    StopServer {
        /// Which node.
        node: usize,
        /// How long.
        ms: u64,
    },
    /// SIGKILL to a `moor`, then a new `moor` with a new agent run on the same session and spool.
    KillBridge {
        /// Which bridge.
        bridge: usize,
    },
    /// SIGSTOP to a `moor`, SIGCONT after `ms`.
    StopBridge {
        /// Which bridge.
        bridge: usize,
        /// How long.
        ms: u64,
    },
    /// A new viewer from a cursor at `permille` of the head; an old one leaves.
    ViewerChurn {
        /// Which bridge's session.
        bridge: usize,
        /// Cursor as a fraction of the head.
        permille: u64,
        /// WebSocket instead of SSE.
        ws: bool,
    },
    /// A viewer that asks for everything and never reads, for `ms`.
    StalledViewer {
        /// Which bridge's session.
        bridge: usize,
        /// How long it hangs on.
        ms: u64,
    },
    /// `pg_terminate_backend` on a node's connections.
    PgBackendKill {
        /// Which node.
        node: usize,
    },
    /// The machine's Postgres stopped for `ms`, then started.
    PgRestart {
        /// How long it is down.
        ms: u64,
    },
    /// A node leaves (SIGTERM) and a new one, with a new node id, takes its address.
    Membership {
        /// Which node.
        node: usize,
    },
}

impl Fault {
    /// The fault's type, for the summary.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Reset { .. } => "tcp-reset",
            Self::Cut { .. } => "tcp-cut",
            Self::HalfOpen { .. } => "half-open",
            Self::Unreachable { .. } => "unreachable",
            Self::SlowLink { .. } => "latency+bandwidth",
            Self::CloseCode { .. } => "close-code",
            Self::KillServer { .. } => "moord-sigkill",
            Self::StopServer { .. } => "moord-sigstop",
            Self::KillBridge { .. } => "moor-sigkill",
            Self::StopBridge { .. } => "moor-sigstop",
            Self::ViewerChurn { ws: false, .. } => "sse-viewer-churn",
            Self::ViewerChurn { ws: true, .. } => "ws-viewer-churn",
            Self::StalledViewer { .. } => "stalled-viewer",
            Self::PgBackendKill { .. } => "pg-backend-kill",
            Self::PgRestart { .. } => "postgres-restart",
            Self::Membership { .. } => "membership-change",
        }
    }
}

/// A fault at a time after the start.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Milliseconds after the start.
    pub at_ms: u64,
    /// What.
    pub fault: Fault,
}

/// What the schedule may target.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `moord` nodes.
    pub nodes: usize,
    /// Bridges (sessions).
    pub bridges: usize,
    /// Bridges whose `moor` may be killed.
    pub killable: Vec<usize>,
    /// Postgres faults allowed.
    pub postgres: bool,
    /// The cluster restart allowed.
    pub pg_restart: bool,
}

/// Close codes the link handles by reconnecting (every one the server may send a live bridge
/// that is not terminal).
pub const CLOSE_CODES: [u16; 7] = [1000, 1001, 1002, 1011, 4007, 4009, 4010];

/// The fault schedule for `seed`: a pure function of its arguments.
pub fn schedule(seed: u64, duration: Duration, plan: &Plan) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(seed);
    let end = duration.as_millis() as u64;
    let proxies = plan.nodes * 2;
    let mut busy: BTreeMap<String, u64> = BTreeMap::new();
    let mut steps = Vec::new();
    let mut at = 500u64;
    while at < end {
        for _ in 0..5 {
            let (fault, resources, hold) = draw(&mut rng, plan, proxies);
            let free = resources
                .iter()
                .all(|r| busy.get(r).is_none_or(|until| *until <= at));
            if free {
                for r in resources {
                    busy.insert(r, at + hold);
                }
                steps.push(Step { at_ms: at, fault });
                break;
            }
        }
        at += rng.gen_range(150..900);
    }
    steps
}

/// One fault, the resources it holds and for how long.
fn draw(rng: &mut StdRng, plan: &Plan, proxies: usize) -> (Fault, Vec<String>, u64) {
    let node_res = |n: usize| vec![format!("node{n}"), "pg".to_owned()];
    let proxy_res = |p: usize| vec![format!("proxy{p}")];
    let bridge_res = |b: usize| vec![format!("bridge{b}")];
    let all_nodes = || {
        let mut v: Vec<String> = (0..plan.nodes).map(|n| format!("node{n}")).collect();
        v.push("pg".to_owned());
        v
    };
    let proxy = rng.gen_range(0..proxies);
    let node = rng.gen_range(0..plan.nodes);
    let bridge = rng.gen_range(0..plan.bridges);
    let ms = rng.gen_range(300..3000);
    loop {
        let pick = rng.gen_range(0..100);
        return match pick {
            0..=9 => (Fault::Reset { proxy }, proxy_res(proxy), 0),
            10..=17 => (Fault::Cut { proxy }, proxy_res(proxy), 0),
            18..=25 => (Fault::HalfOpen { proxy, ms }, proxy_res(proxy), ms),
            26..=30 => (Fault::Unreachable { proxy, ms }, proxy_res(proxy), ms),
            31..=37 => (
                Fault::SlowLink {
                    proxy,
                    ms,
                    latency_ms: rng.gen_range(5..200),
                    bytes_per_sec: [0, 20_000, 200_000][rng.gen_range(0..3)],
                },
                proxy_res(proxy),
                ms,
            ),
            38..=45 => (
                Fault::CloseCode {
                    bridge,
                    code: CLOSE_CODES[rng.gen_range(0..CLOSE_CODES.len())],
                },
                bridge_res(bridge),
                0,
            ),
            46..=51 => (Fault::KillServer { node }, node_res(node), 3000),
            52..=57 => (Fault::StopServer { node, ms }, node_res(node), ms),
            58..=63 if !plan.killable.is_empty() => {
                let bridge = plan.killable[rng.gen_range(0..plan.killable.len())];
                (Fault::KillBridge { bridge }, bridge_res(bridge), 1000)
            }
            64..=70 => (Fault::StopBridge { bridge, ms }, bridge_res(bridge), ms),
            71..=80 => (
                Fault::ViewerChurn {
                    bridge,
                    permille: rng.gen_range(0..=1000),
                    ws: rng.gen_bool(0.4),
                },
                vec![],
                0,
            ),
            81..=85 => (Fault::StalledViewer { bridge, ms }, vec![], 0),
            86..=91 if plan.postgres => (Fault::PgBackendKill { node }, node_res(node), 500),
            92..=94 if plan.pg_restart => (Fault::PgRestart { ms }, all_nodes(), ms + 3000),
            95..=99 if plan.postgres => (Fault::Membership { node }, node_res(node), 3000),
            _ => continue,
        };
    }
}

/// What a run found.
#[derive(Debug)]
pub struct SoakReport {
    /// The seed.
    pub seed: u64,
    /// The store.
    pub store: Store,
    /// The schedule, with the time each step actually ran (ms after the start; `None`: skipped,
    /// its target was gone) and what it did.
    pub executed: Vec<(Step, Option<u64>, String)>,
    /// Unix ms of the start (to place violations on the schedule).
    pub started_unix_ms: i64,
    /// Entries in all logs at the end.
    pub entries: u64,
    /// Faults injected, by type (continuous ones included: lifetime caps, token rotations).
    pub faults: BTreeMap<String, u64>,
    /// The checker's verdict.
    pub verdict: Verdict,
    /// Wall time.
    pub elapsed: Duration,
}

impl SoakReport {
    /// No violation.
    pub fn passed(&self) -> bool {
        self.verdict.violations.is_empty()
    }

    /// The summary printed at the end; with violations, the schedule up to the first one and the
    /// entries involved.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "moor-soak seed {} store {:?}: {} entries, {} faults injected ({} types), {} invariant checks, {} violations, {:.0?}",
            self.seed,
            self.store,
            self.entries,
            self.faults.values().sum::<u64>(),
            self.faults.values().filter(|n| **n > 0).count(),
            self.verdict.checks,
            self.verdict.violations.len(),
            self.elapsed
        );
        for (kind, n) in &self.faults {
            let _ = writeln!(s, "  {kind:<22} {n}");
        }
        if self.passed() {
            let _ = writeln!(s, "RESULT: PASS (seed {})", self.seed);
            return s;
        }
        let first_at = self
            .verdict
            .violations
            .iter()
            .filter_map(|v| v.at_ms)
            .min()
            .map(|t| (t - self.started_unix_ms).max(0) as u64);
        let _ = writeln!(
            s,
            "RESULT: FAIL (seed {}): invariant violations:",
            self.seed
        );
        for v in &self.verdict.violations {
            let _ = writeln!(s, "  {v}");
        }
        let _ = writeln!(
            s,
            "schedule up to the first violation ({}):",
            first_at.map_or("the end".to_owned(), |t| format!("{t} ms"))
        );
        for (step, ran, what) in &self.executed {
            if first_at.is_some_and(|t| ran.unwrap_or(step.at_ms) > t + 1000) {
                break;
            }
            let ran = ran.map_or("skipped".to_owned(), |t| format!("{t} ms"));
            let _ = writeln!(s, "  @{:>6} ({ran:>9}) {:?} {what}", step.at_ms, step.fault);
        }
        let _ = writeln!(
            s,
            "reproduce: moor-soak --seed {} --secs <same> --store {}",
            self.seed,
            match self.store {
                Store::Sqlite => "sqlite",
                Store::Postgres => "postgres",
            }
        );
        s
    }
}

/// How one bridge's agent behaves, drawn from the seed.
#[derive(Debug, Clone)]
struct AgentShape {
    lines_per_sec: u64,
    burst: u64,
    pad: usize,
    output: Output,
    echo_inputs: u64,
}

impl AgentShape {
    fn lines(&self, secs: u64) -> u64 {
        let byte_cap = 6_000_000 / (self.pad as u64 + 16);
        (self.lines_per_sec * secs * 9 / 10).clamp(100, 20_000.min(byte_cap))
    }

    fn args(&self, n: u64, prefix: &str, progress: &std::path::Path) -> Vec<String> {
        let interval = 1000 * self.burst / self.lines_per_sec;
        let mut a: Vec<String> = vec!["count".into(), n.to_string()];
        for (k, v) in [
            ("--prefix", prefix.to_owned()),
            ("--interval-ms", interval.to_string()),
            ("--burst", self.burst.to_string()),
            ("--pad", self.pad.to_string()),
            ("--stderr-every", "97".into()),
            ("--progress-file", progress.display().to_string()),
        ] {
            a.push(k.into());
            a.push(v);
        }
        if self.echo_inputs > 0 {
            a.push("--echo-inputs".into());
            a.push(self.echo_inputs.to_string());
        }
        a
    }
}

struct Node {
    server: TestServer,
    /// In front of it for bridges, then for viewers.
    link: FaultProxy,
    view: FaultProxy,
    stopped: bool,
    generation: u32,
}

struct Slot {
    bridge: TestBridge,
    name: String,
    id: SessionId,
    shape: AgentShape,
    runs: Vec<Run>,
    progress: PathBuf,
    stopped: bool,
    credentials: Option<PathBuf>,
}

struct Viewer {
    label: String,
    after: u64,
    bridge: usize,
    kind: ViewerKind,
}

enum ViewerKind {
    Sse(SseClient),
    Ws(WsViewer),
}

impl Viewer {
    fn record(&self) -> ViewerRecord {
        let state = match &self.kind {
            ViewerKind::Sse(c) => c.snapshot(),
            ViewerKind::Ws(w) => w.recorder().snapshot(),
        };
        ViewerRecord {
            label: self.label.clone(),
            after: self.after,
            state,
        }
    }
}

/// An action that ends a durational fault.
#[derive(Debug)]
enum Undo {
    Unstall(usize),
    Reachable(usize),
    Unshape(usize),
    ContServer(usize, u32),
    ContBridge(usize),
    DropStalled(usize),
    PgStart,
}

/// Bound for the bridges to finish once faults stop.
const SETTLE: Duration = Duration::from_secs(180);
/// Bound for one API call during the run.
const CALL: Duration = Duration::from_secs(5);
/// Most viewers kept at once (older churned ones leave).
const MAX_VIEWERS: usize = 24;

struct Soak {
    cfg: SoakConfig,
    token: String,
    db: Option<TestDb>,
    cluster: Option<LocalCluster>,
    nodes: Vec<Node>,
    slots: Vec<Slot>,
    viewers: Vec<Viewer>,
    gone_viewers: Vec<(usize, ViewerRecord)>,
    viewer_count: u64,
    stalled: Vec<Option<TcpStream>>,
    snapshots: Vec<Vec<(String, Vec<moor_protocol::Entry>)>>,
    start: Instant,
    rng: StdRng,
    next_node_id: u32,
    faults: BTreeMap<String, u64>,
    /// Refresh tokens seen in the login bridge's credentials.
    refresh_tokens: std::collections::BTreeSet<String>,
}

/// Runs the soak; never panics on a broken invariant (the report says), only on a harness
/// failure (a process that will not start).
pub async fn run(cfg: SoakConfig) -> anyhow::Result<SoakReport> {
    let started_unix_ms = moor_protocol::now_ms();
    let start = Instant::now();
    let mut soak = Soak::start(cfg.clone()).await?;
    let plan = Plan {
        nodes: soak.nodes.len(),
        bridges: soak.slots.len(),
        killable: vec![1, 2],
        postgres: cfg.store == Store::Postgres,
        pg_restart: cfg.store == Store::Postgres && cfg.pg_restart,
    };
    let steps = schedule(cfg.seed, cfg.duration, &plan);
    let inputs = soak.start_inputs();
    let mut executed = Vec::with_capacity(steps.len());
    let mut undo: Vec<(Instant, Undo)> = Vec::new();
    for step in steps {
        let due = soak.start + Duration::from_millis(step.at_ms);
        // Undo what is due before this step, or by now when the run lags behind its schedule.
        loop {
            undo.sort_by_key(|(t, _)| *t);
            match undo.first() {
                Some((t, _)) if *t <= due.max(Instant::now()) => {
                    let (t, u) = undo.remove(0);
                    tokio::time::sleep_until(t.into()).await;
                    soak.undo(u).await;
                }
                _ => break,
            }
        }
        tokio::time::sleep_until(due.into()).await;
        let ran = soak.start.elapsed().as_millis() as u64;
        let (did, after) = soak.inject(&step.fault).await;
        if did.is_some() {
            *soak.faults.entry(step.fault.kind().to_owned()).or_default() += 1;
        }
        // Undone on the schedule (the step's time plus its length), not after the injection
        // returned: a slow injection (a snapshot, stopping Postgres) must not push its undo past
        // the next step on the same resources, which the schedule placed after it. A Postgres
        // restarted only after a node's restart, which waits for it, stalled the run; a stopped
        // node was asked to leave.
        if let Some((ms, u)) = after {
            let at = (due + Duration::from_millis(ms)).max(Instant::now());
            undo.push((at, u));
        }
        executed.push((step, did.as_ref().map(|_| ran), did.unwrap_or_default()));
        soak.count_rotations();
    }
    undo.sort_by_key(|(t, _)| *t);
    for (_, u) in undo {
        soak.undo(u).await;
    }
    let posted = inputs.await.unwrap_or_default();
    let (sessions, extra) = soak.settle(posted).await;
    let mut verdict = invariants::check(&sessions);
    verdict.checks += extra.checks;
    verdict.violations.extend(extra.violations);
    let entries = sessions.iter().map(|s| s.log.len() as u64).sum();
    soak.count_caps(&sessions);
    Ok(SoakReport {
        seed: cfg.seed,
        store: cfg.store,
        executed,
        started_unix_ms,
        entries,
        faults: soak.faults,
        verdict,
        elapsed: start.elapsed(),
    })
}

/// `o` with the soak's short heartbeats, leases and token lifetimes, no rate limit to speak of,
/// and the bug to inject, if any.
fn soak_timings(o: ServerOpts, inject_bug: Option<&str>) -> ServerOpts {
    let o = o
        .flag("--heartbeat-interval-ms", 500)
        .flag("--keepalive-ms", 500)
        .flag("--stall-timeout-ms", 3000)
        .flag("--bridge-lease-renew-ms", 500)
        .flag("--access-token-ttl-secs", 3)
        .flag("--rate-limit", 100_000);
    match inject_bug {
        Some(bug) => o.env("MOOR_INJECT_BUG", bug),
        None => o,
    }
}

impl Soak {
    async fn start(cfg: SoakConfig) -> anyhow::Result<Self> {
        let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x5eed_a6e7);
        let bridge_cap = rng.gen_range(3000..8000);
        let sse_cap = rng.gen_range(2000..6000);
        let common = |o: ServerOpts| {
            let o = o
                .flag("--bridge-max-lifetime-ms", bridge_cap)
                .flag("--sse-lifetime-ms", sse_cap);
            soak_timings(o, cfg.inject_bug.as_deref())
        };
        let (db, cluster, token, server_opts): (_, _, String, Vec<ServerOpts>) = match cfg.store {
            Store::Sqlite => (None, None, String::new(), vec![common(ServerOpts::new())]),
            Store::Postgres => {
                let db = TestDb::create()
                    .await
                    .ok_or_else(|| anyhow::anyhow!("no Postgres (set MOOR_TEST_PG_URL)"))?;
                let token = uuid::Uuid::new_v4().simple().to_string();
                let opts = ["n0", "n1"]
                    .iter()
                    .map(|n| common(db.node_opts(n, &token)))
                    .collect();
                let cluster = if cfg.pg_restart {
                    Some(LocalCluster::find().map_err(|e| anyhow::anyhow!(e))?)
                } else {
                    None
                };
                (Some(db), cluster, token, opts)
            }
        };
        let mut nodes = Vec::new();
        for opts in server_opts {
            let server = TestServer::start(opts).await;
            let link = FaultProxy::start(server.addr()).await;
            let view = FaultProxy::start(server.addr()).await;
            nodes.push(Node {
                server,
                link,
                view,
                stopped: false,
                generation: 0,
            });
        }
        let token = if token.is_empty() {
            nodes[0].server.token().to_owned()
        } else {
            token
        };
        let mut soak = Self {
            snapshots: Vec::new(),
            cfg,
            token,
            db,
            cluster,
            nodes,
            slots: Vec::new(),
            viewers: Vec::new(),
            gone_viewers: Vec::new(),
            viewer_count: 0,
            stalled: Vec::new(),
            start: Instant::now(),
            rng,
            next_node_id: 2,
            faults: BTreeMap::new(),
            refresh_tokens: Default::default(),
        };
        soak.faults.insert("bridge-lifetime-cap".into(), 0);
        soak.faults.insert("sse-lifetime-cap".into(), 0);
        soak.faults.insert("token-rotation".into(), 0);
        // Bridge 0 takes the inputs; 1 and 2 may be killed; 3 is a PTY; 4 uses a login whose
        // access token lives 3 s.
        let secs = soak.cfg.duration.as_secs().max(10);
        let inputs = (secs / 3).clamp(5, 60);
        let bridges = if soak.cfg.token_bridge { 5 } else { 4 };
        for b in 0..bridges {
            let shape = AgentShape {
                lines_per_sec: [20, 50, 100, 200][soak.rng.gen_range(0..4)],
                burst: [1, 1, 10, 50][soak.rng.gen_range(0..4)],
                pad: [0, 0, 100, 1000, 4000][soak.rng.gen_range(0..5)],
                output: if b == 3 { Output::Pty } else { Output::Lines },
                echo_inputs: if b == 0 { inputs } else { 0 },
            };
            soak.add_bridge(b, shape, secs).await;
        }
        // One following SSE viewer per session, through the viewer proxies.
        for b in 0..soak.slots.len() {
            soak.add_viewer(b, 0, false).await;
        }
        soak.start = Instant::now();
        Ok(soak)
    }

    fn servers_url(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.link.url())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// An API client on a node that is not stopped.
    fn api(&self) -> Option<Api> {
        self.nodes
            .iter()
            .find(|n| !n.stopped)
            .map(|n| Api::new(n.server.url(), self.token.clone()))
    }

    async fn add_bridge(&mut self, b: usize, shape: AgentShape, secs: u64) {
        let name = format!("soak{b}-{}", uuid::Uuid::new_v4().simple());
        let scratch = tempfile::Builder::new()
            .prefix("moor-soak-")
            .tempdir()
            .expect("temp dir")
            .keep();
        let progress = scratch.join("progress");
        let n = shape.lines(secs);
        let prefix = format!("b{b}r0-");
        let agent = shape.args(n, &prefix, &progress);
        let agent_refs: Vec<&str> = agent.iter().map(String::as_str).collect();
        let mut credentials = None;
        let mut opts = if b == 4 {
            // A user's login, as `moor login` leaves it, on one node: its access token expires
            // every 3 s and each refresh rotates the refresh token.
            let api = Api::new(self.nodes[0].server.url(), self.token.clone());
            let user = format!("soak{}", uuid::Uuid::new_v4().simple());
            api.add_user(&user, "soak-password-1").await;
            let pair = api.login(&user, "soak-password-1").await;
            let server = self.nodes[0].link.url();
            let expires_in = pair["expires_in"].as_u64().unwrap_or(3);
            let creds = json!([{
                "server": server,
                "access_token": pair["access_token"],
                "refresh_token": pair["refresh_token"],
                "expires_at": moor_protocol::now_ms() as u64 / 1000 + expires_in,
                "lifetime": expires_in,
            }]);
            let dir = scratch.join("config");
            std::fs::create_dir_all(&dir).expect("config dir");
            let path = dir.join("credentials.json");
            std::fs::write(&path, creds.to_string()).expect("write credentials");
            credentials = Some(path);
            BridgeOpts::new(&server, "", &name, &agent_refs).env("MOOR_CONFIG_DIR", dir.display())
        } else {
            BridgeOpts::new(&self.servers_url(), &self.token, &name, &agent_refs)
        };
        if shape.output == Output::Pty {
            opts = opts.flag("--mode", "pty");
        } else {
            opts = opts.flag("--mode", "lines");
        }
        opts = opts.flag("--no-checkpoints", "");
        let bridge = opts.spawn();
        let api = Api::new(self.nodes[0].server.url(), self.token.clone());
        let id = api.wait_session(&name, Duration::from_secs(30)).await.id;
        self.snapshots.push(Vec::new());
        self.slots.push(Slot {
            bridge,
            name,
            id,
            runs: vec![Run {
                prefix,
                planned: n,
                complete: true,
            }],
            shape,
            progress,
            stopped: false,
            credentials,
        });
    }

    async fn add_viewer(&mut self, b: usize, after: u64, ws: bool) -> String {
        self.viewer_count += 1;
        let node = self.viewer_count as usize % self.nodes.len();
        let id = self.slots[b].id;
        let label = format!(
            "{}#{} after {after} via node {node}",
            if ws { "ws" } else { "sse" },
            self.viewer_count
        );
        let kind = if ws {
            let url = format!(
                "ws://{}/api/v1/sessions/{id}/ws?after={after}",
                self.nodes[node].view.addr()
            );
            match tokio::time::timeout(CALL, crate::ws::connect(&url, Some(&self.token))).await {
                Ok(Ok(ws)) => ViewerKind::Ws(WsViewer::record_socket(ws)),
                other => {
                    let why = match other {
                        Ok(Err(e)) => e.to_string(),
                        _ => "timed out".into(),
                    };
                    return format!("{label}: not connected ({why})");
                }
            }
        } else {
            ViewerKind::Sse(SseClient::connect(
                &self.nodes[node].view.url(),
                &self.token,
                id,
                SseOpts {
                    after: Some(after),
                    idle_timeout: Some(Duration::from_secs(4)),
                    ..SseOpts::default()
                },
            ))
        };
        self.viewers.push(Viewer {
            label: label.clone(),
            after,
            bridge: b,
            kind,
        });
        // Churn: the oldest churned viewer (never a session's first) leaves.
        if self.viewers.len() > MAX_VIEWERS {
            let i = self.slots.len();
            let gone = self.viewers.remove(i);
            self.retire(gone);
        }
        label
    }

    fn retire(&mut self, v: Viewer) {
        self.gone_viewers.push((v.bridge, v.record()));
    }

    fn start_inputs(&self) -> tokio::task::JoinHandle<Vec<InputRecord>> {
        let slot = &self.slots[0];
        let n = slot.shape.echo_inputs;
        let id = slot.id;
        let apis: Vec<Api> = self
            .nodes
            .iter()
            .map(|node| Api::new(node.view.url(), self.token.clone()))
            .collect();
        let spacing = self.cfg.duration.as_millis() as u64 * 7 / 10 / n.max(1);
        let mut rng = StdRng::seed_from_u64(self.cfg.seed ^ 0x1a9b);
        tokio::spawn(async move {
            let mut records = Vec::new();
            for k in 0..n {
                let mut rec = InputRecord {
                    client_msg_id: format!("soak-input-{k}"),
                    text: format!("input-{k}"),
                    accepted: Vec::new(),
                    failed_posts: 0,
                };
                // Retries repeat the key; some inputs are posted twice on purpose.
                let wanted = if rng.gen_bool(0.3) { 2 } else { 1 };
                for attempt in 0..60u32 {
                    if rec.accepted.len() >= wanted {
                        break;
                    }
                    let api = &apis[(k as usize + attempt as usize) % apis.len()];
                    let body = RawBody::Json(json!({
                        "client_msg_id": rec.client_msg_id,
                        "kind": kinds::INPUT_TEXT,
                        "payload": {"text": rec.text},
                    }));
                    let path = format!("/api/v1/sessions/{id}/inputs");
                    let token = api.token().to_owned();
                    let r = tokio::time::timeout(
                        CALL,
                        api.try_raw(reqwest::Method::POST, &path, Some(&token), Some(body)),
                    )
                    .await;
                    match r {
                        Ok(Ok(r)) if r.status.is_success() => {
                            if let Some(seq) = r.body.get("seq").and_then(|s| s.as_u64()) {
                                rec.accepted.push(seq);
                            }
                        }
                        _ => {
                            rec.failed_posts += 1;
                            // Retry pacing, as a client would back off.
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }
                records.push(rec);
                tokio::time::sleep(Duration::from_millis(spacing)).await;
            }
            records
        })
    }

    /// Takes every session's log through a live node, as evidence of what was committed (and so
    /// acknowledged) before a crash.
    async fn snapshot(&mut self, label: &str) {
        let Some(api) = self.api() else { return };
        for (i, slot) in self.slots.iter().enumerate() {
            if let Ok(Ok(log)) = tokio::time::timeout(CALL, api.try_entries_all(slot.id)).await {
                self.snapshots[i].push((label.to_owned(), log));
            }
        }
    }

    /// Injects `fault`; what it did (`None`: nothing to act on) and what undoes it when.
    async fn inject(&mut self, fault: &Fault) -> (Option<String>, Option<(u64, Undo)>) {
        match fault {
            Fault::Reset { proxy: p } => {
                let n = self.proxy(*p).reset_all().await;
                (Some(format!("{n} connections reset")), None)
            }
            Fault::Cut { proxy: p } => {
                let n = self.proxy(*p).cut_all().await;
                (Some(format!("{n} connections cut")), None)
            }
            Fault::HalfOpen { proxy: p, ms } => {
                let n = self.proxy(*p).stall().await;
                (
                    Some(format!("{n} connections half-open")),
                    Some((*ms, Undo::Unstall(*p))),
                )
            }
            Fault::Unreachable { proxy: p, ms } => {
                let px = self.proxy(*p);
                px.refuse(true);
                let n = px.cut_all().await;
                (
                    Some(format!("refusing, {n} cut")),
                    Some((*ms, Undo::Reachable(*p))),
                )
            }
            Fault::SlowLink {
                proxy: p,
                ms,
                latency_ms,
                bytes_per_sec,
            } => {
                self.proxy(*p).shape(Shape {
                    latency: Duration::from_millis(*latency_ms),
                    bytes_per_sec: *bytes_per_sec,
                });
                (Some("shaped".into()), Some((*ms, Undo::Unshape(*p))))
            }
            Fault::CloseCode { bridge, code } => {
                let id = self.slots[*bridge].id;
                let mut closed = Vec::new();
                for node in self.nodes.iter().filter(|n| !n.stopped) {
                    let api = node.server.api();
                    let body = RawBody::Json(json!({"code": code, "reason": "soak"}));
                    let path = format!("/api/v1/sessions/{id}/bridge/close");
                    let token = self.token.clone();
                    if let Ok(Ok(r)) = tokio::time::timeout(
                        CALL,
                        api.try_raw(reqwest::Method::POST, &path, Some(&token), Some(body)),
                    )
                    .await
                    {
                        closed.push(r.status.as_u16());
                    }
                }
                (Some(format!("answers {closed:?}")), None)
            }
            Fault::KillServer { node } => {
                self.snapshot(&format!("before SIGKILL of node {node}"))
                    .await;
                let n = &mut self.nodes[*node];
                n.server.kill().await;
                n.server.restart().await;
                n.stopped = false;
                n.generation += 1;
                (Some("killed and restarted".into()), None)
            }
            Fault::StopServer { node, ms } => {
                let n = &mut self.nodes[*node];
                let Some(pid) = n.server.pid() else {
                    return (None, None);
                };
                signal(pid, rustix::process::Signal::STOP);
                n.stopped = true;
                (
                    Some(format!("pid {pid} stopped")),
                    Some((*ms, Undo::ContServer(*node, pid))),
                )
            }
            Fault::KillBridge { bridge } => self.kill_bridge(*bridge).await,
            Fault::StopBridge { bridge, ms } => {
                let slot = &mut self.slots[*bridge];
                if slot.stopped || !slot.bridge.running() {
                    return (None, None);
                }
                let Some(pid) = slot.bridge.pid() else {
                    return (None, None);
                };
                signal(pid, rustix::process::Signal::STOP);
                slot.stopped = true;
                (
                    Some(format!("pid {pid} stopped")),
                    Some((*ms, Undo::ContBridge(*bridge))),
                )
            }
            Fault::ViewerChurn {
                bridge,
                permille,
                ws,
            } => {
                let head = self
                    .viewers
                    .iter()
                    .filter(|v| v.bridge == *bridge)
                    .map(|v| v.record().state.last_seq())
                    .max()
                    .unwrap_or(0);
                let after = head * permille / 1000;
                let label = self.add_viewer(*bridge, after, *ws).await;
                (Some(label), None)
            }
            Fault::StalledViewer { bridge, ms } => {
                let node = &self.nodes[self.rng.gen_range(0..self.nodes.len())];
                if node.stopped {
                    return (None, None);
                }
                let name = self.slots[*bridge].name.clone();
                match tokio::time::timeout(
                    CALL,
                    crate::sse::stalled_reader(node.server.addr(), &self.token, &name),
                )
                .await
                {
                    Ok(Ok(s)) => {
                        self.stalled.push(Some(s));
                        (
                            Some("stalled reader opened".into()),
                            Some((*ms, Undo::DropStalled(self.stalled.len() - 1))),
                        )
                    }
                    _ => (None, None),
                }
            }
            Fault::PgBackendKill { node } => {
                let (Some(db), false) = (&self.db, self.nodes[*node].stopped) else {
                    return (None, None);
                };
                let node_id = self.node_id(*node);
                let admin = db.admin().await;
                let pool = db.kill_pool(&admin, &node_id).await;
                let listen = db.kill_listen(&admin, &node_id).await;
                admin.close().await;
                (
                    Some(format!(
                        "{pool} pool and {listen} listen backends of {node_id}"
                    )),
                    None,
                )
            }
            Fault::PgRestart { ms } => {
                if self.cluster.is_none() {
                    return (None, None);
                }
                self.snapshot("before the Postgres restart").await;
                if let Some(cluster) = &self.cluster {
                    cluster.stop().await;
                }
                (Some("postgres stopped".into()), Some((*ms, Undo::PgStart)))
            }
            Fault::Membership { node } => {
                if self.db.is_none() {
                    return (None, None);
                }
                self.snapshot(&format!("before node {node} leaves")).await;
                let id = format!("n{}", self.next_node_id);
                self.next_node_id += 1;
                let Some(db) = &self.db else {
                    return (None, None);
                };
                let opts = self.common_pg_opts(db.node_opts(&id, &self.token));
                let fresh = TestServer::start(opts).await;
                let n = &mut self.nodes[*node];
                n.link.set_upstream(fresh.addr());
                n.view.set_upstream(fresh.addr());
                let mut old = std::mem::replace(&mut n.server, fresh);
                n.generation += 1;
                n.stopped = false;
                let status = old.terminate().await;
                // The links still on the old node are cut by its exit; new ones go to the new node.
                (
                    Some(format!("{id} joined, the old node left ({status})")),
                    None,
                )
            }
        }
    }

    fn common_pg_opts(&self, o: ServerOpts) -> ServerOpts {
        soak_timings(o, self.cfg.inject_bug.as_deref())
    }

    fn node_id(&self, node: usize) -> String {
        let logs = self.nodes[node].server.logs();
        // The node id it was started with is in its flags; the first two are n0 and n1, later
        // ones replaced them.
        logs.split_whitespace()
            .find_map(|w| {
                w.strip_prefix("node_id=")
                    .map(|s| s.trim_matches('"').to_owned())
            })
            .unwrap_or_else(|| format!("n{node}"))
    }

    async fn kill_bridge(&mut self, b: usize) -> (Option<String>, Option<(u64, Undo)>) {
        let slot = &mut self.slots[b];
        if !slot.bridge.running() {
            return (None, None);
        }
        // Frozen first, then asked how far its agent got: an agent that printed its whole run may
        // have exited and its `moor` ended the session, and a `moor` started again for an ended
        // session rightly stops. Frozen, it cannot send `End` after the progress is read (the
        // agent writes its progress before it exits).
        let pid = slot.bridge.pid();
        let freeze = !slot.stopped;
        if let (Some(pid), true) = (pid, freeze) {
            signal(pid, rustix::process::Signal::STOP);
        }
        let printed = std::fs::read_to_string(&slot.progress)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0);
        let last = slot.runs.last_mut().expect("a run");
        if printed >= last.planned {
            if let (Some(pid), true) = (pid, freeze) {
                signal(pid, rustix::process::Signal::CONT);
            }
            return (None, None);
        }
        slot.bridge.kill().await;
        slot.stopped = false;
        last.complete = false;
        let remaining = last.planned.saturating_sub(printed).max(50);
        let prefix = format!("b{b}r{}-", slot.runs.len());
        slot.runs.push(Run {
            prefix: prefix.clone(),
            planned: remaining,
            complete: true,
        });
        let _ = std::fs::remove_file(&slot.progress);
        let agent = slot.shape.args(remaining, &prefix, &slot.progress);
        let refs: Vec<&str> = agent.iter().map(String::as_str).collect();
        slot.bridge = slot.bridge.respawn(&refs);
        (
            Some(format!(
                "killed after {printed} lines; new run {prefix} of {remaining}"
            )),
            None,
        )
    }

    async fn undo(&mut self, u: Undo) {
        match u {
            Undo::Unstall(p) => {
                self.proxy(p).unstall().await;
            }
            Undo::Reachable(p) => self.proxy(p).refuse(false),
            Undo::Unshape(p) => self.proxy(p).shape(Shape::default()),
            Undo::ContServer(node, pid) => {
                signal(pid, rustix::process::Signal::CONT);
                self.nodes[node].stopped = false;
            }
            Undo::ContBridge(b) => {
                let slot = &mut self.slots[b];
                if let Some(pid) = slot.bridge.pid() {
                    signal(pid, rustix::process::Signal::CONT);
                }
                slot.stopped = false;
            }
            Undo::DropStalled(i) => {
                self.stalled[i] = None;
            }
            Undo::PgStart => {
                if let Some(c) = &self.cluster {
                    c.start().await;
                }
            }
        }
    }

    fn proxy(&self, p: usize) -> &FaultProxy {
        let node = &self.nodes[p / 2];
        if p.is_multiple_of(2) {
            &node.link
        } else {
            &node.view
        }
    }

    /// Counts the login bridge's token rotations (each refresh rewrites its credentials).
    fn count_rotations(&mut self) {
        for slot in &self.slots {
            let Some(path) = &slot.credentials else {
                continue;
            };
            let Ok(text) = std::fs::read_to_string(path) else {
                continue;
            };
            let token: Option<String> = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v[0]["refresh_token"].as_str().map(str::to_owned));
            if let Some(t) = token {
                let first = self.refresh_tokens.is_empty();
                if self.refresh_tokens.insert(t) && !first {
                    *self.faults.entry("token-rotation".into()).or_default() += 1;
                }
            }
        }
    }

    /// Lifetime-cap moves and SSE lifetime ends seen in the logs and by viewers.
    fn count_caps(&mut self, sessions: &[SessionObs]) {
        let moves = sessions
            .iter()
            .flat_map(|s| &s.log)
            .filter(|e| {
                e.kind == kinds::BRIDGE_DISCONNECTED
                    && e.payload.get("close_code").and_then(|c| c.as_u64())
                        == Some(u64::from(moor_protocol::close::LIFETIME))
            })
            .count() as u64;
        let sse_ends = sessions
            .iter()
            .flat_map(|s| &s.viewers)
            .map(|v| v.state.clean_ends)
            .sum::<u64>();
        self.faults.insert("bridge-lifetime-cap".into(), moves);
        self.faults.insert("sse-lifetime-cap".into(), sse_ends);
    }

    /// Lets every bridge finish, reads everything back, and returns what the checker needs plus
    /// the failures seen while settling (a bridge that never finished, a viewer that never caught
    /// up).
    async fn settle(&mut self, posted: Vec<InputRecord>) -> (Vec<SessionObs>, Verdict) {
        let mut extra = Verdict::default();
        let mut fail = |session: &str, invariant: &'static str, detail: String| {
            extra.checks += 1;
            extra.violations.push(invariants::Violation {
                session: session.to_owned(),
                invariant,
                detail,
                at_ms: None,
            });
        };
        self.stalled.clear();
        let deadline = Instant::now() + SETTLE;
        for slot in &mut self.slots {
            let left = deadline.saturating_duration_since(Instant::now());
            let waited = tokio::time::timeout(left, async {
                while slot.bridge.running() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
            .await;
            let stderr = slot.bridge.stderr();
            let tail: String = stderr
                .lines()
                .rev()
                .take(8)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n    ");
            if waited.is_err() {
                fail(
                    &slot.name,
                    "every bridge finishes",
                    format!(
                        "{} still running {SETTLE:?} after the faults stopped ({}); stderr:\n    {tail}",
                        slot.bridge.label(),
                        process_state(slot.bridge.pid()),
                    ),
                );
                slot.bridge.kill().await;
                continue;
            }
            let status = slot.bridge.wait_exit(Duration::from_secs(1)).await;
            if !status.success() {
                fail(
                    &slot.name,
                    "every bridge finishes",
                    format!(
                        "{} exited with {status}; stderr:\n    {tail}",
                        slot.bridge.label()
                    ),
                );
            }
        }
        let api = Api::new(self.nodes[0].server.url(), self.token.clone());
        let mut sessions = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            // A session whose bridge failed may never end: the checker says so.
            let ended_by = Instant::now() + Duration::from_secs(30);
            while Instant::now() < ended_by {
                let info = tokio::time::timeout(
                    CALL,
                    api.try_raw(
                        reqwest::Method::GET,
                        &format!("/api/v1/sessions/{}", slot.id),
                        Some(&self.token),
                        None,
                    ),
                )
                .await;
                let ended = matches!(&info, Ok(Ok(r)) if r.body.get("status").and_then(|v| v.as_str()) == Some("ended"));
                if ended {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let log = api.try_entries_all(slot.id).await.unwrap_or_default();
            let state = api
                .session(&slot.id.to_string())
                .await
                .and_then(|s| s.state);
            let head = log.last().map_or(0, |e| e.seq.0);
            let mut viewers = Vec::new();
            for v in self.viewers.iter().filter(|v| v.bridge == i) {
                if let ViewerKind::Sse(c) = &v.kind {
                    let live = c.recorder().with(|s| !s.finished);
                    if live {
                        let caught = tokio::time::timeout(
                            Duration::from_secs(30),
                            c.recorder()
                                .wait_for(Duration::from_secs(31), "the head", |s| {
                                    s.last_seq() >= head || s.finished
                                }),
                        )
                        .await;
                        if caught.is_err() {
                            fail(
                                &slot.name,
                                "viewers catch up",
                                c.recorder().with(|st| {
                                    format!(
                                        "{} did not reach seq {head}: at seq {}, {} connections, {} keep-alives, {} clean ends, last errors {:?}",
                                        v.label,
                                        st.last_seq(),
                                        st.connections,
                                        st.keepalives,
                                        st.clean_ends,
                                        &st.errors[st.errors.len().saturating_sub(3)..]
                                    )
                                }),
                            );
                        }
                    }
                }
                viewers.push(v.record());
            }
            viewers.extend(
                self.gone_viewers
                    .iter()
                    .filter(|(b, _)| *b == i)
                    .map(|(_, r)| r.clone()),
            );
            sessions.push(SessionObs {
                name: slot.name.clone(),
                output: slot.shape.output,
                runs: slot.runs.clone(),
                log,
                state,
                snapshots: std::mem::take(&mut self.snapshots[i]),
                viewers,
                inputs: if i == 0 { posted.clone() } else { Vec::new() },
            });
        }
        (sessions, extra)
    }
}

/// What the kernel says of process `pid`: its state (R running, S sleeping, T stopped…) and
/// where it waits, to tell a stopped or blocked process from a slow one.
fn process_state(pid: Option<u32>) -> String {
    let Some(pid) = pid else {
        return "no pid".into();
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the parenthesised command name.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("?");
    // Where each thread waits (`pipe_write`: blocked on a full pipe; `futex_…`: on a lock or
    // for work).
    let threads: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|t| {
                    let at =
                        |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
                    format!("{} in {}", at("comm").trim(), at("wchan"))
                })
                .collect()
        })
        .unwrap_or_default();
    format!("pid {pid}, state {state}, threads: {}", threads.join(", "))
}
