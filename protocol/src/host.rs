//! `moor host`: machines that start sessions on request. Bodies of the `/api/v1/machines`
//! routes, the action a machine is asked to apply (an `input.host` entry in the machine's own
//! log) and the entries it writes about what it did.
//!
//! A request names a project and an agent the machine advertised; it never carries a command
//! line or a path. Names are checked twice: by `moord` against what the machine advertised, and
//! by the machine against its own configuration, which is the authority.

use serde::{Deserialize, Serialize};

use crate::api::BridgeStatus;
use crate::ids::SessionId;

/// Longest project, agent or machine name.
pub const MAX_NAME: usize = 64;
/// Most projects, and most agents, one machine advertises.
pub const MAX_OFFERS: usize = 64;
/// Longest first prompt, bytes.
pub const MAX_PROMPT_BYTES: usize = 64 * 1024;
/// Longest idempotency key.
pub const MAX_IDEMPOTENCY_KEY: usize = 128;

/// Whether `name` is a valid project, agent or machine name: 1 to [`MAX_NAME`] characters of
/// `A-Z a-z 0-9 . _ -`, not starting with `.` or `-` (so never a path, an option or a command).
pub fn is_valid_name(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && !name.starts_with(['.', '-'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// A project a machine offers: a directory on that machine, named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProjectOffer {
    /// Its name in the machine's configuration.
    pub name: String,
    /// The checked-out git branch, when the directory is a git work tree on a branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub branch: Option<String>,
    /// Whether the work tree had uncommitted changes when the machine last looked (None: not
    /// a git work tree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub dirty: Option<bool>,
}

/// An agent a machine offers: a command in its configuration, named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentOffer {
    /// Its name in the machine's configuration.
    pub name: String,
    /// How `moor run` drives it: `claude`, `pty`, `lines`, `acp` or `auto`.
    pub mode: String,
}

/// `POST /api/v1/machines`: a machine registers (and re-registers to refresh what it offers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MachineRegistration {
    /// The machine's name, unique per owner.
    pub name: String,
    /// Its operating system (`linux`, `macos`, …).
    pub os: String,
    /// The `moor` version it runs.
    pub version: String,
    /// The projects it offers.
    pub projects: Vec<ProjectOffer>,
    /// The agents it offers.
    pub agents: Vec<AgentOffer>,
    /// How many sessions it runs at once at most.
    pub max_sessions: u32,
}

/// The answer to a registration: the machine's id and the session that carries its own log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MachineRegistered {
    /// The machine's id.
    pub id: String,
    /// The name of the machine's own session (its action log); `moor host` links to it.
    pub log_session: String,
}

/// `POST /api/v1/machines/{id}/credential`: the credential `moor host` runs with. It may only
/// register this machine, keep its link, and run the sessions the machine was asked to start
/// (anything else is 403); revoking its user or the login it was minted with ends it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostCredential {
    /// The bearer token.
    pub token: String,
    /// Seconds it lives; `moor host` asks for a new one (with this one) before then.
    pub expires_in: u64,
}

crate::debug_fields!(HostCredential { expires_in });

/// A session a machine started, as the machine view lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MachineSession {
    /// The session's name.
    pub name: String,
    /// Its id, once its bridge has connected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub id: Option<SessionId>,
    /// The project it runs in.
    pub project: String,
    /// The agent it runs.
    pub agent: String,
    /// When it was requested, ms since the epoch.
    pub created_at: i64,
    /// Whether it ended.
    pub ended: bool,
    /// Its bridge link as this server sees it (None: no bridge has connected yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub bridge: Option<BridgeStatus>,
    /// The agent's phase in the session's derived state, when it has a log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub phase: Option<crate::work::Phase>,
    /// Permission requests waiting for a person.
    pub needs_you: u32,
}

/// A machine, as `GET /api/v1/machines` and `GET /api/v1/machines/{id}` show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MachineInfo {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its operating system.
    pub os: String,
    /// The `moor` version it runs.
    pub version: String,
    /// Its `moor host` link, from the lease of its log session: `online: false` with `since`
    /// is "unknown since", never a stale "online".
    pub link: BridgeStatus,
    /// The name of its own session (the action log).
    pub log_session: String,
    /// What it offered at its last registration.
    pub projects: Vec<ProjectOffer>,
    /// The agents it offered.
    pub agents: Vec<AgentOffer>,
    /// How many sessions it runs at once at most.
    pub max_sessions: u32,
    /// When it last registered, ms since the epoch.
    pub registered_at: i64,
    /// Its sessions, newest first (only in `GET /api/v1/machines/{id}`).
    #[serde(default)]
    pub sessions: Vec<MachineSession>,
}

