"""Peer tests stored (migration 0007): each side's attempt names its peer; the verdicts are
judged from the recent rows; validation_latest keeps one row per (node, test)."""

import datetime as dt

import psycopg
import pytest
from cluster_doctor.domain.attempts import Attempt, InvalidAttempt
from cluster_doctor.domain.config import Settings
from cluster_doctor.store import peers

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
H100 = "NVIDIA-H100-80GB-HBM3"


def side(node, peer, status, hours, run="r"):
    return Attempt(node_name=node, test_name="fabric_peer", status=status, peer=peer, gpu_model=H100,
                   finished_at=T0 + dt.timedelta(hours=hours), dag_id="continuous_validation", run_id=f"{run}{hours}")


def both(a, b, status, hours):
    return [side(a, b, status, hours), side(b, a, status, hours)]


def test_peer_rows_are_recorded_read_back_and_triangulated(store, db_dsn):
    store.record(both("gpu-001", "gpu-002", "fail", 0) + both("gpu-001", "gpu-003", "fail", 1)
                 + both("gpu-002", "gpu-003", "pass", 2)
                 + [Attempt(node_name="gpu-001", test_name="gpu_health", status="pass", finished_at=T0,
                            run_id="own")]
                 + [side("gpu-004", "gpu-005", "timeout", 3)])  # never executed: no evidence
    with psycopg.connect(**db_dsn) as conn:
        rows = peers.peer_results(conn, since=T0 - dt.timedelta(days=1))
        assert [(r.node, r.peer, r.status) for r in rows][:2] == [("gpu-001", "gpu-002", "fail"),
                                                                  ("gpu-002", "gpu-001", "fail")]
        assert len(rows) == 6 and all(r.gpu_model == H100 for r in rows)
        assert len(peers.peer_results(conn, since=T0 + dt.timedelta(hours=2))) == 2
        found = peers.peer_verdicts(conn, settings=Settings(), now=T0 + dt.timedelta(hours=3))
        with conn.cursor() as cur:
            cur.execute("SELECT node_name, test_name, status FROM validation_latest WHERE test_name = 'fabric_peer' "
                        "ORDER BY 1")
            latest = cur.fetchall()
    assert {n: v.verdict for n, v in found.items()} == {"gpu-001": "fail", "gpu-002": "pass", "gpu-003": "pass"}
    # the latest view: still one row per (node, test); the peer of its attempt one join away
    assert latest == [("gpu-001", "fabric_peer", "fail"), ("gpu-002", "fabric_peer", "pass"),
                      ("gpu-003", "fabric_peer", "pass"), ("gpu-004", "fabric_peer", None)]
    assert store.history("gpu-001", "fabric_peer")[0]["peer"] == "gpu-003"
    # the evidence window: rows older than 4 cadences no longer count
    with psycopg.connect(**db_dsn) as conn:
        assert peers.peer_verdicts(conn, settings=Settings(), now=T0 + dt.timedelta(days=29)) == {}
    # with nodes: the rows of gpu-004 and of the nodes it was tested with (two hops), not gpu-001's others
    store.record(both("gpu-004", "gpu-002", "fail", 4))
    with psycopg.connect(**db_dsn) as conn:
        near = peers.peer_results(conn, since=T0 - dt.timedelta(days=1), nodes=["gpu-004"])
        assert {frozenset((r.node, r.peer)) for r in near} == {
            frozenset(p) for p in (("gpu-004", "gpu-002"), ("gpu-002", "gpu-001"), ("gpu-002", "gpu-003"))}
        assert peers.peer_results(conn, since=T0, nodes=[]) == []


def test_the_database_refuses_a_node_as_its_own_peer(store, db_dsn):
    with pytest.raises(InvalidAttempt, match="not its own peer"):
        side("gpu-001", "gpu-001", "pass", 0)
    with psycopg.connect(**db_dsn) as conn, conn.cursor() as cur, pytest.raises(psycopg.errors.CheckViolation):
        cur.execute("INSERT INTO validation_history (node_name, test_name, status, finished_at, peer) "
                    "VALUES ('gpu-001', 'fabric_peer', 'pass', now(), 'gpu-001')")
