"""A missing baseline is one configuration finding per node pool (GPU model), read from the latest
results: the pairs in error on a BASELINE_MISSING check, never one finding per node."""

from __future__ import annotations

import datetime as dt

from cluster_doctor.domain.baselines import ACTION
from cluster_doctor.store import baselines

NOT_JUDGED = [{"name": "baseline", "status": "skip", "code": "BASELINE_MISSING"},
              {"name": "nvbw_d2d_write_ce", "status": "skip", "code": "BASELINE_MISSING"}]


def seed(store, now: dt.datetime) -> None:
    """Three H20 nodes whose nvbandwidth and nccl_loopback could not be judged (no baseline), an H100
    node in error for another reason, an H20 node whose later run passed, gpu_health passing."""
    at = now - dt.timedelta(hours=1)
    rows = [{"node_name": n, "test_name": t, "status": "error", "run_id": f"r-{n}-{t}", "gpu_model": "NVIDIA-H20",
             "started_at": at, "finished_at": at, "checks": NOT_JUDGED,
             "reason": "not judged, no baseline for a key check"}
            for n in ("gpu-001", "gpu-002", "gpu-003") for t in ("nvbandwidth", "nccl_loopback")]
    rows += [{"node_name": "gpu-004", "test_name": "nvbandwidth", "status": "error", "run_id": "r4", "gpu_model": "H100",
              "started_at": at, "finished_at": at, "checks": [{"name": "nvbw_d2d_write_ce", "status": "error",
                                                               "code": "TOOL_OUTPUT_UNPARSEABLE"}]},
             {"node_name": "gpu-005", "test_name": "nvbandwidth", "status": "error", "run_id": "r5a",
              "gpu_model": "NVIDIA-H20", "started_at": at - dt.timedelta(hours=1), "finished_at": at - dt.timedelta(hours=1),
              "checks": NOT_JUDGED},
             {"node_name": "gpu-005", "test_name": "nvbandwidth", "status": "pass", "run_id": "r5b", "gpu_model": "NVIDIA-H20",
              "started_at": at, "finished_at": at, "checks": []},
             {"node_name": "gpu-001", "test_name": "gpu_health", "status": "pass", "run_id": "r1g", "gpu_model": "NVIDIA-H20",
              "started_at": at, "finished_at": at, "checks": [NOT_JUDGED[0]]}]
    store.record(rows)


def test_one_finding_per_node_pool_from_the_latest_results(store):
    now = dt.datetime.now(dt.UTC)
    seed(store, now)
    with store.connect() as conn, conn.cursor() as cur:
        [found] = baselines.missing(cur, ["gpu_health", "nvbandwidth", "nccl_loopback"])
        assert (found.gpu_model, found.nodes, found.tests, found.example) == (
            "NVIDIA-H20", 3, ("nccl_loopback", "nvbandwidth"), "gpu-001")
        assert found.describe().startswith("no baseline for NVIDIA-H20: 3 node(s), nccl_loopback, nvbandwidth not judged")
        assert ACTION in found.describe()
        assert baselines.missing(cur, ["gpu_health"]) == []  # a pass with the finding is no pool in error


def test_the_query_reads_the_error_pairs_through_their_index(store):
    now = dt.datetime.now(dt.UTC)
    seed(store, now)
    with store.connect() as conn, conn.cursor() as cur:
        cur.execute("SET enable_seqscan = off")
        cur.execute("EXPLAIN " + baselines.MISSING_SQL, {"tests": ["nvbandwidth"], "code": "BASELINE_MISSING"})
        plan = "\n".join(str(r[0] if not isinstance(r, dict) else next(iter(r.values()))) for r in cur.fetchall())
        assert "validation_pair_state_error_idx" in plan, plan
