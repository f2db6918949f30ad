//! `moor`: a thin clap shim over [`moor_bridge::Bridge`], plus the signal handling a terminal
//! user expects (first Ctrl-C goes to the agent, the second one stops `moor`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use moor_bridge::adapter::{
    terminal, AdapterError, AdapterKind, AdapterMode, AgentOptions, AgentSignal,
};
use moor_bridge::backoff::BackoffConfig;
use moor_bridge::checkpoint::{self, cli, cli::CliContext, restore::Target, CheckpointConfig};
use moor_bridge::config::parse_duration;
use moor_bridge::{Bridge, BridgeConfig, BridgeError, BridgeHandle, LinkConfig, Token};
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

#[derive(Debug, Parser)]
#[command(
    name = "moor",
    version,
    about = "Keep a coding agent's session reachable through moord"
)]
struct Cli {
    /// Also trust the CA certificates in this PEM file for moord's TLS (HTTPS and WSS), e.g. a
    /// moord serving a certificate of a private CA.
    #[arg(long, env = "MOOR_CA_FILE", global = true)]
    ca_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an agent and stream its session to moord: `moor run -- claude`.
    Run(RunArgs),
    /// Print what was in flight when a session was interrupted, checked against the files here.
    Recover(RecoverArgs),
    /// Restart Claude Code on an interrupted session's own agent session, in its directory, with
    /// the recovery brief as its first prompt.
    Resume(RecoverArgs),
    /// Checkpoints of this git work tree: list, show, diff, restore (here or from the server).
    #[command(subcommand)]
    Checkpoints(CheckpointsCommand),
    /// Log this device in to moord: shows a code and a QR code to approve while logged in;
    /// `moor run` then needs no token.
    Login {
        /// moord base URL.
        #[arg(env = "MOOR_SERVER", default_value = moor_bridge::config::DEFAULT_SERVER)]
        server: String,
    },
}

#[derive(Debug, clap::Args)]
struct ServerArgs {
    /// moord base URL.
    #[arg(long, env = "MOOR_SERVER", default_value = moor_bridge::config::DEFAULT_SERVER)]
    server: String,
    /// Bearer token for moord (needed for checkpoints that are not in this repository).
    #[arg(long, env = "MOOR_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A directory of the work tree (default: the current one).
    #[arg(long, short = 'C')]
    dir: Option<PathBuf>,
}

impl ServerArgs {
    fn context(&self) -> anyhow::Result<CliContext> {
        let dir = match &self.dir {
            Some(d) => d.clone(),
            None => std::env::current_dir().context("read the current directory")?,
        };
        Ok(CliContext {
            dir,
            server: self.server.clone(),
            token: self.token.clone(),
            max_file_bytes: 0,
        })
    }
}

#[derive(Debug, Subcommand)]
enum CheckpointsCommand {
    /// This repository's checkpoints, newest first (or a session's, from the server).
    List {
        #[command(flatten)]
        common: ServerArgs,
        /// List the server's checkpoints of this session (name or id) instead.
        #[arg(long)]
        session: Option<String>,
    },
    /// What a checkpoint holds.
    Show {
        /// Checkpoint id.
        id: String,
        #[command(flatten)]
        common: ServerArgs,
        /// The whole manifest as JSON.
        #[arg(long)]
        json: bool,
    },
    /// A checkpoint's changes against its base commit, as a patch.
    Diff {
        /// Checkpoint id.
        id: String,
        #[command(flatten)]
        common: ServerArgs,
    },
    /// Bring a checkpoint back. In place (the default), what is here now is checkpointed first;
    /// --branch or --worktree leave this work tree alone.
    Restore {
        /// Checkpoint id.
        id: String,
        #[command(flatten)]
        common: ServerArgs,
        /// Create this branch at the checkpoint instead of changing the work tree (with
        /// --worktree: the new worktree's branch).
        #[arg(long)]
        branch: Option<String>,
        /// Check the checkpoint out in a new linked worktree at this path.
        #[arg(long)]
        worktree: Option<PathBuf>,
        /// Overwrite files git ignores that are in the way (in place only).
        #[arg(long)]
        force: bool,
    },
    /// Take a checkpoint now and queue it for upload.
    Create {
        #[command(flatten)]
        common: ServerArgs,
        /// Session (name or id) to upload it under.
        #[arg(long, env = "MOOR_SESSION")]
        session: String,
    },
    /// Upload the checkpoints of this repository that are still queued.
    Push {
        #[command(flatten)]
        common: ServerArgs,
    },
}

