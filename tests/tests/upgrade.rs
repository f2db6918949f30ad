//! Upgrades: a database as the previous release left it opens with this `moord`, is migrated,
//! and serves every session exactly, on SQLite and on Postgres; and a bridge speaking another
//! protocol version is refused with close 4002 and a message saying which side to upgrade,
//! which `moor` shows its user.
//!
//! "The previous release" is the repository's own migrations without the newest one, applied by
//! sqlx to a fresh database, then filled with rows written with SQL that fits that schema. When a
//! migration is added, these tests upgrade from the one before it. When a migration changes a
//! table written below, that SQL has to follow it (one release later): the rows stand for data
//! an operator already has.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use moor_e2e::pg::TestDb;
use moor_e2e::util::bin_path;
use moor_e2e::ws::RawBridge;
use moor_e2e::{Api, ServerOpts, TestServer, WAIT};
use moor_protocol::api::{Role, SessionInfo, SessionStatus};
use moor_protocol::bridge::{AgentInfo, BridgeToServer, ServerToBridge, Welcome};
use moor_protocol::checkpoint::{CheckpointManifest, CheckpointSummary, StoredCheckpoint};
use moor_protocol::kinds::{self, AUTHOR_BRIDGE, AUTHOR_SERVER};
use moor_protocol::state::SessionState;
use moor_protocol::{close, now_ms, Entry, NewEntry, ProducerId, Seq, SessionId, PROTOCOL_VERSION};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::migrate::Migrator;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{PgPool, SqlitePool};

/// The old accounts' password, and its argon2id hash as `moord user add` stored it.
const OLD_PASSWORD: &str = "kept across the upgrade";
const OLD_PASSWORD_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$ot5EV4MxR7WkPkz4warCbw$LMTbAGoxXzGkIaia9zRUjAzndTq/pdDcXhRXIJjtm6U";

/// Entries per page when reading a log back.
const PAGE: usize = 64;

/// The repository's `migrations/<dialect>` without the newest migration: the schema of the
/// previous release.
async fn previous_migration_set(dialect: &str) -> Migrator {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../migrations")
        .join(dialect);
    let mut set = Migrator::new(dir)
        .await
        .expect("read the repository's migrations");
    let newest = set
        .iter()
        .map(|m| m.version)
        .max()
        .expect("at least one migration");
    set.migrations = Cow::Owned(set.iter().filter(|m| m.version < newest).cloned().collect());
    set
}

/// A fresh database that this `moord` has not opened yet.
enum OldDb {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl OldDb {
    /// Applies the previous migration set, as the previous release's `moord` did.
    async fn migrate(&self) {
        let applied = match self {
            OldDb::Sqlite(pool) => previous_migration_set("sqlite").await.run(pool).await,
            OldDb::Postgres(pool) => previous_migration_set("postgres").await.run(pool).await,
        };
        applied.expect("apply the previous migration set");
    }

    async fn close(self) {
        match self {
            OldDb::Sqlite(pool) => pool.close().await,
            OldDb::Postgres(pool) => pool.close().await,
        }
    }
}

/// Runs one statement on an [`OldDb`]: the `sqlite` or the `postgres` text, with the same binds
/// in the same order.
macro_rules! write_row {
    ($db:expr, $what:expr, sqlite: $lite:expr, postgres: $pg:expr, [$($arg:expr),* $(,)?]) => {{
        let what = $what;
        let written = match $db {
            OldDb::Sqlite(pool) => sqlx::query($lite)$(.bind($arg))*.execute(pool).await.map(drop),
            OldDb::Postgres(pool) => sqlx::query($pg)$(.bind($arg))*.execute(pool).await.map(drop),
        };
        written.unwrap_or_else(|e| panic!("write {what} with the previous schema: {e}"));
    }};
}

/// What the previous release stored: accounts and sessions.
struct OldData {
    /// Account names; each has [`OLD_PASSWORD`].
    users: Vec<&'static str>,
    users_created_at: i64,
    sessions: Vec<OldSession>,
}

impl OldData {
    /// The session whose bridge may come back (the others ended).
    fn live(&self) -> &OldSession {
        self.sessions
            .iter()
            .find(|s| !s.ended)
            .expect("a live session")
    }
}

/// One session as the previous release stored it.
struct OldSession {
    id: SessionId,
    name: &'static str,
    created_at: i64,
    ended: bool,
    agent: AgentInfo,
    /// The bridge that wrote the session's `bridge` entries.
    producer: ProducerId,
    rows: Vec<OldRow>,
    /// `session_members`: who has which role.
    members: Vec<(&'static str, Role)>,
    /// How many entries the stored state snapshot folds (0: no snapshot).
    snapshot_at: usize,
    /// Checkpoints, oldest first.
    checkpoints: Vec<(CheckpointSummary, CheckpointManifest)>,
}

/// One `entries` row: the entry and its idempotency key.
struct OldRow {
    entry: Entry,
    key: Key,
}

/// Which idempotency column an entry row fills.
#[derive(Clone, Copy)]
enum Key {
    /// `producer_seq`: written by the session's bridge.
    Producer(u64),
    /// `client_msg_id`: a remote input.
    Input(&'static str),
    /// `ref_seq`: a receipt about the input at this seq.
    Receipt(Seq),
    /// None: the server's own records.
    None,
}

impl OldSession {
    fn entries(&self) -> Vec<Entry> {
        self.rows.iter().map(|r| r.entry.clone()).collect()
    }

