"""The coverage trend's query: how many fleet nodes were covered, and pairs fresh, at each of a few
moments, read from ``validation_history`` in one range scan (the verdicts are ``domain.coverage``'s)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from cluster_doctor.domain import coverage
from cluster_doctor.domain.status import EXECUTED

# A pair is fresh at moment T when it has an executed result finished in [T - staleness, T). Each
# executed result of the window is turned into a bit mask of the moments it makes its pair fresh
# (width_bucket counts the moments at or before a time), OR-ed per pair, AND-ed per node over the
# enabled tests; then one bit test per moment. One range scan, no rows x moments join.
TREND_SQL = """
WITH pair AS MATERIALIZED (
    SELECT h.node_name, h.test_name,
           bit_or(((1::bigint << width_bucket(h.finished_at + %(staleness)s, %(moments)s::timestamptz[])) - 1)
                  # ((1::bigint << width_bucket(h.finished_at, %(moments)s::timestamptz[])) - 1)) AS mask
      FROM validation_history h
      JOIN unnest(%(nodes)s::text[]) AS n(node_name) ON n.node_name = h.node_name
     WHERE h.status = ANY(%(executed)s) AND h.test_name = ANY(%(tests)s)
       AND h.finished_at >= %(since)s AND h.finished_at < %(until)s
     GROUP BY h.node_name, h.test_name
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


def counts(cur: Any, *, ends: Sequence[dt.datetime], nodes: Sequence[str], tests: Sequence[str],
           staleness: dt.timedelta) -> dict[int, tuple[int, int]]:
    """{index of the moment in ``ends``: (covered nodes, fresh pairs)}; moments where nothing was
    fresh may be left out. ``cur``: an open cursor (the caller's snapshot), rows as tuples or dicts."""
    if not (nodes and tests and ends):
        return {}
    cur.execute(TREND_SQL, {
        "moments": list(ends), "staleness": staleness, "nodes": list(nodes),
        "executed": [str(s) for s in EXECUTED], "tests": list(tests), "n_tests": len(tests),
        "since": ends[0] - staleness, "until": ends[-1], "n_moments": len(ends)})
    out: dict[int, tuple[int, int]] = {}
    for row in cur.fetchall():
        i, covered, fresh = (row["i"], row["covered_nodes"], row["fresh_pairs"]) if isinstance(row, Mapping) \
            else row
        out[int(i)] = (int(covered), int(fresh))
    return out


def coverage_trend(cur: Any, *, ends: Sequence[dt.datetime], nodes: Sequence[str], tests: Sequence[str],
                   staleness: dt.timedelta) -> list[dict[str, Any]]:
    """Coverage of a fixed fleet at each moment of ``ends`` (ascending, at most MAX_MOMENTS), from
    validation_history: the samples of ``coverage.trend_samples``."""
    tests = list(dict.fromkeys(tests))
    nodes = list(dict.fromkeys(nodes))
    ends = list(ends)
    if len(ends) > MAX_MOMENTS:
        raise ValueError(f"at most {MAX_MOMENTS} coverage samples at once, got {len(ends)}")
    found = counts(cur, ends=ends, nodes=nodes, tests=tests, staleness=staleness)
    return coverage.trend_samples(ends, nodes=len(nodes), tests=len(tests), counts=found)
