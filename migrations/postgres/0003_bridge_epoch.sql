-- Bridge claims across nodes: each new bridge connection bumps the epoch (and announces it with
-- NOTIFY); a node closes its own connection for the session when a higher epoch is claimed.
ALTER TABLE sessions ADD COLUMN bridge_epoch BIGINT NOT NULL DEFAULT 0;
