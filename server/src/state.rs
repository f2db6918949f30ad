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
use crate::session::log::Log;
use crate::session::states::States;
use crate::store::Store;

/// State shared by all handlers and connection loops.
#[derive(Debug, Clone)]
pub struct AppState {
    /// Group-committing writer in front of the store.
    pub log: Log,
    /// The durable log, for reads.
    pub store: Arc<dyn Store>,
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
    /// Base URL people open (no trailing slash).
    pub public_url: Arc<str>,
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

impl FromRef<AppState> for Arc<dyn Store> {
    fn from_ref(state: &AppState) -> Self {
        state.store.clone()
    }
}

impl FromRef<AppState> for BodyLimit {
    fn from_ref(state: &AppState) -> Self {
        BodyLimit(state.config.max_body_bytes)
    }
}
