"""A real Airflow 3.3 for the end-to-end tests that need its scheduler: api-server, scheduler and
dag-processor (LocalExecutor, the SQLite metadata DB of the e2e harness), each in its own session, against
the Kubernetes API emulator and a real PostgreSQL. Shared by the fast-path, retry and cadence tests."""

from __future__ import annotations

import contextlib
import os
import pathlib
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import time

import pytest

AIRFLOW = pathlib.Path(sys.executable).with_name("airflow")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Components:
    """The running components; ``restart_scheduler`` lets a test kill the scheduler and start another."""

    def __init__(self, env: dict, logs: pathlib.Path):
        self.env, self.logs = env, logs
        self.procs: dict[str, tuple[subprocess.Popen, object]] = {}
        self.starts: dict[str, int] = {}

    def start(self, name: str, args: list[str]) -> subprocess.Popen:
        self.starts[name] = self.starts.get(name, 0) + 1
        suffix = "" if self.starts[name] == 1 else f"-{self.starts[name]}"
        log = open(self.logs / f"{name}{suffix}.log", "w")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen([str(AIRFLOW), *args], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs[name] = (proc, log)
        return proc

    def kill_hard(self, name: str) -> list[int]:
        """SIGKILL every process of the component's session: its process group and the task processes it
        forked into groups of their own (what a lost host or container does to them). The pids killed."""
        proc, log = self.procs.pop(name)
        sid = proc.pid  # start_new_session: the session id is the leader's pid
        killed = []
        for entry in pathlib.Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if os.getsid(int(entry.name)) == sid:
                    os.kill(int(entry.name), signal.SIGKILL)
                    killed.append(int(entry.name))
            except (ProcessLookupError, PermissionError):
                continue
        proc.wait()
        log.close()
        return killed

    def stop_all(self) -> None:
        for proc, _ in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, log in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.close()
        self.procs.clear()


SCHEDULER = ["scheduler", "--skip-serve-logs"]


@contextlib.contextmanager
def airflow(env: dict, logs: pathlib.Path):
    """api-server, scheduler and dag-processor, each in its own session (stopped by their group ids); the
    scheduler once the api-server answers, as make up starts them: a task's supervisor calls the execution API
    first and, when nothing answers there, kills the task with nothing in its log but "Pre Execute"."""
    port = _free_port()
    env = {**env, "AIRFLOW__CORE__EXECUTOR": "LocalExecutor", "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
           "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(48), "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
           "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
           "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}", "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
           "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "180"}
    components = Components(env, logs)
    try:
        components.start("api-server", ["api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"])
        wait("the api-server to answer", lambda: _answers(f"http://127.0.0.1:{port}/api/v2/monitor/health"), 300,
             logs, 0.5)
        components.start("scheduler", SCHEDULER)
        components.start("dag-processor", ["dag-processor"])
        yield components
    finally:
        components.stop_all()


def _answers(url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def metadata(home: pathlib.Path, sql: str, args: tuple = ()) -> list[tuple]:
    """Rows of the Airflow metadata DB, read only (the test's own look; tasks never do)."""
    with contextlib.closing(sqlite3.connect(f"file:{home / 'airflow.db'}?mode=ro", uri=True, timeout=10)) as db:
        return db.execute(sql, args).fetchall()


def runs(home: pathlib.Path, dag_id: str) -> list[tuple[str, str]]:
    """(run_id, state) of a DAG's runs."""
    return metadata(home, "SELECT run_id, state FROM dag_run WHERE dag_id = ?", (dag_id,))


def wait(what: str, check, timeout: float, logs: pathlib.Path, interval: float = 1.0):
    """``check()``'s first truthy value; on timeout the test fails with the components' log tails."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(interval)
    tails = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(logs.glob("*.log")))
    pytest.fail(f"{what}: not within {timeout:.0f} s\n{tails}")
