//! `moor run` as a library: open the session's state, start the agent, keep the link up, and
//! end the session once the agent is gone and everything it produced is acked.
//!
//! Owns the order of the ending: agent exits → `agent.exit` spooled → link told to finish →
//! `End` after the last ack → server closes with 4004 → state removed. Anything that cuts this
//! short leaves the spool on disk for the next `moor run --session <name>`.

use std::future::Future;
use std::time::Duration;

use moor_protocol::bridge::AgentInfo;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use moor_protocol::checkpoint::CheckpointReason;

use crate::adapter::{
    AdapterDone, AdapterError, AdapterIo, Agent, AgentExit, AgentPid, AgentSignal, AgentSpec,
};
use crate::checkpoint::{CheckpointConfig, CheckpointContext, Checkpoints};
use crate::config::{self, BridgeConfig};
use crate::error::BridgeError;
use crate::inputs::Inputs;
use crate::link::{Link, LinkEnd, LinkParams};
use crate::session_dir::SessionDir;
use crate::status::Status;

/// After a terminal link error, how long the agent gets to exit after SIGTERM before SIGKILL.
const TERMINATE_GRACE: Duration = Duration::from_secs(5);
/// How long the agent's exit waits for its checkpoint before the session is ended.
const EXIT_CHECKPOINT_PATIENCE: Duration = Duration::from_secs(20);
/// How long the agent's start waits for a checkpoint asked for before it (`before_start`); a
/// tree that takes longer still gets it, while the agent runs.
const START_CHECKPOINT_PATIENCE: Duration = Duration::from_secs(60);
/// Why inputs that arrive after the agent exited fail.
const AGENT_GONE: &str = "the agent has exited";

/// How a bridge run ended without error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BridgeExit {
    /// The agent exited and the server holds everything: the session is over.
    Ended {
        /// How the agent exited.
        agent: AgentExit,
    },
    /// Stopped on request (second Ctrl-C); entries not yet acked stay in the spool.
    Interrupted {
        /// How the agent exited, if it had.
        agent: Option<AgentExit>,
        /// Entries left in the spool.
        unacked: u64,
    },
}

impl BridgeExit {
    /// The process exit code for `moor`: the agent's own, or 130 when interrupted.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Ended { agent } => agent.exit_code(),
            Self::Interrupted { .. } => 130,
        }
    }
}

/// Lets the caller (`main`'s signal handler) talk to a running bridge.
#[derive(Debug, Clone)]
pub struct BridgeHandle {
    signals: mpsc::UnboundedSender<AgentSignal>,
    running: watch::Receiver<bool>,
}

impl BridgeHandle {
    /// Forward `signal` to the agent. Returns false if the agent is not running (any more), in
    /// which case the caller should stop the bridge instead.
    pub fn forward_signal(&self, signal: AgentSignal) -> bool {
        *self.running.borrow() && self.signals.send(signal).is_ok()
    }
}

/// One `moor run`.
#[derive(Debug)]
pub struct Bridge {
    config: BridgeConfig,
    signals_tx: mpsc::UnboundedSender<AgentSignal>,
    signals_rx: mpsc::UnboundedReceiver<AgentSignal>,
    running: watch::Sender<bool>,
    checkpoints: Option<CheckpointConfig>,
}

impl Bridge {
    /// A bridge for `config`; nothing starts until [`Bridge::run`].
    pub fn new(config: BridgeConfig) -> Self {
        let (signals_tx, signals_rx) = mpsc::unbounded_channel();
        let (running, _) = watch::channel(false);
        Self {
            config,
            signals_tx,
            signals_rx,
            running,
            checkpoints: None,
        }
    }

    /// Checkpoints the agent's git work tree while it runs (off unless asked for, so embedding
    /// the bridge never writes refs into whatever repository the process happens to be in).
    pub fn with_checkpoints(mut self, config: CheckpointConfig) -> Self {
        self.checkpoints = Some(config);
        self
    }

    /// A handle for forwarding signals to the agent.
    pub fn handle(&self) -> BridgeHandle {
        BridgeHandle {
            signals: self.signals_tx.clone(),
            running: self.running.subscribe(),
        }
    }

