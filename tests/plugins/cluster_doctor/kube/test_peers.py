"""The peer-test launcher against the Kubernetes API emulator with the real client: both
pods start (the client with the server pod's IP), a user pod claiming either node stops both, a side
that never schedules gives up on both, one side ending stops the other, and no pod is ever left."""

from __future__ import annotations

import json
import threading

import pytest
from cluster_doctor.domain.config import Settings
from cluster_doctor.kube import peers, retry, suite_code
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.support.emulator import FAST_DELETE
from tests.support.suite_results import summary

NS = "cluster-doctor"
PVC = "cluster-doctor-results"
GPUS = {"gpu-001": (8, "NVIDIA-H100-80GB-HBM3"), "gpu-002": (8, "NVIDIA-H100-80GB-HBM3")}


pytestmark = pytest.mark.emulator(pvc=True, settings=FAST_DELETE)


@pytest.fixture
def cluster(operator_cluster):
    for node in GPUS:
        operator_cluster.add_gpu_node(node)
    return operator_cluster


class Recorder:
    """The client, recording every pod it creates."""

    def __init__(self, api, fail_create_of: str | None = None):
        self.api, self.created, self.fail_create_of = api, [], fail_create_of

    def __getattr__(self, name):
        return getattr(self.api, name)

    def create_namespaced_pod(self, namespace, body):
        role = body["metadata"]["labels"][peers.ROLE_LABEL]
        if role == self.fail_create_of:
            raise ApiException(status=500, reason="Internal Server Error")
        self.created.append(body)
        return self.api.create_namespaced_pod(namespace, body)


def launch(cluster, *, settings=None, api=None, **kw):
    s = settings or Settings(pending_timeout_s=20, availability_check_s=1, suite_device="cpu")
    server, client = peers.sides("gpu-001", "gpu-002", GPUS)
    launcher = peers.PeerLauncher(api or Recorder(retry.wrap(cluster.core_v1())), s, server, client,
                                  run_id="manual__1", configmap="cluster-doctor-suites-0", suite_version="sha256:0",
                                  poll_s=0.1, **kw)
    return launcher, launcher.run()


def passing(cluster, node, peer, *, run_seconds=0.3):
    text = json.loads(summary(node, "fabric_peer", checks=[{"name": "nccl_allreduce", "status": "pass"}]))
    text["peer"] = peer
    cluster.set_script(node, "exit", exit_code=0, run_seconds=run_seconds,
                       termination_message=json.dumps(text, separators=(",", ":")))


def env(pod):
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def test_both_sides_start_the_client_with_the_servers_ip_and_each_result_names_its_peer(cluster):
    passing(cluster, "gpu-001", "gpu-002")
    passing(cluster, "gpu-002", "gpu-001")

    launcher, result = launch(cluster)

    assert [(s.side.node_name, s.outcome.status) for s in result.sides] == [("gpu-001", "pass"), ("gpu-002", "pass")]
    assert [s.outcome.summary["peer"] for s in result.sides] == ["gpu-002", "gpu-001"]
    server_pod, client_pod = launcher.core_v1.created
    assert env(server_pod)["CLUSTER_DOCTOR_PEER_ROLE"] == "server" and "CLUSTER_DOCTOR_PEER_ADDRESS" not in env(server_pod)
    assert env(server_pod)["CLUSTER_DOCTOR_PEER_NODE"] == "gpu-002"
    assert env(client_pod)["CLUSTER_DOCTOR_PEER_ROLE"] == "client"
    assert env(client_pod)["CLUSTER_DOCTOR_PEER_NODE"] == "gpu-001"
    assert env(client_pod)["CLUSTER_DOCTOR_PEER_ADDRESS"] == launcher.last["server"]["status"]["podIP"]
    assert env(client_pod)["CLUSTER_DOCTOR_PEER_PORT"] == "29500"
    for pod, node in ((server_pod, "gpu-001"), (client_pod, "gpu-002")):  # an ordinary validation pod
        assert pod["spec"]["priorityClassName"] == "cluster-doctor-preemptible"
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [node]
        assert not pod["spec"].get("hostNetwork")
    history = sorted(cluster.pod_history("app.kubernetes.io/name=cluster-doctor"), key=lambda p: p["created"])
    assert [p["labels"][peers.ROLE_LABEL] for p in history] == ["server", "client"]
    assert [p["labels"][peers.PEER_LABEL] for p in history] == ["gpu-002", "gpu-001"]
    assert result.gang is None  # the emulator serves no gang scheduler


