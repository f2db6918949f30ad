-- Sessions and their append-only logs. seq is allocated inside the appending transaction from
-- sessions.head_seq, never from an in-process counter.
CREATE TABLE sessions (
    id          TEXT    PRIMARY KEY,
    name        TEXT    NOT NULL UNIQUE,
    created_at  INTEGER NOT NULL,
    head_seq    INTEGER NOT NULL DEFAULT 0,
    last_ts     INTEGER,
    ended_at    INTEGER,
    agent       TEXT
);

CREATE TABLE entries (
    session_id    TEXT    NOT NULL REFERENCES sessions(id),
    seq           INTEGER NOT NULL,
    ts            INTEGER NOT NULL,
    kind          TEXT    NOT NULL,
    author        TEXT    NOT NULL,
    payload       TEXT    NOT NULL,
    producer_id   TEXT,
    producer_seq  INTEGER,
    client_msg_id TEXT,
    ref_seq       INTEGER,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

-- Idempotency keys, unique per session.
CREATE UNIQUE INDEX entries_producer ON entries (session_id, producer_id, producer_seq)
    WHERE producer_id IS NOT NULL;
CREATE UNIQUE INDEX entries_client_msg ON entries (session_id, client_msg_id)
    WHERE client_msg_id IS NOT NULL;
-- At most one receipt of each kind per input.
CREATE UNIQUE INDEX entries_receipt ON entries (session_id, kind, ref_seq)
    WHERE ref_seq IS NOT NULL;

-- Highest stored producer seq per (session, producer): the mark a reconnecting bridge resumes
-- from.
CREATE TABLE producers (
    session_id   TEXT    NOT NULL REFERENCES sessions(id),
    producer_id  TEXT    NOT NULL,
    last_seq     INTEGER NOT NULL,
    PRIMARY KEY (session_id, producer_id)
) WITHOUT ROWID;
