"""The local stack (``tools/stack.py``, what ``make up`` / ``make down`` run) as the stack tests drive it:
its command, its REST API, taking it down."""

from __future__ import annotations

import contextlib
import json
import pathlib
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from tests.conftest import REPO
from tests.support.commands import run_stoppable

STACK = [sys.executable, str(REPO / "tools" / "stack.py")]
DAG = "continuous_validation"
TERMINAL = {"success", "failed"}


def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stack_up(state: pathlib.Path, port: int, env: dict, *args: str) -> subprocess.CompletedProcess:
    """``make up`` into ``state`` on ``port``; stopped (and so stopping what it started) if the test run is."""
    return run_stoppable([*STACK, "up", "--state-dir", str(state), "--port", str(port), *args], env=env, timeout=900)


def stack_down(state: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([*STACK, "down", "--state-dir", str(state)], capture_output=True, text=True, timeout=180)


class Api:
    """The stack's REST API with a JWT from POST /auth/token (SimpleAuthManager)."""

    def __init__(self, base: str, password: str):
        self.base = base
        self.token = self._call("POST", "/auth/token", {"username": "admin", "password": password},
                                expect=201)["access_token"]

    def _call(self, method: str, path: str, body=None, expect: int = 200):
        req = urllib.request.Request(self.base + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json", "Accept": "application/json",
                                              **({"Authorization": f"Bearer {self.token}"}
                                                 if getattr(self, "token", None) else {})})
        # A read is retried on a 5xx: on a loaded box the api-server's database pool can time out once
        # ("Database error"), which says nothing about the product; a write is never repeated.
        for attempt in range(4 if method == "GET" else 1):
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    status, raw = resp.status, resp.read()
            except urllib.error.HTTPError as exc:
                status, raw = exc.code, exc.read()
            if status < 500:
                break
            time.sleep(2 * (attempt + 1))
        assert status == expect, f"{method} {path}: {status} {raw[:2000]!r}"
        return json.loads(raw) if raw else None

    def get(self, path: str):
        return self._call("GET", path)

    def post(self, path: str, body, expect: int = 200):
        return self._call("POST", path, body, expect=expect)

    def runs(self) -> list[dict]:
        return self.get(f"/api/v2/dags/{DAG}/dagRuns?limit=100&order_by=run_after")["dag_runs"]

    def run(self, run_id: str) -> dict:
        return self.get(f"/api/v2/dags/{DAG}/dagRuns/{urllib.parse.quote(run_id)}")

    def task_instances(self, run_id: str) -> list[dict]:
        return self.get(f"/api/v2/dags/{DAG}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances?limit=500")[
            "task_instances"]