def test_the_real_suite_meets_its_peer_at_the_server_pods_ip(cluster):
    """Exec mode: both pods run python -m cluster_doctor_suites.fabric_peer (CPU mode: gloo over TCP), the
    client connecting to the server pod's status.podIP."""
    s = Settings(pending_timeout_s=60, availability_check_s=2, suite_device="cpu")
    api = Recorder(retry.wrap(cluster.core_v1()))
    shipped = suite_code.ship(api, s)
    server, client = peers.sides("gpu-001", "gpu-002", GPUS)

    result = peers.PeerLauncher(api, s, server, client, run_id="manual__1", configmap=shipped.configmap,
                                suite_version=shipped.version, suite_files=list(shipped.files), poll_s=0.2).run()

    assert [(r.side.node_name, r.outcome.status, r.outcome.summary["peer"]) for r in result.sides] == [
        ("gpu-001", "pass", "gpu-002"), ("gpu-002", "pass", "gpu-001")]
    checks = {c["name"]: c["status"] for c in result.client.outcome.summary["checks"]}
    assert checks["allreduce_values"] == "pass"  # the two processes really exchanged data


def test_a_user_pod_claiming_one_node_stops_both_sides(cluster):
    cluster.set_script("*", "run")  # both sides would run on and on

    def claim():
        cluster.wait_for(lambda: sum(p["phase"] == "Running" for p in cluster.live_pods(
            "app.kubernetes.io/name=cluster-doctor")) == 2, timeout=20, message="both sides running")
        cluster.add_user_pod("gpu-002", name="trainer-0")

    watcher = threading.Thread(target=claim)
    watcher.start()
    _, result = launch(cluster)
    watcher.join(timeout=10)

    assert [s.outcome.status for s in result.sides] == ["preempted", "preempted"]
    for side in result.sides:
        assert side.outcome.reason.startswith("a user pod claimed gpu-002 (default/trainer-0 requests 8 nvidia.com/gpu)")


def test_a_side_that_never_schedules_gives_up_on_both_after_the_pending_timeout(cluster):
    cluster.set_script("gpu-001", "run")
    cluster.set_script("gpu-002", "never_schedule", message="0/2 nodes are available: 1 Insufficient rdma/ib.")

    _, result = launch(cluster, settings=Settings(pending_timeout_s=3, availability_check_s=1, suite_device="cpu"))

    assert [s.outcome.status for s in result.sides] == ["timeout", "timeout"]
    reason = result.server.outcome.reason
    assert reason.startswith("both pods of a peer test must be Running within 3 s: the client pod on gpu-002 was "
                             "still Pending (last scheduler message: 0/2 nodes are available")
    assert reason.endswith("; both pods deleted") and result.client.outcome.reason == reason


def test_a_bound_side_whose_container_never_starts_times_out_naming_its_waiting_reason(cluster):
    cluster.set_script("gpu-001", "run")
    cluster.set_script("gpu-002", "never_start")  # bound: the scheduler has nothing to say any more

    _, result = launch(cluster, settings=Settings(pending_timeout_s=3, availability_check_s=1, suite_device="cpu"))

    assert [s.outcome.status for s in result.sides] == ["timeout", "timeout"]
    assert result.server.outcome.reason == (
        "both pods of a peer test must be Running within 3 s: the client pod on gpu-002 was still Pending "
        "(container waiting: ContainerCreating); both pods deleted")


class FailingReadsOnceDeleted(Recorder):
    """The apiserver stops answering reads once the launcher starts deleting (its final wait)."""

    deleting = False

    def delete_namespaced_pod(self, name, namespace, **kw):
        self.deleting = True
        return self.api.delete_namespaced_pod(name, namespace, **kw)

    def read_namespaced_pod(self, name, namespace, **kw):
        if self.deleting:
            raise ApiException(status=500, reason="Internal Server Error")
        return self.api.read_namespaced_pod(name, namespace, **kw)


def test_the_final_wait_for_the_pods_to_go_never_raises(cluster):
    passing(cluster, "gpu-001", "gpu-002")
    passing(cluster, "gpu-002", "gpu-001")
    api = FailingReadsOnceDeleted(retry.wrap(cluster.core_v1(), retry.RetryPolicy(attempts=1)))

    launcher, result = launch(cluster, api=api)  # the wait's failed read is logged, not raised

    assert [s.outcome.status for s in result.sides] == ["pass", "pass"]
    assert api.deleting
    cluster.wait_for(lambda: not cluster.live_pods("app.kubernetes.io/name=cluster-doctor"), timeout=10,
                     message="both pods gone")


