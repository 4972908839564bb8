"""Clocks: hardware slowdown reasons while idle (thermal, power brake, HW slowdown) and the idle
temperature margin to the slowdown threshold."""

from __future__ import annotations

from dataclasses import dataclass

from ..harness.checks import Check
from . import device, where

CODES = ("CLOCK_THROTTLE_HW", "CLOCK_THROTTLE_SW", "CLOCK_THROTTLE_TRANSIENT", "CLOCK_THROTTLE_UNAVAILABLE",
         "TEMPERATURE_HIGH")
# NVML clock event reason bits (nvml.h nvmlClocksEventReason*; stable ABI values)
THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THROTTLE_FAIL = {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"}
THROTTLE_WARN = {"sw_power_cap"}


@dataclass(frozen=True)
class ClockState:
    gpu_index: int
    pci_bus_id: str | None
    active: tuple[str, ...] | None  # reasons set in most samples; None: not reported
    transient: tuple[str, ...]  # set in some samples only
    temp_c: int | None
    slowdown_temp_c: int | None


def observe(g: dict) -> ClockState:
    act = g.get("throttle_active")
    return ClockState(g["index"], g.get("pci_bus_id"), tuple(act) if act is not None else None,
                      tuple(g.get("throttle_transient") or ()), g.get("temp_c"), g.get("slowdown_temp_c"))


def to_checks(s: ClockState, margin_c: float = 10) -> list[Check]:
    return [_throttle(s)] + _temperature(s, margin_c)


def _throttle(s: ClockState) -> Check:
    dev, at = device(s.gpu_index), where(s.pci_bus_id)
    if s.active is None:
        return Check("clock_throttle", "skip", device=dev, message="clock event reasons not reported",
                     code="CLOCK_THROTTLE_UNAVAILABLE")
    active = set(s.active)
    bad = sorted(active & THROTTLE_FAIL)
    if bad:
        return Check("clock_throttle", "fail", ",".join(bad), device=dev, code="CLOCK_THROTTLE_HW",
                     message=f"clocks slowed down by {', '.join(bad)} while idle{at}")
    if active & THROTTLE_WARN:
        return Check("clock_throttle", "warn", ",".join(sorted(active)), device=dev, code="CLOCK_THROTTLE_SW",
                     message="software power cap active while idle")
    flick = sorted(set(s.transient) & THROTTLE_FAIL)
    if flick:
        return Check("clock_throttle", "warn", ",".join(flick), device=dev, code="CLOCK_THROTTLE_TRANSIENT",
                     message=f"{', '.join(flick)} seen in one sample while idle{at}")
    names = ", ".join(sorted(active)) or "none"
    return Check("clock_throttle", "pass", ",".join(sorted(active)) or "none", device=dev,
                 message=f"no slowdown reason active ({names})")


def _temperature(s: ClockState, margin_c: float) -> list[Check]:
    if s.temp_c is None or not s.slowdown_temp_c:
        return []  # informational: the throttle reasons above are the evidence that matters
    limit = s.slowdown_temp_c - margin_c
    ok = s.temp_c < limit
    return [Check("temperature", "pass" if ok else "warn", s.temp_c, "C", f"< {limit}",
                  f"{s.temp_c} C at idle, slowdown at {s.slowdown_temp_c} C", device(s.gpu_index),
                  None if ok else "TEMPERATURE_HIGH")]
