"""How many GPUs this node must show and where that number comes from: a node pool's override, the
node's own count from the orchestrator (its capacity or GPU Feature Discovery's label, which do not
drop when the device plugin marks a GPU unhealthy), the count given for this run, else the SKU's
`expect.gpus` (baselines.yaml) — never what is left of the node."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuExpectation:
    count: int | None  # None: nothing says how many GPUs the node should have
    basis: str  # where the count comes from, for the check's message
    given: int | None = None  # the GPUs this run was given (--expected-gpus), when another source wins


def resolve(args, cpu: bool, models: Iterable[str | None] = ()) -> GpuExpectation:
    """The node's expected GPU count. `models` are the GPU names the suite detected (the hardware
    wins over the --gpu-model label, as in baselines.model_for_node). CPU mode expects only what it is
    told: the SKU and the node's count describe the GPU node, not this machine."""
    override = (getattr(args, "expect", None) or {}).get("gpus")
    given = getattr(args, "expected_gpus", None)
    if override:
        return GpuExpectation(int(override), "node pool override (--expect gpus=N)", given)
    node = getattr(args, "node_gpus", None)
    if node and not cpu:
        return GpuExpectation(int(node), "the node's capacity / GPU Feature Discovery label (--node-gpus)",
                              given if given and given != node else None)
    if given:
        return GpuExpectation(int(given), "--expected-gpus / CLUSTER_DOCTOR_EXPECTED_GPUS")
    if cpu:
        return GpuExpectation(None, "CPU mode")
    sku = sku_gpus(getattr(args, "baselines", None), [*models, getattr(args, "gpu_model", None)])
    if sku is not None:
        return GpuExpectation(sku[0], f"baselines.yaml {sku[1]}: {sku[2]}")
    return GpuExpectation(None, "no expected count (--expected-gpus, --node-gpus, --expect gpus=N or the "
                                "model's expect.gpus)")


def sku_gpus(path: str | None, names: list[str | None]) -> tuple[int, str, str] | None:
    """(GPUs, model key, source) of the first name baselines.yaml knows and gives a count for."""
    if not path:
        return None
    table = _sku_table(path)
    for name in names:
        if name and (hit := table(name)) is not None:
            return hit
    return None


@functools.lru_cache(maxsize=4)
def _sku_table(path: str):
    from ..baselines import Baselines  # baselines imports the harness: resolve at call time
    from .checks import SuiteError

    try:
        b = Baselines.load(path)
    except SuiteError:
        return lambda name: None  # the suite reports an unreadable baselines file itself

    def lookup(name: str) -> tuple[int, str, str] | None:
        key = b.resolve(name)
        block = b.model(key).get("expect") or {}
        gpus = block.get("gpus")
        if key is None or not isinstance(gpus, int) or isinstance(gpus, bool) or gpus <= 0:
            return None
        return gpus, key, (block.get("sources") or {}).get("gpus") or "no source given"

    return lookup
