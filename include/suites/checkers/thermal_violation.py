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
* a failure is remembered: the GPU's entry in the sample keeps `under_load` (when, seconds throttled,
  seconds elapsed), and every later run of the same GPU fails with the same code while it is inside
  `gpu_health.thermal_violation_window_hours` (24), carrying it forward, whatever the counter does
  now. Without it the run after a failure (the retest, the sweep of the drained node) sees no load, so
  no growth, and would pass the GPU whose cooling fails under load; a reboot or a counter reset (a
  repair that reboots) proves nothing about the cooling either. Past the window the GPU is judged by
  its growth again; sooner, dl_unit (which loads it) or an operator decides.

A GPU is matched to its previous sample by UUID, else by PCI bus id, never by index alone (the index
order can change between runs; a new UUID in the slot is another GPU and inherits no failure). Every
run keeps its sample in the result's environment (`thermal_violation`: boot id, time, per GPU its UUID,
bus id, index, the raw counter in ns and the failure it carries); the next run reads it back
(gpu_health.py finds it, harness/previous.py).
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
RECORD = "under_load"  # a GPU entry's failure, carried forward inside the window
WINDOW_H = 24.0  # gpu_health.thermal_violation_window_hours when baselines.yaml does not say


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
    """The previous sample to compare with, or (sample None) the code and reason why there is none;
    `previous` the previous sample even when it is no baseline (another boot): its failures still count."""

    sample: dict | None
    code: str = ""
    why: str = ""
    previous: dict | None = None


@dataclass(frozen=True)
class Verdict:
    """The GPU's check and the failure its entry carries forward (None: none inside the window)."""

    check: Check
    record: dict | None


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


def to_json(samples: list[ViolationSample], boot_id: str | None, at: _dt.datetime, source: str | None,
            records: dict[int, dict] | None = None, unseen: list[dict] = ()) -> dict:
    """This run's sample; `records`: by GPU index, the failure each GPU carries forward; `unseen`: the
    previous entries of GPUs not judged now whose failure is still inside the window (see `unseen`)."""
    gpus = [s.to_json() for s in samples]
    for g in gpus:
        if (records or {}).get(g["index"]):
            g[RECORD] = records[g["index"]]
    return {"boot_id": boot_id, "taken_at": iso(at), "source": source, "gpus": gpus + list(unseen)}


def unseen(samples: list[ViolationSample], previous: dict | None, at: _dt.datetime,
           window_h: float = WINDOW_H) -> list[dict]:
    """The previous sample's GPUs that no GPU of this run matches (lost, fallen off the bus) and whose
    failure is inside the window: kept with no counter, so the GPU fails again when it is back."""
    matched = {id(m) for m in (_match(s, previous or {}) for s in samples) if m is not None}
    return [{"index": x.get("index"), "uuid": x.get("uuid"), "pci_bus_id": x.get("pci_bus_id"), "ns": None,
             RECORD: x[RECORD]} for x in (previous or {}).get("gpus") or []
            if isinstance(x, dict) and id(x) not in matched and _live(x.get(RECORD), at, window_h)]


def baseline(previous: dict | None, why_none: str, boot_id: str | None) -> Baseline:
    """The previous sample if its counters still count on: none, or one from another boot, is no baseline."""
    if previous is None:
        return Baseline(None, "THERMAL_VIOLATION_NO_BASELINE", why_none or "no previous gpu_health sample")
    if boot_id and previous.get("boot_id") and previous["boot_id"] != boot_id:
        return Baseline(None, "THERMAL_VIOLATION_REBOOTED", f"the node rebooted since the previous sample of "
                        f"{previous.get('taken_at', '?')}: the counters started again", previous)
    return Baseline(previous, previous=previous)


def _match(s: ViolationSample, previous: dict) -> dict | None:
    """This GPU in the previous sample: by UUID (a replaced GPU in the same slot is a new GPU), else by
    PCI bus id when the previous sample has no UUIDs; never by index alone (the order can change)."""
    gpus = [x for x in previous.get("gpus") or [] if isinstance(x, dict)]
    if s.uuid and any(x.get("uuid") for x in gpus):
        return next((x for x in gpus if x.get("uuid") == s.uuid), None)
    if s.pci_bus_id:
        return next((x for x in gpus if x.get("pci_bus_id") == s.pci_bus_id), None)
    return None


def judge(s: ViolationSample, base: Baseline, at: _dt.datetime, share: float,
          window_h: float = WINDOW_H) -> Verdict:
    """The GPU's `thermal_violation` check: a failure now starts a record; else a failure of an earlier
    run inside the window fails again (carried forward), whatever the counter says now."""
    check, grown, elapsed = _growth(s, base, at, share)
    if check.status == "fail":
        return Verdict(check, {"at": iso(at), "throttled_s": round(grown, 3), "elapsed_s": round(elapsed, 3)})
    rec = _in_window(s, base.previous, at, window_h)
    return Verdict(check, None) if rec is None else Verdict(_carried(s, rec, window_h, check), rec)


