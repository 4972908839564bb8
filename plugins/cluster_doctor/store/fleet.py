"""Fleet-wide read queries for the fleet health page and the Prometheus metrics.

The latest state of every pair (one row per node and test: 20,000 at 5,000 nodes) and the inventory are
kept in the process and brought up to each page's or scrape's snapshot by reading what changed
(``store.fleet_state``); the verdicts (fresh, stale, covered, failing, never validated) come from
``cluster_doctor.domain.coverage``, the one definition the run summary, the daily report and the
metrics share. Filtering, natural ordering and paging then happen in Python over that assessment, and
only the page's cells are read in full.
Parametrized SQL only; node names and ranges are validated (``cluster_doctor.domain.nodes``) before they
reach a query. No Airflow imports: the page, the metrics exporter and the tests share this module.

- GPU nodes: the GPU node inventory (``store.inventory``): every node discovery has seen — attempted
  or not, with its eligibility and why — a node that left the cluster counted for the grace period
  (setting ``gone_node_grace_hours``). Every view of the fleet counts these same nodes.
- Validation GPU-hours (7 days): sum of duration_s x gpu_count / 3600 over the attempts that
  finished in the window and held the node's GPUs (pass, fail, error, preempted); whole hours from
  their sums (``validation_gpu_time``, migration 0009), the edges' attempts one by one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import hostlist
import psycopg
from psycopg.rows import dict_row

from cluster_doctor.domain import coverage, fleet_verdicts
from cluster_doctor.domain.attempts import validate_test_name
from cluster_doctor.domain.nodes import NodeRange, validate_node_name
from cluster_doctor.domain.numbers import epoch_time, finite
from cluster_doctor.domain.status import EXECUTED, Status
from cluster_doctor.domain.peers import PeerVerdict, PeerVerdictValue
from cluster_doctor.store import (baselines, database, fail_slow, fleet_state, inventory, peers, reservations, suspects,
                                  trend, verdicts)
from cluster_doctor.store.fleet_state import MODEL_EXPR
from cluster_doctor.store.history import require_schema
from cluster_doctor.store.timestamps import lenient_timestamps

# Node-level status filters of the page: value -> label.
STATUS_FILTERS: dict[str, str] = {k: label for k, (label, _) in coverage.NODE_FILTERS.items()}
# GPU-seconds of one attempt; a duration or GPU count no attempt can have (a corrupt row) is left out
# instead of overflowing the sum and failing the page, the scrape or the daily report.
GPU_SECONDS = "CASE WHEN duration_s <= 1e9 AND gpu_count <= 1e6 THEN duration_s * gpu_count END"
# Attempts that held the node's GPUs (timeouts never started; skips never created a pod).
GPU_TIME_STATUSES = (*EXECUTED, Status.PREEMPTED)
# Whole hours [first, last) from their sums, the attempts of [since, first) and [last, until] one by one.
GPU_HOURS_SQL = f"""
SELECT coalesce(sum(gpu_seconds), 0) / 3600.0 AS gpu_hours, coalesce(sum(attempts), 0) AS attempts,
       coalesce(sum(without_gpu_count), 0) AS without_gpu_count
  FROM (SELECT gpu_seconds, attempts, without_gpu_count FROM validation_gpu_time
         WHERE hour >= %(first)s AND hour < %(last)s
        UNION ALL
        SELECT {GPU_SECONDS}, 1, (gpu_count IS NULL)::int FROM validation_history
         WHERE ((finished_at >= %(since)s AND finished_at < %(first)s) OR (finished_at >= %(last)s AND finished_at <= %(until)s))
           AND status = ANY(%(statuses)s) AND duration_s IS NOT NULL) AS parts
"""
# A node's newest attempts: {tests} names its tests (each with a pair state row: every history row has one).
HISTORY_SQL = """
SELECT h.id, h.node_name, h.test_name, h.status, h.started_at, h.finished_at, h.duration_s, h.metrics, h.reason,
       h.log_path, h.pod_name, h.gpu_model, h.gpu_count, h.suite_version, h.dag_id, h.run_id, h.map_index,
       h.try_number, h.action, h.peer,
       -- rows from before migration 0004: the not-run count from their skip checks
       cluster_doctor_incomplete(h.status, h.incomplete, h.checks_not_run, h.checks) AS incomplete,
       cluster_doctor_checks_not_run(h.status, h.checks_not_run, h.checks) AS checks_not_run
  FROM ({tests}) AS t(test_name)
 CROSS JOIN LATERAL (
       SELECT * FROM validation_history
        WHERE node_name = %(node)s AND test_name = t.test_name
        ORDER BY finished_at DESC, id DESC LIMIT %(limit)s) AS h
 ORDER BY h.finished_at DESC, h.id DESC LIMIT %(limit)s
