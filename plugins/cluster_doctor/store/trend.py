"""The coverage trend's query: how many fleet nodes were covered, and pairs fresh, at each of a few
moments, read from ``validation_history`` in one range scan (the verdicts are ``domain.coverage``'s),
and since when each node is known: a moment before a node was first seen does not count it, and a
moment before any was seen has no data (never 0 %)."""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from cluster_doctor.domain import coverage
from cluster_doctor.domain.status import EXECUTED
from cluster_doctor.store import inventory

# A pair is fresh at moment T when it has an executed result finished in [T - staleness, T). Each
# executed result of the window is turned into a bit mask of the moments it makes its pair fresh
# (width_bucket counts the moments at or before a time), OR-ed per pair, AND-ed per node over the
# enabled tests; then one bit test per moment. One range scan, no rows x moments join. A node's member
# mask says at which moments it belongs to the fleet (every moment, unless the caller says otherwise).
TREND_SQL = """
WITH pair AS MATERIALIZED (
    SELECT h.node_name, h.test_name,
           bit_or(((1::bigint << width_bucket(h.finished_at + %(staleness)s, %(moments)s::timestamptz[])) - 1)
                  # ((1::bigint << width_bucket(h.finished_at, %(moments)s::timestamptz[])) - 1))
           & n.member AS mask
      FROM validation_history h
      JOIN unnest(%(nodes)s::text[], %(members)s::bigint[]) AS n(node_name, member) ON n.node_name = h.node_name
     WHERE h.status = ANY(%(executed)s) AND h.test_name = ANY(%(tests)s)
       AND h.finished_at >= %(since)s AND h.finished_at < %(until)s
     GROUP BY h.node_name, h.test_name, n.member
),
node AS MATERIALIZED (
    SELECT node_name, CASE WHEN count(*) >= %(n_tests)s THEN bit_and(mask) ELSE 0 END AS mask
      FROM pair GROUP BY node_name
)
SELECT g.i,
       (SELECT count(*) FROM node WHERE (node.mask >> g.i) & 1 = 1) AS covered_nodes,
       (SELECT count(*) FROM pair WHERE (pair.mask >> g.i) & 1 = 1) AS fresh_pairs
  FROM generate_series(0, %(n_moments)s - 1) AS g(i)
 ORDER BY g.i
"""
MAX_MOMENTS = 62  # bits of a bigint mask

# When each node was first known: discovery's first sighting, or its first recorded attempt of an
# enabled test if that is earlier (results imported or recorded before discovery listed it). One
# index probe per (node, test): min() over the pair index, never a scan of a node's history.
NODE_FIRST_SEEN_SQL = f"""
SELECT n.node_name,
       least(inv.first_seen_at,
             (SELECT min(f.first) FROM unnest(%(tests)s::text[]) AS t(test_name),
                     LATERAL (SELECT min(h.finished_at) AS first FROM validation_history h
                               WHERE h.node_name = n.node_name AND h.test_name = t.test_name) f)) AS first_seen
  FROM unnest(%(nodes)s::text[]) AS n(node_name)
  LEFT JOIN {inventory.TABLE} inv ON inv.node_name = n.node_name
"""


def counts(cur: Any, *, ends: Sequence[dt.datetime], nodes: Sequence[str], tests: Sequence[str],
           staleness: dt.timedelta, members: Sequence[int] | None = None) -> dict[int, tuple[int, int]]:
    """{index of the moment in ``ends``: (covered nodes, fresh pairs)}; moments where nothing was
    fresh may be left out. ``cur``: an open cursor (the caller's snapshot), rows as tuples or dicts.
    ``members``: per node, the bit mask of the moments it is in the fleet (bit i: ``ends[i]``); None:
    every node at every moment."""
    if not (nodes and tests and ends):
        return {}
    every = (1 << len(ends)) - 1
    cur.execute(TREND_SQL, {
        "moments": list(ends), "staleness": staleness, "nodes": list(nodes),
        "members": [every] * len(nodes) if members is None else [int(m) for m in members],
        "executed": [str(s) for s in EXECUTED], "tests": list(tests), "n_tests": len(tests),
        "since": ends[0] - staleness, "until": ends[-1], "n_moments": len(ends)})
    out: dict[int, tuple[int, int]] = {}
    for row in cur.fetchall():
        i, covered, fresh = (row["i"], row["covered_nodes"], row["fresh_pairs"]) if isinstance(row, Mapping) \
            else row
        out[int(i)] = (int(covered), int(fresh))
    return out


