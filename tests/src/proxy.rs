//! `FaultProxy`: a real TCP proxy on `127.0.0.1:0` that breaks live connections on demand.
//!
//! Every operation acts on the live sockets and returns once it took effect: `reset_all` sends
//! RSTs (SO_LINGER 0), `cut_all` closes with a plain FIN (a WebSocket peer sees 1006), `stall`
//! stops forwarding on the live connections while keeping them open (a half-open link; new
//! connections still work, as after a NAT rebinding), and `refuse` makes new connections fail
//! (the server is unreachable). `hold_after_upgrade` makes new connections pass their first
//! request and every answer, then hold what the client sends next (a WebSocket `hello`) until
//! `unstall`: a handshake that reaches the server only after the client gave up on it. `shape` adds latency and a bandwidth limit to every chunk
//! forwarded from then on (a slow mobile link). The upstream address may change (e.g. after a
//! restart).

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::AbortHandle;

/// How long the proxy tries to reach the upstream for a new connection.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug)]
enum Cmd {
    Reset(oneshot::Sender<()>),
    Cut(oneshot::Sender<()>),
    Stall(bool, oneshot::Sender<()>),
}

#[derive(Debug)]
struct Inner {
    upstream: Mutex<SocketAddr>,
    refuse: AtomicBool,
    hold_after_upgrade: AtomicBool,
    next_id: AtomicU64,
    conns: Mutex<HashMap<u64, mpsc::UnboundedSender<Cmd>>>,
    tasks: Mutex<Vec<AbortHandle>>,
    accepted: watch::Sender<u64>,
    shape: watch::Sender<Shape>,
}

/// Latency and bandwidth applied to forwarded chunks (both directions).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    /// Delay before each chunk is passed on.
    pub latency: Duration,
    /// Bytes per second (0: unlimited).
    pub bytes_per_sec: u64,
}

impl Shape {
    /// How long forwarding `n` bytes is held back.
    fn delay(&self, n: usize) -> Duration {
        let transfer = match self.bytes_per_sec {
            0 => Duration::ZERO,
            rate => Duration::from_micros(n as u64 * 1_000_000 / rate),
        };
        self.latency + transfer
    }
}

/// A TCP proxy in front of one upstream address, with fault injection.
#[derive(Debug)]
pub struct FaultProxy {
    inner: Arc<Inner>,
    addr: SocketAddr,
}

