//! [`AccessStore`](super::AccessStore), written once for both engines.
//!
//! The access tables (users, token families, refresh tokens, session members, share links) have
//! the same columns on SQLite and Postgres, and both drivers take `$n` placeholders, so every
//! query here runs as written on either. [`access_store!`] expands this one implementation for
//! each store type; the few places where the engines really differ are the store's own
//! [`AccessDialect`] items: how concurrent setups and claims are serialised, and how a refresh
//! token's row is locked while it is rotated.

use anyhow::anyhow;

use super::{Role, StoreError, StoreResult};

/// What [`access_store!`] needs from a store besides its pools.
pub(crate) trait AccessDialect {
    /// Appended to the query that reads a refresh token before rotating it, to lock its row
    /// until commit (empty where the single writer already serialises rotations).
    const TOKEN_ROW_LOCK: &'static str;
    /// The query summing the payload bytes of the entries of every session `$1` holds role
    /// `$2` on (the engines key entries differently).
    const OWNED_LOG_BYTES: &'static str;
}

/// The SQL condition that a grant made by the principal in column `by` on the session in
/// column `session` still stands: its maker is the bootstrap admin (`bootstrap`, a
/// placeholder), or is not revoked and is an administrator or holds the role in placeholder
/// `owner` on the session. Share links and offers die with their maker's ownership this way,
/// checked in the statement that uses them.
pub(crate) fn maker_still_owns(by: &str, session: &str, bootstrap: &str, owner: &str) -> String {
    format!(
        "({by} = {bootstrap} \
         OR (NOT EXISTS (SELECT 1 FROM users u WHERE u.name = {by} AND u.revoked_at IS NOT NULL) \
           AND (EXISTS (SELECT 1 FROM users u WHERE u.name = {by} AND u.admin_since IS NOT NULL) \
             OR EXISTS (SELECT 1 FROM session_members m WHERE m.session_id = {session} \
               AND m.principal = {by} AND m.role = {owner}))))"
    )
}

/// The SQL condition that the `share_links` row in scope grants at placeholder `at`: unrevoked,
/// unexpired, not used up, and its maker still owns the session (placeholders `bootstrap` and
/// `owner` as in [`maker_still_owns`]). Redeeming and previewing a link test the same.
pub(crate) fn live_link(at: &str, bootstrap: &str, owner: &str) -> String {
    format!(
        "share_links.revoked_at IS NULL AND share_links.expires_at > {at} \
         AND share_links.uses_left > 0 AND {}",
        maker_still_owns(
            "share_links.created_by",
            "share_links.session_id",
            bootstrap,
            owner
        )
    )
}

/// The SQL condition that the `session_offers` row in scope is live at placeholder `at`:
/// unexpired, and its maker still owns the session (placeholders `bootstrap` and `owner` as in
/// [`maker_still_owns`]).
pub(crate) fn live_offer(at: &str, bootstrap: &str, owner: &str) -> String {
    format!(
        "session_offers.expires_at > {at} AND {}",
        maker_still_owns(
            "session_offers.offered_by",
            "session_offers.session_id",
            bootstrap,
            owner
        )
    )
}

/// The SQL condition that the `session_offers` row in scope is addressed to an account that is
/// not revoked and existed when the offer was made (an offer to a name nobody had matches
/// nobody, even once someone takes the name).
pub(crate) const OFFER_FINDS_ITS_ACCOUNT: &str =
    "EXISTS (SELECT 1 FROM users t WHERE t.name = session_offers.principal \
     AND t.revoked_at IS NULL AND t.created_at <= session_offers.offered_at)";

/// The columns of an offer as the store reads it back.
pub(crate) const OFFER_COLS: &str =
    "session_id, principal, role, offered_by, offered_at, expires_at";

/// A role as stored; a name this server does not know means the row was not written by it.
pub(crate) fn stored_role(name: &str) -> StoreResult<Role> {
    Role::parse(name)
        .ok_or_else(|| StoreError::Other(anyhow!("stored role {name:?} is not a known role")))
}

/// A session id as stored in the access tables (text on both engines).
pub(crate) fn stored_session(id: &str) -> StoreResult<moor_protocol::SessionId> {
    id.parse()
        .map_err(|e| StoreError::Other(anyhow!("stored session id {id:?}: {e}")))
}

