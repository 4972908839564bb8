"""Orphaned validation pods (their task died hard) against the Kubernetes API emulator with the real
client, pods built by the real operator, and a real PostgreSQL results database."""

from __future__ import annotations

import datetime as dt
import json
import types

import pytest
from cluster_doctor.airflow import tasks
from cluster_doctor.airflow.operator import NodeValidationPodOperator
from cluster_doctor.domain import results
from cluster_doctor.domain.attempts import UNREPORTED, Attempt, not_judged
from cluster_doctor.domain.config import Settings
from cluster_doctor.kube import orphans
from cluster_doctor.store.history import ResultStore, RetryPolicy
from kubernetes import client as k8s
from kubernetes.client import ApiClient

from tests.support.emulator import FAST
from tests.support.suite_results import script_result, summary

NS = "cluster-doctor"
POD_SELECTOR = "app.kubernetes.io/name=cluster-doctor"
DAG_ID = "continuous_validation"
RUN_ID = "scheduled__2026-11-22T10:00:00+00:00"  # too long and odd for a label: only the annotation has it
BASE = {"suite_device": "cpu", "pending_timeout_s": 30}

ended_run = lambda dag_id, run_id: "failed"  # noqa: E731
live_run = lambda dag_id, run_id: "running"  # noqa: E731


pytestmark = pytest.mark.emulator(pvc=True, settings=FAST)


@pytest.fixture
def cluster(operator_cluster):
    for node in ("gpu-001", "gpu-002"):
        operator_cluster.add_gpu_node(node)
    return operator_cluster


def settings(**overrides) -> Settings:
    return Settings(**{**BASE, **overrides})


def leak(cluster, node="gpu-001", *, run_id=RUN_ID, map_index=0, try_number=1, **overrides) -> k8s.V1Pod:
    """The pod the operator creates for this try (the provider's labels, our annotations), created as its
    task would before dying: nothing will watch, record or delete it."""
    run_config = {"settings": settings(**overrides).to_dict(), "configmap": "cluster-doctor-suites-0",
                  "suite_version": "sha256:0000000000000000", "suite_files": ["__init__.py"]}
    op = NodeValidationPodOperator(task_id="validate", node_name=node, test_name="gpu_health", gpu_count=8,
                                   gpu_model="NVIDIA-H100-80GB-HBM3", planned_at=dt.datetime.now(dt.UTC).isoformat(),
                                   run_config=run_config)
    ti = types.SimpleNamespace(dag_id=DAG_ID, task_id="validate", run_id=run_id, map_index=map_index,
                               try_number=try_number)
    body = op.build_pod_request_obj({"ti": ti, "run_id": run_id, "dag": types.SimpleNamespace(dag_id=DAG_ID)})
    return cluster.core_v1().create_namespaced_pod(NS, body)


def phase(cluster, pod: k8s.V1Pod) -> str | None:
    try:
        return cluster.core_v1().read_namespaced_pod(pod.metadata.name, NS).status.phase
    except k8s.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def wait_phase(cluster, pod, *phases: str) -> None:
    cluster.wait_for(lambda: phase(cluster, pod) in phases, timeout=30, message=f"{pod.metadata.name} {phases}")


def wait_gone(cluster, pod) -> None:
    cluster.wait_for(lambda: phase(cluster, pod) is None, timeout=30, message=f"{pod.metadata.name} gone")


def as_dict(cluster, pod) -> dict:
    return ApiClient().sanitize_for_serialization(cluster.core_v1().read_namespaced_pod(pod.metadata.name, NS))


def history(store: ResultStore, run_id: str = RUN_ID) -> list[dict]:
    return store.attempts_for_run(DAG_ID, run_id)


def reap(cluster, store, run_state=ended_run, **overrides) -> orphans.Report:
    return orphans.reap(cluster.core_v1(), store, settings(**overrides), run_state=run_state)


