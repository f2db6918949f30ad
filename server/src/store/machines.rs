//! [`MachineStore`]: machines running `moor host` and the sessions they were asked to start,
//! written once for both engines.

use async_trait::async_trait;

use super::StoreResult;

/// Most machines one owner registers.
pub const MAX_MACHINES_PER_OWNER: i64 = 32;
/// Most sessions a machine view lists (the newest).
pub const MAX_LISTED_SESSIONS: i64 = 50;

/// A machine as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineRow {
    /// Its id.
    pub id: String,
    /// The principal that registered it (and owns its log session).
    pub owner: String,
    /// Its name, unique per owner.
    pub name: String,
    /// Its operating system.
    pub os: String,
    /// Its `moor` version.
    pub version: String,
    /// What it offers: `{"projects": [...], "agents": [...]}` as JSON.
    pub offers: String,
    /// Most sessions it runs at once.
    pub max_sessions: i64,
    /// The name of its own session (its action log).
    pub log_session: String,
    /// When it last registered (ms).
    pub registered_at: i64,
}

/// A session a machine was asked to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineSessionRow {
    /// The machine.
    pub machine_id: String,
    /// The session's name.
    pub name: String,
    /// The project's name.
    pub project: String,
    /// The agent's name.
    pub agent: String,
    /// When it was asked for (ms).
    pub created_at: i64,
}

/// The machines and their sessions.
#[async_trait]
pub trait MachineStore: Send + Sync + std::fmt::Debug {
    /// Stores `row`, or updates the machine `row.owner` already registered under `row.name`
    /// (keeping its id and log session); the machine as stored. `Conflict` when the owner
    /// already has [`MAX_MACHINES_PER_OWNER`] other machines.
    async fn register_machine(&self, row: &MachineRow) -> StoreResult<MachineRow>;

    /// The machine `id`.
    async fn machine(&self, id: &str) -> StoreResult<Option<MachineRow>>;

    /// The machines of `owner` (all, for `None`), by name; at most 1,000.
    async fn machines(&self, owner: Option<&str>) -> StoreResult<Vec<MachineRow>>;

    /// Records that `row.machine_id` was asked to start `row.name`; an existing row is kept
    /// and returned as it is.
    async fn add_machine_session(&self, row: &MachineSessionRow) -> StoreResult<MachineSessionRow>;

    /// The session `name` of machine `machine_id`.
    async fn machine_session(
        &self,
        machine_id: &str,
        name: &str,
    ) -> StoreResult<Option<MachineSessionRow>>;

    /// The newest [`MAX_LISTED_SESSIONS`] sessions of machine `machine_id`, newest first.
    async fn machine_sessions(&self, machine_id: &str) -> StoreResult<Vec<MachineSessionRow>>;
}

