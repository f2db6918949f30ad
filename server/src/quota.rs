//! Per-account quotas: how many sessions an account may own, how many of them may have a live
//! bridge at once, how many bytes their logs may hold and how much checkpoint content they may
//! have stored. Administrators (and the bootstrap
//! admin) have no quotas.
//!
//! Owned sessions and stored bytes are the store's figures. Live sessions are counted here, on
//! this node, while bridge connections hold a [`Live`] guard; the stored bytes of an account
//! with a live session are read from the store when its first one attaches and then kept
//! current by the bridges that append, so a check never scans the log.
//!
//! Calls `store` and reads the configuration; the transports call it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use moor_protocol::SessionId;

use crate::access::Principal;
use crate::config::ServerConfig;
use crate::store::{AccessStore, CheckpointStore, StoreError};

/// The limits in effect (zero: none).
#[derive(Debug, Clone, Copy)]
struct Limits {
    sessions: u64,
    live: u64,
    log_bytes: u64,
    blob_bytes: u64,
}

/// One account's live sessions on this node and its stored log bytes.
#[derive(Debug, Default)]
struct Account {
    /// Live bridge connections per session (a reconnecting bridge briefly has two).
    live: HashMap<SessionId, usize>,
    /// Bytes stored in the logs of the account's sessions, as of the first attach plus what
    /// was appended since.
    log_bytes: u64,
}

/// The accounts with a live session on this node. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Quotas {
    limits: Limits,
    accounts: Arc<Mutex<HashMap<String, Account>>>,
}