    fn head(&self) -> u64 {
        self.rows.len() as u64
    }

    fn last_ts(&self) -> i64 {
        self.rows.last().map_or(self.created_at, |r| r.entry.ts)
    }

    fn ended_at(&self) -> Option<i64> {
        self.ended.then(|| self.last_ts())
    }

    /// The highest producer seq stored: the mark its bridge resumes from.
    fn producer_mark(&self) -> u64 {
        self.rows
            .iter()
            .filter_map(|r| match r.key {
                Key::Producer(n) => Some(n),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    fn role_of(&self, user: &str) -> Option<Role> {
        self.members
            .iter()
            .find(|(who, _)| *who == user)
            .map(|(_, role)| *role)
    }

    /// How a session list shows it to someone with `role`.
    fn listed(&self, role: Role) -> Listed {
        Listed {
            id: self.id,
            name: self.name.to_owned(),
            created_at: self.created_at,
            head_seq: Seq(self.head()),
            last_activity: Some(self.last_ts()),
            status: if self.ended {
                SessionStatus::Ended
            } else {
                SessionStatus::Live
            },
            agent: Some(self.agent.clone()),
            role,
        }
    }
}

/// The fields of a listed session that come from the store.
#[derive(Debug, PartialEq)]
struct Listed {
    id: SessionId,
    name: String,
    created_at: i64,
    head_seq: Seq,
    last_activity: Option<i64>,
    status: SessionStatus,
    agent: Option<AgentInfo>,
    role: Role,
}

impl From<&SessionInfo> for Listed {
    fn from(s: &SessionInfo) -> Self {
        Self {
            id: s.id,
            name: s.name.clone(),
            created_at: s.created_at,
            head_seq: s.head_seq,
            last_activity: s.last_activity,
            status: s.status,
            agent: s.agent.clone(),
            role: s.role,
        }
    }
}

/// A session's log as its writers made it: the bridge (producer seqs from 1), users' inputs
/// (client message ids), and the server (receipts and its own records).
struct Log {
    rows: Vec<OldRow>,
    created_at: i64,
    ts: i64,
    agent: AgentInfo,
    producer: ProducerId,
    producer_seq: u64,
}

impl Log {
    /// A log started at `t` by its bridge (a new producer) connecting with `agent`.
    fn connected(t: i64, agent: AgentInfo) -> Self {
        let mut log = Self {
            rows: Vec::new(),
            created_at: t,
            ts: t,
            agent,
            producer: ProducerId::new(),
            producer_seq: 0,
        };
        let payload = json!({ "connection": 1, "producer": log.producer, "agent": log.agent });
        log.server(kinds::BRIDGE_CONNECTED, payload);
        log
    }

    /// The session `name` this is the log of, ended if the log says so, with `members`; no
    /// snapshot or checkpoints.
    fn into_session(self, name: &'static str, members: Vec<(&'static str, Role)>) -> OldSession {
        OldSession {
            id: SessionId::new(),
            name,
            created_at: self.created_at,
            ended: self
                .rows
                .iter()
                .any(|r| r.entry.kind == kinds::SESSION_ENDED),
            agent: self.agent,
            producer: self.producer,
            rows: self.rows,
            members,
            snapshot_at: 0,
            checkpoints: Vec::new(),
        }
    }

    fn push(&mut self, author: &str, kind: &str, payload: Value, key: Key) -> Seq {
        self.ts += 250;
        let seq = Seq(self.rows.len() as u64 + 1);
        let entry = Entry {
            seq,
            ts: self.ts,
            kind: kind.to_owned(),
            author: author.to_owned(),
            payload,
        };
        self.rows.push(OldRow { entry, key });
        seq
    }

    fn bridge(&mut self, kind: &str, payload: Value) -> Seq {
        self.producer_seq += 1;
        let key = Key::Producer(self.producer_seq);
        self.push(AUTHOR_BRIDGE, kind, payload, key)
    }

    fn server(&mut self, kind: &str, payload: Value) -> Seq {
        self.push(AUTHOR_SERVER, kind, payload, Key::None)
    }

    fn input(
        &mut self,
        user: &str,
        client_msg_id: &'static str,
        kind: &str,
        payload: Value,
    ) -> Seq {
        let author = format!("user:{user}");
        self.push(&author, kind, payload, Key::Input(client_msg_id))
    }

    /// The server's `input.delivered` and `input.applied` for `input`.
    fn delivered_and_applied(&mut self, input: Seq) {
        for kind in [kinds::INPUT_DELIVERED, kinds::INPUT_APPLIED] {
            let payload = json!({ "input_seq": input });
            self.push(AUTHOR_SERVER, kind, payload, Key::Receipt(input));
        }
    }
}

fn agent_info(adapter: &str, command: &[&str], cwd: &str) -> AgentInfo {
    AgentInfo {
        command: command.iter().map(|c| (*c).to_owned()).collect(),
        cwd: cwd.to_owned(),
        host: "old-laptop".to_owned(),
        adapter: adapter.to_owned(),
    }
}

/// An `agent.pty.output` payload of `text`.
fn pty(text: &str) -> Value {
    json!({ "data": base64::engine::general_purpose::STANDARD.encode(text) })
}

/// Three sessions of the last hour: a `lines` build that failed (ended; bob's, ada a viewer), a
/// Claude Code turn with a permission request and a checkpoint (ended; ada's), and a shell in a
/// terminal whose bridge was cut when the old `moord` stopped (live; ada's, long enough to page).
fn previous_release_data() -> OldData {
    let hour_ago = now_ms() - 3_600_000;
    OldData {
        users: vec!["ada", "bob"],
        users_created_at: hour_ago - 60_000,
        sessions: vec![
            lines_session(hour_ago),
            claude_session(hour_ago + 600_000),
            pty_session(hour_ago + 1_200_000),
        ],
    }
}

fn lines_session(t: i64) -> OldSession {
    let mut log = Log::connected(t, agent_info("lines", &["cargo", "build"], "/home/bob/app"));
    log.bridge(
        kinds::AGENT_START,
        json!({ "command": ["cargo", "build"], "cwd": "/home/bob/app", "pid": 4242, "adapter": "lines" }),
    );
    for i in 1..=40 {
        let stream = if i % 10 == 0 { "stderr" } else { "stdout" };
        let text = format!("   Compiling crate {i} of 40");
        log.bridge(
            kinds::AGENT_OUTPUT,
            json!({ "stream": stream, "text": text }),
        );
    }
    let input = log.input("bob", "lines-1", kinds::INPUT_TEXT, json!({ "text": "y" }));
    log.push(
        AUTHOR_SERVER,
        kinds::INPUT_FAILED,
        json!({ "input_seq": input, "reason": "the agent closed its input" }),
        Key::Receipt(input),
    );
    log.bridge(kinds::AGENT_EXIT, json!({ "code": 101, "signal": null }));
    log.server(
        kinds::SESSION_ENDED,
        json!({ "reason": "the agent exited" }),
    );
    log.into_session(
        "old-lines-build",
        vec![("bob", Role::Owner), ("ada", Role::Viewer)],
    )
}

fn claude_session(t: i64) -> OldSession {
    let cwd = "/home/ada/project";
    let (summary, manifest) = old_checkpoint(t + 5_000);
    let edit = json!({ "file_path": "src/lib.rs", "old_string": "a - b", "new_string": "a + b" });
    let mut log = Log::connected(t, agent_info("claude", &["claude"], cwd));
    log.bridge(
        kinds::AGENT_START,
        json!({
            "command": ["claude", "-p", "--output-format", "stream-json"], "cwd": cwd,
            "pid": 777, "adapter": "claude",
            "capabilities": { "turns": true, "output_activity": true, "terminal_wait": false },
        }),
    );
    log.bridge(
        kinds::AGENT_SESSION,
        json!({
            "agent_session_id": "c0ffee00-0000-4000-8000-000000000001", "model": "claude-sonnet",
            "cwd": cwd, "tools": ["Read", "Edit", "Bash"], "permission_mode": "default",
            "version": "2.1.0",
        }),
    );
    let prompt = log.input(
        "ada",
        "claude-1",
        kinds::INPUT_TEXT,
        json!({ "text": "Fix the failing test in src/lib.rs" }),
    );
    log.delivered_and_applied(prompt);
    for (index, text) in ["Let me ", "look at ", "the test."].into_iter().enumerate() {
        log.bridge(
            kinds::AGENT_TEXT_DELTA,
            json!({ "message_id": "msg_1", "index": index, "text": text }),
        );
    }
    log.bridge(
        kinds::AGENT_TEXT,
        json!({ "message_id": "msg_1", "text": "Let me look at the test." }),
    );
    log.bridge(
        kinds::AGENT_TOOL_USE,
        json!({ "id": "toolu_1", "name": "Edit", "path": "src/lib.rs", "input": edit }),
    );
    log.bridge(
        kinds::AGENT_PERMISSION_REQUEST,
        json!({
            "request_id": "perm-1", "tool_name": "Edit", "tool_use_id": "toolu_1",
            "input": edit, "path": "src/lib.rs", "description": null,
        }),
    );
    let answer = log.input(
        "ada",
        "claude-2",
        kinds::INPUT_PERMISSION,
        json!({ "request_id": "perm-1", "decision": "allow" }),
    );
    log.delivered_and_applied(answer);
    log.bridge(
        kinds::AGENT_PERMISSION_RESOLVED,
        json!({ "request_id": "perm-1", "decision": "allow", "by": "user:ada", "input_seq": answer, "reason": null }),
    );
    log.bridge(
        kinds::AGENT_TOOL_RESULT,
        json!({
            "tool_use_id": "toolu_1", "is_error": false,
            "summary": "The file src/lib.rs has been updated.", "bytes": 37, "truncated": false,
        }),
    );
    log.bridge(
        kinds::CHECKPOINT_CREATED,
        serde_json::to_value(&summary).expect("encode the checkpoint summary"),
    );
    log.bridge(
        kinds::AGENT_TEXT,
        json!({ "message_id": "msg_2", "text": "Fixed: `add` subtracted." }),
    );
    log.bridge(
        kinds::AGENT_RESULT,
        json!({
            "subtype": "success", "is_error": false, "duration_ms": 8123, "num_turns": 3,
            "cost_usd": 0.0123, "result": "Fixed: `add` subtracted.",
            "agent_session_id": "c0ffee00-0000-4000-8000-000000000001",
        }),
    );
    log.bridge(kinds::AGENT_EXIT, json!({ "code": 0, "signal": null }));
    log.server(
        kinds::SESSION_ENDED,
        json!({ "reason": "the agent exited" }),
    );
    OldSession {
        // mid-turn: the state fold resumes from a busy snapshot
        snapshot_at: 12,
        checkpoints: vec![(summary, manifest)],
        ..log.into_session("old-claude-turn", vec![("ada", Role::Owner)])
    }
}

/// A checkpoint of one modified file, as the bridge uploaded it.
fn old_checkpoint(at: i64) -> (CheckpointSummary, CheckpointManifest) {
    let (base, tree, commit) = ("1".repeat(40), "2".repeat(40), "3".repeat(40));
    let diffstat = json!({ "files": 1, "insertions": 1, "deletions": 1 });
    let summary = json!({
        "id": "00c0ffee00c0ffee", "created_at": at, "reason": "tool", "base": base,
        "branch": "main", "commit": commit, "repo_state": null, "diffstat": diffstat,
        "files": [{ "path": "src/lib.rs", "status": "modified" }], "files_total": 1,
        "skipped": [], "skipped_total": 0,
    });
    let manifest = json!({
        "id": "00c0ffee00c0ffee", "created_at": at, "reason": "tool", "base": base,
        "branch": "main", "tree": tree, "commit": commit,
        "commit_object": format!("tree {tree}\nparent {base}\n\nmoor checkpoint\n"),
        "object_format": "sha1", "repo_state": null, "work_tree": "/home/ada/project",
        "files": [{
            "path": "src/lib.rs", "status": "modified", "old_mode": "100644", "mode": "100644",
            "old_oid": "4".repeat(40), "oid": "5".repeat(40), "sha256": "6".repeat(64),
            "size": 120, "insertions": 1, "deletions": 1,
        }],
        "skipped": [], "diffstat": diffstat,
        "patch": { "sha256": "7".repeat(64), "size": 310 },
    });
    (
        serde_json::from_value(summary).expect("a checkpoint summary"),
        serde_json::from_value(manifest).expect("a checkpoint manifest"),
    )
}

fn pty_session(t: i64) -> OldSession {
    let mut log = Log::connected(t, agent_info("pty", &["bash"], "/home/ada"));
    log.bridge(
        kinds::AGENT_START,
        json!({
            "command": ["bash"], "cwd": "/home/ada", "pid": 999, "adapter": "pty",
            "cols": 80, "rows": 24,
            "capabilities": { "turns": false, "output_activity": true, "terminal_wait": true },
        }),
    );
    log.bridge(
        kinds::AGENT_PTY_RESIZE,
        json!({ "cols": 80, "rows": 24, "source": "start" }),
    );
    let keys = log.input(
        "ada",
        "pty-1",
        kinds::INPUT_KEYS,
        json!({ "text": "seq 300\r" }),
    );
    log.delivered_and_applied(keys);
    log.bridge(
        kinds::AGENT_TERMINAL,
        json!({ "waiting": false, "foreground": "seq", "pid": 1234 }),
    );
    for i in 1..=300 {
        log.bridge(kinds::AGENT_PTY_OUTPUT, pty(&format!("{i}\r\n")));
    }
    log.bridge(
        kinds::AGENT_TERMINAL,
        json!({ "waiting": true, "foreground": "bash", "pid": 999 }),
    );
    let resize = log.input(
        "ada",
        "pty-2",
        kinds::INPUT_RESIZE,
        json!({ "cols": 120, "rows": 40 }),
    );
    log.delivered_and_applied(resize);
    log.bridge(
        kinds::AGENT_PTY_RESIZE,
        json!({ "cols": 120, "rows": 40, "source": "remote" }),
    );
    log.server(
        kinds::BRIDGE_DISCONNECTED,
        json!({ "connection": 1, "reason": "moord is shutting down", "close_code": 1001 }),
    );
    OldSession {
        snapshot_at: 200,
        ..log.into_session("old-pty-shell", vec![("ada", Role::Owner)])
    }
}

/// Writes `data` into `db` with SQL that fits the previous migration set.
async fn write_previous_release_data(db: &OldDb, data: &OldData) {
    for user in &data.users {
        write_row!(db, format!("user {user}"),
            sqlite: "INSERT INTO users (name, password_hash, created_at) VALUES ($1, $2, $3)",
            postgres: "INSERT INTO users (name, password_hash, created_at) VALUES ($1, $2, $3)",
            [*user, OLD_PASSWORD_HASH, data.users_created_at]);
    }
    for s in &data.sessions {
        write_session(db, s).await;
    }
}

async fn write_session(db: &OldDb, s: &OldSession) {
    let id = s.id.to_string();
    let agent = serde_json::to_string(&s.agent).expect("encode the agent");
    write_row!(db, format!("session {}", s.name),
        sqlite: "INSERT INTO sessions (id, name, created_at, head_seq, last_ts, ended_at, agent) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
        postgres: "INSERT INTO sessions (id, name, created_at, head_seq, last_ts, ended_at, agent) \
                   VALUES ($1::uuid, $2, $3, $4, $5, $6, $7)",
        [id.clone(), s.name, s.created_at, s.head() as i64, s.last_ts(), s.ended_at(), agent]);
    write_row!(db, format!("the producer of {}", s.name),
        sqlite: "INSERT INTO producers (session_pk, producer_id, last_seq) \
                 VALUES ((SELECT pk FROM sessions WHERE id = $1), $2, $3)",
        postgres: "INSERT INTO producers (session_id, producer_id, last_seq) \
                   VALUES ($1::uuid, $2::uuid, $3)",
        [id.clone(), s.producer.to_string(), s.producer_mark() as i64]);
    for row in &s.rows {
        let (producer, producer_seq, client_msg_id, ref_seq) = match row.key {
            Key::Producer(n) => (Some(s.producer.to_string()), Some(n as i64), None, None),
            Key::Input(msg) => (None, None, Some(msg), None),
            Key::Receipt(input) => (None, None, None, Some(input.0 as i64)),
            Key::None => (None, None, None, None),
        };
        let e = &row.entry;
        write_row!(db, format!("entry {} of {}", e.seq, s.name),
            sqlite: "INSERT INTO entries (session_pk, seq, ts, kind, author, payload, producer_pk, \
                     producer_seq, client_msg_id, ref_seq) \
                     VALUES ((SELECT pk FROM sessions WHERE id = $1), $2, $3, $4, $5, $6, \
                     (SELECT p.pk FROM producers p JOIN sessions s ON s.pk = p.session_pk \
                      WHERE s.id = $1 AND p.producer_id = $7), $8, $9, $10)",
            postgres: "INSERT INTO entries (session_id, seq, ts, kind, author, payload, producer_id, \
                       producer_seq, client_msg_id, ref_seq) \
                       VALUES ($1::uuid, $2, $3, $4, $5, $6, $7::uuid, $8, $9, $10)",
            [id.clone(), e.seq.0 as i64, e.ts, e.kind.clone(), e.author.clone(),
             e.payload.to_string(), producer, producer_seq, client_msg_id, ref_seq]);
    }
    if s.snapshot_at > 0 {
        let state = SessionState::from_entries(&s.entries()[..s.snapshot_at]);
        let json = serde_json::to_string(&state).expect("encode the state");
        write_row!(db, format!("the state snapshot of {}", s.name),
            sqlite: "INSERT INTO state_snapshots (session_pk, head_seq, state) \
                     VALUES ((SELECT pk FROM sessions WHERE id = $1), $2, $3)",
            postgres: "INSERT INTO state_snapshots (session_id, head_seq, state) \
                       VALUES ($1::uuid, $2, $3)",
            [id.clone(), state.head.0 as i64, json]);
    }
    for (summary, manifest) in &s.checkpoints {
        let summary = serde_json::to_string(summary).expect("encode the summary");
        let manifest_json = serde_json::to_string(manifest).expect("encode the manifest");
        write_row!(db, format!("checkpoint {}", manifest.id),
            sqlite: "INSERT INTO checkpoints (session_pk, id, created_at, summary, manifest) \
                     VALUES ((SELECT pk FROM sessions WHERE id = $1), $2, $3, $4, $5)",
            postgres: "INSERT INTO checkpoints (session_id, id, created_at, summary, manifest) \
                       VALUES ($1::uuid, $2, $3, $4, $5)",
            [id.clone(), manifest.id.clone(), manifest.created_at, summary, manifest_json]);
        for blob in manifest.blobs() {
            write_row!(db, format!("blob {} of checkpoint {}", blob.sha256, manifest.id),
                sqlite: "INSERT INTO checkpoint_blobs (sha256, session_pk, checkpoint_id) \
                         VALUES ($2, (SELECT pk FROM sessions WHERE id = $1), $3)",
                postgres: "INSERT INTO checkpoint_blobs (sha256, session_id, checkpoint_id) \
                           VALUES ($2, $1::uuid, $3)",
                [id.clone(), blob.sha256, manifest.id.clone()]);
        }
    }
    for (who, role) in &s.members {
        write_row!(db, format!("{who}'s role on {}", s.name),
            sqlite: "INSERT INTO session_members (session_id, principal, role) VALUES ($1, $2, $3)",
            postgres: "INSERT INTO session_members (session_id, principal, role) VALUES ($1, $2, $3)",
            [id.clone(), *who, role.as_str()]);
    }
}

/// `GET path` as `api`'s caller, decoded; panics unless 200.
async fn get_json<T: serde::de::DeserializeOwned>(api: &Api, path: &str) -> T {
    let r = api.authed(Method::GET, path, None).await;
    assert_eq!(r.status, StatusCode::OK, "GET {path}: {:?}", r.body);
    serde_json::from_value(r.body.clone())
        .unwrap_or_else(|e| panic!("GET {path}: unexpected body {:?}: {e}", r.body))
}

/// Reads everything in `data` back from `server`: ready (migrated), the session lists of the
/// administrator and of an old account logging in with its old password, every log page by
/// page and as a viewer replays it, each entry still decoding, the derived state, and the
/// checkpoints.
async fn assert_serves_every_session(server: &TestServer, data: &OldData) {
    // Ready once migrated and, on Postgres, listening to the other nodes' notices, which the
    // node starts just after it starts serving: wait for it.
    let ready = || async {
        let r = server.api().raw(Method::GET, "/readyz", None, None).await;
        r.status == StatusCode::OK
    };
    moor_e2e::util::eventually(WAIT, "/readyz to answer 200", ready).await;

    let mut newest_first: Vec<&OldSession> = data.sessions.iter().collect();
    newest_first.sort_by_key(|s| Reverse(s.last_ts()));
    let listed: Vec<Listed> = server
        .api()
        .sessions()
        .await
        .iter()
        .map(Listed::from)
        .collect();
    let expected: Vec<Listed> = newest_first.iter().map(|s| s.listed(Role::Owner)).collect();
    assert_eq!(listed, expected, "the administrator's list");

    let login = server.api().login("ada", OLD_PASSWORD).await;
    let token = login["access_token"].as_str().expect("an access token");
    let ada = Api::new(server.url(), token);
    let listed: Vec<Listed> = ada.sessions().await.iter().map(Listed::from).collect();
    let expected: Vec<Listed> = newest_first
        .iter()
        .filter_map(|s| s.role_of("ada").map(|role| s.listed(role)))
        .collect();
    assert_eq!(listed, expected, "ada's list");

    for s in &data.sessions {
        let entries = s.entries();
        let mut after = 0;
        for expected in entries.chunks(PAGE) {
            let page = ada.entries_after(s.id, after, PAGE as u64).await;
            assert_eq!(page.entries, expected, "{} after {after}", s.name);
            after += expected.len() as u64;
            assert_eq!(page.head_seq, Seq(s.head()), "{} after {after}", s.name);
            assert_eq!(page.has_more, after < s.head(), "{} after {after}", s.name);
            assert!(page.compacted.is_none(), "{} after {after}", s.name);
        }
        for e in &entries {
            assert!(e.body().is_ok(), "{} {e:?}: {:?}", s.name, e.body());
        }
        assert_eq!(
            server.replayed(s.id, s.head()).await,
            entries,
            "{} replayed",
            s.name
        );

        let info = ada
            .session(&s.id.to_string())
            .await
            .unwrap_or_else(|| panic!("{} is found", s.name));
        assert_eq!(
            info.state,
            Some(SessionState::from_entries(&entries)),
            "{}",
            s.name
        );

        let path = format!("/api/v1/sessions/{}/checkpoints", s.id);
        let listed: Vec<CheckpointSummary> = get_json(&ada, &path).await;
        let newest_first: Vec<CheckpointSummary> =
            s.checkpoints.iter().rev().map(|(c, _)| c.clone()).collect();
        assert_eq!(listed, newest_first, "{}'s checkpoints", s.name);
        for (_, manifest) in &s.checkpoints {
            let path = format!("/api/v1/checkpoints/{}", manifest.id);
            let stored: StoredCheckpoint = get_json(&ada, &path).await;
            let expected = StoredCheckpoint {
                session: s.id,
                manifest: manifest.clone(),
            };
            assert_eq!(stored, expected);
        }
    }
}

/// The bridge of the live session comes back with its producer id: it is welcomed with the
/// stored mark; what it replays at or below the mark is acknowledged, not stored again; what
/// comes after is stored once.
async fn assert_bridge_resumes_from_its_mark(server: &TestServer, s: &OldSession) {
    let mark = s.producer_mark();
    let last_input = s
        .rows
        .iter()
        .filter(|r| matches!(r.key, Key::Input(_)))
        .map(|r| r.entry.seq)
        .max()
        .unwrap_or(Seq::ZERO);
    let mut bridge = RawBridge::connect(server.addr(), Some(server.token()))
        .await
        .expect("bridge socket");
    let mut hello = RawBridge::hello_frame(s.name, s.producer);
    if let BridgeToServer::Hello(h) = &mut hello {
        h.last_applied_input = last_input;
        h.agent = s.agent.clone();
    }
    bridge.send(&hello).await;
    let welcome = match bridge.recv(WAIT).await {
        Some(ServerToBridge::Welcome(w)) => w,
        other => panic!("expected a welcome, got {other:?}"),
    };
    assert_eq!((welcome.session_id, welcome.producer_mark), (s.id, mark));
    assert_eq!(welcome.pending_inputs, Vec::<Entry>::new());

    // the last three entries it sent, again (as after a lost ack), then a new one
    let replayed = s
        .rows
        .iter()
        .filter_map(|r| match r.key {
            Key::Producer(n) if n + 3 > mark => Some(NewEntry {
                producer_seq: n,
                ts: now_ms(),
                kind: r.entry.kind.clone(),
                payload: r.entry.payload.clone(),
            }),
            _ => None,
        })
        .collect();
    bridge
        .send(&BridgeToServer::Entries { entries: replayed })
        .await;
    bridge.wait_ack(mark, WAIT).await;
    let new = NewEntry {
        producer_seq: mark + 1,
        ts: now_ms(),
        kind: kinds::AGENT_PTY_OUTPUT.to_owned(),
        payload: pty("typed after the upgrade\r\n"),
    };
    bridge
        .send(&BridgeToServer::Entries {
            entries: vec![new.clone()],
        })
        .await;
    bridge.wait_ack(mark + 1, WAIT).await;

    let old = s.entries();
    let log = server.api().entries_all(s.id).await;
    assert_eq!(&log[..old.len()], &old[..], "the old log is unchanged");
    let added: Vec<(&str, &str)> = log[old.len()..]
        .iter()
        .map(|e| (e.kind.as_str(), e.author.as_str()))
        .collect();
    assert_eq!(
        added,
        [
            (kinds::BRIDGE_CONNECTED, AUTHOR_SERVER),
            (kinds::AGENT_PTY_OUTPUT, AUTHOR_BRIDGE)
        ],
        "only the new connection and the new entry were stored"
    );
    assert_eq!(log.last().map(|e| &e.payload), Some(&new.payload));
}

#[tokio::test]
async fn a_sqlite_database_of_the_previous_release_is_migrated_and_serves_every_session() {
    // arrange: a SQLite file with the previous migration set and its data
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("moor.db");
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::new()
                .filename(&file)
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Delete),
        )
        .await
        .expect("create the old database");
    let old = OldDb::Sqlite(pool);
    old.migrate().await;
    let data = previous_release_data();
    write_previous_release_data(&old, &data).await;
    old.close().await;
    let db = std::fs::read(&file).expect("read the old database");

