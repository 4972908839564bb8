"""The daily report's reads: one read-only snapshot of the results database and the named queries the
report asks it (the fleet as of a moment, the day's counts, failures, per-model figures, reservations).

Every function takes the snapshot's cursor (``snapshot``), so all sections of one report read the same
state; the rows come back as typed records, the report's arithmetic and wording stay in
``cluster_doctor.reports.daily``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

import psycopg
from psycopg.rows import dict_row

from cluster_doctor.domain.peers import PEER_SUITE
from cluster_doctor.store.fleet import GPU_SECONDS
from cluster_doctor.store.timestamps import lenient_timestamps


class Connections(Protocol):
    """What the daily reads go through: connections to the results database, one at a time. A
    ``ResultStore``, or the web page's reader over the UI's connector (``web.daily_page``)."""

    def connection(self) -> contextlib.AbstractContextManager[Any]: ...


@contextlib.contextmanager
def snapshot(store: Connections) -> Iterator[Any]:
    """A cursor (rows as dicts) on one consistent, read-only REPEATABLE READ snapshot of ``store``'s
    database, rolled back at the end. A time past year 9999 reads as unknown (counted), not as a failed
    report."""
    with store.connection() as conn:
        lenient_timestamps(conn)
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        with conn.cursor(row_factory=dict_row) as cur:
            yield cur
        conn.rollback()


def _fields(cls: type, row: Mapping[str, Any]) -> dict[str, Any]:
    return {f.name: row[f.name] for f in dataclasses.fields(cls)}


# ---------------------------------------------------------------------------- the fleet as of a moment
@dataclasses.dataclass(frozen=True)
class PairAsOf:
    """One fleet pair as of a moment: its latest executed result (``status`` None when it never executed),
    its latest attempt of any status, and for a failing pair when the failure streak began and what came
    before it — the fields of ``validation_latest``, for any moment."""

    node_name: str
    test_name: str
    status: str | None
    finished_at: dt.datetime | None
    reason: str | None
    gpu_model: str | None
    incomplete: bool | None
    last_attempt_status: str | None
    last_attempt_at: dt.datetime | None
    last_attempt_reason: str | None
    status_since: dt.datetime | None
    previous_status: str | None

    def as_row(self) -> dict[str, Any]:
        """The pair as the row ``coverage.assess`` takes."""
        return dict(vars(self))


# The same semantics as validation_latest (latest executed attempt, latest attempt of any status,
# status_since, previous_status), so that a past day can be reported as it was. One index probe per
# pair: ~20,000 pairs at 5,000 nodes.
FLEET_AS_OF_SQL = """
WITH pairs AS (
    SELECT n.node_name, t.test_name
      FROM unnest(%(nodes)s::text[]) AS n(node_name) CROSS JOIN unnest(%(tests)s::text[]) AS t(test_name)
)
SELECT p.node_name, p.test_name, e.status, e.finished_at, e.reason, e.gpu_model, e.incomplete,
       a.status AS last_attempt_status, a.finished_at AS last_attempt_at, a.reason AS last_attempt_reason,
       s.status_since, s.previous_status
  FROM pairs p
  LEFT JOIN LATERAL (
        SELECT h.id, h.status, h.finished_at, h.reason, h.gpu_model,
               cluster_doctor_incomplete(h.status, h.incomplete, h.checks_not_run, h.checks) AS incomplete
          FROM validation_history h
         WHERE h.node_name = p.node_name AND h.test_name = p.test_name
           AND h.status IN ('pass', 'fail', 'error') AND h.finished_at < %(as_of)s
         ORDER BY h.finished_at DESC, h.id DESC LIMIT 1) e ON true
  LEFT JOIN LATERAL (
        SELECT h.status, h.finished_at, h.reason
          FROM validation_history h
         WHERE h.node_name = p.node_name AND h.test_name = p.test_name AND h.finished_at < %(as_of)s
         ORDER BY h.finished_at DESC, h.id DESC LIMIT 1) a ON true
  LEFT JOIN LATERAL (
        -- only for failing pairs: when the failure streak began, and what came before it
        SELECT (SELECT min(h.finished_at) FROM validation_history h
                 WHERE h.node_name = p.node_name AND h.test_name = p.test_name AND h.status = e.status
                   AND (h.finished_at, h.id) <= (e.finished_at, e.id)
                   AND (d.finished_at IS NULL OR (h.finished_at, h.id) > (d.finished_at, d.id))
               ) AS status_since,
               d.status AS previous_status
          FROM (SELECT 1) one
          LEFT JOIN LATERAL (
                SELECT h.id, h.status, h.finished_at
                  FROM validation_history h
                 WHERE h.node_name = p.node_name AND h.test_name = p.test_name
                   AND h.status IN ('pass', 'fail', 'error') AND h.status <> e.status
                   AND (h.finished_at, h.id) < (e.finished_at, e.id)
                 ORDER BY h.finished_at DESC, h.id DESC LIMIT 1) d ON true
         WHERE e.status IN ('fail', 'error')) s ON true