impl FaultProxy {
    /// Listens on `127.0.0.1:0` and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy binds");
        let addr = listener.local_addr().expect("proxy addr");
        let inner = Arc::new(Inner {
            upstream: Mutex::new(upstream),
            refuse: AtomicBool::new(false),
            hold_after_upgrade: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Vec::new()),
            accepted: watch::channel(0).0,
            shape: watch::channel(Shape::default()).0,
        });
        let accept = tokio::spawn(accept_loop(listener, inner.clone()));
        inner
            .tasks
            .lock()
            .expect("tasks lock")
            .push(accept.abort_handle());
        Self { inner, addr }
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Forwards new connections to `upstream` from now on.
    pub fn set_upstream(&self, upstream: SocketAddr) {
        *self.inner.upstream.lock().expect("upstream lock") = upstream;
    }

    /// Connections accepted so far (including refused ones).
    pub fn connections(&self) -> u64 {
        *self.inner.accepted.borrow()
    }

    /// Connections being forwarded now.
    pub fn live(&self) -> usize {
        self.inner.conns.lock().expect("conns lock").len()
    }

    /// Waits until at least `n` connections have been accepted in total; panics after `timeout`.
    pub async fn wait_connections(&self, n: u64, timeout: Duration) {
        let mut rx = self.inner.accepted.subscribe();
        let waited = tokio::time::timeout(timeout, rx.wait_for(|c| *c >= n)).await;
        assert!(
            matches!(waited, Ok(Ok(_))),
            "timed out after {timeout:?} waiting for {n} proxy connections (have {})",
            self.connections()
        );
    }

    async fn broadcast(&self, make: impl Fn(oneshot::Sender<()>) -> Cmd) -> usize {
        let senders: Vec<_> = self
            .inner
            .conns
            .lock()
            .expect("conns lock")
            .values()
            .cloned()
            .collect();
        let mut acks = Vec::new();
        for tx in senders {
            let (ack_tx, ack_rx) = oneshot::channel();
            if tx.send(make(ack_tx)).is_ok() {
                acks.push(ack_rx);
            }
        }
        let n = acks.len();
        for ack in acks {
            // A connection that ended on its own meanwhile drops its ack: fine.
            let _ = ack.await;
        }
        n
    }

    /// Aborts every live connection with a TCP RST on both sides. Returns how many.
    pub async fn reset_all(&self) -> usize {
        self.broadcast(Cmd::Reset).await
    }

    /// Closes every live connection on both sides with a plain FIN, no WebSocket close frame.
    /// Returns how many.
    pub async fn cut_all(&self) -> usize {
        self.broadcast(Cmd::Cut).await
    }

    /// Stops forwarding on every live connection, in both directions, keeping the sockets open.
    /// Connections made later are not stalled. Returns how many.
    pub async fn stall(&self) -> usize {
        self.broadcast(|ack| Cmd::Stall(true, ack)).await
    }

    /// Resumes forwarding on stalled connections (held bytes and closes are passed on).
    pub async fn unstall(&self) -> usize {
        self.broadcast(|ack| Cmd::Stall(false, ack)).await
    }

    /// Applies `shape` to every chunk forwarded from now on, on live and new connections
    /// (`Shape::default()` removes it).
    pub fn shape(&self, shape: Shape) {
        self.inner.shape.send_replace(shape);
    }

    /// While on, new connections forward their first chunk from the client (the HTTP upgrade
    /// request) and everything from the server, then hold the client's further bytes and its
    /// close, as `stall` does, until `unstall`. Connections made before are untouched.
    pub fn hold_after_upgrade(&self, on: bool) {
        self.inner.hold_after_upgrade.store(on, Ordering::SeqCst);
    }

    /// While on, new connections are accepted and closed at once (server unreachable). Live
    /// connections are untouched: combine with `reset_all`/`cut_all`.
    pub fn refuse(&self, on: bool) {
        self.inner.refuse.store(on, Ordering::SeqCst);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        for t in self.inner.tasks.lock().expect("tasks lock").drain(..) {
            t.abort();
        }
    }
}

async fn accept_loop(listener: TcpListener, inner: Arc<Inner>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        // Read before the connection is counted: whoever waits for the count may then change it.
        let hold = inner.hold_after_upgrade.load(Ordering::SeqCst);
        inner.accepted.send_modify(|c| *c += 1);
        if inner.refuse.load(Ordering::SeqCst) {
            drop(client);
            continue;
        }
        let id = inner.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::unbounded_channel();
        inner.conns.lock().expect("conns lock").insert(id, tx);
        let upstream = *inner.upstream.lock().expect("upstream lock");
        let conn_inner = inner.clone();
        let shape = inner.shape.subscribe();
        let task = tokio::spawn(async move {
            run_conn(client, upstream, rx, shape, hold).await;
            conn_inner.conns.lock().expect("conns lock").remove(&id);
        });
        let mut tasks = inner.tasks.lock().expect("tasks lock");
        tasks.retain(|t| !t.is_finished());
        tasks.push(task.abort_handle());
    }
}

enum Ending {
    /// Both directions finished (EOF both ways).
    Done,
    /// A socket error: pass it on as a reset.
    Failed,
    Reset(Option<oneshot::Sender<()>>),
    Cut(Option<oneshot::Sender<()>>),
}

