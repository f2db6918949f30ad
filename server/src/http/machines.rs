//! Machines running `moor host`: registration, the machine view, and the actions asked of a
//! machine (start a session, stop one, resume one, restore one's checkpoint into a branch),
//! and the credential a machine runs with (`access::host`).
//!
//! A machine's own log is an ordinary session (its `log_session`): an action is an
//! `input.host` entry there, idempotent by the caller's key like any input, delivered to the
//! machine by its link and answered with the usual receipts; the machine writes what it did
//! (`host.session.started`, `host.session.exited`) in the same log. Access to a machine is a
//! role on that session: controllers may act, and only they see the machine.
//!
//! A request names a project and an agent the machine advertised; anything else (an unknown
//! name, a path, a command, an unknown field) is refused before anything is stored. The
//! machine checks the names again against its configuration, which is the authority.
//!
//! Part of the HTTP transport: calls `access`, `session`, `store` and `hub`; never `sse` or `ws`.

use axum::extract::{Path, State};
use moor_protocol::api::{InputRequest, Role};
use moor_protocol::bridge::AgentInfo;
use moor_protocol::host::{
    is_checkpoint_id, is_valid_branch, is_valid_name, ActionAccepted, AgentOffer, HostAction,
    HostCredential, MachineInfo, MachineRegistered, MachineRegistration, MachineSession,
    ProjectOffer, RestoreCheckpoint, SessionAction, StartSession, MAX_BRANCH, MAX_IDEMPOTENCY_KEY,
    MAX_OFFERS, MAX_PROMPT_BYTES,
};
use moor_protocol::{kinds, now_ms, SessionId};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::access::{random_secret, session_with_role, AuthUser, Principal};
use crate::error::ApiError;
use crate::extract::Json;
use crate::session::input::{refuse_reused_id, submit_checked};
use crate::state::AppState;
use crate::store::machines::{MachineRow, MachineSessionRow};
use crate::store::{SessionRow, StoreError};

/// Most sessions one machine may say it runs at once.
const MAX_SESSIONS_LIMIT: u32 = 64;
/// Longest `os`, `version` or branch name accepted.
const MAX_LABEL: usize = 255;
/// The agent modes a machine may advertise (`moor run --mode`).
const MODES: [&str; 8] = moor_protocol::host::AGENT_MODES;

/// What a machine offers, as stored in `machines.offers`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Offers {
    projects: Vec<ProjectOffer>,
    agents: Vec<AgentOffer>,
}

impl Offers {
    /// What the machine `row` offers (nothing when its stored offers do not read).
    fn of(row: &MachineRow) -> Self {
        serde_json::from_str(&row.offers).unwrap_or_default()
    }
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ApiError {
    ApiError::Invalid {
        field,
        reason: reason.into(),
    }
}

fn check_name(field: &'static str, name: &str) -> Result<(), ApiError> {
    if is_valid_name(name) {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!(
                "{name:?} is not a name: 1 to 64 of A-Z a-z 0-9 . _ -, not starting with . or -"
            ),
        ))
    }
}

fn check_label(field: &'static str, text: &str) -> Result<(), ApiError> {
    if text.len() > MAX_LABEL || text.chars().any(char::is_control) {
        return Err(invalid(
            field,
            format!("at most {MAX_LABEL} bytes, no control characters"),
        ));
    }
    Ok(())
}

