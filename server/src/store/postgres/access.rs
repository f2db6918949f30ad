//! The Postgres side of accounts, refresh-token families and session roles. Secrets arrive
//! hashed; nothing here sees a password or a token.
//!
//! Several nodes may race on the same rows: a refresh token is rotated with its row locked
//! (`FOR UPDATE`), so presenting it twice at once rotates it once and the second is reuse; a
//! session is claimed with its row locked, so it gets one owner.

use anyhow::Context;
use moor_protocol::SessionId;
use sqlx::{Postgres, Row, Transaction};
use uuid::Uuid;

use super::{other, PgStore};
use crate::store::{
    FamilyUser, MemberRow, RefreshOutcome, RefreshRow, StoreError, StoreResult, UserRow,
};

/// Advisory lock key serialising first-administrator setups across nodes.
const FIRST_ADMIN_LOCK: i64 = 0x6d6f_6f72_0001;

impl PgStore {
    pub(super) async fn insert_user(
        &self,
        name: &str,
        hash: &str,
        admin: bool,
        at: i64,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO users (name, password_hash, created_at, admin_since) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(name)
        .bind(hash)
        .bind(at)
        .bind(admin.then_some(at))
        .execute(&self.pool)
        .await
        .map_err(other)?;
        Ok(())
    }

