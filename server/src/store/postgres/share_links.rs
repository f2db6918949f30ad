//! The Postgres side of share links. Redeeming spends a use with one conditional `UPDATE`, which
//! locks the link's row: links redeemed on several nodes at once never go below zero uses.

use anyhow::Context;
use moor_protocol::SessionId;
use sqlx::Row;
use uuid::Uuid;

use super::{other, PgStore};
use crate::store::{ShareLinkRow, StoreResult};

impl PgStore {
    pub(super) async fn insert_share_link(&self, link: &ShareLinkRow) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO share_links (id, token_hash, session_id, role, created_by, created_at, \
             expires_at, uses_left, max_uses) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
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
        .execute(&self.pool)
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
        let mut tx = self.pool.begin().await.map_err(other)?;
        let row = sqlx::query(
            "UPDATE share_links SET uses_left = uses_left - 1 WHERE token_hash = $1 \
             AND revoked_at IS NULL AND expires_at > $2 AND uses_left > 0 \
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
        let id: String = row.try_get("id").map_err(other)?;
        let session: String = row.try_get("session_id").map_err(other)?;
        let role: String = row.try_get("role").map_err(other)?;
        // An existing role is kept: a link never lowers (or raises) a member's role.
        sqlx::query(
            "INSERT INTO session_members (session_id, principal, role, via_link) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (session_id, principal) DO NOTHING",
        )
        .bind(&session)
        .bind(principal)
        .bind(&role)
        .bind(&id)
        .execute(&mut *tx)
        .await
        .map_err(other)?;
        let now: String = sqlx::query(
            "SELECT role FROM session_members WHERE session_id = $1 AND principal = $2",
        )
        .bind(&session)
        .bind(principal)
        .fetch_one(&mut *tx)
        .await
        .map_err(other)?
        .try_get("role")
        .map_err(other)?;
        tx.commit().await.map_err(other)?;
        let session = SessionId(Uuid::parse_str(&session).context("stored session id")?);
        Ok(Some((session, now)))
    }

    pub(super) async fn revoke_link(
        &self,
        id: &str,
        at: i64,
    ) -> StoreResult<(SessionId, Vec<String>)> {
        let mut tx = self.pool.begin().await.map_err(other)?;
        let session: String = sqlx::query(
            "UPDATE share_links SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2 \
             RETURNING session_id",
        )
        .bind(at)
        .bind(id)
        .fetch_one(&mut *tx)
        .await
        .map_err(other)?
        .try_get("session_id")
        .map_err(other)?;
        let members = sqlx::query(
            "DELETE FROM session_members WHERE session_id = $1 AND via_link = $2 \
             RETURNING principal",
        )
        .bind(&session)
        .bind(id)
        .fetch_all(&mut *tx)
        .await
        .map_err(other)?
        .iter()
        .map(|r| r.try_get::<String, _>("principal").map_err(other))
        .collect::<StoreResult<Vec<_>>>()?;
        tx.commit().await.map_err(other)?;
        let session = SessionId(Uuid::parse_str(&session).context("stored session id")?);
        Ok((session, members))
    }

    pub(super) async fn link_rows(&self, session: SessionId) -> StoreResult<Vec<ShareLinkRow>> {
        let rows = sqlx::query(
            "SELECT id, token_hash, role, created_by, created_at, expires_at, uses_left, \
             max_uses, revoked_at FROM share_links WHERE session_id = $1 \
             ORDER BY created_at DESC, id",
        )
        .bind(session.to_string())
        .fetch_all(&self.pool)
        .await
        .map_err(other)?;
        rows.iter()
            .map(|r| {
                Ok(ShareLinkRow {
                    id: r.try_get("id").map_err(other)?,
                    token_hash: r.try_get("token_hash").map_err(other)?,
                    session,
                    role: r.try_get("role").map_err(other)?,
                    created_by: r.try_get("created_by").map_err(other)?,
                    created_at: r.try_get("created_at").map_err(other)?,
                    expires_at: r.try_get("expires_at").map_err(other)?,
                    uses_left: r.try_get("uses_left").map_err(other)?,
                    max_uses: r.try_get("max_uses").map_err(other)?,
                    revoked_at: r.try_get("revoked_at").map_err(other)?,
                })
            })
            .collect()
    }

    pub(super) async fn link_session(&self, id: &str) -> StoreResult<SessionId> {
        let session: String = sqlx::query("SELECT session_id FROM share_links WHERE id = $1")
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .map_err(other)?
            .try_get("session_id")
            .map_err(other)?;
        Ok(SessionId(
            Uuid::parse_str(&session).context("stored session id")?,
        ))
    }
}
