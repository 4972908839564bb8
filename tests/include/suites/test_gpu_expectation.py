"""harness/gpu_expectation.py: the GPU count a node must show comes from what it should have (a node
pool's override, its capacity / GFD label from the orchestrator, the SKU's expect.gpus), never from
what is left of it: the highest of them, only a node pool's override may lower it. gpu_health's use of it: test_suites_gpu_health.py."""

from __future__ import annotations

from argparse import Namespace

import pytest
from cluster_doctor_suites.harness import gpu_expectation

BASELINES = str(gpu_expectation.__file__).replace("harness/gpu_expectation.py", "baselines.yaml")
H100 = "NVIDIA-H100-80GB-HBM3"


def args(**kw) -> Namespace:
    return Namespace(**{"expect": {}, "expected_gpus": None, "node_gpus": None, "gpu_model": None,
                        "baselines": BASELINES, **kw})


@pytest.mark.parametrize("kw, cpu, models, count, basis", [
    ({"expected_gpus": 7, "node_gpus": 8}, False, (), 8, "capacity"),  # the pod got 7 of the node's 8
    ({"expected_gpus": 7, "node_gpus": 8, "expect": {"gpus": 4}}, False, (), 4, "node pool override"),
    ({"expected_gpus": 7}, False, (), 7, "--expected-gpus"),
    ({"gpu_model": H100}, False, (), 8, "baselines.yaml h100-sxm"),  # the SKU by its label
    ({}, False, ("NVIDIA H100 80GB HBM3",), 8, "baselines.yaml h100-sxm"),  # by the hardware's name
    ({"gpu_model": "NVIDIA-H100-PCIe"}, False, (), None, "no expected count"),  # PCIe: deployment-specific
    ({"gpu_model": H100, "node_gpus": 8}, True, (), None, "CPU mode"),  # CPU mode: only what it is told
    ({"expected_gpus": 2}, True, (), 2, "--expected-gpus"),
    # a GPU that did not enumerate lowers capacity and the label too: the HGX board's 8 stay the bar
    ({"gpu_model": H100, "node_gpus": 7, "expected_gpus": 7}, False, (), 8, "baselines.yaml h100-sxm"),
    ({"node_gpus": 7, "expected_gpus": 7}, False, ("NVIDIA H100 80GB HBM3",), 8, "baselines.yaml h100-sxm"),
    ({"gpu_model": H100, "node_gpus": 7, "expected_gpus": 7, "expect": {"gpus": 4}}, False, (), 4, "node pool override"),
    ({"gpu_model": H100, "node_gpus": 16}, False, (), 16, "capacity"),  # never below what the node reports
])
def test_the_expected_count_and_where_it_comes_from(kw, cpu, models, count, basis):
    got = gpu_expectation.resolve(args(**kw), cpu, models)
    assert got.count == count and basis in got.basis



def test_what_the_orchestrator_saw_is_kept_when_the_sku_sets_the_bar():
    got = gpu_expectation.resolve(args(gpu_model=H100, node_gpus=7, expected_gpus=7), False)
    assert (got.count, got.given) == (8, 7)
    assert gpu_expectation.resolve(args(gpu_model=H100, node_gpus=8, expected_gpus=8), False).given is None
