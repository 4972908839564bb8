"""What the planner reads from the results DB (``store.plan_inputs``), for the DAG and the CLI alike."""

from __future__ import annotations

import datetime as dt

from cluster_doctor.store import plan_inputs, reservations

NOW = dt.datetime(2026, 11, 22, 12, tzinfo=dt.UTC)


def test_a_passing_pair_with_a_verdict_reads_as_failing_and_only_the_asked_pairs_come_back(store):
    store.record([{"node_name": n, "test_name": t, "status": "pass", "run_id": "r0",
                   "finished_at": (NOW - dt.timedelta(days=1)).isoformat()}
                  for n in ("gpu-001", "gpu-002") for t in ("gpu_health", "nccl_loopback")])
    with store.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT history_id FROM validation_pair_state WHERE node_name = 'gpu-002' "
                    "AND test_name = 'nccl_loopback'")
        cur.execute("INSERT INTO validation_verdicts (history_id, node_name, test_name, metric, kind, value) "
                    "VALUES (%s, 'gpu-002', 'nccl_loopback', 'nccl_busbw_gbps', 'drift', 400)", (cur.fetchone()[0],))
        conn.commit()
    latest = plan_inputs.latest(store, ["gpu-002", "gpu-003"], ["gpu_health", "nccl_loopback"])
    assert [(r.node_name, r.test_name, r.status, r.last_attempt_status) for r in latest.rows] == [
        ("gpu-002", "gpu_health", "pass", "pass"), ("gpu-002", "nccl_loopback", "fail", "pass")]
    assert plan_inputs.latest(store, [], ["gpu_health"]).rows == []


def test_reserved_lists_the_open_reservations(store):
    for node in ("gpu-002", "gpu-001", "gpu-003"):
        reservations.opened(store.connect, node, gpu_count=8, run_id="r0", at=NOW)
    reservations.closed(store.connect, "gpu-003", reason="validated", at=NOW + dt.timedelta(hours=1), free=True)
    assert plan_inputs.reserved(store.connect) == ["gpu-001", "gpu-002"]
