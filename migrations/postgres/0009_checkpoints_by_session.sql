-- Checkpoint ids scoped by session, and who uploaded each blob (issue 13).
--
-- A checkpoint id was unique across the server, so anyone could take an id they saw in a
-- `checkpoint.created` entry first. Now a checkpoint is keyed by (session, id): the same id in
-- two sessions is two checkpoints. `checkpoint_blobs` names the checkpoint the same way.
--
-- `blob_uploads` records each account that sent a blob (and proved it holds the content by
-- sending bytes that hash to its name), so a manifest may name only blobs its uploader sent or
-- may already read, and `POST /blobs/missing` answers only about those.
ALTER TABLE checkpoint_blobs ADD COLUMN session_id UUID;
UPDATE checkpoint_blobs b SET session_id = c.session_id FROM checkpoints c
WHERE c.id = b.checkpoint_id;
ALTER TABLE checkpoint_blobs ALTER COLUMN session_id SET NOT NULL;

ALTER TABLE checkpoint_blobs DROP CONSTRAINT checkpoint_blobs_checkpoint_id_fkey;
ALTER TABLE checkpoint_blobs DROP CONSTRAINT checkpoint_blobs_pkey;
ALTER TABLE checkpoints DROP CONSTRAINT checkpoints_pkey;

ALTER TABLE checkpoints ADD PRIMARY KEY (session_id, id);
ALTER TABLE checkpoint_blobs ADD PRIMARY KEY (sha256, session_id, checkpoint_id);
ALTER TABLE checkpoint_blobs ADD FOREIGN KEY (session_id, checkpoint_id)
    REFERENCES checkpoints (session_id, id);
CREATE INDEX checkpoints_id ON checkpoints (id);

CREATE TABLE blob_uploads (
    sha256      TEXT   NOT NULL,
    uploader    TEXT   NOT NULL,
    size        BIGINT NOT NULL,
    uploaded_at BIGINT NOT NULL,
    PRIMARY KEY (sha256, uploader)
);
CREATE INDEX blob_uploads_uploader ON blob_uploads (uploader);