# ---------------------------------------------------------------------------- ended orphans
def test_an_ended_orphan_is_recorded_with_the_pods_own_status_then_deleted(cluster, store):
    script_result(cluster, "gpu-001", status="fail", checks=[
        {"name": "ecc_uncorrectable", "status": "fail", "device": "GPU3", "value": 2, "threshold": "== 0",
         "message": "2 uncorrectable ECC errors"}])
    pod = leak(cluster, map_index=4, try_number=2)
    wait_phase(cluster, pod, "Failed")

    report = reap(cluster, store)

    assert report.errors == [] and len(report.recorded) == 1 and len(report.deleted) == 1
    (row,) = history(store)
    assert (row["status"], row["node_name"], row["test_name"]) == ("fail", "gpu-001", "gpu_health")
    assert (row["run_id"], row["map_index"], row["try_number"], row["pod_name"]) == (RUN_ID, 4, 2, pod.metadata.name)
    assert row["checks"][0]["device"] == "GPU3" and row["gpu_count"] == 8
    assert row["suite_version"] == "sha256:0000000000000000"
    wait_gone(cluster, pod)
    assert report.freed_nodes == []  # an ended pod holds no GPUs


def test_the_orphans_attempt_is_the_one_its_operator_would_have_recorded(cluster, store):
    from tests.support.operator import FakeTI, operator, run

    script_result(cluster, "gpu-001")
    ti, written, _, _ = run(operator(**BASE))  # the live path, for comparison
    (live,) = written
    pod = leak(cluster, run_id=ti.run_id, map_index=ti.map_index, try_number=ti.try_number)
    wait_phase(cluster, pod, "Succeeded")

    reap(cluster, store)

    (row,) = history(store, FakeTI().run_id)
    timing = {"pod_name", "started_at", "finished_at", "duration_s"}
    expected = {k: v for k, v in live.to_dict().items() if k not in timing}
    assert {k: row[k] for k in expected} == expected
    wait_gone(cluster, pod)


def test_a_did_not_report_row_is_superseded_by_the_pods_truthful_status(cluster, store):
    """The original run's record task found no report (the task process was SIGKILLed) and wrote its
    placeholder; the pod's own verdict replaces it: one row for the pair, the latest view agrees."""
    from cluster_doctor.domain.payloads import Plan, PlannedPair

    pair = PlannedPair(node_name="gpu-001", test_name="gpu_health", why="never executed", gpu_count=8,
                       gpu_model="NVIDIA-H100-80GB-HBM3")
    tasks.record(Plan(planned_at=dt.datetime.now(dt.UTC), pairs=[pair]), [], store, dag_id=DAG_ID, run_id=RUN_ID)
    (placeholder,) = history(store)
    assert placeholder["status"] == "skipped" and placeholder["reason"] == UNREPORTED
    script_result(cluster, "gpu-001")
    pod = leak(cluster)
    wait_phase(cluster, pod, "Succeeded")

    report = reap(cluster, store)

    assert "(superseded)" in report.recorded[0], report.recorded
    (row,) = history(store)
    assert (row["status"], row["try_number"], row["id"]) == ("pass", 1, placeholder["id"])
    assert row["reason"] != UNREPORTED
    (latest,) = store.latest()
    assert (latest["status"], latest["last_attempt_status"]) == ("pass", "pass")
    assert store.check_latest() == []
    wait_gone(cluster, pod)


def test_a_verdict_already_stored_for_the_try_is_never_overwritten(cluster, store):
    """The operator recorded its try, then died before deleting the pod: its verdict stands."""
    stored = Attempt(node_name="gpu-001", test_name="gpu_health", status="fail", reason="ECC errors",
                     finished_at=dt.datetime.now(dt.UTC), dag_id=DAG_ID, run_id=RUN_ID, map_index=0, try_number=1)
    store.record([stored])
    other = Attempt(node_name="gpu-001", test_name="gpu_health", status="skipped", reason=UNREPORTED,
                    finished_at=dt.datetime.now(dt.UTC), dag_id=DAG_ID, run_id="another-run", try_number=0)
    store.record([other])  # another run's placeholder: not this pod's
    script_result(cluster, "gpu-001")
    pod = leak(cluster)
    wait_phase(cluster, pod, "Succeeded")

    report = reap(cluster, store)

    assert "(conflict)" in report.recorded[0], report.recorded
    assert [(r["status"], r["reason"]) for r in history(store)] == [("fail", "ECC errors")]
    assert [r["status"] for r in history(store, "another-run")] == ["skipped"]
    wait_gone(cluster, pod)


