-- Sharing by name is an offer the named user accepts or declines (issue 13): an owner's
-- `PUT …/members/{user}` for someone who is not a member stores a row here, answered the same
-- whether the account exists or not. An offer to a name with no account (or an account made
-- after the offer) matches nobody. It becomes a membership only when its user accepts it, while
-- it is unexpired and whoever made it still owns the session.
CREATE TABLE session_offers (
    session_id  TEXT    NOT NULL,
    principal   TEXT    NOT NULL,
    role        TEXT    NOT NULL,
    offered_by  TEXT    NOT NULL,
    offered_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    PRIMARY KEY (session_id, principal)
);
CREATE INDEX session_offers_principal ON session_offers (principal);
