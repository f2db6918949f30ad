//! `moor checkpoints list|show|diff|restore|create|push`: the local refs first, the server's
//! copy when the checkpoint is not here (a fresh clone, another machine).

use std::path::PathBuf;

use moor_protocol::checkpoint::{CheckpointManifest, CheckpointReason, CheckpointSummary};
use moor_protocol::utc;
use tokio::runtime::Handle;

use super::client::Client;
use super::commit::{checkpoint_commit, list_ids};
use super::describe::describe;
use super::git::Repo;
use super::restore::{import, restore as restore_to, Restored, Target};
use super::snapshot::{take, TakeOptions, Taken};
use super::upload::{self, UploadStats};
use super::{CheckpointError, DEFAULT_MAX_FILE_BYTES};
use crate::config::Token;

/// Where and against which server the commands run.
#[derive(Debug, Clone)]
pub struct CliContext {
    /// A directory of the work tree.
    pub dir: PathBuf,
    /// moord URL.
    pub server: String,
    /// Bearer token, when the server is needed.
    pub token: Option<String>,
    /// Size cap for checkpoints taken by these commands.
    pub max_file_bytes: u64,
}

impl CliContext {
    fn repo(&self) -> Result<Repo, CheckpointError> {
        Ok(Repo::probe(&self.dir)?)
    }

    fn client(&self, why: &str) -> Result<Client, CheckpointError> {
        match self.token.as_deref().filter(|t| !t.trim().is_empty()) {
            Some(token) => Client::new(&self.server, Token::new(token)),
            None => Err(CheckpointError::Server(format!(
                "{why}; set MOOR_TOKEN (or pass --token) to use the server's copy"
            ))),
        }
    }

    fn take_options(&self, reason: CheckpointReason) -> TakeOptions {
        TakeOptions {
            reason,
            max_file_bytes: if self.max_file_bytes == 0 {
                DEFAULT_MAX_FILE_BYTES
            } else {
                self.max_file_bytes
            },
            session: "moor-checkpoints".into(),
            only_if_changed: false,
            last_tree: None,
        }
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, CheckpointError> + Send + 'static,
) -> Result<T, CheckpointError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CheckpointError::Server(format!("task failed: {e}")))?
}

/// One line per checkpoint of this repository (or, with `session`, of the server's copy).
pub async fn list(ctx: &CliContext, session: Option<&str>) -> Result<String, CheckpointError> {
    if let Some(session) = session {
        let summaries = ctx
            .client("listing a session's checkpoints needs the server")?
            .list(session)
            .await?;
        return Ok(summaries.iter().map(|s| line(s, false)).collect());
    }
    let repo = ctx.repo()?;
    blocking(move || {
        let pending: Vec<String> = upload::pending(&repo)
            .into_iter()
            .map(|p| p.manifest.id)
            .collect();
        let mut out = String::new();
        for id in list_ids(&repo)? {
            let d = describe(&repo, &id)?;
            out.push_str(&line(&d.manifest.summary(), pending.contains(&id)));
        }
        if out.is_empty() {
            out.push_str("no checkpoints in this repository\n");
        }
        Ok(out)
    })
    .await
}

fn line(s: &CheckpointSummary, pending: bool) -> String {
    let mut text = format!(
        "{}  {}  {:<14} {} files +{} -{}",
        s.id,
        utc(s.created_at),
        s.reason.name(),
        s.files_total,
        s.diffstat.insertions,
        s.diffstat.deletions
    );
    if s.skipped_total > 0 {
        text.push_str(&format!(", {} skipped", s.skipped_total));
    }
    if let Some(state) = &s.repo_state {
        text.push_str(&format!(", during a {state}"));
    }
    if pending {
        text.push_str("  (not uploaded yet)");
    }
    text.push('\n');
    text
}

/// The manifest of `id`: local if the checkpoint is here, else the server's.
async fn manifest(
    ctx: &CliContext,
    repo: &Repo,
    id: &str,
) -> Result<CheckpointManifest, CheckpointError> {
    let (r, i) = (repo.clone(), id.to_owned());
    if blocking(move || Ok(checkpoint_commit(&r, &i)?))
        .await?
        .is_some()
    {
        let (r, i) = (repo.clone(), id.to_owned());
        return Ok(blocking(move || describe(&r, &i)).await?.manifest);
    }
    let client = ctx.client(&format!("no checkpoint {id} in this repository"))?;
    Ok(server_checkpoint(&client, id).await?.manifest)
}

async fn server_checkpoint(
    client: &Client,
    id: &str,
) -> Result<moor_protocol::checkpoint::StoredCheckpoint, CheckpointError> {
    client.checkpoint(id).await.map_err(|e| match e {
        CheckpointError::NotFound(_) => CheckpointError::NotFound(format!(
            "{id}: not in this repository, and not on {}",
            client.base()
        )),
        e => e,
    })
}