# ---------------------------------------------------------------------------- pods their task recorded
def not_judged_row(pod: k8s.V1Pod, run_id: str = RUN_ID, try_number: int = 1) -> Attempt:
    return Attempt(node_name="gpu-001", test_name="gpu_health", status="skipped",
                   reason=not_judged(f"the suite's result could not be read: Kubernetes API 429 Too Many Requests; "
                                     f"pod {pod.metadata.name} kept, the next run records its result from it"),
                   finished_at=dt.datetime.now(dt.UTC), pod_name=pod.metadata.name, dag_id=DAG_ID, run_id=run_id,
                   map_index=0, try_number=try_number)


def test_a_kept_pods_result_replaces_its_not_judged_row_and_the_pod_goes(cluster, store):
    """The task could not read the pod's result in time (a 429 storm), recorded its try as not
    judged and kept the pod. The next run records the pod's own verdict over that row — the same row,
    never a second one — at once, whatever Airflow says of the run, then deletes the pod."""
    script_result(cluster, "gpu-001")
    pod = leak(cluster)
    wait_phase(cluster, pod, "Succeeded")
    store.record([not_judged_row(pod)])
    (kept,) = history(store)

    report = reap(cluster, store, run_state=lambda dag_id, run_id: None)  # Airflow cannot say; just ended

    assert "(superseded)" in report.recorded[0] and report.errors == [], report
    (row,) = history(store)
    assert (row["id"], row["status"], row["try_number"], row["pod_name"]) == (kept["id"], "pass", 1, pod.metadata.name)
    (latest,) = store.latest()
    assert latest["status"] == "pass" and store.check_latest() == []
    wait_gone(cluster, pod)
    assert reap(cluster, store).recorded == []  # nothing left to do


def test_a_kept_pod_still_running_is_left_to_end(cluster, store):
    cluster.set_script("gpu-001", "run")
    pod = leak(cluster)
    wait_phase(cluster, pod, "Running")
    store.record([not_judged_row(pod)])

    report = reap(cluster, store)

    assert report.deleted == [] and "recorded once it ends" in report.kept[0], report
    assert history(store)[0]["status"] == "skipped"
    cluster.core_v1().delete_namespaced_pod(pod.metadata.name, NS)
    wait_gone(cluster, pod)


def test_a_completed_pod_whose_task_finished_without_deleting_it_goes_with_the_next_run(cluster, store):
    """The task recorded its try but its deletion failed (the API refused it). The
    next run deletes the pod even though it just ended and Airflow says its run is still running: the row
    of its try says the task is done with it. Its result is recorded only if it was not yet."""
    script_result(cluster, "gpu-001")
    script_result(cluster, "gpu-002")
    done = leak(cluster, "gpu-001", map_index=0)
    unrecorded = leak(cluster, "gpu-002", map_index=1, try_number=1)
    for pod in (done, unrecorded):
        wait_phase(cluster, pod, "Succeeded")
    stored = Attempt(node_name="gpu-001", test_name="gpu_health", status="pass", reason="all 1 checks passed",
                     finished_at=dt.datetime.now(dt.UTC), pod_name=done.metadata.name, dag_id=DAG_ID, run_id=RUN_ID,
                     map_index=0, try_number=1)
    store.record([stored])

    report = reap(cluster, store, run_state=live_run)

    assert [d.split(" ")[0] for d in report.deleted] == [done.metadata.name], report
    assert "its task recorded try 1 (pass) but could not delete it" in report.deleted[0]
    assert "(duplicate)" in report.recorded[0] or "(conflict)" in report.recorded[0], report.recorded
    assert [(r["node_name"], r["status"]) for r in history(store)] == [("gpu-001", "pass")]
    assert any(unrecorded.metadata.name in k and "its DagRun is running" in k for k in report.kept), report.kept
    wait_gone(cluster, done)
    cluster.core_v1().delete_namespaced_pod(unrecorded.metadata.name, NS)
    wait_gone(cluster, unrecorded)


