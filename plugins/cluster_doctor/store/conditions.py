"""Node conditions, what the results say: the latest executed result of each enabled suite per node."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from cluster_doctor.domain.conditions import Latest
from cluster_doctor.store import database

LATEST_SQL = """
SELECT node_name, test_name, status, finished_at, checks, action, reason
  FROM validation_latest
 WHERE test_name = ANY(%s) AND status IS NOT NULL
"""


def latest_by_node(connect: Any, tests: Sequence[str]) -> dict[str, list[Latest]]:
    """node -> the latest executed (pass/fail/error) result of each enabled test it has one of."""
    conn = database.connector(connect)()
    try:
        with conn.cursor() as cur:
            cur.execute(LATEST_SQL, (list(tests),))
            rows = cur.fetchall()
    finally:
        conn.close()
    out: dict[str, list[Latest]] = {}
    for node, test, status, finished, checks, action, reason in rows:
        if isinstance(checks, str):  # json (not jsonb) may come back as text, depending on the loader
            checks = json.loads(checks)
        out.setdefault(node, []).append(Latest(test, status, finished, tuple(checks or ()), action, reason))
    return out
