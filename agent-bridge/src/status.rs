//! `moor: ...` lines on stderr for the person at the terminal: one line per change of link state,
//! never one per retry of the same failure, so a long outage does not flood the screen.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use moor_protocol::bridge::Welcome;
use tokio::sync::watch;

use crate::link::ConnectError;

/// Prints status lines; cheap to clone. Silent when disabled (tests, embedding).
#[derive(Debug, Clone)]
pub struct Status {
    enabled: bool,
    state: Arc<Mutex<Printed>>,
    /// Whether a connection is welcomed now (for those who act when the link drops).
    link_up: Arc<watch::Sender<bool>>,
    /// Connections welcomed so far.
    connections: Arc<std::sync::atomic::AtomicU64>,
}

#[derive(Debug, Default)]
struct Printed {
    session: String,
    identified: bool,
    connected: bool,
    last_failure: Option<String>,
    /// The local terminal is in raw mode: lines need `\r\n`.
    raw: bool,
    /// Last receipt line printed for keystrokes, to print one per burst of typing.
    last_keys: Option<(String, Instant)>,
}

pub use out::flush;

/// Queues a line of its own for stderr (`line` without its newline), through the same writer
/// thread as the status lines: it never waits and never fails. `eprintln!` panics when stderr
/// is closed (the terminal or the supervisor went away), which would end whichever task wrote
/// it: the signal handler's, say, so that a second signal or the stop grace no longer worked.
pub fn say(line: impl AsRef<str>) {
    out::line(format!("{}\n", line.as_ref()));
}

/// Where status lines go: a thread of their own writes them to stderr, so a terminal that stops
/// reading (Ctrl-S, a stalled ssh session, a pipe nobody drains) cannot stop the link, the spool
/// or the agent with it. At most [`out::QUEUED_LINES`] wait; more are dropped and counted, and
/// the count is printed once stderr takes lines again.
mod out {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
    use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
    use std::time::{Duration, Instant};

    /// Lines waiting for stderr at most.
    pub(super) const QUEUED_LINES: usize = 256;

    struct Out {
        tx: SyncSender<String>,
        dropped: AtomicU64,
        /// Lines queued and lines written (or dropped), for [`flush`].
        done: Mutex<(u64, u64)>,
        progress: Condvar,
    }

