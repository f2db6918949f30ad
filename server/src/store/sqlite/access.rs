//! The SQLite side of accounts, refresh-token families and session roles. Secrets arrive
//! hashed; nothing here sees a password or a token.

use anyhow::Context;
use moor_protocol::SessionId;
use sqlx::Row;
use uuid::Uuid;

use super::{other, SqliteStore};
use crate::store::{
    FamilyUser, MemberRow, RefreshOutcome, RefreshRow, ShareLinkRow, StoreError, StoreResult,
    UserRow,
};

impl SqliteStore {
    pub(super) async fn insert_user(
        &self,
        name: &str,
        hash: &str,
        admin: bool,
        at: i64,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO users (name, password_hash, created_at, admin_since) VALUES (?, ?, ?, ?)",
        )
        .bind(name)
        .bind(hash)
        .bind(at)
        .bind(admin.then_some(at))
        .execute(&self.writer)
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
        // One writer connection: the check and the insert are one statement, so two setups
        // cannot both pass it.
        let n = sqlx::query(
            "INSERT INTO users (name, password_hash, created_at, admin_since) \
             SELECT ?1, ?2, ?3, ?3 WHERE NOT EXISTS \
             (SELECT 1 FROM users WHERE admin_since IS NOT NULL)",
        )
        .bind(name)
        .bind(hash)
        .bind(at)
        .execute(&self.writer)
        .await
        .map_err(other)?
        .rows_affected();
        Ok(n == 1)
    }

    pub(super) async fn any_admin(&self) -> StoreResult<bool> {
        let row = sqlx::query("SELECT 1 FROM users WHERE admin_since IS NOT NULL LIMIT 1")
            .fetch_optional(&self.writer)
            .await
            .map_err(other)?;
        Ok(row.is_some())
    }

    pub(super) async fn user_row(&self, name: &str) -> StoreResult<UserRow> {
        let row = sqlx::query(
            "SELECT name, password_hash, created_at, revoked_at, admin_since FROM users \
             WHERE name = ?",
        )
        .bind(name)
        .fetch_one(&self.readers)
        .await
        .map_err(other)?;
        Ok(UserRow {
            name: row.get("name"),
            password_hash: row.get("password_hash"),
            created_at: row.get("created_at"),
            revoked_at: row.get("revoked_at"),
            admin: row.get::<Option<i64>, _>("admin_since").is_some(),
        })
    }

    pub(super) async fn revoke_user_rows(&self, name: &str, at: i64) -> StoreResult<()> {
        let mut tx = self.writer.begin().await.map_err(other)?;
        let n = sqlx::query("UPDATE users SET revoked_at = COALESCE(revoked_at, ?) WHERE name = ?")
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
            "UPDATE token_families SET revoked_at = COALESCE(revoked_at, ?) WHERE user_name = ?",
        )
        .bind(at)
        .bind(name)
        .execute(&mut *tx)
        .await
        .map_err(other)?;
        tx.commit().await.map_err(other)
    }

    pub(super) async fn insert_family(&self, family: &str, first: &RefreshRow) -> StoreResult<()> {
        let mut tx = self.writer.begin().await.map_err(other)?;
        sqlx::query("INSERT INTO token_families (family, user_name, created_at) VALUES (?, ?, ?)")
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
        let mut tx = self.writer.begin().await.map_err(other)?;
        let row = sqlx::query(
            "SELECT t.family, t.user_name, t.expires_at, t.used_at, f.revoked_at AS fam_revoked, \
                    u.revoked_at AS user_revoked \
             FROM refresh_tokens t JOIN token_families f ON f.family = t.family \
             JOIN users u ON u.name = t.user_name WHERE t.token_hash = ?",
        )
        .bind(old_hash)
        .fetch_optional(&mut *tx)
        .await
        .map_err(other)?;
        let Some(row) = row else {
            return Ok(RefreshOutcome::Invalid);
        };
        let family: String = row.get("family");
        let user: String = row.get("user_name");
        let used: Option<i64> = row.get("used_at");
        let fam_revoked: Option<i64> = row.get("fam_revoked");
        let user_revoked: Option<i64> = row.get("user_revoked");
        if used.is_some() || fam_revoked.is_some() || user_revoked.is_some() {
            sqlx::query(
                "UPDATE token_families SET revoked_at = COALESCE(revoked_at, ?) WHERE family = ?",
            )
            .bind(at)
            .bind(&family)
            .execute(&mut *tx)
            .await
            .map_err(other)?;
            tx.commit().await.map_err(other)?;
            return Ok(RefreshOutcome::Reused { family, user });
        }
        if row.get::<i64, _>("expires_at") <= at {
            return Ok(RefreshOutcome::Invalid);
        }
        sqlx::query("UPDATE refresh_tokens SET used_at = ? WHERE token_hash = ?")
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
            "UPDATE token_families SET revoked_at = COALESCE(revoked_at, ?) WHERE family = ? \
             RETURNING user_name",
        )
        .bind(at)
        .bind(family)
        .fetch_one(&self.writer)
        .await
        .map_err(other)?;
        Ok(row.get("user_name"))
    }

    pub(super) async fn family_user(&self, family: &str) -> StoreResult<Option<FamilyUser>> {
        let row = sqlx::query(
            "SELECT u.name, u.admin_since FROM token_families f JOIN users u \
             ON u.name = f.user_name \
             WHERE f.family = ? AND f.revoked_at IS NULL AND u.revoked_at IS NULL",
        )
        .bind(family)
        .fetch_optional(&self.readers)
        .await
        .map_err(other)?;
        Ok(row.map(|r| FamilyUser {
            name: r.get("name"),
            admin: r.get::<Option<i64>, _>("admin_since").is_some(),
        }))
    }

    pub(super) async fn upsert_member(
        &self,
        session: SessionId,
        principal: &str,
        role: &str,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO session_members (session_id, principal, role) VALUES (?, ?, ?) \
             ON CONFLICT (session_id, principal) DO UPDATE SET role = excluded.role",
        )
        .bind(session.to_string())
        .bind(principal)
        .bind(role)
        .execute(&self.writer)
        .await
        .map_err(other)?;
        Ok(())
    }

    pub(super) async fn claim(&self, session: SessionId, principal: &str) -> StoreResult<bool> {
        let n = sqlx::query(
            "INSERT INTO session_members (session_id, principal, role) \
             SELECT ?1, ?2, 'owner' WHERE NOT EXISTS \
             (SELECT 1 FROM session_members WHERE session_id = ?1)",
        )
        .bind(session.to_string())
        .bind(principal)
        .execute(&self.writer)
        .await
        .map_err(other)?
        .rows_affected();
        Ok(n == 1)
    }

    pub(super) async fn delete_member(
        &self,
        session: SessionId,
        principal: &str,
    ) -> StoreResult<()> {
        sqlx::query("DELETE FROM session_members WHERE session_id = ? AND principal = ?")
            .bind(session.to_string())
            .bind(principal)
            .execute(&self.writer)
            .await
            .map_err(other)?;
        Ok(())
    }

    pub(super) async fn role_of(
        &self,
        session: SessionId,
        principal: &str,
    ) -> StoreResult<Option<String>> {
        let row =
            sqlx::query("SELECT role FROM session_members WHERE session_id = ? AND principal = ?")
                .bind(session.to_string())
                .bind(principal)
                .fetch_optional(&self.readers)
                .await
                .map_err(other)?;
        Ok(row.map(|r| r.get("role")))
    }

    pub(super) async fn member_rows(&self, session: SessionId) -> StoreResult<Vec<MemberRow>> {
        let rows = sqlx::query(
            "SELECT principal, role, via_link FROM session_members WHERE session_id = ? \
             ORDER BY principal",
        )
        .bind(session.to_string())
        .fetch_all(&self.readers)
        .await
        .map_err(other)?;
        Ok(rows
            .iter()
            .map(|r| MemberRow {
                principal: r.get("principal"),
                role: r.get("role"),
                via_link: r.get("via_link"),
            })
            .collect())
    }

    pub(super) async fn roles_of(&self, principal: &str) -> StoreResult<Vec<(SessionId, String)>> {
        let rows = sqlx::query("SELECT session_id, role FROM session_members WHERE principal = ?")
            .bind(principal)
            .fetch_all(&self.readers)
            .await
            .map_err(other)?;
        rows.iter()
            .map(|r| {
                let id: String = r.get("session_id");
                let id = Uuid::parse_str(&id).context("stored session id")?;
                Ok((SessionId(id), r.get("role")))
            })
            .collect()
    }
}

