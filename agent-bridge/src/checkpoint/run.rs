//! The checkpoint tasks of a running bridge: the taker (decides when, takes, spools the entry,
//! queues the upload) and the uploader (drains the queue, retrying with backoff and at once when
//! the link comes back). Both end when [`Checkpoints::finish`] is called.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use moor_protocol::checkpoint::CheckpointReason;
use moor_protocol::state::ToolClass;
use moor_protocol::{kinds, NewEntry};
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::client::Client;
use super::git::{ProbeError, Repo};
use super::snapshot::{take, TakeOptions, Taken};
use super::upload::{self, Uploaded};
use super::{CheckpointConfig, CheckpointError};
use crate::config::Token;
use crate::spool::{Draft, Spool, SpoolError};
use crate::status::Status;

/// Longest wait between upload retries.
const RETRY_MAX: Duration = Duration::from_secs(60);

/// What the checkpoint tasks need from the bridge.
#[derive(Debug, Clone)]
pub struct CheckpointContext {
    /// The agent's working directory (any directory of the work tree).
    pub cwd: PathBuf,
    /// Session name or id, as the server knows it.
    pub session: String,
    /// The server's URL.
    pub server: String,
    /// Bearer token (renewing itself when it comes from `moor login`).
    pub token: Token,
    /// Where `checkpoint.created` entries go.
    pub spool: Spool,
    /// The terminal's status line, and whether the link is up.
    pub status: Status,
    /// Take one after each tool call that may change files (the adapter writes tool entries).
    pub after_tools: bool,
}

type Request = (CheckpointReason, Option<oneshot::Sender<()>>);

/// The checkpoint tasks of one `moor run`; inert when the directory is not a git work tree.
#[derive(Debug)]
pub struct Checkpoints {
    running: Option<Running>,
}

#[derive(Debug)]
struct Running {
    requests: mpsc::UnboundedSender<Request>,
    stop_taking: CancellationToken,
    stop_uploading: CancellationToken,
    finishing: CancellationToken,
    taker: JoinHandle<()>,
    uploader: JoinHandle<()>,
    pending: watch::Receiver<usize>,
}

impl Checkpoints {
    /// No checkpoints.
    pub fn disabled() -> Self {
        Self { running: None }
    }

    /// Starts the tasks, or says clearly why there will be no checkpoints.
    pub fn start(config: CheckpointConfig, ctx: CheckpointContext) -> Self {
        let repo = match Repo::probe(&ctx.cwd) {
            Ok(repo) => repo,
            Err(e) => {
                let why = match &e {
                    ProbeError::NotARepo(_) | ProbeError::NotAWorkTree(_) => format!(
                        "checkpoints are off: {e}. Run `git init` there to have moor checkpoint \
                         the agent's work, or pass --no-checkpoints to silence this"
                    ),
                    ProbeError::Git(g) => format!("checkpoints are off: {g}"),
                };
                ctx.status.note(why);
                return Self::disabled();
            }
        };
        let client = match Client::new(&ctx.server, ctx.token.clone()) {
            Ok(c) => c,
            Err(e) => {
                ctx.status.note(format!("checkpoints are off: {e}"));
                return Self::disabled();
            }
        };
        let (requests, requests_rx) = mpsc::unbounded_channel();
        let stop_taking = CancellationToken::new();
        let stop_uploading = CancellationToken::new();
        let finishing = CancellationToken::new();
        let wake = Arc::new(Notify::new());
        clean_stale_temp_files(&repo);
        let own = upload::pending(&repo)
            .iter()
            .filter(|p| p.session == ctx.session && p.server == client.base())
            .count();
        let (pending_tx, pending) = watch::channel(own);
        let tools = ctx.after_tools.then(|| {
            let (tx, rx) = mpsc::channel(1);
            tokio::spawn(watch_tools(ctx.spool.clone(), tx, stop_taking.clone()));
            rx
        });
        let taker = tokio::spawn(
            Taker {
                repo: repo.clone(),
                config: config.clone(),
                ctx: ctx.clone(),
                server: client.base().to_owned(),
                wake: wake.clone(),
                pending: pending_tx.clone(),
                last_tree: None,
                last_error: None,
            }
            .run(requests_rx, tools, stop_taking.clone()),
        );
        let uploader = tokio::spawn(upload_loop(
            Uploader {
                repo,
                client,
                session: ctx.session.clone(),
                config,
                status: ctx.status.clone(),
            },
            wake,
            pending_tx,
            Stops {
                stop: stop_uploading.clone(),
                finishing: finishing.clone(),
            },
        ));
        Self {
            running: Some(Running {
                requests,
                stop_taking,
                stop_uploading,
                finishing,
                taker,
                uploader,
                pending,
            }),
        }
    }