/// What `id` holds, for people (or as JSON).
pub async fn show(ctx: &CliContext, id: &str, json: bool) -> Result<String, CheckpointError> {
    let repo = ctx.repo()?;
    let m = manifest(ctx, &repo, id).await?;
    if json {
        return serde_json::to_string_pretty(&m)
            .map(|s| s + "\n")
            .map_err(|e| CheckpointError::Server(e.to_string()));
    }
    let mut out = format!(
        "checkpoint {}\ntaken     {} ({})\nbase      {}{}\ncommit    {}\nwork tree {}\n",
        m.id,
        utc(m.created_at),
        m.reason.name(),
        m.base.as_deref().unwrap_or("(no commit yet)"),
        m.branch
            .as_deref()
            .map(|b| format!(" on {b}"))
            .unwrap_or_default(),
        m.commit,
        m.work_tree,
    );
    if let Some(state) = &m.repo_state {
        out.push_str(&format!("state     a {state} was in progress\n"));
    }
    out.push_str(&format!(
        "\n{} files changed, {} insertions(+), {} deletions(-)\n",
        m.diffstat.files, m.diffstat.insertions, m.diffstat.deletions
    ));
    for f in &m.files {
        let stat = match (f.insertions, f.deletions) {
            (Some(i), Some(d)) => format!("+{i} -{d}"),
            _ => "binary".to_owned(),
        };
        let status = serde_json::to_value(f.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        out.push_str(&format!("  {status:<12} {}  ({stat})\n", f.path));
    }
    for s in &m.skipped {
        out.push_str(&format!("  skipped      {}  ({})\n", s.path, s.reason));
    }
    Ok(out)
}

/// The patch of `id` against its base.
pub async fn diff(ctx: &CliContext, id: &str) -> Result<Vec<u8>, CheckpointError> {
    let repo = ctx.repo()?;
    let (r, i) = (repo.clone(), id.to_owned());
    if blocking(move || Ok(checkpoint_commit(&r, &i)?))
        .await?
        .is_some()
    {
        let i = id.to_owned();
        return Ok(blocking(move || describe(&repo, &i)).await?.patch);
    }
    ctx.client(&format!("no checkpoint {id} in this repository"))?
        .diff(id)
        .await
}

/// Restores `id` to `target`, fetching it from the server first when it is not here.
pub async fn restore(
    ctx: &CliContext,
    id: &str,
    target: Target,
) -> Result<String, CheckpointError> {
    let (done, fetched) = restore_to_target(ctx, id, &target).await?;
    let source = if fetched { " (from the server)" } else { "" };
    Ok(match target {
        Target::InPlace { .. } => format!(
            "restored checkpoint {id}{source}: {} files written, {} removed; what was here before is checkpoint {} (moor checkpoints restore {} to go back)\n",
            done.written,
            done.removed,
            done.safety.as_deref().unwrap_or("?"),
            done.safety.as_deref().unwrap_or("?"),
        ),
        Target::Branch(name) => format!("branch {name} now points at checkpoint {id}{source} (commit {})\n", done.commit),
        Target::Worktree { path, .. } => format!("checkpoint {id}{source} is checked out in {}\n", path.display()),
    })
}

/// Restores `id` to `target` (fetched from the server first when it is not here): what was
/// done, and whether it came from the server. `moor host` restores into a branch this way.
pub async fn restore_to_target(
    ctx: &CliContext,
    id: &str,
    target: &Target,
) -> Result<(Restored, bool), CheckpointError> {
    let repo = ctx.repo()?;
    let (r, i) = (repo.clone(), id.to_owned());
    let fetched = if blocking(move || Ok(checkpoint_commit(&r, &i)?))
        .await?
        .is_none()
    {
        let client = ctx.client(&format!("no checkpoint {id} in this repository"))?;
        let m = server_checkpoint(&client, id).await?.manifest;
        let r = repo.clone();
        let handle = Handle::current();
        blocking(move || import(&r, &m, |b| handle.block_on(client.blob(&b.sha256)))).await?;
        true
    } else {
        false
    };
    let opts = ctx.take_options(CheckpointReason::BeforeRestore);
    let (i, t) = (id.to_owned(), target.clone());
    let done: Restored = blocking(move || restore_to(&repo, &i, &t, opts)).await?;
    Ok((done, fetched))
}

/// Takes a checkpoint now and queues it for upload to `session`.
pub async fn create(ctx: &CliContext, session: &str) -> Result<String, CheckpointError> {
    let repo = ctx.repo()?;
    let server = crate::recover::http_base(&ctx.server)
        .map_err(|e| CheckpointError::Server(e.to_string()))?;
    let mut opts = ctx.take_options(CheckpointReason::Manual);
    opts.session = session.to_owned();
    let session = session.to_owned();
    blocking(move || match take(&repo, &opts)? {
        Taken::New(d) => {
            upload::enqueue(&repo, &server, &session, &d)?;
            Ok(format!(
                "checkpoint {} taken ({} files)\n",
                d.manifest.id,
                d.manifest.files.len()
            ))
        }
        Taken::Unchanged { .. } => Ok("nothing to checkpoint\n".to_owned()),
    })
    .await
}

/// Uploads every checkpoint of this repository still queued for this server.
pub async fn push(ctx: &CliContext) -> Result<(usize, UploadStats), CheckpointError> {
    let repo = ctx.repo()?;
    let client = ctx.client("uploading needs the server")?;
    upload::push_all(&repo, &client).await
}