#[derive(Debug, clap::Args)]
struct RecoverArgs {
    /// Session name or id.
    session: String,
    /// moord base URL.
    #[arg(long, env = "MOOR_SERVER", default_value = moor_bridge::config::DEFAULT_SERVER)]
    server: String,
    /// Bearer token for moord.
    #[arg(long, env = "MOOR_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Print JSON instead of Markdown (recover only).
    #[arg(long)]
    json: bool,
    /// Where spools live (resume only).
    #[arg(long, env = "MOOR_STATE_DIR")]
    state_dir: Option<PathBuf>,
}

impl RecoverArgs {
    fn api(&self) -> anyhow::Result<moor_bridge::recover::Api> {
        let Some(token) = self.token.as_deref().filter(|t| !t.trim().is_empty()) else {
            bail!("MOOR_TOKEN is not set: pass --token or set MOOR_TOKEN");
        };
        Ok(moor_bridge::recover::Api::new(&self.server, token)?)
    }
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// moord base URL (http(s):// or ws(s)://).
    #[arg(long, env = "MOOR_SERVER", default_value = moor_bridge::config::DEFAULT_SERVER)]
    server: String,
    /// Bearer token for moord.
    #[arg(long, env = "MOOR_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Session name or id (default: <command>-<6 hex>). Reuse it to resume after a crash.
    #[arg(long, env = "MOOR_SESSION")]
    session: Option<String>,
    /// Where spools live (default: $XDG_STATE_HOME/moor or ~/.local/state/moor).
    #[arg(long, env = "MOOR_STATE_DIR")]
    state_dir: Option<PathBuf>,
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
    /// How the agent runs: auto (claude for `claude`, pty when stdin is a terminal, else lines),
    /// pty, claude or lines.
    #[arg(long, env = "MOOR_MODE", default_value = "auto", value_parser = parse_mode)]
    mode: AdapterMode,
    /// Silence while a model response streams that is reported as a stall (e.g. 60s, 1500ms).
    #[arg(long, env = "MOOR_STALL_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    stall_timeout: Duration,
    /// Silence while a tool runs that is reported as a stall.
    #[arg(long, env = "MOOR_TOOL_TIMEOUT", default_value = "10m", value_parser = parse_duration)]
    tool_timeout: Duration,
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
    /// The agent command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

impl RunArgs {
    fn checkpoints(&self) -> Option<CheckpointConfig> {
        (!self.no_checkpoints).then(|| CheckpointConfig {
            interval: self.checkpoint_interval.max(Duration::from_millis(100)),
            max_file_bytes: self.checkpoint_max_file_bytes,
            ..CheckpointConfig::default()
        })
    }

    fn into_config(self) -> anyhow::Result<BridgeConfig> {
        let token = match self.token.filter(|t| !t.trim().is_empty()) {
            Some(t) => Token::new(t),
            None => login_token(&self.server)?,
        };
        let link = LinkConfig {
            backoff: BackoffConfig {
                initial: Duration::from_millis(self.backoff_initial_ms),
                max: Duration::from_millis(self.backoff_max_ms),
                stable_after: Duration::from_millis(self.stable_after_ms),
            },
            connect_timeout: Duration::from_millis(self.connect_timeout_ms),
            batch_max: self.batch_max,
            window: self.window,
            ..LinkConfig::default()
        };
        Ok(BridgeConfig {
            server: self.server,
            token,
            session: self.session,
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
                ..AgentOptions::default()
            },
        })
    }
}

fn parse_mode(s: &str) -> Result<AdapterMode, String> {
    match s {
        "auto" => Ok(AdapterMode::Auto),
        "pty" => Ok(AdapterMode::Fixed(AdapterKind::Pty)),
        "claude" => Ok(AdapterMode::Fixed(AdapterKind::Claude)),
        "lines" => Ok(AdapterMode::Fixed(AdapterKind::Lines)),
        other => Err(format!("{other:?}: use auto, pty, claude or lines")),
    }
}

