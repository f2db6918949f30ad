//! Notifications: the sender that drains the store's outbox (filled in the transaction of each
//! notifying entry) into the sinks, with coalescing (`compose`), retries
//! with backoff and a recorded reason when it gives up, and removal of subscriptions their push
//! service says are gone.
//!
//! Calls `store` (outbox, members, subscriptions, leases, the log for the entries' payloads);
//! never `http`, `ws` or `sse`.

pub(crate) mod compose;
pub(crate) mod quiet;
pub(crate) mod sinks;
pub(crate) mod vapid;
pub(crate) mod webpush;

use std::collections::HashMap;
use std::sync::Arc;

use moor_protocol::api::Role;
use moor_protocol::notify::{DecisionLinks, NotifyAction, NotifyClass, PushMessage};
use moor_protocol::{now_ms, Entry, Seq};
use tokio_util::sync::CancellationToken;

use self::compose::{compose, Ages, Draft};
use self::quiet::QuietWindow;
use self::sinks::Sinks;
use self::webpush::{Delivery, WebPush};
use crate::access::action_link::ActionLinks;
use crate::config::NotifyConfig;
use crate::metrics::{NotifyMetrics, NotifyOutcome, NotifySink};
use crate::store::notify::{OutboxRow, OutboxState, CLAIM_LIMIT, MAX_PENDING_PER_SESSION};
use crate::store::{Range, StoreResult, Stores};

/// Longest backoff, in multiples of the first retry delay.
const MAX_BACKOFF_FACTOR: u32 = 64;

/// Drains the outbox: claims due rows, composes, sends, settles.
#[derive(Debug, Clone)]
pub struct Notifier {
    stores: Stores,
    node: Arc<str>,
    config: NotifyConfig,
    push: WebPush,
    sinks: Sinks,
    public_url: Arc<str>,
    metrics: NotifyMetrics,
    links: ActionLinks,
}

impl Notifier {
    /// A sender for `node`, signing with `vapid`, giving sinks decision `links`.
    pub(crate) fn new(
        stores: Stores,
        node: &str,
        config: NotifyConfig,
        vapid: vapid::Vapid,
        public_url: Arc<str>,
        metrics: NotifyMetrics,
        links: ActionLinks,
    ) -> anyhow::Result<Self> {
        let push = WebPush::new(vapid, config.vapid_subject.clone(), config.request_timeout)?;
        let sinks = Sinks::new(config.request_timeout)?;
        Ok(Self {
            stores,
            node: node.into(),
            config,
            push,
            sinks,
            public_url,
            metrics,
            links,
        })
    }

    /// Sends until `shutdown`, looking at the outbox every `poll` (and again at once while
    /// claims come back full).
    pub(crate) async fn run(self, shutdown: CancellationToken) {
        loop {
            loop {
                match self.drain_once().await {
                    Ok(n) if n as i64 >= CLAIM_LIMIT => continue,
                    Ok(_) => break,
                    Err(e) => {
                        tracing::warn!(error = ?e, "notification outbox");
                        break;
                    }
                }
            }
            if let Err(e) = self.prune().await {
                tracing::warn!(error = ?e, "notification outbox bounds");
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(self.config.poll) => {}
            }
        }
    }