fn check_registration(req: &MachineRegistration) -> Result<(), ApiError> {
    check_name("name", &req.name)?;
    check_label("os", &req.os)?;
    check_label("version", &req.version)?;
    if !(1..=MAX_SESSIONS_LIMIT).contains(&req.max_sessions) {
        return Err(invalid(
            "max_sessions",
            format!("1 to {MAX_SESSIONS_LIMIT}"),
        ));
    }
    if req.projects.len() > MAX_OFFERS || req.agents.len() > MAX_OFFERS {
        return Err(invalid(
            "projects",
            format!("at most {MAX_OFFERS} projects and {MAX_OFFERS} agents"),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for p in &req.projects {
        check_name("projects", &p.name)?;
        check_label("projects", p.branch.as_deref().unwrap_or(""))?;
        if !seen.insert(("p", p.name.as_str())) {
            return Err(invalid("projects", format!("{:?} is listed twice", p.name)));
        }
    }
    for a in &req.agents {
        check_name("agents", &a.name)?;
        if !MODES.contains(&a.mode.as_str()) {
            return Err(invalid(
                "agents",
                format!("mode {:?} is not one of {MODES:?}", a.mode),
            ));
        }
        if !seen.insert(("a", a.name.as_str())) {
            return Err(invalid("agents", format!("{:?} is listed twice", a.name)));
        }
    }
    Ok(())
}

/// `POST /api/v1/machines`: a machine registers what it offers (again at every start of
/// `moor host`, and whenever it refreshes); the caller owns it and its log session.
#[utoipa::path(
    post, path = "/machines", operation_id = "registerMachine", tag = "machines",
    request_body = MachineRegistration,
    responses(
        (status = 200, description = "The machine's id and its log session", body = MachineRegistered),
        crate::openapi::RoleBodyErrors,
        crate::openapi::Conflict,
    )
)]
pub(super) async fn register(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Json(req): Json<MachineRegistration>,
) -> Result<Json<MachineRegistered>, ApiError> {
    check_registration(&req)?;
    if let Some(machine) = &who.machine {
        // A host credential registers its own machine again, and nothing else.
        let own = state.store.machines.machine(machine).await?;
        if !own.is_some_and(|m| m.name == req.name && m.owner == who.name) {
            return Err(ApiError::Forbidden);
        }
    }
    let offers = Offers {
        projects: req.projects,
        agents: req.agents,
    };
    let id = random_secret()[..16].to_ascii_lowercase();
    let row = state
        .store
        .machines
        .register_machine(&MachineRow {
            log_session: format!("host-{id}"),
            id,
            owner: who.name.clone(),
            name: req.name.clone(),
            os: req.os,
            version: req.version,
            offers: serde_json::to_string(&offers).map_err(|e| ApiError::Internal(e.into()))?,
            max_sessions: i64::from(req.max_sessions),
            registered_at: now_ms(),
        })
        .await?;
    let agent = AgentInfo {
        command: vec!["moor".into(), "host".into()],
        cwd: String::new(),
        host: req.name,
        adapter: moor_protocol::host::HOST_ADAPTER.into(),
    };
    owned_session(&state, &row.log_session, Some(&agent), &row.owner).await?;
    Ok(Json(MachineRegistered {
        id: row.id,
        log_session: row.log_session,
    }))
}

/// `POST /api/v1/machines/{id}/credential`: the credential `moor host` runs with, limited to
/// machine `id` (`access::host`): by its owner (or an administrator) with their own
/// credential, or by the machine with its current one, to renew it. It belongs to the
/// caller's token family, so revoking the user or that login ends it.
#[utoipa::path(
    post, path = "/machines/{id}/credential", operation_id = "machineCredential", tag = "machines",
    params(("id" = String, Path, description = "Machine id")),
    responses(
        (status = 200, description = "The machine's credential", body = HostCredential),
        crate::openapi::RoleErrors,
        crate::openapi::BadRequest,
    )
)]
pub(super) async fn credential(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(id): Path<String>,
) -> Result<Json<HostCredential>, ApiError> {
    if who.machine.as_ref().is_some_and(|m| *m != id) {
        return Err(ApiError::Forbidden);
    }
    let row = state.store.machines.machine(&id).await?;
    let Some(row) = row.filter(|m| m.owner == who.name || who.admin) else {
        return Err(ApiError::NotFound("machine"));
    };
    let token = state.auth.issue_host(&who, &row.id)?.ok_or_else(|| {
        invalid(
            "credential",
            "this credential has no login to bind a machine's to",
        )
    })?;
    Ok(Json(HostCredential {
        token,
        expires_in: state.auth.refresh_ttl.as_secs().max(1),
    }))
}

/// Opens (or creates) the session `name` and makes sure `owner` owns it: a new session is
/// claimed for `owner`; an existing one of somebody else is a conflict.
async fn owned_session(
    state: &AppState,
    name: &str,
    agent: Option<&AgentInfo>,
    owner: &str,
) -> Result<SessionId, ApiError> {
    let row = state.store.log.open_session(name, agent).await?;
    if state.store.access.claim_session(row.id, owner).await?
        || state.store.access.member_role(row.id, owner).await? == Some(Role::Owner)
    {
        Ok(row.id)
    } else {
        Err(ApiError::Conflict(format!(
            "session {name:?} belongs to somebody else"
        )))
    }
}