fn main() -> ExitCode {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    if let Some(path) = &cli.ca_file {
        if let Err(e) = moor_bridge::tls::trust_ca_file(path) {
            eprintln!("moor: {e}");
            return ExitCode::from(2);
        }
    }
    let result = match cli.command {
        Command::Run(args) => run(args),
        Command::Recover(args) => recover(args),
        Command::Resume(args) => resume(args),
        Command::Checkpoints(cmd) => checkpoints(cmd),
        Command::Login { server } => login(&server),
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(1)),
        Err(err) => {
            let bridge_err = err.downcast_ref::<BridgeError>();
            // A link that stopped for good was already explained in plain words by the status line.
            if !matches!(bridge_err, Some(BridgeError::Link(_))) {
                eprintln!("moor: {err:#}");
            }
            // Like a shell: 127 for a command that does not exist, 126 for one that cannot run.
            let code = match bridge_err {
                Some(BridgeError::Adapter(AdapterError::Spawn { source, .. })) => {
                    match source.kind() {
                        std::io::ErrorKind::NotFound => 127,
                        std::io::ErrorKind::PermissionDenied => 126,
                        _ => 1,
                    }
                }
                _ => 1,
            };
            ExitCode::from(code)
        }
    }
}

fn recover(args: RecoverArgs) -> anyhow::Result<i32> {
    let runtime = tokio::runtime::Runtime::new().context("start the async runtime")?;
    runtime.block_on(async {
        let api = args.api()?;
        let mut brief = api.brief(&args.session).await?;
        let cwd = std::env::current_dir().context("read the current directory")?;
        moor_bridge::recover::check_locally(&mut brief, &cwd, Default::default());
        if args.json {
            println!("{}", serde_json::to_string_pretty(&brief)?);
        } else {
            println!("{}", brief.to_markdown());
        }
        Ok(0)
    })
}

fn resume(args: RecoverArgs) -> anyhow::Result<i32> {
    let runtime = tokio::runtime::Runtime::new().context("start the async runtime")?;
    let api = args.api()?;
    let (plan, _) = runtime.block_on(moor_bridge::recover::plan_resume(
        &api,
        &args.session,
        Default::default(),
    ))?;
    std::env::set_current_dir(&plan.cwd).with_context(|| {
        format!(
            "enter the session's directory {} (run moor resume on the machine that ran it)",
            plan.cwd
        )
    })?;
    eprintln!(
        "moor: resuming {} in {} as session {}",
        plan.command.join(" "),
        plan.cwd,
        plan.session
    );
    let mut config = BridgeConfig {
        server: args.server.clone(),
        token: Token::new(args.token.clone().unwrap_or_default()),
        session: Some(plan.session.clone()),
        state_dir: args.state_dir.clone(),
        command: plan.command.clone(),
        print_status: true,
        mode: AdapterMode::Fixed(AdapterKind::Claude),
        ..BridgeConfig::default()
    };
    config.agent.interactive = terminal::stdin_is_terminal();
    let prompt = runtime.spawn({
        let api = api.clone();
        let plan = plan.clone();
        async move {
            moor_bridge::recover::post_prompt_when_ready(&api, &plan, Duration::from_secs(60)).await
        }
    });
    let code = run_bridge(&runtime, config, Some(CheckpointConfig::default()))?;
    if let Ok(Err(e)) = runtime.block_on(prompt) {
        eprintln!("moor: the resume prompt could not be sent: {e:#}");
    }
    Ok(code)
}

fn run(args: RunArgs) -> anyhow::Result<i32> {
    let checkpoints = args.checkpoints();
    let config = args.into_config()?;
    let runtime = tokio::runtime::Runtime::new().context("start the async runtime")?;
    run_bridge(&runtime, config, checkpoints)
}

/// `moor login SERVER`: the device flow, then the credentials saved (0600).
fn login(server: &str) -> anyhow::Result<i32> {
    let path = moor_bridge::login::credentials_path()
        .context("no config dir: set MOOR_CONFIG_DIR or HOME")?;
    let runtime = tokio::runtime::Runtime::new().context("start the async runtime")?;
    let creds = runtime.block_on(moor_bridge::login::device_login(
        server,
        &mut std::io::stdout(),
    ))?;
    moor_bridge::login::save(&path, &creds)?;
    println!("logged in; credentials saved in {}", path.display());
    Ok(0)
}