impl SqliteStore {
    pub(super) async fn insert_share_link(&self, link: &ShareLinkRow) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO share_links (id, token_hash, session_id, role, created_by, created_at, \
             expires_at, uses_left, max_uses) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&link.id)
        .bind(&link.token_hash)
        .bind(link.session.to_string())
        .bind(&link.role)
        .bind(&link.created_by)
        .bind(link.created_at)
        .bind(link.expires_at)
        .bind(link.uses_left)
        .bind(link.max_uses)
        .execute(&self.writer)
        .await
        .map_err(other)?;
        Ok(())
    }

    pub(super) async fn redeem_link(
        &self,
        token_hash: &str,
        principal: &str,
        at: i64,
    ) -> StoreResult<Option<(SessionId, String)>> {
        let mut tx = self.writer.begin().await.map_err(other)?;
        let row = sqlx::query(
            "UPDATE share_links SET uses_left = uses_left - 1 WHERE token_hash = ? \
             AND revoked_at IS NULL AND expires_at > ? AND uses_left > 0 \
             RETURNING id, session_id, role",
        )
        .bind(token_hash)
        .bind(at)
        .fetch_optional(&mut *tx)
        .await
        .map_err(other)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let id: String = row.get("id");
        let session: String = row.get("session_id");
        let role: String = row.get("role");
        // An existing role is kept: a link never lowers (or raises) a member's role.
        sqlx::query(
            "INSERT INTO session_members (session_id, principal, role, via_link) \
             VALUES (?, ?, ?, ?) ON CONFLICT (session_id, principal) DO NOTHING",
        )
        .bind(&session)
        .bind(principal)
        .bind(&role)
        .bind(&id)
        .execute(&mut *tx)
        .await
        .map_err(other)?;
        let now: String =
            sqlx::query("SELECT role FROM session_members WHERE session_id = ? AND principal = ?")
                .bind(&session)
                .bind(principal)
                .fetch_one(&mut *tx)
                .await
                .map_err(other)?
                .get("role");
        tx.commit().await.map_err(other)?;
        let session = SessionId(Uuid::parse_str(&session).context("stored session id")?);
        Ok(Some((session, now)))
    }

    pub(super) async fn revoke_link(
        &self,
        id: &str,
        at: i64,
    ) -> StoreResult<(SessionId, Vec<String>)> {
        let mut tx = self.writer.begin().await.map_err(other)?;
        let session: String = sqlx::query(
            "UPDATE share_links SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? \
             RETURNING session_id",
        )
        .bind(at)
        .bind(id)
        .fetch_one(&mut *tx)
        .await
        .map_err(other)?
        .get("session_id");
        let members = sqlx::query(
            "DELETE FROM session_members WHERE session_id = ? AND via_link = ? RETURNING principal",
        )
        .bind(&session)
        .bind(id)
        .fetch_all(&mut *tx)
        .await
        .map_err(other)?
        .iter()
        .map(|r| r.get::<String, _>("principal"))
        .collect();
        tx.commit().await.map_err(other)?;
        let session = SessionId(Uuid::parse_str(&session).context("stored session id")?);
        Ok((session, members))
    }

    pub(super) async fn link_rows(&self, session: SessionId) -> StoreResult<Vec<ShareLinkRow>> {
        let rows = sqlx::query(
            "SELECT id, token_hash, role, created_by, created_at, expires_at, uses_left, \
             max_uses, revoked_at FROM share_links WHERE session_id = ? \
             ORDER BY created_at DESC, id",
        )
        .bind(session.to_string())
        .fetch_all(&self.readers)
        .await
        .map_err(other)?;
        Ok(rows
            .iter()
            .map(|r| ShareLinkRow {
                id: r.get("id"),
                token_hash: r.get("token_hash"),
                session,
                role: r.get("role"),
                created_by: r.get("created_by"),
                created_at: r.get("created_at"),
                expires_at: r.get("expires_at"),
                uses_left: r.get("uses_left"),
                max_uses: r.get("max_uses"),
                revoked_at: r.get("revoked_at"),
            })
            .collect())
    }

    pub(super) async fn link_session(&self, id: &str) -> StoreResult<SessionId> {
        let session: String = sqlx::query("SELECT session_id FROM share_links WHERE id = ?")
            .bind(id)
            .fetch_one(&self.readers)
            .await
            .map_err(other)?
            .get("session_id");
        Ok(SessionId(
            Uuid::parse_str(&session).context("stored session id")?,
        ))
    }
}

async fn insert_refresh(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    family: &str,
    row: &RefreshRow,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO refresh_tokens (token_hash, family, user_name, created_at, expires_at) \
         VALUES (?, ?, ?, ?, ?)",
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
