select 1; -- pg-only: bridge claims across nodes (one SQLite node has no other node to tell)
