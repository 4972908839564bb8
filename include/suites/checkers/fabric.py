"""NVSwitch fabric registration (Hopper and later): a GPU whose fabric state is not Completed/Success
cannot run CUDA ('system not yet initialized'). A query that failed (an NVML error other than "not
supported") is a visible not-run, never read as "no fabric on this system"."""

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


def observe(g: dict) -> FabricState:
    return FabricState(g["index"], g.get("fabric_state"), g.get("fabric_status"), g.get("fabric_error"))


def to_checks(s: FabricState) -> list[Check]:
    if s.error and not s.state:
        return [Check("fabric", "skip", device=device(s.gpu_index), code="FABRIC_STATE_UNKNOWN",
                      message=f"NVSwitch fabric state not read ({s.error}): registration not judged")]
    if not s.state:
        return []
    ok = s.state == "Completed" and (s.status or "Success") == "Success"
    return [Check("fabric", "pass" if ok else "fail", f"{s.state}/{s.status}", device=device(s.gpu_index),
                  code=None if ok else "FABRIC_NOT_READY",
                  message=f"NVSwitch fabric state {s.state}, status {s.status}"
                  + ("" if ok else " (fabric manager not running or GPU not registered)"))]
