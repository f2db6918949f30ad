//! `moor host`: a long-running process that starts, stops and resumes sessions on this
//! machine when asked through `moord`, from what [`HostConfig`] allows, and restores their
//! checkpoints into new branches of their projects.
//!
//! The machine's own log is an ordinary session, so the link to `moord` is the bridge's own
//! [`Link`] (lease, backoff, watchdog, `move`) with its spool and input ledger: an action
//! (`input.host`) is applied at most once across link cuts, `moord` restarts and restarts of
//! `moor host` itself (one interrupted while being applied is reported `input.uncertain`, never
//! replayed), and what the machine did goes into the same log (`host.session.started`,
//! `host.session.exited`) with the input's receipt (`input.applied` or `input.failed` with the
//! reason). Sessions it starts are ordinary `moor run` processes of this same binary, each in
//! its own process group, so they get the same log, roles and recovery as any other.

mod children;
pub mod config;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use moor_protocol::bridge::AgentInfo;
use moor_protocol::host::{
    AgentOffer, HostAction, HostCheckpointRestored, HostCredential, HostSessionExited,
    HostSessionStarted, MachineRegistered, MachineRegistration, ProjectOffer,
};
use moor_protocol::{kinds, now_ms};
use rustix::process::{kill_process_group, Pid, Signal};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use self::children::{Child, Children, ADOPTED_POLL};
pub use self::config::{AgentDef, HostConfig};
use crate::backoff::Backoff;
use crate::checkpoint::cli::{restore_to_target, CliContext};
use crate::checkpoint::restore::Target;
use crate::config::{LinkConfig, Token};
use crate::inputs::{Inputs, PendingInput};
use crate::link::{Link, LinkParams};
use crate::recover::Api;
use crate::session_dir::SessionDir;
use crate::spool::{Draft, Spool};
use crate::status::Status;

/// How long a stopped session's `moor run` gets, after its agent's grace, to record the end.
const FINISH_GRACE: Duration = Duration::from_secs(30);

/// Everything `moor host` needs, with no CLI parsing attached.
#[derive(Debug, Clone)]
pub struct HostParams {
    /// moord's URL.
    pub server: String,
    /// The owner's credential (a `moor login` token renews itself), used only to register
    /// the machine and obtain the machine's own credential, which everything else runs with.
    pub token: Token,
    /// What may be started.
    pub config: HostConfig,
    /// Where the machine's spool and the sessions' spools live.
    pub state_dir: PathBuf,
    /// The link's timings.
    pub link: LinkConfig,
    /// How long a stopped session's agent gets between SIGTERM and SIGKILL (its `moor run`
    /// kills it then, and ends the session).
    pub stop_grace: Duration,
    /// How often the machine registers again (branch and dirty state of its projects).
    pub refresh: Duration,
    /// The `moor` binary sessions run (this one).
    pub moor: PathBuf,
}

/// How a child ended: its exit code (None: a signal), or unknown for one an earlier
/// `moor host` started (this one is not its parent, so it cannot wait for it).
#[derive(Debug, Clone, Copy)]
enum Ended {
    Status(Option<i32>),
    Unknown,
}

/// How a session is started beyond its project and agent: what a start asks for (a resume
/// asks for nothing).
#[derive(Debug, Default)]
struct Launch {
    /// The first prompt, posted once the session runs.
    prompt: Option<String>,
    /// Its start checkpoint is taken before the agent runs.
    checkpoint: bool,
    /// The ended session it continues (a resume of an ended session).
    continues: Option<String>,
}

/// What a restore asks for: a checkpoint, the new branch, and whether to check it out in a
/// new worktree.
#[derive(Debug)]
struct Restore {
    checkpoint: String,
    branch: String,
    worktree: bool,
}

/// A child that ended: its session, and how.
type Exit = (String, Ended);

/// The running host.
#[derive(Debug)]
struct Host {
    p: HostParams,
    spool: Spool,
    children: Children,
    exits: mpsc::UnboundedSender<Exit>,
    /// The machine's own credential (`POST /machines/{id}/credential`): the link, the
    /// sessions' `moor run`s and every call run with it, never with the owner's.
    token: Token,
    /// The machine's id.
    id: String,
    /// When to renew `token`: halfway through its life.
    renew_at: tokio::time::Instant,
}