    /// Takes a checkpoint now (if something changed) and waits until it is taken and queued,
    /// at most `patience`.
    pub async fn take_now(&self, reason: CheckpointReason, patience: Duration) {
        let Some(r) = &self.running else { return };
        let (tx, rx) = oneshot::channel();
        if r.requests.send((reason, Some(tx))).is_ok() {
            let _ = tokio::time::timeout(patience, rx).await;
        }
    }

    /// Stops taking checkpoints and waits up to `grace` for the uploads still queued. Returns
    /// how many are left (they stay queued for the next `moor run` or `moor checkpoints push`).
    pub async fn finish(self, grace: Duration) -> usize {
        let Some(mut r) = self.running else { return 0 };
        r.stop_taking.cancel();
        let _ = (&mut r.taker).await;
        // The uploader makes one more pass at once and gives up at its first failure: a server
        // that cannot take them now must not hold `moor` for the whole grace period.
        r.finishing.cancel();
        let mut uploader_done = false;
        let _ = tokio::time::timeout(grace, async {
            tokio::select! {
                _ = r.pending.wait_for(|n| *n == 0) => {}
                _ = &mut r.uploader => uploader_done = true,
            }
        })
        .await;
        let left = *r.pending.borrow();
        r.stop_uploading.cancel();
        if !uploader_done {
            let _ = r.uploader.await;
        }
        left
    }

    /// Stops both tasks at once (the bridge is being interrupted).
    pub fn abort(self) {
        if let Some(r) = self.running {
            r.stop_taking.cancel();
            r.stop_uploading.cancel();
        }
    }
}

struct Taker {
    repo: Repo,
    config: CheckpointConfig,
    ctx: CheckpointContext,
    server: String,
    wake: Arc<Notify>,
    pending: watch::Sender<usize>,
    last_tree: Option<String>,
    last_error: Option<String>,
}