    /// Run the agent and the link until the session ends. Cancelling `shutdown` stops at once:
    /// the agent gets SIGTERM and unacked entries stay in the spool.
    pub async fn run(self, shutdown: CancellationToken) -> Result<BridgeExit, BridgeError> {
        let Self {
            config,
            signals_tx,
            signals_rx,
            running,
            checkpoints: checkpoint_config,
        } = self;
        if config.token.is_empty() {
            return Err(BridgeError::Config(
                "no token: set MOOR_TOKEN or pass --token (the admin token is in <moord data dir>/admin.token)".into(),
            ));
        }
        if config.command.is_empty() {
            return Err(BridgeError::Config(
                "no command to run: moor run -- <command> [args...]".into(),
            ));
        }
        let url = config::bridge_ws_url(&config.server)?;
        let session = config
            .session
            .clone()
            .unwrap_or_else(|| config::generate_session_name(&config.command));
        let state_dir = match &config.state_dir {
            Some(dir) => dir.clone(),
            None => config::default_state_dir()?,
        };
        let cwd = std::env::current_dir()
            .map_err(|e| BridgeError::Config(format!("no working directory: {e}")))?;

        let dir = SessionDir::open(&state_dir, &session)?;
        let status = Status::new(config.print_status, &session);
        let metrics_stop = shutdown.child_token();
        let _metrics_stop = metrics_stop.clone().drop_guard();
        if let Some(addr) = &config.metrics_listen {
            let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
                BridgeError::Config(format!("cannot listen for metrics on {addr}: {e}"))
            })?;
            tracing::info!(addr = %addr, "serving metrics");
            tokio::spawn(crate::metrics::serve(
                listener,
                status.clone(),
                dir.spool.clone(),
                metrics_stop,
            ));
        }
        let full_stop = shutdown.child_token();
        let _full_stop = full_stop.clone().drop_guard();
        tokio::spawn(
            status
                .clone()
                .watch_spool_full(dir.spool.clone(), full_stop),
        );
        status.resuming(dir.spool.unacked(), dir.ledger.uncertain().len());
        let spec = AgentSpec {
            command: config.command.clone(),
            cwd: cwd.clone(),
            options: config.agent.clone(),
        };
        let kind = config
            .mode
            .resolve(&config.command, config.agent.interactive);
        let start_checkpoints = || match checkpoint_config.clone() {
            Some(c) => Checkpoints::start(
                c,
                CheckpointContext {
                    cwd: cwd.clone(),
                    session: session.clone(),
                    server: config.server.clone(),
                    token: config.token.clone(),
                    spool: dir.spool.clone(),
                    status: status.clone(),
                    after_tools: kind.structured(),
                },
            ),
            None => Checkpoints::disabled(),
        };
        // Asked for first: the start checkpoint, spooled ahead of anything the agent does,
        // holds the tree before the agent touched it.
        let first = match &checkpoint_config {
            Some(c) if c.before_start => {
                let checkpoints = start_checkpoints();
                checkpoints
                    .take_now(CheckpointReason::Start, START_CHECKPOINT_PATIENCE)
                    .await;
                Some(checkpoints)
            }
            _ => None,
        };
        let agent = match Agent::start(kind, &spec) {
            Ok(agent) => agent,
            Err(e) => {
                if let Some(checkpoints) = first {
                    checkpoints.abort();
                }
                return Err(e.into());
            }
        };
        // Otherwise after the agent started: a command that cannot run has no work to protect.
        let checkpoints = match first {
            Some(checkpoints) => checkpoints,
            None => start_checkpoints(),
        };
        let pid = agent.pid();
        running.send_replace(true);

        let (link, ports) = Link::new(LinkParams {
            url,
            token: config.token.clone(),
            session: session.clone(),
            continues: config.continues,
            producer: dir.producer,
            agent: AgentInfo {
                command: config.command.clone(),
                cwd: cwd.display().to_string(),
                host: config::host_name(),
                adapter: kind.name().to_owned(),
            },
            config: config.link.clone(),
            spool: dir.spool.clone(),
            ledger: dir.ledger.clone(),
            status: status.clone(),
        });
        let io = AdapterIo {
            spool: dir.spool.clone(),
            inputs: Inputs::new(ports.inputs, dir.ledger.clone(), ports.receipts),
            signals: signals_rx,
            status: status.clone(),
        };
        let link_stop = shutdown.child_token();
        let link_fut = link.run(link_stop.clone());
        let agent_fut = agent.run(io);
        tokio::pin!(link_fut, agent_fut);

        let mut agent_exit: Option<AgentExit> = None;
        let mut leftover_inputs: Option<Inputs> = None;
        let link_result = loop {
            tokio::select! {
                done = &mut agent_fut, if agent_exit.is_none() => {
                    running.send_replace(false);
                    match done {
                        Ok(AdapterDone { exit, mut inputs }) => {
                            status.note(format!("agent exited ({}); delivering what is left", describe_exit(&exit)));
                            // Receipts for inputs already here must be queued before the link may
                            // end the session, or they would never reach the server.
                            while !inputs_exhausted(&mut inputs).await {}
                            // Its `checkpoint.created` must be spooled before the link may end
                            // the session.
                            checkpoints.take_now(CheckpointReason::Exit, EXIT_CHECKPOINT_PATIENCE).await;
                            agent_exit = Some(exit);
                            leftover_inputs = Some(inputs);
                            ports.finish.send_replace(true);
                        }
                        Err(e) => {
                            // Without an adapter nothing new can be recorded; keep what is spooled.
                            checkpoints.take_now(CheckpointReason::Exit, EXIT_CHECKPOINT_PATIENCE).await;
                            checkpoints.abort();
                            link_stop.cancel();
                            let _ = (&mut link_fut).await;
                            return Err(e.into());
                        }
                    }
                }
                () = fail_inputs(&mut leftover_inputs) => {}
                result = &mut link_fut => break result,
            }
        };
        running.send_replace(false);

        let grace = checkpoint_config
            .map(|c| c.upload_grace)
            .unwrap_or_default();
        match link_result {
            Ok(LinkEnd::Ended) => {
                let left = checkpoints.finish(grace).await;
                if left > 0 {
                    status.note(format!(
                        "{left} checkpoint(s) not uploaded yet; they are kept in this repository \
                         (refs/moor/checkpoints) and uploaded by `moor checkpoints push` or the next `moor run` here"
                    ));
                }
                let agent = agent_exit.unwrap_or_default();
                status.note(format!("session {session} ended; everything was delivered"));
                if let Err(e) = dir.remove() {
                    tracing::warn!(error = %e, "could not remove the finished session's state");
                }
                Ok(BridgeExit::Ended { agent })
            }
            Ok(LinkEnd::Shutdown) => {
                checkpoints.abort();
                if agent_exit.is_none() {
                    let _ = crate::adapter::signal_agent(pid.get(), AgentSignal::Terminate);
                }
                let unacked = dir.spool.unacked();
                if unacked > 0 {
                    status.note(format!(
                        "stopped; {unacked} entries stay in the spool for the next `moor run --session {session}`"
                    ));
                }
                Ok(BridgeExit::Interrupted {
                    agent: agent_exit,
                    unacked,
                })
            }
            Err(err) => {
                if agent_exit.is_none() {
                    stop_agent(&pid, &signals_tx, agent_fut).await;
                }
                checkpoints.abort();
                Err(err.into())
            }
        }
    }
}

