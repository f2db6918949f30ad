//! The durable store, by role: [`LogStore`] (the log and session metadata), [`AccessStore`]
//! (accounts, tokens, members, share links), [`CheckpointStore`] and, when several nodes share
//! the database, [`Cluster`]. SQLite and Postgres implement each role; what the two
//! dialects share is written once per role (`log.rs`, `access.rs`, `checkpoint.rs`, …), each
//! engine's differences stay in its own file.
//!
//! The log is a generic durable-stream engine — append with idempotency keys, read from an
//! offset — with sessions as metadata on top. It owns seq allocation: seqs are assigned inside the
//! appending transaction from the session row, so any number of processes may append. It must not
//! leak `sqlx` types upward, and it does no fan-out (that is the hub's job, after commit).

mod access;
mod append;
mod checkpoint;
mod cluster;
mod errors;
mod group;
pub mod lease;
mod log;
pub mod machines;
pub mod migrate;
pub mod notify;
mod packed;
mod page;
mod plan;
mod postgres;
mod raw;
pub mod retention;
mod sqlite;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use async_trait::async_trait;
use moor_protocol::api::ShareLinkInfo;
use moor_protocol::bridge::AgentInfo;
use moor_protocol::payload::SessionEnded;
use moor_protocol::{kinds, now_ms, Entry, EntryBody, ProducerId, Seq, SessionId};
use serde_json::Value;

pub use cluster::{Cluster, Notice, NoticeFeed, Revocation};
pub use errors::io_full;
pub use group::GroupPart;
pub use lease::{Expired, Lease, LeaseStore, RENEW_CHUNK};
pub use machines::MachineStore;
/// Roles are stored by their wire names; the store encodes and decodes them.
pub use moor_protocol::api::Role;
pub use notify::NotifyStore;
pub use page::{read_page, read_page_raw, Page, PageFit, PageLimit, ENTRY_OVERHEAD_BYTES};
pub use postgres::PgStore;
pub use raw::{Payload, RawEntry};
pub use retention::{Compaction, Policy, RetentionStore, Retired, Sweep};
pub use sqlite::{backup_into as sqlite_backup_into, SqliteStore};

