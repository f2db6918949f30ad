"""A schemathesis check for moord: a refused request (any 4xx or 5xx answer) changes no stored
data. Loaded by `scripts/api-fuzz` through SCHEMATHESIS_HOOKS.

Before every call the stored data is read (every table of the SQLite store in
MOOR_API_FUZZ_DATA_DIR, and the blob files); after a refused call it is read again and must be the
same. Requests run one at a time (one worker) and nothing else writes meanwhile (the fuzzed
session has no bridge), so a difference is the refused request's doing. Left out are the tables
the server writes on its own at any time: `state_snapshots`, a cache of state derived from the
log, and the notification outbox and its deliveries, which the notifier claims, retries and
reschedules in the background (each outbox row is added in the same commit as its log entry, and
the log is compared). One refusal writes by design: a refresh token used twice is answered 401
and revokes its family.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import schemathesis

DATA_DIR = Path(os.environ["MOOR_API_FUZZ_DATA_DIR"])
BACKGROUND_TABLES = {"state_snapshots", "notify_outbox", "notify_deliveries"}
# Refusals that write by design: (method, path under /api/v1) -> the tables they may change.
REFUSALS_THAT_WRITE = {
    # A reused refresh token revokes its whole family (theft detection).
    ("POST", "/auth/refresh"): {"token_families"},
}

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
            if name not in BACKGROUND_TABLES
        ]
        data = {t: sorted(repr(row) for row in con.execute(f'SELECT * FROM "{t}"')) for t in tables}
    finally:
        con.close()
    blobs = DATA_DIR / "blobs"
    data["blob files"] = sorted(
        f"{p.relative_to(blobs)} {p.stat().st_size}" for p in blobs.rglob("*") if p.is_file()
    ) if blobs.exists() else []
    return data


def differences(before: dict[str, list[str]], after: dict[str, list[str]], allowed: set[str]) -> str:
    out = []
    for name in sorted((set(before) | set(after)) - allowed):
        old, new = before.get(name, []), after.get(name, [])
        if old != new:
            removed, added = sorted(set(old) - set(new)), sorted(set(new) - set(old))
            out.append(f"{name}: removed {removed[:5]}, added {added[:5]} ({len(old)} -> {len(new)} rows)")
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
    path = case.formatted_path.removeprefix("/api/v1")
    allowed = REFUSALS_THAT_WRITE.get((case.method.upper(), path), set())
    changed = differences(_before, stored_data(), allowed)
    if changed:
        raise AssertionError(
            f"{case.method} {case.formatted_path} was refused with {response.status_code} "
            f"but changed stored data: {changed}"
        )
    return None
