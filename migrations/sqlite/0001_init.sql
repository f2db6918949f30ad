-- Sessions and their append-only logs. seq is allocated inside the appending transaction from
-- sessions.head_seq, never from an in-process counter.
--
-- Entries are keyed by small integers (session_pk, producer_pk) rather than the 36-character
-- UUID text: every insert walks two B-trees comparing keys, and text keys with a long equal
-- prefix made those comparisons the largest cost of ingest.
CREATE TABLE sessions (
    pk          INTEGER PRIMARY KEY,
    id          TEXT    NOT NULL UNIQUE,
    name        TEXT    NOT NULL UNIQUE,
    created_at  INTEGER NOT NULL,
    head_seq    INTEGER NOT NULL DEFAULT 0,
    last_ts     INTEGER,
    ended_at    INTEGER,
    agent       TEXT
);

-- Highest stored producer seq per (session, producer): the mark a reconnecting bridge resumes
-- from.
CREATE TABLE producers (
    pk           INTEGER PRIMARY KEY,
    session_pk   INTEGER NOT NULL REFERENCES sessions(pk),
    producer_id  TEXT    NOT NULL,
    last_seq     INTEGER NOT NULL,
    UNIQUE (session_pk, producer_id)
);

CREATE TABLE entries (
    session_pk    INTEGER NOT NULL REFERENCES sessions(pk),
    seq           INTEGER NOT NULL,
    ts            INTEGER NOT NULL,
    kind          TEXT    NOT NULL,
    author        TEXT    NOT NULL,
    payload       TEXT    NOT NULL,
    producer_pk   INTEGER REFERENCES producers(pk),
    producer_seq  INTEGER,
    client_msg_id TEXT,
    ref_seq       INTEGER,
    PRIMARY KEY (session_pk, seq)
) WITHOUT ROWID;

-- Idempotency keys, unique per session.
CREATE UNIQUE INDEX entries_producer ON entries (session_pk, producer_pk, producer_seq)
    WHERE producer_pk IS NOT NULL;
CREATE UNIQUE INDEX entries_client_msg ON entries (session_pk, client_msg_id)
    WHERE client_msg_id IS NOT NULL;
-- At most one receipt of each kind per input.
CREATE UNIQUE INDEX entries_receipt ON entries (session_pk, kind, ref_seq)
    WHERE ref_seq IS NOT NULL;
