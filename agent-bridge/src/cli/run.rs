//! `moor run` and `moor login`: the bridge in a terminal (flags to [`BridgeConfig`], the token
//! of `moor login` when none is given, and the Ctrl-C handling a terminal user expects: the first
//! one goes to the agent, the second stops `moor`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

use crate::adapter::{terminal, tree, AdapterKind, AdapterMode, AgentOptions, AgentSignal};
use crate::backoff::BackoffConfig;
use crate::checkpoint::{self, CheckpointConfig};
use crate::config::parse_duration;
use crate::login;
use crate::recover::{self, with_api};
use crate::{Bridge, BridgeConfig, BridgeHandle, LinkConfig, Token};

#[derive(Debug, clap::Args)]
pub(super) struct RunArgs {
    /// moord base URL (http(s):// or ws(s)://).
    #[arg(long, env = "MOOR_SERVER", default_value = crate::config::DEFAULT_SERVER)]
    server: String,
    /// Bearer token for moord.
    #[arg(long, env = "MOOR_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Session name or id (default: <command>-<6 hex>). Reuse it to resume after a crash: the
    /// log goes on, and Claude Code continues its conversation (see --fresh).
    #[arg(long, env = "MOOR_SESSION")]
    session: Option<String>,
    /// With --session of an earlier Claude Code run: start a new conversation instead of
    /// continuing the earlier one.
    #[arg(long, env = "MOOR_FRESH")]
    fresh: bool,
    /// Name or id of an ended session this new session continues: linked to it (as `moor
    /// resume` links one), and a structured agent (Claude Code, …) continues its conversation
    /// unless --fresh. Needs --session.
    #[arg(long, env = "MOOR_CONTINUES", requires = "session")]
    continues: Option<String>,
    /// Where spools live (default: $XDG_STATE_HOME/moor or ~/.local/state/moor).
    #[arg(long, env = "MOOR_STATE_DIR")]
    state_dir: Option<PathBuf>,
    #[command(flatten)]
    link: LinkArgs,
    /// Serve Prometheus metrics (spool depth, acked seq, link state, reconnects) at
    /// `GET /metrics` on this address, e.g. 127.0.0.1:9465 (plain HTTP: keep it private).
    #[arg(long, env = "MOOR_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    /// How the agent runs: auto (claude for `claude`, codex for `codex`, acp for `gemini` and
    /// `codex-acp`, pty when stdin is a terminal, else lines), pty, claude, acp (any Agent Client
    /// Protocol agent), codex (`codex app-server`) or lines.
    #[arg(long, env = "MOOR_MODE", default_value = "auto", value_parser = parse_mode)]
    mode: AdapterMode,
    /// Silence while a model response streams that is reported as a stall (e.g. 60s, 1500ms).
    #[arg(long, env = "MOOR_STALL_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    stall_timeout: Duration,
    /// Silence while a tool runs that is reported as a stall.
    #[arg(long, env = "MOOR_TOOL_TIMEOUT", default_value = "10m", value_parser = parse_duration)]
    tool_timeout: Duration,
    /// How long the agent, and the processes it leaves running when it ends, get between
    /// SIGTERM and SIGKILL.
    #[arg(long, env = "MOOR_STOP_GRACE", default_value = "5s", value_parser = parse_duration)]
    stop_grace: Duration,
    /// Restart a stalled or crashed Claude Code on the same session (`claude --resume <id>`)
    /// with a short recovery prompt.
    #[arg(long, env = "MOOR_AUTO_RESUME")]
    auto_resume: bool,
    /// Checkpoint the work tree this often when it changed (besides after file-changing tool
    /// calls, when the link drops and when the agent exits).
    #[arg(long, env = "MOOR_CHECKPOINT_INTERVAL", default_value = "2m", value_parser = parse_duration)]
    checkpoint_interval: Duration,
    /// Files larger than this many bytes are left out of checkpoints (and listed).
    #[arg(long, env = "MOOR_CHECKPOINT_MAX_FILE_BYTES", default_value_t = checkpoint::DEFAULT_MAX_FILE_BYTES,
          value_parser = clap::value_parser!(u64).range(1..=checkpoint::MAX_FILE_BYTES_LIMIT))]
    checkpoint_max_file_bytes: u64,
    /// Do not checkpoint the work tree.
    #[arg(long, env = "MOOR_NO_CHECKPOINTS")]
    no_checkpoints: bool,
    /// Checkpoint the work tree before the agent starts (when it has changes), and start the
    /// agent once that checkpoint is recorded, rather than checkpointing while it starts.
    #[arg(long, env = "MOOR_CHECKPOINT_FIRST", conflicts_with = "no_checkpoints")]
    checkpoint_first: bool,
    /// The agent command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub(super) command: Vec<String>,
}