    pub(super) async fn insert_first_admin(
        &self,
        name: &str,
        hash: &str,
        at: i64,
    ) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await.map_err(other)?;
        // Under READ COMMITTED two nodes' `NOT EXISTS` could both pass: a transaction-scoped
        // advisory lock makes the first setup on any node the only one.
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(FIRST_ADMIN_LOCK)
            .execute(&mut *tx)
            .await
            .map_err(other)?;
        let n = sqlx::query(
            "INSERT INTO users (name, password_hash, created_at, admin_since) \
             SELECT $1, $2, $3, $3 WHERE NOT EXISTS \
             (SELECT 1 FROM users WHERE admin_since IS NOT NULL)",
        )
        .bind(name)
        .bind(hash)
        .bind(at)
        .execute(&mut *tx)
        .await
        .map_err(other)?
        .rows_affected();
        tx.commit().await.map_err(other)?;
        Ok(n == 1)
    }

    pub(super) async fn any_admin(&self) -> StoreResult<bool> {
        let row = sqlx::query("SELECT 1 FROM users WHERE admin_since IS NOT NULL LIMIT 1")
            .fetch_optional(&self.pool)
            .await
            .map_err(other)?;
        Ok(row.is_some())
    }

    pub(super) async fn user_row(&self, name: &str) -> StoreResult<UserRow> {
        let row = sqlx::query(
            "SELECT name, password_hash, created_at, revoked_at, admin_since FROM users \
             WHERE name = $1",
        )
        .bind(name)
        .fetch_one(&self.pool)
        .await
        .map_err(other)?;
        Ok(UserRow {
            name: row.try_get("name").map_err(other)?,
            password_hash: row.try_get("password_hash").map_err(other)?,
            created_at: row.try_get("created_at").map_err(other)?,
            revoked_at: row.try_get("revoked_at").map_err(other)?,
            admin: row
                .try_get::<Option<i64>, _>("admin_since")
                .map_err(other)?
                .is_some(),
        })
    }

    pub(super) async fn revoke_user_rows(&self, name: &str, at: i64) -> StoreResult<()> {
        let mut tx = self.pool.begin().await.map_err(other)?;
        let n =
            sqlx::query("UPDATE users SET revoked_at = COALESCE(revoked_at, $1) WHERE name = $2")
                .bind(at)
                .bind(name)
                .execute(&mut *tx)
                .await
                .map_err(other)?
                .rows_affected();
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        sqlx::query(
            "UPDATE token_families SET revoked_at = COALESCE(revoked_at, $1) WHERE user_name = $2",
        )
        .bind(at)
        .bind(name)
        .execute(&mut *tx)
        .await
        .map_err(other)?;
        tx.commit().await.map_err(other)
    }

    pub(super) async fn insert_family(&self, family: &str, first: &RefreshRow) -> StoreResult<()> {
        let mut tx = self.pool.begin().await.map_err(other)?;
        sqlx::query(
            "INSERT INTO token_families (family, user_name, created_at) VALUES ($1, $2, $3)",
        )
        .bind(family)
        .bind(&first.user)
        .bind(first.created_at)
        .execute(&mut *tx)
        .await
        .map_err(other)?;
        insert_refresh(&mut tx, family, first).await?;
        tx.commit().await.map_err(other)
    }

    pub(super) async fn rotate(
        &self,
        old_hash: &str,
        next: &RefreshRow,
        at: i64,
    ) -> StoreResult<RefreshOutcome> {
        let mut tx = self.pool.begin().await.map_err(other)?;
        // The token's row stays locked until commit: a concurrent rotation of the same token
        // (on this node or another) waits, then sees it used.
        let row = sqlx::query(
            "SELECT t.family, t.user_name, t.expires_at, t.used_at, f.revoked_at AS fam_revoked, \
                    u.revoked_at AS user_revoked \
             FROM refresh_tokens t JOIN token_families f ON f.family = t.family \
             JOIN users u ON u.name = t.user_name WHERE t.token_hash = $1 FOR UPDATE OF t",
        )
        .bind(old_hash)
        .fetch_optional(&mut *tx)
        .await
        .map_err(other)?;
        let Some(row) = row else {
            return Ok(RefreshOutcome::Invalid);
        };
        let family: String = row.try_get("family").map_err(other)?;
        let user: String = row.try_get("user_name").map_err(other)?;
        let used: Option<i64> = row.try_get("used_at").map_err(other)?;
        let fam_revoked: Option<i64> = row.try_get("fam_revoked").map_err(other)?;
        let user_revoked: Option<i64> = row.try_get("user_revoked").map_err(other)?;
        if used.is_some() || fam_revoked.is_some() || user_revoked.is_some() {
            sqlx::query(
                "UPDATE token_families SET revoked_at = COALESCE(revoked_at, $1) WHERE family = $2",
            )
            .bind(at)
            .bind(&family)
            .execute(&mut *tx)
            .await
            .map_err(other)?;
            tx.commit().await.map_err(other)?;
            return Ok(RefreshOutcome::Reused { family, user });
        }
        if row.try_get::<i64, _>("expires_at").map_err(other)? <= at {
            return Ok(RefreshOutcome::Invalid);
        }
        sqlx::query("UPDATE refresh_tokens SET used_at = $1 WHERE token_hash = $2")
            .bind(at)
            .bind(old_hash)
            .execute(&mut *tx)
            .await
            .map_err(other)?;
        let next = RefreshRow {
            user: user.clone(),
            ..next.clone()
        };
        insert_refresh(&mut tx, &family, &next).await?;
        tx.commit().await.map_err(other)?;
        Ok(RefreshOutcome::Rotated { family, user })
    }

    pub(super) async fn revoke_family(&self, family: &str, at: i64) -> StoreResult<String> {
        let row = sqlx::query(
            "UPDATE token_families SET revoked_at = COALESCE(revoked_at, $1) WHERE family = $2 \
             RETURNING user_name",
        )
        .bind(at)
        .bind(family)
        .fetch_one(&self.pool)
        .await
        .map_err(other)?;
        row.try_get("user_name").map_err(other)
    }

    pub(super) async fn family_user(&self, family: &str) -> StoreResult<Option<FamilyUser>> {
        let row = sqlx::query(
            "SELECT u.name, u.admin_since FROM token_families f JOIN users u \
             ON u.name = f.user_name \
             WHERE f.family = $1 AND f.revoked_at IS NULL AND u.revoked_at IS NULL",
        )
        .bind(family)
        .fetch_optional(&self.pool)
        .await
        .map_err(other)?;
        row.map(|r| {
            Ok(FamilyUser {
                name: r.try_get("name").map_err(other)?,
                admin: r
                    .try_get::<Option<i64>, _>("admin_since")
                    .map_err(other)?
                    .is_some(),
            })
        })
        .transpose()
    }

    pub(super) async fn upsert_member(
        &self,
        session: SessionId,
        principal: &str,
        role: &str,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO session_members (session_id, principal, role) VALUES ($1, $2, $3) \
             ON CONFLICT (session_id, principal) DO UPDATE SET role = excluded.role",
        )
        .bind(session.to_string())
        .bind(principal)
        .bind(role)
        .execute(&self.pool)
        .await
        .map_err(other)?;
        Ok(())
    }

    pub(super) async fn claim(&self, session: SessionId, principal: &str) -> StoreResult<bool> {
        let sid = session.to_string();
        let mut tx = self.pool.begin().await.map_err(other)?;
        // Claims of one session serialise on its row, so only the first finds no members.
        sqlx::query("SELECT 1 FROM sessions WHERE id = $1::uuid FOR UPDATE")
            .bind(&sid)
            .fetch_optional(&mut *tx)
            .await
            .map_err(other)?;
        let n = sqlx::query(
            "INSERT INTO session_members (session_id, principal, role) \
             SELECT $1, $2, 'owner' WHERE NOT EXISTS \
             (SELECT 1 FROM session_members WHERE session_id = $1)",
        )
        .bind(&sid)
        .bind(principal)
        .execute(&mut *tx)
        .await
        .map_err(other)?
        .rows_affected();
        tx.commit().await.map_err(other)?;
        Ok(n == 1)
    }

    pub(super) async fn delete_member(
        &self,
        session: SessionId,
        principal: &str,
    ) -> StoreResult<()> {
        sqlx::query("DELETE FROM session_members WHERE session_id = $1 AND principal = $2")
            .bind(session.to_string())
            .bind(principal)
            .execute(&self.pool)
            .await
            .map_err(other)?;
        Ok(())
    }

    pub(super) async fn role_of(
        &self,
        session: SessionId,
        principal: &str,
    ) -> StoreResult<Option<String>> {
        let row = sqlx::query(
            "SELECT role FROM session_members WHERE session_id = $1 AND principal = $2",
        )
        .bind(session.to_string())
        .bind(principal)
        .fetch_optional(&self.pool)
        .await
        .map_err(other)?;
        row.map(|r| r.try_get("role").map_err(other)).transpose()
    }

    pub(super) async fn member_rows(&self, session: SessionId) -> StoreResult<Vec<MemberRow>> {
        // Byte order, as SQLite sorts: the same list on both engines whatever the locale.
        let rows = sqlx::query(
            "SELECT principal, role, via_link FROM session_members WHERE session_id = $1 \
             ORDER BY principal COLLATE \"C\"",
        )
        .bind(session.to_string())
        .fetch_all(&self.pool)
        .await
        .map_err(other)?;
        rows.iter()
            .map(|r| {
                Ok(MemberRow {
                    principal: r.try_get("principal").map_err(other)?,
                    role: r.try_get("role").map_err(other)?,
                    via_link: r.try_get("via_link").map_err(other)?,
                })
            })
            .collect()
    }

    pub(super) async fn roles_of(&self, principal: &str) -> StoreResult<Vec<(SessionId, String)>> {
        let rows = sqlx::query("SELECT session_id, role FROM session_members WHERE principal = $1")
            .bind(principal)
            .fetch_all(&self.pool)
            .await
            .map_err(other)?;
        rows.iter()
            .map(|r| {
                let id: String = r.try_get("session_id").map_err(other)?;
                let id = Uuid::parse_str(&id).context("stored session id")?;
                Ok((SessionId(id), r.try_get("role").map_err(other)?))
            })
            .collect()
    }
}

async fn insert_refresh(
    tx: &mut Transaction<'_, Postgres>,
    family: &str,
    row: &RefreshRow,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO refresh_tokens (token_hash, family, user_name, created_at, expires_at) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(&row.token_hash)
    .bind(family)
    .bind(&row.user)
    .bind(row.created_at)
    .bind(row.expires_at)
    .execute(&mut **tx)
    .await
    .map_err(other)?;
    Ok(())
}
