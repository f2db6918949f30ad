-- (The bridge-claim epoch of the Postgres 0003 is cluster-only: one SQLite node has no other
-- node to tell.)

-- Remote inputs by seq (a bridge link re-reads them after a gap in the live stream, and the
-- handshake settles them), without walking the session's whole log. Only input rows carry it,
-- so appending output does not maintain it.
CREATE INDEX entries_inputs ON entries (session_pk, seq) WHERE client_msg_id IS NOT NULL;