/// What the machine offers now: its projects (with branch and dirty state) and agents.
pub fn registration(config: &HostConfig) -> MachineRegistration {
    MachineRegistration {
        name: config.name.clone(),
        os: std::env::consts::OS.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        projects: config
            .projects
            .iter()
            .map(|(name, dir)| {
                let (branch, dirty) = git_state(dir);
                ProjectOffer {
                    name: name.clone(),
                    branch,
                    dirty,
                }
            })
            .collect(),
        agents: config
            .agents
            .iter()
            .map(|(name, a)| AgentOffer {
                name: name.clone(),
                mode: a.mode.clone(),
            })
            .collect(),
        max_sessions: config.max_sessions,
    }
}

/// The checked-out branch and whether the work tree has changes (None, None outside git).
fn git_state(dir: &std::path::Path) -> (Option<String>, Option<bool>) {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let Some(status) = git(&["status", "--porcelain", "--untracked-files=normal"]) else {
        return (None, None);
    };
    let branch = git(&["symbolic-ref", "--short", "-q", "HEAD"]).filter(|b| !b.is_empty());
    (branch, Some(!status.is_empty()))
}

/// Registers the machine with the owner's credential and obtains the machine's own,
/// retrying with the link's backoff until `moord` answers (or `shutdown`); a refusal (4xx
/// other than 401/408/429) is final.
async fn register(
    p: &HostParams,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<(MachineRegistered, HostCredential)>> {
    let mut backoff = Backoff::new(p.link.backoff);
    loop {
        let result = crate::recover::with_api(&p.server, &p.token, |api| async move {
            let registered = api.register_machine(&registration(&p.config)).await?;
            let credential = api.host_credential(&registered.id).await?;
            Ok((registered, credential))
        })
        .await;
        match result {
            Ok(r) => return Ok(Some(r)),
            Err(e) if is_final(&e) => return Err(e.context("moord refused the machine")),
            Err(e) => {
                let delay = backoff.next_delay();
                crate::status::say(format!(
                    "moor host: cannot register yet ({e:#}); retrying in {delay:?}"
                ));
                tokio::select! {
                    _ = shutdown.cancelled() => return Ok(None),
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

/// Whether a registration error is a refusal to stop at (a 4xx other than 401, 408 and 429).
fn is_final(e: &anyhow::Error) -> bool {
    e.downcast_ref::<crate::recover::Refused>()
        .is_some_and(|r| (400..500).contains(&r.status) && ![401, 408, 429].contains(&r.status))
}

/// Runs `moor host` until `shutdown`, or a terminal link error. Sessions it started keep
/// running when it stops.
pub async fn run(p: HostParams, shutdown: CancellationToken) -> anyhow::Result<()> {
    let Some((registered, credential)) = register(&p, &shutdown).await? else {
        return Ok(());
    };
    let token = Token::new(credential.token.clone());
    crate::status::say(format!(
        "moor host: {} registered as machine {} (log session {})",
        p.config.name, registered.id, registered.log_session
    ));
    let dir = SessionDir::open(&p.state_dir, &registered.log_session)?;
    let status = Status::new(true, &registered.log_session);
    let (link, ports) = Link::new(LinkParams {
        url: crate::config::bridge_ws_url(&p.server)?,
        token: token.clone(),
        session: registered.log_session.clone(),
        continues: None,
        producer: dir.producer,
        agent: AgentInfo {
            command: vec!["moor".into(), "host".into()],
            cwd: String::new(),
            host: p.config.name.clone(),
            adapter: moor_protocol::host::HOST_ADAPTER.into(),
        },
        config: p.link.clone(),
        spool: dir.spool.clone(),
        ledger: dir.ledger.clone(),
        status,
    });
    let link_stop = shutdown.child_token();
    let mut link_task = tokio::spawn(link.run(link_stop.clone()));
    let mut inputs = Inputs::new(ports.inputs, dir.ledger.clone(), ports.receipts);
    let (exits, mut exits_rx) = mpsc::unbounded_channel();
    let mut host = Host {
        renew_at: renew_at(&credential),
        token,
        id: registered.id.clone(),
        spool: dir.spool.clone(),
        children: Children::load(&p.state_dir),
        exits,
        p,
    };
    host.adopt().await?;
    let mut refresh = tokio::time::interval(host.p.refresh.max(Duration::from_secs(1)));
    refresh.tick().await;
    let result = loop {
        tokio::select! {
            _ = shutdown.cancelled() => break Ok(()),
            ended = &mut link_task => break link_ended(ended),
            input = inputs.next() => match input? {
                Some(input) => host.apply(input).await?,
                // The link ended: how it did is the outcome (a revoked credential is an error).
                None => break link_ended((&mut link_task).await),
            },
            Some((session, ended)) = exits_rx.recv() => host.exited(session, ended).await?,
            _ = refresh.tick() => host.refresh().await,
        }
    };
    link_stop.cancel();
    // Awaited only when it still runs: a finished task's outcome was taken above.
    if !link_task.is_finished() {
        let _ = link_task.await;
    }
    result
}

/// The outcome of `moor host` once its link ended.
fn link_ended(
    ended: Result<Result<crate::link::LinkEnd, crate::link::ConnectError>, tokio::task::JoinError>,
) -> anyhow::Result<()> {
    match ended {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(anyhow::Error::new(e).context("the machine's link stopped")),
        Err(e) => Err(anyhow::anyhow!("the machine's link failed: {e}")),
    }
}

/// When to renew a credential just obtained: halfway through its life.
fn renew_at(credential: &HostCredential) -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(credential.expires_in / 2)
}

impl Host {
    /// A client of `moord` with the machine's credential.
    fn api(&self) -> anyhow::Result<Api> {
        Ok(Api::new(&self.p.server, &self.token.expose())?)
    }

    /// Registers the machine again (branch and dirty state of its projects), and renews its
    /// credential when due. Failures are retried at the next tick; a revoked credential ends
    /// the link, which stops `moor host`.
    async fn refresh(&mut self) {
        let api = match self.api() {
            Ok(api) => api,
            Err(e) => return tracing::info!(error = %e, "no client for moord"),
        };
        if let Err(e) = api.register_machine(&registration(&self.p.config)).await {
            tracing::info!(error = %e, "could not refresh the machine's registration");
        }
        if tokio::time::Instant::now() >= self.renew_at {
            match api.host_credential(&self.id).await {
                Ok(c) => {
                    self.token.replace(c.token.clone());
                    self.renew_at = renew_at(&c);
                }
                Err(e) => tracing::info!(error = %e, "could not renew the machine's credential"),
            }
        }
    }

    /// Applies one action and answers it.
    async fn apply(&mut self, input: PendingInput) -> anyhow::Result<()> {
        if input.kind != kinds::INPUT_HOST {
            let reason = format!("{} is not an action for a machine", input.kind);
            input.failed(reason).await?;
            return Ok(());
        }
        let action = match serde_json::from_value::<HostAction>(input.payload.clone()) {
            Ok(a) => a,
            Err(e) => {
                input.failed(format!("not a valid action: {e}")).await?;
                return Ok(());
            }
        };
        let seq = input.seq.0;
        let outcome = match action {
            HostAction::Start {
                session,
                project,
                agent,
                prompt,
                checkpoint,
            } => {
                let how = Launch {
                    prompt,
                    checkpoint,
                    continues: None,
                };
                self.start(&session, &project, &agent, seq, how).await
            }
            HostAction::Resume {
                session,
                project,
                agent,
                continues,
            } => {
                let how = Launch {
                    continues,
                    ..Launch::default()
                };
                self.start(&session, &project, &agent, seq, how).await
            }
            HostAction::Stop { session } => self.stop(&session),
            HostAction::Restore {
                session,
                project,
                checkpoint,
                branch,
                worktree,
            } => {
                let what = Restore {
                    checkpoint,
                    branch,
                    worktree,
                };
                self.restore(&session, &project, &what, seq).await
            }
        };
        match outcome {
            Ok(()) => input.applied().await?,
            Err(reason) => input.failed(reason).await?,
        }
        Ok(())
    }

    /// Starts `moor run --session <session>` of `agent` in `project`, as the configuration
    /// says; the reason when it may not or cannot.
    async fn start(
        &mut self,
        session: &str,
        project: &str,
        agent: &str,
        input_seq: u64,
        how: Launch,
    ) -> Result<(), String> {
        let config = &self.p.config;
        let dir = config
            .project(project)
            .ok_or_else(|| format!("this machine has no project {project:?}"))?
            .to_owned();
        let def = config
            .agent(agent)
            .ok_or_else(|| format!("this machine has no agent {agent:?}"))?
            .clone();
        if !moor_protocol::host::is_valid_name(session) {
            return Err(format!("{session:?} is not a session name"));
        }
        if self.children.contains(session) {
            return Err(format!("session {session} already runs here"));
        }
        let running = self.children.len();
        if running >= config.max_sessions as usize {
            return Err(format!(
                "this machine already runs {running} sessions, its limit (max_sessions)"
            ));
        }
        if let Some(from) = &how.continues {
            if !moor_protocol::host::is_valid_name(from) {
                return Err(format!("{from:?} is not a session name"));
            }
        }
        let pid = self.spawn(session, &dir, &def, &how)?;
        if let Err(e) = self.children.insert(session, Child::spawned(pid)) {
            // It runs all the same; only a restarted `moor host` would not find it.
            crate::status::say(format!("moor host: cannot record that {session} runs: {e}"));
        }
        self.record(
            kinds::HOST_SESSION_STARTED,
            &HostSessionStarted {
                session: session.to_owned(),
                project: project.to_owned(),
                agent: agent.to_owned(),
                pid,
                input_seq,
            },
        )
        .await
        .map_err(|e| format!("could not record the start: {e}"))?;
        if let Some(prompt) = how.prompt.filter(|p| !p.is_empty()) {
            // The session exists on the server already (moord made it before asking); the
            // prompt waits there until the new bridge takes it. Idempotent by its id.
            let (api, session, id) = (
                self.api().map_err(|e| e.to_string())?,
                session.to_owned(),
                format!("host-prompt-{input_seq}"),
            );
            tokio::spawn(async move {
                if let Err(e) = api.post_text(&session, &id, &prompt).await {
                    crate::status::say(format!(
                        "moor host: could not give {session} its first prompt: {e:#}"
                    ));
                }
            });
        }
        Ok(())
    }

    /// Puts a checkpoint of `session` on a new branch of `project` (fetched from `moord`
    /// when the repository lacks it) and, when asked, checks that branch out in a new worktree
    /// under the state dir ([`Host::worktree_path`]), leaving the project's work tree, its
    /// index and its checked-out branch alone; the reason when it may not or cannot.
    async fn restore(
        &mut self,
        session: &str,
        project: &str,
        what: &Restore,
        input_seq: u64,
    ) -> Result<(), String> {
        let (checkpoint, branch) = (what.checkpoint.as_str(), what.branch.as_str());
        let dir = self
            .p
            .config
            .project(project)
            .ok_or_else(|| format!("this machine has no project {project:?}"))?
            .to_owned();
        // moord checked both; this machine does not trust it to have.
        if !moor_protocol::host::is_checkpoint_id(checkpoint) {
            return Err(format!("{checkpoint:?} is not a checkpoint id"));
        }
        if !moor_protocol::host::is_valid_branch(branch) {
            return Err(format!("{branch:?} is not a branch name"));
        }
        let ctx = CliContext {
            dir,
            server: self.p.server.clone(),
            token: Some(self.token.expose()),
            max_file_bytes: 0,
        };
        let worktree = if what.worktree {
            Some(self.worktree_path(project, branch)?)
        } else {
            None
        };
        let target = match &worktree {
            Some(path) => Target::Worktree {
                path: path.clone(),
                branch: Some(branch.to_owned()),
            },
            None => Target::Branch(branch.to_owned()),
        };
        let (done, _) = restore_to_target(&ctx, checkpoint, &target)
            .await
            .map_err(|e| format!("could not restore checkpoint {checkpoint}: {e}"))?;
        self.record(
            kinds::HOST_CHECKPOINT_RESTORED,
            &HostCheckpointRestored {
                session: session.to_owned(),
                project: project.to_owned(),
                checkpoint: checkpoint.to_owned(),
                branch: branch.to_owned(),
                commit: done.commit,
                worktree: worktree.map(|p| p.display().to_string()),
                input_seq,
            },
        )
        .await
        .map_err(|e| format!("could not record the restore: {e}"))
    }

    /// Where a restore checks `branch` of `project` out: `<state dir>/worktrees/<project>/
    /// <branch, each / as +>`, a place this machine chooses (the request names no path). Both
    /// names are checked, and `+` is in no branch name, so different branches never share one;
    /// one that exists already is refused by git.
    fn worktree_path(&self, project: &str, branch: &str) -> Result<PathBuf, String> {
        if !moor_protocol::host::is_valid_name(project) {
            return Err(format!("{project:?} is not a project name"));
        }
        let base = std::path::absolute(&self.p.state_dir)
            .map_err(|e| format!("cannot resolve the state dir: {e}"))?
            .join("worktrees")
            .join(project);
        std::fs::create_dir_all(&base)
            .map_err(|e| format!("cannot create {}: {e}", base.display()))?;
        Ok(base.join(branch.replace('/', "+")))
    }

    /// Spawns the session's `moor run` in its own process group, as `how` says (its start
    /// checkpoint before the agent runs; the ended session it continues); its pid.
    fn spawn(
        &self,
        session: &str,
        dir: &std::path::Path,
        def: &AgentDef,
        how: &Launch,
    ) -> Result<u32, String> {
        let logs = self.p.state_dir.join("host-logs");
        std::fs::create_dir_all(&logs)
            .map_err(|e| format!("cannot create {}: {e}", logs.display()))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(logs.join(format!("{session}.log")))
            .map_err(|e| format!("cannot open the session's log file: {e}"))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = tokio::process::Command::new(&self.p.moor);
        cmd.arg("run")
            .arg("--server")
            .arg(&self.p.server)
            .arg("--session")
            .arg(session)
            .arg("--state-dir")
            .arg(&self.p.state_dir)
            .arg("--mode")
            .arg(&def.mode)
            .arg("--stop-grace")
            .arg(format!("{}ms", self.p.stop_grace.as_millis()))
            .args(how.checkpoint.then_some("--checkpoint-first"))
            .args(
                how.continues
                    .iter()
                    .flat_map(|from| ["--continues", from.as_str()]),
            )
            .arg("--")
            .args(&def.command)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .kill_on_drop(false)
            // The session runs with the machine's credential, which reaches only the sessions
            // this machine was asked to start.
            .env("MOOR_TOKEN", self.token.expose());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.p.moor.display()))?;
        let pid = child.id().ok_or("the session's process ended at once")?;
        let (exits, name) = (self.exits.clone(), session.to_owned());
        tokio::spawn(async move {
            let code = child.wait().await.ok().and_then(|s| s.code());
            let _ = exits.send((name, Ended::Status(code)));
        });
        Ok(pid)
    }

    /// Takes over the sessions an earlier `moor host` started: those still running are
    /// watched (and can be stopped); those that ended meanwhile are recorded as ended.
    async fn adopt(&mut self) -> anyhow::Result<()> {
        let left: Vec<(String, Child)> =
            self.children.iter().map(|(s, c)| (s.clone(), *c)).collect();
        for (session, child) in left {
            if child.still_runs() {
                crate::status::say(format!(
                    "moor host: {session} still runs (pid {}); watching it",
                    child.pid
                ));
                let exits = self.exits.clone();
                tokio::spawn(async move {
                    let mut poll = tokio::time::interval(ADOPTED_POLL);
                    while child.still_runs() && !exits.is_closed() {
                        poll.tick().await;
                    }
                    let _ = exits.send((session, Ended::Unknown));
                });
            } else {
                self.exited(session, Ended::Unknown).await?;
            }
        }
        Ok(())
    }

    /// Stops the session's `moor run`: SIGTERM to its process group. `moor run` passes it to
    /// the agent, kills the agent if it is still running after the grace, and ends the
    /// session. Only a `moor run` still running [`FINISH_GRACE`] after that gets SIGKILL (its
    /// undelivered entries stay in its spool, for a resume).
    fn stop(&mut self, session: &str) -> Result<(), String> {
        let mut child = self
            .children
            .get(session)
            .ok_or_else(|| format!("session {session} does not run on this machine"))?;
        child.stopping = true;
        if let Err(e) = self.children.insert(session, child) {
            crate::status::say(format!(
                "moor host: cannot record that {session} is stopping: {e}"
            ));
        }
        let pid = i32::try_from(child.pid)
            .ok()
            .and_then(Pid::from_raw)
            .ok_or("bad pid")?;
        kill_process_group(pid, Signal::TERM).map_err(|e| format!("cannot signal it: {e}"))?;
        let grace = self.p.stop_grace + FINISH_GRACE;
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            // The group is gone once everything in it exited: ESRCH is the good outcome.
            let _ = kill_process_group(pid, Signal::KILL);
        });
        Ok(())
    }

    /// Records that a session's `moor run` ended.
    async fn exited(&mut self, session: String, ended: Ended) -> anyhow::Result<()> {
        let stopped = self.children.get(&session).is_some_and(|c| c.stopping);
        let (code, status_unknown) = match ended {
            Ended::Status(code) => (code, false),
            Ended::Unknown => (None, true),
        };
        self.record(
            kinds::HOST_SESSION_EXITED,
            &HostSessionExited {
                session: session.clone(),
                code,
                stopped,
                status_unknown,
            },
        )
        .await?;
        // Forgotten only once its end is spooled: a crash in between records it again.
        if let Err(e) = self.children.remove(&session) {
            crate::status::say(format!(
                "moor host: cannot record that {session} ended: {e}"
            ));
        }
        Ok(())
    }

    /// Spools one entry of the machine's log.
    async fn record(&self, kind: &str, payload: &impl serde::Serialize) -> anyhow::Result<()> {
        self.spool
            .append(vec![Draft {
                ts: now_ms(),
                kind: kind.to_owned(),
                payload: serde_json::to_value(payload)?,
            }])
            .await?;
        Ok(())
    }
}
