//! Live session state: one follower task per session folds the log, in seq order, into a
//! [`SessionState`] and publishes it on a `watch` channel.
//!
//! The follower reads through a [`Tail`] (store backlog, then the hub), so it sees every entry
//! whichever process appended it, starting from the latest snapshot rather than entry 1. It
//! stores a new snapshot every [`SNAPSHOT_EVERY`] entries, and writes the server's
//! `session.interrupted` record when the link is lost or the agent dies while work was in
//! flight (keyed by the seq of the entry that caused it, so several followers write it once).
//!
//! A follower stops once nobody watches its state any more (a live bridge watches its
//! session's for as long as it is connected) and it has folded the session's log up to its
//! head, saving a snapshot; the next watcher starts a new one from the latest snapshot. So a
//! session nobody looks at and no bridge feeds costs no task and no channel.
//!
//! Part of the session core: calls `session::{log, tail}`, `store` and `hub`; never a transport.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use moor_protocol::state::{SessionState, SESSION_INTERRUPTED};
use moor_protocol::{close, kinds, now_ms, Entry, EntryBody, Seq, SessionId};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::log::Log;
use super::tail::Tail;
use crate::hub::Hub;
use crate::store::{Append, IdemKey, LogStore, StoreError, StoreResult};

/// Entries folded between two stored snapshots.
pub const SNAPSHOT_EVERY: u64 = 1000;
/// How long [`States::current`] waits for the follower to reach a head.
const CATCH_UP: Duration = Duration::from_secs(10);
/// A follower paused by a store error tries again after this, doubling up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// Per-session state followers. Cheap to clone.
#[derive(Clone)]
pub struct States {
    store: Arc<dyn LogStore>,
    hub: Hub,
    log: Log,
    tasks: TaskTracker,
    shutdown: CancellationToken,
    followers: Arc<Mutex<HashMap<SessionId, Publisher>>>,
    count: FollowerCount,
}

/// How many followers run (on this node). Cheap to clone; every clone reads the same count.
#[derive(Debug, Clone, Default)]
pub struct FollowerCount(Arc<AtomicUsize>);

impl FollowerCount {
    /// The number of followers running now.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self, n: usize) {
        self.0.store(n, Ordering::Relaxed);
    }
}

/// Where a follower publishes its session's state; watchers subscribe to it.
type Publisher = Arc<watch::Sender<Arc<SessionState>>>;

impl std::fmt::Debug for States {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("States").finish_non_exhaustive()
    }
}

