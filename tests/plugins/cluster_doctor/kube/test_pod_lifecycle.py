"""The pod lifecycle both launchers share, without a cluster: the free-node check's
reasons, the node watch's schedule and what it reports, the ``Ended`` exception, a vanished pod's
outcome, and the final deletion that never raises. The launchers run it against the emulator in
test_peers.py and tests/plugins/cluster_doctor/airflow/test_operator_pending_node.py."""

from __future__ import annotations

import pytest
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.status import Status
from cluster_doctor.kube import guards, pod_lifecycle
from kubernetes.client.exceptions import ApiException

CORDONED = guards.NodeProblem("cordoned", "")


class FakeGuards:
    """What the node re-checks would read: a node's problem and its GPU holders, and each call made."""

    def __init__(self, monkeypatch):
        self.problems: dict[str, guards.NodeProblem] = {}
        self.holders: dict[str, list[str]] = {}
        self.calls: list[tuple[str, str]] = []
        monkeypatch.setattr(guards, "node_problem", self.node_problem)
        monkeypatch.setattr(guards, "gpu_holders", self.gpu_holders)

    def node_problem(self, core_v1, node, tolerations):
        self.calls.append(("node", node))
        return self.problems.get(node)

    def gpu_holders(self, core_v1, node, resource, *, exclude_pod=None):
        self.calls.append(("pods", node))
        return [h for h in self.holders.get(node, []) if h.split()[0] != f"cluster-doctor/{exclude_pod}"]


@pytest.fixture
def fake(monkeypatch):
    return FakeGuards(monkeypatch)


def test_ensure_free_says_the_node_or_names_it(fake):
    s = Settings()
    pod_lifecycle.ensure_free(None, "gpu-001", s)  # free: nothing raised
    assert fake.calls == [("node", "gpu-001"), ("pods", "gpu-001")]
    fake.holders["gpu-001"] = ["default/trainer requests 8 nvidia.com/gpu"]
    with pytest.raises(pod_lifecycle.Ended) as ended:
        pod_lifecycle.ensure_free(None, "gpu-001", s)
    assert ended.value.status is Status.SKIPPED
    assert ended.value.reason == "the node is no longer free (default/trainer requests 8 nvidia.com/gpu); no pod created"
    with pytest.raises(pod_lifecycle.Ended) as ended:
        pod_lifecycle.ensure_free(None, "gpu-001", s, name_node=True)
    assert ended.value.reason.startswith("gpu-001 is no longer free (default/trainer")
    fake.problems["gpu-001"] = CORDONED
    with pytest.raises(pod_lifecycle.Ended) as ended:
        pod_lifecycle.ensure_free(None, "gpu-001", s, name_node=True)
    assert ended.value.reason == "gpu-001: the node is cordoned (spec.unschedulable) since planning; no pod created"


def test_the_node_watch_reads_waiting_nodes_often_and_lists_pods_every_availability_interval(fake, monkeypatch):
    monkeypatch.setattr(pod_lifecycle, "NODE_CHECK_S", 2)
    watch = pod_lifecycle.NodeWatch(None, Settings(availability_check_s=10, pending_timeout_s=30), start=100.0)
    ours = {"gpu-001": "cv-a", "gpu-002": "cv-b"}
    waiting = {"gpu-001": "cv-a"}  # gpu-002's pod runs: its node is not read, its pods still are
    for now in range(100, 121):
        assert watch.poll(float(now), waiting=waiting, live=ours) is None
    node_reads = [c for c in fake.calls if c[0] == "node"]
    pod_lists = [c for c in fake.calls if c[0] == "pods"]
    assert node_reads == [("node", "gpu-001")] * 10  # at 102, 104, ... 120
    assert pod_lists == [("pods", "gpu-001"), ("pods", "gpu-002")] * 2  # at 110 and 120
    assert watch.tick_s == 1.0
    assert not watch.pending_expired(129.9) and watch.pending_expired(130.0)


def test_the_node_watch_reports_a_node_going_away_and_a_user_pod_claiming_a_node(fake):
    s = Settings(availability_check_s=1)
    watch = pod_lifecycle.NodeWatch(None, s, start=0.0)
    ours = {"gpu-001": "cv-a", "gpu-002": "cv-b"}
    fake.holders["gpu-002"] = ["cluster-doctor/cv-b requests 8 nvidia.com/gpu"]  # our own pod: not a claim
    assert watch.poll(1.0, waiting=ours, live=ours) is None
    fake.holders["gpu-002"].append("default/trainer-0 requests 8 nvidia.com/gpu")
    assert watch.poll(2.0, waiting=ours, live=ours) == pod_lifecycle.Watched(
        "gpu-002", claimed_by="default/trainer-0 requests 8 nvidia.com/gpu")
    fake.problems["gpu-001"] = CORDONED
    fake.calls.clear()
    assert watch.poll(3.0, waiting=ours, live=ours) == pod_lifecycle.Watched("gpu-001", problem=CORDONED)
    assert fake.calls == [("node", "gpu-001")]  # the node said no: its pods are not listed


def test_ended_carries_a_status_of_the_enum():
    assert pod_lifecycle.Ended("timeout", "late").status is Status.TIMEOUT
    with pytest.raises(ValueError, match="unknown status 'late'"):
        pod_lifecycle.Ended("late", "late")


def test_a_vanished_pod_is_preempted_saying_when():
    running = pod_lifecycle.vanished(reached_running=True)
    assert (running.status, running.reason) == (Status.PREEMPTED, "the pod disappeared while running (deleted or preempted)")
    pending = pod_lifecycle.vanished(reached_running=False)
    assert pending.reason == "the pod was removed while Pending (preempted or deleted)"
    said = pod_lifecycle.vanished(reached_running=False, while_pending=" (last event Preempted: by trainer)")
    assert said.reason == "the pod was removed while Pending (last event Preempted: by trainer)"


def test_the_pending_reasons_read_the_scheduler_and_the_kubelet():
    unscheduled = {"status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/2 nodes are available"}]}}
    bound = {"status": {"phase": "Pending", "containerStatuses": [
        {"name": "base", "state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}]}}
    assert pod_lifecycle.scheduling_message(unscheduled) == "0/2 nodes are available"
    assert pod_lifecycle.waiting_message(bound) == "ErrImagePull: not found"
    assert pod_lifecycle.scheduling_message(bound) == pod_lifecycle.waiting_message(None) == ""


class FlakyCore:
    """Deletes answer 404 for one pod and 500 for another; every read fails."""

    def __init__(self):
        self.deleted: list[str] = []

    def delete_namespaced_pod(self, name, namespace):
        self.deleted.append(name)
        raise ApiException(status=404 if name == "cv-a" else 500, reason="boom")

    def read_namespaced_pod(self, name, namespace, **kw):
        raise ApiException(status=503, reason="Service Unavailable")


def test_delete_and_wait_deletes_every_pod_and_never_raises():
    core, slept = FlakyCore(), []
    pod_lifecycle.delete_and_wait(core, "ns", ["cv-a", "cv-b"], clock=lambda: 0.0, sleep=slept.append, poll_s=1.0)
    assert core.deleted == ["cv-a", "cv-b"] and slept == []
