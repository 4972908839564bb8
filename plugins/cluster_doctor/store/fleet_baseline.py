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

The core (``judge_metric``) is pure Python over plain values; ``judge_recorded`` reads the window
from the results database and stores verdicts in ``validation_verdicts``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)

STRAGGLER = "straggler"
DRIFT = "drift"
KINDS = (STRAGGLER, DRIFT)
MAD_SCALE = 1.4826  # scales the MAD to a standard deviation for normally distributed values

# Performance metrics judged per suite (higher is better). gpu_health's key metrics are counts
# (GPUs visible, XID events) that the suite already judges exactly: nothing relative to say there.
JUDGED_METRICS: dict[str, tuple[str, ...]] = {
    "dl_unit": ("gemm_bf16_tflops_min", "mem_bw_gbps_min"),
    "nccl_loopback": ("nccl_busbw_gbps",),
    "storage_fio": ("fio_seq_read_mibps", "fio_seq_write_mibps", "fio_rand_read_iops", "fio_rand_write_iops"),
}


class InvalidBaselinePolicy(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class BaselinePolicy:
    enabled: bool = True
    window_days: float = 14.0  # fleet baseline: executed results of the last N days
    min_fleet_nodes: int = 10  # other nodes of the same GPU model with a value, before straggler applies
    rel_margin: float = 0.10  # straggler: below the fleet median by more than this share ...
    k_mad: float = 3.0  # ... and by more than k scaled MADs
    per_node_samples: int = 3  # a node's fleet value: median of its latest N unflagged values
    drift_margin: float = 0.10  # drift: below the node's own trailing median by more than this share
    drift_samples: int = 5  # own trailing median over the previous N unflagged values ...
    drift_min_samples: int = 3  # ... of which at least this many
    drift_window_days: float = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise InvalidBaselinePolicy(f"fleet_verdicts.enabled: expected true or false, got {self.enabled!r}")
        for name in ("window_days", "drift_window_days", "k_mad"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InvalidBaselinePolicy(f"fleet_verdicts.{name}: must be a number > 0, got {value!r}")
        for name in ("rel_margin", "drift_margin"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
                raise InvalidBaselinePolicy(f"fleet_verdicts.{name}: must be a share between 0 and 1, got {value!r}")
        for name in ("min_fleet_nodes", "per_node_samples", "drift_samples", "drift_min_samples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidBaselinePolicy(f"fleet_verdicts.{name}: must be an integer >= 1, got {value!r}")
        if self.drift_min_samples > self.drift_samples:
            raise InvalidBaselinePolicy("fleet_verdicts.drift_min_samples must not exceed drift_samples")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> BaselinePolicy:
        """From the ``fleet_verdicts`` setting (a JSON object); unknown keys are refused by name."""
        values = dict(values or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise InvalidBaselinePolicy(f"fleet_verdicts: unknown key(s) {', '.join(unknown)} "
                                        f"(known: {', '.join(sorted(known))})")
        return cls(**values)


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


# ---------------------------------------------------------------------------- database
_JUDGED_STATUSES = ("pass", "fail")  # an errored suite's numbers are not trusted


def _connect(connect: Any):
    from cluster_doctor.store import database

    return database.connector(connect)


def _attempt_ids(cur, attempts: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """History rows (id, node, test, model, finished_at, metrics) of the recorded attempts worth judging."""
    keys = [(a.get("dag_id") or "", a.get("run_id") or "", a["node_name"], a["test_name"], int(a.get("try_number", 1)))
            for a in attempts if a.get("status") in _JUDGED_STATUSES and a.get("test_name") in JUDGED_METRICS]
    if not keys:
        return []
    cur.execute(
        "SELECT h.id, h.node_name, h.test_name, h.gpu_model, h.finished_at, h.metrics "
        "  FROM validation_history h "
        "  JOIN unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::int[]) "
        "       AS k(dag_id, run_id, node_name, test_name, try_number) "
        "    ON (h.dag_id, h.run_id, h.node_name, h.test_name, h.try_number) = "
        "       (k.dag_id, k.run_id, k.node_name, k.test_name, k.try_number) "
        " WHERE h.status = ANY(%s) ORDER BY h.finished_at, h.id",
        [[k[i] for k in keys] for i in range(5)] + [list(_JUDGED_STATUSES)])
    cols = [d.name for d in cur.description]
    return [dict(zip(cols, row)) for row in cur.fetchall()]


def _json_number_first(data: bytes | str) -> Any:
    """A JSON value, parsing the common case (a bare number) with float(): ~50x cheaper than json.loads
    per value, and the same verdict input (``_number`` reads ints as floats; jsonb has no NaN)."""
    try:
        return float(data)
    except ValueError:
        return json.loads(data)


def _load_fleet(cur, test: str, gpu_model: str | None, since: dt.datetime,
                metrics: Sequence[str]) -> dict[str, dict[str, list[Sample]]]:
    """metric -> node -> samples of one suite and GPU model since ``since``, with stored flags."""
    from psycopg.types.json import set_json_loads  # here: the pure core above needs no driver

    selects = ", ".join("h.metrics -> %s" for _ in metrics)
    with cur.connection.cursor() as own:  # its own cursor: the number-first JSON loader stays here
        set_json_loads(_json_number_first, own)
        own.execute(
            f"SELECT h.id, h.node_name, h.finished_at, {selects}, "
            # NULL (no parsing at all) for the usual attempt without verdicts
            "       (SELECT jsonb_object_agg(v.metric, v.kinds) FROM "
            "          (SELECT metric, jsonb_agg(kind) AS kinds FROM validation_verdicts "
            "            WHERE history_id = h.id GROUP BY metric) v) "
            "  FROM validation_history h "
            " WHERE h.test_name = %s AND h.gpu_model IS NOT DISTINCT FROM %s AND h.status = ANY(%s) "
            "   AND h.finished_at >= %s",
            [*metrics, test, gpu_model, list(_JUDGED_STATUSES), since])
        rows = own.fetchall()
    fleet: dict[str, dict[str, list[Sample]]] = {m: defaultdict(list) for m in metrics}
    no_flags: frozenset[str] = frozenset()
    for row in rows:
        history_id, node, finished = row[0], row[1], row[2]
        flags = row[3 + len(metrics)] or {}
        for metric, raw in zip(metrics, row[3:3 + len(metrics)]):
            value = _number(raw)
            if value is not None:
                fleet[metric][node].append(Sample(history_id, node, finished, value,
                                                  frozenset(flags[metric]) if metric in flags else no_flags))
    return fleet


def fleet_bands(cur, gpu_model: str | None, tests: Iterable[str], policy: BaselinePolicy,
                *, now: dt.datetime) -> dict[tuple[str, str], dict[str, Any]]:
    """The fleet band of each judged metric of ``tests`` for one GPU model, as a straggler verdict
    would see it at ``now``: the baseline median over the kept per-node values of the window, with
    their p10 and p90 (one query per test). A metric with too few nodes has no band."""
    since = now - dt.timedelta(days=policy.window_days)
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for test in dict.fromkeys(tests):
        metrics = JUDGED_METRICS.get(test)
        if not metrics:
            continue
        for metric, per_node in _load_fleet(cur, test, gpu_model, since, metrics).items():
            values = {node: v for node, samples in per_node.items()
                      if (v := node_value([s for s in samples if s.finished_at <= now], policy)) is not None}
            base = fleet_baseline(values, policy)
            if base is not None:
                out[(test, metric)] = {"median": base.median, "p10": base.quantile(0.1), "p90": base.quantile(0.9),
                                       "nodes": base.nodes, "since": since, "gpu_model": gpu_model}
    return out


def _previous_flags(cur, history_id: int, node: str, test: str, finished_at: dt.datetime) -> dict[str, frozenset[str]]:
    """Verdict kinds per metric on the pair's executed attempt just before this one."""
    cur.execute(
        "SELECT v.metric, array_agg(v.kind) FROM validation_verdicts v WHERE v.history_id = ("
        "  SELECT id FROM validation_history WHERE node_name = %s AND test_name = %s "
        "     AND status IN ('pass', 'fail', 'error') AND (finished_at, id) < (%s, %s) "
        "   ORDER BY finished_at DESC, id DESC LIMIT 1) GROUP BY v.metric",
        (node, test, finished_at, history_id))
    return {metric: frozenset(kinds) for metric, kinds in cur.fetchall()}


_INSERT = (
    "INSERT INTO validation_verdicts (history_id, node_name, test_name, metric, kind, value, gpu_model, "
    "fleet_median, fleet_mad, fleet_nodes, percentile, own_median, own_samples, confirmed) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (history_id, metric, kind) DO UPDATE SET value = EXCLUDED.value, "
    "fleet_median = EXCLUDED.fleet_median, fleet_mad = EXCLUDED.fleet_mad, fleet_nodes = EXCLUDED.fleet_nodes, "
    "percentile = EXCLUDED.percentile, own_median = EXCLUDED.own_median, own_samples = EXCLUDED.own_samples, "
    "confirmed = EXCLUDED.confirmed, judged_at = now()"
)


def judge_recorded(connect: Any, attempts: Sequence[Mapping[str, Any]], policy: BaselinePolicy = BaselinePolicy(),
                   *, now: dt.datetime | None = None) -> list[Verdict]:
    """Judge recorded attempts (dicts with the attempt identity and status) against the stored history
    and store the verdicts, in one transaction. Idempotent: judging the same attempt again replaces its
    verdicts with the same ones."""
    if not policy.enabled or not attempts:
        return []
    conn = _connect(connect)()
    verdicts: list[Verdict] = []
    try:
        with conn.cursor() as cur:
            rows = _attempt_ids(cur, attempts)
            cache: dict[tuple[str, str | None], dict] = {}
            for row in rows:
                test, model = row["test_name"], row["gpu_model"]
                when = now or row["finished_at"]
                since = when - dt.timedelta(days=max(policy.window_days, policy.drift_window_days))
                if (test, model) not in cache:
                    cache[(test, model)] = _load_fleet(cur, test, model, since, JUDGED_METRICS[test])
                found = judge_attempt(
                    history_id=row["id"], node_name=row["node_name"], test_name=test, gpu_model=model,
                    finished_at=row["finished_at"], metrics=row["metrics"] or {}, fleet=cache[(test, model)],
                    previous_flags=_previous_flags(cur, row["id"], row["node_name"], test, row["finished_at"]),
                    policy=policy, now=when)
                cur.execute("DELETE FROM validation_verdicts WHERE history_id = %s", (row["id"],))
                for v in found:
                    cur.execute(_INSERT, (v.history_id, v.node_name, v.test_name, v.metric, v.kind, v.value,
                                          v.gpu_model, v.fleet_median, v.fleet_mad, v.fleet_nodes, v.percentile,
                                          v.own_median, v.own_samples, v.confirmed))
                    _flag(cache[(test, model)][v.metric].get(v.node_name, []), v.history_id, v.kind)
                verdicts.extend(found)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    finally:
        conn.close()
    for v in verdicts:
        (log.warning if v.confirmed else log.info)("%s", v.describe())
    return verdicts


def _flag(samples: list[Sample], history_id: int, kind: str) -> None:
    """Mark a just-judged sample as flagged, so later attempts of the same batch leave it out."""
    for i, s in enumerate(samples):
        if s.history_id == history_id:
            samples[i] = dataclasses.replace(s, flagged=s.flagged | {kind})


VERDICT_COLUMNS = ("node_name", "test_name", "metric", "kind", "value", "gpu_model", "fleet_median", "fleet_mad",
                   "fleet_nodes", "percentile", "own_median", "own_samples", "confirmed", "history_id", "judged_at")


def latest_verdicts(connect: Any, *, nodes: Iterable[str] | None = None, tests: Sequence[str] | None = None,
                    confirmed_only: bool = False) -> list[dict[str, Any]]:
    """Verdicts on the latest executed attempt of each pair (the ``validation_latest_verdicts`` view),
    for the latest view's readers: status, the fleet page, CTRF, metrics."""
    where, params = [], []
    if nodes is not None:
        where.append("node_name = ANY(%s)")
        params.append(sorted(set(nodes)))
    if tests:
        where.append("test_name = ANY(%s)")
        params.append(list(tests))
    if confirmed_only:
        where.append("confirmed")
    sql = f"SELECT {', '.join(VERDICT_COLUMNS)} FROM validation_latest_verdicts"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY node_name, test_name, metric, kind"
    conn = _connect(connect)()
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return [dict(zip(VERDICT_COLUMNS, row)) for row in cur.fetchall()]
    finally:
        conn.close()


def mark_suspects(connect: Any, latest_rows: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """The prioritizer's input (``tasks.load_latest`` rows: node, test, status, finished_at, ...) with
    every passing pair that carries a verdict on its latest executed attempt turned into a failing
    one, so the failed-retest path runs it again: that second run confirms or clears the verdict."""
    if not latest_rows:
        return []
    flagged = {(r["node_name"], r["test_name"]) for r in latest_verdicts(
        connect, nodes={r[0] for r in latest_rows}, tests=sorted({r[1] for r in latest_rows}))}
    out = []
    for row in latest_rows:
        row = list(row)
        if row[2] == "pass" and (row[0], row[1]) in flagged:
            row[2] = "fail"
        out.append(row)
    return out
