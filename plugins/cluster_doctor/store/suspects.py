"""Suspect nodes: the evidence the cluster's signals gave, kept in ``node_suspicions``
(migration 0011), and since when a failing node fails.

``record`` writes what one read of the signals found: one row per (node, source, key) — the same evidence
read again only moves ``last_seen_at``, and evidence already answered is not raised again. A node is
**suspect** while it has a row its bundle has not answered: every enabled suite passed after the row was
first seen (``cleared``), or one failed (``confirmed``: the failure is the verdict, and the evidence says
since when); a speed probe's suspicion (source ``speed probe``) is answered by the node's next probe too
(``answer``). ``current`` judges that on read, so every view agrees at once; ``resolve`` writes it down (the
planning tasks call it). ``failing_since`` gives a failing node's first failing evidence after its last
pass: an attempt, or a signal its failure confirmed.

Parametrized SQL only; node names are validated before they reach a query.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cluster_doctor.domain.nodes import validate_node_name
from cluster_doctor.domain.signals import Evidence, FailingSince, Suspect
from cluster_doctor.store import database

TABLE = "node_suspicions"
CLEARED, CONFIRMED = "cleared", "confirmed"

RECORD_SQL = f"""
INSERT INTO {TABLE} AS s (node_name, source, evidence_key, evidence, occurred_at, first_seen_at, last_seen_at)
SELECT e.node_name, e.source, e.evidence_key, e.evidence, e.occurred_at, %(seen_at)s, %(seen_at)s
  FROM unnest(%(nodes)s::text[], %(sources)s::text[], %(keys)s::text[], %(texts)s::text[],
              %(occurred)s::timestamptz[]) AS e(node_name, source, evidence_key, evidence, occurred_at)
ON CONFLICT (node_name, source, evidence_key) DO UPDATE SET
    last_seen_at = greatest(s.last_seen_at, EXCLUDED.last_seen_at),
    evidence = EXCLUDED.evidence
 WHERE s.resolved_at IS NULL
RETURNING node_name, source, evidence_key, (xmax = 0) AS inserted
"""
# Per open suspicion: whether a suite of its node failed since it was first seen, and how many of the
# enabled suites passed since (an attempt counts from its start: one that began before the evidence was
# known does not answer it). The pair state holds each pair's latest executed attempt.
JUDGED_SQL = f"""
SELECT s.id,
       coalesce(bool_or(p.status = 'fail' AND coalesce(p.started_at, p.finished_at) >= s.first_seen_at), false)
           AS failed,
       count(*) FILTER (WHERE p.status = 'pass' AND coalesce(p.started_at, p.finished_at) >= s.first_seen_at)
           AS passed
  FROM {TABLE} s
  LEFT JOIN validation_pair_state p ON p.node_name = s.node_name AND p.test_name = ANY(%(tests)s)
 WHERE s.resolved_at IS NULL {{nodes}}
 GROUP BY s.id
"""
ANSWERED = "(j.failed OR j.passed >= cardinality(%(tests)s::text[]))"
RESOLVE_SQL = f"""
WITH j AS ({JUDGED_SQL.format(nodes="")})
UPDATE {TABLE} s SET resolved_at = %(now)s,
                     resolution = CASE WHEN j.failed THEN '{CONFIRMED}' ELSE '{CLEARED}' END
  FROM j
 WHERE s.id = j.id AND {ANSWERED}
RETURNING s.node_name, s.resolution
"""
CURRENT_SQL = f"""
WITH j AS ({JUDGED_SQL})
SELECT s.node_name, s.source, s.evidence, least(s.occurred_at, s.first_seen_at) AS since, s.triggered_run_id
  FROM {TABLE} s JOIN j ON j.id = s.id
 WHERE NOT {ANSWERED}
 ORDER BY s.node_name, since, s.id
"""
TRIGGERED_SQL = f"""
UPDATE {TABLE} SET triggered_run_id = %(run_id)s
 WHERE resolved_at IS NULL AND triggered_run_id IS NULL AND node_name = ANY(%(nodes)s)
"""
# A failing pair: since when it fails (its current executed status began) and its last pass before that,
# from the per-pair index (the newest pass older than the failure: one short walk back per pair).
FAILING_SQL = """
SELECT p.node_name, p.test_name, p.status_since, lp.last_pass
  FROM validation_pair_state p
  LEFT JOIN LATERAL (SELECT h.finished_at AS last_pass FROM validation_history h
                      WHERE h.node_name = p.node_name AND h.test_name = p.test_name AND h.status = 'pass'
                        AND h.finished_at < p.status_since
                      ORDER BY h.finished_at DESC, h.id DESC LIMIT 1) lp ON true
 WHERE p.status = 'fail' AND p.test_name = ANY(%(tests)s) {nodes}