/// `POST /api/v1/machines/{id}/sessions`: start a session of a named agent in a named project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StartSession {
    /// A project the machine offers.
    pub project: String,
    /// An agent the machine offers.
    pub agent: String,
    /// The first prompt (structured agents), at most [`MAX_PROMPT_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub prompt: Option<String>,
    /// Checkpoint the project's work tree before the agent starts (when it has changes), so
    /// the checkpoint holds the tree as it was before the agent touched anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub checkpoint: Option<bool>,
    /// Client-chosen key: the same request again is answered with the first one's receipt.
    pub idempotency_key: String,
}

/// `POST /api/v1/machines/{id}/sessions/{name}/stop` and `…/resume`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SessionAction {
    /// Client-chosen key, as for [`StartSession`].
    pub idempotency_key: String,
}

/// `POST /api/v1/machines/{id}/sessions/{name}/restore`: restore one of the session's
/// checkpoints into a new branch of its project on the machine (the work tree, the index and
/// the branch checked out there are not touched).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RestoreCheckpoint {
    /// The checkpoint's id (16 lowercase hex digits), one of this session's.
    pub checkpoint: String,
    /// The new branch (see [`is_valid_branch`]); default `moor/restore-<checkpoint>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub branch: Option<String>,
    /// Also check the new branch out in a new git worktree, at a place the machine chooses
    /// (under its state dir) and reports; never a path from the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub worktree: Option<bool>,
    /// Client-chosen key, as for [`StartSession`].
    pub idempotency_key: String,
}

/// The `adapter` a machine's link (`moor host`) names in its hello: the server counts it as a
/// machine link, not as an agent's bridge.
pub const HOST_ADAPTER: &str = "host";

/// The agent modes a machine may advertise and `moor run --mode` takes.
pub const AGENT_MODES: [&str; 8] = [
    "auto",
    "pty",
    "claude",
    "acp",
    "codex",
    "gemini-headless",
    "codex-exec",
    "lines",
];

/// Longest branch name a restore accepts.
pub const MAX_BRANCH: usize = 100;

/// Whether `name` may name a new branch: 1 to [`MAX_BRANCH`] of `A-Z a-z 0-9 . _ - /`, not
/// starting with `-`, `.` or `/`, without `..`, `//`, `/.` or `@{`, not ending with `/`, `.`
/// or `.lock` (so never an option, a path outside `refs/heads`, or a name git refuses).
pub fn is_valid_branch(name: &str) -> bool {
    (1..=MAX_BRANCH).contains(&name.len())
        && !name.starts_with(['-', '.', '/'])
        && !name.ends_with(['/', '.'])
        && !name.ends_with(".lock")
        && !["..", "//", "/.", "@{"]
            .iter()
            .any(|bad| name.contains(bad))
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b))
}

/// Whether `id` has the form of a checkpoint id: 16 lowercase hex digits.
pub fn is_checkpoint_id(id: &str) -> bool {
    id.len() == 16 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The receipt of an action: where it is in the machine's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ActionAccepted {
    /// The session the action is about.
    pub session: String,
    /// The seq of the `input.host` entry in the machine's log; its receipts
    /// (`input.delivered`, `input.applied`, `input.failed`) follow there.
    pub seq: u64,
    /// This key was seen before: nothing new was stored.
    pub duplicate: bool,
    /// The machine is not connected now; it gets the action when it is.
    pub queued: bool,
}

