-- Nothing to change on Postgres: the SQLite 0021 drops that store's `entries_producer` index.
-- Postgres keeps its index, which its own append looks a replayed entry up by.
SELECT 1;
