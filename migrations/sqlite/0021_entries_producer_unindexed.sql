-- The producer's mark in `producers` decides duplicates and gaps; this index only served the
-- lookup of a replayed entry, which now walks down the session's own key from a bound the mark
-- gives (see `store/sqlite/group.rs`). Kept, it cost every session written in a commit a page of
-- its own in the WAL besides its page of `entries`.
DROP INDEX entries_producer;
