"""Fail-slow, what the results say: each node's last two speed probes (gpu_health attempts that carried the
probe's figures, flagged when a straggler/drift verdict fell on one of them), its speed signals within the
window (``node_suspicions`` rows of source ``speed``), the bundle verdicts (a straggler/drift verdict on the
last executed dl_unit or nccl_loopback attempt, when it ended within the window), and what
``domain.fail_slow`` makes of them with the confirmation spacing (setting ``slow_confirm_spacing_hours``);
and what the planner needs to schedule the probe (``domain.fail_slow.probe_due``): when each node was last
probed and since when it has been free.

Every read is as of ``now``: what had finished or been seen by then, so a past day's report reads that day's
state, not today's. The reads take whatever cursor the caller holds (tuple or dict rows) and read through a
tuple cursor on the same connection, hence the same snapshot.

Parametrized SQL only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from psycopg.rows import tuple_row

from cluster_doctor.domain import fail_slow, signals
from cluster_doctor.domain.fail_slow import ProbeOutcome, SlowState
from cluster_doctor.domain.fleet_verdicts import JUDGED_METRICS
from cluster_doctor.store import database, suspects

PROBE_TEST = fail_slow.PROBE_TEST
PROBE_METRICS = fail_slow.PROBE_METRICS
PROBED = PROBE_METRICS[0]  # an attempt that probed carries this figure
SLOW_WINDOW = dt.timedelta(hours=24)  # setting slow_signal_window_hours' default
SLOW_SPACING = dt.timedelta(hours=3)  # setting slow_confirm_spacing_hours' default
BUNDLE_TESTS = ("dl_unit", "nccl_loopback")  # the bundle suites that measure speed (fleet verdicts)
BUNDLE_METRICS = tuple(m for t in BUNDLE_TESTS for m in JUDGED_METRICS[t])

# Each node's last two probes: per node (one validation_pair_state row per pair that has any history) the
# pair index read newest first, stopping at the second attempt that probed, instead of a row_number() over
# every gpu_health attempt ever kept (about 5x faster over all nodes, 10x for a few, with 30 days of sweeps).
PROBES_SQL = """
SELECT n.node_name, h.id, h.finished_at,
       coalesce((SELECT array_agg(v.kind || ':' || v.metric || '=' || round(v.value::numeric, 4)
                                   || coalesce(' (fleet median ' || round(v.fleet_median::numeric, 4) || ')', '')
                                   ORDER BY v.metric, v.kind)
                   FROM validation_verdicts v WHERE v.history_id = h.id AND v.metric = ANY(%(metrics)s)), '{}')
  FROM validation_pair_state n
 CROSS JOIN LATERAL (
       SELECT id, finished_at FROM validation_history
        WHERE node_name = n.node_name AND test_name = n.test_name AND status IN ('pass', 'fail')
          AND metrics ? %(probed)s AND finished_at <= %(as_of)s
        ORDER BY finished_at DESC, id DESC LIMIT 2) h
 WHERE n.test_name = %(test)s AND (%(nodes)s::text[] IS NULL OR n.node_name = ANY(%(nodes)s))
"""
# A suite's last executed attempt as of the moment, with its verdicts, if it ended within the window. Per pair
# validation_pair_state holds the newest executed attempt: it is the one as of any moment after it (every live
# read), and a pair whose newest ended before the window has none in it; only a pair whose newest ended after
# the moment (a past day's report) looks its attempt of then up in the history. Two branches, so a live read
# stays the plain join it was: about 2 ms over 5,000 nodes x 2 suites x 10 attempts, where a lookup for every
# pair, as a report of a past day makes, takes about 70 ms.
BUNDLE_SQL = """
WITH last AS (
     SELECT s.node_name, s.test_name, s.history_id AS id, s.finished_at FROM validation_pair_state s
      WHERE s.test_name = ANY(%(tests)s) AND s.finished_at >= %(since)s AND s.finished_at <= %(as_of)s
        AND (%(nodes)s::text[] IS NULL OR s.node_name = ANY(%(nodes)s))
      UNION ALL
     SELECT s.node_name, s.test_name, h.id, h.finished_at FROM validation_pair_state s
      CROSS JOIN LATERAL (
            SELECT id, finished_at FROM validation_history
             WHERE node_name = s.node_name AND test_name = s.test_name AND status IN ('pass', 'fail', 'error')
               AND finished_at <= %(as_of)s
             ORDER BY finished_at DESC, id DESC LIMIT 1) h
      WHERE s.test_name = ANY(%(tests)s) AND s.finished_at > %(as_of)s AND h.finished_at >= %(since)s
        AND (%(nodes)s::text[] IS NULL OR s.node_name = ANY(%(nodes)s)))
