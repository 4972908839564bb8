"""Discovery and the suite-code ConfigMap against the Kubernetes API emulator, with the real client."""

import time

import pytest
from cluster_doctor.domain import suites
from cluster_doctor.domain.config import Settings
from cluster_doctor.kube import discovery, suite_code

NS = "cluster-doctor"


@pytest.fixture
def core_v1(validation_cluster):
    return validation_cluster.core_v1()


def test_suite_code_ships_once_as_an_immutable_configmap(core_v1):
    files = suite_code.shipped_files(suites.DEFAULT_SUITES_DIR)
    version = suite_code.content_hash(suites.DEFAULT_SUITES_DIR)
    name = suite_code.configmap_name(Settings(), version)
    assert suite_code.ensure_configmap(core_v1, NS, name, files, version) is True
    assert suite_code.ensure_configmap(core_v1, NS, name, files, version) is False  # already there
    cm = core_v1.read_namespaced_config_map(name, NS)
    assert cm.immutable is True and set(cm.data) == {suite_code.configmap_key(f) for f in files}
    assert "checkers__xid.py" in cm.data  # a file of a subfolder, its key flat
    assert cm.metadata.annotations["cluster-doctor.io/suite-version"] == version


def test_old_suite_versions_are_pruned(core_v1):
    names = []
    for i in range(6):
        name = f"cluster-doctor-suites-{i:016x}"
        suite_code.ensure_configmap(core_v1, NS, name, {"a.py": b"x = %d\n" % i}, f"sha256:{i:016x}")
        names.append(name)
        time.sleep(1.05)  # creationTimestamp has one-second resolution
    deleted = suite_code.prune_configmaps(core_v1, NS, keep=names[0])
    assert sorted(deleted) == sorted(names[1:3])
    left = {cm.metadata.name for cm in core_v1.list_namespaced_config_map(NS).items}
    assert left == {names[0], *names[3:]}


def test_discovery_classifies_every_gpu_node(emulator, core_v1):
    emulator.add_gpu_node("gpu-001", gpus=8, product="NVIDIA-H100-80GB-HBM3")
    emulator.add_gpu_node("gpu-002", gpus=4)
    emulator.add_gpu_node("gpu-003")
    emulator.add_gpu_node("gpu-004")
    emulator.add_gpu_node("gpu-005", taints=[{"key": "maintenance", "value": "true", "effect": "NoSchedule"}])
    emulator.add_gpu_node("gpu-006")
    emulator.add_gpu_node("cpu-001", gpus=0)
    emulator.add_user_pod("gpu-002", gpus=1)
    emulator.cordon("gpu-003")
    emulator.set_node_ready("gpu-004", False)
    found = discovery.discover(core_v1, Settings())
    assert [(n.name, n.gpu_count, n.gpu_model) for n in found.free][:1] == [("gpu-001", 8, "NVIDIA-H100-80GB-HBM3")]
    reasons = {n.name: n.reason for n in found.ineligible}
    assert reasons == {"gpu-002": "busy", "gpu-003": "cordoned", "gpu-004": "not ready", "gpu-005": "tainted"}
    assert "maintenance=true:NoSchedule" in next(n.detail for n in found.ineligible if n.name == "gpu-005")
    assert {n.name for n in found.free} == {"gpu-001", "gpu-006"}
    # one list stream per resource, never a call per node
    assert found.api_calls == 2  # the nodes, every non-terminal pod: whatever the cluster size


def test_discovery_respects_the_node_range_and_selector(emulator, core_v1):
    from cluster_doctor.domain.nodes import parse_node_range

    for i in range(1, 6):
        emulator.add_gpu_node(f"gpu-{i:03d}", labels={"pool": "a" if i < 4 else "b"})
    found = discovery.discover(core_v1, Settings(node_selector="pool=a"), parse_node_range("gpu-00[2-5]"))
    assert [n.name for n in found.free] == ["gpu-002", "gpu-003"]


def test_a_node_a_pending_pod_is_nominated_to_is_not_free_preemption_pending(emulator, core_v1):
    """The scheduler nominates a node to a pending pod while it preempts there: a user job is about to
    land, so the node is not free (the reason does not say "reserved": that is our own taint)."""
    emulator.add_gpu_node("gpu-001")
    emulator.add_gpu_node("gpu-002")
    pod = emulator.add_user_pod(None, gpus=16, phase="Pending", name="trainer-0", namespace="default")  # fits nowhere yet
    core_v1.patch_namespaced_pod_status(pod["metadata"]["name"], "default", {"status": {"nominatedNodeName": "gpu-002"}})
    found = discovery.discover(core_v1, Settings())
    assert {n.name for n in found.free} == {"gpu-001"}
    (node,) = found.ineligible
    assert (node.name, node.reason) == ("gpu-002", "preemption pending")
    assert "default/trainer-0 is nominated to the node (preemption)" in node.detail
