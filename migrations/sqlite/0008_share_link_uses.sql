-- Owners see their share links listed with "uses left of uses": record how many uses a link was
-- made with. Links made before this stay NULL (unknown): a redemption by someone who already had
-- a role spends a use without leaving a trace, so the count cannot be rebuilt.
ALTER TABLE share_links ADD COLUMN max_uses INTEGER;
CREATE INDEX share_links_session ON share_links (session_id);
