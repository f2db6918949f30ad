//! `moor checkpoints …`: list, show, diff, restore, create and push, over
//! [`crate::checkpoint::cli`].

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;

use crate::checkpoint::cli::{self, CliContext};
use crate::checkpoint::restore::Target;

#[derive(Debug, clap::Args)]
pub(super) struct ServerArgs {
    /// moord base URL.
    #[arg(long, env = "MOOR_SERVER", default_value = crate::config::DEFAULT_SERVER)]
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
pub(super) enum CheckpointsCommand {
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

/// Runs one `moor checkpoints` subcommand; its output goes to stdout.
pub(super) fn run(cmd: CheckpointsCommand) -> anyhow::Result<i32> {
    let runtime = super::runtime()?;
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
        if !out.is_empty() {
            super::say(format_args!("{}", out.trim_end_matches('\n')));
        }
        Ok(0)
    })
}
