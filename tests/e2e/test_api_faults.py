"""A flaky Kubernetes API server does not fail the run: the DAG's own calls are retried (kube/retry)."""

from __future__ import annotations

import psycopg
import pytest

from tests.e2e.conftest import NAMESPACE
from tests.support.suite_results import script_result, summary, validation_pods

pytestmark = pytest.mark.e2e


@pytest.mark.slow  # covered fast by kube/test_retry.py (discovery through 429/500, a lost create read back)
def test_429_500_503_and_a_lost_create_answer_during_a_run_are_retried(runner, cluster, db_dsn):
    nodes = ["gpu-001", "gpu-002"]
    for node in nodes:
        cluster.add_gpu_node(node)
        script_result(cluster, node)
    faults = {  # discovery's node and pod lists, the suite-code ConfigMap's create (it took effect)
        "/api/v1/nodes": ([429, 500, 500], "GET"),
        "/api/v1/pods": ([503], "GET"),
        f"/api/v1/namespaces/{NAMESPACE}/configmaps": (["reset-after"], "POST"),
    }
    for path, (sequence, method) in faults.items():
        cluster.inject_faults(path, sequence, method=method, retry_after=1)

    result = runner.run()

    assert result["state"] == "success", runner.last_log[-3000:]
    assert {r["path"]: r["hits"] for r in cluster.faults()} == {p: len(s) for p, (s, _) in faults.items()}
    with psycopg.connect(**db_dsn) as conn:
        recorded = conn.execute("SELECT node_name, status FROM validation_history ORDER BY node_name").fetchall()
    assert recorded == [(node, "pass") for node in nodes]


# ---------------------------------------------------------------------------- a control plane that blinks
def when_running(cluster, action):
    """``action()`` once a validation pod is Running, beside the DagRun."""
    import threading

    def wait_then_act():
        cluster.wait_for(lambda: [p for p in validation_pods(cluster) if p["phase"] == "Running"],
                         timeout=240, interval=0.1, message="the validation pod Running")
        action()

    thread = threading.Thread(target=wait_then_act, daemon=True)
    thread.start()
    return thread


def slow_pass(cluster, node: str, run_seconds: float) -> None:
    text = summary(node)
    cluster.set_script(node, "exit", exit_code=0, run_seconds=run_seconds, termination_message=text,
                       log=f"running gpu_health on {node}\nCLUSTER_DOCTOR_RESULT {text}\n")


def rows(db_dsn) -> list[tuple]:
    with psycopg.connect(**db_dsn) as conn:
        return conn.execute("SELECT node_name, status, try_number, reason FROM validation_history "
                            "ORDER BY id").fetchall()


def never_failing(result) -> None:
    """The run summary never calls the node failing: no newly failing, none failing in coverage."""
    summary_ = result["summary"]
    assert summary_["newly_failing"] == [] and summary_["coverage"]["failing_nodes"] == [], summary_
    assert result["state"] == "success"


@pytest.mark.slow  # covered fast by airflow/test_operator_control_plane.py (the same restart, recorded once)
def test_an_apiserver_restart_while_the_validation_pod_runs_records_the_suites_result_once(
        runner, cluster, db_dsn):
    """The apiserver goes away (connections refused), comes back answering 403 while its authorizer is
    not ready, then serves: the pass the suite reported is recorded once, the pod deleted."""
    slow_pass(cluster, "gpu-001", run_seconds=6)
    cluster.add_gpu_node("gpu-001")
    restart = when_running(cluster, lambda: cluster.restart_apiserver(down_s=5, forbidden_s=4))

    result = runner.run()

    restart.join(60)
    never_failing(result)
    assert [r[:3] for r in rows(db_dsn)] == [("gpu-001", "pass", 1)], rows(db_dsn)
    # the cluster fixture asserts no validation pod is left


@pytest.mark.slow  # covered fast by airflow/test_operator_control_plane.py (the same storm, waited out)
def test_a_429_storm_on_pod_reads_records_the_suites_result_once(runner, cluster, db_dsn):
    slow_pass(cluster, "gpu-001", run_seconds=3)
    cluster.add_gpu_node("gpu-001")
    storm = when_running(cluster, lambda: cluster.storm(["get"], "pods", seconds=15, retry_after=1))

    result = runner.run()

    storm.join(60)
    never_failing(result)
    assert cluster.storms()[0]["hits"] > 0
    assert [r[:3] for r in rows(db_dsn)] == [("gpu-001", "pass", 1)], rows(db_dsn)


@pytest.mark.slow  # two DagRuns and a try's whole time for the API (~2 min); test_operator_control_plane covers it fast
def test_a_result_not_read_in_time_is_not_judged_then_recorded_by_the_next_run(runner, cluster, db_dsn):
    """A storm on pod reads outlasting the try's time for the API: the try is recorded not judged
    (skipped: the pair stays due, nothing failing), its pod kept; the next run's reaper records the pod's
    pass over that row (one row) and deletes the pod."""
    import datetime as dt

    runner.env_overrides.update({"CLUSTER_DOCTOR_PENDING_TIMEOUT_S": "10", "CLUSTER_DOCTOR_TASK_MARGIN_S": "20",
                                 "CLUSTER_DOCTOR_SUITE_TIMEOUTS_S": '{"gpu_health": 10}'})
    slow_pass(cluster, "gpu-001", run_seconds=2)
    cluster.add_gpu_node("gpu-001")
    storm = when_running(cluster, lambda: cluster.storm(["get"], "pods", seconds=90, retry_after=1))

    first = runner.run(logical_date=dt.datetime(2026, 11, 22, 10, tzinfo=dt.UTC))

    storm.join(60)
    never_failing(first)
    ((node, status, try_number, reason),) = rows(db_dsn)
    assert (node, status, try_number) == ("gpu-001", "skipped", 1) and reason.startswith("NOT_JUDGED: "), reason
    (kept,) = [p for p in validation_pods(cluster) if not p["deleted"]]
    cluster.clear_faults()
    cluster.wait_for(lambda: [p for p in validation_pods(cluster) if p["phase"] == "Succeeded"], timeout=900,
                     message="the kept pod ended")

    second = runner.run(logical_date=dt.datetime(2026, 11, 22, 11, tzinfo=dt.UTC))

    assert second["state"] == "success", runner.last_log[-3000:]
    assert [r[:3] for r in rows(db_dsn)] == [("gpu-001", "pass", 1)], rows(db_dsn)
    cluster.wait_for(lambda: all(p["deleted"] for p in validation_pods(cluster)), timeout=900,
                     message=f"the kept pod {kept['name']} gone")


@pytest.mark.slow  # covered fast by airflow/test_operator_control_plane.py (the same 403, recorded skipped)
def test_a_persistent_403_is_reported_as_the_missing_permission(runner, cluster, db_dsn):
    script_result(cluster, "gpu-001")
    cluster.add_gpu_node("gpu-001")
    cluster.configure(forbidden=["create pods"])

    result = runner.run()

    never_failing(result)
    ((node, status, _, reason),) = rows(db_dsn)
    assert (node, status) == ("gpu-001", "skipped")
    assert "missing permission: create pods in namespace cluster-doctor" in reason, reason
