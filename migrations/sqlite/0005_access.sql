-- Accounts, refresh tokens and per-session roles (issue 6). Secrets are never stored in the
-- clear: passwords as argon2id PHC strings, refresh tokens as the SHA-256 of the token.
CREATE TABLE users (
    name          TEXT    PRIMARY KEY,
    password_hash TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    revoked_at    INTEGER
);

-- One row per refresh token ever issued. A family is one login (or device); each refresh
-- marks the used token and adds its successor to the same family. Presenting a used token
-- again revokes the family.
CREATE TABLE refresh_tokens (
    token_hash  TEXT    PRIMARY KEY,
    family      TEXT    NOT NULL,
    user_name   TEXT    NOT NULL REFERENCES users(name),
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    used_at     INTEGER
);
CREATE INDEX refresh_tokens_family ON refresh_tokens (family);

CREATE TABLE token_families (
    family      TEXT    PRIMARY KEY,
    user_name   TEXT    NOT NULL REFERENCES users(name),
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);

-- Who may see a session, and what they may do: owner, controller or viewer.
CREATE TABLE session_members (
    session_id  TEXT    NOT NULL,
    principal   TEXT    NOT NULL,
    role        TEXT    NOT NULL,
    PRIMARY KEY (session_id, principal)
);
CREATE INDEX session_members_principal ON session_members (principal);
