-- Nothing to change on Postgres: the SQLite 0022 replaces that store's outbox trigger with
-- inserts made by its group append. Postgres keeps its trigger.
SELECT 1;
