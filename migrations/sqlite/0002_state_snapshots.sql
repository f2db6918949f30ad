-- The latest snapshot of each session's derived state (moor_protocol::state::SessionState as
-- JSON), so that attaching to a long session never replays it from entry 1.
CREATE TABLE state_snapshots (
    session_pk  INTEGER PRIMARY KEY REFERENCES sessions(pk),
    head_seq    INTEGER NOT NULL,
    state       TEXT    NOT NULL
);