/// The machine `id`, if `who` has at least `need` on its log session (404 otherwise, so a
/// machine nobody shared is not even confirmed to exist).
async fn machine_for(
    state: &AppState,
    who: &Principal,
    id: &str,
    need: Role,
) -> Result<(MachineRow, SessionId), ApiError> {
    let not_found = || ApiError::NotFound("machine");
    let row = state
        .store
        .machines
        .machine(id)
        .await?
        .ok_or_else(not_found)?;
    match session_with_role(&state.store, who, &row.log_session, need).await {
        Ok((session, _)) => Ok((row, session.id)),
        Err(ApiError::NotFound(_) | ApiError::Forbidden) => Err(not_found()),
        Err(e) => Err(e),
    }
}

/// The session `name`, `None` when there is none.
async fn log_session(state: &AppState, name: &str) -> Result<Option<SessionRow>, ApiError> {
    match state.store.log.find_session(name).await {
        Ok(s) => Ok(Some(s)),
        Err(StoreError::NotFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

async fn info(state: &AppState, row: MachineRow, log: SessionId) -> MachineInfo {
    let offers = Offers::of(&row);
    MachineInfo {
        link: super::sessions::bridge_status(state, log).await,
        id: row.id,
        name: row.name,
        os: row.os,
        version: row.version,
        log_session: row.log_session,
        projects: offers.projects,
        agents: offers.agents,
        max_sessions: u32::try_from(row.max_sessions).unwrap_or(0),
        registered_at: row.registered_at,
        sessions: Vec::new(),
    }
}

/// `GET /api/v1/machines`: the caller's machines (an administrator's: all), by name.
#[utoipa::path(
    get, path = "/machines", operation_id = "listMachines", tag = "machines",
    responses(
        (status = 200, description = "The machines", body = Vec<MachineInfo>),
        crate::openapi::Unauthorized,
    )
)]
pub(super) async fn list(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
) -> Result<Json<Vec<MachineInfo>>, ApiError> {
    let owner = (!who.admin).then_some(who.name.as_str());
    let rows = state.store.machines.machines(owner).await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(log) = log_session(&state, &row.log_session).await? else {
            continue;
        };
        out.push(info(&state, row, log.id).await);
    }
    Ok(Json(out))
}

/// `GET /api/v1/machines/{id}`: the machine, with its newest sessions (phase, link, requests
/// waiting for a person).
#[utoipa::path(
    get, path = "/machines/{id}", operation_id = "getMachine", tag = "machines",
    params(("id" = String, Path, description = "Machine id")),
    responses(
        (status = 200, description = "The machine and its sessions", body = MachineInfo),
        crate::openapi::LookupErrors,
    )
)]
pub(super) async fn get(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(id): Path<String>,
) -> Result<Json<MachineInfo>, ApiError> {
    let (row, log) = machine_for(&state, &who, &id, Role::Controller).await?;
    let sessions = state.store.machines.machine_sessions(&row.id).await?;
    let mut info = info(&state, row, log).await;
    for s in sessions {
        info.sessions.push(session_info(&state, s).await?);
    }
    Ok(Json(info))
}

async fn session_info(state: &AppState, s: MachineSessionRow) -> Result<MachineSession, ApiError> {
    let mut out = MachineSession {
        name: s.name,
        id: None,
        project: s.project,
        agent: s.agent,
        created_at: s.created_at,
        ended: false,
        bridge: None,
        phase: None,
        needs_you: 0,
    };
    let Some(row) = log_session(state, &out.name).await? else {
        return Ok(out);
    };
    out.id = Some(row.id);
    out.ended = row.ended_at.is_some();
    if row.agent.is_some() {
        out.bridge = Some(super::sessions::bridge_status(state, row.id).await);
    }
    let derived = state.states.current(row.id, row.head_seq).await?;
    out.phase = Some(derived.phase);
    out.needs_you = u32::try_from(derived.pending_permissions.len()).unwrap_or(u32::MAX);
    Ok(out)
}

fn check_key(key: &str) -> Result<(), ApiError> {
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY || key.chars().any(char::is_control) {
        return Err(invalid(
            "idempotency_key",
            format!("1 to {MAX_IDEMPOTENCY_KEY} characters, no control characters"),
        ));
    }
    Ok(())
}