/// Implements [`MachineStore`] for `$store`, a store over `$db` with an inherent `writes()`
/// pool.
macro_rules! machine_store {
    ($store:ident, $db:ty) => {
        mod machine_store {
            use sqlx::Row;

            use super::$store;
            use $crate::store::errors::db_error;
            use $crate::store::machines::{
                MachineRow, MachineSessionRow, MachineStore, MAX_LISTED_SESSIONS,
                MAX_MACHINES_PER_OWNER,
            };
            use $crate::store::{StoreError, StoreResult};

            const COLUMNS: &str =
                "id, owner, name, os, version, offers, max_sessions, log_session, registered_at";
            const SESSION_COLUMNS: &str = "machine_id, name, project, agent, created_at";

            fn machine(row: &<$db as sqlx::Database>::Row) -> StoreResult<MachineRow> {
                Ok(MachineRow {
                    id: row.try_get("id").map_err(db_error)?,
                    owner: row.try_get("owner").map_err(db_error)?,
                    name: row.try_get("name").map_err(db_error)?,
                    os: row.try_get("os").map_err(db_error)?,
                    version: row.try_get("version").map_err(db_error)?,
                    offers: row.try_get("offers").map_err(db_error)?,
                    max_sessions: row.try_get("max_sessions").map_err(db_error)?,
                    log_session: row.try_get("log_session").map_err(db_error)?,
                    registered_at: row.try_get("registered_at").map_err(db_error)?,
                })
            }

            fn session(row: &<$db as sqlx::Database>::Row) -> StoreResult<MachineSessionRow> {
                Ok(MachineSessionRow {
                    machine_id: row.try_get("machine_id").map_err(db_error)?,
                    name: row.try_get("name").map_err(db_error)?,
                    project: row.try_get("project").map_err(db_error)?,
                    agent: row.try_get("agent").map_err(db_error)?,
                    created_at: row.try_get("created_at").map_err(db_error)?,
                })
            }

            #[async_trait::async_trait]
            impl MachineStore for $store {
                async fn register_machine(&self, m: &MachineRow) -> StoreResult<MachineRow> {
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    let others: i64 = sqlx::query_scalar(
                        "SELECT COUNT(*) FROM machines WHERE owner = $1 AND name <> $2",
                    )
                    .bind(&m.owner)
                    .bind(&m.name)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    if others >= MAX_MACHINES_PER_OWNER {
                        return Err(StoreError::Conflict("too many machines for this owner"));
                    }
                    sqlx::query(
                        "INSERT INTO machines (id, owner, name, os, version, offers, \
                         max_sessions, log_session, registered_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                         ON CONFLICT (owner, name) DO UPDATE SET os = excluded.os, \
                         version = excluded.version, offers = excluded.offers, \
                         max_sessions = excluded.max_sessions, \
                         registered_at = excluded.registered_at",
                    )
                    .bind(&m.id)
                    .bind(&m.owner)
                    .bind(&m.name)
                    .bind(&m.os)
                    .bind(&m.version)
                    .bind(&m.offers)
                    .bind(m.max_sessions)
                    .bind(&m.log_session)
                    .bind(m.registered_at)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    let row = sqlx::query(&format!(
                        "SELECT {COLUMNS} FROM machines WHERE owner = $1 AND name = $2"
                    ))
                    .bind(&m.owner)
                    .bind(&m.name)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    let stored = machine(&row)?;
                    tx.commit().await.map_err(db_error)?;
                    Ok(stored)
                }

                async fn machine(&self, id: &str) -> StoreResult<Option<MachineRow>> {
                    let row = sqlx::query(&format!("SELECT {COLUMNS} FROM machines WHERE id = $1"))
                        .bind(id)
                        .fetch_optional(self.writes())
                        .await
                        .map_err(db_error)?;
                    row.as_ref().map(machine).transpose()
                }

                async fn machines(&self, owner: Option<&str>) -> StoreResult<Vec<MachineRow>> {
                    let rows = sqlx::query(&format!(
                        "SELECT {COLUMNS} FROM machines WHERE ($1 IS NULL OR owner = $1) \
                         ORDER BY name, id LIMIT 1000"
                    ))
                    .bind(owner)
                    .fetch_all(self.writes())
                    .await
                    .map_err(db_error)?;
                    rows.iter().map(machine).collect()
                }

                async fn add_machine_session(
                    &self,
                    s: &MachineSessionRow,
                ) -> StoreResult<MachineSessionRow> {
                    sqlx::query(
                        "INSERT INTO machine_sessions \
                         (machine_id, name, project, agent, created_at) \
                         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                    )
                    .bind(&s.machine_id)
                    .bind(&s.name)
                    .bind(&s.project)
                    .bind(&s.agent)
                    .bind(s.created_at)
                    .execute(self.writes())
                    .await
                    .map_err(db_error)?;
                    self.machine_session(&s.machine_id, &s.name)
                        .await?
                        .ok_or(StoreError::NotFound)
                }

                async fn machine_session(
                    &self,
                    machine_id: &str,
                    name: &str,
                ) -> StoreResult<Option<MachineSessionRow>> {
                    let row = sqlx::query(&format!(
                        "SELECT {SESSION_COLUMNS} FROM machine_sessions \
                         WHERE machine_id = $1 AND name = $2"
                    ))
                    .bind(machine_id)
                    .bind(name)
                    .fetch_optional(self.writes())
                    .await
                    .map_err(db_error)?;
                    row.as_ref().map(session).transpose()
                }

                async fn machine_sessions(
                    &self,
                    machine_id: &str,
                ) -> StoreResult<Vec<MachineSessionRow>> {
                    let rows = sqlx::query(&format!(
                        "SELECT {SESSION_COLUMNS} FROM machine_sessions WHERE machine_id = $1 \
                         ORDER BY created_at DESC, name LIMIT $2"
                    ))
                    .bind(machine_id)
                    .bind(MAX_LISTED_SESSIONS)
                    .fetch_all(self.writes())
                    .await
                    .map_err(db_error)?;
                    rows.iter().map(session).collect()
                }
            }
        }
    };
}
pub(crate) use machine_store;