def hostile_summary(**changes) -> str:
    data = json.loads(summary("gpu-001"))
    data.update(reason="fine\u202e\x00\x07 really", metrics={"gpus_visible": 10**30}, **changes)
    return json.dumps(data)


@pytest.mark.parametrize("message, status, expect", [
    # a pass with control/bidi characters and a number no column holds: cleaned, and never a pass (a
    # judgement resting on a number nobody can check), exactly as the operator would have recorded it
    (hostile_summary(), "error", "RESULT_VALUE_INVALID"),
    # breaks the result contract: an error saying why, never a pass
    (hostile_summary(duration_s=-5), "error", "malformed suite result"),
    # not a summary at all, exit 0: never a pass
    ("\x1b[31mall good\u202e\x00" * 50, "error", "exited 0 without a result"),
])
def test_hostile_termination_messages_go_through_the_operators_boundary(cluster, store, message, status, expect):
    cluster.set_script("gpu-001", "exit", exit_code=0, run_seconds=0.1, termination_message=message, log="")
    pod = leak(cluster)
    wait_phase(cluster, pod, "Succeeded")
    listed = as_dict(cluster, pod)
    owner = orphans.owner_of(listed)
    expected = results.attempt_from_pod(
        listed, node_name="gpu-001", test_name="gpu_health", now=dt.datetime.now(dt.UTC),
        run_budget_s=settings().suite_timeout("gpu_health"),
        gpu_count=8, gpu_model="NVIDIA-H100-80GB-HBM3", suite_version="sha256:0000000000000000",
        pod_name=pod.metadata.name, dag_id=DAG_ID, run_id=owner.run_id, map_index=0, try_number=1)

    report = reap(cluster, store)

    assert report.errors == []
    (row,) = history(store)
    assert row["status"] == expected.status == status and expect in row["reason"]
    assert (row["reason"], row["metrics"], row["checks"]) == (expected.reason, expected.metrics, expected.checks)
    assert "\x00" not in row["reason"] and "\u202e" not in row["reason"]
    wait_gone(cluster, pod)


# ---------------------------------------------------------------------------- pods that are not orphans
def test_a_running_pod_within_its_deadline_is_left_alone(cluster, store):
    cluster.set_script("gpu-001", "run")  # runs until deleted
    pod = leak(cluster)
    wait_phase(cluster, pod, "Running")

    for run_state in (None, ended_run):  # unknown run; a run that ended: the pod is left to finish
        report = reap(cluster, store, run_state=run_state)
        assert report.recorded == report.deleted == report.errors == [], report
        assert len(report.kept) == 1 and phase(cluster, pod) == "Running"
    assert history(store) == []
    cluster.core_v1().delete_namespaced_pod(pod.metadata.name, NS)
    wait_gone(cluster, pod)


def test_the_pods_of_a_live_run_are_never_touched(cluster, store):
    script_result(cluster, "gpu-001")
    pod = leak(cluster)
    wait_phase(cluster, pod, "Succeeded")

    report = reap(cluster, store, run_state=live_run, task_margin_s=1)
    assert report.recorded == report.deleted == [] and "its DagRun is running" in report.kept[0]
    # unknown run, ended moments ago: its task may still be deleting it (the grace is task_margin_s)
    report = reap(cluster, store, run_state=None, task_margin_s=3600)
    assert report.recorded == report.deleted == [] and "recently" in report.kept[0]
    assert phase(cluster, pod) == "Succeeded" and history(store) == []

    reap(cluster, store)  # once its run has ended
    wait_gone(cluster, pod)


def test_an_unknown_runs_ended_pod_is_reaped_once_its_grace_is_over(cluster, store):
    script_result(cluster, "gpu-001")
    pod = leak(cluster, task_margin_s=1)
    wait_phase(cluster, pod, "Succeeded")
    finished = orphans.ended_at(as_dict(cluster, pod))
    cluster.wait_for(lambda: dt.datetime.now(dt.UTC) > finished + dt.timedelta(seconds=1.5), message="grace over")

    def unreadable(dag_id, run_id):
        raise RuntimeError("the execution API is unreachable")

    report = reap(cluster, store, run_state=unreadable, task_margin_s=1)

    assert [r["status"] for r in history(store)] == ["pass"] and len(report.deleted) == 1
    wait_gone(cluster, pod)