def test_one_side_ending_stops_the_other(cluster, monkeypatch):
    monkeypatch.setattr(peers, "PEER_GRACE_S", 1)
    cluster.set_script("gpu-001", "crash", run_seconds=2)  # after the client started
    cluster.set_script("gpu-002", "run")

    _, result = launch(cluster)

    assert result.server.outcome.status == "error"
    client = result.client.outcome
    assert client.status == "error"
    assert client.reason == ("stopped 1 s after its peer gpu-001's side ended first (error: the suite exited 139 "
                             "without a result: Segmentation fault (core dumped)); pod deleted")


def test_a_node_taken_before_the_start_creates_no_pod(cluster):
    cluster.add_user_pod("gpu-001", name="trainer-0")

    launcher, result = launch(cluster)

    assert [s.outcome.status for s in result.sides] == ["skipped", "skipped"]
    assert result.server.outcome.reason == ("gpu-001 is no longer free (default/trainer-0 requests 8 nvidia.com/gpu); "
                                            "no pod created")
    assert launcher.core_v1.created == []


def test_an_error_half_way_still_deletes_the_pod_already_created(cluster):
    cluster.set_script("*", "run")
    api = Recorder(retry.wrap(cluster.core_v1(), retry.RetryPolicy(attempts=1)), fail_create_of="client")

    launcher, result = launch(cluster, api=api)

    assert [s.outcome.status for s in result.sides] == ["skipped", "skipped"]
    assert result.server.outcome.reason.startswith("orchestration error: ")
    assert [p["metadata"]["labels"][peers.ROLE_LABEL] for p in api.created] == ["server"]
    # the cluster fixture asserts no validation pod is left


def test_gang_scheduling_is_detected_from_api_discovery(monkeypatch):
    groups = []

    class Apis:
        def __init__(self, _client):
            pass

        def get_api_versions(self):
            return k8s.V1APIGroupList(groups=[k8s.V1APIGroup(name=n, versions=[
                k8s.V1GroupVersionForDiscovery(group_version=f"{n}/{v}", version=v)]) for n, v in groups])

    class Custom:
        def __init__(self, _client):
            pass

        def get_api_resources(self, group, version):
            return k8s.V1APIResourceList(group_version=f"{group}/{version}", resources=[k8s.V1APIResource(
                kind="PodGroup", name="podgroups", namespaced=True, singular_name="podgroup", verbs=["get"])])

    monkeypatch.setattr(k8s, "ApisApi", Apis)
    monkeypatch.setattr(k8s, "CustomObjectsApi", Custom)
    core = type("Core", (), {"api_client": None})()
    assert peers.gang_scheduler(core) is None
    groups[:] = [("kueue.x-k8s.io", "v1beta1")]
    assert peers.gang_scheduler(core) == "kueue"
    groups[:] = [("scheduling.x-k8s.io", "v1alpha1")]
    assert peers.gang_scheduler(core) == "coscheduling"


def test_an_api_refusal_while_both_sides_run_is_never_an_error_of_the_nodes(cluster):
    """An orchestration failure once both pods run says nothing about either node: both sides
    skipped (the pair stays due), the missing permission named, both pods deleted."""
    cluster.set_script("*", "run")
    api = retry.wrap(cluster.core_v1(), retry.RetryPolicy(attempts=1))

    def refuse_reads_once_both_run():
        cluster.wait_for(lambda: len([p for p in cluster.live_pods("app.kubernetes.io/name=cluster-doctor")
                                      if p["phase"] == "Running"]) == 2, timeout=30, message="both sides running")
        cluster.configure(forbidden=["get pods"])

    thread = threading.Thread(target=refuse_reads_once_both_run, daemon=True)
    thread.start()
    try:
        launcher, result = launch(cluster, api=api)
    finally:
        thread.join(30)
        cluster.configure(forbidden=[])
    assert [s.outcome.status for s in result.sides] == ["skipped", "skipped"], [s.outcome for s in result.sides]
    assert "missing permission: get pods in namespace cluster-doctor" in result.server.outcome.reason
    cluster.wait_for(lambda: not cluster.live_pods("app.kubernetes.io/name=cluster-doctor"), timeout=10,
                     message="both pods gone")
