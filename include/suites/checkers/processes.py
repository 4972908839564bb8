"""Compute processes left on a GPU of a node that should be idle."""

from __future__ import annotations

from dataclasses import dataclass

from ..harness.checks import Check
from . import device

CODES = ("LEFTOVER_PROCESSES",)


@dataclass(frozen=True)
class GpuProcesses:
    gpu_index: int
    count: int | None
    mib: int | None


def observe(g: dict) -> GpuProcesses:
    return GpuProcesses(g["index"], g.get("processes"), g.get("process_mib"))


def to_checks(s: GpuProcesses) -> list[Check]:
    if not s.count:
        return []
    return [Check("leftover_processes", "warn", s.count, device=device(s.gpu_index), code="LEFTOVER_PROCESSES",
                  message=f"{s.count} compute process(es) hold {s.mib if s.mib is not None else '?'} MiB on a "
                  "node that should be idle")]