    fn out() -> &'static Out {
        static OUT: OnceLock<&'static Out> = OnceLock::new();
        OUT.get_or_init(|| {
            let (tx, rx) = sync_channel::<String>(QUEUED_LINES);
            let out: &'static Out = Box::leak(Box::new(Out {
                tx,
                dropped: AtomicU64::new(0),
                done: Mutex::new((0, 0)),
                progress: Condvar::new(),
            }));
            let spawned = std::thread::Builder::new()
                .name("moor-status".into())
                .spawn(move || {
                    for line in rx {
                        // One write, so the agent's output on the same terminal cannot land
                        // inside the line.
                        let mut err = std::io::stderr().lock();
                        let _ = err.write_all(line.as_bytes());
                        let dropped = out.dropped.swap(0, Ordering::Relaxed);
                        if dropped > 0 {
                            let end = if line.ends_with("\r\n") { "\r\n" } else { "\n" };
                            let note = format!("moor: {dropped} status lines were dropped while stderr was not read{end}");
                            let _ = err.write_all(note.as_bytes());
                        }
                        drop(err);
                        let mut done = out.done.lock().unwrap_or_else(PoisonError::into_inner);
                        done.1 += 1;
                        out.progress.notify_all();
                    }
                });
            if spawned.is_err() {
                tracing::warn!("could not start the status line writer; status lines are dropped");
            }
            out
        })
    }

    /// Queues `line` for stderr, never waiting for it.
    pub(super) fn line(line: String) {
        let out = out();
        let mut done = out.done.lock().unwrap_or_else(PoisonError::into_inner);
        match out.tx.try_send(line) {
            Ok(()) => done.0 += 1,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                out.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Waits up to `limit` for the queued status lines to reach stderr (before `moor` exits).
    pub fn flush(limit: Duration) {
        let out = out();
        let deadline = Instant::now() + limit;
        let mut done = out.done.lock().unwrap_or_else(PoisonError::into_inner);
        while done.1 < done.0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            done = out
                .progress
                .wait_timeout(done, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// Keystroke receipts from the same person closer together than this print once.
const KEYS_RECEIPT_QUIET: Duration = Duration::from_secs(10);

impl Status {
    /// A printer for `session` (the name or id as given).
    pub fn new(enabled: bool, session: &str) -> Self {
        let printed = Printed {
            session: session.to_owned(),
            ..Printed::default()
        };
        Self {
            enabled,
            state: Arc::new(Mutex::new(printed)),
            link_up: Arc::new(watch::channel(false).0),
            connections: Arc::default(),
        }
    }

    /// Connections moord welcomed so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Watches whether the link is up (true from a welcome until the connection ends).
    pub fn link_up(&self) -> watch::Receiver<bool> {
        self.link_up.subscribe()
    }

    fn set_link_up(&self, up: bool) {
        self.link_up
            .send_if_modified(|v| std::mem::replace(v, up) != up);
    }

    fn line(&self, text: impl AsRef<str>) {
        if self.enabled {
            let line = if self.with(|p| p.raw) {
                format!("\r\nmoor: {}\r\n", text.as_ref())
            } else {
                format!("moor: {}\n", text.as_ref())
            };
            out::line(line);
        }
    }

    /// The local terminal entered (or left) raw mode, where a line ends in `\r\n`.
    pub fn set_raw(&self, raw: bool) {
        self.with(|p| p.raw = raw);
    }

    /// A remote input was applied to the agent (or could not be): "prompt from alice applied".
    /// Keystrokes print once per burst, not once per key.
    pub fn input_outcome(&self, input: &crate::inputs::PendingInput, failure: Option<&String>) {
        let who = input.author.strip_prefix("user:").unwrap_or(&input.author);
        let what = match input.kind.as_str() {
            moor_protocol::kinds::INPUT_TEXT => "prompt",
            moor_protocol::kinds::INPUT_KEYS => "keys",
            moor_protocol::kinds::INPUT_RESIZE => "resize",
            moor_protocol::kinds::INPUT_INTERRUPT => "interrupt",
            moor_protocol::kinds::INPUT_PERMISSION => "permission decision",
            other => other,
        };
        if failure.is_none() && input.kind == moor_protocol::kinds::INPUT_KEYS {
            let quiet = self.with(|p| {
                let now = Instant::now();
                let quiet = p.last_keys.as_ref().is_some_and(|(w, at)| {
                    w == who && now.duration_since(*at) < KEYS_RECEIPT_QUIET
                });
                p.last_keys = Some((who.to_owned(), now));
                quiet
            });
            if quiet {
                return;
            }
        }
        match failure {
            None => self.line(format!("{what} from {who} applied")),
            Some(reason) => self.line(format!("{what} from {who} not applied: {reason}")),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Printed) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Anything left over from an earlier run of this session.
    pub fn resuming(&self, unacked: u64, uncertain: usize) {
        if unacked > 0 {
            self.line(format!(
                "{unacked} entries from an earlier run are still to be delivered"
            ));
        }
        if uncertain > 0 {
            self.line(format!(
                "{uncertain} remote input(s) were being applied when moor stopped; they will be reported as uncertain, not replayed"
            ));
        }
    }

    /// A connection was welcomed.
    pub fn connected(&self, welcome: &Welcome, resend: u64) {
        self.connections
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.set_link_up(true);
        let (first, recovered) = self.with(|p| {
            let first = !p.identified;
            let recovered = !p.connected;
            p.identified = true;
            p.connected = true;
            p.last_failure = None;
            p.session = welcome.session_name.clone();
            (first, recovered)
        });
        if first {
            // Exactly this shape; the test harness parses it.
            self.line(format!(
                "session {} {}",
                welcome.session_name, welcome.session_id
            ));
            if !welcome.web_url.is_empty() {
                self.line(format!("watch it at {}", welcome.web_url));
            }
        }
        if recovered {
            let pending = if resend > 0 {
                format!(", sending {resend} spooled entries")
            } else {
                String::new()
            };
            self.line(format!("connected{pending}"));
        }
    }

    /// The server asked us to move to a new connection.
    pub fn moving(&self, reason: &str) {
        tracing::info!(reason, "server asked to move; reconnecting at once");
    }

    /// A connection ended or could not be made; the next try is in `delay`.
    pub fn retrying(
        &self,
        err: &ConnectError,
        attempt: u32,
        delay: Duration,
        unacked: u64,
        draining: bool,
    ) {
        self.set_link_up(false);
        let reason = err.to_string();
        let (print, ever_connected) = self.with(|p| {
            let changed = p.connected || p.last_failure.as_deref() != Some(reason.as_str());
            p.connected = false;
            p.last_failure = Some(reason.clone());
            // Same failure again: only now and then, so a long outage stays visible but quiet.
            (changed || attempt.is_power_of_two(), p.identified)
        });
        if !print {
            return;
        }
        let what = if ever_connected {
            "link lost"
        } else {
            "cannot connect to moord"
        };
        let mut text = format!(
            "{what} ({reason}); reconnecting, attempt {attempt}, next try in {:.1} s",
            delay.as_secs_f64()
        );
        if unacked > 0 {
            text.push_str(&format!(
                "; {unacked} entries spooled, not yet acknowledged"
            ));
        }
        self.line(text);
        if err.close_code() == Some(moor_protocol::close::STORAGE_FULL) {
            self.line(format!(
                "moord's disk is full: the {unacked} entries not yet stored stay in the spool and go out once its operator frees space"
            ));
        }
        if matches!(err, ConnectError::Refused { status: 401 | 403 }) {
            self.line("the server refused the token; check MOOR_TOKEN (the admin token is in <moord data dir>/admin.token)");
        }
        if draining && unacked > 0 {
            let session = self.with(|p| p.session.clone());
            self.line(format!(
                "the agent has exited; {unacked} entries are still to be delivered. Ctrl-C leaves them in the spool for the next `moor run --session {session}`"
            ));
        }
    }

    /// The link stopped for good.
    pub fn stopped(&self, err: &ConnectError) {
        self.set_link_up(false);
        let session = self.with(|p| p.session.clone());
        let text = match err.close_code() {
            Some(moor_protocol::close::SUPERSEDED) => {
                format!("another bridge took over session {session}; stopping")
            }
            Some(moor_protocol::close::SESSION_ENDED) => {
                format!("session {session} has ended; stopping")
            }
            // The server's reason says which: a token refused or revoked, or a session that
            // is someone else's.
            Some(moor_protocol::close::UNAUTHORIZED) => match err {
                ConnectError::Terminal { detail, .. } if !detail.is_empty() => {
                    format!("the server refused this bridge: {detail}; stopping")
                }
                _ => "the server refused or revoked this bridge's token; stopping".to_owned(),
            },
            _ => format!("{err}; stopping"),
        };
        self.line(text);
    }

    /// Prints the spool's full-disk episodes as they start and end, until the spool is gone or
    /// `stop` fires: while the disk is full the agent's output is held back, not lost.
    pub async fn watch_spool_full(
        self,
        spool: crate::spool::Spool,
        stop: tokio_util::sync::CancellationToken,
    ) {
        let mut full = spool.subscribe_full();
        let (dir, retry) = (spool.dir().to_owned(), spool.full_retry());
        // Holding the spool would keep its channel open: the loop ends when the spool is gone.
        drop(spool);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                changed = full.changed() => if changed.is_err() { return },
            }
            let now = full.borrow_and_update().clone();
            match now {
                Some(error) => self.line(format!(
                    "the spool's disk is full ({error}); the agent's output waits (the agent blocks) until space is freed in {}; retrying every {:.1} s",
                    dir.display(),
                    retry.as_secs_f64(),
                )),
                None => self.line("the spool's disk has space again; the agent's output flows again"),
            }
        }
    }

    /// Free-form line (agent start/exit, interruption).
    pub fn note(&self, text: impl AsRef<str>) {
        self.line(text);
    }
}
