"""Retries on a real Airflow scheduler: a scheduler killed while a validation pod runs
makes Airflow run the task again as try 2 (the next scheduler resets the orphaned task instance: LocalExecutor
cannot adopt it), although the DAG sets no retries. Try 2 adopts try 1's pod, never creates a second one:
one validation of the node, one row for the pair with the suite's real result, no pod left behind.

A real Airflow 3.3 (tests/support/real_airflow.py) against the Kubernetes API emulator and a real PostgreSQL.
The scheduler is killed as a lost host kills it: SIGKILL to every process of its session, the LocalExecutor
workers and the task processes they forked included, so nothing of try 1 is left to heartbeat or record.
"""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.support.real_airflow import SCHEDULER, airflow, metadata, runs, wait
from tests.support.suite_results import summary, validation_pods

# make test-slow (about 3 minutes); the adoption itself runs in make test at task level
# (tests/plugins/cluster_doctor/airflow/test_operator_control_plane.py).
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

NODE, SUITE = "gpu-001", "gpu_health"
RUN_S = 100  # the suite runs this long: the scheduler is killed, another one starts and resets the task meanwhile
TASK = "validate.gpu_health"
# Seconds, not Airflow's minutes: a dead scheduler's job counts as dead after 12 s without a heartbeat
# (heartbeat every 2 s), orphaned task instances are looked for every 5 s, and a task instance without a
# heartbeat is failed after 20 s.
FAST_RECOVERY = {"AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
                 "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "12",
                 "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "5",
                 "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
                 "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5"}


def _running_pod(cluster) -> dict | None:
    return next((p for p in validation_pods(cluster) if p["node"] == NODE and p["phase"] == "Running"
                 and not p["deleted"]), None)


def _try_number(home) -> int:
    rows = metadata(home, "SELECT try_number, state FROM task_instance WHERE dag_id = 'continuous_validation' "
                          "AND task_id = ? AND map_index = 0", (TASK,))
    return rows[0][0] if rows else 0


def test_a_scheduler_killed_while_a_pod_runs_makes_try_2_adopt_the_pod_not_validate_again(
        runner, cluster, db_dsn, tmp_path):
    cluster.add_gpu_node(NODE)  # never validated: the first scheduled run plans its gpu_health
    text = summary(NODE)
    cluster.set_script(NODE, "exit", exit_code=0, run_seconds=RUN_S, termination_message=text,
                       log=f"running {SUITE} on {NODE}\nCLUSTER_DOCTOR_RESULT {text}\n")
    runner.env_overrides.update({"CLUSTER_DOCTOR_FAST_PATH_MINUTES": "0", "CLUSTER_DOCTOR_SWEEP_INTERVAL_HOURS": "0",
                                 **FAST_RECOVERY})
    logs = tmp_path / "logs"
    logs.mkdir()
    with airflow(runner.env(), logs) as components:
        pod = wait("gpu-001's validation pod Running", lambda: _running_pod(cluster), 420, logs, 0.5)
        assert _try_number(runner.home) == 1
        killed_at = time.monotonic()
        killed = components.kill_hard("scheduler")
        components.start("scheduler", SCHEDULER)
        wait("the task run again as try 2", lambda: _try_number(runner.home) >= 2, 240, logs, 0.5)
        try_2_after = time.monotonic() - killed_at
        (run_id, state) = wait("the run ended", lambda: next(
            ((r, s) for r, s in runs(runner.home, "continuous_validation") if s in ("success", "failed")), None),
            300, logs, 2)
        ended_after = time.monotonic() - killed_at
    created = [p for p in validation_pods(cluster) if p["node"] == NODE]
    with psycopg.connect(**db_dsn) as conn:
        rows = conn.execute("SELECT status, try_number, pod_name FROM validation_history WHERE node_name = %s "
                            "AND test_name = %s", (NODE, SUITE)).fetchall()
    adopted = "adopted, no new pod is created" in "".join(p.read_text() for p in (runner.home / "logs").rglob("*")
                                                          if p.is_file())
    print(f"\nretries: {len(killed)} processes of the scheduler's session killed while pod {pod['name']} ran; "
          f"try 2 of {TASK} {try_2_after:.0f} s later; run {run_id} {state} {ended_after:.0f} s after the kill; "
          f"validation pods created for {NODE}: {len(created)}; rows: {rows}; try 2 adopted the pod: {adopted}")
    assert _try_number(runner.home) == 2
    assert [p["name"] for p in created] == [pod["name"]]  # one validation of the node, never two
    assert rows == [("pass", 1, pod["name"])]  # one row, the suite's real result, under the pod's try
    assert adopted
    assert all(p["deleted"] for p in created)  # and none left (the cluster fixture checks the namespace too)
    assert state == "success"
