"""NVSwitch fabric registration (Hopper and later): a GPU whose fabric state is not Completed/Success
cannot run CUDA ('system not yet initialized'). A query that failed (an NVML error other than "not
supported") is a visible not-run, never read as "no fabric on this system"; so is a state that was
not reported at all (NVML NOT_SUPPORTED, an nvidia-ml-py without the fabric struct, an nvidia-smi
without a Fabric section) on a SKU that has NVSwitches (`expect.nvswitch`): there "no state" cannot
mean "no fabric"."""

from __future__ import annotations

from dataclasses import dataclass

from ..harness.checks import Check
from . import device

CODES = ("FABRIC_NOT_READY", "FABRIC_STATE_UNKNOWN")


@dataclass(frozen=True)
class FabricState:
    gpu_index: int
    state: str | None  # None: no NVSwitch fabric on this system (or the query failed: `error`)
    status: str | None
    error: str | None = None  # why the fabric state could not be read
    unavailable: str | None = None  # why no state was reported (not supported, no struct, no section)


def observe(g: dict) -> FabricState:
    return FabricState(g["index"], g.get("fabric_state"), g.get("fabric_status"), g.get("fabric_error"),
                       g.get("fabric_unavailable"))


def to_checks(s: FabricState, nvswitch: bool = False) -> list[Check]:
    """`nvswitch`: the node should have NVSwitches (its SKU's or node pool's expectation)."""
    if s.error and not s.state:
        return [Check("fabric", "skip", device=device(s.gpu_index), code="FABRIC_STATE_UNKNOWN",
                      message=f"NVSwitch fabric state not read ({s.error}): registration not judged")]
    if not s.state and nvswitch:
        why = s.unavailable or "no fabric state reported"
        return [Check("fabric", "skip", device=device(s.gpu_index), code="FABRIC_STATE_UNKNOWN",
                      message=f"the node should have NVSwitches (expect.nvswitch) but its fabric state was not "
                      f"reported ({why}): registration not judged")]
    if not s.state:
        return []
    ok = s.state == "Completed" and (s.status or "Success") == "Success"
    return [Check("fabric", "pass" if ok else "fail", f"{s.state}/{s.status}", device=device(s.gpu_index),
                  code=None if ok else "FABRIC_NOT_READY",
                  message=f"NVSwitch fabric state {s.state}, status {s.status}"
                  + ("" if ok else " (fabric manager not running or GPU not registered)"))]
