"""A node's life: the transitions kept in ``node_transitions`` (migration 0012) — quarantined,
repaired, accepted, released, repeat_offender — each with its time and cause.

``record`` writes them (the quarantine task; the acceptance gate writes ``accepted``); the migration's trigger
on the inventory writes ``repaired`` itself when a node carrying the quarantine label comes back with a new
boot id (and makes it suspect, so its whole bundle runs at once). The readers take an open cursor (the
caller's snapshot): a node's timeline, the repeat offenders now, the nodes in quarantine by our records,
what a day counted, how long quarantines lasted.

Parametrized SQL only; node names are validated before they reach a query.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from typing import Any

from cluster_doctor.domain.nodes import validate_node_name
from cluster_doctor.domain.transitions import (
    QUARANTINED,
    RELEASED,
    REPEAT_OFFENDER,
    RepeatOffender,
    Transition,
)
from cluster_doctor.store import database

TABLE = "node_transitions"
RECORD_SQL = f"""
INSERT INTO {TABLE} (node_name, kind, at, cause, detail, run_id)
SELECT * FROM unnest(%(nodes)s::text[], %(kinds)s::text[], %(at)s::timestamptz[], %(causes)s::text[],
                     %(details)s::jsonb[], %(runs)s::text[])
"""
COLUMNS = "node_name, kind, at, cause, detail, run_id"
NODE_SQL = f"""
SELECT {COLUMNS} FROM {TABLE} WHERE node_name = ANY(%(nodes)s) AND at >= %(since)s ORDER BY at, id
"""
TIMELINE_SQL = f"""
SELECT {COLUMNS} FROM (SELECT {COLUMNS}, id FROM {TABLE} WHERE node_name = %(node)s
                        ORDER BY at DESC, id DESC LIMIT %(limit)s) t
 ORDER BY at, id
"""
# The latest of a kind pair per node (repeat_offender vs released; quarantined vs released): one short walk
# back per node on the (node_name, at) index.
LATEST_OF_SQL = f"""
SELECT DISTINCT ON (node_name) {COLUMNS} FROM {TABLE}
 WHERE kind = ANY(%(kinds)s) AND at <= %(as_of)s {{nodes}}
 ORDER BY node_name, at DESC, id DESC
"""
COUNTS_SQL = f"SELECT kind, count(*) FROM {TABLE} WHERE at >= %(start)s AND at < %(end)s GROUP BY kind"
TOTALS_SQL = f"SELECT kind, count(*) FROM {TABLE} GROUP BY kind"
IN_WINDOW_SQL = f"""
SELECT {COLUMNS} FROM {TABLE} WHERE at >= %(start)s AND at < %(end)s ORDER BY at, id
"""
# Every transition of the nodes released since a moment: their quarantines' starts may be older.
RELEASED_NODES_SQL = f"""
SELECT {COLUMNS} FROM {TABLE}
 WHERE node_name IN (SELECT node_name FROM {TABLE} WHERE kind = '{RELEASED}' AND at >= %(since)s)
 ORDER BY at, id