/// Refuses a project or agent the machine did not advertise.
fn check_offered(offers: &Offers, project: &str, agent: &str) -> Result<(), ApiError> {
    check_name("project", project)?;
    check_name("agent", agent)?;
    if !offers.projects.iter().any(|p| p.name == project) {
        return Err(invalid(
            "project",
            format!("the machine offers no project {project:?}"),
        ));
    }
    if !offers.agents.iter().any(|a| a.name == agent) {
        return Err(invalid(
            "agent",
            format!("the machine offers no agent {agent:?}"),
        ));
    }
    Ok(())
}

/// The name of the session a start request with `key` creates: the same for every retry.
fn session_name(machine: &MachineRow, agent: &str, key: &str) -> String {
    let digest = Sha256::digest(format!("{}\0{key}", machine.id).as_bytes());
    let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    let prefix: String = machine.name.chars().take(48).collect();
    format!("{prefix}-{agent}-{hex}")
}

/// The input that asks the machine for `action` under `client_msg_id`.
fn host_input(client_msg_id: String, action: &HostAction) -> Result<InputRequest, ApiError> {
    Ok(InputRequest {
        client_msg_id,
        kind: kinds::INPUT_HOST.into(),
        payload: serde_json::to_value(action).map_err(|e| ApiError::Internal(e.into()))?,
    })
}

/// Appends `action` to the machine's log under `client_msg_id`.
async fn ask(
    state: &AppState,
    who: &Principal,
    log: SessionId,
    client_msg_id: String,
    action: &HostAction,
) -> Result<ActionAccepted, ApiError> {
    ask_for(state, who, log, host_input(client_msg_id, action)?, action).await
}

/// Appends `input`, the input of `action` ([`host_input`]), to the machine's log.
async fn ask_for(
    state: &AppState,
    who: &Principal,
    log: SessionId,
    input: InputRequest,
    action: &HostAction,
) -> Result<ActionAccepted, ApiError> {
    let accepted = submit_checked(
        &state.log,
        &*state.store.log,
        &state.leases,
        log,
        who.author(),
        input,
    )
    .await?;
    Ok(ActionAccepted {
        session: action.session().to_owned(),
        seq: accepted.seq.0,
        duplicate: accepted.duplicate,
        queued: accepted.queued,
    })
}

/// Makes the new session `name` for `action` ([`new_session`]), then asks the machine for
/// `action` under `client_msg_id`; a key the machine's log holds for another request is refused
/// first, before anything is made.
async fn ask_new(
    state: &AppState,
    who: &Principal,
    (machine, log): (&MachineRow, SessionId),
    (project, agent): (&str, &str),
    key: &str,
    client_msg_id: String,
    action: &HostAction,
) -> Result<ActionAccepted, ApiError> {
    let input = host_input(client_msg_id, action)?;
    refuse_reused_id(&*state.store.log, log, &who.author(), &input).await?;
    new_session(state, who, machine, action.session(), (project, agent), key).await?;
    ask_for(state, who, log, input, action).await
}

/// `POST /api/v1/machines/{id}/sessions`: ask the machine to start a session of one of its
/// agents in one of its projects. The machine enforces its limit on concurrent sessions and
/// answers in its log (`input.applied` and `host.session.started`, or `input.failed`).
#[utoipa::path(
    post, path = "/machines/{id}/sessions", operation_id = "startMachineSession", tag = "machines",
    params(("id" = String, Path, description = "Machine id")),
    request_body = StartSession,
    responses(
        (status = 200, description = "The action is in the machine's log", body = ActionAccepted),
        crate::openapi::RoleBodyErrors,
        crate::openapi::Conflict,
    )
)]
pub(super) async fn start(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(id): Path<String>,
    Json(req): Json<StartSession>,
) -> Result<Json<ActionAccepted>, ApiError> {
    let (machine, log) = machine_for(&state, &who, &id, Role::Controller).await?;
    check_key(&req.idempotency_key)?;
    let offers = Offers::of(&machine);
    check_offered(&offers, &req.project, &req.agent)?;
    if req
        .prompt
        .as_ref()
        .is_some_and(|p| p.len() > MAX_PROMPT_BYTES)
    {
        return Err(invalid(
            "prompt",
            format!("at most {MAX_PROMPT_BYTES} bytes"),
        ));
    }
    let action = HostAction::Start {
        session: session_name(&machine, &req.agent, &req.idempotency_key),
        project: req.project.clone(),
        agent: req.agent.clone(),
        prompt: req.prompt,
        checkpoint: req.checkpoint.unwrap_or(false),
    };
    let offer = (req.project.as_str(), req.agent.as_str());
    let key = &req.idempotency_key;
    let id = format!("start:{key}");
    let accepted = ask_new(&state, &who, (&machine, log), offer, key, id, &action).await?;
    Ok(Json(accepted))
}

