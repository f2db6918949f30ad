-- Checkpoint ids scoped by session, and who uploaded each blob (issue 13).
--
-- A checkpoint id was unique across the server, so anyone could take an id they saw in a
-- `checkpoint.created` entry first. Now a checkpoint is keyed by (session, id): the same id in
-- two sessions is two checkpoints. `checkpoint_blobs` names the checkpoint the same way.
--
-- `blob_uploads` records each account that sent a blob (and proved it holds the content by
-- sending bytes that hash to its name), so a manifest may name only blobs its uploader sent or
-- may already read, and `POST /blobs/missing` answers only about those.
ALTER TABLE checkpoint_blobs RENAME TO checkpoint_blobs_old;
ALTER TABLE checkpoints RENAME TO checkpoints_old;

CREATE TABLE checkpoints (
    session_pk  INTEGER NOT NULL REFERENCES sessions(pk),
    id          TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    summary     TEXT    NOT NULL,
    manifest    TEXT    NOT NULL,
    PRIMARY KEY (session_pk, id)
);

CREATE TABLE checkpoint_blobs (
    sha256        TEXT    NOT NULL,
    session_pk    INTEGER NOT NULL,
    checkpoint_id TEXT    NOT NULL,
    PRIMARY KEY (sha256, session_pk, checkpoint_id),
    FOREIGN KEY (session_pk, checkpoint_id) REFERENCES checkpoints (session_pk, id)
);

INSERT INTO checkpoints (session_pk, id, created_at, summary, manifest)
SELECT session_pk, id, created_at, summary, manifest FROM checkpoints_old;

INSERT INTO checkpoint_blobs (sha256, session_pk, checkpoint_id)
SELECT b.sha256, c.session_pk, b.checkpoint_id
FROM checkpoint_blobs_old b JOIN checkpoints_old c ON c.id = b.checkpoint_id;

DROP TABLE checkpoint_blobs_old;
DROP TABLE checkpoints_old;

CREATE INDEX checkpoints_session ON checkpoints (session_pk, created_at);
CREATE INDEX checkpoints_id ON checkpoints (id);

CREATE TABLE blob_uploads (
    sha256      TEXT    NOT NULL,
    uploader    TEXT    NOT NULL,
    size        INTEGER NOT NULL,
    uploaded_at INTEGER NOT NULL,
    PRIMARY KEY (sha256, uploader)
);
CREATE INDEX blob_uploads_uploader ON blob_uploads (uploader);
