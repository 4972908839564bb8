"""Node quarantine, what the results say: confirmed failures, nodes healthy again, and what the transitions
say of each node's past quarantines (repeat offenders, nodes released by a person)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

from cluster_doctor.domain.actions import SLOW_ACTION
from cluster_doctor.domain.fail_slow import SLOW
from cluster_doctor.domain.quarantine import Failure
from cluster_doctor.domain.status import CheckStatus, Status
from cluster_doctor.domain.transitions import RepeatOffender, Transition
from cluster_doctor.store import database, fail_slow, transitions

# ---------------------------------------------------------------------------- what the results say
CONFIRMED_FAILURES_SQL = """
SELECT s.node_name, s.test_name, s.checks, s.action, s.status_since
  FROM validation_pair_state s
 WHERE s.status = 'fail'
   AND (SELECT count(*) FROM validation_history h
         WHERE h.node_name = s.node_name AND h.test_name = s.test_name
           AND h.status IN ('pass', 'fail', 'error') AND h.finished_at >= s.status_since) >= 2
"""
CONFIRMED_VERDICTS_SQL = """
SELECT node_name, test_name, kind || ':' || metric, judged_at FROM validation_latest_verdicts WHERE confirmed
"""
LATEST_SQL = "SELECT node_name, test_name, status FROM validation_pair_state WHERE node_name = ANY(%s)"
VERDICT_NODES_SQL = "SELECT DISTINCT node_name FROM validation_latest_verdicts WHERE node_name = ANY(%s)"


def _failed_checks(checks: Any) -> str:
    names = sorted({c.get("name") for c in checks or [] if isinstance(c, dict) and c.get("status") == CheckStatus.FAIL
                    and isinstance(c.get("name"), str)})
    return ",".join(names) or "fail"


def confirmed_failures(connect: Any, tests: Sequence[str], *, now: dt.datetime | None = None,
                       slow_window: dt.timedelta = fail_slow.SLOW_WINDOW,
                       slow_spacing: dt.timedelta = fail_slow.SLOW_SPACING) -> dict[str, list[Failure]]:
    """node -> its confirmed failures among the enabled tests, each with the latest result's recommended
    action (None: unknown), the confirmed verdicts, and a node failing for speed (code SLOW, on the suite
    that probes: ``store.fail_slow``; the probe's own verdicts count through it, not twice)."""
    now = now or dt.datetime.now(dt.UTC)
    conn = database.connector(connect)()
    out: dict[str, list[Failure]] = {}
    try:
        with conn.cursor() as cur:
            cur.execute(CONFIRMED_FAILURES_SQL)
            rows = [(n, t, Failure(t, _failed_checks(c), action, since=since))
                    for n, t, c, action, since in cur.fetchall()]
            cur.execute(CONFIRMED_VERDICTS_SQL)
            rows += [(n, t, Failure(t, code, verdict=True, since=at)) for n, t, code, at in cur.fetchall()
                     if t != fail_slow.PROBE_TEST]
            rows += [(n, fail_slow.PROBE_TEST, Failure(fail_slow.PROBE_TEST, SLOW, SLOW_ACTION, since=s.since))
                     for n, s in fail_slow.slow_nodes(cur, now=now, window=slow_window,
                                                      spacing=slow_spacing).items() if s.failing]
    finally:
        conn.close()
    for node, test, failure in sorted(rows, key=lambda r: (r[0], r[1], r[2].code)):
        if test in tests:
            out.setdefault(node, []).append(failure)
    return out


def healthy(connect: Any, nodes: Iterable[str], tests: Sequence[str]) -> set[str]:
    """Of ``nodes``, those whose every enabled test last executed ``pass`` with no verdict left."""
    nodes = sorted(set(nodes))
    if not nodes:
        return set()
    conn = database.connector(connect)()
    try:
        with conn.cursor() as cur:
            cur.execute(LATEST_SQL, (nodes,))
            status = {(n, t): s for n, t, s in cur.fetchall()}
            cur.execute(VERDICT_NODES_SQL, (nodes,))
            flagged = {r[0] for r in cur.fetchall()}
    finally:
        conn.close()
    return {n for n in nodes if n not in flagged and all(status.get((n, t)) == Status.PASS for t in tests)}


@dataclasses.dataclass(frozen=True)
class Records:
    """What the transitions say: the repeat offenders now, the nodes in quarantine by our records
    (quarantined, not released since), and the past transitions of the nodes asked about."""

    offenders: dict[str, RepeatOffender]
    in_quarantine: dict[str, Transition]
    past: dict[str, list[Transition]]


def records(connect: Any, nodes: Iterable[str], *, since: dt.datetime) -> Records:
    """The transitions quarantine decides by, in one snapshot: ``past`` holds those of ``nodes`` at or after
    ``since`` (the repeat-offender window)."""
    conn = database.connector(connect)()
    try:
        with conn.cursor() as cur:
            return Records(transitions.repeat_offenders(cur), transitions.in_quarantine(cur),
                           transitions.of_nodes(cur, nodes, since=since))
    finally:
        conn.close()
