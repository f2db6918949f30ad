-- Notifications, continued (issue 16): delivery state per (outbox row, target).
--
-- A target is one push subscription (`push:<id>`) or one sink (`sink:<id>`). A row is written
-- only for a target that answered 2xx, and only when the notification is to be retried because
-- another target failed, so the retry goes only to the targets that did not take it. Rows live
-- while their outbox row is pending: settling it deletes them, and the sender's prune deletes
-- any whose outbox row is settled or gone.
CREATE TABLE notify_deliveries (
    outbox_id  BIGINT  NOT NULL,
    target     TEXT    NOT NULL,
    at         BIGINT  NOT NULL,
    PRIMARY KEY (outbox_id, target)
);
