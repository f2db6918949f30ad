//! HTTP request and response bodies of `/api/v1`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::bridge::AgentInfo;
use crate::entry::Entry;
use crate::ids::{Seq, SessionId};

/// A session as listed and fetched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionInfo {
    /// Stable id.
    pub id: SessionId,
    /// Human name (unique).
    pub name: String,
    /// Creation time, ms since the epoch.
    pub created_at: i64,
    /// Seq of the newest entry (0 when empty).
    pub head_seq: Seq,
    /// Time of the newest entry, ms since the epoch.
    pub last_activity: Option<i64>,
    /// Whether the session still runs.
    pub status: SessionStatus,
    /// The bridge link as this server sees it.
    pub bridge: BridgeStatus,
    /// Live viewers (SSE streams and viewer sockets) on this server.
    #[serde(default)]
    pub watchers: u32,
    /// What the bridge runs, as it said in its last `Hello`.
    pub agent: Option<AgentInfo>,
    /// The caller's role on this session (the bootstrap admin owns every session).
    pub role: Role,
    /// The session's derived state as of `head_seq` (only when fetched one by one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<crate::state::SessionState>,
}

/// What a caller may do on one session. Ordered: each role includes the ones below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads the log, the state and the recovery brief.
    Viewer,
    /// Also sends input and decides permission requests.
    Controller,
    /// Also shares the session, attaches its bridge and closes it.
    Owner,
}

impl Role {
    /// The name on the wire and in the store.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Controller => "controller",
            Role::Owner => "owner",
        }
    }

    /// Parses a stored or requested name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "viewer" => Some(Role::Viewer),
            "controller" => Some(Role::Controller),
            "owner" => Some(Role::Owner),
            _ => None,
        }
    }
}

/// `GET /api/v1/me`: who the caller is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Me {
    /// The user name (`admin` for the bootstrap admin token).
    pub name: String,
    /// An administrator (a user made one, or the bootstrap admin token): owner of every
    /// session, manages users.
    pub admin: bool,
    /// The bootstrap admin token: no account behind it (it cannot approve a device or redeem a
    /// share link for anyone).
    pub bootstrap: bool,
}

/// `GET /api/v1/sessions/{id}/members` (owners): one principal with a role on the session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionMember {
    /// The user name.
    pub principal: String,
    /// Their role.
    pub role: Role,
    /// The share link they joined through (revoking it removes them); `None` when shared by name.
    pub via_link: Option<String>,
    /// Not a member yet: the role was offered by name and waits for them to accept it (until
    /// `offer_expires_at`). Whether an account has that name is not said.
    #[serde(default)]
    pub pending: bool,
    /// When a pending offer expires (ms); `None` for a member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub offer_expires_at: Option<i64>,
}

/// `GET /api/v1/offers`: a role on a session offered to the caller by one of its owners,
/// waiting for them to accept (`POST /api/v1/offers/{session}/accept`) or decline
/// (`DELETE /api/v1/offers/{session}`). The session is not in their session list before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionOffer {
    /// The session's id.
    pub session: SessionId,
    /// The session's name.
    pub name: String,
    /// The role accepting gives.
    pub role: Role,
    /// The owner who offered it.
    pub offered_by: String,
    /// When it was offered (ms).
    pub offered_at: i64,
    /// When it expires (ms).
    pub expires_at: i64,
}

/// `GET /api/v1/sessions/{id}/share-links` (owners): one of the session's share links, live or
/// not. Its secret is never in it: the server keeps only a hash, and showed the link once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShareLinkInfo {
    /// Its id (`DELETE /api/v1/share-links/{id}` revokes it).
    pub id: String,
    /// The role it grants.
    pub role: Role,
    /// Who made it.
    pub created_by: String,
    /// Creation time, ms since the epoch.
    pub created_at: i64,
    /// Expiry, ms since the epoch.
    pub expires_at: i64,
    /// Redemptions left.
    pub uses_left: i64,
    /// Redemptions it was made with (`None` for links made before this was recorded).
    pub max_uses: Option<i64>,
    /// When it was revoked, if it was.
    pub revoked_at: Option<i64>,
}