def test_pods_without_the_operators_identity_are_left_alone(cluster, store):
    cluster.set_script("gpu-001", "exit", exit_code=0, run_seconds=0.1)
    stray = cluster.core_v1().create_namespaced_pod(NS, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "hand-made", "labels": {"app.kubernetes.io/name": "cluster-doctor",
                                                     "app.kubernetes.io/component": "validation"}},
        "spec": {"restartPolicy": "Never", "nodeName": "gpu-001",
                 "containers": [{"name": "base", "image": "busybox", "command": ["true"]}]}})
    wait_phase(cluster, stray, "Succeeded")

    report = reap(cluster, store)

    assert report.deleted == [] and "not created by the validation task" in report.kept[0]
    cluster.core_v1().delete_namespaced_pod("hand-made", NS)
    wait_gone(cluster, stray)


# ---------------------------------------------------------------------------- pods without a result
def test_a_pod_past_its_deadline_is_deleted_and_recorded_skipped(cluster, store):
    tight = {"pending_timeout_s": 1, "suite_timeouts_s": {"gpu_health": 1}, "task_margin_s": 1}
    cluster.set_script("gpu-001", "never_schedule", message="0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
    pod = leak(cluster, **tight)
    assert pod.spec.active_deadline_seconds == 2
    deadline = pod.metadata.creation_timestamp + dt.timedelta(seconds=2 + 1)
    cluster.wait_for(lambda: dt.datetime.now(dt.UTC) > deadline, message="past the deadline")

    report = reap(cluster, store, run_state=None, **tight)

    (row,) = history(store)
    assert row["status"] == "skipped" and "orphaned" in row["reason"] and "past its deadline" in row["reason"]
    assert len(report.deleted) == 1 and report.freed_nodes == []  # never bound: it held no node
    wait_gone(cluster, pod)


def test_a_pending_pod_of_an_ended_run_is_deleted_at_once(cluster, store):
    cluster.set_script("gpu-001", "never_schedule", message="waiting for the gang scheduler")
    pod = leak(cluster)
    wait_phase(cluster, pod, "Pending")
    assert reap(cluster, store, run_state=None).deleted == []  # unknown run, within its deadline

    report = reap(cluster, store)

    (row,) = history(store)
    assert row["status"] == "skipped" and "still Pending after its DagRun ended" in row["reason"]
    assert len(report.deleted) == 1
    wait_gone(cluster, pod)


# ---------------------------------------------------------------------------- failures
def test_a_failed_delete_is_reported_and_the_other_orphans_are_still_handled(cluster, store):
    script_result(cluster, "gpu-001")
    script_result(cluster, "gpu-002")
    first, second = leak(cluster, "gpu-001", map_index=0), leak(cluster, "gpu-002", map_index=1)
    wait_phase(cluster, first, "Succeeded")
    wait_phase(cluster, second, "Succeeded")
    report = orphans.Report()
    found = orphans.find(cluster.core_v1(), settings(), run_state=ended_run, report=report)
    # between the listing and the deletion, the first pod is replaced by a new one of the same name
    body = ApiClient().sanitize_for_serialization(cluster.core_v1().read_namespaced_pod(first.metadata.name, NS))
    cluster.core_v1().delete_namespaced_pod(first.metadata.name, NS)
    wait_gone(cluster, first)
    cluster.set_script("gpu-001", "run")
    replacement = cluster.core_v1().create_namespaced_pod(NS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {k: body["metadata"][k] for k in ("name", "labels", "annotations")},
        "spec": body["spec"]})

    orphans.dispose(cluster.core_v1(), store, settings(), found, report)

    (error,) = report.errors
    assert error.startswith(f"deleting {first.metadata.name}") and "Precondition failed: UID" in error
    assert [d.split(" ")[0] for d in report.deleted] == [second.metadata.name]
    assert sorted(r["node_name"] for r in history(store)) == ["gpu-001", "gpu-002"]
    wait_gone(cluster, second)
    assert phase(cluster, replacement) in ("Pending", "Running")  # the newer pod was never touched
    cluster.core_v1().delete_namespaced_pod(replacement.metadata.name, NS)
    wait_gone(cluster, replacement)


