-- Bridge claims across nodes: each new bridge connection bumps the epoch (and announces it with
-- NOTIFY); a node closes its own connection for the session when a higher epoch is claimed.
ALTER TABLE sessions ADD COLUMN bridge_epoch BIGINT NOT NULL DEFAULT 0;

-- Remote inputs by seq (a bridge link re-reads them after a gap in the live stream, and the
-- handshake settles them), without walking the session's whole log.
CREATE INDEX entries_inputs ON entries (session_id, seq) WHERE client_msg_id IS NOT NULL;
