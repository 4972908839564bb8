"""A validation task killed hard: its pod leaks, and the next DagRun records the pod's
result and removes it. The real DAG through dag.test(), the real operator and client against the
Kubernetes API emulator, a real PostgreSQL results DB."""

from __future__ import annotations

import datetime as dt
import os
import signal
import sqlite3
import subprocess

import dag_runner
import psycopg
import pytest

from tests.support.suite_results import summary, validation_pods

pytestmark = pytest.mark.e2e


# Distinct logical dates: dag.test() replaces an earlier run of the same logical date (None included).
KILLED, NEXT = dt.datetime(2026, 11, 22, 10, tzinfo=dt.UTC), dt.datetime(2026, 11, 22, 11, tzinfo=dt.UTC)


def start(runner, log_path, logical_date: dt.datetime) -> subprocess.Popen:
    """A DagRun in the background, in its own process group."""
    with open(log_path, "w") as log:
        return subprocess.Popen(dag_runner.command("--conf", "{}", "--logical-date", logical_date.isoformat()),
                                env=runner.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def end_killed_run(home) -> str:
    """What Airflow does after a task process dies while its supervisor lives: the task instance is
    failed and its DagRun goes on to end (failed). dag.test() runs the tasks inside the killed process,
    so nobody is left to do it: the metadata DB is updated as the scheduler would have."""
    with sqlite3.connect(home / "airflow.db") as db:
        (run_id,) = db.execute("SELECT run_id FROM dag_run WHERE state = 'running'").fetchone()
        db.execute("UPDATE task_instance SET state = 'failed' WHERE run_id = ? AND state = 'running'", (run_id,))
        db.execute("UPDATE dag_run SET state = 'failed' WHERE run_id = ?", (run_id,))
    return run_id


def test_a_hard_killed_validation_task_leaks_its_pod_and_the_next_run_records_and_removes_it(
        runner, cluster, db_dsn, tmp_path):
    """SIGKILL of the task process mid-run (with dag.test() the task runs inside the dag_runner
    process: its whole process group is killed, as the OOM killer or `kill -9` would). on_kill never
    runs, so the pod runs on to its end and stays; the next run records the pod's own verdict for that
    try and deletes the pod, before it plans."""
    cluster.add_gpu_node("gpu-001")
    text = summary("gpu-001")
    cluster.set_script("gpu-001", "exit", exit_code=0, run_seconds=5, termination_message=text,
                       log=f"running gpu_health on gpu-001\nCLUSTER_DOCTOR_RESULT {text}\n")
    proc = start(runner, tmp_path / "killed-run.log", KILLED)
    try:
        (pod,) = cluster.wait_for(lambda: [p for p in validation_pods(cluster) if p["phase"] == "Running"],
                                  timeout=240, interval=0.2, message="the validation pod Running")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    def leaked():
        (now,) = [p for p in validation_pods(cluster) if p["name"] == pod["name"]]
        return now if now["phase"] == "Succeeded" else None

    leaked_pod = cluster.wait_for(leaked, timeout=900, message="the pod to finish")
    assert not leaked_pod["deleted"] and not leaked_pod["deletion_requested"]  # nothing removes it
    killed_run = end_killed_run(runner.home)

    result = runner.run(logical_date=NEXT)

    assert result["state"] == "success", runner.last_log[-3000:]
    cluster.wait_for(lambda: all(p["deleted"] for p in validation_pods(cluster)), timeout=900,
                     message="the leaked pod gone")
    with psycopg.connect(**db_dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT status, try_number, pod_name, reason FROM validation_history "
                    "WHERE run_id = %s AND node_name = 'gpu-001' AND test_name = 'gpu_health'", (killed_run,))
        rows = cur.fetchall()
    assert [(status, try_number, pod_name) for status, try_number, pod_name, _ in rows] == \
        [("pass", 1, pod["name"])], rows
    # recorded before this run read the latest results: gpu-001 is fresh, so nothing was due
    assert [ti for ti in result["task_instances"] if ti["task_id"].startswith("validate.") and ti["map_index"] >= 0] == []
    assert result["states"][("reap_orphans", -1)] == "success"


@pytest.mark.slow  # covered fast by kube/test_orphans.py (the next run's reaper records it, deletes it)
def test_a_completed_pod_its_task_could_not_delete_goes_with_the_next_run(runner, cluster, db_dsn):
    """The task recorded its pass but the API refused the deletion, so the Completed pod stayed.
    The next run does not take it for one "its task may still be handling": the row of its try says the
    task is done with it. It is deleted, and its try keeps one row."""
    from tests.support.suite_results import script_result

    cluster.add_gpu_node("gpu-001")
    script_result(cluster, "gpu-001")
    cluster.configure(forbidden=["delete pods"])
    first = runner.run(logical_date=KILLED)
    assert first["state"] == "success", runner.last_log[-3000:]
    (left,) = [p for p in validation_pods(cluster) if not p["deleted"]]
    assert left["phase"] == "Succeeded"
    cluster.configure(forbidden=[])

    second = runner.run(logical_date=NEXT)

    assert second["state"] == "success", runner.last_log[-3000:]
    assert "could not delete it" in runner.last_log
    cluster.wait_for(lambda: all(p["deleted"] for p in validation_pods(cluster)), timeout=900,
                     message="the left pod gone")
    with psycopg.connect(**db_dsn) as conn:
        rows = conn.execute("SELECT status, try_number, pod_name FROM validation_history").fetchall()
    assert rows == [("pass", 1, left["name"])], rows
