"""ECC: uncorrected errors since the driver loaded (fail), over the GPU's lifetime (warn), ECC off."""

from __future__ import annotations

from dataclasses import dataclass

from ..harness.checks import Check
from . import device, where

CODES = ("ECC_UNCORRECTED", "ECC_UNCORRECTED_LIFETIME", "ECC_DISABLED", "ECC_COUNTERS_UNAVAILABLE")


@dataclass(frozen=True)
class EccStatus:
    gpu_index: int
    pci_bus_id: str | None
    ecc_enabled: bool | None
    volatile_uncorrected: int | None  # None: the driver reports N/A
    aggregate_uncorrected: int | None


def observe(g: dict) -> EccStatus:
    return EccStatus(g["index"], g.get("pci_bus_id"), g.get("ecc_enabled"), g.get("volatile_uncorrected"),
                     g.get("aggregate_uncorrected"))


def to_checks(s: EccStatus, has_ecc_memory: bool = True) -> list[Check]:
    dev, at, out = device(s.gpu_index), where(s.pci_bus_id), []
    v = s.volatile_uncorrected
    if v is None:
        # with ECC off the driver reports the counters as N/A: say so rather than blame the driver
        why = "ECC is disabled on this GPU" if s.ecc_enabled is False else "ECC counters not reported by the driver"
        out.append(Check("ecc_uncorrected_volatile", "skip", device=dev, message=why + at,
                         code="ECC_COUNTERS_UNAVAILABLE"))
    else:
        out.append(Check("ecc_uncorrected_volatile", "pass" if v == 0 else "fail", v, "errors", "== 0",
                         f"{v} uncorrected ECC error(s) since driver load{at}", dev,
                         None if v == 0 else "ECC_UNCORRECTED"))
    if s.aggregate_uncorrected:
        out.append(Check("ecc_uncorrected_aggregate", "warn", s.aggregate_uncorrected, "errors", "== 0",
                         f"{s.aggregate_uncorrected} uncorrected ECC error(s) over the GPU's lifetime{at}", dev,
                         "ECC_UNCORRECTED_LIFETIME"))
    if s.ecc_enabled is False and has_ecc_memory:
        out.append(Check("ecc_mode", "warn", "disabled", message=f"ECC is disabled{at}", device=dev,
                         code="ECC_DISABLED"))
    return out
