"""What a slow node costs, estimated: the GPU-hours lost by a node running X % under its fleet since it was flagged.

A node that passes every floor but runs X % under the fleet median of its GPU model wastes about X % of each
GPU-hour it serves, so ``GPU-hours lost ≈ GPUs × hours since × X``. It is an estimate and says so: it assumes the
node served jobs all that time and stayed as slow as its flagged probe figure; it counts from the evidence's time
(the last flagged probe, else the first signal), not from when the slowness began, which is earlier. A synchronous
job spanning k nodes runs at its slowest node's pace, so such a job loses k times that.

X comes from the probe verdict lines of ``store.fail_slow.SlowNode.probes``
(``"straggler:probe_gemm_tflops_min=612 (fleet median 700)"``): the metric furthest under its fleet median. The
probe metrics are higher-is-better (``fleet_verdicts``). A node flagged by speed signals only has no figure to
measure X by: no estimate, said so. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
from collections.abc import Iterable

from cluster_doctor.domain.spans import duration

_NUMBER = r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
PROBE_LINE = re.compile(rf"^(?P<kind>[A-Za-z_]+):(?P<metric>[A-Za-z0-9_.]+)=(?P<value>{_NUMBER})"
                        rf"(?: \(fleet median (?P<median>{_NUMBER})\))?$")


@dataclasses.dataclass(frozen=True)
class ProbeFigure:
    """One flagged probe verdict: its kind (straggler, drift), metric, value and the fleet median it was judged by."""

    kind: str
    metric: str
    value: float
    fleet_median: float | None

    @property
    def slowdown(self) -> float | None:
        """How far under the fleet median, as a fraction (0.126: 12.6 % slow); None without a positive median or
        when the value is not under it (a drift verdict judges the node against its own past, not the fleet)."""
        if (self.fleet_median is None or not math.isfinite(self.fleet_median) or self.fleet_median <= 0
                or not math.isfinite(self.value) or self.value >= self.fleet_median):
            return None
        return 1.0 - max(self.value, 0.0) / self.fleet_median


def parse_probe(line: str) -> ProbeFigure | None:
    """A probe verdict line as ``store.fail_slow`` writes it; None when it is not one."""
    found = PROBE_LINE.match(str(line).strip())
    if not found:
        return None
    median = found["median"]
    return ProbeFigure(found["kind"], found["metric"], float(found["value"]),
                       float(median) if median is not None else None)


@dataclasses.dataclass(frozen=True)
class SlowCost:
    """The estimate for one node; ``figure`` None: no probe figure under a fleet median (speed signals only)."""

    figure: ProbeFigure | None
    gpus: int | None
    since: dt.datetime | None
    hours: float

    @property
    def slowdown(self) -> float | None:
        return self.figure.slowdown if self.figure else None

    @property
    def gpu_hours(self) -> float | None:
        """GPUs × hours since × slowdown; None when the slowdown or the GPU count is unknown."""
        if self.slowdown is None or not self.gpus:
            return None
        return self.gpus * self.hours * self.slowdown

    def describe(self) -> str:
        """'~26 GPU-hours at ~12.6 % slow since 2026-12-01 10:00 UTC (8 GPUs × 26 h × 12.6 %; probe_gemm_tflops_min
        612 vs fleet median 700; a synchronous job of k nodes loses k times that)'."""
        if self.figure is None or self.slowdown is None:
            return "unknown: no probe figure under its fleet median (speed signals only)"
        if self.since is None:
            return "unknown: no time since which the node is slow"
        pct = _pct(self.slowdown)
        since = self.since.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        span = duration(self.hours * 3600)
        what = f"{self.figure.metric} {_num(self.figure.value)} vs fleet median {_num(self.figure.fleet_median)}"
        if not self.gpus:
            return (f"~{pct} slow since {since} ({span}; {what}): GPU count unknown, ~{_num(self.hours * self.slowdown)}"
                    " GPU-hours per GPU; a synchronous job of k nodes loses k times that")
        return (f"~{_num(self.gpu_hours)} GPU-hours at ~{pct} slow since {since} ({self.gpus} GPUs × {span} × {pct}; "
                f"{what}; a synchronous job of k nodes loses k times that)")


def estimate(probes: Iterable[str], *, since: dt.datetime | None, now: dt.datetime, gpus: int | None) -> SlowCost:
    """The estimate from a slow node's flagged probe lines (the metric furthest under its fleet median), the time
    it is slow since, and its GPU count (None: unknown)."""
    figures = [f for f in (parse_probe(p) for p in probes) if f is not None and f.slowdown is not None]
    worst = max(figures, key=lambda f: f.slowdown, default=None)  # type: ignore[arg-type, return-value]
    hours = max(0.0, (now - since).total_seconds() / 3600) if since is not None else 0.0
    return SlowCost(worst, gpus if gpus and gpus > 0 else None, since, hours)


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.1f} %"


def _num(value: float | None) -> str:
    """A figure as the estimate quotes it: two significant digits under 10, whole numbers above."""
    if value is None:
        return "-"
    if abs(value) >= 10:
        return f"{round(value):,}"
    return f"{value:.2g}" if value else "0"
