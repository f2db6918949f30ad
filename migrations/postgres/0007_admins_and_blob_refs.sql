-- Administrators and blob ownership (issue 6).
--
-- An administrator is a user who manages users and owns every session; `admin_since` is when
-- they became one (NULL: an ordinary user). The first one is created through the one-time setup
-- link moord prints while there is none.
ALTER TABLE users ADD COLUMN admin_since BIGINT;

-- Which checkpoints name which blobs, so a blob is served only to someone who may read a
-- session with a checkpoint naming it. Filled at manifest upload; backfilled here from the
-- manifests already stored (the patch and every captured file).
CREATE TABLE checkpoint_blobs (
    sha256        TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL REFERENCES checkpoints(id),
    PRIMARY KEY (sha256, checkpoint_id)
);

INSERT INTO checkpoint_blobs (sha256, checkpoint_id)
SELECT c.manifest::jsonb -> 'patch' ->> 'sha256', c.id FROM checkpoints c
WHERE c.manifest::jsonb -> 'patch' ->> 'sha256' IS NOT NULL
ON CONFLICT DO NOTHING;

INSERT INTO checkpoint_blobs (sha256, checkpoint_id)
SELECT f ->> 'sha256', c.id
FROM checkpoints c, jsonb_array_elements(c.manifest::jsonb -> 'files') f
WHERE f ->> 'sha256' IS NOT NULL
ON CONFLICT DO NOTHING;
