-- Notifications, continued (issue 16): bounded outbox, self-hosted sinks, per-user preferences.
--
-- `settled_at` is when a row was sent or dropped: settled rows are deleted once older than
-- `--notify-keep-ms`. Rows settled before this migration count as settled at their entry's time.
ALTER TABLE notify_outbox ADD COLUMN settled_at BIGINT;
UPDATE notify_outbox SET settled_at = ts WHERE state <> 'pending';
CREATE INDEX notify_outbox_settled ON notify_outbox (settled_at);
CREATE INDEX notify_outbox_session ON notify_outbox (session_id, state);

-- Self-hosted sinks per user: `ntfy` (a topic URL, `secret` an optional access token) and
-- `webhook` (a URL, `secret` the HMAC-SHA256 key that signs each request).
CREATE TABLE notify_sinks (
    id          TEXT    PRIMARY KEY,
    principal   TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    label       TEXT    NOT NULL,
    url         TEXT    NOT NULL,
    secret      TEXT    NOT NULL,
    created_at  BIGINT  NOT NULL
);
CREATE INDEX notify_sinks_principal ON notify_sinks (principal);