async fn run_conn(
    client: TcpStream,
    upstream: SocketAddr,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
    shape: watch::Receiver<Shape>,
    hold_after_first: bool,
) {
    let _ = client.set_nodelay(true);
    let upstream =
        match tokio::time::timeout(UPSTREAM_CONNECT_TIMEOUT, TcpStream::connect(upstream)).await {
            Ok(Ok(s)) => s,
            // Upstream down: the client sees its connection closed, as with a dead server behind
            // a load balancer.
            _ => return,
        };
    let _ = upstream.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut ur, mut uw) = upstream.into_split();
    let (stall_tx, stall_rx) = watch::channel(false);
    // The client → server direction stalls with the whole connection, and on its own after its
    // first chunk when held.
    let (up_stall_tx, up_stall_rx) = watch::channel(false);
    let hold = hold_after_first.then_some(&up_stall_tx);

    let ending = {
        let pumps = async {
            tokio::try_join!(
                pump(&mut cr, &mut uw, up_stall_rx.clone(), &shape, hold),
                pump(&mut ur, &mut cw, stall_rx.clone(), &shape, None)
            )
        };
        tokio::pin!(pumps);
        loop {
            tokio::select! {
                r = &mut pumps => break if r.is_ok() { Ending::Done } else { Ending::Failed },
                cmd = cmds.recv() => match cmd {
                    Some(Cmd::Reset(ack)) => break Ending::Reset(Some(ack)),
                    Some(Cmd::Cut(ack)) => break Ending::Cut(Some(ack)),
                    Some(Cmd::Stall(on, ack)) => {
                        let _ = stall_tx.send(on);
                        let _ = up_stall_tx.send(on);
                        let _ = ack.send(());
                    }
                    None => break Ending::Cut(None),
                },
            }
        }
    };
    // Reunite the halves: dropping an `OwnedWriteHalf` on its own sends a FIN, which must not
    // precede a reset.
    let (client, upstream) = match (cr.reunite(cw), ur.reunite(uw)) {
        (Ok(c), Ok(u)) => (c, u),
        _ => unreachable!("halves of the same streams"),
    };
    let ack = match ending {
        Ending::Done => None,
        Ending::Failed => {
            zero_linger(&client, &upstream);
            None
        }
        Ending::Reset(ack) => {
            zero_linger(&client, &upstream);
            ack
        }
        Ending::Cut(ack) => ack,
    };
    drop((client, upstream));
    if let Some(ack) = ack {
        let _ = ack.send(());
    }
}

/// SO_LINGER 0 on both sockets, so that closing them sends a RST instead of a FIN.
fn zero_linger(a: &TcpStream, b: &TcpStream) {
    let _ = a.set_zero_linger();
    let _ = b.set_zero_linger();
}

/// Copies `from` → `to` until EOF (then half-closes `to`), holding still while stalled and
/// holding each chunk back as `shape` says. With `hold`, stalls itself (through `hold`, the
/// sender of `stalled`) once its first chunk is passed on.
async fn pump(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    mut stalled: watch::Receiver<bool>,
    shape: &watch::Receiver<Shape>,
    mut hold: Option<&watch::Sender<bool>>,
) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // While stalled, do not even read: the peer's bytes and FIN stay in the socket, exactly
        // as if they were lost on the way.
        let _ = stalled.wait_for(|s| !*s).await;
        let n = tokio::select! {
            n = from.read(&mut buf) => n?,
            _ = stalled.wait_for(|s| *s) => continue,
        };
        if n == 0 {
            let _ = to.shutdown().await;
            return Ok(());
        }
        let delay = shape.borrow().delay(n);
        if !delay.is_zero() {
            // The injected fault itself: a slow link, not a wait for an event.
            tokio::time::sleep(delay).await;
        }
        let _ = stalled.wait_for(|s| !*s).await;
        to.write_all(&buf[..n]).await?;
        if let Some(hold) = hold.take() {
            hold.send_replace(true);
        }
    }
}
