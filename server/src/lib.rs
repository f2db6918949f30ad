//! `moord`, the Mooring relay server, as a library: tests and tools embed the real thing.
//!
//! [`Server::build`] opens the store and the credentials; [`Server::serve`] runs until the
//! shutdown token is cancelled, then drains: bridges are told to move, viewer streams end so
//! clients resume elsewhere, and queued commits finish before it returns.
//!
//! Layers, each calling only the ones below it:
//! - the application (`Server` here, `app` for the router, `cli` for the subcommands);
//! - transports: `http` (JSON API), `sse`, `ws` (viewer and bridge sockets), `web` (the web
//!   client); they never call each other;
//! - `state`, the handles every transport gets;
//! - `session` (the session core: log, tail, cursors, input, state followers), `relay` and
//!   `access` (who is calling and what they may do);
//! - `hub`, `store`, `blobs`, `extract`, `error`, `config`, `tls`, `compress`, `util`.
#![warn(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod access;
mod app;
pub mod blobs;
pub mod cli;
pub mod compress;
pub mod config;
mod diff;
pub mod error;
pub mod extract;
pub mod http;
pub mod hub;
pub mod memory;
pub mod metrics;
pub mod notify;
pub mod openapi;
pub mod quota;
pub mod relay;
pub mod retention;
pub mod serve;
pub mod session;
pub mod sse;
pub mod sse_pump;
pub mod state;
pub mod store;
pub mod streams;
pub mod tls;
mod util;
pub mod viewing;
mod web;
pub mod ws;

use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::ServerConfig;
use state::{AppState, AppStateInner};

/// A built server, ready to serve.
#[derive(Debug)]
pub struct Server {
    config: ServerConfig,
    /// This node's name (in its bridge leases, and on Postgres in notices).
    node_id: String,
    store: store::Stores,
    auth: access::Auth,
    token_created: bool,
    setup_code: Option<String>,
    tls: Option<tls::Acceptor>,
    quotas: quota::Quotas,
    followers: session::states::FollowerCount,
    metrics_listener: Option<TcpListener>,
    vapid: notify::vapid::Vapid,
}

impl Server {
    /// Creates the data directory, loads (or creates) the admin token, loads the TLS
    /// certificate, opens and migrates the store, and makes a setup code while no administrator
    /// exists.
    pub async fn build(config: ServerConfig) -> anyhow::Result<Self> {
        util::create_private_dir(&config.data_dir)
            .with_context(|| format!("create data dir {}", config.data_dir.display()))?;
        let (auth, token_created) = match &config.admin_token {
            // An empty token would let an empty bearer in (e.g. an unset variable in compose).
            Some(t) if t.trim().is_empty() => anyhow::bail!(
                "the admin token (--admin-token / MOOR_ADMIN_TOKEN) is set but empty; \
                 give a long random one, or unset it to use <data-dir>/admin.token"
            ),
            Some(t) => (access::Auth::with_admin_token(t.clone()), false),
            None => access::Auth::load_or_create(&config.data_dir)?,
        };
        let mut auth = auth
            .with_keys(access::jwt::Keys::load_or_create(&config.data_dir)?)
            .with_issuer(&config.token_issuer);
        auth.access_ttl = config.access_token_ttl;
        auth.refresh_ttl = config.refresh_token_ttl;
        auth.refresh_grace = config.refresh_grace;
        auth.limits = access::limits::Limits::new(&config);
        let tls = config.tls.as_ref().map(tls::acceptor).transpose()?;
        let vapid = notify::vapid::Vapid::load_or_create(
            &config.data_dir,
            config.notify.vapid_key_file.as_ref(),
        )?;
        let node_id = config.node_id();
        let store =
            store::connect_waiting(&config.database_url(), &node_id, config.database_wait).await?;
        let setup_code = if store.access.has_admin().await? {
            None
        } else {
            Some(auth.setup.issue(config.setup_code_ttl))
        };
        Ok(Self {
            quotas: quota::Quotas::new(&config),
            followers: session::states::FollowerCount::default(),
            metrics_listener: None,
            vapid,
            config,
            node_id,
            store,
            auth,
            token_created,
            setup_code,
            tls,
        })
    }

    /// The one-time code that creates the first administrator, if none exists (print it once,
    /// in the setup link; see [`Server::setup_link`]).
    pub fn setup_code(&self) -> Option<&str> {
        self.setup_code.as_deref()
    }

    /// The setup link for the web client when serving on `addr`, if setup is open.
    pub fn setup_link(&self, addr: std::net::SocketAddr) -> Option<String> {
        let base = self.config.public_url_for(addr);
        self.setup_code
            .as_deref()
            .map(|code| format!("{base}/#/setup&code={code}"))
    }

    /// The admin token, if it was created by this start (print it once).
    pub fn new_admin_token(&self) -> Option<&str> {
        self.token_created.then(|| self.auth.admin_token())
    }