"""
DEFAULT_PER_PAGE = 100
MAX_PER_PAGE = 200  # keeps a page of the matrix well under 300 KB
MAX_HISTORY = 200
TREND_CACHE_S = 300.0
_TREND_CACHE: dict[tuple, tuple[float, list[dict[str, Any]]]] = {}
# The fleet page's snapshot (every pair's coverage state, the summary) is reused by later requests for up to
# this long while no attempt was recorded since (the history's largest id is unchanged): paging,
# filtering and several viewers then cost one page of cells, not 20,000 rows. Only the staleness
# threshold's passing can lag by this much; new results never do. 0 turns it off.
PAGE_SNAPSHOT_CACHE_S = 30.0
_SNAPSHOT_CACHE: dict[tuple, tuple[float, tuple, dt.datetime, coverage.Assessment, dict[str, Any]]] = {}
_SNAPSHOT_LOCK = threading.Lock()
# Fleet bands of the node page's plots: a 14-day statistic, the same for every node of a GPU model.
BAND_CACHE_S = 900.0
_BAND_CACHE: dict[tuple, tuple[float, dt.datetime, dict[tuple[str, str], dict[str, Any]]]] = {}
PLOT_DAYS = 90  # the node page plots a node's last PLOT_POINTS executed attempts per test within this
PLOT_POINTS = 120
STATEMENT_TIMEOUT_MS = 15_000  # a page or a scrape never holds the database longer than this

# What a cached page snapshot is checked against: a new attempt (any insert) raises max(id); the
# database's oid tells a dropped and re-created database of the same name apart. One index probe.
DATA_VERSION_SQL = """
SELECT (SELECT max(id) FROM validation_history), (SELECT oid FROM pg_database WHERE datname = current_database()),
       (SELECT max(last_seen_at) FROM gpu_node_inventory)
"""


@functools.lru_cache(maxsize=65536)  # the same few thousand names, sorted on every page and scrape
def natural_key(name: str) -> tuple:
    """gpu-2 before gpu-10 (hostlist's numeric order), ties broken by the plain name."""
    return hostlist.numeric_sort_key(name), name


class InvalidFilter(ValueError):
    """A filter value the page or the API refuses; the message is safe to show."""


@dataclasses.dataclass(frozen=True)
class FleetFilter:
    node_range: NodeRange | None = None
    status: str | None = None
    gpu_model: str | None = None

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in STATUS_FILTERS:
            raise InvalidFilter(f"unknown status filter {self.status!r} (one of: {', '.join(STATUS_FILTERS)})")
        if self.gpu_model is not None and (len(self.gpu_model) > 200 or "\x00" in self.gpu_model):
            raise InvalidFilter("GPU model filter is too long or malformed")

    @property
    def active(self) -> bool:
        return bool((self.node_range and not self.node_range.is_all) or self.status or self.gpu_model)


@dataclasses.dataclass(frozen=True)
class Page:
    nodes: list[dict[str, Any]]  # node rows, each with "cells": {test: cell or None}
    total: int  # nodes matching the filter
    page: int
    per_page: int

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.per_page))


def _hour_floor(when: dt.datetime) -> dt.datetime:
    return when.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)