"""


def fleet_as_of(cur: Any, *, nodes: Sequence[str], tests: Sequence[str],
                as_of: dt.datetime) -> list[PairAsOf]:
    """Every pair of ``nodes`` × ``tests`` as it stood just before ``as_of``."""
    if not nodes:
        return []
    cur.execute(FLEET_AS_OF_SQL, {"nodes": list(nodes), "tests": list(tests), "as_of": as_of})
    return [PairAsOf(**_fields(PairAsOf, r)) for r in cur.fetchall()]


# ---------------------------------------------------------------------------- the attempts of a day
@dataclasses.dataclass(frozen=True)
class DayCount:
    """Attempts of one test and status finished in a window, and the GPU-hours they held."""

    test_name: str
    status: str
    attempts: int
    nodes: int
    gpu_hours: float
    without_gpu_count: int  # attempts with a duration but no GPU count: not in gpu_hours


DAY_COUNTS_SQL = """
SELECT test_name, status, count(*) AS attempts, count(DISTINCT node_name) AS nodes,
       coalesce(sum({gpu_seconds}), 0) / 3600.0 AS gpu_hours,
       count(*) FILTER (WHERE duration_s IS NOT NULL AND gpu_count IS NULL) AS without_gpu_count
  FROM validation_history
 WHERE finished_at >= %(start)s AND finished_at < %(end)s
 GROUP BY test_name, status
""".replace("{gpu_seconds}", GPU_SECONDS)


def day_counts(cur: Any, *, start: dt.datetime, end: dt.datetime) -> list[DayCount]:
    """Per test and status, the attempts finished in [start, end)."""
    cur.execute(DAY_COUNTS_SQL, {"start": start, "end": end})
    return [DayCount(test_name=r["test_name"], status=r["status"], attempts=int(r["attempts"]),
                     nodes=int(r["nodes"]), gpu_hours=float(r["gpu_hours"] or 0),
                     without_gpu_count=int(r["without_gpu_count"])) for r in cur.fetchall()]


@dataclasses.dataclass(frozen=True)
class FailedAttempt:
    """A fail or error attempt with its failing checks and the pair's executed result before it."""

    node_name: str
    test_name: str
    status: str
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    duration_s: float | None
    reason: str | None
    gpu_model: str | None
    log_path: str | None
    dag_id: str | None
    run_id: str | None
    map_index: int | None
    try_number: int | None
    failing_checks: list[Any]  # the stored checks whose status is fail or error, as stored (JSON)
    previous_status: str | None  # None: the pair's first executed result
    previous_finished_at: dt.datetime | None
    action: str | None = None  # the attempt's recommended action (None: recorded before it was kept)


FAILURES_SQL = """
SELECT h.node_name, h.test_name, h.status, h.started_at, h.finished_at, h.duration_s, h.reason,
       h.gpu_model, h.log_path, h.dag_id, h.run_id, h.map_index, h.try_number, h.action,
       coalesce((SELECT jsonb_agg(c) FROM jsonb_array_elements(h.checks) c
                  WHERE c->>'status' IN ('fail', 'error')), '[]'::jsonb) AS failing_checks,
       prev.status AS previous_status, prev.finished_at AS previous_finished_at
  FROM validation_history h
  LEFT JOIN LATERAL (
        SELECT p.status, p.finished_at FROM validation_history p
         WHERE p.node_name = h.node_name AND p.test_name = h.test_name
           AND p.status IN ('pass', 'fail', 'error') AND (p.finished_at, p.id) < (h.finished_at, h.id)
         ORDER BY p.finished_at DESC, p.id DESC LIMIT 1) prev ON true
 WHERE h.finished_at >= %(start)s AND h.finished_at < %(end)s AND h.status IN ('fail', 'error')
   -- a failed peer test blames neither node: its suspects are the peer line's (triangulation)
   AND h.test_name <> %(peer_suite)s
"""


def failed_attempts(cur: Any, *, start: dt.datetime, end: dt.datetime) -> list[FailedAttempt]:
    """The fail and error attempts finished in [start, end), peer tests left out (they blame neither
    node), in no particular order."""
    cur.execute(FAILURES_SQL, {"start": start, "end": end, "peer_suite": PEER_SUITE})
    return [FailedAttempt(**_fields(FailedAttempt, r)) for r in cur.fetchall()]


# ---------------------------------------------------------------------------- per GPU model
@dataclasses.dataclass(frozen=True)
class ModelCount:
    """Executed attempts of one GPU model ('' when unknown) in a window, per status."""

    gpu_model: str
    nodes: int
    attempts: int
    passed: int
    failed: int
    errored: int


