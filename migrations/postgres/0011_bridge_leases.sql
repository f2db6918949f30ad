-- Bridge leases (issue 14): a bridge's presence is a lease the node holding its socket renews.
--
-- One row per session whose bridge some node holds (or held, until a node sweeps it). The
-- holder renews `expires_at` while the socket lives and deletes the row when the connection
-- ends. A node that finds the row expired (its holder crashed), or a node starting on a
-- database no other node uses, claims it (sets `claimed_by`, a conditional UPDATE only one
-- node wins) and records the connection's end in the log once: the `bridge.disconnected` is
-- keyed on `connected_seq`, the seq of the connection's `bridge.connected`.
CREATE TABLE bridge_leases (
    session_id    TEXT   PRIMARY KEY,
    node          TEXT   NOT NULL,
    connection    BIGINT NOT NULL,
    connected_seq BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    claimed_by    TEXT
);
CREATE INDEX bridge_leases_expiry ON bridge_leases (expires_at);
