"""Fleet-wide read queries for the fleet health page and the Prometheus metrics.

Everything is aggregated, filtered, sorted and paged in SQL over ``validation_latest`` (one row per
node and test), so a 5,000-node fleet costs the web page one page of nodes, not the whole table.
Parametrized SQL only; node names and ranges are validated (``cluster_doctor.nodes``) before they
reach a query. No Airflow imports: the page, the metrics exporter and the tests share this module.

Definitions (shown on the page and in docs/metrics.md):

- GPU nodes: the nodes known to the results database (a node is recorded as soon as the scheduler
  attempts any test on it).
- A pair (node, test) is fresh when its latest executed result (pass, fail or error) finished less
  than ``staleness`` ago; never-executed pairs are infinitely old.
- Coverage: share of GPU nodes whose every enabled test is fresh.
- Never validated: GPU nodes without any executed result on an enabled test.
- Failing: GPU nodes whose latest executed result of any enabled test is fail or error.
- Validation GPU-hours (7 days): sum of duration_s x gpu_count / 3600 over the attempts that
  finished in the window and held the node's GPUs (pass, fail, error, preempted).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import psycopg2.extras

from cluster_doctor import database, migrations
from cluster_doctor.attempts import EXECUTED_STATUSES, validate_test_name
from cluster_doctor.nodes import NodeRange, validate_node_name
from cluster_doctor.store import SchemaMissing

# Node-level status filters of the page: value -> label.
STATUS_FILTERS: dict[str, str] = {
    "failing": "failing (fail or error on any test)",
    "fail": "a check failed (fail)",
    "error": "a suite errored (error)",
    "stale": "stale (a test older than the threshold or never run)",
    "never": "never validated",
    "healthy": "healthy (every test passed and is fresh)",
}
# Attempts that held the node's GPUs (timeouts never started; skips never created a pod).
GPU_TIME_STATUSES = ("pass", "fail", "error", "preempted")
DEFAULT_PER_PAGE = 100
MAX_PER_PAGE = 200  # keeps a page of the matrix well under 300 KB
MAX_HISTORY = 200
STATEMENT_TIMEOUT_MS = 15_000  # a page or a scrape never holds the database longer than this

# Natural ("numeric") node order in SQL, the order hostlist.numeric_sort_key gives in Python:
# every digit run is left-padded so gpu-2 < gpu-10; COLLATE "C" compares bytes like Python does.
NATURAL_KEY = """(SELECT string_agg(CASE WHEN p[1] ~ '^[0-9]' AND length(p[1]) < 24
                                         THEN lpad(p[1], 24, '0') ELSE p[1] END, '' ORDER BY o)
                    FROM regexp_matches(node_name, '[0-9]+|[^0-9]+', 'g') WITH ORDINALITY AS m(p, o))"""

# The GPU model of a pair: its latest executed attempt's, else (never executed: timeouts only) the
# model discovery recorded with its last attempt, so never-validated nodes still filter by model.
MODEL_EXPR = """coalesce(l.gpu_model, (SELECT h.gpu_model FROM validation_history h
                                        WHERE h.node_name = l.node_name AND h.test_name = l.test_name
                                          AND h.finished_at = l.last_attempt_at AND h.gpu_model IS NOT NULL
                                        ORDER BY h.id DESC LIMIT 1))"""

# One row per known node with what the filters, the matrix and the coverage need. The FILTERs keep
# disabled suites out of every figure; %(tests)s and %(fresh_after)s are bound by the caller.
NODE_AGG_CTE = """
node_agg AS (
    SELECT node_name,
           (array_agg(model ORDER BY finished_at DESC NULLS LAST, last_attempt_at DESC)
                FILTER (WHERE model IS NOT NULL))[1]                                         AS gpu_model,
           count(*) FILTER (WHERE test_name = ANY(%(tests)s) AND status IS NOT NULL)       AS executed_tests,
           count(*) FILTER (WHERE test_name = ANY(%(tests)s) AND status IS NOT NULL
                              AND finished_at >= %(fresh_after)s)                           AS fresh_tests,
           count(*) FILTER (WHERE test_name = ANY(%(tests)s) AND status = 'pass'
                              AND finished_at >= %(fresh_after)s)                           AS fresh_pass_tests,
           count(*) FILTER (WHERE test_name = ANY(%(tests)s) AND status = 'fail')          AS fail_tests,
           count(*) FILTER (WHERE test_name = ANY(%(tests)s) AND status = 'error')         AS error_tests,
           max(last_attempt_at)                                                             AS last_attempt_at
      FROM (SELECT l.*, {model} AS model FROM validation_latest l) l
     GROUP BY node_name
)""".format(model=MODEL_EXPR)

NODE_STATUS_SQL = {
    "failing": "(fail_tests + error_tests) > 0",
    "fail": "fail_tests > 0",
    "error": "error_tests > 0",
    "stale": "fresh_tests < %(n_tests)s",
    "never": "executed_tests = 0",
    "healthy": "fresh_pass_tests >= %(n_tests)s",
}


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


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class FleetQueries:
    """Read queries over one open connection (one consistent snapshot per page or scrape)."""

    def __init__(self, conn: Any, *, tests: Sequence[str], staleness: dt.timedelta, now: dt.datetime):
        if not tests:
            raise ValueError("at least one enabled test is needed")
        self.conn = conn
        self.tests = [validate_test_name(t) for t in dict.fromkeys(tests)]  # ordered, unique
        self.staleness = staleness
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        self.now = now

    # ------------------------------------------------------------------ helpers
    @property
    def fresh_after(self) -> dt.datetime:
        return self.now - self.staleness

    def _params(self, **extra: Any) -> dict[str, Any]:
        return {"tests": self.tests, "n_tests": len(self.tests), "fresh_after": self.fresh_after, **extra}

    def _rows(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self.conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            cur.execute(sql, params)
            return [dict(r) for r in cur.fetchall()]

    # ------------------------------------------------------------------ fleet summary
    def summary(self) -> dict[str, Any]:
        """Coverage, never validated, failing nodes, validation GPU-hours of the last 7 days."""
        row = self._rows(
            f"WITH {NODE_AGG_CTE} "
            "SELECT count(*) AS gpu_nodes, "
            "       count(*) FILTER (WHERE fresh_tests >= %(n_tests)s) AS covered_nodes, "
            "       count(*) FILTER (WHERE executed_tests = 0) AS never_validated_nodes, "
            "       count(*) FILTER (WHERE fail_tests + error_tests > 0) AS failing_nodes, "
            "       coalesce(sum(%(n_tests)s - fresh_tests), 0) AS stale_pairs "
            "  FROM node_agg",
            self._params(),
        )[0]
        gpu = self.gpu_hours(days=7)
        total = int(row["gpu_nodes"])
        covered = int(row["covered_nodes"])
        return {
            "gpu_nodes": total,
            "covered_nodes": covered,
            "coverage": covered / total if total else None,
            "never_validated_nodes": int(row["never_validated_nodes"]),
            "failing_nodes": int(row["failing_nodes"]),
            "stale_pairs": int(row["stale_pairs"]),
            "gpu_hours_7d": gpu["gpu_hours"],
            "gpu_attempts_7d": gpu["attempts"],
            "attempts_without_gpu_count_7d": gpu["without_gpu_count"],
            "tests": list(self.tests),
            "staleness_s": self.staleness.total_seconds(),
            "now": self.now,
        }

    def gpu_hours(self, *, days: float = 7) -> dict[str, Any]:
        row = self._rows(
            "SELECT coalesce(sum(duration_s * gpu_count), 0) / 3600.0 AS gpu_hours, count(*) AS attempts, "
            "       count(*) FILTER (WHERE gpu_count IS NULL) AS without_gpu_count "
            "  FROM validation_history "
            " WHERE finished_at >= %s AND finished_at <= %s AND status = ANY(%s) AND duration_s IS NOT NULL",
            (self.now - dt.timedelta(days=days), self.now, list(GPU_TIME_STATUSES)),
        )[0]
        return {"gpu_hours": float(row["gpu_hours"]), "attempts": int(row["attempts"]),
                "without_gpu_count": int(row["without_gpu_count"])}

    def gpu_models(self) -> list[str]:
        rows = self._rows(
            "SELECT DISTINCT gpu_model FROM validation_latest WHERE gpu_model IS NOT NULL ORDER BY gpu_model")
        return [r["gpu_model"] for r in rows]

    # ------------------------------------------------------------------ the matrix
    def _range_names(self, node_range: NodeRange) -> list[str]:
        """The known node names a range selects. Globs are matched in Python against the distinct names
        (a few thousand) so their semantics are exactly NodeRange.matches, the CLI's and the DAG's."""
        if not node_range.has_patterns:
            return sorted(node_range.names)
        known = [r["node_name"] for r in self._rows("SELECT DISTINCT node_name FROM validation_latest")]
        return node_range.filter(known)

    def _where(self, flt: FleetFilter) -> tuple[str, dict[str, Any]]:
        clauses, params = [], {}
        if flt.node_range is not None and not flt.node_range.is_all:
            clauses.append("node_name = ANY(%(names)s)")
            params["names"] = self._range_names(flt.node_range)
        if flt.status:
            clauses.append(NODE_STATUS_SQL[flt.status])
        if flt.gpu_model:
            clauses.append("gpu_model = %(gpu_model)s")
            params["gpu_model"] = flt.gpu_model
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params

    def count_nodes(self, flt: FleetFilter = FleetFilter()) -> int:
        where, params = self._where(flt)
        return int(self._rows(f"WITH {NODE_AGG_CTE} SELECT count(*) AS n FROM node_agg{where}",
                              self._params(**params))[0]["n"])

    def nodes_page(self, flt: FleetFilter = FleetFilter(), *, page: int = 1,
                   per_page: int = DEFAULT_PER_PAGE) -> Page:
        """One page of nodes in natural order, each with its cells for the enabled tests."""
        per_page = max(1, min(int(per_page), MAX_PER_PAGE))
        where, params = self._where(flt)
        total = self.count_nodes(flt)
        pages = max(1, math.ceil(total / per_page))
        page = max(1, min(int(page), pages))  # a page past the end shows the last one
        nodes = self._rows(
            f"WITH {NODE_AGG_CTE} "
            "SELECT node_name, gpu_model, executed_tests, fresh_tests, fail_tests, error_tests, "
            "       last_attempt_at "
            f"  FROM node_agg{where} "
            f" ORDER BY {NATURAL_KEY} COLLATE \"C\", node_name COLLATE \"C\" "
            " LIMIT %(limit)s OFFSET %(offset)s",
            self._params(**params, limit=per_page, offset=(page - 1) * per_page),
        )
        cells = self._cells([n["node_name"] for n in nodes]) if nodes else {}
        for node in nodes:
            node["cells"] = {t: cells.get((node["node_name"], t)) for t in self.tests}
        return Page(nodes=nodes, total=total, page=page, per_page=per_page)

    def _cells(self, names: Sequence[str]) -> dict[tuple[str, str], dict[str, Any]]:
        rows = self._rows(
            "SELECT node_name, test_name, status, finished_at, status_since, previous_status, reason, "
            "       gpu_model, last_attempt_at, last_attempt_status, last_attempt_reason "
            "  FROM validation_latest WHERE node_name = ANY(%s) AND test_name = ANY(%s)",
            (list(names), self.tests),
        )
        out = {}
        for row in rows:
            row.update(self.freshness(row))
            out[(row["node_name"], row["test_name"])] = row
        return out

    def freshness(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """age_s (None when never executed) and stale (older than the threshold, or never executed)."""
        finished = row.get("finished_at") if row.get("status") in EXECUTED_STATUSES else None
        if finished is None:
            return {"age_s": None, "stale": True}
        age = (self.now - finished).total_seconds()
        return {"age_s": age, "stale": finished < self.fresh_after}

    # ------------------------------------------------------------------ one node
    def node(self, node_name: str) -> dict[str, Any] | None:
        """The node's latest state per test (enabled tests first, then any other recorded suite)."""
        validate_node_name(node_name)
        rows = self._rows(
            "SELECT l.node_name, l.test_name, l.status, l.started_at, l.finished_at, h.duration_s, l.metrics, "
            "       l.checks, l.reason, h.log_path, l.gpu_model, h.dag_id, h.run_id, l.history_id, "
            "       l.status_since, l.previous_status, l.last_attempt_at, l.last_attempt_status, "
            "       l.last_attempt_reason, h.map_index, h.try_number, h.pod_name, h.suite_version, "
            f"      h.gpu_count, {MODEL_EXPR} AS model "
            "  FROM validation_latest l LEFT JOIN validation_history h ON h.id = l.history_id "
            " WHERE l.node_name = %s",
            (node_name,),
        )
        if not rows:
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
        return {"node_name": node_name, "gpu_model": models[0] if models else None, "cells": cells}

    def history(self, node_name: str, test_name: str | None = None, *, limit: int = 50) -> list[dict[str, Any]]:
        """The node's last attempts, newest first (checks left out: they can be long)."""
        validate_node_name(node_name)
        sql = ("SELECT id, node_name, test_name, status, started_at, finished_at, duration_s, metrics, reason, "
               "       log_path, pod_name, gpu_model, gpu_count, suite_version, dag_id, run_id, map_index, "
               "       try_number "
               "  FROM validation_history WHERE node_name = %s")
        params: list[Any] = [node_name]
        if test_name:
            sql += " AND test_name = %s"
            params.append(validate_test_name(test_name))
        sql += " ORDER BY finished_at DESC, id DESC LIMIT %s"
        params.append(max(1, min(int(limit), MAX_HISTORY)))
        return self._rows(sql, params)

    # ------------------------------------------------------------------ metrics
    def pairs(self) -> list[dict[str, Any]]:
        """Every known node x enabled test, with the latest executed result when there is one.

        Pairs without any row (a node attempted on other tests only) come back with status None,
        so never-validated pairs are visible to alerting instead of silently absent."""
        rows = self._rows(
            f"WITH {NODE_AGG_CTE}, "
            "     tests AS (SELECT unnest(%(tests)s::text[]) AS test_name) "
            "SELECT n.node_name, t.test_name, l.status, l.finished_at, l.status_since, l.metrics, "
            "       l.last_attempt_at, coalesce(l.gpu_model, n.gpu_model) AS gpu_model "
            "  FROM node_agg n CROSS JOIN tests t "
            "  LEFT JOIN validation_latest l ON l.node_name = n.node_name AND l.test_name = t.test_name "
            " ORDER BY n.node_name, t.test_name",
            self._params(),
        )
        for row in rows:
            row.update(self.freshness(row))
        return rows


