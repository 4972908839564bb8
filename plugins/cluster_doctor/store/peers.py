"""Peer tests, stored: the recent peer-test rows of ``validation_history`` (suite
``fabric_peer``, ``peer`` set by migration 0007) as ``domain.peers.PeerResult``, for ``match_peers`` (the
DAG) and ``triangulate`` (the fleet page, the node page, ``cluster-doctor status``, the metrics).

The verdicts (``pass``, ``fail``, ``suspect``) are not stored: they are judged from these rows each time,
so a new result re-judges every node it touches (a third node's pass exonerates the other side).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from cluster_doctor.domain.nodes import validate_node_name
from cluster_doctor.domain.peers import PEER_SUITE, PeerResult, PeerVerdict, triangulate
from cluster_doctor.domain.status import EXECUTED

# How far back the evidence reaches, in peer cadences: a node tested every cadence has about this many
# results to triangulate by; older ones no longer say much about today's fabric.
EVIDENCE_CADENCES = 4


def evidence_since(settings: Any, now: dt.datetime) -> dt.datetime:
    """The oldest peer-test row that still counts (``EVIDENCE_CADENCES`` × ``peer_cadence_days``)."""
    return now - dt.timedelta(days=EVIDENCE_CADENCES * float(settings.peer_cadence_days))


def _cursor_of(conn_or_cur: Any) -> tuple[Any, bool]:
    if hasattr(conn_or_cur, "execute") and hasattr(conn_or_cur, "fetchall"):
        return conn_or_cur, False
    return conn_or_cur.cursor(), True


_PEER_ROWS = ("SELECT node_name, peer, status, finished_at, gpu_model FROM validation_history "
              " WHERE test_name = %(suite)s AND peer IS NOT NULL AND status = ANY(%(executed)s) "
              "   AND finished_at >= %(since)s")
# The rows of the given nodes and of every node they were tested with: what judging the given nodes needs
# (whether a peer of theirs passed with a third node is in that peer's rows).
_NEAR_ROWS = (f"WITH near AS (SELECT unnest(%(nodes)s::text[]) AS name "
              f"             UNION SELECT peer FROM ({_PEER_ROWS}) mine WHERE node_name = ANY(%(nodes)s)) "
              f"SELECT * FROM ({_PEER_ROWS}) h "
              " WHERE h.node_name IN (SELECT name FROM near) OR h.peer IN (SELECT name FROM near)")


def peer_results(conn: Any, *, since: dt.datetime, nodes: Iterable[str] | None = None) -> list[PeerResult]:
    """The executed peer-test rows finished at or after ``since``, oldest first. With ``nodes``, only the
    rows of those nodes and of every node they were tested with (two hops: enough to judge the given
    nodes pass / suspect / blamed; a node exonerated because its every failing peer is blamed needs a
    third hop, and reads as suspect then). ``conn``: an open connection or cursor."""
    if since.tzinfo is None:
        raise ValueError("since must be time-zone aware")
    params: dict[str, Any] = {"suite": PEER_SUITE, "executed": [str(s) for s in EXECUTED], "since": since}
    sql = _PEER_ROWS
    if nodes is not None:
        params["nodes"] = sorted({validate_node_name(n) for n in nodes})
        if not params["nodes"]:
            return []
        sql = _NEAR_ROWS
    sql += " ORDER BY finished_at, node_name, peer"
    cur, close = _cursor_of(conn)
    try:
        cur.execute(sql, params)
        rows = cur.fetchall()
    finally:
        if close:
            cur.close()
    out = []
    for row in rows:
        node, peer, status, finished_at, model = (row[k] for k in (
            "node_name", "peer", "status", "finished_at", "gpu_model")) if isinstance(row, Mapping) else row
        out.append(PeerResult(node, peer, str(status), finished_at, model))
    return out


def model_sizes(conn: Any) -> dict[str, int]:
    """GPU nodes per model, from the inventory of discovered GPU nodes (``gpu_node_inventory``), for
    ``triangulate``'s "no third node of this model"."""
    cur, close = _cursor_of(conn)
    try:
        cur.execute("SELECT gpu_model, count(*) FROM gpu_node_inventory WHERE gpu_model IS NOT NULL AND gone_at IS NULL GROUP BY 1")
        rows = cur.fetchall()
    finally:
        if close:
            cur.close()
    return {(r["gpu_model"] if isinstance(r, Mapping) else r[0]): int(r["count"] if isinstance(r, Mapping) else r[1])
            for r in rows}


def peer_verdicts(conn: Any, *, settings: Any, now: dt.datetime) -> dict[str, PeerVerdict]:
    """Every peer-tested node's verdict from the evidence window (``evidence_since``)."""
    return triangulate(peer_results(conn, since=evidence_since(settings, now)), model_sizes=model_sizes(conn))