/// Errors a store reports. Each implementation maps its driver's errors itself.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No such session.
    #[error("not found")]
    NotFound,
    /// The session has ended; nothing more can be appended.
    #[error("session ended")]
    SessionEnded,
    /// A uniqueness rule was violated.
    #[error("conflict: {0}")]
    Conflict(&'static str),
    /// The database cannot be reached right now (refused or lost connections, a pool that
    /// timed out, a server starting or shutting down, SQLite busy past its timeout): retrying
    /// later may succeed.
    #[error("database unavailable")]
    Unavailable(#[source] anyhow::Error),
    /// The disk under the database (or the data dir) is full: SQLite's `SQLITE_FULL`, Postgres's
    /// `disk_full` (53100), or `ENOSPC`/`EFBIG`/`EDQUOT` from a file. Nothing was written; reads
    /// still work, and the same write succeeds once space is freed.
    #[error("storage full")]
    Full(#[source] anyhow::Error),
    /// Anything else: the database is corrupt or holds what it should not…
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// Largest stored agent description a session list carries (the bridge handshake refuses
/// larger ones; this guards rows stored before it did).
pub const MAX_LISTED_AGENT_BYTES: usize = 16 * 1024;

/// Result alias for store calls.
pub type StoreResult<T> = Result<T, StoreError>;

/// A session's stored metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRow {
    /// Stable id.
    pub id: SessionId,
    /// Unique human name.
    pub name: String,
    /// Creation time (ms).
    pub created_at: i64,
    /// Newest seq (0: empty).
    pub head_seq: Seq,
    /// Time of the newest entry (ms).
    pub last_ts: Option<i64>,
    /// When the session ended, if it has.
    pub ended_at: Option<i64>,
    /// What the bridge last said it runs.
    pub agent: Option<AgentInfo>,
}

/// What makes an append idempotent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdemKey {
    /// No key: server-written entries that happen once by construction.
    None,
    /// `(producer, producer_seq)` of a bridge entry. Producer seqs must be contiguous per
    /// `(session, producer)`: the next one is always `mark + 1`.
    Producer {
        /// The bridge.
        producer: ProducerId,
        /// Its counter.
        seq: u64,
    },
    /// A remote input's client-chosen id.
    ClientMsg(String),
    /// A receipt about the input at this seq; unique per `(kind, input seq)`. Also keys the
    /// server's record of an entry at this seq (the `session.interrupted` an entry caused, the
    /// `bridge.disconnected` of the connection whose `bridge.connected` it is).
    Receipt(Seq),
    /// The session's end (`session.ended`): it ends the session in the transaction that writes
    /// it, so a session is never ended without its `session.ended`, nor the other way round.
    /// Written only while the session has not ended and its head is still `head` (what the
    /// writer read the log up to); else its whole part is [`StoreError::SessionEnded`] or
    /// [`StoreError::Conflict`]. Stored with `ref_seq` 0, so the database holds one per session.
    End {
        /// The head the writer read.
        head: Seq,
    },
}

/// One entry to append.
#[derive(Debug, Clone, PartialEq)]
pub struct Append {
    /// Time (ms): the bridge's for bridge entries, the server's otherwise.
    pub ts: i64,
    /// Namespaced kind.
    pub kind: String,
    /// Who wrote it.
    pub author: String,
    /// Body, as the JSON text to store.
    pub payload: Payload,
    /// Idempotency key.
    pub key: IdemKey,
}

impl Append {
    /// An entry the server writes itself, now, with no idempotency key.
    pub fn server(body: impl Into<EntryBody>) -> Self {
        let body = body.into();
        Self {
            ts: now_ms(),
            kind: body.kind().into(),
            author: kinds::AUTHOR_SERVER.into(),
            payload: body.payload().into(),
            key: IdemKey::None,
        }
    }

    /// A receipt for the input at `input`; `body` is one of the receipt payloads, which name
    /// the same seq.
    pub fn receipt(input: Seq, body: impl Into<EntryBody>) -> Self {
        Self {
            key: IdemKey::Receipt(input),
            ..Self::server(body)
        }
    }

    /// The end of the session, written if the session's head is still `head`: what the caller
    /// read the log up to. It goes last in a batch of its own.
    pub fn end(body: SessionEnded, head: Seq) -> Self {
        Self {
            key: IdemKey::End { head },
            ..Self::server(body)
        }
    }

    /// The head an end entry expects, if this is one.
    pub fn ends_at(&self) -> Option<Seq> {
        match self.key {
            IdemKey::End { head } => Some(head),
            _ => None,
        }
    }

    /// Bridge output, a remote input or a bridge's new connection (`bridge.connected`): what
    /// an ended session refuses, in the transaction that would write it, so a handshake that
    /// read the session before its end cannot record a connection after its `session.ended`.
    /// The server's own bookkeeping (receipts, `session.ended`, disconnects) may still be
    /// written after the end.
    pub fn is_new_work(&self) -> bool {
        matches!(self.key, IdemKey::Producer { .. } | IdemKey::ClientMsg(_))
            || self.kind == kinds::BRIDGE_CONNECTED
    }
}

/// The outcome of one [`Append`].
#[derive(Debug, Clone, PartialEq)]
pub enum Appended {
    /// Newly stored.
    Stored(RawEntry),
    /// The key was already stored with the same content, at this seq; nothing was written. A
    /// bridge entry stored once and removed since by compaction is a duplicate at seq 0: its
    /// content and seq are no longer known, only that it was stored.
    Duplicate(Seq),
    /// A producer seq that is already stored carried different content; nothing was written.
    Mismatch {
        /// The offending producer seq.
        producer_seq: u64,
    },
    /// A producer seq skipped ahead of the mark; nothing was written for it or for later
    /// entries of the same producer in this batch.
    Gap {
        /// The seq the store expected (`mark + 1`).
        expected: u64,
        /// The seq it got.
        got: u64,
    },
}

/// The columns of an entry as the store reads it back, the same on both engines.
pub(crate) const ENTRY_COLS: &str = "seq, ts, kind, author, payload";

/// The end of a query that reads one session's inputs after a seq, the same on both engines:
/// the bound in `$2`, the limit in `$3` (`$1` is left to the session condition before it).
pub(crate) const INPUTS_AFTER_SQL: &str =
    "client_msg_id IS NOT NULL AND seq > $2 ORDER BY seq LIMIT $3";

/// Which part of a log to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Range {
    /// Entries with seq > N, ascending.
    After(Seq),
    /// Entries with seq < N, the newest `limit` of them, returned ascending.
    Before(Seq),
}

