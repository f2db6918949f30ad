"""A schemathesis check for moord: a refused request (any 4xx or 5xx answer) changes no stored
data. Loaded by `scripts/api-fuzz` through SCHEMATHESIS_HOOKS.

Before every call the stored data is read (every table of the SQLite store in
MOOR_API_FUZZ_DATA_DIR, and the blob files); after a refused call it is read again and must be the
same. Requests run one at a time (one worker) and nothing else writes meanwhile (the fuzzed
session has no bridge), so a difference is the refused request's doing. `state_snapshots` is left
out: it is a cache of state derived from the log, which the server may write at any time.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import schemathesis

DATA_DIR = Path(os.environ["MOOR_API_FUZZ_DATA_DIR"])
DERIVED_TABLES = {"state_snapshots"}

_before: dict[str, list[str]] = {}


def stored_data() -> dict[str, list[str]]:
    """Every row of every table (sorted), and every blob file with its size."""
    con = sqlite3.connect(f"file:{DATA_DIR / 'moor.db'}?mode=ro", uri=True, timeout=10)
    try:
        tables = [
            name
            for (name,) in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
            if name not in DERIVED_TABLES
        ]
        data = {t: sorted(repr(row) for row in con.execute(f'SELECT * FROM "{t}"')) for t in tables}
    finally:
        con.close()
    blobs = DATA_DIR / "blobs"
    data["blob files"] = sorted(
        f"{p.relative_to(blobs)} {p.stat().st_size}" for p in blobs.rglob("*") if p.is_file()
    ) if blobs.exists() else []
    return data


def differences(before: dict[str, list[str]], after: dict[str, list[str]]) -> str:
    out = []
    for name in sorted(set(before) | set(after)):
        old, new = set(before.get(name, [])), set(after.get(name, []))
        if old != new:
            out.append(f"{name}: removed {sorted(old - new)[:5]}, added {sorted(new - old)[:5]}")
    return "; ".join(out)


@schemathesis.hook
def before_call(context, case, kwargs):
    global _before
    _before = stored_data()


@schemathesis.check
def refused_requests_change_nothing(ctx, response, case):
    """A request answered with an error status leaves the stored data as it was."""
    if response.status_code < 400:
        return None
    changed = differences(_before, stored_data())
    if changed:
        raise AssertionError(
            f"{case.method} {case.formatted_path} was refused with {response.status_code} "
            f"but changed stored data: {changed}"
        )
    return None