    /// Adds a user, an administrator when `admin` (`moord user add [--admin]`).
    pub async fn add_user(&self, name: &str, password: String, admin: bool) -> anyhow::Result<()> {
        access::users::add_user(self.store.access.as_ref(), name, password, admin)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Revokes a user (`moord user revoke`). Running servers refuse their tokens at the next
    /// request; on Postgres the running nodes also end their live connections at once (with
    /// SQLite, only a revocation through the API does).
    pub async fn revoke_user(&self, name: &str) -> anyhow::Result<()> {
        self.store
            .access
            .revoke_user(name, moor_protocol::now_ms())
            .await
            .with_context(|| format!("revoke user {name:?}"))?;
        access::announce(&self.store, &store::Revocation::User(name.to_owned())).await;
        Ok(())
    }

    /// Serves `GET /metrics` without a token on `listener` too (`--metrics-listen`).
    pub fn with_metrics_listener(mut self, listener: TcpListener) -> Self {
        self.metrics_listener = Some(listener);
        self
    }

    /// The store's roles, for tools and tests.
    pub fn store(&self) -> store::Stores {
        self.store.clone()
    }

    /// The per-account quotas and this node's live sessions per account, for tests.
    pub fn quotas(&self) -> quota::Quotas {
        self.quotas.clone()
    }

    /// How many session state followers run, for tests and monitoring.
    pub fn follower_count(&self) -> session::states::FollowerCount {
        self.followers.clone()
    }

    /// Serves on `listener` until `shutdown` is cancelled, then drains.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let addr = listener.local_addr().context("read listener address")?;
        let public_url = self.config.public_url_for(addr);
        let tasks = TaskTracker::new();
        let conns = TaskTracker::new();
        let hub = hub::Hub::default().with_metrics(metrics::Metrics::with_memory_budget(
            memory::budget(self.config.memory_budget_bytes),
        ));
        let grace = self.config.shutdown_grace;
        let max_streams = self.config.max_streams_per_user;
        let log = session::log::Log::new(
            self.store.log.clone(),
            hub.clone(),
            tasks.clone(),
            self.config.commit_window,
        );
        let revocations = access::revocations::Revocations::new(shutdown.clone());
        // Several nodes on one database: follow the others' notices (returns at once otherwise).
        tasks.spawn(relay::run(
            self.store.clone(),
            hub.clone(),
            revocations.clone(),
            shutdown.clone(),
        ));
        let states = session::states::States::new(
            self.store.log.clone(),
            hub.clone(),
            log.clone(),
            tasks.clone(),
            shutdown.clone(),
        )
        .counted_by(self.followers);
        let leases = session::leases::Leases::new(
            self.store.leases.clone(),
            log.clone(),
            states.clone(),
            &self.node_id,
            self.config.bridge_lease,
            self.config.bridge_lease_renew,
            self.store.cluster.is_none(),
        );
        // Connections an earlier run held are ended before new ones are taken.
        let ended = leases
            .sweep_at_start()
            .await
            .context("end the bridge connections of the previous run")?;
        if ended > 0 {
            tracing::info!(
                ended,
                "recorded the end of bridge connections the previous run held"
            );
        }
        tasks.spawn(leases.clone().run(shutdown.clone()));
        let vapid_public_key: Arc<str> = self.vapid.public_key.as_str().into();
        let notifier = notify::Notifier::new(
            self.store.clone(),
            &self.node_id,
            self.config.notify.clone(),
            self.vapid,
            public_url.as_str().into(),
            hub.metrics().notify.clone(),
            self.auth.action_links(self.config.notify.action_ttl),
        )?;
        if self.config.notify.sender {
            tasks.spawn(notify::run(notifier, shutdown.clone()));
        }
        tasks.spawn(retention::run(
            self.store.clone(),
            blobs::BlobStore::new(&self.config.data_dir),
            self.config.retention.clone(),
            shutdown.clone(),
        ));
        let state = AppState::new(AppStateInner {
            vapid_public_key,
            leases,
            quotas: self.quotas,
            states,
            log: log.clone(),
            store: self.store,
            hub,
            auth: self.auth.with_revocations(revocations),
            sse_stalls: sse_pump::Stalls::new(self.config.stall_timeout),
            config: Arc::new(self.config),
            shutdown: shutdown.clone(),
            tasks: tasks.clone(),
            conns: conns.clone(),
            public_url: public_url.into(),
            streams: streams::Streams::new(max_streams),
        });
        if let Some(metrics) = self.metrics_listener {
            tasks.spawn(serve::serve(
                metrics,
                app::metrics_router(state.clone()),
                None,
                shutdown.clone(),
                grace,
            ));
        }
        serve::serve(
            listener,
            app::router(state),
            self.tls.map(|a| a.0),
            shutdown.clone(),
            grace,
        )
        .await
        .context("serve http")?;
        // Sockets first (they may still append a disconnect entry), then the committers.
        conns.close();
        if tokio::time::timeout(grace, conns.wait()).await.is_err() {
            tracing::warn!("connections still open after the shutdown grace period");
        }
        log.close();
        tasks.close();
        if tokio::time::timeout(grace, tasks.wait()).await.is_err() {
            tracing::warn!("commits still running after the shutdown grace period");
        }
        Ok(())
    }
}
