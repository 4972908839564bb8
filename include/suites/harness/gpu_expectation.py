"""How many GPUs this node must show and where that number comes from: the most it should have. The
SKU's `expect.gpus` (baselines.yaml) and what the orchestrator saw (--node-gpus: capacity / GPU
Feature Discovery's label; --expected-gpus: what this run was given) each set a floor and the
highest wins, because a GPU that does not enumerate after a reboot lowers capacity and the label
too ("7 of 7" on an 8-GPU board). Only a node pool's explicit override (--expect gpus=N) may lower
the bar: it is the one source that says what this node pool's boards carry."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuExpectation:
    count: int | None  # None: nothing says how many GPUs the node should have
    basis: str  # where the count comes from, for the check's message
    given: int | None = None  # what the orchestrator saw (or gave this run), when another source wins


def resolve(args, cpu: bool, models: Iterable[str | None] = ()) -> GpuExpectation:
    """The node's expected GPU count. `models` are the GPU names the suite detected (the hardware
    wins over the --gpu-model label, as in baselines.model_for_node). CPU mode expects only what it is
    told: the SKU and the node's count describe the GPU node, not this machine."""
    override = (getattr(args, "expect", None) or {}).get("gpus")
    given = _positive(getattr(args, "expected_gpus", None))
    if override:
        return GpuExpectation(int(override), "node pool override (--expect gpus=N)", given)
    if cpu:
        if given:
            return GpuExpectation(given, "--expected-gpus / CLUSTER_DOCTOR_EXPECTED_GPUS")
        return GpuExpectation(None, "CPU mode")
    node = _positive(getattr(args, "node_gpus", None))
    sku = sku_gpus(getattr(args, "baselines", None), [*models, getattr(args, "gpu_model", None)])
    # highest first; on a tie the more specific source names the bar (the SKU, then the node)
    floors = [(n, rank, why) for n, rank, why in (
        (sku[0] if sku else None, 2, f"baselines.yaml {sku[1]}: {sku[2]}" if sku else ""),
        (node, 1, "the node's capacity / GPU Feature Discovery label (--node-gpus)"),
        (given, 0, "--expected-gpus / CLUSTER_DOCTOR_EXPECTED_GPUS"),
    ) if n]
    if not floors:
        return GpuExpectation(None, "no expected count (--expected-gpus, --node-gpus, --expect gpus=N or the "
                                    "model's expect.gpus)")
    count, _, basis = max(floors)
    seen = min(n for n, _, _ in floors)
    return GpuExpectation(count, basis, seen if seen < count else None)


def _positive(value) -> int | None:
    try:
        n = int(value) if value is not None else None
    except (TypeError, ValueError):
        return None
    return n if n and n > 0 else None


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
