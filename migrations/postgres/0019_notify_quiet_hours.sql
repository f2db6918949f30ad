-- Notifications, continued (issue 16): each user's quiet hours.
--
-- Every day from start_at to end_at (HH:MM, local times in time_zone, an IANA name; an end
-- before the start runs past midnight) the user's notifications are still sent, marked quiet:
-- shown without sound or vibration. One row per user at most.
CREATE TABLE notify_quiet_hours (
    principal  TEXT    NOT NULL PRIMARY KEY,
    start_at   TEXT    NOT NULL,
    end_at     TEXT    NOT NULL,
    time_zone  TEXT    NOT NULL
);
