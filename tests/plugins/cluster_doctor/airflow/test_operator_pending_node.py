"""While our pod is Pending, its node going away ends the wait at once, with the real cause — against the
Kubernetes API emulator with the real provider and client."""

from __future__ import annotations

import threading
import time

import pytest
from airflow.sdk.exceptions import AirflowSkipException
from cluster_doctor.airflow.operator import NodeValidationPodOperator
from cluster_doctor.kube import pod_lifecycle

from tests.support.emulator import FAST
from tests.support.operator import operator as pod_operator
from tests.support.operator import run

NS = "cluster-doctor"
POD_SELECTOR = "app.kubernetes.io/name=cluster-doctor"
SCHEDULER_SAYS = "0/1 nodes are available: waiting for the gang scheduler."


pytestmark = pytest.mark.emulator(pvc=True, settings=FAST)


@pytest.fixture
def cluster(operator_cluster, monkeypatch):
    monkeypatch.setattr(pod_lifecycle, "NODE_CHECK_S", 1)
    operator_cluster.add_gpu_node("gpu-001")
    # our pod stays Pending (unbound) until the test changes the node
    operator_cluster.set_script("gpu-001", "never_schedule", message=SCHEDULER_SAYS)
    return operator_cluster


def operator(**settings) -> NodeValidationPodOperator:
    # claims are checked only every 60 s and the pending window is 60 s: only the node check can end
    # the wait within the seconds these tests allow
    op = pod_operator(**{"availability_check_s": 60, "pending_timeout_s": 60, **settings})
    op.startup_check_interval_seconds = 1  # the provider's poll of our pod (5 s in production): tests stay short
    return op


def when_our_pod_is_pending(cluster, change) -> threading.Thread:
    def act():
        cluster.wait_for(lambda: cluster.live_pods(POD_SELECTOR), timeout=30, message="our pod")
        time.sleep(0.5)
        change()

    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("change, cause", [
    (lambda c: c.set_node_ready("gpu-001", False), "the node is not ready (Ready is False (KubeletNotReady))"),
    (lambda c: c.set_node_ready("gpu-001", "Unknown"), "the node is not ready (Ready is Unknown (NodeStatusUnknown))"),
    (lambda c: c.cordon("gpu-001"), "the node is cordoned"),
    (lambda c: c.patch_node("gpu-001", taints=[{"key": "maintenance", "value": "dimm", "effect": "NoSchedule"}]),
     "untolerated taint(s) maintenance=dimm:NoSchedule"),
    (lambda c: c.core_v1().delete_node("gpu-001"), "the node was deleted"),
], ids=["not-ready", "unreachable", "cordoned", "taint", "deleted"])
def test_a_node_going_away_while_ours_is_pending_ends_the_wait_at_once(cluster, change, cause):
    changed = when_our_pod_is_pending(cluster, lambda: change(cluster))
    _, written, _, raised = run(operator())
    changed.join(5)
    assert isinstance(raised, AirflowSkipException)  # the task ends: its pool slot is free
    (attempt,) = written
    # skipped for the node, not the pending window's timeout: the node check ended the wait
    assert attempt.status == "skipped" and cause in attempt.reason, attempt.reason
    assert "ended at once; pod deleted" in attempt.reason
    assert "Killing" not in attempt.reason and SCHEDULER_SAYS not in attempt.reason
    assert all(p["deleted"] for p in cluster.pod_history(POD_SELECTOR))


def test_a_tolerated_taint_does_not_end_the_wait(cluster):
    changed = when_our_pod_is_pending(cluster, lambda: cluster.patch_node(
        "gpu-001", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]))
    _, written, _, _ = run(operator(pending_timeout_s=4))
    changed.join(5)
    (attempt,) = written
    assert attempt.status == "timeout" and SCHEDULER_SAYS in attempt.reason


def test_events_of_our_own_deletion_never_become_the_cause(cluster):
    """The pending timeout's cause is the scheduler's last word before we deleted the pod; an event that
    appears after the deletion (here a kubelet-style Warning about killing it) is not taken for it."""
    core = cluster.core_v1()

    def warn_after_deletion():
        cluster.wait_for(lambda: cluster.pod_history(POD_SELECTOR), timeout=30, message="our pod")
        name = cluster.pod_history(POD_SELECTOR)[0]["name"]
        cluster.wait_for(lambda: cluster.pod_history(POD_SELECTOR)[0]["deleted"], timeout=30, message="deleted")
        core.create_namespaced_event(NS, {
            "metadata": {"name": f"{name}.deletion"}, "type": "Warning", "reason": "FailedKillPod",
            "message": "error killing pod: our own deletion",
            "involvedObject": {"kind": "Pod", "namespace": NS, "name": name},
            "source": {"component": "kubelet"}})

    thread = threading.Thread(target=warn_after_deletion, daemon=True)
    thread.start()
    _, written, _, _ = run(operator(pending_timeout_s=3))
    thread.join(10)
    (attempt,) = written
    assert attempt.status == "timeout" and SCHEDULER_SAYS in attempt.reason
    assert "our own deletion" not in attempt.reason


def test_the_pre_submit_check_reads_the_node_and_its_pods_only(cluster):
    cluster.clear_scripts()
    cluster.bulk_generate(nodes=50, pods=800, seed=2)
    cluster.cordon("gpu-001")
    cluster.reset_counters()
    _, written, _, _ = run(operator())
    (attempt,) = written
    assert attempt.status == "skipped" and "the node is cordoned (spec.unschedulable) since planning; no pod created" in attempt.reason
    # the node said no, its pods were not even listed; the one list is the provider's look for a pod to
    # reattach to (namespaced, by label)
    assert cluster.counters()["by_verb_resource"] == {"get nodes": 1, "list pods": 1}
    cluster.cordon("gpu-001", False)
    cluster.add_user_pod("gpu-001", gpus=8, name="trainer", namespace="default")
    cluster.reset_counters()
    _, written, _, _ = run(operator())
    assert "no longer free (default/trainer requests 8" in written[0].reason
    reads = cluster.counters()["list_reads"]
    # the provider's reattach look (our namespace: empty) and the guard's read of the node's one pod,
    # out of 800: both from the watch cache
    assert reads == {"pods watch-cache": 2, "pods watch-cache objects": 1}
