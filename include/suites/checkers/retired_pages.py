"""Dynamic page retirement (pre-Ampere memory repair): pages waiting to be retired need a reset;
pages retired for double-bit errors are a warning. GPUs that repair memory by row remapping report
N/A here, which is not a gap (row_remap is their check)."""

from __future__ import annotations

from dataclasses import dataclass

from ..harness.checks import Check
from . import device, where

CODES = ("RETIRED_PAGES_PENDING", "RETIRED_PAGES_DBE", "RETIRED_PAGES_UNAVAILABLE")


@dataclass(frozen=True)
class RetiredPages:
    gpu_index: int
    pci_bus_id: str | None
    pending: bool | None
    dbe_pages: int | None


def observe(g: dict) -> RetiredPages:
    return RetiredPages(g["index"], g.get("pci_bus_id"), g.get("retired_pending"), g.get("retired_dbe"))


def to_checks(s: RetiredPages, uses_row_remap: bool) -> list[Check]:
    dev, at, out = device(s.gpu_index), where(s.pci_bus_id), []
    if s.pending:
        out.append(Check("retired_pages_pending", "fail", True, device=dev, code="RETIRED_PAGES_PENDING",
                         message=f"page retirement pending: reset the GPU or reboot{at}"))
    if s.dbe_pages:
        out.append(Check("retired_pages_dbe", "warn", s.dbe_pages, "pages", device=dev, code="RETIRED_PAGES_DBE",
                         message=f"{s.dbe_pages} page(s) retired for double-bit ECC errors{at}"))
    if s.pending is False:
        out.append(Check("retired_pages", "pass", s.dbe_pages or 0, "pages", device=dev,
                         message="no page retirement pending"))
    elif s.pending is None and not uses_row_remap:
        out.append(Check("retired_pages", "skip", device=dev, code="RETIRED_PAGES_UNAVAILABLE",
                         message=f"the driver reports neither page retirement nor row remapping state{at}"))
    return out