impl Range {
    /// The seq that bounds the range (not in it).
    pub(crate) fn bound(self) -> Seq {
        let (Range::After(at) | Range::Before(at)) = self;
        at
    }

    /// The end of a query that reads this range of one session's entries, the same on both
    /// engines: the condition on `seq` (the bound in `$2`), the order and the limit (`$3`).
    /// `$1` is left to the session condition before it.
    pub(crate) fn sql(self) -> &'static str {
        match self {
            Range::After(_) => "seq > $2 ORDER BY seq ASC LIMIT $3",
            Range::Before(_) => "seq < $2 ORDER BY seq DESC LIMIT $3",
        }
    }
}

/// The durable log: sessions, append with producer idempotency, reads, inputs and snapshots.
#[async_trait]
pub trait LogStore: Send + Sync + Debug + 'static {
    /// The session named or identified by `key`; a name not seen before creates it.
    /// `agent` replaces the stored agent description when given.
    async fn open_session(&self, key: &str, agent: Option<&AgentInfo>) -> StoreResult<SessionRow>;

    /// The session with this id or name.
    async fn find_session(&self, key: &str) -> StoreResult<SessionRow>;

    /// Up to `limit` sessions, newest activity first, each with the role `member` has on it:
    /// only those it is a member of, or every session (as owner) when `member` is `None`. An
    /// agent description stored over [`MAX_LISTED_AGENT_BYTES`] is left out.
    async fn list_sessions(
        &self,
        member: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<(SessionRow, Role)>>;

    /// Appends `batch` to one session's log in one transaction, in order, and reports each
    /// entry's outcome. Seqs are contiguous and follow commit order. Once the session has ended,
    /// a batch holding new work ([`Append::is_new_work`]) is refused with
    /// [`StoreError::SessionEnded`]; the server's own bookkeeping is still written.
    async fn append(&self, session: SessionId, batch: Vec<Append>) -> StoreResult<Vec<Appended>> {
        self.append_group(vec![(session, batch)])
            .await?
            .pop()
            .unwrap_or_else(|| Err(StoreError::Other(anyhow!("a group of one had no outcome"))))
    }

    /// Appends to several sessions' logs in ONE transaction (one commit, one fsync): each part
    /// as [`LogStore::append`] would, in order, a session named twice seeing its earlier part.
    /// Reports each part's outcome in order. A part whose session is unknown
    /// ([`StoreError::NotFound`]) or has ended while it holds new work
    /// ([`StoreError::SessionEnded`]) writes nothing and does not affect the others. An error of
    /// the whole call means nothing was committed.
    async fn append_group(
        &self,
        group: Vec<GroupPart>,
    ) -> StoreResult<Vec<StoreResult<Vec<Appended>>>>;

    /// Append transactions this handle has committed so far: with [`LogStore::append_group`],
    /// how well appends are grouped (tests and diagnostics).
    fn append_transactions(&self) -> u64;

    /// The newest schema migration applied to the database, read with one query, and the
    /// newest this build carries: the store is current when they are equal.
    async fn schema_versions(&self) -> StoreResult<(i64, i64)>;

    /// Up to `limit` entries of a session's log.
    async fn read(&self, session: SessionId, range: Range, limit: u32) -> StoreResult<Vec<Entry>> {
        self.read_raw(session, range, limit)
            .await?
            .0
            .iter()
            .map(RawEntry::parse)
            .collect()
    }

    /// [`LogStore::read`], the payloads as stored, with what compaction had removed as of the
    /// same read (so a page knows whether compaction moved since it was sized).
    async fn read_raw(
        &self,
        session: SessionId,
        range: Range,
        limit: u32,
    ) -> StoreResult<(Vec<RawEntry>, Compaction)>;

    /// What compaction has removed from the session's log so far (one small read).
    async fn compaction(&self, session: SessionId) -> StoreResult<Compaction>;

    /// How many of the entries [`LogStore::read`] would return for `range` make one page within
    /// `limit`, in the order the range walks the log (ascending for `After`, newest first for
    /// `Before`), and whether the range holds more: sized from the stored payload lengths
    /// without reading a payload out (what [`read_page`] sizes a page with), and the
    /// compaction mark as of the same read.
    async fn fit_page(
        &self,
        session: SessionId,
        range: Range,
        limit: PageLimit,
    ) -> StoreResult<PageFit>;

    /// Highest stored producer seq of `producer` in `session` (0: none).
    async fn producer_mark(&self, session: SessionId, producer: ProducerId) -> StoreResult<u64>;

    /// The seq of the entry stored in `session` under the client message id `id`, if any.
    async fn client_msg_seq(&self, session: SessionId, id: &str) -> StoreResult<Option<Seq>>;

    /// Remote inputs with seq > `after`, oldest first, at most `limit`.
    async fn inputs_after(
        &self,
        session: SessionId,
        after: Seq,
        limit: u32,
    ) -> StoreResult<Vec<Entry>>;

    /// Seqs of inputs with seq ≤ `upto` that have no settling receipt yet (applied, failed or
    /// uncertain), oldest first.
    async fn unsettled_inputs(&self, session: SessionId, upto: Seq) -> StoreResult<Vec<Seq>>;

    /// Stores `state` (JSON) as the session's latest state snapshot, taken at `head`; an older
    /// snapshot than the stored one is ignored.
    async fn save_snapshot(&self, session: SessionId, head: Seq, state: &str) -> StoreResult<()>;

    /// The session's latest state snapshot: the seq it was taken at and the state JSON.
    async fn latest_snapshot(&self, session: SessionId) -> StoreResult<Option<(Seq, String)>>;

    /// Marks the session ended at `at`, writing nothing to its log. True when this call ended
    /// it; false when it had ended already (its first end time stays) or does not exist. Of
    /// several callers racing, on one node or several, exactly one gets true. The server ends a
    /// session with [`Append::end`] instead, which writes `session.ended` in the same
    /// transaction; this bare mark sets up ended sessions in tests.
    async fn end_session(&self, session: SessionId, at: i64) -> StoreResult<bool>;
}