"""
# The evidence a failure confirmed: written down (resolve), or still open and seen before the failure began.
CONFIRMED_SQL = f"""
SELECT node_name, source, evidence, least(occurred_at, first_seen_at), first_seen_at
  FROM {TABLE} WHERE (resolution = '{CONFIRMED}' OR resolved_at IS NULL) AND node_name = ANY(%(nodes)s)
"""


# A node's open suspicions of one source answered by something other than its bundle (a speed probe's by
# the next probe): cleared or confirmed, the evidence of this answer itself left open.
ANSWER_SQL = f"""
UPDATE {TABLE} s SET resolved_at = %(now)s, resolution = a.resolution
  FROM unnest(%(nodes)s::text[], %(resolutions)s::text[], %(keep)s::text[]) AS a(node_name, resolution, keep)
 WHERE s.resolved_at IS NULL AND s.source = %(source)s AND s.node_name = a.node_name
   AND s.evidence_key <> a.keep AND s.first_seen_at <= %(now)s
RETURNING s.node_name, s.resolution
"""


# The suspicions open at a past moment, as written down (the daily report's end of day).
AS_OF_SQL = f"""
SELECT node_name, source, evidence, least(occurred_at, first_seen_at) AS since
  FROM {TABLE}
 WHERE first_seen_at <= %(as_of)s AND (resolved_at IS NULL OR resolved_at > %(as_of)s)
 ORDER BY node_name, since, id
