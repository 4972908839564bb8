"""Thermal throttling under load since the previous gpu_health run: NVML's cumulative thermal
violation time of each GPU, judged by its growth against the wall time between the two samples.

gpu_health runs on idle GPUs, where a GPU whose cooling fails (thermal interface, sensor, fan) is
cool and throttles nothing; it throttles under load, in the training job between two health runs.
NVML counts that time: `nvmlDeviceGetViolationStatus(device, NVML_PERF_POLICY_THERMAL)` gives
`violationTime`, the nanoseconds thermal limits have held the GPU below its requested clocks since
the driver loaded (nvmlViolationTime_t: violationTime in ns, referenceTime a CPU timestamp in µs;
nvmlPerfPolicyType_t THERMAL = 1, "how long did thermal violations cause the GPU to be below
application clocks"). Only the thermal policy is judged: the power policy counts the ordinary power
cap of a GPU at full load, and NVML documents no power-brake counter here.

* grown by more than `share` of the wall time since the previous sample: fail
  (`THERMAL_VIOLATION_UNDER_LOAD`); grown by less: warn (`THERMAL_VIOLATION_GROWING`); not grown: pass.
* not judged, and said why: the counter not reported (NVML "not supported", or the state came from
  nvidia-smi; `THERMAL_VIOLATION_UNAVAILABLE`), no previous sample of the node or of this GPU
  (`THERMAL_VIOLATION_NO_BASELINE`), the node rebooted since (`THERMAL_VIOLATION_REBOOTED`), the counter
  lower than before: the driver was reloaded or the GPU reset (`THERMAL_VIOLATION_COUNTER_RESET`).

A GPU is matched to its previous sample by UUID, else by PCI bus id, never by index alone (the index
order can change between runs). Every run keeps its sample in the result's environment
(`thermal_violation`: boot id, time, per GPU its UUID, bus id, index and the raw counter in ns); the
next run reads it back (gpu_health.py finds it, harness/previous.py).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

from ..harness.checks import Check
from ..harness.text import fmt, iso
from . import device, where

CODES = ("THERMAL_VIOLATION_UNDER_LOAD", "THERMAL_VIOLATION_GROWING", "THERMAL_VIOLATION_UNAVAILABLE",
         "THERMAL_VIOLATION_NO_BASELINE", "THERMAL_VIOLATION_REBOOTED", "THERMAL_VIOLATION_COUNTER_RESET")
KEY = "thermal_violation"  # the sample's key in the result's environment
NAME = "thermal_violation"  # the check


@dataclass(frozen=True)
class ViolationSample:
    """One GPU's thermal violation counter as read now; `ns` None: not reported (`why`)."""

    gpu_index: int
    uuid: str | None
    pci_bus_id: str | None
    ns: int | None
    why: str = ""

    def to_json(self) -> dict:
        return {"index": self.gpu_index, "uuid": self.uuid, "pci_bus_id": self.pci_bus_id, "ns": self.ns}


@dataclass(frozen=True)
class Baseline:
    """The previous sample to compare with, or (sample None) the code and reason why there is none."""

    sample: dict | None
    code: str = ""
    why: str = ""


def observe(g: dict, source: str | None) -> ViolationSample:
    """From the normalised GPU state (gpu_state.py): `thermal_violation_ns`, NVML only."""
    ns = g.get("thermal_violation_ns")
    if ns is not None:
        return ViolationSample(g["index"], g.get("uuid"), g.get("pci_bus_id"), int(ns))
    why = ("nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_THERMAL) not supported for this GPU by the driver"
           if source == "NVML" else
           f"the GPU state came from {source or 'no source'}: the thermal violation counter is read through NVML only")
    return ViolationSample(g["index"], g.get("uuid"), g.get("pci_bus_id"), None, why)


def usable(sample: dict) -> bool:
    """A stored sample that can be a baseline: a time and at least one GPU's counter."""
    return bool(sample.get("taken_at")) and any(
        isinstance(x, dict) and isinstance(x.get("ns"), int) for x in sample.get("gpus") or [])


def to_json(samples: list[ViolationSample], boot_id: str | None, at: _dt.datetime, source: str | None) -> dict:
    return {"boot_id": boot_id, "taken_at": iso(at), "source": source, "gpus": [s.to_json() for s in samples]}