/// Uploaded checkpoints (G7), the blobs they name and who uploaded each blob. A checkpoint is
/// keyed by its session and its id: the same id in two sessions is two checkpoints.
#[async_trait]
pub trait CheckpointStore: Send + Sync + Debug + 'static {
    /// Stores an uploaded checkpoint. Returns false if the same id was already stored in the
    /// same session with the same manifest; another manifest under a stored id of that session
    /// is a [`StoreError::Conflict`]; an unknown session is [`StoreError::NotFound`].
    async fn save_checkpoint(&self, row: &CheckpointRow) -> StoreResult<bool>;

    /// Checkpoint `id` of `session`, manifest included.
    async fn checkpoint(&self, session: SessionId, id: &str) -> StoreResult<CheckpointRow>;

    /// The sessions holding a checkpoint with this id.
    async fn checkpoint_sessions(&self, id: &str) -> StoreResult<Vec<SessionId>>;

    /// A session's checkpoints, newest first, without their manifests (empty strings).
    async fn list_checkpoints(&self, session: SessionId) -> StoreResult<Vec<CheckpointRow>>;

    /// The sessions that have a checkpoint naming the blob `sha256`.
    async fn blob_sessions(&self, sha256: &str) -> StoreResult<Vec<SessionId>>;

    /// Records that `uploader` sent blob `sha256` of `size` bytes (idempotent: the first
    /// upload's time and size are kept).
    async fn record_blob_upload(
        &self,
        sha256: &str,
        uploader: &str,
        size: u64,
        at: i64,
    ) -> StoreResult<()>;

    /// Of `sha256`, the blobs `principal` knows: ones it uploaded, or ones a checkpoint of a
    /// session it is a member of names. In no particular order.
    async fn blobs_known_to(&self, principal: &str, sha256: &[String]) -> StoreResult<Vec<String>>;

    /// Bytes of the distinct blobs `uploader` sent: what per-account quotas count for blobs.
    async fn uploaded_blob_bytes(&self, uploader: &str) -> StoreResult<u64>;
}