def test_deletes_refused_by_rbac_keep_the_recorded_result_and_the_next_run_finishes(cluster, store):
    script_result(cluster, "gpu-001")
    script_result(cluster, "gpu-002")
    pods = [leak(cluster, "gpu-001", map_index=0), leak(cluster, "gpu-002", map_index=1)]
    for pod in pods:
        wait_phase(cluster, pod, "Succeeded")
    cluster.configure(forbidden=["delete pods"])

    report = reap(cluster, store)

    assert len(report.recorded) == 2 and report.deleted == [] and len(report.errors) == 2
    assert all("403 Forbidden" in e and "cannot delete" in e for e in report.errors), report.errors
    cluster.configure(forbidden=[])
    report = reap(cluster, store)
    assert len(report.deleted) == 2 and all("(duplicate)" in r for r in report.recorded), report.recorded
    assert len(history(store)) == 2
    for pod in pods:
        wait_gone(cluster, pod)


def test_an_unreachable_results_db_keeps_ended_pods_for_the_next_run(cluster, store, db_dsn):
    script_result(cluster, "gpu-001")
    pod = leak(cluster)
    wait_phase(cluster, pod, "Succeeded")
    down = ResultStore({**db_dsn, "host": "127.0.0.1", "port": 1}, retry=RetryPolicy(attempts=1))

    report = reap(cluster, down)

    assert report.deleted == [] and len(report.errors) == 1 and report.errors[0].startswith("recording")
    assert phase(cluster, pod) == "Succeeded"  # the only copy of the result stays
    reap(cluster, store)
    assert [r["status"] for r in history(store)] == ["pass"]
    wait_gone(cluster, pod)


def test_a_refused_listing_is_reported_not_raised(cluster, store):
    cluster.configure(forbidden=["list pods"])
    report = reap(cluster, store)
    assert report.examined == 0 and len(report.errors) == 1 and "403 Forbidden" in report.errors[0]
    assert "\n" not in report.errors[0]
    cluster.configure(forbidden=[])


# ---------------------------------------------------------------------------- the rules, pure
NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)


def pod_dict(phase: str, *, created_ago: float, ended_ago: float | None = None, deleting: bool = False,
             deadline: int = 1320, labels: dict | None = None, annotations: dict | None = None) -> dict:
    iso = lambda seconds: (NOW - dt.timedelta(seconds=seconds)).isoformat()  # noqa: E731
    terminated = {"terminated": {"exitCode": 0, "finishedAt": iso(ended_ago)}} if ended_ago is not None else {}
    return {
        "metadata": {"name": "cv-gpu-health-gpu-001-abc", "creationTimestamp": iso(created_ago),
                     **({"deletionTimestamp": iso(0)} if deleting else {}),
                     "labels": {"kubernetes_pod_operator": "True", "dag_id": DAG_ID, "task_id": "validate",
                                "map_index": "0", "try_number": "1", "cluster-doctor.io/test": "gpu_health",
                                **(labels or {})},
                     "annotations": {"cluster-doctor.io/node": "gpu-001", "cluster-doctor.io/run-id": RUN_ID,
                                     **(annotations or {})}},
        "spec": {"activeDeadlineSeconds": deadline},
        "status": {"phase": phase, "containerStatuses": [{"name": "base", "state": terminated}]},
    }


S = Settings(task_margin_s=600, dagrun_timeout_s=3300)