def _hour_ceil(when: dt.datetime) -> dt.datetime:
    floor = _hour_floor(when)
    return floor if floor == when else floor + dt.timedelta(hours=1)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class FleetQueries:
    """Read queries over one open connection (one consistent snapshot per page or scrape)."""

    def __init__(self, conn: Any, *, tests: Sequence[str], staleness: dt.timedelta, now: dt.datetime,
                 snapshot_cache_s: float = 0.0, gone_grace: dt.timedelta = dt.timedelta(hours=24),
                 peer_window: dt.timedelta | None = None, slow_window: dt.timedelta = fail_slow.SLOW_WINDOW,
                 slow_spacing: dt.timedelta = fail_slow.SLOW_SPACING):
        if not tests:
            raise ValueError("at least one enabled test is needed")
        self.conn = conn
        self.tests = [validate_test_name(t) for t in dict.fromkeys(tests)]  # ordered, unique
        self.staleness = staleness
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        self.now = now
        self.gone_grace = gone_grace
        self._inventory: dict[str, inventory.InventoryNode] | None = None
        self._counted: Callable[[], dict[str, inventory.InventoryNode]] | None = None
        self._assessment: coverage.Assessment | None = None
        self._summary: dict[str, Any] | None = None
        # peer tests: how far back their evidence reaches; None: peer tests are off
        self.peer_window = peer_window
        self._peers: dict[str, PeerVerdict] | None = None
        # fail-slow: how far back a speed signal counts and how far apart two sightings must be (settings)
        self.slow_window, self.slow_spacing = slow_window, slow_spacing
        self._slow: dict[tuple, dict[str, Any]] = {}
        self.snapshot_cache_s = snapshot_cache_s
        self._cache_key: tuple | None = None
        self._version: tuple | None = None
        if snapshot_cache_s > 0:
            self._reuse_snapshot()

    # ------------------------------------------------------------------ helpers
    @property
    def fresh_after(self) -> dt.datetime:
        return self.now - self.staleness

    def _rows(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(sql, params)
            return [dict(r) for r in cur.fetchall()]

    def figure_keys(self) -> list[str]:
        """The key metrics of the enabled suites (catalog order, unique)."""
        return fleet_state.figure_keys(self.tests)

    # ------------------------------------------------------------------ the snapshot
    def _reuse_snapshot(self) -> None:
        """Take the assessment and summary of a recent request over the same data, if there is one."""
        with self.conn.cursor() as cur:
            cur.execute(DATA_VERSION_SQL)
            self._version = tuple(cur.fetchone())
        self._cache_key = (self.conn.info.dsn, tuple(self.tests), self.staleness, self.gone_grace)
        with _SNAPSHOT_LOCK:
            hit = _SNAPSHOT_CACHE.get(self._cache_key)
        if (hit is not None and hit[1] == self._version and time.monotonic() - hit[0] <= self.snapshot_cache_s
                and abs((self.now - hit[2]).total_seconds()) <= self.snapshot_cache_s):
            self._assessment, self._summary = hit[3], hit[4]

    def _keep_snapshot(self) -> None:
        if self._cache_key is None or self._assessment is None or self._summary is None:
            return
        with _SNAPSHOT_LOCK:
            _SNAPSHOT_CACHE.clear()  # one fleet per process in practice: keep the newest only
            _SNAPSHOT_CACHE[self._cache_key] = (time.monotonic(), self._version, self.now, self._assessment,
                                                self._summary)

    def assessment(self, *, figures: bool = False) -> coverage.Assessment:
        """Every counted node's coverage, computed once per page or scrape from the process's copy of the
        fleet (``store.fleet_state``: brought up to this snapshot by reading what changed). Its pairs
        carry the key metrics of each pair (a ``metrics`` dict of finite numbers), the status's start,
        the action and the not-run count, for the exporter; ``figures`` is kept for callers."""
        if self._assessment is None:
            assessed, self._counted = self._live()
            self._assessment = assessed.with_slow_failing(self._slow_failing())
        return self._assessment

    def _slow_failing(self) -> list[str]:
        """The nodes failing by speed (code SLOW, charged to the probe's suite, as quarantine charges it):
        failing wherever failing nodes are counted or filtered, though their results pass."""
        if fail_slow.PROBE_TEST not in self.tests:
            return []
        return [n for n, s in self.slow_nodes().items() if s.failing]

    def _live(self) -> tuple[coverage.Assessment, Callable[[], dict[str, inventory.InventoryNode]]]:
        key = fleet_state.FleetKey(self.conn.info.dsn, tuple(self.tests), self.staleness, self.gone_grace)
        return fleet_state.assessment(self.conn, key, self.now, natural_key)

    def inventory(self) -> dict[str, inventory.InventoryNode]:
        """The fleet: the inventory's nodes counted now (present, or gone within the grace period)."""
        if self._inventory is None:
            if self._counted is None:  # the assessment came from a recent page's snapshot
                self._counted = self._live()[1]
            self._inventory = self._counted()
        return self._inventory

    # ------------------------------------------------------------------ fleet summary
    def summary(self, *, slo_days: int = coverage.SLO_DAYS) -> dict[str, Any]:
        """Coverage, never validated, failing nodes, the coverage SLO, validation GPU-hours (7 days)."""
        if self._summary is not None and slo_days == coverage.SLO_DAYS:
            return self._summary
        result = self._compute_summary(slo_days)
        if slo_days == coverage.SLO_DAYS:
            self._summary = result
            self._keep_snapshot()
        return result

    def _compute_summary(self, slo_days: int) -> dict[str, Any]:
        assessed = self.assessment()
        s = assessed.summary()
        gpu = self.gpu_hours(days=7)
        samples = self.coverage_trend(days=slo_days) if slo_days else []
        by_state: dict[str, int] = {}
        for node in assessed.nodes.values():
            state = inventory.GONE if node.gone else (node.eligibility or inventory.UNKNOWN)
            by_state[state] = by_state.get(state, 0) + 1
        return {
            "gpu_nodes": s["gpu_nodes"],
            "nodes_by_eligibility": dict(sorted(by_state.items())),
            "gone_nodes": by_state.get(inventory.GONE, 0),
            "not_eligible_nodes": sum(n for state, n in by_state.items()
                                      if state not in (inventory.FREE, inventory.UNKNOWN, inventory.GONE)),
            "gone_grace_s": self.gone_grace.total_seconds(),
            "covered_nodes": s["covered_nodes"],
            "coverage": s["coverage"],
            "never_validated_nodes": len(s["never_validated"]),
            "failing_nodes": len(s["failing_nodes"]),
            "stale_pairs": s["stale_pairs"],
            "pairs": s["pairs"],
            "fresh_pairs": s["fresh_pairs"],
            "pair_coverage": s["pair_coverage"],
            "pair_coverage_30d": coverage.period_pair_coverage(samples),
            # the days of the period with data: fewer when the fleet was first seen inside it
            "slo_days_with_data": sum(bool(sample["pairs"]) for sample in samples),
            "worst_staleness_s": s["worst_staleness_s"],
            "coverage_trend": samples,
            "gpu_hours_7d": gpu["gpu_hours"],
            "gpu_attempts_7d": gpu["attempts"],
            "attempts_without_gpu_count_7d": gpu["without_gpu_count"],
            "tests": list(self.tests),
            "staleness_s": self.staleness.total_seconds(),
            "now": self.now,
        }

    def coverage_trend(self, *, days: int = coverage.SLO_DAYS) -> list[dict[str, Any]]:
        """Daily samples of the current fleet's coverage over the last ``days`` UTC days, the last one
        now. The samples of past days are kept for TREND_CACHE_S (they change only when old results
        arrive late); the current one always comes from this snapshot."""
        assessed = self.assessment()
        past = coverage.day_ends(self.now, days)[:-1]
        nodes = list(assessed.nodes)
        key = (self.conn.info.dsn, tuple(past), hash(tuple(nodes)), tuple(self.tests), self.staleness)
        hit = _TREND_CACHE.get(key)
        if hit is None or time.monotonic() - hit[0] > TREND_CACHE_S:
            with self.conn.cursor() as cur:
                samples = trend.coverage_trend(cur, ends=past, nodes=nodes, tests=self.tests,
                                               staleness=self.staleness, from_first_seen=True)
            _TREND_CACHE.clear()  # one fleet per process in practice: keep the newest only
            _TREND_CACHE[key] = hit = (time.monotonic(), samples)
        return [*hit[1], coverage.now_sample(assessed)]

    def gpu_hours(self, *, days: float = 7) -> dict[str, Any]:
        """Validation GPU-hours of the ``days`` up to now: the whole hours inside the window from their
        sums (migration 0009's validation_gpu_time), the attempts of the partial hours at its edges."""
        since, until = self.now - dt.timedelta(days=days), self.now
        first, last = _hour_ceil(since), _hour_floor(until)
        if first >= last:  # no whole hour inside: every attempt of the window
            first = last = since
        row = self._rows(GPU_HOURS_SQL, {"first": first, "last": last, "since": since, "until": until,
                                         "statuses": list(GPU_TIME_STATUSES)})[0]
        return {"gpu_hours": finite(row["gpu_hours"], "gpu_hours") or 0.0, "attempts": int(row["attempts"]),
                "without_gpu_count": int(row["without_gpu_count"])}

    def reservation_idle_gpu_hours(self) -> float:
        """Every idle GPU-hour reservations have cost so far, in this snapshot (the metric's counter)."""
        with self.conn.cursor() as cur:
            cur.execute(reservations.IDLE_TOTAL_SQL)
            return float(cur.fetchone()[0])

    def suspects(self, nodes: Sequence[str] | None = None) -> dict[str, Any]:
        """The suspect nodes (a signal said they may be broken, their bundle has not answered
        yet), each a ``domain.signals.Suspect`` ("suspect since T: evidence"); of ``nodes``, or all."""
        with self.conn.cursor() as cur:
            return suspects.current(cur, self.tests, nodes)

    def slow_nodes(self, nodes: Sequence[str] | None = None, *, window: dt.timedelta | None = None,
                   spacing: dt.timedelta | None = None) -> dict[str, Any]:
        """The nodes suspect or failing for speed (``store.fail_slow.SlowNode``: its flagged probe verdicts,
        speed signals and bundle verdicts); of ``nodes``, or all; by default with this query's window and
        spacing. Read once per query and arguments: the assessment and the page's slow card read the same."""
        window = self.slow_window if window is None else window
        spacing = self.slow_spacing if spacing is None else spacing
        key = (tuple(nodes) if nodes is not None else None, window, spacing)
        if key not in self._slow:
            with self.conn.cursor() as cur:
                self._slow[key] = fail_slow.slow_nodes(cur, now=self.now, window=window, spacing=spacing,
                                                       nodes=nodes)
        return self._slow[key]

    def failing_since(self, nodes: Sequence[str] | None = None) -> dict[str, Any]:
        """Since when each failing node fails (``domain.signals.FailingSince``: its first failing evidence,
        signal or attempt, after its last pass, and that pass); of ``nodes``, or all."""
        with self.conn.cursor() as cur:
            return suspects.failing_since(cur, self.tests, nodes)

    def missing_baselines(self) -> list[Any]:
        """The node pools whose results could not be judged for want of a baseline, once each
        (``domain.baselines.MissingBaseline``), not as one error per node."""
        with self.conn.cursor() as cur:
            return baselines.missing(cur, self.tests)

    def gpu_models(self) -> list[str]:
        assessed = self.assessment()
        pairs = assessed.pairs_as_kept() if hasattr(assessed, "pairs_as_kept") else assessed.pairs  # no age read
        return sorted({n.gpu_model for n in assessed.nodes.values() if n.gpu_model}
                      | {p["gpu_model"] for p in pairs if p.get("gpu_model")})

    # ------------------------------------------------------------------ the matrix
    def _range_names(self, node_range: NodeRange) -> list[str]:
        """The known node names a range selects, with exactly NodeRange.matches' semantics (the CLI's
        and the DAG's)."""
        known = list(self.assessment().nodes)
        if not node_range.has_patterns:
            return [n for n in node_range.names if n in self.assessment().nodes]
        return node_range.filter(known)

    def select(self, flt: FleetFilter = FleetFilter()) -> list[coverage.NodeCoverage]:
        names = None
        if flt.node_range is not None and not flt.node_range.is_all:
            names = self._range_names(flt.node_range)
        return self.assessment().select(flt.status, names, flt.gpu_model)

    def count_nodes(self, flt: FleetFilter = FleetFilter()) -> int:
        return len(self.select(flt))

    def nodes_page(self, flt: FleetFilter = FleetFilter(), *, page: int = 1,
                   per_page: int = DEFAULT_PER_PAGE) -> Page:
        """One page of nodes in natural order, each with its cells for the enabled tests."""
        per_page = max(1, min(int(per_page), MAX_PER_PAGE))
        selected = self.select(flt)
        total = len(selected)
        pages = max(1, math.ceil(total / per_page))
        page = max(1, min(int(page), pages))  # a page past the end shows the last one
        chosen = selected[(page - 1) * per_page: page * per_page]
        nodes = [{"node_name": n.node_name, "gpu_model": n.gpu_model, "executed_tests": n.executed_tests,
                  "fresh_tests": n.fresh_tests, "fail_tests": n.fail_tests, "error_tests": n.error_tests,
                  "last_attempt_at": epoch_time(n.last_attempt_at), "eligibility": n.eligibility,
                  "eligibility_detail": n.eligibility_detail, "eligibility_since": n.eligibility_since,
                  "gone_at": n.gone_at} for n in chosen]
        cells = self._cells([n["node_name"] for n in nodes]) if nodes else {}
        for node in nodes:
            node["cells"] = {t: cells.get((node["node_name"], t)) for t in self.tests}
        return Page(nodes=nodes, total=total, page=page, per_page=per_page)

    def _cells(self, names: Sequence[str]) -> dict[tuple[str, str], dict[str, Any]]:
        # times as Unix seconds, made datetimes here: a timestamptz decodes ~5x slower (1,600 on a page)
        rows = self._rows(
            "SELECT node_name, test_name, status, extract(epoch FROM finished_at)::float8 AS finished_at, "
            "       extract(epoch FROM status_since)::float8 AS status_since, previous_status, reason, gpu_model, "
            "       extract(epoch FROM last_attempt_at)::float8 AS last_attempt_at, last_attempt_status, "
            "       last_attempt_reason, action, incomplete, checks_not_run "
            "  FROM validation_latest WHERE node_name = ANY(%s) AND test_name = ANY(%s)",
            (list(names), self.tests),
        )
        out = {}
        for row in rows:
            for column in ("finished_at", "status_since", "last_attempt_at"):
                row[column] = fleet_state.when(row[column])
            row.update(self.freshness(row))
            out[(row["node_name"], row["test_name"])] = row
        return out

    def freshness(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """age_s (None when never executed), stale (older than the threshold, or never executed) and
        the time the current status has held (status_age_s)."""
        status, finished = row.get("status"), row.get("finished_at")
        since = row.get("status_since") if status in EXECUTED else None
        return {"age_s": coverage.age_s(status, finished, self.now),
                "stale": not coverage.is_fresh(status, finished, self.fresh_after),
                "status_age_s": max(0.0, (self.now - since).total_seconds()) if since else None}

    # ------------------------------------------------------------------ peer tests
    @property
    def peer_tests(self) -> bool:
        return self.peer_window is not None

    def peer_verdicts(self) -> dict[str, PeerVerdict]:
        """Every peer-tested node's verdict (pass, fail, suspect: ``domain.peers.triangulate``) from the
        evidence window; empty when peer tests are off."""
        if self._peers is None:
            self._peers = {}
            if self.peer_window is not None:
                with self.conn.cursor() as cur:
                    self._peers = peers.triangulate(peers.peer_results(cur, since=self.now - self.peer_window),
                                                    model_sizes=peers.model_sizes(cur))
        return self._peers

    def peer_counts(self) -> dict[str, int]:
        """Peer-tested nodes by verdict (pass, fail, suspect), every verdict present."""
        counts = dict.fromkeys(PeerVerdictValue, 0)
        for v in self.peer_verdicts().values():
            counts[v.verdict] += 1
        return counts

    # ------------------------------------------------------------------ one node
    def node(self, node_name: str) -> dict[str, Any] | None:
        """The node's latest state per test (enabled tests first, then any other recorded suite)."""
        validate_node_name(node_name)
        rows = self._rows(
            "SELECT l.node_name, l.test_name, l.status, l.started_at, l.finished_at, h.duration_s, l.metrics, "
            "       l.checks, l.reason, h.log_path, l.gpu_model, h.dag_id, h.run_id, l.history_id, "
            "       l.status_since, l.previous_status, l.last_attempt_at, l.last_attempt_status, "
            "       l.last_attempt_reason, h.map_index, h.try_number, h.pod_name, h.suite_version, "
            f"      h.gpu_count, {MODEL_EXPR} AS model, l.action, l.incomplete, l.checks_not_run "
            "  FROM validation_latest l LEFT JOIN validation_history h ON h.id = l.history_id "
            " WHERE l.node_name = %s",
            (node_name,),
        )
        with self.conn.cursor() as cur:
            known = inventory.read(cur, [node_name]).get(node_name)
        if not rows and known is None:
            return None
        by_test = {r["test_name"]: r for r in rows}
        order = list(self.tests) + sorted(set(by_test) - set(self.tests))
        cells = []
        for test in order:
            row = by_test.get(test) or {"node_name": node_name, "test_name": test, "status": None}
            row.update(self.freshness(row))
            row["enabled"] = test in self.tests
            cells.append(row)
        # executed results first (newest first), then the never-executed pairs' attempts
        newest_first = sorted(
            rows, key=lambda r: (r["finished_at"] is not None, r["finished_at"] or r["last_attempt_at"]), reverse=True)
        models = [r["model"] for r in newest_first if r.get("model")]
        return {"node_name": node_name, "gpu_model": models[0] if models else (known.gpu_model if known else None),
                "cells": cells, "inventory": known.to_dict() if known else None}

    def history(self, node_name: str, test_name: str | None = None, *, limit: int = 50) -> list[dict[str, Any]]:
        """The node's last attempts, newest first (checks left out: they can be long): the newest ``limit``
        of each of its tests (or of ``test_name``) from the per-pair index, then the newest of those; one
        index walk per test however long the history (a year of hourly sweeps is 8,760 rows per test)."""
        validate_node_name(node_name)
        tests = "SELECT %(test)s::text" if test_name else \
            "SELECT test_name FROM validation_pair_state WHERE node_name = %(node)s"
        return self._rows(HISTORY_SQL.format(tests=tests), {
            "node": node_name, "test": validate_test_name(test_name) if test_name else None,
            "limit": max(1, min(int(limit), MAX_HISTORY))})

    # ------------------------------------------------------------------ plots of one node
    def metric_series(self, node_name: str, tests: Sequence[str], *, days: float = PLOT_DAYS,
                      per_test: int = PLOT_POINTS, metrics: Mapping[str, Sequence[str]] | None = None,
                      ) -> dict[tuple[str, str], list[dict[str, Any]]]:
        """(test, metric) -> the node's executed attempts of that test, oldest first, as plot points
        ``{"at", "status", "value"}`` (value None when the attempt lacks the metric as a finite JSON
        number), for the ``metrics`` of each of ``tests`` (default: the judged ones): the last
        ``per_test`` attempts per test within ``days``, one query over the history's per-pair index."""
        validate_node_name(node_name)
        wanted_of = fleet_verdicts.JUDGED_METRICS if metrics is None else metrics
        tests = [validate_test_name(t) for t in dict.fromkeys(tests) if t in wanted_of]
        if not tests:
            return {}
        keys = list(dict.fromkeys(k for t in tests for k in wanted_of[t]))
        # JSON numbers only, as the verdicts read them: a value stored as text is no measurement
        columns = "".join(f", CASE WHEN jsonb_typeof(h.metrics->%(k{i})s) = 'number' THEN h.metrics->>%(k{i})s END"
                          for i in range(len(keys)))
        with self.conn.cursor() as cur:
            cur.execute(
                # times as Unix seconds, made datetimes below (a timestamptz decodes ~5x slower)
                f"SELECT t.test_name, h.status, extract(epoch FROM h.finished_at)::float8{columns} "
                "  FROM unnest(%(tests)s::text[]) AS t(test_name) "
                " CROSS JOIN LATERAL ("
                "   SELECT id, status, finished_at, metrics FROM validation_history "
                "    WHERE node_name = %(node)s AND test_name = t.test_name AND status = ANY(%(executed)s) "
                "      AND finished_at >= %(since)s AND finished_at <= %(now)s "
                "    ORDER BY finished_at DESC, id DESC LIMIT %(limit)s) h "
                " ORDER BY h.finished_at, h.id",
                {"tests": tests, "node": node_name, "executed": list(EXECUTED), "limit": max(1, int(per_test)),
                 "since": self.now - dt.timedelta(days=days), "now": self.now,
                 **{f"k{i}": k for i, k in enumerate(keys)}})
            raw = cur.fetchall()
        out: dict[tuple[str, str], list[dict[str, Any]]] = {(t, m): [] for t in tests for m in wanted_of[t]}
        for test, status, finished_ts, *values in raw:
            finished = fleet_state.when(finished_ts)
            wanted = wanted_of[test]
            for key, text in zip(keys, values, strict=True):
                if key in wanted:
                    out[(test, key)].append({"at": finished, "status": status,
                                             "value": finite(text) if text is not None else None})
        return out

    def fleet_bands(self, gpu_model: str | None, tests: Sequence[str],
                    policy: fleet_verdicts.BaselinePolicy) -> dict[tuple[str, str], dict[str, Any]]:
        """The fleet band (median, p10, p90 of the straggler baseline) of each judged metric of ``tests``
        for one GPU model; kept BAND_CACHE_S (a 14-day statistic: every node page of the model shares it)."""
        tests = [validate_test_name(t) for t in dict.fromkeys(tests)]
        key = (self.conn.info.dsn, gpu_model, tuple(tests), policy)
        hit = _BAND_CACHE.get(key)
        if (hit is not None and time.monotonic() - hit[0] <= BAND_CACHE_S
                and abs((self.now - hit[1]).total_seconds()) <= BAND_CACHE_S):
            return hit[2]
        with self.conn.cursor() as cur:
            bands = verdicts.fleet_bands(cur, gpu_model, tests, policy, now=self.now)
        if len(_BAND_CACHE) > 64:  # a handful of GPU models in practice
            _BAND_CACHE.clear()
        _BAND_CACHE[key] = (time.monotonic(), self.now, bands)
        return bands

    # ------------------------------------------------------------------ metrics
    def pairs(self) -> list[dict[str, Any]]:
        """Every known node x enabled test with its latest executed result and key figures.

        Pairs without any row (a node attempted on other tests only) come back with status None,
        so never-validated pairs are visible to alerting instead of silently absent."""
        return self.assessment(figures=True).pairs


@contextlib.contextmanager
def open_fleet(
    connect: database.Connector | Mapping[str, Any] | str,
    *,
    tests: Sequence[str],
    staleness: dt.timedelta,
    now: dt.datetime | None = None,
    application_name: str = "cluster-doctor-ui",
    snapshot_cache_s: float = 0.0,
    gone_grace: dt.timedelta = dt.timedelta(hours=24),
    peer_window: dt.timedelta | None = None,
    slow_window: dt.timedelta = fail_slow.SLOW_WINDOW,
    slow_spacing: dt.timedelta = fail_slow.SLOW_SPACING,
) -> Iterator[FleetQueries]:
    """A read-only, snapshot-consistent FleetQueries on a fresh connection, closed afterwards.
    ``snapshot_cache_s`` > 0 lets it reuse a recent request's fleet snapshot (PAGE_SNAPSHOT_CACHE_S).

    Raises database.DatabaseUnavailable (one line) when the database cannot be reached and
    SchemaMissing when it has no (current) schema."""
    connect = database.connector(connect)
    conn = connect(application_name=application_name)
    try:
        lenient_timestamps(conn)
        # One snapshot for every query of a page or scrape: the summary and the matrix agree.
        conn.read_only = True
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with conn.cursor() as cur:
            # short queries over many rows: JIT compilation costs more than it saves here
            cur.execute("SELECT set_config('statement_timeout', %s, true), set_config('jit', 'off', true)",
                        (str(STATEMENT_TIMEOUT_MS),))
        require_schema(conn, str(connect))
        yield FleetQueries(conn, tests=tests, staleness=staleness, now=now or utcnow(),
                           snapshot_cache_s=snapshot_cache_s, gone_grace=gone_grace, peer_window=peer_window,
                           slow_window=slow_window, slow_spacing=slow_spacing)
    finally:
        with contextlib.suppress(Exception):
            conn.rollback()
        conn.close()


def open_for(settings: Any, connect: database.Connector | Mapping[str, Any] | str, *, now: dt.datetime | None = None,
             application_name: str = "cluster-doctor-ui",
             snapshot_cache_s: float = 0.0) -> contextlib.AbstractContextManager[FleetQueries]:
    """open_fleet with the enabled suites, the staleness threshold and the gone nodes' grace period of a
    config.Settings (and, with ``peer_tests`` on, the peer tests' evidence window; the fail-slow window and
    confirmation spacing)."""
    return open_fleet(connect, tests=settings.tests, staleness=dt.timedelta(days=settings.staleness_days), now=now,
                      application_name=application_name, snapshot_cache_s=snapshot_cache_s,
                      gone_grace=inventory.grace(settings), peer_window=peer_window(settings),
                      **slow_settings(settings))


def slow_settings(settings: Any) -> dict[str, dt.timedelta]:
    """The fail-slow window and confirmation spacing of a config.Settings, as open_fleet takes them."""
    return {"slow_window": dt.timedelta(hours=settings.slow_signal_window_hours),
            "slow_spacing": dt.timedelta(hours=settings.slow_confirm_spacing_hours)}


def peer_window(settings: Any) -> dt.timedelta | None:
    """How far back peer-test evidence counts (``store.peers.EVIDENCE_CADENCES`` cadences); None when
    ``peer_tests`` is off."""
    if not getattr(settings, "peer_tests", False):
        return None
    return dt.timedelta(days=peers.EVIDENCE_CADENCES * float(settings.peer_cadence_days))