/// Who may do what: users, refresh-token families (logins and devices), session members and
/// share links. Secrets arrive hashed; nothing here sees a password or a token. Roles are stored
/// by their wire names ([`Role::as_str`]); a stored name this server does not know is an error,
/// never a guess.
#[async_trait]
pub trait AccessStore: Send + Sync + Debug + 'static {
    /// Adds a user with an argon2id password hash (an administrator when `admin`); an existing
    /// name is a [`StoreError::Conflict`].
    async fn create_user(
        &self,
        name: &str,
        password_hash: &str,
        admin: bool,
        at: i64,
    ) -> StoreResult<()>;

    /// Adds the first administrator: only while no administrator exists (checked and inserted
    /// atomically, also against other nodes). Returns false when one exists already; an
    /// existing name is a [`StoreError::Conflict`].
    async fn create_first_admin(
        &self,
        name: &str,
        password_hash: &str,
        at: i64,
    ) -> StoreResult<bool>;

    /// Whether any administrator exists (revoked ones count: setup happens once).
    async fn has_admin(&self) -> StoreResult<bool>;

    /// The user with this name.
    async fn user(&self, name: &str) -> StoreResult<UserRow>;

    /// Revokes a user and every token family of theirs (idempotent).
    async fn revoke_user(&self, name: &str, at: i64) -> StoreResult<()>;

    /// Starts a token family (one login or device) with its first refresh token.
    async fn create_token_family(&self, family: &str, first: &RefreshRow) -> StoreResult<()>;

    /// Rotates a refresh token: marks `old_hash` used and stores `next` in the same family, in
    /// one transaction. A token already used (or of a revoked family) revokes the whole family
    /// and reports [`RefreshOutcome::Reused`], except within `grace_ms` of its use while the
    /// token that replaced it is still unused (the answer carrying it was lost): that one is
    /// then spent unused, and `next` replaces it.
    async fn rotate_refresh(
        &self,
        old_hash: &str,
        next: &RefreshRow,
        at: i64,
        grace_ms: i64,
    ) -> StoreResult<RefreshOutcome>;

    /// Revokes a token family (idempotent); returns its user.
    async fn revoke_token_family(&self, family: &str, at: i64) -> StoreResult<String>;

    /// The family's user, if the family exists, is not revoked, and its user is not revoked.
    async fn active_family(&self, family: &str) -> StoreResult<Option<FamilyUser>>;

    /// Sets a principal's role on a session (replacing any other). Taking the owner role from
    /// the session's last owner is a [`StoreError::Conflict`] ([`LAST_OWNER`]).
    async fn set_member(&self, session: SessionId, principal: &str, role: Role) -> StoreResult<()>;

    /// Makes `principal` the owner of a session that has no members yet; returns whether it did.
    async fn claim_session(&self, session: SessionId, principal: &str) -> StoreResult<bool>;

    /// Removes a principal's role on a session, and any offer of one to them (idempotent).
    /// Removing the session's last owner is a [`StoreError::Conflict`] ([`LAST_OWNER`]).
    async fn remove_member(&self, session: SessionId, principal: &str) -> StoreResult<()>;

    /// A principal's role on a session, if any.
    async fn member_role(&self, session: SessionId, principal: &str) -> StoreResult<Option<Role>>;

    /// Everyone with a role on a session, by name (byte order).
    async fn members(&self, session: SessionId) -> StoreResult<Vec<MemberRow>>;

    /// Offers `offer.role` on `offer.session` to `offer.principal` (replacing a pending offer
    /// to them), whether or not an account has that name. With `limits.per_session` live
    /// offers pending on the session already it is a [`StoreError::Conflict`]
    /// ([`OFFERS_PER_SESSION`]); with `limits.per_user` live offers pending to the name from
    /// other sessions nothing is stored and it reports [`Offered::Dropped`]. Expired offers of
    /// the session and the name are deleted on the way.
    async fn offer(&self, offer: &OfferRow, limits: OfferLimits) -> StoreResult<Offered>;

    /// The live offers pending on a session, by name (byte order), whether or not an account
    /// has the name: what its owners typed.
    async fn session_offers(&self, session: SessionId, at: i64) -> StoreResult<Vec<OfferRow>>;

    /// The live offers addressed to `principal`, newest first: only those made while their
    /// account existed (and it is not revoked).
    async fn offers_to(&self, principal: &str, at: i64) -> StoreResult<Vec<OfferRow>>;

    /// Accepts the live offer of `session` to `principal`: it becomes their role (replacing
    /// any other) and the offer is gone. `None` when there is no live offer. When it would
    /// take the owner role from the session's last owner nothing changes: a
    /// [`StoreError::Conflict`] ([`LAST_OWNER`]).
    async fn accept_offer(
        &self,
        session: SessionId,
        principal: &str,
        at: i64,
    ) -> StoreResult<Option<Role>>;

    /// Deletes the offer of `session` to `principal`, live or not; returns whether there was
    /// one.
    async fn decline_offer(&self, session: SessionId, principal: &str) -> StoreResult<bool>;

    /// Every session a principal has a role on, with the role.
    async fn memberships(&self, principal: &str) -> StoreResult<Vec<(SessionId, Role)>>;

    /// Stores a new share link.
    async fn create_share_link(&self, link: &ShareLinkRow) -> StoreResult<()>;

    /// Spends one use of the link whose secret hashes to `token_hash` (if it is live) and gives
    /// `principal` its role, unless they already have a role on the session. A link is live
    /// while unexpired, unrevoked, not used up, and its creator still owns the session (or is
    /// an administrator, or the bootstrap admin). Returns the session and the role the
    /// principal has now; `None` for a dead or unknown link.
    async fn redeem_share_link(
        &self,
        token_hash: &str,
        principal: &str,
        at: i64,
    ) -> StoreResult<Option<(SessionId, Role)>>;

    /// What the live link whose secret hashes to `token_hash` grants, without spending a use:
    /// its session, its role and who made it. `None` for a link redeeming would refuse (dead or
    /// unknown), by the same test.
    async fn share_link_preview(
        &self,
        token_hash: &str,
        at: i64,
    ) -> StoreResult<Option<(SessionId, Role, String)>>;

    /// Revokes a link and removes the members who joined through it. Returns the link's
    /// session and those members. When that would remove the session's last owner nothing
    /// changes: a [`StoreError::Conflict`] ([`LAST_OWNER`]).
    async fn revoke_share_link(&self, id: &str, at: i64) -> StoreResult<(SessionId, Vec<String>)>;

    /// The session a share link belongs to.
    async fn share_link_session(&self, id: &str) -> StoreResult<SessionId>;

    /// A session's share links, live or not, newest first.
    async fn share_links(&self, session: SessionId) -> StoreResult<Vec<ShareLinkRow>>;

    /// How many sessions `principal` owns.
    async fn owned_sessions(&self, principal: &str) -> StoreResult<u64>;

    /// The stored size (bytes of entry payloads) of the logs of every session `principal`
    /// owns.
    async fn owned_log_bytes(&self, principal: &str) -> StoreResult<u64>;
}

