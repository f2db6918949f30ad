-- Checkpoints of agents' work trees (G7), one row per uploaded checkpoint. The manifest names
-- the changed files' contents by SHA-256; those live in the blob store (<data-dir>/blobs),
-- shared by every checkpoint of every session. `summary` is what lists show, so listing never
-- parses manifests. (0003 is taken by the Postgres work's bridge epoch.)
CREATE TABLE checkpoints (
    id          TEXT    PRIMARY KEY,
    session_id  UUID    NOT NULL REFERENCES sessions(id),
    created_at  BIGINT  NOT NULL,
    summary     TEXT    NOT NULL,
    manifest    TEXT    NOT NULL
);
CREATE INDEX checkpoints_session ON checkpoints (session_id, created_at);