/// The link's timings and limits, shared by `moor run` and `moor host`.
#[derive(Debug, clap::Args)]
pub(super) struct LinkArgs {
    /// First reconnect delay ceiling, ms.
    #[arg(long, env = "MOOR_BACKOFF_INITIAL_MS", default_value_t = 1000)]
    backoff_initial_ms: u64,
    /// Largest reconnect delay, ms.
    #[arg(long, env = "MOOR_BACKOFF_MAX_MS", default_value_t = 30_000)]
    backoff_max_ms: u64,
    /// A connection that lived this long resets the backoff, ms.
    #[arg(long, env = "MOOR_STABLE_AFTER_MS", default_value_t = 10_000)]
    stable_after_ms: u64,
    /// TCP connect + WebSocket upgrade + welcome must finish within this, ms.
    #[arg(long, env = "MOOR_CONNECT_TIMEOUT_MS", default_value_t = 10_000)]
    connect_timeout_ms: u64,
    /// Most entries per frame.
    #[arg(long, env = "MOOR_BATCH_MAX", default_value_t = 1000)]
    batch_max: usize,
    /// Most entries sent and not yet acknowledged.
    #[arg(long, env = "MOOR_WINDOW", default_value_t = 20_000)]
    window: u64,
}

impl LinkArgs {
    pub(super) fn config(&self) -> LinkConfig {
        LinkConfig {
            backoff: BackoffConfig {
                initial: Duration::from_millis(self.backoff_initial_ms),
                max: Duration::from_millis(self.backoff_max_ms),
                stable_after: Duration::from_millis(self.stable_after_ms),
            },
            connect_timeout: Duration::from_millis(self.connect_timeout_ms),
            batch_max: self.batch_max,
            window: self.window,
            ..LinkConfig::default()
        }
    }
}

impl RunArgs {
    fn checkpoints(&self) -> Option<CheckpointConfig> {
        (!self.no_checkpoints).then(|| CheckpointConfig {
            interval: self.checkpoint_interval.max(Duration::from_millis(100)),
            max_file_bytes: self.checkpoint_max_file_bytes,
            before_start: self.checkpoint_first,
            ..CheckpointConfig::default()
        })
    }

    fn into_config(self) -> anyhow::Result<BridgeConfig> {
        let token = token_for(&self.server, self.token.as_deref())?;
        let link = self.link.config();
        Ok(BridgeConfig {
            server: self.server,
            token,
            session: self.session,
            continues: None,
            state_dir: self.state_dir,
            command: self.command,
            link,
            print_status: true,
            mode: self.mode,
            agent: AgentOptions {
                interactive: terminal::stdin_is_terminal(),
                stall_timeout: self.stall_timeout,
                tool_timeout: self.tool_timeout,
                auto_resume: self.auto_resume,
                stop_grace: self.stop_grace,
                ..AgentOptions::default()
            },
            metrics_listen: self.metrics_listen,
        })
    }
}