/// Records that machine `machine` is asked to run the new session `name` of `agent` in
/// `project` (the same again for a retry; 409 when `key` named another request), and creates
/// the session, owned by the machine's owner, whose machine runs it, before the machine is
/// asked: the caller can open it at once and no one else can take its name. A controller who is
/// not the owner gets the controller role on it.
async fn new_session(
    state: &AppState,
    who: &Principal,
    machine: &MachineRow,
    name: &str,
    (project, agent): (&str, &str),
    key: &str,
) -> Result<(), ApiError> {
    let row = state
        .store
        .machines
        .add_machine_session(&MachineSessionRow {
            machine_id: machine.id.clone(),
            name: name.to_owned(),
            project: project.to_owned(),
            agent: agent.to_owned(),
            created_at: now_ms(),
        })
        .await?;
    if (row.project.as_str(), row.agent.as_str()) != (project, agent) {
        return Err(ApiError::Conflict(format!(
            "idempotency key {key:?} was used for another request"
        )));
    }
    let session = owned_session(state, name, None, &machine.owner).await?;
    if who.name != machine.owner && !who.admin {
        state
            .store
            .access
            .set_member(session, &who.name, Role::Controller)
            .await?;
    }
    Ok(())
}

/// The machine's session `name`, or 404.
async fn machine_session(
    state: &AppState,
    machine: &MachineRow,
    name: &str,
) -> Result<MachineSessionRow, ApiError> {
    state
        .store
        .machines
        .machine_session(&machine.id, name)
        .await?
        .ok_or(ApiError::NotFound("machine session"))
}

/// `POST /api/v1/machines/{id}/sessions/{name}/stop`: ask the machine to stop the session
/// (SIGTERM to its `moor run`'s process group, SIGKILL after the grace).
#[utoipa::path(
    post, path = "/machines/{id}/sessions/{name}/stop", operation_id = "stopMachineSession", tag = "machines",
    params(("id" = String, Path, description = "Machine id"), ("name" = String, Path, description = "Session name")),
    request_body = SessionAction,
    responses(
        (status = 200, description = "The action is in the machine's log", body = ActionAccepted),
        crate::openapi::RoleBodyErrors,
        crate::openapi::Conflict,
    )
)]
pub(super) async fn stop(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path((id, name)): Path<(String, String)>,
    Json(req): Json<SessionAction>,
) -> Result<Json<ActionAccepted>, ApiError> {
    on_session(&state, &who, (&id, &name), &req, "stop", |row, _| {
        Ok(HostAction::Stop { session: row.name })
    })
    .await
}

/// `POST /api/v1/machines/{id}/sessions/{name}/resume`: ask the machine to run the session
/// again. A session whose bridge died gets its `moor run` again: the log goes on and Claude
/// Code continues its conversation. An ended session's log takes no more entries, so it gets a
/// continuation, as `moor resume` makes: a new session linked to it, whose agent continues its
/// conversation (Claude Code `--resume`); the answer names the new session.
#[utoipa::path(
    post, path = "/machines/{id}/sessions/{name}/resume", operation_id = "resumeMachineSession", tag = "machines",
    params(("id" = String, Path, description = "Machine id"), ("name" = String, Path, description = "Session name")),
    request_body = SessionAction,
    responses(
        (status = 200, description = "The action is in the machine's log", body = ActionAccepted),
        crate::openapi::RoleBodyErrors,
        crate::openapi::Conflict,
    )
)]
pub(super) async fn resume(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path((id, name)): Path<(String, String)>,
    Json(req): Json<SessionAction>,
) -> Result<Json<ActionAccepted>, ApiError> {
    let (machine, log) = machine_for(&state, &who, &id, Role::Controller).await?;
    check_key(&req.idempotency_key)?;
    let row = machine_session(&state, &machine, &name).await?;
    let offers = Offers::of(&machine);
    check_offered(&offers, &row.project, &row.agent)?;
    let ended = log_session(&state, &row.name)
        .await?
        .is_some_and(|s| s.ended_at.is_some());
    let key = &req.idempotency_key;
    let id = format!("resume:{key}");
    if !ended {
        let action = HostAction::Resume {
            session: row.name,
            project: row.project,
            agent: row.agent,
            continues: None,
        };
        return Ok(Json(ask(&state, &who, log, id, &action).await?));
    }
    // Named by the ended session and the key: a retry names the same continuation.
    let scope = format!("resume\0{}\0{key}", row.name);
    let action = HostAction::Resume {
        session: session_name(&machine, &row.agent, &scope),
        project: row.project.clone(),
        agent: row.agent.clone(),
        continues: Some(row.name),
    };
    let offer = (row.project.as_str(), row.agent.as_str());
    let accepted = ask_new(&state, &who, (&machine, log), offer, key, id, &action).await?;
    Ok(Json(accepted))
}

