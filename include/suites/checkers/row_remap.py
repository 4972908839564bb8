"""Row remapping (Ampere and later): a remap that failed (RMA criterion), one pending until the next
GPU reset; where the driver reports no remap state the check is a visible skip."""

from __future__ import annotations

from dataclasses import dataclass

from ..harness.checks import Check
from . import device, where

CODES = ("ROW_REMAP_FAILURE", "ROW_REMAP_PENDING", "ROW_REMAP_UNAVAILABLE")


@dataclass(frozen=True)
class RowRemapStatus:
    gpu_index: int
    pci_bus_id: str | None
    pending: bool | None  # None: N/A (pre-Ampere, or a board whose driver reports no remap state)
    failure: bool | None
    uncorrectable_rows: int | None

    @property
    def supported(self) -> bool:
        return self.pending is not None or self.failure is not None


def observe(g: dict) -> RowRemapStatus:
    return RowRemapStatus(g["index"], g.get("pci_bus_id"), g.get("remap_pending"), g.get("remap_failure"),
                          g.get("remap_uncorrectable"))


def to_checks(s: RowRemapStatus, expected: bool = True) -> list[Check]:
    """`expected`: whether this GPU must report a remap state (False for GPUs that retire pages
    instead: then an N/A remap state is not a gap)."""
    dev, at, out = device(s.gpu_index), where(s.pci_bus_id), []
    rows = s.uncorrectable_rows or 0
    if s.failure:
        out.append(Check("row_remap_failure", "fail", True, device=dev, code="ROW_REMAP_FAILURE",
                         message=f"row remapping failed: GPU memory can no longer be repaired (RMA criterion){at}"))
    if s.pending:
        out.append(Check("row_remap_pending", "fail", True, device=dev, code="ROW_REMAP_PENDING",
                         message=f"row remapping pending ({rows} uncorrectable rows): reset the GPU{at}"))
    if s.pending is False and not s.failure:
        out.append(Check("row_remap", "pass", rows, "rows", device=dev,
                         message=f"no remap pending or failed ({rows} uncorrectable rows remapped)"))
    elif not s.supported and expected:
        out.append(Check("row_remap", "skip", device=dev, code="ROW_REMAP_UNAVAILABLE",
                         message=f"the driver reports no row-remapping state (N/A) for this GPU{at}"))
    elif s.pending is None and s.failure is False:
        out.append(Check("row_remap", "skip", device=dev, code="ROW_REMAP_UNAVAILABLE",
                         message=f"remap failure state reported, pending state N/A{at}"))
    return out
