"""Fleet-relative and drift verdicts: judge a node's key metrics against its peers and its own past.

Fixed floors (in the suites) catch a node below an absolute minimum; they miss a node that is 15 %
slower than identical peers yet above the floor, and they cannot tell a whole fleet that is slow.
This module adds two relative verdicts, judged after an attempt is recorded (never inside the pod):

* ``straggler``: the node's value is below the fleet median of its GPU model by more than BOTH a
  relative margin (default 10 %) and ``k`` scaled MADs (default 3). The baseline is robust: per node
  the median of its recent values (so a node that runs more often does not weigh more), then the
  median and MAD over nodes, recomputed after dropping the nodes that deviate by more than the
  thresholds (in either direction), leaving the judged node out, and leaving out values that were
  themselves flagged: an outlier never feeds its own baseline.
* ``drift``: the latest value dropped by more than a margin (default 10 %) below the node's own
  trailing median (its previous, unflagged values).

A verdict needs a minimum sample (fleet nodes, own values) before it applies; below that the
metric is "not judged", never "passed". A verdict on one attempt is a suspect: the pair is handed to
the prioritizer as failing, so the failed-retest path runs it again after ``failed_retest_hours``;
the verdict is ``confirmed`` when that next executed attempt is flagged the same way, and only
confirmed verdicts count as failing (quarantine, alerts).

All metrics judged here are higher-is-better; lower-is-better metrics (latencies, step times) would
be judged on their negation.

This module is the pure core (``judge_metric``, over plain values); ``cluster_doctor.store.verdicts``
reads the window from the results database and stores verdicts in ``validation_verdicts``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, model_validator

from cluster_doctor.domain.policy import Policy, above_zero, count, flag, is_number

from cluster_doctor.domain import fail_slow

log = logging.getLogger(__name__)

STRAGGLER = "straggler"
DRIFT = "drift"
KINDS = (STRAGGLER, DRIFT)
MAD_SCALE = 1.4826  # scales the MAD to a standard deviation for normally distributed values

# Performance metrics judged per suite (higher is better). gpu_health's counts (GPUs visible, XID
# events) are judged exactly by the suite; its speed probe's figures are judged here, every sweep that
# probes (the fail-slow rule of domain.fail_slow reads these verdicts).
JUDGED_METRICS: dict[str, tuple[str, ...]] = {
    fail_slow.PROBE_TEST: fail_slow.PROBE_METRICS,
    "dl_unit": ("gemm_bf16_tflops_min", "mem_bw_gbps_min"),
    "nccl_loopback": ("nccl_busbw_gbps",),
    "storage_fio": ("fio_seq_read_mibps", "fio_seq_write_mibps", "fio_rand_read_iops", "fio_rand_write_iops"),
}


class InvalidBaselinePolicy(ValueError):
    pass


def _margin(value: Any) -> Any:
    if not is_number(value) or not 0 < value < 1:
        raise ValueError(f"must be a share between 0 and 1, got {value!r}")
    return value


class BaselinePolicy(Policy):
    setting: ClassVar[str] = "fleet_verdicts"
    error: ClassVar[type[ValueError]] = InvalidBaselinePolicy

    enabled: Annotated[bool, BeforeValidator(flag)] = True
    window_days: Annotated[float, BeforeValidator(above_zero)] = 14.0  # fleet baseline: executed results of the last N days
    # other nodes of the same GPU model with a value, before straggler applies
    min_fleet_nodes: Annotated[int, BeforeValidator(count)] = 10
    rel_margin: Annotated[float, BeforeValidator(_margin)] = 0.10  # straggler: below the fleet median by more than this share ...
    k_mad: Annotated[float, BeforeValidator(above_zero)] = 3.0  # ... and by more than k scaled MADs
    per_node_samples: Annotated[int, BeforeValidator(count)] = 3  # a node's fleet value: median of its latest N unflagged values
    # drift: below the node's own trailing median by more than this share
    drift_margin: Annotated[float, BeforeValidator(_margin)] = 0.10
    drift_samples: Annotated[int, BeforeValidator(count)] = 5  # own trailing median over the previous N unflagged values ...
    drift_min_samples: Annotated[int, BeforeValidator(count)] = 3  # ... of which at least this many
    drift_window_days: Annotated[float, BeforeValidator(above_zero)] = 60.0

    @model_validator(mode="after")
    def _drift_sample(self) -> BaselinePolicy:
        if self.drift_min_samples > self.drift_samples:
            raise ValueError("fleet_verdicts.drift_min_samples must not exceed drift_samples")
        return self


@dataclasses.dataclass(frozen=True)
class Sample:
    """One executed attempt's value of one metric."""

    history_id: int
    node_name: str
    finished_at: dt.datetime
    value: float
    flagged: frozenset[str] = frozenset()  # verdict kinds already stored for this attempt and metric


