//! The self-healing link to `moord` (G4/G5): [`Link::run`] reconnects with backoff after every
//! failure that is not terminal, and `try_session` (in `session.rs`) drives one connection.
//!
//! The link owns no durable state. Entries come from the on-disk [`Spool`] and are dropped from
//! it only on `Ack`; inputs go to the adapter through a channel and their accounting lives in the
//! [`InputLedger`]. So dropping a connection at any point loses nothing: the next `Welcome`
//! says where to resume.
//!
//! Time enters only through tokio's clock (timeouts, the heartbeat interval, the idle watchdog,
//! backoff sleeps), and bytes only through a [`Dial`], so with in-memory pipes the whole link
//! runs on paused time in tests.

mod dial;
mod error;
mod frames;
mod session;

use std::sync::Arc;
use std::time::Duration;

use moor_protocol::bridge::AgentInfo;
use moor_protocol::{close, Entry, ProducerId, SessionId};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use self::dial::{Dial, DialFuture, Io, TcpDial};
pub use self::error::ConnectError;

use crate::backoff::Backoff;
use crate::config::{LinkConfig, Token};
use crate::inputs::{InputLedger, Receipt, RECEIPT_QUEUE};
use crate::spool::Spool;
use crate::status::Status;

/// The WebSocket type of one connection.
type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<Box<dyn Io>>>;

/// Everything a link needs.
#[derive(Debug, Clone)]
pub struct LinkParams {
    /// Bridge WebSocket URL, or several separated by commas: nodes of one deployment to fail
    /// over between (see [`crate::config::bridge_ws_url`]).
    pub url: String,
    /// Bearer token.
    pub token: Token,
    /// Session name or id for `Hello.session`.
    pub session: String,
    /// `Hello.continues`: the ended session this one continues.
    pub continues: Option<SessionId>,
    /// This bridge's producer id.
    pub producer: ProducerId,
    /// What runs, for `Hello.agent`.
    pub agent: AgentInfo,
    /// Timings and limits.
    pub config: LinkConfig,
    /// Where entries come from.
    pub spool: Spool,
    /// Input accounting, for `Hello.last_applied_input` and dedupe.
    pub ledger: InputLedger,
    /// Terminal status lines.
    pub status: Status,
}

/// The other ends of a link's channels.
#[derive(Debug)]
pub struct LinkPorts {
    /// Remote inputs, in the order the server sent them (wrap in [`crate::inputs::Inputs`]).
    pub inputs: mpsc::UnboundedReceiver<Entry>,
    /// Receipts for the link to send.
    pub receipts: mpsc::Sender<Receipt>,
    /// Set to `true` once the last entry is spooled: the link then sends `End` as soon as
    /// everything is acked, and returns [`LinkEnd::Ended`] when the server closes the session.
    pub finish: watch::Sender<bool>,
}

/// How [`Link::run`] ended without error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkEnd {
    /// Everything was acked and the server ended the session.
    Ended,
    /// The shutdown token was cancelled; unacked entries stay in the spool.
    Shutdown,
}

/// How one connection ended without error.
#[derive(Debug)]
enum Closed {
    Shutdown,
    /// The server asked us to move; the old socket is dropped once the new one is welcomed.
    Moved(Box<Ws>),
}

/// The bridge's side of `GET /api/v1/bridge`.
#[derive(Debug)]
pub struct Link {
    p: LinkParams,
    /// The servers to try, in order; `current` is the one in use or tried next.
    urls: Vec<String>,
    current: usize,
    inputs_tx: mpsc::UnboundedSender<Entry>,
    receipts_rx: mpsc::Receiver<Receipt>,
    finish_rx: watch::Receiver<bool>,
    /// `End` was sent on some connection: a following close 4004/1000 is the happy ending.
    end_sent: bool,
    /// When the current or last connection was welcomed (for the backoff's stability rule).
    welcomed_at: Option<Instant>,
    session_id: watch::Sender<Option<SessionId>>,
    /// Opens each connection's byte stream.
    dial: Arc<dyn Dial>,
}

