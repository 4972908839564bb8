"""Coverage, staleness and "failing": the one definition every view of the fleet uses.

The end-of-run summary (``report``), the fleet page (``fleet``/``webapp``), the daily report
(``daily``) and the Prometheus metrics (``metrics``) all feed this module the latest executed result
of each node · test pair and read its verdicts; none of them decides freshness on its own.

Definitions (shown on the fleet page and in docs/metrics.md):

- A pair (node, test) is **fresh** when its latest executed result (pass, fail or error) finished
  less than ``staleness`` before the moment of the assessment. Never-executed pairs are infinitely
  old. Timeouts, preemptions and skips never make a pair fresh.
- The **state** of a pair: ``fail`` / ``error`` when its latest executed result is one (however old:
  a failing pair is a problem until it passes again), ``pass`` when it passed and is fresh, ``stale``
  when it passed longer ago (or its time is unreadable), ``never`` when it never executed.
- The **fleet**: the GPU nodes of the inventory (``store.inventory``) — every node discovery has seen,
  a node that left counted for a grace period — whether or not anything ever ran on them.
- A node is **covered** when every enabled test is fresh on it; **coverage** is covered / fleet nodes.
- **Never validated**: no executed result on any enabled test. **Failing**: the latest executed
  result of some enabled test is fail or error.
- **Pair coverage** (the coverage SLO): fresh pairs / (fleet nodes × enabled tests). Over a period,
  the mean of daily samples (each taken at the end of a UTC day). **Worst staleness**: the age of the
  oldest pair (+inf when a pair never executed).

No Airflow imports, no connection, no SQL: callers pass rows (``assess``) or the counts the store read
(``trend_samples``, from ``store.trend``).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import enum
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from cluster_doctor.domain.status import EXECUTED, FAILING, Status

_EXECUTED = frozenset(str(s) for s in EXECUTED)
_FAILING = frozenset(str(s) for s in FAILING)


class CoverageState(enum.StrEnum):
    """The state of a node · test pair (the module doc's definition): its latest executed status when
    that failed, or passed and is fresh; else how it falls short of a fresh pass."""

    PASS = Status.PASS  # a fresh pass
    FAIL = Status.FAIL
    ERROR = Status.ERROR
    STALE = "stale"  # passed longer ago than the staleness (or its time is unreadable)
    NEVER = "never"  # never executed


STATES = tuple(CoverageState)
_FAILING_STATES = {str(s): CoverageState(s) for s in FAILING}
STATE_TITLES = {CoverageState.PASS: "fresh pass", CoverageState.FAIL: "fail", CoverageState.ERROR: "error",
                CoverageState.STALE: "stale", CoverageState.NEVER: "never validated"}
SLO_DAYS = 30


def is_fresh(status: str | None, finished_at: dt.datetime | None, fresh_after: dt.datetime) -> bool:
    """Executed and finished at or after ``fresh_after`` (an unreadable time is never fresh)."""
    return status in _EXECUTED and finished_at is not None and finished_at >= fresh_after


def pair_state(status: str | None, finished_at: dt.datetime | None, fresh_after: dt.datetime) -> CoverageState:
    """The CoverageState of a pair's latest executed status and time."""
    if status not in _EXECUTED:
        return CoverageState.NEVER
    if status in _FAILING:
        return _FAILING_STATES[status]
    return CoverageState.PASS if is_fresh(status, finished_at, fresh_after) else CoverageState.STALE


def is_failing(status: str | None) -> bool:
    return status in _FAILING


def age_s(status: str | None, finished_at: dt.datetime | None, now: dt.datetime) -> float | None:
    """Seconds since the latest executed result (never negative: a clock ahead reads as 0); None when
    the pair never executed or its time is unreadable."""
    if status not in _EXECUTED or finished_at is None:
        return None
    return max(0.0, (now - finished_at).total_seconds())


def _seconds(value: dt.datetime | float | None) -> float:
    """A time as comparable seconds (datetimes and Unix seconds alike); -inf when unknown."""
    if value is None:
        return -math.inf
    return value.timestamp() if isinstance(value, dt.datetime) else float(value)


@dataclasses.dataclass
class NodeCoverage:
    """What the fleet's node filters and figures need about one node."""

    node_name: str
    n_tests: int
    gpu_model: str | None = None
    executed_tests: int = 0
    fresh_tests: int = 0
    fresh_pass_tests: int = 0
    incomplete_tests: int = 0  # fresh passes some of whose checks could not run
    fail_tests: int = 0
    error_tests: int = 0
    last_attempt_at: dt.datetime | None = None
    # from the GPU node inventory (store.inventory): free, or why not, and since when; gone once it left
    eligibility: str | None = None
    eligibility_detail: str | None = None
    eligibility_since: dt.datetime | None = None
    gone_at: dt.datetime | None = None
    # failing by speed (domain.fail_slow: code SLOW) though every result passes: failing like any fail
    slow_failing: bool = False
    _model_key: tuple = dataclasses.field(default=(), repr=False)

    @property
    def gone(self) -> bool:
        return self.gone_at is not None

    @property
    def covered(self) -> bool:
        return self.fresh_tests >= self.n_tests

    @property
    def never(self) -> bool:
        return self.executed_tests == 0

    @property
    def failing(self) -> bool:
        return self.fail_tests + self.error_tests > 0 or self.slow_failing

    @property
    def stale(self) -> bool:
        return self.fresh_tests < self.n_tests

    @property
    def healthy(self) -> bool:
        """Every test passed, fresh, and every check of it ran: an incomplete pass is not a clean bill."""
        return self.fresh_pass_tests >= self.n_tests and not self.incomplete_tests and not self.slow_failing


# Node-level filters of the fleet page: value -> (label, predicate).
NODE_FILTERS: dict[str, tuple[str, Callable[[NodeCoverage], bool]]] = {
    "failing": ("failing (fail or error on any test, or slow: code SLOW)", lambda n: n.failing),
    "fail": ("a check failed (fail)", lambda n: n.fail_tests > 0),
    "error": ("a suite errored (error)", lambda n: n.error_tests > 0),
    "stale": ("stale (a test older than the threshold or never run)", lambda n: n.stale),
    "never": ("never validated", lambda n: n.never),
    "healthy": ("healthy (every test passed, fresh, every check run)", lambda n: n.healthy),
    "incomplete": ("passed with checks not run (incomplete)", lambda n: n.incomplete_tests > 0),
    "not_eligible": ("not eligible now (busy, cordoned, not ready, tainted …)",
                     lambda n: not n.gone and n.eligibility not in (None, "free", "unknown")),
    "gone": ("left the cluster (gone, still counted for the grace period)", lambda n: n.gone),
}


@dataclasses.dataclass
class Assessment:
    """The fleet's coverage at one moment, from the latest executed result of each pair."""

    tests: list[str]
    now: dt.datetime
    staleness: dt.timedelta
    nodes: dict[str, NodeCoverage]  # the fleet, in the caller's order
    pairs: list[dict[str, Any]]  # one per fleet node x enabled test, with state / stale / age_s

    @property
    def fresh_after(self) -> dt.datetime:
        return self.now - self.staleness

    def with_slow_failing(self, names: Iterable[str]) -> Assessment:
        """This assessment with the nodes of ``names`` failing by speed (code SLOW): they count and filter as
        failing, never as healthy; a copy, so a cached assessment is never changed."""
        slow = set(names) & set(self.nodes)
        if not slow:
            return self
        out = copy.copy(self)  # of a subclass too (the store's live assessment), its pairs shared
        out.nodes = {n: dataclasses.replace(c, slow_failing=True) if n in slow else c for n, c in self.nodes.items()}
        out._nodes_changed()
        return out

    def _nodes_changed(self) -> None:
        """A subclass that keeps figures computed from ``nodes`` forgets them here."""

    def summary(self) -> dict[str, Any]:
        nodes = self.nodes.values()
        total = len(self.nodes)
        covered = sum(1 for n in nodes if n.covered)
        n_pairs = len(self.pairs)
        fresh = sum(1 for p in self.pairs if p["fresh"])
        ages = [p["age_s"] for p in self.pairs]
        worst = (math.inf if any(a is None for a in ages) else max(ages)) if ages else None
        return {
            "gpu_nodes": total,
            "covered_nodes": covered,
            "coverage": covered / total if total else None,
            "never_validated": [n.node_name for n in nodes if n.never],
            "failing_nodes": [n.node_name for n in nodes if n.failing],
            "stale_pairs": n_pairs - fresh,
            "pairs": n_pairs,
            "fresh_pairs": fresh,
            "pair_coverage": fresh / n_pairs if n_pairs else None,
            "worst_staleness_s": worst,
            "state_counts": {s: sum(1 for p in self.pairs if p["state"] == s) for s in STATES},
        }

    def select(self, status_filter: str | None = None, names: Iterable[str] | None = None,
               gpu_model: str | None = None) -> list[NodeCoverage]:
        wanted = set(names) if names is not None else None
        predicate = NODE_FILTERS[status_filter][1] if status_filter else None
        return [n for n in self.nodes.values()
                if (wanted is None or n.node_name in wanted)
                and (predicate is None or predicate(n))
                and (gpu_model is None or n.gpu_model == gpu_model)]


def assess(
    rows: Iterable[Mapping[str, Any]],
    *,
    tests: Sequence[str],
    now: dt.datetime,
    staleness: dt.timedelta,
    nodes: Sequence[str] | None = None,
) -> Assessment:
    """Coverage of ``nodes`` (default: every node in ``rows``) over the enabled ``tests``.

    ``rows``: at most one per (node_name, test_name) with the pair's latest executed ``status`` and
    its time, as ``finished_at`` (datetime) or ``finished_ts`` (Unix seconds), None when never
    executed or unreadable; optional ``gpu_model`` and ``last_attempt_at`` (datetime or Unix seconds).
    Rows of other tests still make their node known and give it a GPU model; rows of nodes outside
    ``nodes`` are ignored. A missing pair is never executed."""
    tests = list(dict.fromkeys(tests))
    now_ts = now.timestamp()
    fresh_after_ts = now_ts - staleness.total_seconds()
    rows = rows if isinstance(rows, list) else list(rows)
    order = list(dict.fromkeys(nodes)) if nodes is not None else list(dict.fromkeys(r["node_name"] for r in rows))
    fleet = {name: NodeCoverage(name, len(tests)) for name in order}
    by_pair = _tally(rows, fleet, set(tests), fresh_after_ts)
    pairs = _pairs(fleet, tests, by_pair, now_ts, fresh_after_ts)
    return Assessment(tests=tests, now=now, staleness=staleness, nodes=fleet, pairs=pairs)


_Seen = tuple[Mapping[str, Any], str | None, float | None]  # a pair's row, executed status, time


def _tally(rows: list[Mapping[str, Any]], fleet: dict[str, NodeCoverage], enabled: set[str],
           fresh_after_ts: float) -> dict[tuple[str, str], _Seen]:
    """Count each fleet node's executed, fresh, failing ... tests into ``fleet`` (its GPU model and
    latest attempt too); returns the enabled pairs' rows with their executed status and time."""
    model_keys: dict[str, tuple[float, float]] = {}
    last_ts: dict[str, float] = {}
    by_pair: dict[tuple[str, str], _Seen] = {}
    for r in rows:  # one pass, no call per row: 20,000 rows per fleet page at 5,000 nodes
        name = r["node_name"]
        node = fleet.get(name)
        if node is None:
            continue
        status = r.get("status")
        if status not in _EXECUTED:
            status = None
        ts = r["finished_ts"] if "finished_ts" in r else _seconds_or_none(r.get("finished_at"))
        last = _seconds(r.get("last_attempt_at"))
        model = r.get("gpu_model")
        if model:
            # the node's model: that of its newest executed result, else of its newest attempt
            key = (ts if ts is not None else -math.inf, last)
            if name not in model_keys or key > model_keys[name]:
                node.gpu_model, model_keys[name] = model, key
        if last > last_ts.get(name, -math.inf):
            last_ts[name] = last
            node.last_attempt_at = r.get("last_attempt_at")
        test = r["test_name"]
        if test not in enabled:
            continue
        by_pair[(name, test)] = (r, status, ts)
        if status is None:
            continue
        node.executed_tests += 1
        if ts is not None and ts >= fresh_after_ts:
            node.fresh_tests += 1
            if status == Status.PASS:
                node.fresh_pass_tests += 1
                if r.get("incomplete"):
                    node.incomplete_tests += 1
        if status == Status.FAIL:
            node.fail_tests += 1
        elif status == Status.ERROR:
            node.error_tests += 1
    return by_pair


def _pairs(fleet: dict[str, NodeCoverage], tests: list[str], by_pair: Mapping[tuple[str, str], _Seen],
           now_ts: float, fresh_after_ts: float) -> list[dict[str, Any]]:
    """One row per fleet node × enabled test, in fleet order, with its state, freshness and age."""
    pairs = []
    append = pairs.append
    for name, node in fleet.items():
        model = node.gpu_model
        for test in tests:
            r, status, ts = by_pair.get((name, test), (None, None, None))
            fresh = status is not None and ts is not None and ts >= fresh_after_ts
            if status is None:
                state = CoverageState.NEVER
            elif status in _FAILING:
                state = _FAILING_STATES[status]
            else:
                state = CoverageState.PASS if fresh else CoverageState.STALE
            pair = dict(r) if r is not None else {"node_name": name, "test_name": test}
            pair["status"] = status
            pair["state"] = state
            pair["fresh"] = fresh
            pair["stale"] = not fresh
            pair["age_s"] = max(0.0, now_ts - ts) if status is not None and ts is not None else None
            if not pair.get("gpu_model"):
                pair["gpu_model"] = model
            append(pair)
    return pairs


def _seconds_or_none(value: dt.datetime | float | None) -> float | None:
    return None if value is None else _seconds(value)


# ---------------------------------------------------------------------------- over time
def day_ends(last: dt.datetime, days: int) -> list[dt.datetime]:
    """The ends of the ``days`` UTC days up to ``last`` (the last one is ``last`` itself)."""
    start = dt.datetime(last.year, last.month, last.day, tzinfo=dt.UTC)
    ends = [start - dt.timedelta(days=i) for i in range(days - 2, -1, -1)]
    return [e for e in ends if e < last] + [last]


def trend_samples(ends: Sequence[dt.datetime], *, nodes: int | Sequence[int], tests: int,
                  counts: Mapping[int, tuple[int, int]]) -> list[dict[str, Any]]:
    """Coverage of a fleet of ``nodes`` nodes (one number, or one per moment) over ``tests`` enabled
    tests at each moment of ``ends``, from ``counts``: {index of the moment: (covered nodes, fresh
    pairs)}, a moment left out having none (what ``store.trend.counts`` reads). A moment without a
    node has no coverage (None), not 0."""
    sizes = [nodes] * len(ends) if isinstance(nodes, int) else list(nodes)
    out = []
    for i, end in enumerate(ends):
        covered, fresh = counts.get(i, (0, 0))
        size = sizes[i]
        n_pairs = size * tests
        out.append({"as_of": end, "covered_nodes": covered, "nodes": size,
                    "coverage": covered / size if size else None,
                    "fresh_pairs": fresh, "pairs": n_pairs,
                    "pair_coverage": fresh / n_pairs if n_pairs else None})
    return out


def now_sample(assessed: Assessment) -> dict[str, Any]:
    """The current moment as a trend sample (same fields as ``trend``'s)."""
    s = assessed.summary()
    return {"as_of": assessed.now, "covered_nodes": s["covered_nodes"], "nodes": s["gpu_nodes"],
            "coverage": s["coverage"], "fresh_pairs": s["fresh_pairs"], "pairs": s["pairs"],
            "pair_coverage": s["pair_coverage"]}


def period_pair_coverage(samples: Sequence[Mapping[str, Any]]) -> float | None:
    """Share of (pair, sample) combinations that were fresh: the coverage SLO over a period."""
    pairs = sum(s["pairs"] for s in samples)
    return sum(s["fresh_pairs"] for s in samples) / pairs if pairs else None
