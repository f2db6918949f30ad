-- Retention (issue 19): sessions deleted by the retention policy or by their owner.
--
-- Deleting a session's log is done in bounded batches, so it may take several of them; the
-- session is retired at once (this row), which hides it from lookups and lists and answers
-- viewers 410 with the reason, and its rows are deleted batch by batch until `done_at` is set.
-- The row stays afterwards, so a link to a deleted session says so instead of "not found".
CREATE TABLE retired_sessions (
    id          TEXT    PRIMARY KEY,
    name        TEXT    NOT NULL,
    ended_at    BIGINT,
    retired_at  BIGINT  NOT NULL,
    reason      TEXT    NOT NULL,
    done_at     BIGINT
);
CREATE INDEX retired_sessions_pending ON retired_sessions (retired_at) WHERE done_at IS NULL;
-- Ended sessions by end time, for the retention policy's "ended more than N days ago".
CREATE INDEX sessions_ended ON sessions (ended_at) WHERE ended_at IS NOT NULL;