def baseline(previous: dict | None, why_none: str, boot_id: str | None) -> Baseline:
    """The previous sample if its counters still count on: none, or one from another boot, is no baseline."""
    if previous is None:
        return Baseline(None, "THERMAL_VIOLATION_NO_BASELINE", why_none or "no previous gpu_health sample")
    if boot_id and previous.get("boot_id") and previous["boot_id"] != boot_id:
        return Baseline(None, "THERMAL_VIOLATION_REBOOTED", f"the node rebooted since the previous sample of "
                        f"{previous.get('taken_at', '?')}: the counters started again")
    return Baseline(previous)


def _match(s: ViolationSample, previous: dict) -> dict | None:
    """This GPU in the previous sample: by UUID (a replaced GPU in the same slot is a new GPU), else by
    PCI bus id when the previous sample has no UUIDs; never by index alone (the order can change)."""
    gpus = [x for x in previous.get("gpus") or [] if isinstance(x, dict)]
    if s.uuid and any(x.get("uuid") for x in gpus):
        return next((x for x in gpus if x.get("uuid") == s.uuid), None)
    if s.pci_bus_id:
        return next((x for x in gpus if x.get("pci_bus_id") == s.pci_bus_id), None)
    return None


def to_check(s: ViolationSample, base: Baseline, at: _dt.datetime, share: float) -> Check:
    """One `thermal_violation` check for the GPU."""
    dev = device(s.gpu_index)
    if s.ns is None:
        return Check(NAME, "skip", device=dev, code="THERMAL_VIOLATION_UNAVAILABLE", message=s.why)
    if base.sample is None:
        return _not_judged(s, base.code or "THERMAL_VIOLATION_NO_BASELINE", base.why)
    before = _match(s, base.sample)
    since = base.sample.get("taken_at", "?")
    if before is None or not isinstance(before.get("ns"), int):
        return _not_judged(s, "THERMAL_VIOLATION_NO_BASELINE", f"this GPU{where(s.uuid or s.pci_bus_id)} has no "
                           f"counter in the previous sample of {since} (a new GPU, or not reported then)")
    if s.ns < before["ns"]:
        return _not_judged(s, "THERMAL_VIOLATION_COUNTER_RESET", f"the counter is lower than in the previous sample of "
                           f"{since} ({before['ns']} ns): the driver was reloaded or the GPU reset since, the count "
                           f"started again")
    elapsed = _elapsed(since, at)
    if elapsed is None:
        return _not_judged(s, "THERMAL_VIOLATION_NO_BASELINE",
                           f"the previous sample's time {since!r} is not before now")
    grown = (s.ns - before["ns"]) / 1e9
    limit = share * elapsed
    seen = (f"thermal limits held the clocks down for {fmt(grown)} s of the {fmt(elapsed)} s since the previous "
            f"sample of {since} ({fmt(100 * grown / elapsed)} %)")
    threshold = f"<= {fmt(limit)} s ({fmt(100 * share)} % of {fmt(elapsed)} s)"
    if grown > limit:
        return Check(NAME, "fail", round(grown, 3), "s", threshold, f"{seen}, more than {fmt(100 * share)} %: "
                     f"cooling failing under load (thermal interface, sensor, fans){where(s.pci_bus_id)}", dev,
                     "THERMAL_VIOLATION_UNDER_LOAD")
    if grown > 0:
        return Check(NAME, "warn", round(grown, 3), "s", threshold, f"{seen}, within {fmt(100 * share)} %", dev,
                     "THERMAL_VIOLATION_GROWING")
    return Check(NAME, "pass", 0, "s", threshold, f"no thermal throttling in the {fmt(elapsed)} s since the previous "
                 f"sample of {since}", dev)


def _not_judged(s: ViolationSample, code: str, why: str) -> Check:
    return Check(NAME, "skip", device=device(s.gpu_index), code=code,
                 message=f"{why}; counter now {s.ns} ns, growth is judged from the next run")


def _elapsed(since: str, at: _dt.datetime) -> float | None:
    """Seconds from the previous sample's time to `at`; None when it cannot be read or is not earlier."""
    try:
        then = _dt.datetime.fromisoformat(str(since))
    except ValueError:
        return None
    if then.tzinfo is None:
        then = then.replace(tzinfo=_dt.timezone.utc)
    seconds = (at - then).total_seconds()
    return seconds if seconds > 0 else None