/// The principal name of the bootstrap admin token (no account: user names may not take it).
/// Its share links live as long as the token.
pub const BOOTSTRAP_PRINCIPAL: &str = "admin";

/// Why a change to a session's members was refused: it would leave the session without an
/// owner.
pub const LAST_OWNER: &str = "a session always has an owner: make someone else owner first \
     (an administrator can reassign a session)";

/// Why an offer was refused: the session has as many pending offers as it may hold.
pub const OFFERS_PER_SESSION: &str = "this session has as many pending offers as it may hold: \
     remove some (DELETE …/members/{user}) or wait for them to expire";

/// A role offered on a session to a user name, pending until its user accepts or declines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferRow {
    /// The session.
    pub session: SessionId,
    /// The user name it is addressed to (an account may or may not have it).
    pub principal: String,
    /// The role accepting it gives.
    pub role: Role,
    /// The owner who made it; it dies when they no longer own the session.
    pub offered_by: String,
    /// When it was made (ms); it matches only an account that existed by then.
    pub offered_at: i64,
    /// When it expires (ms).
    pub expires_at: i64,
}

/// How many live offers may be pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OfferLimits {
    /// On one session (more: 409).
    pub per_session: u32,
    /// To one user name, from all sessions (more: dropped, answered the same).
    pub per_user: u32,
}

/// What [`AccessStore::offer`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offered {
    /// The offer is stored (new or replacing the pending one).
    Pending,
    /// The name has as many offers pending as it may: nothing was stored.
    Dropped,
}

