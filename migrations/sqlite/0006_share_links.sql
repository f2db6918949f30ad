-- Share links (issue 6): an owner hands out a link that grants a role on one session to whoever
-- logs in and opens it, until it expires, runs out of uses or is revoked. Only the hash of its
-- secret is stored. Members who joined through a link remember it, so revoking the link
-- removes them.
CREATE TABLE share_links (
    id          TEXT    PRIMARY KEY,
    token_hash  TEXT    NOT NULL UNIQUE,
    session_id  TEXT    NOT NULL,
    role        TEXT    NOT NULL,
    created_by  TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    uses_left   INTEGER NOT NULL,
    revoked_at  INTEGER
);

ALTER TABLE session_members ADD COLUMN via_link TEXT;
