//! `moor recover` and `moor resume`: what an interrupted session was doing, and picking it up
//! again, over [`crate::recover`].

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::adapter::{terminal, AdapterKind, AdapterMode};
use crate::checkpoint::CheckpointConfig;
use crate::recover::{self, Api};
use crate::{BridgeConfig, Token};

#[derive(Debug, clap::Args)]
pub(super) struct RecoverArgs {
    /// Session name or id.
    session: String,
    /// moord base URL.
    #[arg(long, env = "MOOR_SERVER", default_value = crate::config::DEFAULT_SERVER)]
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
    fn api(&self) -> anyhow::Result<Api> {
        let Some(token) = self.token.as_deref().filter(|t| !t.trim().is_empty()) else {
            bail!("MOOR_TOKEN is not set: pass --token or set MOOR_TOKEN");
        };
        Ok(Api::new(&self.server, token)?)
    }
}

/// `moor recover SESSION`: the recovery brief, checked against the files here.
pub(super) fn recover(args: RecoverArgs) -> anyhow::Result<i32> {
    let runtime = super::runtime()?;
    runtime.block_on(async {
        let api = args.api()?;
        let mut brief = api.brief(&args.session).await?;
        let cwd = std::env::current_dir().context("read the current directory")?;
        recover::check_locally(&mut brief, &cwd, Default::default());
        if args.json {
            println!("{}", serde_json::to_string_pretty(&brief)?);
        } else {
            println!("{}", brief.to_markdown());
        }
        Ok(0)
    })
}

/// `moor resume SESSION`: Claude Code restarted on the session, with the brief as its prompt.
pub(super) fn resume(args: RecoverArgs) -> anyhow::Result<i32> {
    let runtime = super::runtime()?;
    let api = args.api()?;
    let (plan, _) = runtime.block_on(recover::plan_resume(
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
        async move { recover::post_prompt_when_ready(&api, &plan, Duration::from_secs(60)).await }
    });
    let code = super::run::run_bridge(&runtime, config, Some(CheckpointConfig::default()))?;
    if let Ok(Err(e)) = runtime.block_on(prompt) {
        eprintln!("moor: the resume prompt could not be sent: {e:#}");
    }
    Ok(code)
}
