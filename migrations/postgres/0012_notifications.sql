-- Notifications (issue 16): a durable outbox, filled in the transaction that commits the entry.
--
-- The trigger below inserts one outbox row for each committed entry whose kind may notify
-- somebody, inside the appending transaction: an entry is never stored without its outbox
-- row, and a node that crashes after the commit leaves the row for any node to send.
-- Senders claim rows with FOR UPDATE SKIP LOCKED (`claimed_by`, `claimed_until`); a row whose
-- claim expired (its sender crashed) is claimed again. `state` is pending, sent or dropped;
-- `reason` says why a row was dropped or why its last attempt failed.
CREATE TABLE notify_outbox (
    id            BIGSERIAL PRIMARY KEY,
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

CREATE FUNCTION notify_outbox_on_entry() RETURNS trigger AS $$
BEGIN
    INSERT INTO notify_outbox (session_id, seq, kind, ts)
    VALUES (NEW.session_id::text, NEW.seq, NEW.kind, NEW.ts)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER notify_outbox_on_entry AFTER INSERT ON entries
FOR EACH ROW
WHEN (NEW.kind IN ('agent.permission.request', 'agent.permission.resolved', 'agent.result',
                   'agent.stalled', 'agent.exit', 'agent.restart', 'bridge.disconnected',
                   'input.failed', 'session.ended'))
EXECUTE FUNCTION notify_outbox_on_entry();

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
