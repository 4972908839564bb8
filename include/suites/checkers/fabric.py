"""NVSwitch fabric registration (Hopper and later): a GPU whose fabric state is not Completed/Success
cannot run CUDA ('system not yet initialized')."""

from __future__ import annotations

from dataclasses import dataclass

from ..harness.checks import Check
from . import device

CODES = ("FABRIC_NOT_READY",)


@dataclass(frozen=True)
class FabricState:
    gpu_index: int
    state: str | None  # None: no NVSwitch fabric on this system
    status: str | None


def observe(g: dict) -> FabricState:
    return FabricState(g["index"], g.get("fabric_state"), g.get("fabric_status"))


def to_checks(s: FabricState) -> list[Check]:
    if not s.state:
        return []
    ok = s.state == "Completed" and (s.status or "Success") == "Success"
    return [Check("fabric", "pass" if ok else "fail", f"{s.state}/{s.status}", device=device(s.gpu_index),
                  code=None if ok else "FABRIC_NOT_READY",
                  message=f"NVSwitch fabric state {s.state}, status {s.status}"
                  + ("" if ok else " (fabric manager not running or GPU not registered)"))]