/// The token of `moor login` for `server`, renewing itself.
fn login_token(server: &str) -> anyhow::Result<Token> {
    let creds = moor_bridge::login::credentials_path()
        .map(|p| moor_bridge::login::load(&p, server).map(|c| c.map(|c| (c, p))))
        .transpose()?
        .flatten();
    let Some((creds, path)) = creds else {
        bail!("not logged in to {server}: run `moor login {server}`, or pass --token / set MOOR_TOKEN (the admin token is in <moord data dir>/admin.token)");
    };
    Ok(Token::refreshing(moor_bridge::login::Refresher::new(
        creds,
        Some(path),
    )))
}

fn run_bridge(
    runtime: &tokio::runtime::Runtime,
    config: BridgeConfig,
    checkpoints: Option<CheckpointConfig>,
) -> anyhow::Result<i32> {
    runtime.block_on(async {
        let token = config.token.clone();
        let mut bridge = Bridge::new(config);
        if let Some(c) = checkpoints {
            bridge = bridge.with_checkpoints(c);
        }
        let shutdown = CancellationToken::new();
        token.keep_fresh(shutdown.clone());
        let signals = tokio::spawn(handle_signals(bridge.handle(), shutdown.clone()));
        let result = bridge.run(shutdown.clone()).await;
        signals.abort();
        Ok(result?.exit_code())
    })
}

fn checkpoints(cmd: CheckpointsCommand) -> anyhow::Result<i32> {
    use std::io::Write;
    let runtime = tokio::runtime::Runtime::new().context("start the async runtime")?;
    runtime.block_on(async {
        let out = match cmd {
            CheckpointsCommand::List { common, session } => {
                cli::list(&common.context()?, session.as_deref()).await?
            }
            CheckpointsCommand::Show { id, common, json } => {
                cli::show(&common.context()?, &id, json).await?
            }
            CheckpointsCommand::Diff { id, common } => {
                let patch = cli::diff(&common.context()?, &id).await?;
                std::io::stdout().write_all(&patch)?;
                return Ok(0);
            }
            CheckpointsCommand::Restore {
                id,
                common,
                branch,
                worktree,
                force,
            } => {
                let target = match (worktree, branch) {
                    (Some(path), branch) => Target::Worktree { path, branch },
                    (None, Some(name)) => Target::Branch(name),
                    (None, None) => Target::InPlace { force },
                };
                cli::restore(&common.context()?, &id, target).await?
            }
            CheckpointsCommand::Create { common, session } => {
                cli::create(&common.context()?, &session).await?
            }
            CheckpointsCommand::Push { common } => {
                let (left, stats) = cli::push(&common.context()?).await?;
                format!(
                    "uploaded {} blobs ({} bytes) and {} bytes of manifests; {left} checkpoint(s) still queued\n",
                    stats.blobs_sent, stats.bytes_sent, stats.manifest_bytes
                )
            }
        };
        print!("{out}");
        Ok(0)
    })
}

/// First SIGINT/SIGTERM while the agent runs goes to the agent; the bridge then ends the session
/// normally once the agent exits. Any further signal (or one after the agent is gone) stops
/// `moor` at once, leaving undelivered entries in the spool.
async fn handle_signals(bridge: BridgeHandle, shutdown: CancellationToken) -> anyhow::Result<()> {
    let mut interrupt = signal(SignalKind::interrupt()).context("listen for SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("listen for SIGTERM")?;
    let mut forwarded = false;
    loop {
        let (sig, name) = tokio::select! {
            _ = interrupt.recv() => (AgentSignal::Interrupt, "SIGINT"),
            _ = terminate.recv() => (AgentSignal::Terminate, "SIGTERM"),
        };
        if !forwarded && bridge.forward_signal(sig) {
            forwarded = true;
            eprintln!("moor: passed {name} to the agent; press Ctrl-C again to quit now (undelivered entries stay in the spool)");
        } else {
            shutdown.cancel();
            return Ok(());
        }
    }
}
