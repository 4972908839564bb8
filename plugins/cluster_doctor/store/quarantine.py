"""Node quarantine, what the results say: confirmed failures, and nodes healthy again."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from cluster_doctor.domain.quarantine import Failure
from cluster_doctor.domain.status import Status
from cluster_doctor.store import database

# ---------------------------------------------------------------------------- what the results say
CONFIRMED_FAILURES_SQL = """
SELECT s.node_name, s.test_name, s.checks, s.action
  FROM validation_pair_state s
 WHERE s.status = 'fail'
   AND (SELECT count(*) FROM validation_history h
         WHERE h.node_name = s.node_name AND h.test_name = s.test_name
           AND h.status IN ('pass', 'fail', 'error') AND h.finished_at >= s.status_since) >= 2
"""
CONFIRMED_VERDICTS_SQL = """
SELECT node_name, test_name, kind || ':' || metric FROM validation_latest_verdicts WHERE confirmed
"""
LATEST_SQL = "SELECT node_name, test_name, status FROM validation_pair_state WHERE node_name = ANY(%s)"
VERDICT_NODES_SQL = "SELECT DISTINCT node_name FROM validation_latest_verdicts WHERE node_name = ANY(%s)"


def _failed_checks(checks: Any) -> str:
    names = sorted({c.get("name") for c in checks or [] if isinstance(c, dict) and c.get("status") == "fail"
                    and isinstance(c.get("name"), str)})
    return ",".join(names) or "fail"


def confirmed_failures(connect: Any, tests: Sequence[str]) -> dict[str, list[Failure]]:
    """node -> its confirmed failures among the enabled tests, each with the latest result's recommended
    action (None: unknown), and the confirmed verdicts."""
    conn = database.connector(connect)()
    out: dict[str, list[Failure]] = {}
    try:
        with conn.cursor() as cur:
            cur.execute(CONFIRMED_FAILURES_SQL)
            rows = [(n, t, Failure(t, _failed_checks(c), action)) for n, t, c, action in cur.fetchall()]
            cur.execute(CONFIRMED_VERDICTS_SQL)
            rows += [(n, t, Failure(t, code, verdict=True)) for n, t, code in cur.fetchall()]
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