/// Why a quota refused something: the message says which quota and what to do.
#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    /// The quota is used up.
    #[error("{0}")]
    Exceeded(String),
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Quotas {
    /// The quotas `config` sets.
    pub fn new(config: &ServerConfig) -> Self {
        Self {
            limits: Limits {
                sessions: config.max_sessions_per_account,
                live: config.max_live_sessions_per_account,
                log_bytes: config.max_log_bytes_per_account,
                blob_bytes: config.max_blob_bytes_per_account,
            },
            accounts: Arc::default(),
        }
    }

    /// Whether `who` may own one more session (checked before a bridge creates one).
    pub async fn may_create(
        &self,
        store: &dyn AccessStore,
        who: &Principal,
    ) -> Result<(), QuotaError> {
        let owned = store.owned_sessions(&who.name);
        within(who, self.limits.sessions, owned, |owned| {
            format!(
                "quota: {} owns {owned} sessions, the most allowed \
                 (--max-sessions-per-account)",
                who.name
            )
        })
        .await
    }

    /// Whether `who` may store one more checkpoint blob: what the account has sent so far
    /// ([`CheckpointStore::uploaded_blob_bytes`]) is under `--max-blob-bytes-per-account`. The
    /// size of the blob being sent is not known before it is read, so an account may pass the
    /// quota by one blob (at most `--max-blob-bytes`).
    pub async fn may_store_blob(
        &self,
        store: &dyn CheckpointStore,
        who: &Principal,
    ) -> Result<(), QuotaError> {
        let sent = store.uploaded_blob_bytes(&who.name);
        within(who, self.limits.blob_bytes, sent, |sent| {
            format!(
                "quota: {} has stored {sent} bytes of checkpoint content, the most allowed \
                 (--max-blob-bytes-per-account); checkpoints already stored stay readable",
                who.name
            )
        })
        .await
    }

    /// Marks `session` live for its owner `who` while the returned guard lives, if the
    /// account's live-session and log-bytes quotas allow it. A session already live for the
    /// account (a bridge reconnecting) always may.
    pub async fn attach(
        &self,
        store: &dyn AccessStore,
        who: &Principal,
        session: SessionId,
    ) -> Result<Live, QuotaError> {
        if who.admin {
            return Ok(Live::none());
        }
        // Read the stored bytes outside the lock, only for an account not yet live here.
        let stored = match self.is_live(&who.name) {
            true => None,
            false if self.limits.log_bytes == 0 => Some(0),
            false => Some(store.owned_log_bytes(&who.name).await?),
        };
        let mut accounts = self.lock();
        let account = accounts.entry(who.name.clone()).or_default();
        if account.live.is_empty() {
            account.log_bytes = stored.unwrap_or(0);
        }
        let already = account.live.contains_key(&session);
        let refused = if !already && self.limits.live > 0 {
            (account.live.len() as u64 >= self.limits.live).then(|| {
                format!(
                    "quota: {} has {} live sessions, the most allowed \
                     (--max-live-sessions-per-account)",
                    who.name,
                    account.live.len()
                )
            })
        } else {
            None
        }
        .or_else(|| {
            let full = self.limits.log_bytes > 0 && account.log_bytes >= self.limits.log_bytes;
            full.then(|| self.log_bytes_message(&who.name, account.log_bytes))
        });
        if let Some(message) = refused {
            if account.live.is_empty() {
                accounts.remove(&who.name);
            }
            return Err(QuotaError::Exceeded(message));
        }
        *account.live.entry(session).or_default() += 1;
        Ok(Live {
            held: Some((self.clone(), who.name.clone(), session)),
        })
    }

    /// How many sessions of `account` have a live bridge on this node.
    pub fn live_sessions(&self, account: &str) -> usize {
        self.lock().get(account).map_or(0, |a| a.live.len())
    }

    fn is_live(&self, account: &str) -> bool {
        self.lock().contains_key(account)
    }

    fn log_bytes_message(&self, account: &str, bytes: u64) -> String {
        format!(
            "quota: {account}'s logs hold {bytes} of {} bytes allowed \
             (--max-log-bytes-per-account)",
            self.limits.log_bytes
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Account>> {
        self.accounts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether `who` is under `limit` (zero: none): refused with `message(used)` once `used`, the
/// store's figure, has reached it. Administrators are never refused, and `used` is read only
/// when the limit applies.
async fn within(
    who: &Principal,
    limit: u64,
    used: impl Future<Output = Result<u64, StoreError>>,
    message: impl FnOnce(u64) -> String,
) -> Result<(), QuotaError> {
    if who.admin || limit == 0 {
        return Ok(());
    }
    let used = used.await?;
    if used >= limit {
        return Err(QuotaError::Exceeded(message(used)));
    }
    Ok(())
}

/// A live bridge's hold on its account's quotas: released on drop.
#[derive(Debug)]
pub struct Live {
    held: Option<(Quotas, String, SessionId)>,
}

impl Live {
    /// A guard that counts nothing (for accounts without quotas).
    fn none() -> Self {
        Self { held: None }
    }

    /// Charges `bytes` about to be appended to the account's stored log bytes; refuses once
    /// the account's quota is used up (nothing is charged then).
    pub fn charge_log(&self, bytes: u64) -> Result<(), QuotaError> {
        let Some((quotas, name, _)) = &self.held else {
            return Ok(());
        };
        let mut accounts = quotas.lock();
        let Some(account) = accounts.get_mut(name) else {
            return Ok(());
        };
        let total = account.log_bytes.saturating_add(bytes);
        let limit = quotas.limits.log_bytes;
        if limit > 0 && total > limit {
            let message = quotas.log_bytes_message(name, account.log_bytes);
            return Err(QuotaError::Exceeded(message));
        }
        account.log_bytes = total;
        Ok(())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let Some((quotas, name, session)) = self.held.take() else {
            return;
        };
        let mut accounts = quotas.lock();
        let Some(account) = accounts.get_mut(&name) else {
            return;
        };
        if let Some(n) = account.live.get_mut(&session) {
            *n -= 1;
            if *n == 0 {
                account.live.remove(&session);
            }
        }
        if account.live.is_empty() {
            accounts.remove(&name);
        }
    }
}