SELECT l.node_name, l.test_name, l.finished_at,
       array_agg(l.test_name || ' ' || v.kind || ':' || v.metric || '=' || round(v.value::numeric, 4)
                 || coalesce(' (fleet median ' || round(v.fleet_median::numeric, 4) || ')', '')
                 ORDER BY v.metric, v.kind)
  FROM last l
  JOIN validation_verdicts v ON v.history_id = l.id
 WHERE v.metric = ANY(%(metrics)s)
 GROUP BY l.node_name, l.test_name, l.finished_at
 ORDER BY l.node_name, l.test_name
"""
SIGNALS_SQL = """
SELECT node_name, evidence, last_seen_at FROM node_suspicions
 WHERE source = %(source)s AND last_seen_at >= %(since)s AND first_seen_at <= %(as_of)s
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
    since: dt.datetime | None  # the last flagged probe, else the first signal or bundle verdict
    probes: tuple[str, ...] = ()  # "straggler:probe_gemm_tflops_min=612 (fleet median 700)" of the last probe
    signals: tuple[str, ...] = ()  # the speed evidence lines, oldest first
    bundle: tuple[str, ...] = ()  # "dl_unit straggler:gemm_bf16_tflops_min=612 (fleet median 700)"

    @property
    def failing(self) -> bool:
        return self.state == SlowState.FAILING

    def describe(self) -> str:
        """'slow (failing, SLOW): probe straggler:...; signal GPU 2: hardware slowdown (...)'"""
        what = f"slow ({self.state.value}{', ' + fail_slow.SLOW if self.failing else ''})"
        parts = ([f"probe {p}" for p in self.probes] + [f"signal {s}" for s in self.signals]
                 + [f"verdict {b}" for b in self.bundle])
        return what + (": " + "; ".join(parts) if parts else "")


def slow_nodes(cur: Any, *, now: dt.datetime, window: dt.timedelta, spacing: dt.timedelta,
               nodes: Iterable[str] | None = None) -> dict[str, SlowNode]:
    """Every node (of ``nodes``, else all) that ``fail_slow.slow_state`` makes suspect or failing as of
    ``now``, two sightings counting only ``spacing`` apart. ``cur``: any cursor, whatever its row factory."""
    wanted = sorted(set(nodes)) if nodes is not None else None
    with _tuples(cur) as rows:
        probes = {node: [(finished, flags) for finished, _id, flags in found]
                  for node, found in _probes(rows, wanted, now).items()}
        rows.execute(SIGNALS_SQL, {"source": signals.SPEED, "since": now - window, "as_of": now, "nodes": wanted})
        seen: dict[str, list[tuple[str, dt.datetime]]] = {}
        for node, text, at in rows.fetchall():
            seen.setdefault(node, []).append((text, at))
        rows.execute(BUNDLE_SQL, {"tests": list(BUNDLE_TESTS), "metrics": list(BUNDLE_METRICS),
                                  "since": now - window, "as_of": now, "nodes": wanted})
        bundle: dict[str, list[tuple[dt.datetime, list[str]]]] = {}
        for node, _test, finished, flags in rows.fetchall():
            bundle.setdefault(node, []).append((finished, list(flags)))
    out = {}
    for node in sorted(set(probes) | set(seen) | set(bundle)):
        outcomes = [ProbeOutcome(at, bool(flags)) for at, flags in probes.get(node, [])]
        verdicts = bundle.get(node, [])
        state = fail_slow.slow_state(outcomes, bool(seen.get(node)), bundle_verdicts=[at for at, _ in verdicts],
                                     min_spacing=spacing)
        if state == SlowState.OK:
            continue
        last = max(probes.get(node, []), key=lambda p: p[0], default=None)
        flagged_at = last[0] if last and last[1] else None
        first_other = min([at for _, at in seen.get(node, [])] + [at for at, _ in verdicts], default=None)
        out[node] = SlowNode(node, state, flagged_at or first_other,
                             tuple(last[1]) if last else (), tuple(dict.fromkeys(t for t, _ in seen.get(node, []))),
                             tuple(line for _, lines in verdicts for line in lines))
    return out


@contextlib.contextmanager
def _tuples(cur: Any) -> Iterator[Any]:
    """A cursor with tuple rows on ``cur``'s connection: the same transaction, so the same snapshot (the daily
    report's and the fleet page's cursors read dicts, the reads here unpack rows by position)."""
    with cur.connection.cursor(row_factory=tuple_row) as rows:
        yield rows


@dataclasses.dataclass(frozen=True)
class ProbeSuspects:
    """What ``record_probe_suspects`` did: the nodes a flagged probe made suspect, and the nodes whose open
    probe suspicions their next probe answered (node → ``cleared`` or ``confirmed``)."""

    suspect: tuple[str, ...] = ()
    answered: Mapping[str, str] = dataclasses.field(default_factory=dict)