"""


def _rows(cur: Any) -> list[tuple]:
    """The cursor's rows as tuples, whatever its row factory (the views' cursors give dicts)."""
    return [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in cur.fetchall()]


@dataclasses.dataclass(frozen=True)
class Recorded:
    """What one read added: the evidence not seen before (new suspicions), and how many were seen again."""

    new: list[Evidence]
    again: int

    def describe(self) -> str:
        nodes = sorted({e.node_name for e in self.new})
        text = f"{len(self.new)} new piece(s) of evidence" + (f" on {', '.join(nodes)}" if nodes else "")
        return text + (f", {self.again} seen again" if self.again else "")


def record(connect: Any, evidence: Sequence[Evidence], *, seen_at: dt.datetime) -> Recorded:
    """Write what one read of the signals found (one statement, one transaction)."""
    if seen_at.tzinfo is None:
        raise ValueError("seen_at must be timezone-aware")
    unique = {(validate_node_name(e.node_name), e.source, e.key): e for e in evidence}
    if not unique:
        return Recorded([], 0)
    items = list(unique.values())
    params = {"seen_at": seen_at, "nodes": [e.node_name for e in items], "sources": [e.source for e in items],
              "keys": [e.key for e in items], "texts": [e.text for e in items], "occurred": [e.at for e in items]}
    with database.connector(connect)() as conn, conn.cursor() as cur:
        cur.execute(RECORD_SQL, params)
        rows = _rows(cur)
        conn.commit()
    new = [unique[(n, s, k)] for n, s, k, inserted in rows if inserted]
    return Recorded(new=new, again=len(rows) - len(new))


def resolve(connect: Any, tests: Sequence[str], *, now: dt.datetime) -> dict[str, str]:
    """Write down the suspicions their node's bundle answered since they were first seen: node → resolution
    (``cleared`` when every enabled suite passed, ``confirmed`` when one failed)."""
    with database.connector(connect)() as conn, conn.cursor() as cur:
        cur.execute(RESOLVE_SQL, {"tests": list(tests), "now": now})
        rows = _rows(cur)
        conn.commit()
    resolved: dict[str, str] = {}
    for node, resolution in rows:
        if resolved.get(node) != CONFIRMED:
            resolved[node] = resolution
    return resolved


def answer(connect: Any, source: str, answers: Mapping[str, tuple[str, str]], *, now: dt.datetime) -> dict[str, str]:
    """Resolve the open suspicions of ``source`` on each node of ``answers`` (node → (resolution, the
    evidence key left open: the answer's own, or "")): node → resolution, for the nodes that had one."""
    if not answers:
        return {}
    nodes = [validate_node_name(n) for n in answers]
    params = {"source": source, "now": now, "nodes": nodes, "resolutions": [answers[n][0] for n in nodes],
              "keep": [answers[n][1] for n in nodes]}
    with database.connector(connect)() as conn, conn.cursor() as cur:
        cur.execute(ANSWER_SQL, params)
        rows = _rows(cur)
        conn.commit()
    return dict(rows)


def current(cur: Any, tests: Sequence[str], nodes: Iterable[str] | None = None) -> dict[str, Suspect]:
    """The suspect nodes now (``cur``: an open cursor, the caller's snapshot): each with its unanswered
    evidence, oldest first, and since when."""
    return {name: suspect for name, (suspect, _) in _current(cur, tests, nodes).items()}


def untriggered(cur: Any, tests: Sequence[str]) -> dict[str, Suspect]:
    """The suspect nodes with evidence no fast-path run was triggered for yet."""
    return {name: suspect for name, (suspect, fresh) in _current(cur, tests, None).items() if fresh}


def _current(cur: Any, tests: Sequence[str], nodes: Iterable[str] | None) -> dict[str, tuple[Suspect, bool]]:
    params: dict[str, Any] = {"tests": list(tests)}
    where = ""
    if nodes is not None:
        params["nodes"] = [validate_node_name(n) for n in nodes]
        where = "AND s.node_name = ANY(%(nodes)s)"
    cur.execute(CURRENT_SQL.format(nodes=where), params)
    found: dict[str, tuple[list[str], dt.datetime, bool]] = {}
    for node, source, evidence, since, triggered in _rows(cur):
        lines, first, fresh = found.get(node, ([], since, False))
        lines.append(f"{source}: {evidence}")
        found[node] = (lines, min(first, since), fresh or triggered is None)
    return {node: (Suspect(node, since, tuple(lines)), fresh) for node, (lines, since, fresh) in found.items()}


def as_of(cur: Any, at: dt.datetime) -> dict[str, Suspect]:
    """The suspect nodes at a past moment ``at``, as the resolutions written down say (``resolve`` runs in
    every run's planning, so they lag a bundle's answer by a run at most)."""
    cur.execute(AS_OF_SQL, {"as_of": at})
    found: dict[str, tuple[list[str], dt.datetime]] = {}
    for node, source, evidence, since in _rows(cur):
        lines, first = found.get(node, ([], since))
        lines.append(f"{source}: {evidence}")
        found[node] = (lines, min(first, since))
    return {node: Suspect(node, since, tuple(lines)) for node, (lines, since) in found.items()}


def mark_triggered(connect: Any, nodes: Iterable[str], run_id: str) -> int:
    """The fast path triggered ``run_id`` for these nodes: their open evidence is not triggered again."""
    names = [validate_node_name(n) for n in nodes]
    with database.connector(connect)() as conn, conn.cursor() as cur:
        cur.execute(TRIGGERED_SQL, {"nodes": names, "run_id": run_id})
        count = cur.rowcount
        conn.commit()
    return count


def failing_since(cur: Any, tests: Sequence[str], nodes: Iterable[str] | None = None) -> dict[str, FailingSince]:
    """Since when each failing node fails: the earliest of its failing pairs' failures and of the signals a
    failure confirmed after the last pass before it (``cur``: an open cursor)."""
    params: dict[str, Any] = {"tests": list(tests)}
    where = ""
    if nodes is not None:
        params["nodes"] = [validate_node_name(n) for n in nodes]
        where = "AND p.node_name = ANY(%(nodes)s)"
    cur.execute(FAILING_SQL.format(nodes=where), params)
    pairs = _rows(cur)
    if not pairs:
        return {}
    cur.execute(CONFIRMED_SQL, {"nodes": sorted({p[0] for p in pairs})})
    signals: dict[str, list[tuple[dt.datetime, str, dt.datetime]]] = {}
    for node, source, evidence, at, seen in _rows(cur):
        signals.setdefault(node, []).append((at, f"{source}: {evidence}", seen))
    found: dict[str, FailingSince] = {}
    for node, test, since, last_pass in sorted(pairs, key=lambda p: (p[0], p[2] or dt.datetime.max.replace(tzinfo=dt.UTC))):
        if node in found or since is None:
            continue
        first = f"{test} fail"
        earlier = [(at, line) for at, line, seen in signals.get(node, [])
                   if at < since and seen <= since and (last_pass is None or at > last_pass)]
        if earlier:
            since, first = min(earlier)
        found[node] = FailingSince(node, since, first, last_pass)
    return found
