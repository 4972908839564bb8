"""One free window serves all of a node's due suites, and reservation of an overdue node,
end to end: the real DAG through Airflow, the real KubernetesPodOperator against the emulator,
a real PostgreSQL."""

from __future__ import annotations

import datetime as dt
import json
import threading

import psycopg
import pytest
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.reservation import KEY
from cluster_doctor.store.history import ResultStore

from tests.support.suite_results import script_result, summary, validation_pods

pytestmark = pytest.mark.e2e

SUITES = "gpu_health,dl_unit,storage_fio"


def rows(db_dsn, run_id):
    with psycopg.connect(**db_dsn) as conn:
        return conn.execute("SELECT node_name, test_name, status, reason FROM validation_history WHERE run_id = %s "
                            "ORDER BY node_name, finished_at", (run_id,)).fetchall()


def scripted(cluster, node, status="pass", health="pass", **kw):
    """The node's pods end with these results, per suite (the pods carry their suite as a label)."""
    script_result(cluster, node, "gpu_health", health, **kw)
    for suite in ("dl_unit", "storage_fio"):
        exit_code = {"pass": 0, "fail": 1}[status]
        cluster.set_script(node, "exit", labels={"cluster-doctor.io/test": suite}, exit_code=exit_code,
                           termination_message=summary(node, suite, status), run_seconds=0.2)


def test_every_due_suite_of_a_free_node_in_one_run_health_first_and_a_failing_health_stops_the_rest(
        runner, cluster, db_dsn):
    runner.env_overrides["CLUSTER_DOCTOR_TESTS"] = SUITES
    for node in ("gpu-001", "gpu-002"):
        cluster.add_gpu_node(node)
    scripted(cluster, "gpu-001")
    check = {"name": "ecc_uncorrected", "status": "fail", "device": "GPU 3", "value": 2, "unit": "errors",
             "threshold": "== 0", "message": "volatile uncorrected ECC errors on GPU 3"}
    scripted(cluster, "gpu-002", health="fail", checks=[check])

    result = runner.run()

    assert result["state"] == "failed"  # gpu-002 failed a check
    ran = rows(db_dsn, result["run_id"])
    assert [(n, t, s) for n, t, s, _ in ran] == [
        ("gpu-001", "gpu_health", "pass"), ("gpu-001", "dl_unit", "pass"), ("gpu-001", "storage_fio", "pass"),
        ("gpu-002", "gpu_health", "fail"), ("gpu-002", "dl_unit", "skipped"), ("gpu-002", "storage_fio", "skipped")]
    stopped = "stopped by gpu_health failing on this node (ecc_uncorrected"
    assert all(reason.startswith(stopped) and reason.endswith("; no pod created") for *_, reason in ran[4:])
    # one pod per executed pair, one after another on each node, health first
    pods = sorted(validation_pods(cluster), key=lambda p: p["created"])
    by_node = {}
    for pod in pods:
        by_node.setdefault(pod["node"], []).append(pod)
    assert [p["labels"]["cluster-doctor.io/test"] for p in by_node["gpu-001"]] == ["gpu_health", "dl_unit",
                                                                                   "storage_fio"]
    assert [p["labels"]["cluster-doctor.io/test"] for p in by_node["gpu-002"]] == ["gpu_health"]
    for node_pods in by_node.values():
        assert all(b["created"] >= a["deleted_at"] for a, b in zip(node_pods, node_pods[1:]))
    # the grid: every step labelled node · test; finish_node labelled with the node
    states = result["states"]
    assert states[("validate.dl_unit", "gpu-001 · dl_unit")] == "success"
    assert states[("validate.dl_unit", "gpu-002 · dl_unit")] == "skipped"
    assert not any(task == "validate.nccl_loopback" for task, _ in states)  # not enabled: no step at all
    assert states[("validate.finish_node", "gpu-002")] == "success"
    # the run's note says what it did
    assert result["note"].startswith("Cluster Doctor: 6 pair(s) planned on 2 node(s): pass 3, fail 1, skipped 2")
    assert "FAILED: 1 validation(s) failed in this run: gpu-002 · gpu_health: fail" in result["note"]