def _carried(s: ViolationSample, rec: dict, window_h: float, now: Check) -> Check:
    """The failure of an earlier run, inside the window, failing this run again; `now`: what this run saw."""
    threshold = f"no thermal throttling under load within {window_h:g} h"
    return Check(NAME, "fail", rec.get("throttled_s"), "s", threshold,
                 f"thermal throttling under load seen at {rec['at']} ({fmt(rec.get('throttled_s'))} s of "
                 f"{fmt(rec.get('elapsed_s'))} s), within the {window_h:g} h window{where(s.pci_bus_id)}: no "
                 f"growth since, a reboot or a counter reset does not prove the cooling fixed; this run: "
                 f"{now.message}", device(s.gpu_index), "THERMAL_VIOLATION_UNDER_LOAD")

def to_check(s: ViolationSample, base: Baseline, at: _dt.datetime, share: float,
             window_h: float = WINDOW_H) -> Check:
    """One `thermal_violation` check for the GPU (judge's check)."""
    return judge(s, base, at, share, window_h).check


def _in_window(s: ViolationSample, previous: dict | None, at: _dt.datetime, window_h: float) -> dict | None:
    """The failure this GPU (same UUID, else bus id) carried in the previous sample, if inside the window."""
    rec = (_match(s, previous or {}) or {}).get(RECORD)
    return rec if _live(rec, at, window_h) else None


def _live(rec, at: _dt.datetime, window_h: float) -> bool:
    """A stored failure whose time is readable and at most `window_h` hours before `at`."""
    seen = _parse(rec.get("at")) if isinstance(rec, dict) and rec.get("at") else None
    return seen is not None and _dt.timedelta(0) <= at - seen < _dt.timedelta(hours=window_h)


def _growth(s: ViolationSample, base: Baseline, at: _dt.datetime, share: float) -> tuple[Check, float, float]:
    """The check by the counter's growth alone, with the seconds grown and elapsed (0 when not judged)."""
    dev = device(s.gpu_index)
    if s.ns is None:
        return Check(NAME, "skip", device=dev, code="THERMAL_VIOLATION_UNAVAILABLE", message=s.why), 0, 0
    if base.sample is None:
        return _not_judged(s, base.code or "THERMAL_VIOLATION_NO_BASELINE", base.why), 0, 0
    before = _match(s, base.sample)
    since = base.sample.get("taken_at", "?")
    if before is None or not isinstance(before.get("ns"), int):
        return _not_judged(s, "THERMAL_VIOLATION_NO_BASELINE", f"this GPU{where(s.uuid or s.pci_bus_id)} has no "
                           f"counter in the previous sample of {since} (a new GPU, or not reported then)"), 0, 0
    if s.ns < before["ns"]:
        return _not_judged(s, "THERMAL_VIOLATION_COUNTER_RESET", f"the counter is lower than in the previous sample of "
                           f"{since} ({before['ns']} ns): the driver was reloaded or the GPU reset since, the count "
                           f"started again"), 0, 0
    elapsed = _elapsed(since, at)
    if elapsed is None:
        return _not_judged(s, "THERMAL_VIOLATION_NO_BASELINE",
                           f"the previous sample's time {since!r} is not before now"), 0, 0
    grown = (s.ns - before["ns"]) / 1e9
    limit = share * elapsed
    seen = (f"thermal limits held the clocks down for {fmt(grown)} s of the {fmt(elapsed)} s since the previous "
            f"sample of {since} ({fmt(100 * grown / elapsed)} %)")
    threshold = f"<= {fmt(limit)} s ({fmt(100 * share)} % of {fmt(elapsed)} s)"
    if grown > limit:
        return Check(NAME, "fail", round(grown, 3), "s", threshold, f"{seen}, more than {fmt(100 * share)} %: "
                     f"cooling failing under load (thermal interface, sensor, fans){where(s.pci_bus_id)}", dev,
                     "THERMAL_VIOLATION_UNDER_LOAD"), grown, elapsed
    if grown > 0:
        return Check(NAME, "warn", round(grown, 3), "s", threshold, f"{seen}, within {fmt(100 * share)} %", dev,
                     "THERMAL_VIOLATION_GROWING"), grown, elapsed
    return Check(NAME, "pass", 0, "s", threshold, f"no thermal throttling in the {fmt(elapsed)} s since the previous "
                 f"sample of {since}", dev), grown, elapsed


def _not_judged(s: ViolationSample, code: str, why: str) -> Check:
    return Check(NAME, "skip", device=device(s.gpu_index), code=code,
                 message=f"{why}; counter now {s.ns} ns, growth is judged from the next run")


def _elapsed(since: str, at: _dt.datetime) -> float | None:
    """Seconds from the previous sample's time to `at`; None when it cannot be read or is not earlier."""
    then = _parse(since)
    seconds = (at - then).total_seconds() if then else 0
    return seconds if seconds > 0 else None


def _parse(ts: str) -> _dt.datetime | None:
    """A stored time (UTC when it says no zone); None when it cannot be read."""
    try:
        then = _dt.datetime.fromisoformat(str(ts))
    except ValueError:
        return None
    return then if then.tzinfo else then.replace(tzinfo=_dt.timezone.utc)
