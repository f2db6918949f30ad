-- Each spent refresh token names the one that replaced it, so that a client whose answer was
-- lost (connection reset after the rotation) can present the spent token again within a short
-- grace window while its successor is still unused: the successor is then spent unused and a
-- new one issued. Any other second use still revokes the family.
ALTER TABLE refresh_tokens ADD COLUMN replaced_by TEXT;
