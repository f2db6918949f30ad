-- Notifications, continued (issue 16): bounded outbox, self-hosted sinks, per-user preferences.
--
-- `settled_at` is when a row was sent or dropped: settled rows are deleted once older than
-- `--notify-keep-ms`. Rows settled before this migration count as settled at their entry's time.
ALTER TABLE notify_outbox ADD COLUMN settled_at BIGINT;
UPDATE notify_outbox SET settled_at = ts WHERE state <> 'pending';
CREATE INDEX notify_outbox_settled ON notify_outbox (settled_at);
CREATE INDEX notify_outbox_session ON notify_outbox (session_id, state);
