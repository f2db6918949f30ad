-- Compaction and per-session retention (issue 19).
--
-- Compaction deletes a session's old raw terminal output and streamed text deltas
-- (`agent.pty.output`, `agent.text.delta`) and keeps everything else. It walks each log forward
-- from `compacted_through`: every entry of those kinds with seq <= compacted_through is gone, and
-- a reader whose cursor is below it is told so (a `reset` carrying `compacted`), never given a
-- silent gap. `compacted_entries` and `compacted_bytes` total what it removed.
--
-- `sized_through` / `sized_bytes`: the payload bytes still stored of the entries up to
-- `sized_through`, counted forward once, for the per-session log size cap.
--
-- `keep_ended_ms`, `compact_after_ms`, `max_log_bytes`: the session's own policy; NULL follows
-- the server's. A session's policy can only be stricter than the server's.
ALTER TABLE sessions ADD COLUMN compacted_through BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN compacted_entries BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN compacted_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN sized_through BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN sized_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN keep_ended_ms BIGINT;
ALTER TABLE sessions ADD COLUMN compact_after_ms BIGINT;
ALTER TABLE sessions ADD COLUMN max_log_bytes BIGINT;

-- Blobs no checkpoint names any more, since when. Their files are deleted only after a grace
-- period, and only if no checkpoint names them by then and nobody uploaded them since: a
-- checkpoint being saved while its session's last other checkpoint was deleted keeps its blobs.
CREATE TABLE blob_orphans (
    sha256  TEXT    PRIMARY KEY,
    since   BIGINT  NOT NULL
);
CREATE INDEX blob_orphans_since ON blob_orphans (since);
