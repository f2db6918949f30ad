-- Notifications, continued (issue 16): what each user muted.
--
-- A muted class (`permission`, `turn`, …) notifies the user of nothing, in any session; a muted
-- session notifies them of nothing, of any class. Bounded per user: one row per class at most,
-- and the server keeps at most 256 muted sessions per user.
CREATE TABLE notify_muted_classes (
    principal  TEXT    NOT NULL,
    class      TEXT    NOT NULL,
    PRIMARY KEY (principal, class)
);
CREATE TABLE notify_muted_sessions (
    principal  TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    at         BIGINT  NOT NULL,
    PRIMARY KEY (principal, session_id)
);