def node_first_seen(cur: Any, *, nodes: Sequence[str], tests: Sequence[str]) -> dict[str, dt.datetime]:
    """{node: when it was first known} (discovery's first sighting or its first recorded attempt of
    one of ``tests``, the earlier); a node known from neither is left out."""
    if not nodes:
        return {}
    cur.execute(NODE_FIRST_SEEN_SQL, {"nodes": list(nodes), "tests": list(tests)})
    out = {}
    for row in cur.fetchall():
        name, seen = (row["node_name"], row["first_seen"]) if isinstance(row, Mapping) else row
        if seen is not None:
            out[name] = seen
    return out


def coverage_trend(cur: Any, *, ends: Sequence[dt.datetime], nodes: Sequence[str], tests: Sequence[str],
                   staleness: dt.timedelta, from_first_seen: bool = False) -> list[dict[str, Any]]:
    """Coverage of a fixed fleet at each moment of ``ends`` (ascending, at most MAX_MOMENTS), from
    validation_history: the samples of ``coverage.trend_samples``. ``from_first_seen``: each moment
    counts only the nodes first seen before it (``node_first_seen``), and a moment before the first of
    them has no data (every share None) instead of 0 %; else every node counts at every moment."""
    tests = list(dict.fromkeys(tests))
    nodes = list(dict.fromkeys(nodes))
    ends = list(ends)
    if len(ends) > MAX_MOMENTS:
        raise ValueError(f"at most {MAX_MOMENTS} coverage samples at once, got {len(ends)}")
    found = counts(cur, ends=ends, nodes=nodes, tests=tests, staleness=staleness)
    if not from_first_seen:
        return coverage.trend_samples(ends, nodes=len(nodes), tests=len(tests), counts=found)
    seen = sorted(node_first_seen(cur, nodes=nodes, tests=tests).values())
    return coverage.trend_samples(ends, nodes=[bisect.bisect_left(seen, end) for end in ends], tests=len(tests),
                                  counts=found)


# The inventory rows that belong to the fleet at one moment at least of a trend (the rule of
# ``inventory.COUNTED_WHERE`` at its first and last moment), and when the fleet was first seen.
SEEN_SQL = f"""
SELECT node_name, first_seen_at, gone_at FROM {inventory.TABLE}
 WHERE first_seen_at <= %(last)s AND (gone_at IS NULL OR gone_at > %(first)s - %(grace)s)
"""
FIRST_SEEN_SQL = f"SELECT min(first_seen_at) AS first_seen FROM {inventory.TABLE}"


def first_seen(cur: Any) -> dt.datetime | None:
    """When discovery (or an attempt) first saw a node of the fleet: no trend has data before it."""
    cur.execute(FIRST_SEEN_SQL)
    row = cur.fetchone()
    value = (row["first_seen"] if isinstance(row, Mapping) else row[0]) if row else None
    return value


def fleet_trend(cur: Any, *, ends: Sequence[dt.datetime], tests: Sequence[str], staleness: dt.timedelta,
                grace: dt.timedelta) -> list[dict[str, Any]]:
    """Coverage at each moment of ``ends`` of the fleet as it stood then: the inventory nodes every view
    counts at that moment (first seen by then, not gone longer than ``grace``), so a day of a trend reads
    what that day's own report said. A moment before the fleet was first seen has no node and no
    coverage (``coverage`` None: no data, never 0 %)."""
    tests = list(dict.fromkeys(tests))
    ends = list(ends)
    if len(ends) > MAX_MOMENTS:
        raise ValueError(f"at most {MAX_MOMENTS} coverage samples at once, got {len(ends)}")
    if not ends:
        return []
    cur.execute(SEEN_SQL, {"first": ends[0], "last": ends[-1], "grace": grace})
    rows = [(r["node_name"], r["first_seen_at"], r["gone_at"]) if isinstance(r, Mapping) else tuple(r)
            for r in cur.fetchall()]
    masks = {name: sum(1 << i for i, end in enumerate(ends)
                       if seen <= end and (gone is None or gone > end - grace))
             for name, seen, gone in rows}
    nodes = sorted(n for n, m in masks.items() if m)
    found = counts(cur, ends=ends, nodes=nodes, tests=tests, staleness=staleness,
                   members=[masks[n] for n in nodes])
    sizes = [sum(masks[n] >> i & 1 for n in nodes) for i in range(len(ends))]
    return coverage.trend_samples(ends, nodes=sizes, tests=len(tests), counts=found)