impl Link {
    /// A link and the channel ends its user keeps.
    pub fn new(params: LinkParams) -> (Self, LinkPorts) {
        let (inputs_tx, inputs) = mpsc::unbounded_channel();
        let (receipts, receipts_rx) = mpsc::channel(RECEIPT_QUEUE);
        let (finish, finish_rx) = watch::channel(false);
        let (session_id, _) = watch::channel(None);
        let urls = crate::config::split_urls(&params.url);
        let link = Self {
            p: params,
            urls,
            current: 0,
            inputs_tx,
            receipts_rx,
            finish_rx,
            end_sent: false,
            welcomed_at: None,
            session_id,
            dial: Arc::new(TcpDial),
        };
        (
            link,
            LinkPorts {
                inputs,
                receipts,
                finish,
            },
        )
    }

    /// Connect through `dial` instead of TCP (tests use in-memory pipes, so the link's timing
    /// runs on tokio's paused clock).
    pub fn with_dial(mut self, dial: Arc<dyn Dial>) -> Self {
        self.dial = dial;
        self
    }

    /// Watch the session id, known after the first `Welcome`.
    pub fn session_id(&self) -> watch::Receiver<Option<SessionId>> {
        self.session_id.subscribe()
    }

    /// Keep a connection up until the session ends, a terminal error happens, or `shutdown`.
    #[tracing::instrument(skip_all, fields(session = %self.p.session))]
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<LinkEnd, ConnectError> {
        // Pin rustls to ring; with several providers compiled in, rustls would refuse to choose.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut backoff = Backoff::new(self.p.config.backoff);
        let mut retiring: Option<Box<Ws>> = None;
        loop {
            let result = self.try_session(&shutdown, retiring.take()).await;
            backoff.connection_ended(self.welcomed_at.map(|at| at.elapsed()));
            let err = match result {
                Ok(Closed::Shutdown) => return Ok(LinkEnd::Shutdown),
                Ok(Closed::Moved(old)) => {
                    // No backoff: the server asked for this, and the old socket still works.
                    retiring = Some(old);
                    continue;
                }
                // After `End`, only the server's 4004 says the session ended. Any other close,
                // a plain 1000 included (an operator's close can reach the connection before
                // the `End` is read), leaves it open: connect again and say `End` again; an
                // ended session's handshake is answered with 4004.
                Err(err) if self.end_sent && err.close_code() == Some(close::SESSION_ENDED) => {
                    return Ok(LinkEnd::Ended)
                }
                Err(err) => err,
            };
            if err.is_fatal() {
                self.p.status.stopped(&err);
                return Err(err);
            }
            // With several servers, the next attempt goes to the next one: a dead node is left
            // behind, and wherever the bridge lands, the `Welcome` mark says where to resume.
            self.current = (self.current + 1) % self.urls.len().max(1);
            // The status line already tells the person; keep the log quiet at the default level.
            tracing::info!(error = %err, "link to moord lost");
            // An expired or revoked access token: renew it (a login's token can) before the
            // next attempt, which then connects with the new one.
            if matches!(err, ConnectError::Refused { status: 401, .. })
                && self.p.token.refresh().await
            {
                tracing::info!("access token renewed after a 401");
            }
            let delay = backoff.next_delay();
            let draining = *self.finish_rx.borrow();
            self.p.status.retrying(
                &err,
                backoff.attempt(),
                delay,
                self.p.spool.unacked(),
                draining,
            );
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(LinkEnd::Shutdown),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// The bridge URL to connect to now.
    fn url(&self) -> &str {
        self.urls
            .get(self.current)
            .map_or(self.p.url.as_str(), String::as_str)
    }

    /// The heartbeat interval and idle timeout announced by the server, with fallbacks for 0.
    fn timings(heartbeat_ms: u64, idle_ms: u64) -> (Duration, Duration) {
        let heartbeat = if heartbeat_ms == 0 {
            Duration::from_secs(10)
        } else {
            Duration::from_millis(heartbeat_ms)
        };
        let idle = if idle_ms == 0 {
            heartbeat * 3
        } else {
            Duration::from_millis(idle_ms)
        };
        (heartbeat, idle)
    }
}