/// One open database, by role: what each part of the server needs from it.
#[derive(Debug, Clone)]
pub struct Stores {
    /// The log and session metadata.
    pub log: Arc<dyn LogStore>,
    /// Accounts, tokens, members and share links.
    pub access: Arc<dyn AccessStore>,
    /// Checkpoint records.
    pub checkpoints: Arc<dyn CheckpointStore>,
    /// Bridge leases: which node holds each session's bridge, and until when.
    pub leases: Arc<dyn LeaseStore>,
    /// The notification outbox and Web Push subscriptions.
    pub notify: Arc<dyn NotifyStore>,
    /// Deleting sessions (retention, owners' deletions).
    pub retention: Arc<dyn RetentionStore>,
    /// Machines running `moor host` and the sessions they were asked to start.
    pub machines: Arc<dyn MachineStore>,
    /// Coordination with the other nodes sharing the database; `None` for a single-node
    /// store (SQLite).
    pub cluster: Option<Arc<dyn Cluster>>,
}

impl Stores {
    /// Every role played by `store`, and the `cluster` when several nodes share it.
    fn of<
        S: LogStore
            + AccessStore
            + CheckpointStore
            + LeaseStore
            + NotifyStore
            + RetentionStore
            + MachineStore,
    >(
        store: Arc<S>,
        cluster: Option<Arc<dyn Cluster>>,
    ) -> Self {
        Self {
            log: store.clone(),
            access: store.clone(),
            checkpoints: store.clone(),
            leases: store.clone(),
            notify: store.clone(),
            retention: store.clone(),
            machines: store,
            cluster,
        }
    }
}

/// A share link as stored: what its owners see (`revoked_at` is ignored when storing a new
/// link), the session it shares and its secret, only hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareLinkRow {
    /// What `GET /api/v1/sessions/{id}/share-links` shows of it.
    pub info: ShareLinkInfo,
    /// SHA-256 (hex) of the secret in the link.
    pub token_hash: String,
    /// The session it shares.
    pub session: SessionId,
}

/// A principal's role on a session, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRow {
    /// The user name.
    pub principal: String,
    /// The role.
    pub role: Role,
    /// The share link they joined through, if they did.
    pub via_link: Option<String>,
}

/// A stored account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRow {
    /// Unique login name.
    pub name: String,
    /// argon2id PHC string.
    pub password_hash: String,
    /// Creation time (ms).
    pub created_at: i64,
    /// When it was revoked, if it was.
    pub revoked_at: Option<i64>,
    /// An administrator: manages users, owns every session.
    pub admin: bool,
}

/// The user behind a live token family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyUser {
    /// Login name.
    pub name: String,
    /// An administrator.
    pub admin: bool,
}

/// A refresh token as stored: only its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefreshRow {
    /// SHA-256 (hex) of the token.
    pub token_hash: String,
    /// Its user.
    pub user: String,
    /// Issue time (ms).
    pub created_at: i64,
    /// Expiry (ms).
    pub expires_at: i64,
}

/// What presenting a refresh token did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefreshOutcome {
    /// Rotated: the old token is spent, the new one stored.
    Rotated {
        /// The family both belong to.
        family: String,
        /// Their user.
        user: String,
    },
    /// The token was spent already, or its family or user revoked: the family is now revoked.
    Reused {
        /// The revoked family.
        family: String,
        /// Its user.
        user: String,
    },
    /// Unknown or expired.
    Invalid,
}

/// A stored checkpoint (G7). The store keeps the JSON as given; `http::checkpoints` owns its
/// shape (`moor_protocol::checkpoint`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointRow {
    /// Checkpoint id (unique within its session).
    pub id: String,
    /// The session that uploaded it.
    pub session: SessionId,
    /// When the bridge took it (ms).
    pub created_at: i64,
    /// `CheckpointSummary` JSON.
    pub summary: String,
    /// `CheckpointManifest` JSON (empty in lists).
    pub manifest: String,
    /// SHA-256 of every blob the manifest names (recorded at upload; empty in reads).
    pub blobs: Vec<String>,
}

/// The outcome of storing a checkpoint whose id was taken in its session (or whose session is
/// missing), from what is `stored` under that session and id: the same upload retried is a
/// no-op (`false`), other content a conflict.
pub(crate) fn checkpoint_retried(
    stored: StoreResult<CheckpointRow>,
    row: &CheckpointRow,
) -> StoreResult<bool> {
    let stored = stored?;
    if stored.manifest == row.manifest && stored.session == row.session {
        Ok(false)
    } else {
        Err(StoreError::Conflict(
            "checkpoint id already stored with other content",
        ))
    }
}