def require_schema(conn: Any, dsn: Mapping[str, Any]) -> None:
    if migrations.current_version(conn) < len(migrations.available()):
        raise SchemaMissing(
            f"the results schema at {database.describe(dsn)} is missing or old: "
            "run `python -m cluster_doctor db upgrade`"
        )


@contextlib.contextmanager
def open_fleet(
    dsn: Mapping[str, Any],
    *,
    tests: Sequence[str],
    staleness: dt.timedelta,
    now: dt.datetime | None = None,
    application_name: str = "cluster-doctor-ui",
) -> Iterator[FleetQueries]:
    """A read-only, snapshot-consistent FleetQueries on a fresh connection, closed afterwards.

    Raises database.DatabaseUnavailable (one line) when the database cannot be reached and
    SchemaMissing when it has no (current) schema."""
    conn = database.connect(dsn, application_name=application_name)
    try:
        # One snapshot for every query of a page or scrape: the summary and the matrix agree.
        conn.set_session(readonly=True, isolation_level="REPEATABLE READ")
        with conn.cursor() as cur:
            cur.execute("SET LOCAL statement_timeout = %s", (STATEMENT_TIMEOUT_MS,))
        require_schema(conn, dsn)
        yield FleetQueries(conn, tests=tests, staleness=staleness, now=now or utcnow())
    finally:
        with contextlib.suppress(Exception):
            conn.rollback()
        conn.close()


def open_for(settings: Any, dsn: Mapping[str, Any], *, now: dt.datetime | None = None,
             application_name: str = "cluster-doctor-ui") -> contextlib.AbstractContextManager[FleetQueries]:
    """open_fleet with the enabled suites and the staleness threshold of a config.Settings."""
    return open_fleet(dsn, tests=settings.tests, staleness=dt.timedelta(days=settings.staleness_days), now=now,
                      application_name=application_name)