/// `POST /api/v1/machines/{id}/sessions/{name}/restore`: ask the machine to put one of the
/// session's checkpoints on a new branch of its project; the work tree, its index and the
/// branch checked out there stay as they are. The machine answers in its log
/// (`host.checkpoint.restored` with the commit, or `input.failed`: the branch exists, say).
#[utoipa::path(
    post, path = "/machines/{id}/sessions/{name}/restore", operation_id = "restoreMachineCheckpoint", tag = "machines",
    params(("id" = String, Path, description = "Machine id"), ("name" = String, Path, description = "Session name")),
    request_body = RestoreCheckpoint,
    responses(
        (status = 200, description = "The action is in the machine's log", body = ActionAccepted),
        crate::openapi::RoleBodyErrors,
        crate::openapi::Conflict,
    )
)]
pub(super) async fn restore(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path((id, name)): Path<(String, String)>,
    Json(req): Json<RestoreCheckpoint>,
) -> Result<Json<ActionAccepted>, ApiError> {
    if !is_checkpoint_id(&req.checkpoint) {
        return Err(invalid("checkpoint", "16 lowercase hex digits"));
    }
    let branch = req
        .branch
        .clone()
        .unwrap_or_else(|| format!("moor/restore-{}", req.checkpoint));
    if !is_valid_branch(&branch) {
        return Err(invalid(
            "branch",
            format!("{branch:?} is not a branch name: 1 to {MAX_BRANCH} of A-Z a-z 0-9 . _ - /, not starting with - . or /, without .. // /. @{{, not ending with / . or .lock"),
        ));
    }
    machine_for(&state, &who, &id, Role::Controller).await?;
    // Only a checkpoint of this very session: its project is where it belongs.
    let holders = state
        .store
        .checkpoints
        .checkpoint_sessions(&req.checkpoint)
        .await?;
    let session = state.store.log.find_session(&name).await.ok();
    if !session.is_some_and(|s| holders.contains(&s.id)) {
        return Err(ApiError::NotFound("checkpoint"));
    }
    let action = SessionAction {
        idempotency_key: req.idempotency_key.clone(),
    };
    on_session(
        &state,
        &who,
        (&id, &name),
        &action,
        "restore",
        |row, offers| {
            if !offers.projects.iter().any(|p| p.name == row.project) {
                return Err(invalid(
                    "project",
                    format!("the machine no longer offers project {:?}", row.project),
                ));
            }
            Ok(HostAction::Restore {
                session: row.name,
                project: row.project,
                checkpoint: req.checkpoint,
                branch,
                worktree: req.worktree.unwrap_or(false),
            })
        },
    )
    .await
}

/// Asks machine `id` for the action `make` builds from its session `name` and its offers,
/// under the key `<kind>:<idempotency_key>`.
async fn on_session(
    state: &AppState,
    who: &Principal,
    (id, name): (&str, &str),
    req: &SessionAction,
    kind: &str,
    make: impl FnOnce(MachineSessionRow, &Offers) -> Result<HostAction, ApiError>,
) -> Result<Json<ActionAccepted>, ApiError> {
    let (machine, log) = machine_for(state, who, id, Role::Controller).await?;
    check_key(&req.idempotency_key)?;
    let row = machine_session(state, &machine, name).await?;
    let offers = Offers::of(&machine);
    let action = make(row, &offers)?;
    let key = format!("{kind}:{}", req.idempotency_key);
    Ok(Json(ask(state, who, log, key, &action).await?))
}
