//! Shared handles every handler gets: cheap to clone, no globals.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::Auth;
use crate::config::ServerConfig;
use crate::hub::Hub;
use crate::log::Log;
use crate::states::States;
use crate::store::Stores;

/// State shared by all handlers and connection loops.
#[derive(Debug, Clone)]
pub struct AppState {
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
    /// Base URL people open (no trailing slash).
    pub public_url: Arc<str>,
}

impl AppState {
    /// Link to a session in the web client.
    pub fn session_url(&self, id: impl std::fmt::Display) -> String {
        format!("{}/#/s/{id}", self.public_url)
    }
}