/// The payload of an `input.host` entry: what the machine is asked to do. The session name is
/// chosen by `moord`; project and agent are names from the machine's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum HostAction {
    /// Start `moor run --session <session>` of `agent` in `project`.
    Start {
        /// The new session's name.
        session: String,
        /// The project's name.
        project: String,
        /// The agent's name.
        agent: String,
        /// The first prompt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt: Option<String>,
        /// Checkpoint the work tree before the agent starts (`moor run --checkpoint-first`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        checkpoint: bool,
    },
    /// Stop the session's `moor run`: SIGTERM to its process group, SIGKILL after the grace.
    Stop {
        /// The session's name.
        session: String,
    },
    /// Run `moor run --session <session>` again (its bridge died): the log goes on, and
    /// Claude Code continues its conversation (`--resume`). With `continues` (the session
    /// ended): `session` is a new session linked to that one (`moor run --continues`), the
    /// agent continuing its conversation.
    Resume {
        /// The session's name (with `continues`: the new session's).
        session: String,
        /// The project it ran in.
        project: String,
        /// The agent it ran.
        agent: String,
        /// The ended session the new session continues.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        continues: Option<String>,
    },
    /// Restore checkpoint `checkpoint` of the session into the new branch `branch` of
    /// `project` (the checkpoint is fetched from `moord` when the repository lacks it).
    Restore {
        /// The session's name.
        session: String,
        /// The project it ran in.
        project: String,
        /// The checkpoint's id.
        checkpoint: String,
        /// The new branch.
        branch: String,
        /// Also check `branch` out in a new worktree, where the machine chooses.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        worktree: bool,
    },
}

impl HostAction {
    /// The session the action is about.
    pub fn session(&self) -> &str {
        match self {
            Self::Start { session, .. }
            | Self::Stop { session }
            | Self::Resume { session, .. }
            | Self::Restore { session, .. } => session,
        }
    }
}

/// Payload of `host.checkpoint.restored`: a checkpoint is on a new branch of the project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostCheckpointRestored {
    /// The session's name.
    pub session: String,
    /// The project's name.
    pub project: String,
    /// The checkpoint's id.
    pub checkpoint: String,
    /// The new branch.
    pub branch: String,
    /// The commit it points at (the checkpoint's commit).
    pub commit: String,
    /// Where the machine checked `branch` out in a new worktree, when asked to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<String>,
    /// The seq of the `input.host` entry that asked for it.
    pub input_seq: u64,
}

/// Payload of `host.session.started`: the machine started a session's `moor run`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSessionStarted {
    /// The session's name.
    pub session: String,
    /// The project's name.
    pub project: String,
    /// The agent's name.
    pub agent: String,
    /// The process id of its `moor run`.
    pub pid: u32,
    /// The seq of the `input.host` entry that asked for it.
    pub input_seq: u64,
}

/// Payload of `host.session.exited`: a session's `moor run` ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSessionExited {
    /// The session's name.
    pub session: String,
    /// Its exit code (None: ended by a signal, or unknown).
    pub code: Option<i32>,
    /// It was stopped on request.
    pub stopped: bool,
    /// It was started by an earlier run of `moor host` (before a restart), which alone could
    /// learn how it ended: it is known to have ended, not how.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub status_unknown: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_never_paths_options_or_commands() {
        for ok in ["api", "web-app", "my_project.v2", "A1"] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in [
            "",
            "../etc",
            "/bin/sh",
            "-rf",
            ".git",
            "a b",
            "x;rm",
            "a/b",
            &"x".repeat(65),
        ] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn branch_names_are_never_options_paths_or_names_git_refuses() {
        for ok in [
            "rescue",
            "moor/restore-0123456789abcdef",
            "fix_1.2",
            "a-b/c",
        ] {
            assert!(is_valid_branch(ok), "{ok}");
        }
        for bad in [
            "",
            "-f",
            "--force",
            ".hidden",
            "/abs",
            "a/",
            "a.",
            "a.lock",
            "a..b",
            "a//b",
            "a/.b",
            "a@{1}",
            "a b",
            "a~1",
            "a^",
            "a:b",
            "x\\y",
            &"b".repeat(101),
        ] {
            assert!(!is_valid_branch(bad), "{bad}");
        }
        assert!(is_checkpoint_id("0123456789abcdef"));
        assert!(!is_checkpoint_id("0123456789ABCDEF") && !is_checkpoint_id("../x"));
    }

    #[test]
    fn an_action_with_an_extra_field_is_refused() {
        let v = serde_json::json!({"action": "stop", "session": "s", "command": "rm -rf /"});
        assert!(serde_json::from_value::<HostAction>(v).is_err());
    }
}