pub(super) fn parse_mode(s: &str) -> Result<AdapterMode, String> {
    match s {
        "auto" => Ok(AdapterMode::Auto),
        "pty" => Ok(AdapterMode::Fixed(AdapterKind::Pty)),
        "claude" => Ok(AdapterMode::Fixed(AdapterKind::Claude)),
        "lines" => Ok(AdapterMode::Fixed(AdapterKind::Lines)),
        "acp" => Ok(AdapterMode::Fixed(AdapterKind::Acp)),
        "codex" => Ok(AdapterMode::Fixed(AdapterKind::Codex)),
        "gemini-headless" => Ok(AdapterMode::Fixed(AdapterKind::GeminiHeadless)),
        "codex-exec" => Ok(AdapterMode::Fixed(AdapterKind::CodexExec)),
        other => Err(format!(
            "{other:?}: use auto, pty, claude, acp, codex, gemini-headless, codex-exec or lines"
        )),
    }
}

/// `moor run -- COMMAND`.
pub(super) fn run(args: RunArgs) -> anyhow::Result<i32> {
    let checkpoints = args.checkpoints();
    let fresh = args.fresh;
    let continues = args.continues.clone();
    let mut config = args.into_config()?;
    let runtime = super::runtime()?;
    match continues {
        Some(from) => runtime.block_on(continue_ended(&mut config, &from, fresh))?,
        None if !fresh => runtime.block_on(continue_conversation(&mut config)),
        None => {}
    }
    run_bridge(&runtime, config, checkpoints)
}

/// With `--continues FROM`: links the new session to the ended session FROM and, for a
/// structured agent (unless `fresh`), continues FROM's conversation. An error when FROM cannot
/// be read or has not ended: the link is the point of the run.
async fn continue_ended(config: &mut BridgeConfig, from: &str, fresh: bool) -> anyhow::Result<()> {
    let structured = config
        .mode
        .resolve(&config.command, config.agent.interactive)
        .structured();
    let cwd = std::env::current_dir().context("read the current directory")?;
    let (id, continuation) = with_api(&config.server, &config.token, |api| {
        let cwd = cwd.clone();
        async move { recover::continuation_of_ended(&api, from, &cwd).await }
    })
    .await
    .with_context(|| format!("read session {from}, which this session continues"))?;
    config.continues = Some(id);
    if structured && !fresh {
        config.agent.continuation = continuation;
    }
    Ok(())
}

/// With `--session X` of an earlier Claude Code run: continue its conversation, with the
/// recovery brief as the first prompt when work was cut off. When the server cannot say, the
/// agent starts a new conversation and the terminal says how to continue the earlier one.
async fn continue_conversation(config: &mut BridgeConfig) {
    let Some(key) = config.session.clone() else {
        return;
    };
    if !config
        .mode
        .resolve(&config.command, config.agent.interactive)
        .structured()
    {
        return;
    }
    let found = match std::env::current_dir() {
        Ok(cwd) => {
            with_api(&config.server, &config.token, |api| {
                let (key, cwd) = (key.clone(), cwd.clone());
                async move { recover::continuation(&api, &key, &cwd).await }
            })
            .await
        }
        Err(e) => Err(e.into()),
    };
    match found {
        Ok(c) => config.agent.continuation = c,
        Err(e) => crate::status::say(format!(
            "moor: could not read session {key} from the server ({e:#}); starting a new Claude \
             Code conversation (`moor resume {key}` continues the earlier one)"
        )),
    }
}

/// `moor login SERVER`: the device flow, then the credentials saved (0600).
pub(super) fn login(server: &str) -> anyhow::Result<i32> {
    let path = login::credentials_path().context("no config dir: set MOOR_CONFIG_DIR or HOME")?;
    let runtime = super::runtime()?;
    let creds = runtime.block_on(login::device_login(server, &mut std::io::stdout()))?;
    login::save(&path, &creds)?;
    super::say(format_args!(
        "logged in; credentials saved in {}",
        path.display()
    ));
    Ok(0)
}

/// `--token` / `MOOR_TOKEN` when given and not blank, else the credentials of `moor login`.
pub(super) fn token_for(server: &str, given: Option<&str>) -> anyhow::Result<Token> {
    match given.filter(|t| !t.trim().is_empty()) {
        Some(t) => Ok(Token::new(t)),
        None => login_token(server),
    }
}