impl States {
    /// Followers read from `store` and `hub` and append through `log`.
    pub fn new(
        store: Arc<dyn LogStore>,
        hub: Hub,
        log: Log,
        tasks: TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            store,
            hub,
            log,
            tasks,
            shutdown,
            followers: Arc::default(),
            count: FollowerCount::default(),
        }
    }

    /// Reports the number of running followers in `count`.
    pub fn counted_by(mut self, count: FollowerCount) -> Self {
        self.count = count;
        self
    }

    /// The live state of `session`, starting its follower if none runs.
    pub fn watch(&self, session: SessionId) -> watch::Receiver<Arc<SessionState>> {
        let mut followers = self.followers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = followers.get(&session) {
            return tx.subscribe();
        }
        let (tx, rx) = watch::channel(Arc::new(SessionState::default()));
        let tx = Arc::new(tx);
        followers.insert(session, tx.clone());
        self.count.set(followers.len());
        let this = self.clone();
        self.tasks.spawn(async move {
            // A store error (a database restarting, SQLite busy) pauses the follower, not ends
            // it: its watchers keep their channel and see the state move on once it resumes.
            let mut pause = RETRY_FIRST;
            loop {
                match this.follow(session, &tx).await {
                    Ok(()) => break,
                    Err(e) if tx.receiver_count() > 0 && !this.shutdown.is_cancelled() => {
                        tracing::warn!(error = ?e, %session, retry_in = ?pause, "state follower paused by a store error");
                        tokio::select! {
                            _ = this.shutdown.cancelled() => break,
                            _ = tokio::time::sleep(pause) => {}
                        }
                        pause = (pause * 2).min(RETRY_MAX);
                    }
                    Err(e) => {
                        tracing::error!(error = ?e, %session, "state follower stopped");
                        break;
                    }
                }
            }
            // Only this follower's own entry: a retired follower's session may have a new one.
            let mut followers = this.followers.lock().unwrap_or_else(|p| p.into_inner());
            if followers.get(&session).is_some_and(|t| Arc::ptr_eq(t, &tx)) {
                followers.remove(&session);
            }
            this.count.set(followers.len());
        });
        rx
    }

    /// Whether a follower runs for `session` (on this node).
    pub fn is_following(&self, session: SessionId) -> bool {
        self.followers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&session)
    }

    /// Whether a follower may stop: nobody watches, checked under the lock that new watchers
    /// take, so none subscribes to a follower that is going away. On true the follower is
    /// already out of the map.
    fn retire(&self, session: SessionId, tx: &watch::Sender<Arc<SessionState>>) -> bool {
        let mut followers = self.followers.lock().unwrap_or_else(|p| p.into_inner());
        if tx.receiver_count() > 0 {
            return false;
        }
        followers.remove(&session);
        self.count.set(followers.len());
        true
    }

    /// The state of `session` once it has folded at least up to `head`.
    ///
    /// A follower that is not there by [`CATCH_UP`] (the store is unavailable, or the log is
    /// long and the machine busy) is `Unavailable`: the caller is told to retry, not that
    /// something broke.
    pub async fn current(&self, session: SessionId, head: Seq) -> StoreResult<Arc<SessionState>> {
        let caught_up = tokio::time::timeout(CATCH_UP, async {
            loop {
                // A follower that stopped (it had retired, or the server is shutting down)
                // is replaced by the next `watch`.
                let mut rx = self.watch(session);
                if let Ok(s) = rx.wait_for(|s| s.head >= head).await {
                    return s.clone();
                }
                if self.shutdown.is_cancelled() {
                    return std::future::pending().await;
                }
            }
        })
        .await;
        caught_up.map_err(|_| {
            StoreError::Unavailable(anyhow::anyhow!(
                "the session's state has not been folded up to seq {head} yet"
            ))
        })
    }

    async fn follow(
        &self,
        session: SessionId,
        tx: &watch::Sender<Arc<SessionState>>,
    ) -> StoreResult<()> {
        // Resuming after a pause: from what the watchers already have.
        let published = tx.borrow().clone();
        let mut state = if published.head > Seq::ZERO {
            (*published).clone()
        } else {
            match self.store.latest_snapshot(session).await? {
                Some((_, json)) => serde_json::from_str(&json).unwrap_or_else(|e| {
                    tracing::warn!(error = %e, %session, "unreadable state snapshot; folding from the start");
                    SessionState::default()
                }),
                None => SessionState::default(),
            }
        };
        let mut tail = Tail::new(self.store.clone(), &self.hub, session, state.head);
        let mut since_snapshot = 0u64;
        tx.send_replace(Arc::new(state.clone()));
        // Whether the follower may try to retire: not again until it folds something after
        // finding itself behind the log (the watchers' last entries may still be on the way).
        let mut may_retire = true;
        loop {
            let frame = tokio::select! {
                _ = self.shutdown.cancelled() => return Ok(()),
                _ = tx.closed(), if may_retire => {
                    // Unwatched: stop once everything stored is folded (an interruption needs
                    // the bridge's last entries), leaving a snapshot to start from next time.
                    let head = self.store.find_session(&session.to_string()).await?.head_seq;
                    if state.head < head {
                        may_retire = false;
                        continue;
                    }
                    if since_snapshot > 0 {
                        self.snapshot(session, &state).await?;
                    }
                    if self.retire(session, tx) {
                        return Ok(());
                    }
                    continue;
                }
                f = tail.next() => f?,
            };
            may_retire = true;
            // Fold everything at hand before publishing: one update per burst.
            let mut batch = vec![frame];
            while let Some(f) = tail.ready() {
                batch.push(f);
            }
            for f in batch.iter().filter(|f| f.as_reset().is_none()) {
                // What an entry interrupts is read off the state before it is folded in.
                if let Some(cause) = interruption_cause(&state, f.entry()) {
                    self.record_interruption(session, &state, cause, f.entry().seq);
                }
                state.apply(f.entry());
            }
            since_snapshot += batch.len() as u64;
            if since_snapshot >= SNAPSHOT_EVERY {
                since_snapshot = 0;
                self.snapshot(session, &state).await?;
            }
            tx.send_replace(Arc::new(state.clone()));
        }
    }

    async fn snapshot(&self, session: SessionId, state: &SessionState) -> StoreResult<()> {
        match serde_json::to_string(state) {
            Ok(json) => self.store.save_snapshot(session, state.head, &json).await,
            Err(e) => {
                tracing::warn!(error = %e, "could not encode a state snapshot");
                Ok(())
            }
        }
    }

    fn record_interruption(&self, session: SessionId, before: &SessionState, cause: &str, at: Seq) {
        let append = Append {
            ts: now_ms(),
            kind: SESSION_INTERRUPTED.into(),
            author: kinds::AUTHOR_SERVER.into(),
            payload: EntryBody::from(before.interruption(cause)).payload().into(),
            key: IdemKey::Receipt(at),
        };
        // Not awaited: the follower must not wait on the committer that feeds it.
        if let Err(e) = self.log.submit_now(session, vec![append]) {
            tracing::warn!(error = ?e, "could not record an interruption");
        }
    }
}

