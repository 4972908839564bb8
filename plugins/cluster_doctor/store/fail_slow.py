"""Fail-slow, what the results say: each node's last two speed probes (gpu_health attempts that carried the
probe's figures, flagged when a straggler/drift verdict fell on one of them), its speed signals within the
window (``node_suspicions`` rows of source ``speed``), and what ``domain.fail_slow`` makes of them; and
what the planner needs to schedule the probe (``domain.fail_slow.probe_due``): when each node was last
probed and since when it has been free.

Parametrized SQL only.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from cluster_doctor.domain import fail_slow, signals
from cluster_doctor.domain.fail_slow import ProbeOutcome, SlowState
from cluster_doctor.domain.fleet_verdicts import JUDGED_METRICS
from cluster_doctor.store import database

PROBE_TEST = "gpu_health"
PROBE_METRICS = JUDGED_METRICS[PROBE_TEST]
PROBED = PROBE_METRICS[0]  # an attempt that probed carries this figure
SLOW_WINDOW = dt.timedelta(hours=24)  # setting slow_signal_window_hours' default

PROBES_SQL = """
SELECT h.node_name, h.id, h.finished_at,
       coalesce((SELECT array_agg(v.kind || ':' || v.metric || '=' || round(v.value::numeric, 4)
                                   || coalesce(' (fleet median ' || round(v.fleet_median::numeric, 4) || ')', '')
                                   ORDER BY v.metric, v.kind)
                   FROM validation_verdicts v WHERE v.history_id = h.id AND v.metric = ANY(%(metrics)s)), '{}')
  FROM (SELECT id, node_name, finished_at,
               row_number() OVER (PARTITION BY node_name ORDER BY finished_at DESC, id DESC) AS nth
          FROM validation_history
         WHERE test_name = %(test)s AND status IN ('pass', 'fail') AND metrics ? %(probed)s
           AND (%(nodes)s::text[] IS NULL OR node_name = ANY(%(nodes)s))) h
 WHERE h.nth <= 2
"""
SIGNALS_SQL = """
SELECT node_name, evidence, last_seen_at FROM node_suspicions
 WHERE source = %(source)s AND last_seen_at >= %(since)s
   AND (%(nodes)s::text[] IS NULL OR node_name = ANY(%(nodes)s))
 ORDER BY node_name, last_seen_at
"""
FREE_SINCE_SQL = """
SELECT node_name, eligibility_since FROM gpu_node_inventory WHERE eligibility = 'free' AND node_name = ANY(%(nodes)s)
"""


@dataclasses.dataclass(frozen=True)
class SlowNode:
    """A node suspect or failing for speed, with its evidence: the flagged probe verdicts of its last probe
    and the speed signals of the window."""

    node_name: str
    state: SlowState
    since: dt.datetime | None  # the last flagged probe, else the first signal
    probes: tuple[str, ...] = ()  # "straggler:probe_gemm_tflops_min=612 (fleet median 700)" of the last probe
    signals: tuple[str, ...] = ()  # the speed evidence lines, oldest first

    @property
    def failing(self) -> bool:
        return self.state == SlowState.FAILING

    def describe(self) -> str:
        """'slow (failing, SLOW): probe straggler:...; signal GPU 2: hardware slowdown (...)'"""
        what = f"slow ({self.state.value}{', ' + fail_slow.SLOW if self.failing else ''})"
        parts = [f"probe {p}" for p in self.probes] + [f"signal {s}" for s in self.signals]
        return what + (": " + "; ".join(parts) if parts else "")


def slow_nodes(cur: Any, *, now: dt.datetime, window: dt.timedelta,
               nodes: Iterable[str] | None = None) -> dict[str, SlowNode]:
    """Every node (of ``nodes``, else all) that ``fail_slow.slow_state`` makes suspect or failing."""
    wanted = sorted(set(nodes)) if nodes is not None else None
    cur.execute(PROBES_SQL, {"metrics": list(PROBE_METRICS), "test": PROBE_TEST, "probed": PROBED, "nodes": wanted})
    probes: dict[str, list[tuple[dt.datetime, list[str]]]] = {}
    for node, _id, finished, flags in cur.fetchall():
        probes.setdefault(node, []).append((finished, list(flags or [])))
    cur.execute(SIGNALS_SQL, {"source": signals.SPEED, "since": now - window, "nodes": wanted})
    seen: dict[str, list[tuple[str, dt.datetime]]] = {}
    for node, text, at in cur.fetchall():
        seen.setdefault(node, []).append((text, at))
    out = {}
    for node in sorted(set(probes) | set(seen)):
        outcomes = [ProbeOutcome(at, bool(flags)) for at, flags in probes.get(node, [])]
        state = fail_slow.slow_state(outcomes, bool(seen.get(node)))
        if state == SlowState.OK:
            continue
        last = max(probes.get(node, []), key=lambda p: p[0], default=None)
        flagged_at = last[0] if last and last[1] else None
        out[node] = SlowNode(node, state, flagged_at or (seen[node][0][1] if seen.get(node) else None),
                             tuple(last[1]) if last else (), tuple(dict.fromkeys(t for t, _ in seen.get(node, []))))
    return out


def read_slow_nodes(connect: Any, *, now: dt.datetime, window: dt.timedelta,
                    nodes: Iterable[str] | None = None) -> dict[str, SlowNode]:
    conn = database.connector(connect)()
    try:
        with conn.cursor() as cur:
            return slow_nodes(cur, now=now, window=window, nodes=nodes)
    finally:
        conn.close()


def due_probes(connect: Any, nodes: Iterable[str], *, now: dt.datetime, min_interval: dt.timedelta,
               max_age: dt.timedelta, window: dt.timedelta) -> set[str]:
    """Of ``nodes`` (free ones, about to run gpu_health), those whose speed probe is due now
    (``fail_slow.probe_due``). "Ran user jobs since the last probe": the node became free after it (the
    inventory's ``eligibility_since``: it was busy, or otherwise out of our hands, in between)."""
    wanted = sorted(set(nodes))
    if not wanted:
        return set()
    conn = database.connector(connect)()
    try:
        with conn.cursor() as cur:
            cur.execute(PROBES_SQL, {"metrics": list(PROBE_METRICS), "test": PROBE_TEST, "probed": PROBED,
                                     "nodes": wanted})
            last: dict[str, dt.datetime] = {}
            for node, _id, finished, _flags in cur.fetchall():
                last[node] = max(finished, last.get(node, finished))
            cur.execute(FREE_SINCE_SQL, {"nodes": wanted})
            free_since: Mapping[str, dt.datetime] = dict(cur.fetchall())
            suspect = slow_nodes(cur, now=now, window=window, nodes=wanted)
    finally:
        conn.close()
    due = set()
    for node in wanted:
        before = last.get(node)
        busy = before is not None and node in free_since and free_since[node] > before
        if fail_slow.probe_due(now, before, busy_since=busy, min_interval=min_interval, max_age=max_age,
                               suspect=node in suspect):
            due.add(node)
    return due