@dataclasses.dataclass(frozen=True)
class Baseline:
    median: float
    mad: float  # scaled (a robust standard deviation)
    nodes: int  # nodes that fed it
    values: tuple[float, ...]  # the per-node values that fed it, sorted

    def percentile(self, value: float) -> float:
        """Share of the fleet's node values below ``value`` (ties count half), 0-100."""
        below = sum(1 for v in self.values if v < value)
        equal = sum(1 for v in self.values if v == value)
        return 100.0 * (below + 0.5 * equal) / len(self.values)

    def quantile(self, q: float) -> float:
        """The value below which a share ``q`` of the fleet's node values lie (linear interpolation)."""
        pos = max(0.0, min(1.0, q)) * (len(self.values) - 1)
        i = int(pos)
        j = min(i + 1, len(self.values) - 1)
        return self.values[i] + (self.values[j] - self.values[i]) * (pos - i)


@dataclasses.dataclass(frozen=True)
class Verdict:
    history_id: int
    node_name: str
    test_name: str
    metric: str
    kind: str  # straggler | drift
    value: float
    gpu_model: str | None
    fleet_median: float | None
    fleet_mad: float | None
    fleet_nodes: int | None
    percentile: float | None
    own_median: float | None
    own_samples: int | None
    confirmed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        what = (f"{self.metric}={_num(self.value)}: {self.kind}"
                + (" (confirmed)" if self.confirmed else " (suspect: retest pending)"))
        parts = []
        if self.fleet_median is not None:
            drop = 100 * (1 - self.value / self.fleet_median) if self.fleet_median else 0.0
            parts.append(f"fleet median {_num(self.fleet_median)} over {self.fleet_nodes} nodes "
                         f"({drop:.1f} % below, percentile {self.percentile:.0f})")
        if self.own_median is not None:
            drop = 100 * (1 - self.value / self.own_median) if self.own_median else 0.0
            parts.append(f"own median {_num(self.own_median)} ({drop:.1f} % below)")
        return f"{self.node_name} · {self.test_name} {what}; " + "; ".join(parts)


def _num(x: float) -> str:
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:,.0f}"


# ---------------------------------------------------------------------------- pure core
def _mad(values: Sequence[float], center: float) -> float:
    return MAD_SCALE * statistics.median(abs(v - center) for v in values)


def is_low(value: float, median: float, mad: float, policy: BaselinePolicy) -> bool:
    """Below the median by more than both the relative margin and k scaled MADs."""
    return value < median * (1 - policy.rel_margin) and value < median - policy.k_mad * mad


def _deviates(value: float, median: float, mad: float, policy: BaselinePolicy) -> bool:
    gap = abs(value - median)
    return gap > policy.rel_margin * abs(median) and gap > policy.k_mad * mad


def node_value(samples: Iterable[Sample], policy: BaselinePolicy) -> float | None:
    """A node's value for the fleet baseline: the median of its latest unflagged values."""
    usable = sorted((s for s in samples if not s.flagged), key=lambda s: (s.finished_at, s.history_id), reverse=True)
    usable = usable[:policy.per_node_samples]
    return statistics.median(s.value for s in usable) if usable else None