/// Life of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// The agent may still produce entries.
    Live,
    /// The agent is gone; the log is complete.
    Ended,
}

/// The state of a session's bridge link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BridgeStatus {
    /// A bridge is connected now.
    pub online: bool,
    /// Since when it is online or offline, ms since the epoch (None: never connected).
    pub since: Option<i64>,
    /// Close code of the last disconnect, if any.
    pub last_close_code: Option<u16>,
    /// Why the last connection ended, in plain words.
    pub last_reason: Option<String>,
    /// While online: entries waiting in the bridge's spool on its machine, not yet stored
    /// here, as the bridge last reported (absent when none wait or it does not report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub spool_unacked: Option<u64>,
}

/// `POST /api/v1/sessions/{id}/inputs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InputRequest {
    /// Client-chosen id, unique per session; retrying with the same id is safe.
    pub client_msg_id: String,
    /// An input kind such as [`crate::kinds::INPUT_TEXT`].
    pub kind: String,
    /// Kind-specific body.
    pub payload: Value,
}

impl InputRequest {
    /// A request to post `body` (an input kind such as [`crate::payload::InputText`]).
    pub fn typed(client_msg_id: impl Into<String>, body: impl Into<crate::EntryBody>) -> Self {
        let (kind, payload) = body.into().to_parts();
        Self {
            client_msg_id: client_msg_id.into(),
            kind,
            payload,
        }
    }
}

/// Answer to an input post.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InputAccepted {
    /// The input's seq in the log.
    pub seq: Seq,
    /// True when this `client_msg_id` was already stored and nothing new was written.
    pub duplicate: bool,
    /// True when no bridge holds the session's lease as the input is stored: it waits in the
    /// log, and the next bridge to connect gets it (its receipts say when). False: a live
    /// bridge connection holds the session and is sent the input now.
    #[serde(default)]
    pub queued: bool,
}

/// `GET /api/v1/sessions/{id}/entries`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EntriesPage {
    /// Entries in ascending seq order.
    pub entries: Vec<Entry>,
    /// The session's head when the page was read.
    pub head_seq: Seq,
    /// More entries exist in the paging direction.
    pub has_more: bool,
    /// Set when compaction removed entries after the page's `after` cursor: what is missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub compacted: Option<crate::compaction::Compacted>,
}

/// A retention policy: each bound `None` means none is set at this level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RetentionPolicy {
    /// Delete the session this many days after it ended.
    #[serde(default)]
    pub keep_ended_days: Option<f64>,
    /// Compact its raw terminal output and streamed text deltas once they are this many hours
    /// old.
    #[serde(default)]
    pub compact_after_hours: Option<f64>,
    /// Compact its log, oldest first, while its payloads hold more than this many bytes.
    #[serde(default)]
    pub max_log_bytes: Option<u64>,
}

/// `GET|PUT /api/v1/sessions/{id}/retention`: the session's own policy, the server's, the one
/// in effect (for each bound, the stricter of the two), and what compaction removed so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionRetention {
    /// What the owner set (`PUT` replaces it).
    pub own: RetentionPolicy,
    /// The server's.
    pub server: RetentionPolicy,
    /// In effect.
    pub effective: RetentionPolicy,
    /// Entries of the compacted kinds up to this seq are no longer stored (0: none).
    pub compacted_through: Seq,
    /// Entries compaction removed.
    pub compacted_entries: u64,
    /// Payload bytes compaction removed.
    pub compacted_bytes: u64,
}

/// `POST /api/v1/retention/run`: what one retention and compaction run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RetentionRun {
    /// Sessions the policies deleted in this run.
    pub retired_sessions: u64,
    /// Deleted sessions whose last rows this run removed.
    pub finished_sessions: u64,
    /// Entries of deleted sessions removed.
    pub entries_deleted: u64,
    /// Blob files no checkpoint named any more, removed.
    pub blobs_deleted: u64,
    /// Sessions compaction removed entries from.
    pub compacted_sessions: u64,
    /// Entries compaction removed.
    pub compacted_entries: u64,
    /// Payload bytes compaction removed.
    pub compacted_bytes: u64,
}

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Health {
    /// `ok` when the store answers.
    pub status: String,
    /// Server version.
    pub version: String,
}
