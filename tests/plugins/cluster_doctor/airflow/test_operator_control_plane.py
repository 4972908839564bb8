"""A control plane that blinks never fails a healthy node, and a re-run never validates a node
twice: NodeValidationPodOperator.execute with the real provider and client against the
Kubernetes API emulator restarting, throttling and refusing, as a real apiserver does."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import types

import pytest
from airflow.sdk.exceptions import AirflowSkipException
from cluster_doctor.airflow.operator import VerdictFailed
from cluster_doctor.domain.attempts import NOT_JUDGED
from cluster_doctor.kube import orphans, retry
from kubernetes import client as k8s

from tests.support.emulator import FAST, NS, POD_SELECTOR
from tests.support.operator import FakeTI, operator
from tests.support.suite_results import script_result, summary

pytestmark = pytest.mark.emulator(pvc=True, settings=FAST)


@pytest.fixture
def cluster(operator_cluster):
    operator_cluster.add_gpu_node("gpu-001")
    return operator_cluster


@pytest.fixture(autouse=True)
def fresh_health():
    """What the retry module learnt of the apiserver (unreachable just now) is per process: not carried
    from one test to the next."""
    retry.HEALTH.reset()
    yield
    retry.HEALTH.reset()


def run(op, *, try_number: int = 1):
    ti = FakeTI()
    ti.try_number = try_number
    context = {"ti": ti, "run_id": ti.run_id, "dag": types.SimpleNamespace(dag_id=ti.dag_id)}
    written = []
    op._write = written.append
    try:
        returned, raised = op.execute(context), None
    except (VerdictFailed, AirflowSkipException) as exc:
        returned, raised = None, exc
    return written, returned, raised


def passing(cluster, run_seconds: float) -> None:
    text = summary("gpu-001")
    cluster.set_script("gpu-001", "exit", exit_code=0, run_seconds=run_seconds, termination_message=text,
                       log=f"running gpu_health on gpu-001\nCLUSTER_DOCTOR_RESULT {text}\n")


def when_running(cluster, action) -> threading.Thread:
    """``action()`` once our pod is Running, in the background."""
    def wait_then_act():
        cluster.wait_for(lambda: [p for p in cluster.live_pods(POD_SELECTOR) if p["phase"] == "Running"],
                         timeout=60, interval=0.05, message="our pod Running")
        action()

    thread = threading.Thread(target=wait_then_act, daemon=True)
    thread.start()
    return thread


def retried(caplog, status: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == retry.__name__ and f"Kubernetes API {status}" in r.getMessage()]


# ---------------------------------------------------------------------------- waited out
def test_an_apiserver_restart_while_the_pod_runs_ends_with_the_suites_result_recorded_once(cluster, caplog):
    """Down 3 s (connections reset, then refused), then 403 for 4 s while /readyz fails, as a kube-apiserver
    coming back answers before its authorizer is ready: every call on our pod waits it out."""
    caplog.set_level(logging.WARNING)
    passing(cluster, run_seconds=4)
    restart = when_running(cluster, lambda: cluster.restart_apiserver(down_s=3, forbidden_s=4))

    written, returned, raised = run(operator())

    restart.join(30)
    assert raised is None and returned["status"] == "pass", (raised, written)
    assert [a.status for a in written] == ["pass"]
    assert retried(caplog, "403 Forbidden"), "the 403 of a starting apiserver was never met"
    (pod,) = cluster.pod_history(POD_SELECTOR)
    assert pod["deleted"]


def test_a_429_storm_on_pod_reads_is_waited_out(cluster):
    passing(cluster, run_seconds=2)
    storm = when_running(cluster, lambda: cluster.storm(["get"], "pods", seconds=8, retry_after=1))

    written, returned, raised = run(operator())

    storm.join(30)
    assert raised is None and [a.status for a in written] == ["pass"], (raised, written)
    assert cluster.storms()[0]["hits"] > 0
    assert all(p["deleted"] for p in cluster.pod_history(POD_SELECTOR))


# ---------------------------------------------------------------------------- refused for good
def test_a_persistent_403_is_reported_as_the_missing_permission(cluster):
    cluster.configure(forbidden=["create pods"])
    script_result(cluster, "gpu-001")

    written, _, raised = run(operator())

    assert isinstance(raised, AirflowSkipException)
    (attempt,) = written
    assert attempt.status == "skipped", attempt  # never error: says nothing about the node
    assert "missing permission: create pods in namespace cluster-doctor" in attempt.reason, attempt.reason
    assert cluster.pod_history(POD_SELECTOR) == []


# ---------------------------------------------------------------------------- not judged in time
def test_a_result_not_read_in_time_keeps_the_pod_and_the_next_run_records_it_once(cluster, store):
    """The storm outlasts the try's time for the API: the try records not judged (skipped, the pair stays
    due), keeps the pod; the next run's reaper records the pod's pass over that row and deletes it."""
    passing(cluster, run_seconds=3)
    # a pending window shorter than the storm: the provider cannot see the pod start, but the pending
    # watch must not take it for a pod stuck Pending (it reads it first, and cannot)
    op = operator(pending_timeout_s=3)
    op._api_time_s = lambda: 8.0  # the try's execution_timeout less its reserve, shortened
    storm = when_running(cluster, lambda: cluster.storm(["get"], "pods", seconds=600, retry_after=1))

    written, _, raised = run(op)

    storm.join(30)
    assert isinstance(raised, AirflowSkipException) and NOT_JUDGED in str(raised)
    (attempt,) = written
    assert attempt.status == "skipped" and attempt.reason.startswith(f"{NOT_JUDGED}: ")
    assert "429" in attempt.reason and "kept" in attempt.reason, attempt.reason
    (pod,) = cluster.pod_history(POD_SELECTOR)
    assert not pod["deleted"] and not pod["deletion_requested"]  # the pod holds the truth
    store.record(written)

    cluster.clear_faults()
    cluster.wait_for(lambda: cluster.live_pods(POD_SELECTOR)[0]["phase"] == "Succeeded", timeout=30,
                     message="the kept pod ended")
    report = orphans.reap(retry.core_v1(cluster.api_client()), store, op.cd_settings,
                          run_state=lambda dag_id, run_id: "success")

    assert report.errors == [] and "(superseded)" in report.recorded[0], report
    (row,) = store.attempts_for_run(FakeTI().dag_id, FakeTI().run_id)
    assert (row["status"], row["try_number"], row["pod_name"]) == ("pass", 1, pod["name"])
    cluster.wait_for(lambda: not cluster.live_pods(POD_SELECTOR), timeout=30, message="the kept pod gone")


# ---------------------------------------------------------------------------- a re-run
def earlier_try(cluster, try_number: int = 1) -> k8s.V1Pod:
    """The pod try ``try_number`` of the same task instance created before Airflow lost it."""
    op, ti = operator(), FakeTI()
    ti.try_number = try_number
    body = op.build_pod_request_obj({"ti": ti, "run_id": ti.run_id, "dag": types.SimpleNamespace(dag_id=ti.dag_id)})
    return cluster.core_v1().create_namespaced_pod(NS, body)


def test_a_rerun_adopts_the_ended_pod_of_the_earlier_try_and_never_validates_again(cluster):
    script_result(cluster, "gpu-001")
    pod = earlier_try(cluster)
    cluster.wait_for(lambda: cluster.live_pods(POD_SELECTOR)[0]["phase"] == "Succeeded", timeout=30,
                     message="try 1's pod ended")

    written, returned, raised = run(operator(), try_number=2)

    assert raised is None and returned["status"] == "pass"
    (attempt,) = written
    assert (attempt.try_number, attempt.pod_name) == (1, pod.metadata.name)  # one row per pod: try 1's
    (only,) = cluster.pod_history(POD_SELECTOR)  # no second pod
    assert only["name"] == pod.metadata.name and only["deleted"]


def test_a_rerun_waits_for_the_running_pod_of_the_earlier_try(cluster):
    passing(cluster, run_seconds=3)
    pod = earlier_try(cluster)
    cluster.wait_for(lambda: cluster.live_pods(POD_SELECTOR)[0]["phase"] == "Running", timeout=30,
                     message="try 1's pod running")

    written, returned, raised = run(operator(), try_number=2)

    assert raised is None and returned["status"] == "pass", (raised, written)
    assert [(a.try_number, a.pod_name) for a in written] == [(1, pod.metadata.name)]
    (only,) = cluster.pod_history(POD_SELECTOR)
    assert only["deleted"]


def test_the_planned_time_still_guards_a_fresh_pod_of_a_rerun(cluster):
    """No earlier pod: a re-run is an ordinary try (its own try number, the max queue time applies)."""
    script_result(cluster, "gpu-001")
    op = operator()
    op.planned_at = dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)

    written, _, raised = run(op, try_number=2)

    assert isinstance(raised, AirflowSkipException)
    assert [(a.status, a.try_number) for a in written] == [("skipped", 2)]
    assert cluster.pod_history(POD_SELECTOR) == []
