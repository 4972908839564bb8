"""Discovery reads what a GPU node has, not only what it offers: its capacity or GPU Feature
Discovery's count label; a node whose allocatable is below that is a finding, still validated, and
its pods carry the node's count (CLUSTER_DOCTOR_NODE_GPUS) beside what they request."""

from __future__ import annotations

import msgspec
import pytest
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.payloads import Bundle, BundleStep, Discovered, RunConfig, Validation
from cluster_doctor.kube import discovery, listing, podspec

GPU = "nvidia.com/gpu"


def node(allocatable=None, capacity=None, labels=None) -> listing.LazyNode:
    raw = {"metadata": {"name": "gpu-007", "labels": labels or {}},
           "status": {"allocatable": {GPU: allocatable} if allocatable else {}, "capacity": {GPU: capacity} if capacity else {}}}
    return msgspec.json.decode(msgspec.json.encode(raw), type=listing.LazyNode)


@pytest.mark.parametrize("n, want", [
    (node("7", "8"), (8, "capacity")),  # the device plugin marked one GPU unhealthy (after an Xid 79)
    (node("7", "7", {"nvidia.com/gpu.count": "8"}), (8, "label nvidia.com/gpu.count")),
    (node("8", "8", {"nvidia.com/gpu.count": "8"}), (8, "capacity")),
    (node("8"), None),  # neither says: unknown, never the allocatable count
    (node("8", "eight", {"nvidia.com/gpu.count": "lots"}), None),
])
def test_the_gpus_a_node_has_come_from_its_capacity_or_gfd_label(n, want):
    assert discovery.node_gpus(n, GPU) == want


@pytest.fixture(scope="module")
def fleet(emulator):
    emulator.add_gpu_node("gpu-001", 8, labels={"nvidia.com/gpu.count": "8"})
    emulator.add_gpu_node("gpu-002", 7, labels={"nvidia.com/gpu.count": "8"})  # one GPU unhealthy
    return emulator


def test_a_node_offering_fewer_gpus_than_it_has_is_a_finding_and_still_validated(fleet):
    found = discovery.discover(fleet.core_v1(), Settings())
    free = {n.name: n for n in found.free}
    assert (free["gpu-002"].gpu_count, free["gpu-002"].node_gpus) == (7, 8)  # requests 7, expects 8
    assert (free["gpu-001"].gpu_count, free["gpu-001"].node_gpus) == (8, 8)
    assert [s.line() for s in found.short] == ["gpu-002: 7 of its 8 GPUs allocatable (label nvidia.com/gpu.count)"]
    assert found.to_dict()["short"][0]["node_gpus"] == 8


def test_the_nodes_count_reaches_the_pod_beside_what_it_requests():
    found = Discovered.of(settings=Settings(), params={"tests": ["gpu_health"], "max_pairs": 4},
                          started_at="2026-11-22T12:00:00+00:00",
                          free=[("gpu-001", 8, "H100", 8), ("gpu-002", 7, "H100", 8), ("gpu-003", 8, "H100")],
                          ineligible=[])
    again = Discovered.from_xcom(found.to_xcom())
    assert [(n.name, n.gpu_count, n.node_gpus) for n in again.free] == [
        ("gpu-001", 8, 8), ("gpu-002", 7, 8), ("gpu-003", 8, None)]
    config = RunConfig(settings=Settings(), configmap="cm", suite_version="sha256:0")
    bundle = Bundle(node_name="gpu-002", gpu_count=7, gpu_model="H100", node_gpus=8, planned_at=found.started_at,
                    steps=[BundleStep(test_name="gpu_health")], run_config=config)
    step = bundle.validation("gpu_health")
    assert step.to_xcom()["node_gpus"] == 8 and Validation.from_xcom(step.to_xcom()) == step
    # a node of unknown count: the operator's kwargs stay those of earlier releases
    assert "node_gpus" not in Validation.from_xcom({**step.to_xcom(), "node_gpus": None}).to_xcom()
    pod = podspec.build_pod(Settings(suite_device="cuda"), node_name="gpu-002", test_name="gpu_health", gpu_count=7,
                            gpu_model="H100", node_gpus=8, run_id="r", configmap="cm", suite_version="sha256:0")
    base = next(c for c in pod["spec"]["containers"] if c["name"] == "base")
    env = {e["name"]: e.get("value") for e in base["env"]}
    assert (env["CLUSTER_DOCTOR_EXPECTED_GPUS"], env["CLUSTER_DOCTOR_NODE_GPUS"]) == ("7", "8")
    assert base["resources"]["requests"][GPU] == "7"  # what the scheduler can give
    cpu = podspec.build_pod(Settings(suite_device="cpu"), node_name="gpu-002", test_name="gpu_health", gpu_count=7,
                            gpu_model="H100", node_gpus=8, run_id="r", configmap="cm", suite_version="sha256:0")
    assert "CLUSTER_DOCTOR_NODE_GPUS" not in {e["name"] for e in next(
        c for c in cpu["spec"]["containers"] if c["name"] == "base")["env"]}  # CPU mode expects no GPU


def test_a_peer_tests_pods_carry_their_nodes_count_too():
    from cluster_doctor.kube import peers

    a, b = peers.sides("gpu-002", "gpu-001", {"gpu-002": (7, "H100", 8), "gpu-001": (8, "H100")})
    assert (a.gpu_count, a.node_gpus, b.node_gpus) == (7, 8, None)  # a count of an earlier plan: unknown