def test_a_user_pod_claiming_the_node_between_suites_stops_the_rest(runner, cluster, db_dsn):
    runner.env_overrides["CLUSTER_DOCTOR_TESTS"] = SUITES
    cluster.add_gpu_node("gpu-001")
    scripted(cluster, "gpu-001")

    def claim_after_health():
        # the moment our health pod is gone, a user job takes the node (before the next step's pod)
        cluster.wait_for(lambda: any(p["deleted"] for p in validation_pods(cluster)), timeout=240, interval=0.02,
                         message="the health pod's end")
        cluster.add_user_pod("gpu-001", name="trainer-0")

    watcher = threading.Thread(target=claim_after_health)
    watcher.start()
    result = runner.run()
    watcher.join(timeout=10)

    assert result["state"] == "success", runner.last_log[-3000:]  # a user winning the node never fails a run
    ran = rows(db_dsn, result["run_id"])
    assert [(t, s) for _, t, s, _ in ran] == [("gpu_health", "pass"), ("dl_unit", "skipped"),
                                               ("storage_fio", "skipped")]
    assert ran[1][3].startswith("the node is no longer free (default/trainer-0 requests 8 nvidia.com/gpu)")
    assert ran[2][3].startswith("stopped by dl_unit: skipped, the node is no longer free (default/trainer-0")
    assert [p["labels"]["cluster-doctor.io/test"] for p in validation_pods(cluster)] == ["gpu_health"]


def test_an_overdue_busy_node_is_reserved_then_validated_first_when_it_frees_and_released(
        runner, cluster, db_dsn, db_url):
    runner.env_overrides.update({
        "CLUSTER_DOCTOR_STALENESS_DAYS": "5.5",
        "CLUSTER_DOCTOR_RESERVATION": json.dumps({"enabled": True, "target_days": 7, "lead_hours": 30,
                                                  "max_share": 1, "breaker_share": 1})})
    now = dt.datetime.now(dt.UTC)
    for node in ("gpu-001", "gpu-002"):
        cluster.add_gpu_node(node)
        script_result(cluster, node)
    ResultStore(db_url).record([Attempt(node_name=n, test_name="gpu_health", status="pass", run_id="before",
                                        finished_at=now - dt.timedelta(days=6), dag_id="continuous_validation")
                                for n in ("gpu-001", "gpu-002")])
    cluster.add_user_pod("gpu-001", name="trainer-0")

    first = runner.run()

    assert first["state"] == "success", runner.last_log[-3000:]
    # gpu-001 is busy and overdue: reserved; gpu-002 is free: validated
    assert [t.key for t in cluster.core_v1().read_node("gpu-001").spec.taints or []] == [KEY]
    assert [(n, s) for n, _, s, _ in rows(db_dsn, first["run_id"])] == [("gpu-002", "pass")]
    assert "reserved gpu-001: taint cluster-doctor.io/reserved:NoSchedule" in runner.last_log

    cluster.core_v1().delete_namespaced_pod("trainer-0", "default", grace_period_seconds=0)  # its job ends
    second = runner.run(logical_date=dt.datetime(2026, 11, 21, 5, tzinfo=dt.UTC))

    assert second["state"] == "success", runner.last_log[-3000:]
    assert [(n, s) for n, _, s, _ in rows(db_dsn, second["run_id"])] == [("gpu-001", "pass")]
    assert cluster.core_v1().read_node("gpu-001").spec.taints in (None, [])  # removed when its validation ended
    [pod] = [p for p in validation_pods(cluster) if p["node"] == "gpu-001"]
    assert pod["phase"] == "Succeeded"
    with psycopg.connect(**db_dsn) as conn:
        [(reason, idle)] = conn.execute("SELECT release_reason, idle_gpu_hours FROM node_reservations").fetchall()
    assert reason == "validated" and idle > 0