impl Taker {
    async fn run(
        mut self,
        mut requests: mpsc::UnboundedReceiver<Request>,
        mut tools: Option<mpsc::Receiver<()>>,
        stop: CancellationToken,
    ) {
        let mut link_up = self.ctx.status.link_up();
        let mut was_up = *link_up.borrow_and_update();
        let start = tokio::time::Instant::now() + self.config.interval;
        let mut interval = tokio::time::interval_at(start, self.config.interval);
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut queue: Vec<Request> = vec![(CheckpointReason::Start, None)];
        loop {
            if queue.is_empty() {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    Some(req) = requests.recv() => queue.push(req),
                    _ = interval.tick() => queue.push((CheckpointReason::Interval, None)),
                    Ok(()) = link_up.changed() => {
                        let up = *link_up.borrow_and_update();
                        if was_up && !up {
                            queue.push((CheckpointReason::LinkDown, None));
                        }
                        was_up = up;
                    }
                    Some(()) = next_tool(&mut tools) => queue.push((CheckpointReason::Tool, None)),
                }
            }
            // Whatever else asked meanwhile is served by the same checkpoint.
            while let Ok(req) = requests.try_recv() {
                queue.push(req);
            }
            if let Some(rx) = tools.as_mut() {
                while rx.try_recv().is_ok() {}
            }
            let reason = queue
                .iter()
                .map(|(r, _)| *r)
                .max_by_key(|r| priority(*r))
                .unwrap_or(CheckpointReason::Interval);
            let waiters: Vec<_> = queue.drain(..).filter_map(|(_, w)| w).collect();
            self.once(reason).await;
            for w in waiters {
                let _ = w.send(());
            }
        }
    }

    async fn once(&mut self, reason: CheckpointReason) {
        let repo = self.repo.clone();
        let opts = TakeOptions {
            reason,
            max_file_bytes: self.config.max_file_bytes,
            session: self.ctx.session.clone(),
            only_if_changed: true,
            last_tree: self.last_tree.clone(),
        };
        let (server, session) = (self.server.clone(), self.ctx.session.clone());
        let result = tokio::task::spawn_blocking(move || {
            let taken = take(&repo, &opts)?;
            if let Taken::New(d) = &taken {
                upload::enqueue(&repo, &server, &session, d)?;
            }
            Ok::<_, CheckpointError>(taken)
        })
        .await;
        let taken = match result {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => return self.failed(e.to_string()),
            Err(e) => return self.failed(format!("the checkpoint task failed: {e}")),
        };
        self.last_error = None;
        match taken {
            Taken::Unchanged { tree } => self.last_tree = Some(tree),
            Taken::New(d) => {
                self.last_tree = Some(d.manifest.tree.clone());
                let summary = d.manifest.summary();
                if let Err(e) = self
                    .ctx
                    .spool
                    .append(vec![Draft::new(summary.clone())])
                    .await
                {
                    tracing::warn!(error = %e, "could not spool checkpoint.created");
                }
                tracing::info!(id = %summary.id, reason = reason.name(), files = summary.files_total, "checkpoint taken");
                self.pending.send_modify(|n| *n += 1);
                self.wake.notify_one();
            }
        }
    }

    /// Says so once per distinct failure; the next trigger tries again.
    fn failed(&mut self, message: String) {
        if self.last_error.as_deref() != Some(message.as_str()) {
            self.ctx
                .status
                .note(format!("checkpoint failed: {message}"));
            self.last_error = Some(message);
        }
    }
}

/// Which reason names a coalesced checkpoint.
fn priority(r: CheckpointReason) -> u8 {
    match r {
        CheckpointReason::Exit => 6,
        CheckpointReason::LinkDown => 5,
        CheckpointReason::Tool => 4,
        CheckpointReason::Manual | CheckpointReason::BeforeRestore => 3,
        CheckpointReason::Start => 2,
        CheckpointReason::Interval => 1,
    }
}