"""


def _transition(row: Sequence[Any] | dict) -> Transition:
    values = tuple(row.values()) if isinstance(row, dict) else tuple(row)
    node, kind, at, cause, detail, run_id = values
    if isinstance(detail, str):
        detail = json.loads(detail)
    return Transition(node, kind, at, cause, detail or {}, run_id)


def record(connect: Any, transitions: Sequence[Transition]) -> int:
    """Write ``transitions`` (one statement, one transaction); how many."""
    if not transitions:
        return 0
    rows = [(validate_node_name(t.node_name), t.kind, t.at, t.cause, json.dumps(dict(t.detail), default=str),
             t.run_id) for t in transitions]
    params = {name: [r[i] for r in rows] for i, name in enumerate(("nodes", "kinds", "at", "causes", "details",
                                                                     "runs"))}
    with database.connector(connect)() as conn, conn.cursor() as cur:
        cur.execute(RECORD_SQL, params)
        conn.commit()
    return len(rows)


def of_nodes(cur: Any, nodes: Iterable[str], *, since: dt.datetime) -> dict[str, list[Transition]]:
    """node → its transitions at or after ``since``, oldest first."""
    names = sorted({validate_node_name(n) for n in nodes})
    out: dict[str, list[Transition]] = {n: [] for n in names}
    if not names:
        return out
    cur.execute(NODE_SQL, {"nodes": names, "since": since})
    for row in cur.fetchall():
        t = _transition(row)
        out[t.node_name].append(t)
    return out


def timeline(cur: Any, node: str, *, limit: int = 200) -> list[Transition]:
    """The node's latest ``limit`` transitions, oldest first: its life as the node page shows it."""
    cur.execute(TIMELINE_SQL, {"node": validate_node_name(node), "limit": limit})
    return [_transition(r) for r in cur.fetchall()]


_END = dt.datetime.max.replace(tzinfo=dt.UTC)


def _latest_of(cur: Any, kinds: Sequence[str], nodes: Iterable[str] | None,
               as_of: dt.datetime | None = None) -> list[Transition]:
    params: dict[str, Any] = {"kinds": list(kinds), "as_of": as_of or _END}
    where = ""
    if nodes is not None:
        params["nodes"] = [validate_node_name(n) for n in nodes]
        where = "AND node_name = ANY(%(nodes)s)"
    cur.execute(LATEST_OF_SQL.format(nodes=where), params)
    return [_transition(r) for r in cur.fetchall()]


def repeat_offenders(cur: Any, nodes: Iterable[str] | None = None, *,
                     as_of: dt.datetime | None = None) -> dict[str, RepeatOffender]:
    """The repeat offenders now, or at ``as_of`` (named, no release since): of ``nodes``, or all."""
    return {t.node_name: RepeatOffender(t.node_name, t.at, t.cause)
            for t in _latest_of(cur, (REPEAT_OFFENDER, RELEASED), nodes, as_of) if t.kind == REPEAT_OFFENDER}


def repeat_offenders_now(connect: Any) -> dict[str, RepeatOffender]:
    """``repeat_offenders`` in a connection of its own (the node conditions, the hand-off)."""
    with database.connector(connect)() as conn, conn.cursor() as cur:
        return repeat_offenders(cur)


def in_quarantine(cur: Any) -> dict[str, Transition]:
    """The nodes whose latest quarantine has no release after it, by our records: node → that transition."""
    return {t.node_name: t for t in _latest_of(cur, (QUARANTINED, RELEASED), None) if t.kind == QUARANTINED}


def counts(cur: Any, start: dt.datetime, end: dt.datetime) -> dict[str, int]:
    """How many transitions of each kind in [start, end)."""
    cur.execute(COUNTS_SQL, {"start": start, "end": end})
    return {kind: int(n) for kind, n in (tuple(r.values()) if isinstance(r, dict) else r for r in cur.fetchall())}


def totals(cur: Any) -> dict[str, int]:
    """How many transitions of each kind ever (the metrics' counters)."""
    cur.execute(TOTALS_SQL)
    return {kind: int(n) for kind, n in (tuple(r.values()) if isinstance(r, dict) else r for r in cur.fetchall())}


def in_window(cur: Any, start: dt.datetime, end: dt.datetime) -> list[Transition]:
    """Every transition in [start, end), oldest first (the daily report's list)."""
    cur.execute(IN_WINDOW_SQL, {"start": start, "end": end})
    return [_transition(r) for r in cur.fetchall()]


def of_released_since(cur: Any, since: dt.datetime) -> list[Transition]:
    """Every transition of the nodes released at or after ``since`` (``domain.transitions.durations`` reads
    how long their quarantines lasted)."""
    cur.execute(RELEASED_NODES_SQL, {"since": since})
    return [_transition(r) for r in cur.fetchall()]