    /// Deletes settled rows older than `--notify-keep-ms`, drops what a session holds beyond
    /// [`MAX_PENDING_PER_SESSION`], and counts what is left for the metrics.
    pub(crate) async fn prune(&self) -> StoreResult<()> {
        let now = now_ms();
        let before = now.saturating_sub(self.config.keep.as_millis() as i64);
        let notify = &self.stores.notify;
        let (deleted, dropped) = notify
            .prune_outbox(before, MAX_PENDING_PER_SESSION, now)
            .await?;
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "notifications dropped: a session had too many waiting"
            );
        }
        if deleted > 0 {
            tracing::debug!(deleted, "settled notifications deleted");
        }
        self.metrics.outbox.set(notify.outbox_counts().await?);
        Ok(())
    }

    /// Claims one batch of due rows and handles it; how many rows it claimed.
    pub(crate) async fn drain_once(&self) -> StoreResult<usize> {
        let now = now_ms();
        let until = now.saturating_add(self.config.claim_ttl.as_millis() as i64);
        let rows = self
            .stores
            .notify
            .claim_outbox(&self.node, now, until, CLAIM_LIMIT)
            .await?;
        let n = rows.len();
        if n > 0 {
            self.handle(rows, now).await?;
        }
        Ok(n)
    }

    async fn handle(&self, rows: Vec<OutboxRow>, now: i64) -> StoreResult<()> {
        let mut with_entries = Vec::with_capacity(rows.len());
        for row in rows {
            let entry = self.entry(&row).await?;
            with_entries.push((row, entry));
        }
        let ages = Ages {
            now,
            stale_after: self.config.stale_after.as_millis() as i64,
            bridge_lost_after: self.config.bridge_lost_after.as_millis() as i64,
        };
        let composed = compose(&with_entries, ages);
        let notify = &self.stores.notify;
        for (id, due) in composed.deferred {
            notify.retry_outbox(id, &self.node, due, None).await?;
        }
        for (id, reason) in composed.dropped {
            notify
                .settle_outbox(&[id], &self.node, OutboxState::Dropped, Some(reason), now)
                .await?;
        }
        let attempts = |ids: &[i64]| {
            with_entries
                .iter()
                .filter(|(r, _)| ids.contains(&r.id))
                .map(|(r, _)| r.attempts)
                .max()
                .unwrap_or(0)
        };
        for draft in composed.drafts {
            let tried = attempts(&draft.rows);
            self.deliver(draft, tried, now).await?;
        }
        Ok(())
    }

    /// The entry an outbox row names.
    async fn entry(&self, row: &OutboxRow) -> StoreResult<Option<Entry>> {
        let after = Seq(row.seq.0.saturating_sub(1));
        let entries = self
            .stores
            .log
            .read(row.session, Range::After(after), 1)
            .await?;
        Ok(entries.into_iter().find(|e| e.seq == row.seq))
    }

    /// Sends `draft` to every device and sink of every member of its session that has not
    /// taken it yet, then settles its rows, or, if a target failed for now, records which
    /// targets took it and puts the rows back for a retry.
    async fn deliver(&self, draft: Draft, tried: u32, now: i64) -> StoreResult<()> {
        let notify = &self.stores.notify;
        if draft.class == NotifyClass::BridgeLost
            && self
                .stores
                .leases
                .live_lease(draft.session, now)
                .await?
                .is_some()
        {
            notify
                .settle_outbox(
                    &draft.rows,
                    &self.node,
                    OutboxState::Dropped,
                    Some("the bridge came back"),
                    now,
                )
                .await?;
            return Ok(());
        }
        let name = match self
            .stores
            .log
            .find_session(&draft.session.to_string())
            .await
        {
            Ok(s) => s.name,
            Err(_) => draft.session.to_string(),
        };
        let members = self.stores.access.members(draft.session).await?;
        // After a failed attempt, the targets that took every row of it are skipped: a retry
        // goes only to those that have not got it.
        let took: HashMap<String, u64> = if tried > 0 {
            notify.deliveries(&draft.rows).await?.into_iter().collect()
        } else {
            HashMap::new()
        };
        let has = |target: &str| took.get(target).copied() >= Some(draft.rows.len() as u64);
        let mut transient = None;
        let mut delivered = 0u32;
        let mut taken = Vec::new();
        for member in members {
            if notify
                .is_muted(&member.principal, draft.session, draft.class.as_str())
                .await?
            {
                continue;
            }
            let subs = notify.subscriptions(&member.principal).await?;
            let sinks = notify.sinks(&member.principal).await?;
            if subs.is_empty() && sinks.is_empty() {
                continue;
            }
            let quiet = notify
                .quiet_hours(&member.principal)
                .await?
                .and_then(|q| QuietWindow::parse(&q).ok())
                .is_some_and(|w| w.contains(now_ms()));
            let message = self.message(&draft, &name, member.role, quiet);
            let decide = if sinks.is_empty() {
                None
            } else {
                self.decision_links(&member.principal, &message)
            };
            for sub in subs {
                let target = format!("push:{}", sub.id);
                if has(&target) {
                    delivered += 1;
                    continue;
                }
                let delivery = self.push.send(&sub, &message).await;
                self.metrics
                    .delivered(NotifySink::WebPush, outcome(&delivery));
                match delivery {
                    Delivery::Sent => {
                        delivered += 1;
                        taken.push(target);
                    }
                    Delivery::Gone => {
                        tracing::info!(principal = %sub.principal, device = %sub.device, "push subscription gone; removed");
                        notify.remove_endpoint(&sub.endpoint).await?;
                    }
                    Delivery::Retry(reason) => transient = Some(reason),
                    Delivery::Failed(reason) => {
                        tracing::warn!(principal = %sub.principal, device = %sub.device, %reason, "push delivery failed");
                    }
                }
            }
            for sink in sinks {
                let target = format!("sink:{}", sink.id);
                if has(&target) {
                    delivered += 1;
                    continue;
                }
                let delivery = self.sinks.send(&sink, &message, decide.as_ref()).await;
                self.metrics
                    .delivered(NotifySink::of_kind(&sink.kind), outcome(&delivery));
                match delivery {
                    Delivery::Sent => {
                        delivered += 1;
                        taken.push(target);
                    }
                    Delivery::Retry(reason) => transient = Some(reason),
                    Delivery::Failed(reason) => {
                        tracing::warn!(principal = %sink.principal, sink = %sink.label, kind = %sink.kind, %reason, "notification sink refused");
                    }
                    Delivery::Gone => {
                        tracing::warn!(principal = %sink.principal, sink = %sink.label, kind = %sink.kind, "notification sink gone");
                    }
                }
            }
        }
        match transient {
            None => {
                let reason = (delivered == 0).then_some("nobody to notify");
                notify
                    .settle_outbox(&draft.rows, &self.node, OutboxState::Sent, reason, now)
                    .await?;
            }
            Some(reason) if tried + 1 >= self.config.max_attempts => {
                let reason = format!("gave up after {} attempts: {reason}", tried + 1);
                notify
                    .settle_outbox(
                        &draft.rows,
                        &self.node,
                        OutboxState::Dropped,
                        Some(&reason),
                        now,
                    )
                    .await?;
            }
            Some(reason) => {
                let delay = backoff(self.config.retry_base, tried);
                // From the failure, not the claim: the wait is never shorter than the backoff.
                let due = now_ms().saturating_add(delay.as_millis() as i64);
                notify
                    .record_deliveries(&draft.rows, &self.node, &taken, now)
                    .await?;
                for id in &draft.rows {
                    notify
                        .retry_outbox(*id, &self.node, due, Some(&reason))
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// The push message `draft` becomes for someone with `role` (buttons only for those who
    /// may decide), `quiet` during their quiet hours.
    fn message(&self, draft: &Draft, session_name: &str, role: Role, quiet: bool) -> PushMessage {
        let actions =
            if draft.class == NotifyClass::Permission && !draft.close && role >= Role::Controller {
                vec![NotifyAction::Approve, NotifyAction::Deny]
            } else {
                Vec::new()
            };
        let private = self.config.private;
        PushMessage {
            tag: draft.tag.clone(),
            session: draft.session,
            class: draft.class,
            seq: draft.seq,
            count: draft.count,
            title: if private {
                String::new()
            } else {
                format!("{session_name}: {}", draft.title)
            },
            body: if private {
                String::new()
            } else {
                draft.body.clone()
            },
            request_id: draft.request_id.clone(),
            actions,
            close: draft.close,
            url: format!("{}/#/s/{}", self.public_url, draft.session),
            quiet,
            private,
        }
    }

    /// One-use Approve / Deny links for `principal`, when `message` offers them buttons.
    fn decision_links(&self, principal: &str, message: &PushMessage) -> Option<DecisionLinks> {
        let request = message.request_id.as_deref()?;
        if message.actions.is_empty() {
            return None;
        }
        let session = message.session.to_string();
        match self.links.pair(principal, &session, request) {
            Ok((approve, deny)) => {
                let url = |token: String| {
                    format!("{}/api/v1/notify/decide?link={token}", self.public_url)
                };
                Some(DecisionLinks {
                    approve: url(approve),
                    deny: url(deny),
                })
            }
            Err(e) => {
                tracing::warn!(error = ?e, "could not sign decision links");
                None
            }
        }
    }
}

/// The wait before retrying after `tried` earlier failed attempts (and this one): `base`
/// doubled per attempt, at most [`MAX_BACKOFF_FACTOR`] times `base`.
/// The metrics' name for how a delivery ended.
fn outcome(delivery: &Delivery) -> NotifyOutcome {
    match delivery {
        Delivery::Sent => NotifyOutcome::Sent,
        Delivery::Gone => NotifyOutcome::Gone,
        Delivery::Retry(_) => NotifyOutcome::Retry,
        Delivery::Failed(_) => NotifyOutcome::Failed,
    }
}

fn backoff(base: std::time::Duration, tried: u32) -> std::time::Duration {
    let factor = 2u32.saturating_pow(tried).min(MAX_BACKOFF_FACTOR);
    base.saturating_mul(factor)
}

/// Spawnable form of [`Notifier::run`] for the task tracker.
pub(crate) async fn run(notifier: Notifier, shutdown: CancellationToken) {
    notifier.run(shutdown).await;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::backoff;

    #[test]
    fn retries_back_off_doubling_up_to_64_times_the_first_delay() {
        let base = Duration::from_millis(100);
        let waits: Vec<u128> = (0..10).map(|t| backoff(base, t).as_millis()).collect();
        assert_eq!(
            waits,
            vec![100, 200, 400, 800, 1_600, 3_200, 6_400, 6_400, 6_400, 6_400]
        );
        assert_eq!(backoff(base, u32::MAX), Duration::from_millis(6_400));
    }
}
