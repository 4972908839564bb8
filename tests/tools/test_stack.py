"""tools/stack.py without starting the stack: its command line, the Airflow configuration it writes,
and how it tells its own processes from others. The whole stack runs in tests/stack/."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import stack

from tests.conftest import REPO

STACK = [sys.executable, str(REPO / "tools" / "stack.py")]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*STACK, *args], capture_output=True, text=True, timeout=60)


def test_down_and_status_without_a_stack(tmp_path):
    down = run("down", "--state-dir", str(tmp_path))
    assert down.returncode == 0 and down.stdout.strip() == f"nothing to stop: no stack recorded in {tmp_path}"
    status = run("status", "--state-dir", str(tmp_path))
    assert status.returncode == 1 and "not running" in status.stdout


def test_up_refuses_a_busy_port_before_starting_anything(tmp_path):
    with contextlib.closing(socket.socket()) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        up = run("up", "--state-dir", str(tmp_path), "--port", str(port))
    assert up.returncode == 1
    assert up.stderr.strip() == (f"error: port {port} on 127.0.0.1 is in use: choose another with "
                                 "STACK_PORT=8090 make up")
    assert list(tmp_path.iterdir()) == []  # no record, no database, nothing started


@pytest.mark.real_clock("compares the record's time with the kernel's process start times (/proc), which no "
                        "moved clock moves")
def test_up_refuses_to_start_twice(tmp_path):
    # a recorded stack whose process still runs: up points at make down instead of starting another
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        rec = stack.Record(tmp_path, {"id": "x", "port": 1, "url": "http://127.0.0.1:1",
                                      "started_at": time.time() - 1, "processes": {"api-server": {"pid": child.pid}}})
        rec.save()
        up = run("up", "--state-dir", str(tmp_path))
        assert up.returncode == 1 and "already running" in up.stderr and "make down" in up.stderr
    finally:
        child.kill()
        child.wait()


def test_the_airflow_configuration_mirrors_the_compose_file(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")  # the caller's Airflow never leaks in
    monkeypatch.setenv("CLUSTER_DOCTOR_TESTS", "gpu_health")  # the caller's settings do
    env = stack.airflow_env(tmp_path, port=18080, stack_id="abc", socket_dir="/run/pg", kubeconfig="/k/config")
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor" and env["CLUSTER_DOCTOR_TESTS"] == "gpu_health"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:18080/execution/"
    assert len(env["AIRFLOW__API_AUTH__JWT_SECRET"]) >= 48
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] == str(tmp_path / "airflow" / "passwords.json")
    assert float(env["AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT"]) < float(
        env["AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT"])
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == "postgresql+psycopg2://postgres@/airflow?host=/run/pg"
    assert env["AIRFLOW_CONN_VALIDATION_DB"] == "postgresql://postgres@/cluster_doctor?host=/run/pg"
    assert json.loads(env["AIRFLOW_CONN_KUBERNETES_DEFAULT"])["extra"] == {"kube_config_path": "/k/config"}
    assert env[stack.MARKER] == "abc" and env[stack.PART] == "airflow" and "PYTHONPATH" not in env
    # the Fernet key survives a down/up (the metadata DB stays); the JWT secret is new each time
    again = stack.airflow_env(tmp_path, port=18080, stack_id="abc", socket_dir="/run/pg", kubeconfig="/k/config")
    assert again["AIRFLOW__CORE__FERNET_KEY"] == env["AIRFLOW__CORE__FERNET_KEY"]
    assert again["AIRFLOW__API_AUTH__JWT_SECRET"] != env["AIRFLOW__API_AUTH__JWT_SECRET"]
    assert (tmp_path / "secrets.json").stat().st_mode & 0o777 == 0o600


@pytest.mark.real_clock("compares the record's time with the kernel's process start times (/proc), which no "
                        "moved clock moves")
def test_its_processes_are_found_by_session_or_marker_and_nothing_else(tmp_path):
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    started = time.time() - 1
    leader = subprocess.Popen([*sleep[:2], "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
                               "'import os, time; os.setpgid(0, 0); time.sleep(60)']); time.sleep(60)"],
                              start_new_session=True)  # a component whose child moves to its own group
    marked = subprocess.Popen(sleep, start_new_session=True,
                              env={**os.environ, stack.MARKER: "s1", stack.PART: "cluster"})
    other = subprocess.Popen(sleep, start_new_session=True, env={**os.environ, stack.MARKER: "another-stack"})
    found: dict[int, str] = {}
    try:
        rec = stack.Record(tmp_path, {"id": "s1", "started_at": started,
                                      "processes": {"scheduler": {"pid": leader.pid}}})
        found = stack.stack_processes(rec)
        deadline = time.monotonic() + 30
        while len(found) < 3 and time.monotonic() < deadline:  # the grandchild is on its way
            time.sleep(0.1)
            found = stack.stack_processes(rec)
        assert found[leader.pid] == "airflow" and found[marked.pid] == "cluster" and other.pid not in found
        assert len(found) == 3 and stack.leader_alive(rec, leader.pid)
        # a record older than the processes' pids never claims them: a recycled pid is not ours
        old = stack.Record(tmp_path, {**rec.data, "started_at": time.time() + 60})
        assert stack.stack_processes(old) == {} and not stack.leader_alive(old, leader.pid)
    finally:
        for proc in (leader, marked, other):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in found:  # the grandchild, in its own group
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
