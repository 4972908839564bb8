"""Reservations of overdue nodes, what was done and what it cost (table ``node_reservations``).

Written only by ``cluster_doctor.kube.reservation`` (every taint applied or removed is a row opened or
closed here), read by the daily report and the metrics. Parametrized SQL on a connection factory.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable
from typing import Any

from cluster_doctor.domain.nodes import validate_node_name
from cluster_doctor.domain.reservation import idle_gpu_hours
from cluster_doctor.store import database

TABLE = "node_reservations"


@dataclasses.dataclass(frozen=True)
class Open:
    node_name: str
    gpu_count: int
    reserved_at: dt.datetime
    reserved_by: str
    last_busy_at: dt.datetime | None
    free_since: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class Totals:
    """Reservations over a window: taints applied and removed (by why), and the idle GPU-hours of those
    removed."""

    applied: int = 0
    released: dict[str, int] = dataclasses.field(default_factory=dict)
    idle_gpu_hours: float = 0.0
    open_now: int = 0


def _run(connect: Any, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
    conn = database.connector(connect)()
    try:
        with conn.cursor() as cur:
            cur.execute(sql, list(params))
            rows = cur.fetchall() if cur.description else []
        conn.commit()
        return rows
    finally:
        conn.close()


def open_reservations(connect: Any) -> dict[str, Open]:
    rows = _run(connect, f"SELECT node_name, gpu_count, reserved_at, reserved_by, last_busy_at, free_since "
                         f"FROM {TABLE} WHERE released_at IS NULL")
    return {r[0]: Open(*r) for r in rows}


def opened(connect: Any, node_name: str, *, gpu_count: int, run_id: str, at: dt.datetime) -> None:
    """A taint was applied (a node already open keeps its row: the taint was re-applied by hand)."""
    _run(connect, f"INSERT INTO {TABLE} (node_name, gpu_count, reserved_at, reserved_by, last_busy_at) "
                  "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (node_name) WHERE released_at IS NULL DO NOTHING",
         (validate_node_name(node_name), int(gpu_count), at, run_id, at))


def seen(connect: Any, node_name: str, *, busy: bool, at: dt.datetime) -> None:
    """A run saw the reserved node busy (still running its user job) or free (idle since, at the latest)."""
    if busy:
        sql = f"UPDATE {TABLE} SET last_busy_at = %s WHERE node_name = %s AND released_at IS NULL"
    else:
        sql = (f"UPDATE {TABLE} SET free_since = COALESCE(free_since, %s) "
               "WHERE node_name = %s AND released_at IS NULL")
    _run(connect, sql, (at, validate_node_name(node_name)))


def closed(connect: Any, node_name: str, *, reason: str, at: dt.datetime, free: bool) -> float:
    """The taint was removed: close the node's open row; the idle GPU-hours it cost. ``free``: the node
    had no user pod when the taint went (idle since it was first seen free, or conservatively since it
    was last seen busy); a node still busy at its maximum hold cost nothing."""
    node_name = validate_node_name(node_name)
    rows = _run(connect, f"SELECT gpu_count, last_busy_at, free_since, reserved_at FROM {TABLE} "
                         "WHERE node_name = %s AND released_at IS NULL", (node_name,))
    if not rows:
        return 0.0
    gpus, last_busy, free_since, reserved_at = rows[0]
    idle = idle_gpu_hours(gpus, (last_busy or free_since or reserved_at) if free else None, at)
    _run(connect, f"UPDATE {TABLE} SET released_at = %s, release_reason = %s, idle_gpu_hours = %s "
                  "WHERE node_name = %s AND released_at IS NULL", (at, reason, idle, node_name))
    return idle


def totals(connect: Any, since: dt.datetime, until: dt.datetime | None = None) -> Totals:
    """Taints applied and removed in [since, until), and what the removed ones cost."""
    until = until or dt.datetime.now(dt.UTC)
    applied = _run(connect, f"SELECT count(*) FROM {TABLE} WHERE reserved_at >= %s AND reserved_at < %s",
                   (since, until))[0][0]
    released = _run(connect, f"SELECT release_reason, count(*), COALESCE(sum(idle_gpu_hours), 0) FROM {TABLE} "
                             "WHERE released_at >= %s AND released_at < %s GROUP BY 1 ORDER BY 1", (since, until))
    open_now = _run(connect, f"SELECT count(*) FROM {TABLE} WHERE released_at IS NULL")[0][0]
    return Totals(applied=applied, released={r[0]: r[1] for r in released},
                  idle_gpu_hours=float(sum(r[2] for r in released)), open_now=open_now)


# Every idle GPU-hour reservations have cost so far (the metric's counter; store.fleet reads it in a scrape's snapshot).
IDLE_TOTAL_SQL = f"SELECT COALESCE(sum(idle_gpu_hours), 0) FROM {TABLE}"


def idle_total(connect: Any) -> float:
    """Every idle GPU-hour reservations have cost so far (the metric's counter)."""
    return float(_run(connect, IDLE_TOTAL_SQL)[0][0])
