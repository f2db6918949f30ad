-- Machines running `moor host` (issue 18). A machine registers what it offers (projects and
-- agents by name, as JSON in `offers`); its own log is an ordinary session (`log_session`)
-- whose inputs are the actions asked of it (`input.host`) and whose entries are what it did.
-- Access to a machine is a role on that session.
CREATE TABLE machines (
    id            TEXT    PRIMARY KEY,
    owner         TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    os            TEXT    NOT NULL,
    version       TEXT    NOT NULL,
    offers        TEXT    NOT NULL,
    max_sessions  BIGINT  NOT NULL,
    log_session   TEXT    NOT NULL UNIQUE,
    registered_at BIGINT  NOT NULL,
    UNIQUE (owner, name)
);

-- The sessions a machine was asked to start: the name `moord` chose, and what runs in it.
CREATE TABLE machine_sessions (
    machine_id    TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    project       TEXT    NOT NULL,
    agent         TEXT    NOT NULL,
    created_at    BIGINT  NOT NULL,
    PRIMARY KEY (machine_id, name)
);
CREATE INDEX machine_sessions_newest ON machine_sessions (machine_id, created_at);