/// Fail every input that arrives after the agent is gone, so none stays "delivered" forever.
/// Pending while there is nothing to fail.
async fn fail_inputs(inputs: &mut Option<Inputs>) {
    let Some(queue) = inputs.as_mut() else {
        return std::future::pending().await;
    };
    match queue.next().await {
        Ok(Some(input)) => {
            if let Err(e) = input.failed(AGENT_GONE).await {
                tracing::warn!(error = %e, "could not record a failed input");
            }
        }
        Ok(None) | Err(_) => {
            *inputs = None;
        }
    }
}

/// Fail one queued input; true when none was queued.
async fn inputs_exhausted(inputs: &mut Inputs) -> bool {
    match inputs.next_queued().await {
        Ok(Some(input)) => {
            if let Err(e) = input.failed(AGENT_GONE).await {
                tracing::warn!(error = %e, "could not record a failed input");
            }
            false
        }
        Ok(None) => true,
        Err(e) => {
            tracing::warn!(error = %e, "could not take a queued input");
            true
        }
    }
}

/// The link stopped for good while the agent runs: SIGTERM, a grace period, then SIGKILL.
async fn stop_agent(
    pid: &AgentPid,
    signals: &mpsc::UnboundedSender<AgentSignal>,
    agent: impl Future<Output = Result<AdapterDone, AdapterError>>,
) {
    tokio::pin!(agent);
    let _ = signals.send(AgentSignal::Terminate);
    if tokio::time::timeout(TERMINATE_GRACE, &mut agent)
        .await
        .is_err()
    {
        let _ = crate::adapter::signal_agent(pid.get(), AgentSignal::Kill);
        let _ = tokio::time::timeout(TERMINATE_GRACE, agent).await;
    }
}

fn describe_exit(exit: &AgentExit) -> String {
    match (exit.code, exit.signal) {
        (Some(code), _) => format!("code {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        _ => "unknown status".to_owned(),
    }
}

/// Run a bridge with `config` until the session ends or `shutdown` is cancelled.
pub async fn run(
    config: BridgeConfig,
    shutdown: CancellationToken,
) -> Result<BridgeExit, BridgeError> {
    Bridge::new(config).run(shutdown).await
}
