"""The hand-off's outbox: documents for the ticketing/RMA webhook, kept in ``handoff_outbox``
(migration 0012) until the webhook took them — the spool pattern, in the results database.

``enqueue`` writes documents (one row per idempotency key: the same document written again is kept once);
``due`` hands the sender the documents whose next try has come, one at a time, each locked for this sender
(``FOR UPDATE SKIP LOCKED``: two drains at once never post the same document) while it posts it; ``sent`` and
``failed`` write down what the post did, in that same transaction. A document stays until it is sent: nothing is lost while the webhook is down.

Parametrized SQL only.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Iterator, Sequence
from typing import Any

from cluster_doctor.domain.handoff import Document, Evidence
from cluster_doctor.domain.nodes import validate_node_name
from cluster_doctor.store import database, transitions

TABLE = "handoff_outbox"
MAX_ERROR = 500
ENQUEUE_SQL = f"""
INSERT INTO {TABLE} (idempotency_key, node_name, kind, document, created_at, next_try_at)
SELECT * FROM unnest(%(keys)s::text[], %(nodes)s::text[], %(kinds)s::text[], %(documents)s::jsonb[],
                     %(now)s::timestamptz[], %(now)s::timestamptz[])
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING idempotency_key
"""
DUE_SQL = f"""
SELECT id, idempotency_key, node_name, kind, document, tries FROM {TABLE}
 WHERE sent_at IS NULL AND next_try_at <= %(now)s AND id <> ALL(%(taken)s)
 ORDER BY next_try_at, id LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED
"""
SENT_SQL = f"UPDATE {TABLE} SET sent_at = %(now)s, tries = tries + 1, last_error = NULL WHERE id = %(id)s"
FAILED_SQL = f"""
UPDATE {TABLE} SET tries = tries + 1, last_error = %(error)s, next_try_at = %(next)s WHERE id = %(id)s
"""
PENDING_SQL = f"SELECT count(*), min(created_at) FROM {TABLE} WHERE sent_at IS NULL"
SENT_COUNT_SQL = f"SELECT count(*) FROM {TABLE} WHERE sent_at IS NOT NULL"
EVIDENCE_SQL = """
SELECT node_name, test_name, status, finished_at, reason, action, checks, metrics, gpu_model
  FROM validation_latest
 WHERE node_name = ANY(%(nodes)s) AND test_name = ANY(%(tests)s) AND status IS NOT NULL
 ORDER BY node_name, test_name
"""


@dataclasses.dataclass(frozen=True)
class Pending:
    """A document the sender holds (its row locked until the batch ends)."""

    id: int
    key: str
    node_name: str
    kind: str
    document: dict[str, Any]
    tries: int

    def payload(self) -> bytes:
        return Document(self.key, self.node_name, self.kind, self.document).payload()


@dataclasses.dataclass(frozen=True)
class OutboxState:
    waiting: int
    oldest: dt.datetime | None
    sent: int


def enqueue(connect: Any, documents: Sequence[Document], *, now: dt.datetime) -> list[str]:
    """Write the documents not written before; the keys of those new."""
    unique = {d.key: d for d in documents}
    if not unique:
        return []
    items = list(unique.values())
    params = {"keys": [d.key for d in items], "nodes": [validate_node_name(d.node_name) for d in items],
              "kinds": [d.kind for d in items],
              "documents": [json.dumps(dict(d.body), sort_keys=True, default=str) for d in items],
              "now": [now] * len(items)}
    with database.connector(connect)() as conn, conn.cursor() as cur:
        cur.execute(ENQUEUE_SQL, params)
        new = [r[0] for r in cur.fetchall()]
        conn.commit()
    return sorted(new)


class Taken:
    """One due document, its row locked by the open transaction; ``sent``/``failed`` write its outcome."""

    def __init__(self, cur: Any, item: Pending):
        self._cur = cur
        self.item = item

    def sent(self, now: dt.datetime) -> None:
        self._cur.execute(SENT_SQL, {"id": self.item.id, "now": now})

    def failed(self, error: str, next_try_at: dt.datetime) -> None:
        self._cur.execute(FAILED_SQL, {"id": self.item.id, "error": error[:MAX_ERROR], "next": next_try_at})


def due(connect: Any, *, now: dt.datetime, limit: int = 100) -> Iterator[Taken]:
    """The documents whose next try has come (at most ``limit``), one at a time, each in a transaction of its
    own that holds its row while the caller posts it and commits what the caller wrote down: a post that
    succeeded is marked sent at once, and two drains at once never post the same document."""
    taken: list[int] = []  # each document at most once per call, whatever the caller wrote down
    with database.connector(connect)() as conn:
        for _ in range(limit):
            with conn.cursor() as cur:
                cur.execute(DUE_SQL, {"now": now, "limit": 1, "taken": taken})
                row = cur.fetchone()
                if row is None:
                    conn.commit()
                    return
                i, key, node, kind, doc, tries = row
                taken.append(i)
                try:
                    yield Taken(cur, Pending(i, key, node, kind, doc if isinstance(doc, dict) else json.loads(doc),
                                             tries))
                finally:
                    conn.commit()


def state(cur: Any) -> OutboxState:
    """What waits in the outbox (an open cursor)."""
    cur.execute(PENDING_SQL)
    row = cur.fetchone()
    waiting, oldest = (tuple(row.values()) if isinstance(row, dict) else tuple(row))
    cur.execute(SENT_COUNT_SQL)
    row = cur.fetchone()
    sent = (tuple(row.values()) if isinstance(row, dict) else tuple(row))[0]
    return OutboxState(int(waiting), oldest, int(sent))


def facts(connect: Any, nodes: Sequence[str], tests: Sequence[str]) -> dict[str, tuple[list[Evidence], list[str]]]:
    """What a document says of each node: the latest executed result of every enabled suite, and its
    transitions (one line each, oldest first)."""
    names = sorted({validate_node_name(n) for n in nodes})
    out: dict[str, tuple[list[Evidence], list[str]]] = {n: ([], []) for n in names}
    with database.connector(connect)() as conn, conn.cursor() as cur:
        cur.execute(EVIDENCE_SQL, {"nodes": names, "tests": list(tests)})
        for node, test, status, finished, reason, action, checks, metrics, model in cur.fetchall():
            checks = json.loads(checks) if isinstance(checks, str) else checks
            metrics = json.loads(metrics) if isinstance(metrics, str) else metrics
            out[node][0].append(Evidence(test, status, finished, reason, action, tuple(checks or ()),
                                         metrics if isinstance(metrics, dict) else None, model))
        for node in names:
            out[node][1].extend(t.line() for t in transitions.timeline(cur, node, limit=50))
    return out