/// Implements [`AccessStore`](crate::store::AccessStore) for `$store`, a store over `$db`
/// with inherent `writes()` and `reads()` pools, `lock_first_admin(&mut tx)`,
/// `lock_session(&mut tx, &sid)` and `lock_offers_to(&mut tx, &name)` (each serialises its
/// transaction against other nodes, or does nothing where one writer already does), and
/// [`AccessDialect`].
macro_rules! access_store {
    ($store:ident, $db:ty) => {
        mod access_store {
            use moor_protocol::api::ShareLinkInfo;
            use moor_protocol::SessionId;
            use sqlx::Row;

            use super::$store;
            use $crate::store::access::{
                live_link, live_offer, stored_role, stored_session, AccessDialect as _,
                OFFER_COLS, OFFER_FINDS_ITS_ACCOUNT,
            };
            use $crate::store::errors::db_error;
            use $crate::store::{
                AccessStore, FamilyUser, MemberRow, OfferLimits, OfferRow, Offered,
                RefreshOutcome, RefreshRow, Role, ShareLinkRow, StoreError, StoreResult, UserRow,
                BOOTSTRAP_PRINCIPAL, LAST_OWNER, OFFERS_PER_SESSION,
            };

            type Args<'q> = <$db as sqlx::Database>::Arguments<'q>;

            /// A query whose next three placeholders are those of a [`live_link`] or
            /// [`live_offer`] condition.
            trait BindLive {
                /// Binds the time `at`, the bootstrap principal and the owner role, in that
                /// order, after the values already bound.
                fn bind_live(self, at: i64) -> Self;
            }

            impl<'q> BindLive for sqlx::query::Query<'q, $db, Args<'q>> {
                fn bind_live(self, at: i64) -> Self {
                    self.bind(at)
                        .bind(BOOTSTRAP_PRINCIPAL)
                        .bind(Role::Owner.as_str())
                }
            }

            impl<'q, O> BindLive for sqlx::query::QueryScalar<'q, $db, O, Args<'q>> {
                fn bind_live(self, at: i64) -> Self {
                    self.bind(at)
                        .bind(BOOTSTRAP_PRINCIPAL)
                        .bind(Role::Owner.as_str())
                }
            }

            #[async_trait::async_trait]
            impl AccessStore for $store {
                async fn create_user(
                    &self,
                    name: &str,
                    password_hash: &str,
                    admin: bool,
                    at: i64,
                ) -> StoreResult<()> {
                    sqlx::query(
                        "INSERT INTO users (name, password_hash, created_at, admin_since) \
                         VALUES ($1, $2, $3, $4)",
                    )
                    .bind(name)
                    .bind(password_hash)
                    .bind(at)
                    .bind(admin.then_some(at))
                    .execute(self.writes())
                    .await
                    .map_err(db_error)?;
                    Ok(())
                }

                async fn create_first_admin(
                    &self,
                    name: &str,
                    password_hash: &str,
                    at: i64,
                ) -> StoreResult<bool> {
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    // The check and the insert are one statement, and setups are serialised, so two
                    // of them (on any nodes) cannot both pass it.
                    Self::lock_first_admin(&mut tx).await?;
                    let n = sqlx::query(
                        "INSERT INTO users (name, password_hash, created_at, admin_since) \
                         SELECT $1, $2, $3, $3 WHERE NOT EXISTS \
                         (SELECT 1 FROM users WHERE admin_since IS NOT NULL)",
                    )
                    .bind(name)
                    .bind(password_hash)
                    .bind(at)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?
                    .rows_affected();
                    tx.commit().await.map_err(db_error)?;
                    Ok(n == 1)
                }

                async fn has_admin(&self) -> StoreResult<bool> {
                    let row =
                        sqlx::query("SELECT 1 FROM users WHERE admin_since IS NOT NULL LIMIT 1")
                            .fetch_optional(self.writes())
                            .await
                            .map_err(db_error)?;
                    Ok(row.is_some())
                }

                async fn user(&self, name: &str) -> StoreResult<UserRow> {
                    let row = sqlx::query(
                        "SELECT name, password_hash, created_at, revoked_at, admin_since \
                         FROM users WHERE name = $1",
                    )
                    .bind(name)
                    .fetch_one(self.reads())
                    .await
                    .map_err(db_error)?;
                    Ok(UserRow {
                        name: row.try_get("name").map_err(db_error)?,
                        password_hash: row.try_get("password_hash").map_err(db_error)?,
                        created_at: row.try_get("created_at").map_err(db_error)?,
                        revoked_at: row.try_get("revoked_at").map_err(db_error)?,
                        admin: row
                            .try_get::<Option<i64>, _>("admin_since")
                            .map_err(db_error)?
                            .is_some(),
                    })
                }

                async fn revoke_user(&self, name: &str, at: i64) -> StoreResult<()> {
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    let n = sqlx::query(
                        "UPDATE users SET revoked_at = COALESCE(revoked_at, $1) WHERE name = $2",
                    )
                    .bind(at)
                    .bind(name)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?
                    .rows_affected();
                    if n == 0 {
                        return Err(StoreError::NotFound);
                    }
                    sqlx::query(
                        "UPDATE token_families SET revoked_at = COALESCE(revoked_at, $1) \
                         WHERE user_name = $2",
                    )
                    .bind(at)
                    .bind(name)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    tx.commit().await.map_err(db_error)
                }

                async fn create_token_family(
                    &self,
                    family: &str,
                    first: &RefreshRow,
                ) -> StoreResult<()> {
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    sqlx::query(
                        "INSERT INTO token_families (family, user_name, created_at) \
                         VALUES ($1, $2, $3)",
                    )
                    .bind(family)
                    .bind(&first.user)
                    .bind(first.created_at)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    insert_refresh(&mut tx, family, first).await?;
                    tx.commit().await.map_err(db_error)
                }

                async fn rotate_refresh(
                    &self,
                    old_hash: &str,
                    next: &RefreshRow,
                    at: i64,
                    grace_ms: i64,
                ) -> StoreResult<RefreshOutcome> {
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    // The token's row stays locked until commit: a concurrent rotation of the same
                    // token (on this node or another) waits, then sees it used.
                    let row = sqlx::query(&format!(
                        "SELECT t.family, t.user_name, t.expires_at, t.used_at, t.replaced_by, \
                         f.revoked_at AS fam_revoked, u.revoked_at AS user_revoked \
                         FROM refresh_tokens t JOIN token_families f ON f.family = t.family \
                         JOIN users u ON u.name = t.user_name WHERE t.token_hash = $1{}",
                        Self::TOKEN_ROW_LOCK
                    ))
                    .bind(old_hash)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    let Some(row) = row else {
                        return Ok(RefreshOutcome::Invalid);
                    };
                    let family: String = row.try_get("family").map_err(db_error)?;
                    let user: String = row.try_get("user_name").map_err(db_error)?;
                    let used: Option<i64> = row.try_get("used_at").map_err(db_error)?;
                    let fam_revoked: Option<i64> = row.try_get("fam_revoked").map_err(db_error)?;
                    let user_revoked: Option<i64> = row.try_get("user_revoked").map_err(db_error)?;
                    let replaced_by: Option<String> = row.try_get("replaced_by").map_err(db_error)?;
                    let next = RefreshRow {
                        user: user.clone(),
                        ..next.clone()
                    };
                    let in_grace = used.is_some_and(|u| at.saturating_sub(u) < grace_ms)
                        && fam_revoked.is_none()
                        && user_revoked.is_none();
                    if let (true, Some(successor)) = (in_grace, replaced_by) {
                        // Spent unused: it was issued, but its answer may have been lost. Any
                        // later use of it is a reuse.
                        let spent = sqlx::query(
                            "UPDATE refresh_tokens SET used_at = $1 \
                             WHERE token_hash = $2 AND used_at IS NULL",
                        )
                        .bind(at)
                        .bind(&successor)
                        .execute(&mut *tx)
                        .await
                        .map_err(db_error)?;
                        if spent.rows_affected() == 1 {
                            sqlx::query("UPDATE refresh_tokens SET replaced_by = $1 WHERE token_hash = $2")
                                .bind(&next.token_hash)
                                .bind(old_hash)
                                .execute(&mut *tx)
                                .await
                                .map_err(db_error)?;
                            insert_refresh(&mut tx, &family, &next).await?;
                            tx.commit().await.map_err(db_error)?;
                            return Ok(RefreshOutcome::Rotated { family, user });
                        }
                    }
                    if used.is_some() || fam_revoked.is_some() || user_revoked.is_some() {
                        sqlx::query(
                            "UPDATE token_families SET revoked_at = COALESCE(revoked_at, $1) \
                             WHERE family = $2",
                        )
                        .bind(at)
                        .bind(&family)
                        .execute(&mut *tx)
                        .await
                        .map_err(db_error)?;
                        tx.commit().await.map_err(db_error)?;
                        return Ok(RefreshOutcome::Reused { family, user });
                    }
                    if row.try_get::<i64, _>("expires_at").map_err(db_error)? <= at {
                        return Ok(RefreshOutcome::Invalid);
                    }
                    sqlx::query(
                        "UPDATE refresh_tokens SET used_at = $1, replaced_by = $3 WHERE token_hash = $2",
                    )
                    .bind(at)
                    .bind(old_hash)
                    .bind(&next.token_hash)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    insert_refresh(&mut tx, &family, &next).await?;
                    tx.commit().await.map_err(db_error)?;
                    Ok(RefreshOutcome::Rotated { family, user })
                }

                async fn revoke_token_family(&self, family: &str, at: i64) -> StoreResult<String> {
                    let row = sqlx::query(
                        "UPDATE token_families SET revoked_at = COALESCE(revoked_at, $1) \
                         WHERE family = $2 RETURNING user_name",
                    )
                    .bind(at)
                    .bind(family)
                    .fetch_one(self.writes())
                    .await
                    .map_err(db_error)?;
                    row.try_get("user_name").map_err(db_error)
                }

                async fn active_family(&self, family: &str) -> StoreResult<Option<FamilyUser>> {
                    let row = sqlx::query(
                        "SELECT u.name, u.admin_since FROM token_families f JOIN users u \
                         ON u.name = f.user_name \
                         WHERE f.family = $1 AND f.revoked_at IS NULL AND u.revoked_at IS NULL",
                    )
                    .bind(family)
                    .fetch_optional(self.reads())
                    .await
                    .map_err(db_error)?;
                    row.map(|r| {
                        Ok(FamilyUser {
                            name: r.try_get("name").map_err(db_error)?,
                            admin: r
                                .try_get::<Option<i64>, _>("admin_since")
                                .map_err(db_error)?
                                .is_some(),
                        })
                    })
                    .transpose()
                }

                async fn set_member(
                    &self,
                    session: SessionId,
                    principal: &str,
                    role: Role,
                ) -> StoreResult<()> {
                    let sid = session.to_string();
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    // Changes to one session's members are serialised, so two owners demoting
                    // each other cannot both succeed.
                    Self::lock_session(&mut tx, &sid).await?;
                    put_role(&mut tx, &sid, principal, role).await?;
                    tx.commit().await.map_err(db_error)
                }

                async fn claim_session(
                    &self,
                    session: SessionId,
                    principal: &str,
                ) -> StoreResult<bool> {
                    let sid = session.to_string();
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    // Claims of one session are serialised, so only the first finds no members.
                    Self::lock_session(&mut tx, &sid).await?;
                    let n = sqlx::query(
                        "INSERT INTO session_members (session_id, principal, role) \
                         SELECT $1, $2, $3 WHERE NOT EXISTS \
                         (SELECT 1 FROM session_members WHERE session_id = $1)",
                    )
                    .bind(&sid)
                    .bind(principal)
                    .bind(Role::Owner.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?
                    .rows_affected();
                    tx.commit().await.map_err(db_error)?;
                    Ok(n == 1)
                }

                async fn remove_member(
                    &self,
                    session: SessionId,
                    principal: &str,
                ) -> StoreResult<()> {
                    let sid = session.to_string();
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    Self::lock_session(&mut tx, &sid).await?;
                    let was = role_in(&mut tx, &sid, principal).await?;
                    for table in ["session_members", "session_offers"] {
                        sqlx::query(&format!(
                            "DELETE FROM {table} WHERE session_id = $1 AND principal = $2"
                        ))
                        .bind(&sid)
                        .bind(principal)
                        .execute(&mut *tx)
                        .await
                        .map_err(db_error)?;
                    }
                    if was == Some(Role::Owner) {
                        an_owner_remains(&mut tx, &sid).await?;
                    }
                    tx.commit().await.map_err(db_error)
                }

                async fn member_role(
                    &self,
                    session: SessionId,
                    principal: &str,
                ) -> StoreResult<Option<Role>> {
                    let role: Option<String> = sqlx::query_scalar(
                        "SELECT role FROM session_members WHERE session_id = $1 AND principal = $2",
                    )
                    .bind(session.to_string())
                    .bind(principal)
                    .fetch_optional(self.reads())
                    .await
                    .map_err(db_error)?;
                    role.as_deref().map(stored_role).transpose()
                }

                async fn members(&self, session: SessionId) -> StoreResult<Vec<MemberRow>> {
                    let rows = sqlx::query(
                        "SELECT principal, role, via_link FROM session_members \
                         WHERE session_id = $1",
                    )
                    .bind(session.to_string())
                    .fetch_all(self.reads())
                    .await
                    .map_err(db_error)?;
                    let mut members = rows
                        .iter()
                        .map(|r| {
                            Ok(MemberRow {
                                principal: r.try_get("principal").map_err(db_error)?,
                                role: stored_role(r.try_get("role").map_err(db_error)?)?,
                                via_link: r.try_get("via_link").map_err(db_error)?,
                            })
                        })
                        .collect::<StoreResult<Vec<_>>>()?;
                    // Byte order, whatever the database's collation.
                    members.sort_by(|a, b| a.principal.cmp(&b.principal));
                    Ok(members)
                }

                async fn offer(
                    &self,
                    offer: &OfferRow,
                    limits: OfferLimits,
                ) -> StoreResult<Offered> {
                    let sid = offer.session.to_string();
                    let at = offer.offered_at;
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    // Offers of one session, and offers to one name, are serialised: neither
                    // count can pass its cap through offers made at once on several nodes.
                    Self::lock_session(&mut tx, &sid).await?;
                    Self::lock_offers_to(&mut tx, &offer.principal).await?;
                    sqlx::query(
                        "DELETE FROM session_offers WHERE (session_id = $1 OR principal = $2) \
                         AND expires_at <= $3",
                    )
                    .bind(&sid)
                    .bind(&offer.principal)
                    .bind(at)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    // Live offers on the session to others, and to the name on other sessions.
                    let others = "session_id = $1 AND principal <> $2";
                    let on_session = live_offers(&mut tx, others, &sid, offer).await?;
                    if on_session >= i64::from(limits.per_session) {
                        return Err(StoreError::Conflict(OFFERS_PER_SESSION));
                    }
                    let elsewhere = "principal = $2 AND session_id <> $1";
                    let to_name = live_offers(&mut tx, elsewhere, &sid, offer).await?;
                    if to_name >= i64::from(limits.per_user) {
                        tx.commit().await.map_err(db_error)?;
                        return Ok(Offered::Dropped);
                    }
                    sqlx::query(&format!(
                        "INSERT INTO session_offers ({OFFER_COLS}) VALUES ($1, $2, $3, $4, $5, $6) \
                         ON CONFLICT (session_id, principal) DO UPDATE SET role = excluded.role, \
                         offered_by = excluded.offered_by, offered_at = excluded.offered_at, \
                         expires_at = excluded.expires_at"
                    ))
                    .bind(&sid)
                    .bind(&offer.principal)
                    .bind(offer.role.as_str())
                    .bind(&offer.offered_by)
                    .bind(at)
                    .bind(offer.expires_at)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    tx.commit().await.map_err(db_error)?;
                    Ok(Offered::Pending)
                }

                async fn session_offers(
                    &self,
                    session: SessionId,
                    at: i64,
                ) -> StoreResult<Vec<OfferRow>> {
                    let rows = sqlx::query(&format!(
                        "SELECT {OFFER_COLS} FROM session_offers WHERE session_id = $1 AND {}",
                        live_offer("$2", "$3", "$4")
                    ))
                    .bind(session.to_string())
                    .bind_live(at)
                    .fetch_all(self.reads())
                    .await
                    .map_err(db_error)?;
                    let mut offers = rows.iter().map(offer_row).collect::<StoreResult<Vec<_>>>()?;
                    // Byte order, whatever the database's collation.
                    offers.sort_by(|a, b| a.principal.cmp(&b.principal));
                    Ok(offers)
                }

                async fn offers_to(&self, principal: &str, at: i64) -> StoreResult<Vec<OfferRow>> {
                    let rows = sqlx::query(&format!(
                        "SELECT {OFFER_COLS} FROM session_offers WHERE principal = $1 AND {} \
                         AND {OFFER_FINDS_ITS_ACCOUNT} ORDER BY offered_at DESC, session_id",
                        live_offer("$2", "$3", "$4")
                    ))
                    .bind(principal)
                    .bind_live(at)
                    .fetch_all(self.reads())
                    .await
                    .map_err(db_error)?;
                    rows.iter().map(offer_row).collect()
                }

                async fn accept_offer(
                    &self,
                    session: SessionId,
                    principal: &str,
                    at: i64,
                ) -> StoreResult<Option<Role>> {
                    let sid = session.to_string();
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    Self::lock_session(&mut tx, &sid).await?;
                    // Taking the offer and checking that it is live are one statement: an
                    // offer whose maker left the session (or that expired) gives nothing.
                    let role: Option<String> = sqlx::query_scalar(&format!(
                        "DELETE FROM session_offers WHERE session_id = $1 AND principal = $2 \
                         AND {} AND {OFFER_FINDS_ITS_ACCOUNT} RETURNING role",
                        live_offer("$3", "$4", "$5")
                    ))
                    .bind(&sid)
                    .bind(principal)
                    .bind_live(at)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    let Some(role) = role.as_deref().map(stored_role).transpose()? else {
                        return Ok(None);
                    };
                    put_role(&mut tx, &sid, principal, role).await?;
                    tx.commit().await.map_err(db_error)?;
                    Ok(Some(role))
                }

                async fn decline_offer(
                    &self,
                    session: SessionId,
                    principal: &str,
                ) -> StoreResult<bool> {
                    let n = sqlx::query(
                        "DELETE FROM session_offers WHERE session_id = $1 AND principal = $2",
                    )
                    .bind(session.to_string())
                    .bind(principal)
                    .execute(self.writes())
                    .await
                    .map_err(db_error)?
                    .rows_affected();
                    Ok(n > 0)
                }

                async fn memberships(
                    &self,
                    principal: &str,
                ) -> StoreResult<Vec<(SessionId, Role)>> {
                    let rows = sqlx::query(
                        "SELECT session_id, role FROM session_members WHERE principal = $1",
                    )
                    .bind(principal)
                    .fetch_all(self.reads())
                    .await
                    .map_err(db_error)?;
                    rows.iter()
                        .map(|r| {
                            Ok((
                                stored_session(r.try_get("session_id").map_err(db_error)?)?,
                                stored_role(r.try_get("role").map_err(db_error)?)?,
                            ))
                        })
                        .collect()
                }

                async fn create_share_link(&self, link: &ShareLinkRow) -> StoreResult<()> {
                    sqlx::query(
                        "INSERT INTO share_links (id, token_hash, session_id, role, created_by, \
                         created_at, expires_at, uses_left, max_uses) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                    )
                    .bind(&link.info.id)
                    .bind(&link.token_hash)
                    .bind(link.session.to_string())
                    .bind(link.info.role.as_str())
                    .bind(&link.info.created_by)
                    .bind(link.info.created_at)
                    .bind(link.info.expires_at)
                    .bind(link.info.uses_left)
                    .bind(link.info.max_uses)
                    .execute(self.writes())
                    .await
                    .map_err(db_error)?;
                    Ok(())
                }

                async fn redeem_share_link(
                    &self,
                    token_hash: &str,
                    principal: &str,
                    at: i64,
                ) -> StoreResult<Option<(SessionId, Role)>> {
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    // One conditional UPDATE spends the use and locks the link's row: links
                    // redeemed on several nodes at once never go below zero uses.
                    // A link dies with its creator's role: it grants only while whoever made it
                    // still owns the session (or administers the server) and is not revoked.
                    let row = sqlx::query(&format!(
                        "UPDATE share_links SET uses_left = uses_left - 1 WHERE token_hash = $1 \
                         AND {} RETURNING id, session_id, role",
                        live_link("$2", "$3", "$4")
                    ))
                    .bind(token_hash)
                    .bind_live(at)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    let Some(row) = row else {
                        return Ok(None);
                    };
                    let id: String = row.try_get("id").map_err(db_error)?;
                    let session: String = row.try_get("session_id").map_err(db_error)?;
                    let role: String = row.try_get("role").map_err(db_error)?;
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
                    .map_err(db_error)?;
                    let now: String = sqlx::query_scalar(
                        "SELECT role FROM session_members WHERE session_id = $1 AND principal = $2",
                    )
                    .bind(&session)
                    .bind(principal)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    tx.commit().await.map_err(db_error)?;
                    Ok(Some((stored_session(&session)?, stored_role(&now)?)))
                }

                async fn share_link_preview(
                    &self,
                    token_hash: &str,
                    at: i64,
                ) -> StoreResult<Option<(SessionId, Role, String)>> {
                    let row = sqlx::query(&format!(
                        "SELECT session_id, role, created_by FROM share_links \
                         WHERE token_hash = $1 AND {}",
                        live_link("$2", "$3", "$4")
                    ))
                    .bind(token_hash)
                    .bind_live(at)
                    .fetch_optional(self.reads())
                    .await
                    .map_err(db_error)?;
                    let Some(row) = row else {
                        return Ok(None);
                    };
                    let session: String = row.try_get("session_id").map_err(db_error)?;
                    let role: String = row.try_get("role").map_err(db_error)?;
                    let by: String = row.try_get("created_by").map_err(db_error)?;
                    Ok(Some((stored_session(&session)?, stored_role(&role)?, by)))
                }

                async fn revoke_share_link(
                    &self,
                    id: &str,
                    at: i64,
                ) -> StoreResult<(SessionId, Vec<String>)> {
                    let mut tx = self.writes().begin().await.map_err(db_error)?;
                    let link_session: String =
                        sqlx::query_scalar("SELECT session_id FROM share_links WHERE id = $1")
                            .bind(id)
                            .fetch_one(&mut *tx)
                            .await
                            .map_err(db_error)?;
                    Self::lock_session(&mut tx, &link_session).await?;
                    let session: String = sqlx::query_scalar(
                        "UPDATE share_links SET revoked_at = COALESCE(revoked_at, $1) \
                         WHERE id = $2 RETURNING session_id",
                    )
                    .bind(at)
                    .bind(id)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    let members: Vec<String> = sqlx::query_scalar(
                        "DELETE FROM session_members WHERE session_id = $1 AND via_link = $2 \
                         RETURNING principal",
                    )
                    .bind(&session)
                    .bind(id)
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(db_error)?;
                    an_owner_remains(&mut tx, &session).await?;
                    tx.commit().await.map_err(db_error)?;
                    Ok((stored_session(&session)?, members))
                }

                async fn share_link_session(&self, id: &str) -> StoreResult<SessionId> {
                    let session: String =
                        sqlx::query_scalar("SELECT session_id FROM share_links WHERE id = $1")
                            .bind(id)
                            .fetch_one(self.reads())
                            .await
                            .map_err(db_error)?;
                    stored_session(&session)
                }

                async fn owned_sessions(&self, principal: &str) -> StoreResult<u64> {
                    owned_total(
                        self.reads(),
                        "SELECT COUNT(*) FROM session_members WHERE principal = $1 AND role = $2",
                        principal,
                    )
                    .await
                }

                async fn owned_log_bytes(&self, principal: &str) -> StoreResult<u64> {
                    owned_total(self.reads(), Self::OWNED_LOG_BYTES, principal).await
                }

                async fn share_links(&self, session: SessionId) -> StoreResult<Vec<ShareLinkRow>> {
                    let rows = sqlx::query(
                        "SELECT id, token_hash, role, created_by, created_at, expires_at, \
                         uses_left, max_uses, revoked_at FROM share_links WHERE session_id = $1 \
                         ORDER BY created_at DESC, id",
                    )
                    .bind(session.to_string())
                    .fetch_all(self.reads())
                    .await
                    .map_err(db_error)?;
                    rows.iter()
                        .map(|r| {
                            Ok(ShareLinkRow {
                                info: ShareLinkInfo {
                                    id: r.try_get("id").map_err(db_error)?,
                                    role: stored_role(r.try_get("role").map_err(db_error)?)?,
                                    created_by: r.try_get("created_by").map_err(db_error)?,
                                    created_at: r.try_get("created_at").map_err(db_error)?,
                                    expires_at: r.try_get("expires_at").map_err(db_error)?,
                                    uses_left: r.try_get("uses_left").map_err(db_error)?,
                                    max_uses: r.try_get("max_uses").map_err(db_error)?,
                                    revoked_at: r.try_get("revoked_at").map_err(db_error)?,
                                },
                                token_hash: r.try_get("token_hash").map_err(db_error)?,
                                session,
                            })
                        })
                        .collect()
                }
            }

            /// Gives `principal` `role` on session `sid` (replacing any other), inside the
            /// caller's transaction; a [`StoreError::Conflict`] ([`LAST_OWNER`]) when that takes
            /// the owner role from the session's last owner.
            async fn put_role(
                tx: &mut sqlx::Transaction<'_, $db>,
                sid: &str,
                principal: &str,
                role: Role,
            ) -> StoreResult<()> {
                let was = role_in(tx, sid, principal).await?;
                sqlx::query(
                    "INSERT INTO session_members (session_id, principal, role) \
                     VALUES ($1, $2, $3) \
                     ON CONFLICT (session_id, principal) DO UPDATE SET role = excluded.role",
                )
                .bind(sid)
                .bind(principal)
                .bind(role.as_str())
                .execute(&mut **tx)
                .await
                .map_err(db_error)?;
                if was == Some(Role::Owner) {
                    an_owner_remains(tx, sid).await?;
                }
                Ok(())
            }

            /// How many live offers meet `cond` (on `$1`, the session, and `$2`, the name of
            /// `offer`) at its time, inside the caller's transaction.
            async fn live_offers(
                tx: &mut sqlx::Transaction<'_, $db>,
                cond: &str,
                sid: &str,
                offer: &OfferRow,
            ) -> StoreResult<i64> {
                sqlx::query_scalar(&format!(
                    "SELECT COUNT(*) FROM session_offers WHERE {cond} AND {}",
                    live_offer("$3", "$4", "$5")
                ))
                .bind(sid)
                .bind(&offer.principal)
                .bind_live(offer.offered_at)
                .fetch_one(&mut **tx)
                .await
                .map_err(db_error)
            }

            /// An offer read with [`OFFER_COLS`].
            fn offer_row(r: &<$db as sqlx::Database>::Row) -> StoreResult<OfferRow> {
                Ok(OfferRow {
                    session: stored_session(r.try_get("session_id").map_err(db_error)?)?,
                    principal: r.try_get("principal").map_err(db_error)?,
                    role: stored_role(r.try_get("role").map_err(db_error)?)?,
                    offered_by: r.try_get("offered_by").map_err(db_error)?,
                    offered_at: r.try_get("offered_at").map_err(db_error)?,
                    expires_at: r.try_get("expires_at").map_err(db_error)?,
                })
            }

            /// `principal`'s role on session `sid`, inside the caller's transaction.
            async fn role_in(
                tx: &mut sqlx::Transaction<'_, $db>,
                sid: &str,
                principal: &str,
            ) -> StoreResult<Option<Role>> {
                let role: Option<String> = sqlx::query_scalar(
                    "SELECT role FROM session_members WHERE session_id = $1 AND principal = $2",
                )
                .bind(sid)
                .bind(principal)
                .fetch_optional(&mut **tx)
                .await
                .map_err(db_error)?;
                role.as_deref().map(stored_role).transpose()
            }

            /// A [`StoreError::Conflict`] unless session `sid` still has an owner, inside the
            /// caller's transaction (which the error rolls back).
            async fn an_owner_remains(
                tx: &mut sqlx::Transaction<'_, $db>,
                sid: &str,
            ) -> StoreResult<()> {
                let owners: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM session_members WHERE session_id = $1 AND role = $2",
                )
                .bind(sid)
                .bind(Role::Owner.as_str())
                .fetch_one(&mut **tx)
                .await
                .map_err(db_error)?;
                match owners {
                    0 => Err(StoreError::Conflict(LAST_OWNER)),
                    _ => Ok(()),
                }
            }

            /// The number `sql` gives for `principal` (`$1`) as an owner (`$2`), at least 0.
            async fn owned_total(
                pool: &sqlx::Pool<$db>,
                sql: &'static str,
                principal: &str,
            ) -> StoreResult<u64> {
                let n: i64 = sqlx::query_scalar(sql)
                    .bind(principal)
                    .bind(Role::Owner.as_str())
                    .fetch_one(pool)
                    .await
                    .map_err(db_error)?;
                Ok(n.max(0) as u64)
            }

            /// Stores a refresh token's hash in `family`, inside the caller's transaction.
            async fn insert_refresh(
                tx: &mut sqlx::Transaction<'_, $db>,
                family: &str,
                row: &RefreshRow,
            ) -> StoreResult<()> {
                sqlx::query(
                    "INSERT INTO refresh_tokens (token_hash, family, user_name, created_at, \
                     expires_at) VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(&row.token_hash)
                .bind(family)
                .bind(&row.user)
                .bind(row.created_at)
                .bind(row.expires_at)
                .execute(&mut **tx)
                .await
                .map_err(db_error)?;
                Ok(())
            }
        }
    };
}

pub(crate) use access_store;

#[cfg(test)]
mod tests {
    use sqlx::sqlite::SqlitePoolOptions;

    #[tokio::test]
    async fn sqlite_binds_numbered_dollar_placeholders_by_number_in_any_order_and_repeated() {
        // arrange
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}?mode=rwc", dir.path().join("p.db").display());
        let pool = SqlitePoolOptions::new().connect(&url).await.unwrap();
        // act: $2 appears before $1, and $1 twice
        let (a, b): (String, i64) = sqlx::query_as("SELECT $2 || '-' || $1, $1 + 0")
            .bind(7_i64)
            .bind("x")
            .fetch_one(&pool)
            .await
            .unwrap();
        // assert
        assert_eq!((a.as_str(), b), ("x-7", 7));
    }
}
