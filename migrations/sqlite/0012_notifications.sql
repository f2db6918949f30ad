-- Notifications (issue 16): a durable outbox, filled in the transaction that commits the entry.
--
-- The trigger below inserts one outbox row for each committed entry whose kind may notify
-- somebody, inside the appending transaction: an entry is never stored without its outbox
-- row, and a node that crashes after the commit leaves the row for any node to send.
-- A sender claims rows (`claimed_by`, `claimed_until`) with one conditional UPDATE; a row
-- whose claim expired (its sender crashed) is claimed again. `state` is pending, sent or
-- dropped; `reason` says why a row was dropped or why its last attempt failed.
CREATE TABLE notify_outbox (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id    TEXT    NOT NULL,
    seq           BIGINT  NOT NULL,
    kind          TEXT    NOT NULL,
    ts            BIGINT  NOT NULL,
    state         TEXT    NOT NULL DEFAULT 'pending',
    attempts      BIGINT  NOT NULL DEFAULT 0,
    next_at       BIGINT  NOT NULL DEFAULT 0,
    claimed_by    TEXT,
    claimed_until BIGINT,
    reason        TEXT,
    UNIQUE (session_id, seq)
);
CREATE INDEX notify_outbox_pending ON notify_outbox (state, next_at);

CREATE TRIGGER notify_outbox_on_entry AFTER INSERT ON entries
WHEN NEW.kind IN ('agent.permission.request', 'agent.permission.resolved', 'agent.result',
                  'agent.stalled', 'agent.exit', 'agent.restart', 'bridge.disconnected',
                  'input.failed', 'session.ended')
BEGIN
    INSERT INTO notify_outbox (session_id, seq, kind, ts)
    VALUES ((SELECT id FROM sessions WHERE pk = NEW.session_pk), NEW.seq, NEW.kind, NEW.ts)
    ON CONFLICT DO NOTHING;
END;

-- Web Push subscriptions, per user and device.
CREATE TABLE push_subscriptions (
    id          TEXT    PRIMARY KEY,
    principal   TEXT    NOT NULL,
    device      TEXT    NOT NULL,
    endpoint    TEXT    NOT NULL UNIQUE,
    p256dh      TEXT    NOT NULL,
    auth        TEXT    NOT NULL,
    created_at  BIGINT  NOT NULL
);
CREATE INDEX push_subscriptions_principal ON push_subscriptions (principal);
