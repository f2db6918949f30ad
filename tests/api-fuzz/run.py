"""Fuzzes a real moord's HTTP API against the OpenAPI description it serves, with schemathesis.

Run by `scripts/api-fuzz`, which installs schemathesis and passes the binaries:

    run.py MOORD MOOR SCHEMATHESIS MAX_SECONDS MAX_EXAMPLES

Starts `moord` on 127.0.0.1 with a temporary data dir, adds a user and logs it in (the way the
tests do: the admin token from the data dir, `POST /users`, `POST /auth/login`), has the real
`moor` create a session `fuzzed` and then lose its bridge (so the session is live and nothing
writes to it in the background), and runs schemathesis with the user's bearer token and the
session's name as every `{id}`. Fails on any 5xx (`not_a_server_error`), on a refused request that
changed stored data (`refusals.py`), on a panic in moord's log, and if moord is not running at the
end or does not shut down cleanly.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

HERE = Path(__file__).resolve().parent
SESSION = "fuzzed"
USER, PASSWORD = "fuzzer", "fuzzer-password-1"
# Failure guards only: each wait ends as soon as what it waits for happens.
STARTUP_TIMEOUT = 30.0
EVENT_TIMEOUT = 30.0
SHUTDOWN_TIMEOUT = 20.0


def fail(message: str) -> None:
    print(f"api-fuzz: {message}", file=sys.stderr)
    sys.exit(1)


def start_moord(moord: str, data: Path, work: Path) -> tuple[subprocess.Popen, str]:
    """Starts moord and returns it with its base URL, read from its `listening on` line."""
    server = subprocess.Popen(
        [moord, "--listen", "127.0.0.1:0", "--data-dir", str(data), "--sse-lifetime-ms", "500"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=open(work / "moord.stderr.log", "w"),
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def drain() -> None:
        with open(work / "moord.stdout.log", "w") as log:
            for line in server.stdout:
                log.write(line)
                log.flush()
                lines.put(line)
        lines.put(None)

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            fail(f"moord did not print its listening line within {STARTUP_TIMEOUT} s")
        if line is None:
            fail("moord exited before listening")
        if "listening on http://" in line:
            return server, line.split("listening on ", 1)[1].strip().rstrip("/")


def until(what: str, condition) -> None:
    """Waits until `condition()` holds; the deadline only guards against a hang."""
    deadline = time.monotonic() + EVENT_TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def kinds(url: str, token: str) -> list[str]:
    r = requests.get(
        f"{url}/api/v1/sessions/{SESSION}/entries",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    return [e["kind"] for e in r.json()["entries"]] if r.status_code == 200 else []


def user_token(url: str, data: Path) -> str:
    admin = (data / "admin.token").read_text().strip()
    r = requests.post(
        f"{url}/api/v1/users",
        json={"name": USER, "password": PASSWORD},
        headers={"Authorization": f"Bearer {admin}"},
        timeout=10,
    )
    if r.status_code != 201:
        fail(f"adding a user answered {r.status_code}: {r.text}")
    r = requests.post(f"{url}/api/v1/auth/login", json={"name": USER, "password": PASSWORD}, timeout=10)
    if r.status_code != 200:
        fail(f"logging in answered {r.status_code}: {r.text}")
    return r.json()["access_token"]


def seed_session(moor: str, url: str, token: str, work: Path) -> None:
    """The real bridge creates the session and is then killed: a live session without a bridge."""
    bridge = subprocess.Popen(
        [moor, "run", "--server", url, "--session", SESSION, "--state-dir", str(work / "moor"),
         "--mode", "lines", "--", "sleep", "600"],
        env={**os.environ, "MOOR_TOKEN": token},
        stdin=subprocess.DEVNULL,
        stdout=open(work / "moor.stdout.log", "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        until("the bridge to connect", lambda: "bridge.connected" in kinds(url, token))
    finally:
        os.killpg(bridge.pid, signal.SIGKILL)
        bridge.wait()
    until("the server to see the bridge gone", lambda: "bridge.disconnected" in kinds(url, token))


def main() -> None:
    moord, moor, schemathesis, max_seconds, max_examples = sys.argv[1:6]
    with tempfile.TemporaryDirectory(prefix="moor-api-fuzz-") as tmp:
        work = Path(tmp)
        data = work / "data"
        data.mkdir(mode=0o700)
        server, url = start_moord(moord, data, work)
        try:
            token = user_token(url, data)
            seed_session(moor, url, token, work)
            # A moord built without web/dist answers its web client's page with a deliberate 503
            # (scripts/test builds the client first; a quick local run may not have).
            exclude = []
            if requests.get(f"{url}/", timeout=10).status_code == 503:
                print("api-fuzz: this moord has no web client built in; GET / is not fuzzed")
                exclude = ["--exclude-operation-id", "getWebClient"]
            started = time.monotonic()
            run = subprocess.run(
                [schemathesis, "--config-file", str(HERE / "schemathesis.toml"), "run",
                 f"{url}/api/v1/openapi.json",
                 "--header", f"Authorization: Bearer {token}",
                 "--checks", "not_a_server_error,refused_requests_change_nothing",
                 "--max-examples", max_examples, "--max-time", max_seconds, *exclude],
                cwd=work,
                env={**os.environ, "SCHEMATHESIS_HOOKS": "refusals",
                     "PYTHONPATH": str(HERE), "MOOR_API_FUZZ_DATA_DIR": str(data),
                     "MOOR_API_FUZZ_SESSION": SESSION},
            )
            print(f"api-fuzz: schemathesis ran {time.monotonic() - started:.0f} s")
            if server.poll() is not None:
                fail(f"moord exited during the run ({server.returncode})")
        finally:
            if server.poll() is None:
                server.send_signal(signal.SIGTERM)
                try:
                    server.wait(timeout=SHUTDOWN_TIMEOUT)
                except subprocess.TimeoutExpired:
                    os.killpg(server.pid, signal.SIGKILL)
                    server.wait()
                    print("api-fuzz: moord did not shut down in time", file=sys.stderr)
        stderr = (work / "moord.stderr.log").read_text(errors="replace")
        if "panicked" in stderr:
            fail("moord panicked:\n" + "\n".join(l for l in stderr.splitlines() if "panicked" in l))
        if server.returncode != 0:
            fail(f"moord exited with {server.returncode} after SIGTERM")
        if run.returncode != 0:
            fail(f"schemathesis failed ({run.returncode})")
        print("api-fuzz: no 5xx, no refused request changed stored data, moord shut down cleanly")


if __name__ == "__main__":
    main()