/// Whether `entry` interrupts work that `before` had in flight, and how.
fn interruption_cause(before: &SessionState, entry: &Entry) -> Option<&'static str> {
    if !before.is_busy() {
        return None;
    }
    match entry.kind.as_str() {
        kinds::BRIDGE_DISCONNECTED => {
            // Planned moves are not interruptions: the bridge reconnects at once.
            let code = match entry.body() {
                Ok(EntryBody::BridgeDisconnected(d)) => d.close_code,
                _ => None,
            };
            let planned = matches!(
                code,
                Some(
                    close::SUPERSEDED
                        | close::SUPERSEDED_BY_SAME_BRIDGE
                        | close::LIFETIME
                        | close::GOING_AWAY
                        | close::SESSION_ENDED
                )
            );
            (!planned).then_some("link")
        }
        // A new agent while the last one's work is in flight: that one died unrecorded (its
        // bridge was killed with it).
        kinds::AGENT_EXIT | kinds::AGENT_RESTART | kinds::AGENT_START => Some("agent"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

    use moor_protocol::state::Phase;

    use super::*;

    fn server_entry(kind: &str, seq: u64) -> Append {
        Append {
            ts: now_ms(),
            kind: kind.into(),
            author: kinds::AUTHOR_SERVER.into(),
            payload: serde_json::Value::Object(Default::default()).into(),
            key: IdemKey::Receipt(Seq(seq)),
        }
    }

    /// Failure guard on every wait.
    const WAIT: Duration = Duration::from_secs(10);

    /// Yields to the runtime until `states` has no follower for `session` (bounded).
    async fn until_retired(states: &States, session: SessionId) {
        tokio::time::timeout(WAIT, async {
            while states.is_following(session) {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the follower stops");
    }

    #[tokio::test]
    async fn a_follower_stops_once_nobody_watches_and_restarts_on_demand() {
        // arrange: a real SQLite store, two sessions with followers
        let dir = tempfile::tempdir().unwrap();
        let (_, store, log, states) = super::super::on_sqlite(&dir).await;
        let store = store.log;
        let ended = store.open_session("ended", None).await.unwrap().id;
        let open = store.open_session("open", None).await.unwrap().id;
        let mut watching = states.watch(ended);
        drop(states.watch(open));

        // act: the first session ends while watched
        log.append(ended, vec![server_entry(kinds::SESSION_ENDED, 1)])
            .await
            .unwrap();
        tokio::time::timeout(WAIT, watching.wait_for(|s| s.phase == Phase::Ended))
            .await
            .expect("the follower folds the end")
            .unwrap();

        // assert: it keeps its follower while watched, loses it when the watcher leaves; the
        // session that did not end, which nobody watches, loses its follower too
        assert!(states.is_following(ended));
        drop(watching);
        until_retired(&states, ended).await;
        until_retired(&states, open).await;
        assert_eq!(states.count.get(), 0);

        // and a new watcher gets a new follower with the same state
        let mut again = states.watch(ended);
        assert!(states.is_following(ended));
        tokio::time::timeout(WAIT, again.wait_for(|s| s.phase == Phase::Ended))
            .await
            .expect("the new follower folds the end")
            .unwrap();
    }

    #[tokio::test]
    async fn a_follower_that_meets_a_store_error_pauses_and_resumes_for_its_watchers() {
        // arrange: a real SQLite store and a session with entries, whose log table another
        // connection has taken away before anyone watches
        let dir = tempfile::tempdir().unwrap();
        let (url, store, log, states) = super::super::on_sqlite(&dir).await;
        let store = store.log;
        let session = store.open_session("s", None).await.unwrap().id;
        log.append(session, vec![server_entry(kinds::SESSION_ENDED, 1)])
            .await
            .unwrap();
        let other = sqlx::SqlitePool::connect(&url).await.unwrap();
        sqlx::query("ALTER TABLE entries RENAME TO entries_away")
            .execute(&other)
            .await
            .unwrap();

        // act: a watcher starts the follower, which cannot read the log; then the table is back
        let mut watching = states.watch(session);
        let paused = tokio::time::timeout(Duration::from_millis(300), watching.changed()).await;
        sqlx::query("ALTER TABLE entries_away RENAME TO entries")
            .execute(&other)
            .await
            .unwrap();

        // assert: the watcher's channel outlived the error (it was not closed) and carries the
        // folded log once the store answers again
        assert!(
            !matches!(paused, Ok(Err(_))),
            "the follower gave up on its watcher at the first store error"
        );
        tokio::time::timeout(WAIT, watching.wait_for(|s| s.phase == Phase::Ended))
            .await
            .expect("the follower resumes and folds the log")
            .unwrap();
        assert!(states.is_following(session));
    }
}