async fn next_tool(tools: &mut Option<mpsc::Receiver<()>>) -> Option<()> {
    match tools {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Follows the spool and signals every finished tool call that may have changed files (any
/// tool that is not read-only).
async fn watch_tools(spool: Spool, tx: mpsc::Sender<()>, stop: CancellationToken) {
    let mut durable = spool.subscribe_durable();
    let mut next = *durable.borrow_and_update() + 1;
    let mut classes: HashMap<String, ToolClass> = HashMap::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = durable.changed() => if changed.is_err() { return },
        }
        let upto = *durable.borrow_and_update();
        while next <= upto {
            let batch = match spool.read_batch(next, 256, 1 << 20) {
                Ok(Some(b)) => b,
                Ok(None) => break,
                // Acked and dropped before we read it: what it said is lost to us, and the
                // interval checkpoint covers it.
                Err(SpoolError::Missing(_)) => {
                    next = next.max(spool.acked() + 1);
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot follow the spool for tool calls");
                    return;
                }
            };
            next = batch.last() + 1;
            let mut fire = false;
            for body in batch.bodies() {
                let Ok(entry) = serde_json::from_slice::<NewEntry>(body) else {
                    continue;
                };
                let id = |key: &str| {
                    entry
                        .payload
                        .get(key)
                        .and_then(|v| v.as_str())
                        .unwrap_or_default()
                        .to_owned()
                };
                match entry.kind.as_str() {
                    kinds::AGENT_TOOL_USE => {
                        let name = id("name");
                        classes.insert(id("id"), ToolClass::of(&name));
                    }
                    kinds::AGENT_TOOL_RESULT => {
                        fire |= classes.remove(&id("tool_use_id")) != Some(ToolClass::ReadOnly);
                    }
                    _ => {}
                }
            }
            if fire {
                let _ = tx.try_send(());
            }
        }
    }
}

/// What the upload task works with.
struct Uploader {
    repo: Repo,
    client: Client,
    session: String,
    config: CheckpointConfig,
    status: Status,
}

/// When the upload task stops: `stop` at once, `finishing` once the queue is empty.
struct Stops {
    stop: CancellationToken,
    finishing: CancellationToken,
}

/// Drains the upload queue: at once when woken (a new checkpoint, the link back up), else
/// with a doubling delay after failures. Checkpoints other runs left for this server are
/// uploaded too, after this session's, but only this session's count as pending: an old
/// checkpoint of a session the server no longer has must not hold up the end of this one.
async fn upload_loop(
    uploader: Uploader,
    wake: Arc<Notify>,
    pending: watch::Sender<usize>,
    stops: Stops,
) {
    let Uploader {
        repo,
        client,
        session,
        config,
        status,
    } = uploader;
    let Stops { stop, finishing } = stops;
    let mut link_up = status.link_up();
    let mut delay = config.retry_initial;
    let mut failing: Option<String> = None;
    loop {
        let queue = {
            let repo = repo.clone();
            tokio::task::spawn_blocking(move || upload::pending(&repo))
                .await
                .unwrap_or_default()
        };
        let mut mine: Vec<_> = queue
            .into_iter()
            .filter(|p| p.server == client.base())
            .collect();
        // Stable: oldest first within each group.
        mine.sort_by_key(|p| p.session != session);
        let own = mine.iter().filter(|p| p.session == session).count();
        pending.send_replace(own);
        if own == 0 && finishing.is_cancelled() {
            return;
        }
        let mut retry = false;
        for p in &mine {
            if stop.is_cancelled() {
                return;
            }
            let result = tokio::select! {
                _ = stop.cancelled() => return,
                r = upload::upload(&repo, &client, p) => r,
            };
            match result {
                Ok(Uploaded::Done(stats)) => {
                    let (repo, id) = (repo.clone(), p.manifest.id.clone());
                    let _ = tokio::task::spawn_blocking(move || upload::dequeue(&repo, &id)).await;
                    if p.session == session {
                        pending.send_modify(|n| *n = n.saturating_sub(1));
                    }
                    tracing::info!(id = %p.manifest.id, blobs = stats.blobs_sent, bytes = stats.bytes_sent, "checkpoint uploaded");
                    if failing.take().is_some() {
                        status.note("checkpoint uploads resumed");
                    }
                    delay = config.retry_initial;
                }
                // The session appears on the server at the bridge's first connection.
                Ok(Uploaded::NoSession) => retry |= p.session == session,
                Err(e) => {
                    let message = e.to_string();
                    if failing.as_deref() != Some(message.as_str()) {
                        tracing::info!(error = %message, "checkpoint upload failed; will retry");
                        failing = Some(message);
                    }
                    retry = true;
                    break;
                }
            }
        }
        if retry {
            if finishing.is_cancelled() {
                // Left queued for `moor checkpoints push` or the next `moor run` here.
                return;
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = finishing.cancelled() => {}
                _ = tokio::time::sleep(delay) => {}
                _ = link_up.wait_for(|up| *up) , if !*link_up.borrow() => {}
            }
            delay = (delay * 2).min(RETRY_MAX);
        } else {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = wake.notified() => {}
                _ = finishing.cancelled() => {}
            }
        }
    }
}

/// Removes temporary index files a killed `moor` left behind (older than a minute, so a
/// concurrent `moor` in another worktree of the same repository keeps its own).
fn clean_stale_temp_files(repo: &Repo) {
    let Ok(dir) = std::fs::read_dir(repo.moor_dir().join("tmp")) else {
        return;
    };
    for entry in dir.filter_map(Result::ok) {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(60));
        if old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
