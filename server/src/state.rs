//! Shared handles every handler gets: cheap to clone, no globals. Sits above `access`, the
//! session core, `hub` and `store`, and below the transports; it calls none of them.

use std::sync::Arc;

use axum::extract::FromRef;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::access::Auth;
use crate::config::ServerConfig;
use crate::extract::BodyLimit;
use crate::hub::Hub;
use crate::quota::Quotas;
use crate::session::leases::Leases;
use crate::session::log::Log;
use crate::session::states::States;
use crate::store::{AccessStore, Stores};
use crate::streams::Streams;

/// State shared by all handlers and connection loops: a handle to [`AppStateInner`], one
/// pointer to clone and to hold. Every connection's task holds it for its whole life (an idle
/// bridge socket's task held four copies of the fields themselves, 712 bytes each), and every
/// request clones it.
#[derive(Debug, Clone)]
pub struct AppState(Arc<AppStateInner>);

impl AppState {
    /// The handle to `inner`.
    pub fn new(inner: AppStateInner) -> Self {
        Self(Arc::new(inner))
    }
}

impl std::ops::Deref for AppState {
    type Target = AppStateInner;

    fn deref(&self) -> &AppStateInner {
        &self.0
    }
}

/// What [`AppState`] shares.
#[derive(Debug)]
pub struct AppStateInner {
    /// Group-committing writer in front of the store.
    pub log: Log,
    /// The database, by role (the log for reads, access, checkpoints, the cluster).
    pub store: Stores,
    /// Live fan-out and bridge registry.
    pub hub: Hub,
    /// Credential checks.
    pub auth: Auth,
    /// Timings and limits.
    pub config: Arc<ServerConfig>,
    /// Cancelled when the server starts shutting down.
    pub shutdown: CancellationToken,
    /// Background tasks (committers), awaited last at shutdown.
    pub tasks: TaskTracker,
    /// Connection loops (bridge and viewer sockets), awaited first at shutdown.
    pub conns: TaskTracker,
    /// Live session state followers.
    pub states: States,
    /// This node's bridge leases.
    pub leases: Leases,
    /// Base URL people open (no trailing slash).
    pub public_url: Arc<str>,
    /// Per-account quotas and this node's live sessions per account.
    pub quotas: Quotas,
    /// Open SSE streams and sockets per account.
    pub streams: Streams,
    /// SSE bodies, swept for readers that stopped reading.
    pub sse_stalls: crate::sse_pump::Stalls,
    /// The VAPID public key browsers subscribe with (base64url).
    pub vapid_public_key: Arc<str>,
}

impl AppState {
    /// Link to a session in the web client.
    pub fn session_url(&self, id: impl std::fmt::Display) -> String {
        format!("{}/#/s/{id}", self.public_url)
    }
}

impl FromRef<AppState> for Auth {
    fn from_ref(state: &AppState) -> Self {
        state.auth.clone()
    }
}

impl FromRef<AppState> for Arc<dyn AccessStore> {
    fn from_ref(state: &AppState) -> Self {
        state.store.access.clone()
    }
}

impl FromRef<AppState> for BodyLimit {
    fn from_ref(state: &AppState) -> Self {
        BodyLimit(state.config.max_body_bytes)
    }
}

/// An application state on a fresh SQLite file and in-memory sockets, for connection-loop
/// tests that run on paused time.
#[cfg(test)]
pub(crate) mod testing {
    use std::pin::Pin;
    use std::time::Duration;

    use axum::extract::ws::Message;
    use futures_util::{Sink, Stream};
    use tokio::sync::mpsc;

    use super::*;
    use crate::access::revocations::Revocations;

    /// A state and the directory its database lives in (removed on drop).
    pub(crate) struct TestState {
        pub(crate) state: AppState,
        _dir: tempfile::TempDir,
    }

    /// A state with `config` (changed by `edit`) over a fresh SQLite database.
    pub(crate) async fn state(edit: impl FnOnce(&mut ServerConfig)) -> TestState {
        let dir = tempfile::tempdir().unwrap();
        let mut config = ServerConfig {
            data_dir: dir.path().to_owned(),
            // Lease renewals are store I/O, which lets paused time run on: none within a test.
            bridge_lease: Duration::from_secs(4 * 24 * 3600),
            bridge_lease_renew: Duration::from_secs(2 * 24 * 3600),
            ..ServerConfig::default()
        };
        edit(&mut config);
        let store = crate::store::connect(&config.database_url()).await.unwrap();
        let shutdown = CancellationToken::new();
        let tasks = TaskTracker::new();
        let hub = Hub::default();
        let (log, states) = crate::session::log_and_states(
            store.log.clone(),
            hub.clone(),
            tasks.clone(),
            shutdown.clone(),
        );
        let leases = Leases::new(
            store.leases.clone(),
            log.clone(),
            states.clone(),
            "test-node",
            config.bridge_lease,
            config.bridge_lease_renew,
            true,
        );
        let auth = Auth::with_admin_token("test-token".into())
            .with_revocations(Revocations::new(shutdown.clone()));
        let state = AppState::new(AppStateInner {
            log,
            store,
            hub,
            auth,
            quotas: crate::quota::Quotas::new(&config),
            sse_stalls: crate::sse_pump::Stalls::new(config.stall_timeout),
            config: Arc::new(config),
            shutdown,
            tasks,
            conns: TaskTracker::new(),
            states,
            leases,
            public_url: "http://moor.test".into(),
            streams: Streams::new(u32::MAX),
            vapid_public_key: "".into(),
        });
        TestState { state, _dir: dir }
    }

    /// The server's end of an in-memory socket.
    pub(crate) type ServerEnd = (
        Pin<Box<dyn Sink<Message, Error = axum::Error> + Send>>,
        Pin<Box<dyn Stream<Item = Result<Message, axum::Error>> + Send>>,
    );

    /// An in-memory socket: the server's halves, and the peer's sender and receiver.
    pub(crate) fn socket() -> (
        ServerEnd,
        mpsc::UnboundedSender<Message>,
        mpsc::UnboundedReceiver<Message>,
    ) {
        let (to_server, from_peer) = mpsc::unbounded_channel::<Message>();
        let (to_peer, from_server) = mpsc::unbounded_channel::<Message>();
        let sink = futures_util::sink::unfold(to_peer, |tx, m: Message| async move {
            tx.send(m).map_err(axum::Error::new)?;
            Ok::<_, axum::Error>(tx)
        });
        let stream = futures_util::stream::unfold(from_peer, |mut rx| async move {
            rx.recv().await.map(|m| (Ok(m), rx))
        });
        ((Box::pin(sink), Box::pin(stream)), to_server, from_server)
    }
}
