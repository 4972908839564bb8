"""The operator's node re-checks (kube.guards) against the Kubernetes API emulator with the real client:
what they see, and that they read one node and its pods only, from the watch cache's node index."""

from __future__ import annotations

import pytest
from cluster_doctor.domain.config import Settings
from cluster_doctor.kube import discovery, guards

TOLERATIONS = Settings().tolerations


@pytest.fixture
def cluster(emulator):
    emulator.reset()
    emulator.add_gpu_node("gpu-001")
    emulator.add_gpu_node("gpu-002")
    return emulator


def test_gpu_holders_sees_user_pods_of_that_node_only(cluster):
    core = cluster.core_v1()
    assert guards.gpu_holders(core, "gpu-001", "nvidia.com/gpu") == []
    cluster.add_user_pod("gpu-001", gpus=2, name="trainer", namespace="default")
    cluster.add_user_pod("gpu-002", gpus=8, name="elsewhere", namespace="default")
    cluster.add_user_pod("gpu-001", gpus=0, name="cpu-only", namespace="default")
    holders = guards.gpu_holders(core, "gpu-001", "nvidia.com/gpu")
    assert holders == ["default/trainer requests 2 nvidia.com/gpu"]
    assert guards.gpu_holders(core, "gpu-001", "nvidia.com/gpu", exclude_pod="trainer") == []


def test_a_finished_user_pod_frees_the_node(cluster):
    core = cluster.core_v1()
    cluster.add_user_pod("gpu-001", gpus=8, name="done", namespace="default")
    cluster.complete_pod("default", "done")
    cluster.wait_for(lambda: guards.gpu_holders(core, "gpu-001", "nvidia.com/gpu") == [], message="pod Succeeded")


@pytest.mark.parametrize("change, reason, words", [
    ({"ready": False}, discovery.NOT_READY, "Ready is False (KubeletNotReady)"),
    ({"ready": "Unknown"}, discovery.NOT_READY, "Ready is Unknown (NodeStatusUnknown)"),
    ({"unschedulable": True}, discovery.CORDONED, "cordoned"),
    ({"taints": [{"key": "maintenance", "value": "dimm", "effect": "NoSchedule"}]}, discovery.TAINTED,
     "maintenance=dimm:NoSchedule"),
    ({"taints": [{"key": "drain", "effect": "NoExecute"}]}, discovery.TAINTED, "drain:NoExecute"),
])
def test_node_problem_names_the_cause(cluster, change, reason, words):
    core = cluster.core_v1()
    assert guards.node_problem(core, "gpu-001", TOLERATIONS) is None
    cluster.patch_node("gpu-001", **change)
    problem = guards.node_problem(core, "gpu-001", TOLERATIONS)
    assert problem is not None and problem.reason == reason
    assert words in problem.describe()


def test_tolerated_and_soft_taints_are_no_problem(cluster):
    cluster.patch_node("gpu-001", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                                          {"key": "spot", "effect": "PreferNoSchedule"}])
    assert guards.node_problem(cluster.core_v1(), "gpu-001", TOLERATIONS) is None


def test_a_deleted_node_is_gone(cluster):
    core = cluster.core_v1()
    core.delete_node("gpu-002")
    problem = guards.node_problem(core, "gpu-002", TOLERATIONS)
    assert problem.reason == guards.GONE and "deleted" in problem.describe()


def test_invalid_names_never_reach_the_api(cluster):
    with pytest.raises(ValueError, match="invalid Kubernetes node name"):
        guards.gpu_holders(cluster.core_v1(), "GPU_001", "nvidia.com/gpu")


@pytest.mark.parametrize("version", ["1.30", "1.31"])
def test_one_call_from_the_node_index_whatever_the_cluster_size(emulator, version):
    """On any apiserver version the guard's pod list is served from the watch cache's spec.nodeName
    index (resourceVersion=0): it looks at that node's pods only, never the cluster's."""
    emulator.reset()
    emulator.configure(kubernetes_version=version)
    emulator.bulk_generate(nodes=200, pods=4000, seed=5)
    core = emulator.core_v1()
    node = core.list_node(limit=1).items[0].metadata.name
    emulator.reset_counters()
    guards.gpu_holders(core, node, "nvidia.com/gpu")
    counters = emulator.counters()
    assert counters["total"] == 1
    reads = counters["list_reads"]
    assert reads["pods watch-cache"] == 1 and "pods etcd" not in reads
    assert reads["pods watch-cache objects"] < 100  # that node's pods, not the 4,000