/// The token of `moor login` for `server`, renewing itself.
pub(super) fn login_token(server: &str) -> anyhow::Result<Token> {
    let creds = login::credentials_path()
        .map(|p| login::load(&p, server).map(|c| c.map(|c| (c, p))))
        .transpose()?
        .flatten();
    let Some((creds, path)) = creds else {
        bail!("not logged in to {server}: run `moor login {server}`, or pass --token / set MOOR_TOKEN (the admin token is in <moord data dir>/admin.token)");
    };
    Ok(Token::refreshing(login::Refresher::new(creds, Some(path))))
}

/// Runs a bridge until it ends, with the terminal's signal handling.
pub(super) fn run_bridge(
    runtime: &tokio::runtime::Runtime,
    config: BridgeConfig,
    checkpoints: Option<CheckpointConfig>,
) -> anyhow::Result<i32> {
    runtime.block_on(async {
        let reaper = adopt_orphans();
        let token = config.token.clone();
        let stop_grace = config.agent.stop_grace;
        let mut bridge = Bridge::new(config);
        if let Some(c) = checkpoints {
            bridge = bridge.with_checkpoints(c);
        }
        let shutdown = CancellationToken::new();
        token.keep_fresh(shutdown.clone());
        let signals = tokio::spawn(handle_signals(
            bridge.handle(),
            shutdown.clone(),
            stop_grace,
        ));
        let result = bridge.run(shutdown.clone()).await;
        signals.abort();
        if let Some(reaper) = reaper {
            reaper.abort();
        }
        Ok(result?.exit_code())
    })
}

/// Makes `moor` the subreaper of the agent's processes, so what the agent leaves behind is
/// stopped when it ends, and collects orphans that exit while it runs. Without it (an old
/// kernel) the agent's leftovers go to init as before.
fn adopt_orphans() -> Option<tokio::task::JoinHandle<()>> {
    if let Err(e) = tree::become_subreaper() {
        tracing::warn!(error = %e, "cannot become a subreaper; processes the agent leaves running will not be stopped");
        return None;
    }
    let mut exits = match signal(SignalKind::child()) {
        Ok(exits) => exits,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGCHLD; orphans are collected when the agent ends");
            return None;
        }
    };
    Some(tokio::spawn(async move {
        while exits.recv().await.is_some() {
            tree::reap_orphans();
        }
    }))
}

/// First SIGINT/SIGTERM while the agent runs goes to the agent; the bridge then ends the session
/// normally once the agent exits. An agent still running `stop_grace` after a SIGTERM gets
/// SIGKILL (to its process group), so that a stop from outside (`moor host`, systemd) still
/// ends the session and records how the agent ended. Any further signal (or one after the
/// agent is gone) stops `moor` at once, leaving undelivered entries in the spool.
async fn handle_signals(
    bridge: BridgeHandle,
    shutdown: CancellationToken,
    stop_grace: Duration,
) -> anyhow::Result<()> {
    let mut interrupt = signal(SignalKind::interrupt()).context("listen for SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("listen for SIGTERM")?;
    let mut forwarded = false;
    let force = tokio::time::sleep(Duration::MAX);
    tokio::pin!(force);
    let mut forcing = false;
    loop {
        let (sig, name) = tokio::select! {
            _ = interrupt.recv() => (AgentSignal::Interrupt, "SIGINT"),
            _ = terminate.recv() => (AgentSignal::Terminate, "SIGTERM"),
            _ = &mut force, if forcing => {
                forcing = false;
                if bridge.forward_signal(AgentSignal::Kill) {
                    crate::status::say(format!("moor: the agent was still running {stop_grace:?} after SIGTERM; killed it (SIGKILL)"));
                }
                continue;
            }
        };
        if !forwarded && bridge.forward_signal(sig) {
            forwarded = true;
            if sig == AgentSignal::Terminate {
                force
                    .as_mut()
                    .reset(tokio::time::Instant::now() + stop_grace);
                forcing = true;
            }
            crate::status::say(format!("moor: passed {name} to the agent; press Ctrl-C again to quit now (undelivered entries stay in the spool)"));
        } else {
            shutdown.cancel();
            return Ok(());
        }
    }
}