def record_probe_suspects(connect: Any, attempts: Iterable[Mapping[str, Any]], *, now: dt.datetime,
                          window: dt.timedelta, spacing: dt.timedelta) -> ProbeSuspects:
    """After a run's attempts are recorded and judged: the nodes whose gpu_health attempt among ``attempts``
    probed. Where that probe is the node's last and was flagged while the node is not failing by it
    (``fail_slow.probe_suspect``, the rule the simulator applies), the node becomes a suspect as a signal
    makes one (a ``node_suspicions`` row of source ``signals.PROBE``, the verdict lines its evidence): its
    bundle goes first and reservation may hold it. The node's older probe suspicions are answered by this
    probe: cleared when it came back clean, confirmed when the node is failing by it."""
    probed = sorted({str(a["node_name"]) for a in attempts if a.get("test_name") == PROBE_TEST
                     and a.get("status") in ("pass", "fail") and PROBED in (a.get("metrics") or {})})
    if not probed:
        return ProbeSuspects()
    conn = database.connector(connect)()
    try:
        with conn.cursor() as cur:
            last = {node: max(found, key=lambda p: (p[0], p[1]))
                    for node, found in _probes(cur, probed, now).items()}
            slow = slow_nodes(cur, now=now, window=window, spacing=spacing, nodes=probed)
    finally:
        conn.close()
    evidence, answers = [], {}
    for node, (finished, history_id, flags) in sorted(last.items()):
        state = slow[node].state if node in slow else SlowState.OK
        key = str(history_id)
        if fail_slow.probe_suspect(bool(flags), state):
            evidence.append(signals.probe(node, key, flags, finished))
            answers[node] = ("", key)  # a second flag short of failing: the older one stays its evidence too
        else:
            answers[node] = (suspects.CONFIRMED if flags else suspects.CLEARED, key)
    suspects.record(connect, evidence, seen_at=now)
    answered = suspects.answer(connect, signals.PROBE, {n: a for n, a in answers.items() if a[0]}, now=now)
    return ProbeSuspects(tuple(e.node_name for e in evidence), answered)


def _probes(cur: Any, nodes: list[str] | None,
            as_of: dt.datetime) -> dict[str, list[tuple[dt.datetime, int, list[str]]]]:
    """Each node's last two probes by ``as_of``: (when it ended, its attempt's id, its flagged verdict lines)."""
    with _tuples(cur) as rows:
        rows.execute(PROBES_SQL, {"metrics": list(PROBE_METRICS), "test": PROBE_TEST, "probed": PROBED,
                                  "nodes": nodes, "as_of": as_of})
        found: dict[str, list[tuple[dt.datetime, int, list[str]]]] = {}
        for node, history_id, finished, flags in rows.fetchall():
            found.setdefault(node, []).append((finished, history_id, list(flags or [])))
    return found


def read_slow_nodes(connect: Any, *, now: dt.datetime, window: dt.timedelta, spacing: dt.timedelta,
                    nodes: Iterable[str] | None = None) -> dict[str, SlowNode]:
    conn = database.connector(connect)()
    try:
        with conn.cursor() as cur:
            return slow_nodes(cur, now=now, window=window, spacing=spacing, nodes=nodes)
    finally:
        conn.close()


def due_probes(connect: Any, nodes: Iterable[str], *, now: dt.datetime, min_interval: dt.timedelta,
               max_age: dt.timedelta, window: dt.timedelta, spacing: dt.timedelta) -> set[str]:
    """Of ``nodes`` (free ones, about to run gpu_health), those whose speed probe is due now
    (``fail_slow.probe_due``). "Ran user jobs since the last probe": the node became free after it (the
    inventory's ``eligibility_since``: it was busy, or otherwise out of our hands, in between). A suspect's
    confirming probe waits ``spacing`` after its last probe, so a transient is over."""
    wanted = sorted(set(nodes))
    if not wanted:
        return set()
    conn = database.connector(connect)()
    try:
        with conn.cursor() as cur:
            last = {node: max(finished for finished, _id, _flags in found)
                    for node, found in _probes(cur, wanted, now).items()}
            cur.execute(FREE_SINCE_SQL, {"nodes": wanted})
            free_since: Mapping[str, dt.datetime] = dict(cur.fetchall())
            suspect = slow_nodes(cur, now=now, window=window, spacing=spacing, nodes=wanted)
    finally:
        conn.close()
    due = set()
    for node in wanted:
        before = last.get(node)
        busy = before is not None and node in free_since and free_since[node] > before
        if fail_slow.probe_due(now, before, busy_since=busy, min_interval=min_interval, max_age=max_age,
                               suspect=node in suspect, confirm_after=spacing):
            due.add(node)
    return due