    // act: this release starts on it
    let server = TestServer::start(ServerOpts::new().data_file("moor.db", db)).await;

    // assert
    assert_serves_every_session(&server, &data).await;
    assert_bridge_resumes_from_its_mark(&server, data.live()).await;
}

#[tokio::test]
async fn a_postgres_database_of_the_previous_release_is_migrated_and_serves_every_session() {
    // arrange: a fresh Postgres database with the previous migration set and its data
    let Some(db) = TestDb::create().await else {
        return;
    };
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(db.url())
        .await
        .expect("connect to the test database");
    let old = OldDb::Postgres(pool);
    old.migrate().await;
    let data = previous_release_data();
    write_previous_release_data(&old, &data).await;
    old.close().await;

    // act: this release starts on it
    let server = TestServer::start(db.node_opts("a", "upgrade-test-admin-token")).await;

    // assert
    assert_serves_every_session(&server, &data).await;
    assert_bridge_resumes_from_its_mark(&server, data.live()).await;
}

#[tokio::test]
async fn a_bridge_of_another_protocol_version_is_told_which_side_to_upgrade() {
    // arrange
    let server = TestServer::start(ServerOpts::new()).await;
    for (version, upgrade) in [
        (PROTOCOL_VERSION - 1, "upgrade moor to this moord's release"),
        (PROTOCOL_VERSION + 1, "upgrade moord"),
    ] {
        let mut bridge = RawBridge::connect(server.addr(), Some(server.token()))
            .await
            .expect("bridge socket");
        let mut hello = RawBridge::hello_frame("versions", ProducerId::new());
        if let BridgeToServer::Hello(h) = &mut hello {
            h.version = version;
        }

        // act
        bridge.send(&hello).await;
        let closed = bridge.expect_close(WAIT).await;

        // assert
        assert_eq!(closed.code, close::VERSION_MISMATCH, "{closed:?}");
        assert!(
            closed.reason.contains(&format!(
                "moor speaks protocol {version}, moord speaks {PROTOCOL_VERSION}"
            )) && closed.reason.contains(upgrade),
            "{closed:?}"
        );
    }
    assert!(server.api().session("versions").await.is_none());
}

/// A `moord` of a newer release, as far as `moor` can tell: it welcomes with its own protocol
/// version. Serves one connection.
async fn newer_moord() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("accept");
        let mut ws = tokio_tungstenite::accept_async(tcp).await.expect("upgrade");
        while let Some(Ok(msg)) = ws.next().await {
            let Ok(text) = msg.to_text() else { continue };
            let Ok(BridgeToServer::Hello(hello)) = serde_json::from_str(text) else {
                continue;
            };
            let welcome = ServerToBridge::Welcome(Welcome {
                version: PROTOCOL_VERSION + 1,
                session_id: SessionId::new(),
                session_name: hello.session,
                producer_mark: 0,
                pending_inputs: Vec::new(),
                heartbeat_interval_ms: 10_000,
                idle_timeout_ms: 30_000,
                max_lifetime_ms: 0,
                max_frame_bytes: 0,
                web_url: String::new(),
            });
            let text = serde_json::to_string(&welcome).expect("welcome");
            let _ = ws
                .send(tokio_tungstenite::tungstenite::Message::Text(text.into()))
                .await;
        }
    });
    (addr, task)
}

#[tokio::test]
async fn moor_tells_its_user_to_upgrade_when_moord_speaks_a_newer_protocol() {
    // arrange
    let (addr, server) = newer_moord().await;
    let state = tempfile::tempdir().expect("state dir");

    // act: a real moor run against it
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(bin_path("moor"))
            .args(["run", "--server", &format!("http://{addr}"), "--token", "t"])
            .args(["--session", "versions", "--state-dir"])
            .arg(state.path())
            .arg("--")
            .arg(bin_path("moor-test-agent"))
            .args(["count", "1"])
            .env("MOOR_CONFIG_DIR", state.path())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("moor stopped in time")
    .expect("moor ran");

    // assert: it stops for good, saying to upgrade moor
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "moord speaks protocol {}, this moor speaks {PROTOCOL_VERSION}: upgrade moor",
            PROTOCOL_VERSION + 1
        )),
        "{stderr}"
    );
    server.abort();
}
