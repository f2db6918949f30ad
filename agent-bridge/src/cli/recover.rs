//! `moor recover` and `moor resume`: what an interrupted session was doing, and picking it up
//! again, over [`crate::recover`].

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use crate::adapter::{terminal, AdapterKind, AdapterMode};
use crate::checkpoint::CheckpointConfig;
use crate::recover::{self, with_api, Api};
use crate::{BridgeConfig, Token};

use super::run::token_for;

#[derive(Debug, clap::Args)]
pub(super) struct RecoverArgs {
    /// Session name or id.
    session: String,
    /// moord base URL.
    #[arg(long, env = "MOOR_SERVER", default_value = crate::config::DEFAULT_SERVER)]
    server: String,
    /// Bearer token for moord (default: the credentials of `moor login`).
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
    /// `--token` / `MOOR_TOKEN`, else the credentials of `moor login`, as `moor run` does.
    fn token(&self) -> anyhow::Result<Token> {
        token_for(&self.server, self.token.as_deref())
    }
}

/// `moor recover SESSION`: the recovery brief, checked against the files here.
pub(super) fn recover(args: RecoverArgs) -> anyhow::Result<i32> {
    let runtime = super::runtime()?;
    runtime.block_on(async {
        let token = args.token()?;
        let session = args.session.as_str();
        let mut brief = with_api(&args.server, &token, |api| async move {
            api.brief(session).await
        })
        .await?;
        let cwd = std::env::current_dir().context("read the current directory")?;
        recover::check_locally(&mut brief, &cwd, Default::default());
        if args.json {
            super::say(format_args!("{}", serde_json::to_string_pretty(&brief)?));
        } else {
            super::say(format_args!("{}", brief.to_markdown()));
        }
        Ok(0)
    })
}

/// `moor resume SESSION`: Claude Code restarted on the session, with the brief as its prompt.
pub(super) fn resume(args: RecoverArgs) -> anyhow::Result<i32> {
    let runtime = super::runtime()?;
    let token = args.token()?;
    let session = args.session.as_str();
    let (plan, _) = runtime.block_on(with_api(&args.server, &token, |api| async move {
        recover::plan_resume(&api, session, Default::default()).await
    }))?;
    let api = Api::new(&args.server, &token.expose())?;
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
        token: token.clone(),
        session: Some(plan.session.clone()),
        continues: plan.continues,
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
