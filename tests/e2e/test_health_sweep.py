"""The health sweep, end to end: the real DAG through Airflow, the real KubernetesPodOperator
against the Kubernetes API emulator, a real PostgreSQL. A free node whose suites are fresh but whose last
health check is older than sweep_interval_hours runs gpu_health in the sweep group, after the due node's
bundle."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from cluster_doctor.store.history import ResultStore

from tests.support.suite_results import script_result, summary, validation_pods

pytestmark = pytest.mark.e2e


def test_a_free_node_with_a_fresh_bundle_but_an_old_health_check_is_swept_after_the_due_bundle(
        runner, cluster, db_dsn, db_url):
    runner.env_overrides["CLUSTER_DOCTOR_TESTS"] = "gpu_health,dl_unit"
    now = dt.datetime.now(dt.UTC)
    for node in ("gpu-001", "gpu-002"):
        cluster.add_gpu_node(node)
        script_result(cluster, node)
        cluster.set_script(node, "exit", labels={"cluster-doctor.io/test": "dl_unit"}, exit_code=0,
                           termination_message=summary(node, "dl_unit"), run_seconds=0.2)
    # gpu-001: every suite fresh, its health check 3 h old; gpu-002: never validated (its bundle is due)
    ResultStore(db_url).record([{"node_name": "gpu-001", "test_name": test, "status": "pass", "run_id": "before",
                                 "finished_at": now - age}
                                for test, age in (("gpu_health", dt.timedelta(hours=3)),
                                                  ("dl_unit", dt.timedelta(days=1)))])

    result = runner.run()

    assert result["state"] == "success", runner.last_log[-4000:]
    with psycopg.connect(**db_dsn) as conn:
        ran = conn.execute("SELECT node_name, test_name, status FROM validation_history WHERE run_id = %s "
                           "ORDER BY node_name, finished_at", (result["run_id"],)).fetchall()
    assert ran == [("gpu-001", "gpu_health", "pass"), ("gpu-002", "gpu_health", "pass"),
                   ("gpu-002", "dl_unit", "pass")]
    # the swept node in the sweep group, the due one in validate
    states = result["states"]
    assert states[("sweep.gpu_health", "gpu-001 · gpu_health")] == "success"
    assert states[("validate.dl_unit", "gpu-002 · dl_unit")] == "success"
    assert not any(label == "gpu-001 · gpu_health" for task, label in states if task.startswith("validate."))
    # the due bundle first: its health pod exists before the sweep's (the sweep group follows ship_suites)
    pods = sorted(validation_pods(cluster), key=lambda p: p["created"])
    assert [(p["node"], p["labels"]["cluster-doctor.io/test"]) for p in pods][0] == ("gpu-002", "gpu_health")
    assert [p["node"] for p in pods if p["labels"]["cluster-doctor.io/test"] == "gpu_health"] == ["gpu-002",
                                                                                               "gpu-001"]
    assert "health sweep: 1 free node(s) whose last health check is older than 1 h: gpu-001" in runner.last_log