/// Opens the store a database URL names and runs its migrations: `sqlite:` (the default
/// engine, one node) or `postgres:`/`postgresql:` (any number of nodes). Anything else is refused
/// with a clear message. On Postgres this node gets a generated name; see [`connect_as`].
pub async fn connect(url: &str) -> anyhow::Result<Stores> {
    connect_as(url, &format!("node-{:08x}", rand::random::<u32>())).await
}

/// Like [`connect`], naming this node `node_id` to the others (Postgres only: in notices and in
/// `pg_stat_activity.application_name`).
pub async fn connect_as(url: &str, node_id: &str) -> anyhow::Result<Stores> {
    match Engine::of(url)? {
        // Only one node uses a SQLite store.
        Engine::Sqlite => Ok(Stores::of(Arc::new(SqliteStore::connect(url).await?), None)),
        Engine::Postgres => {
            let store = Arc::new(PgStore::connect(url, node_id).await?);
            Ok(Stores::of(store.clone(), Some(store)))
        }
    }
}

/// Like [`connect_as`], waiting up to `wait` for a database that cannot be reached yet (not
/// started, or restarting, as when a host boots or a compose file starts everything at once):
/// each failed attempt is logged and retried after a backoff from 250 ms to 5 s. Any other error
/// (a bad URL, refused credentials, a failed migration) ends it at once.
pub async fn connect_waiting(url: &str, node_id: &str, wait: Duration) -> anyhow::Result<Stores> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut backoff = Duration::from_millis(250);
    for attempt in 1.. {
        let e = match connect_as(url, node_id).await {
            Ok(stores) => return Ok(stores),
            Err(e) => e,
        };
        let unreachable = e
            .chain()
            .filter_map(|c| c.downcast_ref::<sqlx::Error>())
            .any(errors::unavailable);
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if !unreachable || left.is_zero() {
            return Err(e);
        }
        tracing::warn!(
            attempt,
            error = format!("{e:#}"),
            left_secs = left.as_secs(),
            "the database cannot be reached yet; retrying"
        );
        tokio::time::sleep(backoff.min(left)).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
    unreachable!("the attempts are counted without end")
}

/// The database engines a URL can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// `sqlite:`
    Sqlite,
    /// `postgres:` or `postgresql:`
    Postgres,
}

impl Engine {
    /// The engine `url` names, or a message saying which schemes are understood.
    pub fn of(url: &str) -> anyhow::Result<Self> {
        if url.starts_with("sqlite:") {
            Ok(Self::Sqlite)
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Ok(Self::Postgres)
        } else {
            Err(anyhow!(
                "unsupported database URL scheme in {:?}: expected sqlite: or postgres:",
                redact_url(url)
            ))
        }
    }
}

/// `url` with any password replaced by `***`, for messages and logs.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// A seq as an SQL BIGINT; cursors beyond its range mean "everything".
pub(crate) fn seq_bind(seq: Seq) -> i64 {
    seq.0.min(i64::MAX as u64) as i64
}

/// Compares a replayed entry with the stored one (kind and payload; the timestamp may differ
/// if the bridge re-stamped it, and is not part of the content).
pub(crate) fn same_content(stored_kind: &str, stored_payload: &Value, new: &Append) -> bool {
    stored_kind == new.kind && new.payload.value().is_ok_and(|v| &v == stored_payload)
}

/// The newest migration applied to the database behind `pool` (0 before any).
async fn applied_migration<'c, E>(pool: E) -> StoreResult<i64>
where
    E: sqlx::Executor<'c>,
    i64: sqlx::Type<E::Database> + for<'r> sqlx::Decode<'r, E::Database>,
    for<'q> <E::Database as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, E::Database>,
    (i64,): for<'r> sqlx::FromRow<'r, <E::Database as sqlx::Database>::Row>,
{
    sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM _sqlx_migrations WHERE success")
        .fetch_one(pool)
        .await
        .map_err(errors::db_error)
}

/// The newest migration `migrator` carries: what a current database was migrated to.
fn newest_migration(migrator: &sqlx::migrate::Migrator) -> i64 {
    migrator.iter().map(|m| m.version).max().unwrap_or(0)
}