def fleet_baseline(node_values: Mapping[str, float], policy: BaselinePolicy,
                   exclude: str | None = None) -> Baseline | None:
    """Median and scaled MAD over nodes, recomputed without the nodes that deviate; None when fewer than
    ``min_fleet_nodes`` nodes remain."""
    values = [v for node, v in node_values.items() if node != exclude]
    if len(values) < policy.min_fleet_nodes:
        return None
    median = statistics.median(values)
    mad = _mad(values, median)
    kept = [v for v in values if not _deviates(v, median, mad, policy)]
    if len(kept) < policy.min_fleet_nodes:
        return None  # no stable majority: a fleet split in two is not judged relative to itself
    median = statistics.median(kept)
    return Baseline(median=median, mad=_mad(kept, median), nodes=len(kept), values=tuple(sorted(kept)))


def own_baseline(previous: Iterable[Sample], policy: BaselinePolicy) -> tuple[float, int] | None:
    """The node's own trailing median over its previous unflagged values, and how many fed it."""
    usable = sorted((s for s in previous if not s.flagged), key=lambda s: (s.finished_at, s.history_id), reverse=True)
    usable = usable[:policy.drift_samples]
    if len(usable) < policy.drift_min_samples:
        return None
    return statistics.median(s.value for s in usable), len(usable)


def judge_metric(
    latest: Sample,
    fleet: Mapping[str, Sequence[Sample]],
    policy: BaselinePolicy,
    *,
    now: dt.datetime,
) -> dict[str, dict[str, Any]]:
    """The verdicts on ``latest`` for one metric: {kind: numbers}. ``fleet`` maps every node of the
    same GPU model (the judged one included) to its samples of that metric within the drift window;
    samples newer than ``latest`` are ignored, so judging an old attempt again gives the same answer."""
    fleet_since = now - dt.timedelta(days=policy.window_days)
    own_since = now - dt.timedelta(days=policy.drift_window_days)
    order = (latest.finished_at, latest.history_id)
    node_values = {}
    for node, samples in fleet.items():
        recent = [s for s in samples if fleet_since <= s.finished_at and (s.finished_at, s.history_id) <= order
                  and s.history_id != latest.history_id]
        value = node_value(recent, policy)
        if value is not None:
            node_values[node] = value
    out: dict[str, dict[str, Any]] = {}
    base = fleet_baseline(node_values, policy, exclude=latest.node_name)
    own = own_baseline(
        [s for s in fleet.get(latest.node_name, ()) if own_since <= s.finished_at
         and (s.finished_at, s.history_id) < order and s.history_id != latest.history_id], policy)
    numbers = {
        "fleet_median": base.median if base else None,
        "fleet_mad": base.mad if base else None,
        "fleet_nodes": base.nodes if base else None,
        "percentile": base.percentile(latest.value) if base else None,
        "own_median": own[0] if own else None,
        "own_samples": own[1] if own else None,
    }
    if base is not None and is_low(latest.value, base.median, base.mad, policy):
        out[STRAGGLER] = numbers
    if own is not None and latest.value < own[0] * (1 - policy.drift_margin):
        out[DRIFT] = numbers
    return out


def judge_attempt(
    *,
    history_id: int,
    node_name: str,
    test_name: str,
    gpu_model: str | None,
    finished_at: dt.datetime,
    metrics: Mapping[str, Any],
    fleet: Mapping[str, Mapping[str, Sequence[Sample]]],
    previous_flags: Mapping[str, frozenset[str]],
    policy: BaselinePolicy,
    now: dt.datetime | None = None,
) -> list[Verdict]:
    """Verdicts on one attempt over every judged metric of its suite.

    ``fleet``: metric -> node -> samples; ``previous_flags``: metric -> kinds flagged on the pair's
    previous executed attempt (a repeat of the same kind confirms)."""
    out = []
    for metric in JUDGED_METRICS.get(test_name, ()):
        value = _number(metrics.get(metric))
        if value is None:
            continue
        latest = Sample(history_id, node_name, finished_at, value)
        found = judge_metric(latest, fleet.get(metric, {}), policy, now=now or finished_at)
        for kind, numbers in found.items():
            out.append(Verdict(history_id=history_id, node_name=node_name, test_name=test_name, metric=metric,
                               kind=kind, value=value, gpu_model=gpu_model, **numbers,
                               confirmed=kind in previous_flags.get(metric, frozenset())))
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None