@pytest.mark.parametrize("pod, run_state, action, why", [
    (pod_dict("Succeeded", created_ago=60, ended_ago=30), "failed", "record-and-delete", "its DagRun ended"),
    (pod_dict("Succeeded", created_ago=60, ended_ago=30), "running", "keep", "its DagRun is running"),
    (pod_dict("Succeeded", created_ago=60, ended_ago=30), "queued", "keep", "its DagRun is queued"),
    # a DagRun is stopped at its timeout: past it (plus grace), "running" is a run nobody runs
    (pod_dict("Succeeded", created_ago=3300 + 601, ended_ago=30), "running", "record-and-delete", "outlived"),
    (pod_dict("Succeeded", created_ago=900, ended_ago=30), None, "keep", "recently"),
    (pod_dict("Succeeded", created_ago=900, ended_ago=601), None, "record-and-delete", "still there"),
    (pod_dict("Failed", created_ago=900, ended_ago=601), "weird-state", "record-and-delete", "still there"),
    (pod_dict("Running", created_ago=1320 + 599), None, "keep", "within its deadline"),
    (pod_dict("Running", created_ago=1320 + 601), None, "delete", "past its deadline"),
    (pod_dict("Running", created_ago=60), "success", "keep", "left to finish"),
    (pod_dict("Pending", created_ago=60), "success", "delete", "still Pending after its DagRun ended"),
    (pod_dict("Pending", created_ago=60), None, "keep", "within its deadline"),
    (pod_dict("Pending", created_ago=99999, deleting=True), "failed", "keep", "being deleted"),
])
def test_what_is_done_with_each_pod(pod, run_state, action, why):
    decision = orphans.decide(pod, orphans.owner_of(pod), now=NOW, settings=S, run_state=run_state)
    assert decision.action == action and why in decision.why, decision


KEPT = ("skipped", "NOT_JUDGED: the suite's result could not be read: ...; pod x kept, the next run records it")


@pytest.mark.parametrize("pod, recorded, action, why", [
    # the task recorded its try: it is done with the pod, whatever Airflow says (live here)
    (pod_dict("Succeeded", created_ago=60, ended_ago=1), ("pass", "ok"), "record-and-delete", "could not delete it"),
    (pod_dict("Running", created_ago=60), ("skipped", "killed"), "delete", "could not delete it"),
    (pod_dict("Pending", created_ago=60), ("timeout", "Pending"), "delete", "could not delete it"),
    # ... unless it kept the pod for its result (not judged)
    (pod_dict("Succeeded", created_ago=60, ended_ago=1), KEPT, "record-and-delete", "not judged"),
    (pod_dict("Running", created_ago=60), KEPT, "keep", "recorded once it ends"),
    (pod_dict("Running", created_ago=1320 + 601), KEPT, "delete", "past its deadline"),
    (pod_dict("Pending", created_ago=60), KEPT, "delete", "the suite never ran"),
    (pod_dict("Pending", created_ago=99999, deleting=True), ("pass", "ok"), "keep", "being deleted"),
])
def test_what_is_done_with_a_pod_whose_try_is_recorded(pod, recorded, action, why):
    decision = orphans.decide(pod, orphans.owner_of(pod), now=NOW, settings=S, run_state="running",
                              recorded=recorded)
    assert decision.action == action and why in decision.why, decision


@pytest.mark.parametrize("labels, annotations, problem", [
    ({"kubernetes_pod_operator": "False"}, {}, "not created by the validation task"),
    ({}, {"cluster-doctor.io/run-id": ""}, "no run-id annotation"),
    ({}, {"cluster-doctor.io/node": "gpu-001\nrm -rf /"}, "unreadable identity"),
    ({"cluster-doctor.io/test": "GPU Health"}, {}, "unreadable identity"),
])
def test_a_pod_that_does_not_say_who_made_it_is_refused_with_one_line(labels, annotations, problem):
    with pytest.raises(ValueError, match=problem) as raised:
        orphans.owner_of(pod_dict("Succeeded", created_ago=60, ended_ago=1, labels=labels, annotations=annotations))
    assert "\n" not in str(raised.value)


def test_the_owner_comes_from_the_labels_and_the_full_annotations():
    owner = orphans.owner_of(pod_dict("Succeeded", created_ago=60, ended_ago=1, labels={"map_index": "7",
                                                                                         "try_number": "3"}))
    assert owner == orphans.Owner(DAG_ID, RUN_ID, "validate", 7, 3, "gpu-001", "gpu_health")