MODEL_COUNTS_SQL = """
SELECT coalesce(gpu_model, '') AS gpu_model, count(DISTINCT node_name) AS nodes, count(*) AS attempts,
       count(*) FILTER (WHERE status = 'pass') AS pass, count(*) FILTER (WHERE status = 'fail') AS fail,
       count(*) FILTER (WHERE status = 'error') AS error
  FROM validation_history
 WHERE finished_at >= %(start)s AND finished_at < %(end)s AND status IN ('pass', 'fail', 'error')
 GROUP BY 1
"""


def model_counts(cur: Any, *, start: dt.datetime, end: dt.datetime) -> list[ModelCount]:
    """Per GPU model, the executed attempts finished in [start, end)."""
    cur.execute(MODEL_COUNTS_SQL, {"start": start, "end": end})
    return [ModelCount(gpu_model=r["gpu_model"], nodes=int(r["nodes"]), attempts=int(r["attempts"]),
                       passed=int(r["pass"]), failed=int(r["fail"]), errored=int(r["error"]))
            for r in cur.fetchall()]


@dataclasses.dataclass(frozen=True)
class ModelMetric:
    """One key metric of one test over a GPU model's passes: how many carried a usable value, their
    median and minimum (None when none did), and how many values were beyond float8 (left out)."""

    gpu_model: str
    test_name: str
    metric: str
    n: int
    median: float | None
    minimum: float | None
    skipped: int


# A JSON number beyond float8 (1e400) would fail the whole query on the cast: such values are left
# out of the figures and counted (skipped) instead.
MODEL_METRICS_SQL = """
SELECT coalesce(h.gpu_model, '') AS gpu_model, h.test_name, k.metric, count(v.x) AS n,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY v.x) AS median, min(v.x) AS min,
       count(*) - count(v.x) AS skipped
  FROM validation_history h
  JOIN unnest(%(k_tests)s::text[], %(k_metrics)s::text[]) AS k(test_name, metric) ON k.test_name = h.test_name
  CROSS JOIN LATERAL (SELECT CASE WHEN abs((h.metrics->k.metric)::numeric) < 1e300
                                  THEN (h.metrics->k.metric)::numeric::float8 END AS x) v
 WHERE h.finished_at >= %(start)s AND h.finished_at < %(end)s AND h.status = 'pass'
   AND jsonb_typeof(h.metrics->k.metric) = 'number'
 GROUP BY 1, 2, 3
"""


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def model_metrics(cur: Any, *, start: dt.datetime, end: dt.datetime,
                  key_pairs: Sequence[tuple[str, str]]) -> list[ModelMetric]:
    """Per GPU model, the (test, metric) ``key_pairs`` over the passes finished in [start, end)."""
    cur.execute(MODEL_METRICS_SQL, {"start": start, "end": end, "k_tests": [t for t, _ in key_pairs],
                                    "k_metrics": [m for _, m in key_pairs]})
    return [ModelMetric(gpu_model=r["gpu_model"], test_name=r["test_name"], metric=r["metric"], n=int(r["n"]),
                        median=_float(r["median"]), minimum=_float(r["min"]), skipped=int(r["skipped"] or 0))
            for r in cur.fetchall()]


# ---------------------------------------------------------------------------- reservations
@dataclasses.dataclass(frozen=True)
class ReservationsOfDay:
    """Reservations of overdue nodes in a window: taints applied, removed per reason, still open now,
    and the idle GPU-hours of those removed."""

    applied: int
    released: dict[str, int]
    open_now: int
    idle_gpu_hours: float


RESERVATIONS_SQL = """
SELECT (SELECT count(*) FROM node_reservations WHERE reserved_at >= %(start)s AND reserved_at < %(end)s) AS applied,
       (SELECT count(*) FROM node_reservations WHERE released_at IS NULL) AS open_now,
       r.release_reason, count(r.id) AS released, COALESCE(sum(r.idle_gpu_hours), 0) AS idle
  FROM (SELECT 1) one
  LEFT JOIN node_reservations r ON r.released_at >= %(start)s AND r.released_at < %(end)s
 GROUP BY r.release_reason
"""


def reservations(cur: Any, *, start: dt.datetime, end: dt.datetime) -> ReservationsOfDay:
    """The reservations applied and released in [start, end), and those open now."""
    cur.execute(RESERVATIONS_SQL, {"start": start, "end": end})
    rows = cur.fetchall()
    applied, open_now = (int(rows[0]["applied"]), int(rows[0]["open_now"])) if rows else (0, 0)
    return ReservationsOfDay(
        applied=applied, open_now=open_now,
        released={r["release_reason"]: int(r["released"]) for r in rows if r["release_reason"]},
        idle_gpu_hours=sum(float(r["idle"]) for r in rows))
