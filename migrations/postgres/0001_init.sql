-- Sessions and their append-only logs. seq is allocated inside the appending transaction from
-- sessions.head_seq (row locked with FOR UPDATE), never from an in-process counter, so several
-- moord nodes can append to one session.
CREATE TABLE sessions (
    id          UUID    PRIMARY KEY,
    name        TEXT    NOT NULL UNIQUE,
    created_at  BIGINT  NOT NULL,
    head_seq    BIGINT  NOT NULL DEFAULT 0,
    last_ts     BIGINT,
    ended_at    BIGINT,
    agent       TEXT
);

CREATE TABLE entries (
    session_id    UUID    NOT NULL REFERENCES sessions(id),
    seq           BIGINT  NOT NULL,
    ts            BIGINT  NOT NULL,
    kind          TEXT    NOT NULL,
    author        TEXT    NOT NULL,
    payload       TEXT    NOT NULL,
    producer_id   UUID,
    producer_seq  BIGINT,
    client_msg_id TEXT,
    ref_seq       BIGINT,
    PRIMARY KEY (session_id, seq)
);

CREATE UNIQUE INDEX entries_producer ON entries (session_id, producer_id, producer_seq)
    WHERE producer_id IS NOT NULL;
CREATE UNIQUE INDEX entries_client_msg ON entries (session_id, client_msg_id)
    WHERE client_msg_id IS NOT NULL;
CREATE UNIQUE INDEX entries_receipt ON entries (session_id, kind, ref_seq)
    WHERE ref_seq IS NOT NULL;

CREATE TABLE producers (
    session_id   UUID    NOT NULL REFERENCES sessions(id),
    producer_id  UUID    NOT NULL,
    last_seq     BIGINT  NOT NULL,
    PRIMARY KEY (session_id, producer_id)
);
