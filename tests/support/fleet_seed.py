"""Deterministic results-DB content for the fleet page, metrics and browser tests.

``small_fleet`` is a hand-made fleet whose every figure a test can predict; ``bulk_fleet`` fills a
5,000-node fleet quickly (one multi-row INSERT with the state triggers off, then the rebuild
function the migration ships), for the size and paging tests.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import psycopg
from cluster_doctor.domain import suites
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.store.history import ResultStore

from tests import clock

# Relative to the clock (tests/clock.py), never a fixed date: the metrics exporter, the fleet page and the
# CLI read the real clock, and a seed the calendar leaves behind goes stale under them.
NOW = clock.now()
TESTS = ["gpu_health", "dl_unit", "nccl_loopback", "storage_fio"]
DAG_ID = "continuous_validation"
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
XSS_REASON = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2"> nccl busbw 12.5 < 460 GB/s'

# Values a key metric gets on a healthy node of each model (the figure tests assert them back).
FIGURES = {
    "gpus_visible": 8,
    "xid_events": 0,
    "gemm_bf16_tflops_min": 731.5,
    "mem_bw_gbps_min": 2950.0,
    "nccl_busbw_gbps": 472.25,
    "fio_seq_read_mibps": 5120.0,
    "fio_seq_write_mibps": 3072.0,
    "fio_rand_read_iops": 250000.0,
    "fio_rand_write_iops": 120000.0,
    "probe_gemm_tflops_min": 728.0,  # gpu_health's speed probe
    "probe_hbm_gbps_min": 2940.0,
}


def key_metrics(test: str, scale: float = 1.0) -> dict[str, Any]:
    return {k: (FIGURES.get(k, 1.0) * scale if k not in ("gpus_visible", "xid_events") else FIGURES[k])
            for k in suites.CATALOG[test].key_metrics}


def attempt(node: str, test: str, status: str, finished: dt.datetime, *, reason: str | None = None,
            gpu_model: str = H100, gpu_count: int | None = 8, duration_s: float | None = 600.0,
            map_index: int = 0, metrics: dict | None = None, try_number: int = 1,
            checks: list | None = None) -> Attempt:
    executed = status in ("pass", "fail", "error")
    if checks is None:
        checks = [{"name": f"{test}.check", "status": "fail" if status == "fail" else "pass"}] if executed else []
    return Attempt(
        node_name=node, test_name=test, status=status,
        started_at=finished - dt.timedelta(seconds=duration_s or 0) if duration_s is not None else None,
        finished_at=finished, duration_s=duration_s,
        metrics=(metrics if metrics is not None else key_metrics(test)) if executed else {},
        checks=checks,
        reason=reason or (f"{test}: all checks passed" if status == "pass" else status),
        log_path=f"/data/continuous_validation/{test}/{node}/{test}_{node}_{int(finished.timestamp())}.log",
        pod_name=f"cd-{test.replace('_', '-')}-{node}", gpu_model=gpu_model, gpu_count=gpu_count,
        suite_version="sha256:0123456789abcdef", dag_id=DAG_ID,
        run_id=f"scheduled__{(finished - dt.timedelta(hours=1)).strftime('%Y-%m-%dT%H:00:00+00:00')}",
        map_index=map_index, try_number=try_number,
    )


# A check that could not run: its pass is incomplete, never shown as a clean one.
NOT_RUN = {"name": "dcgm_diag", "status": "skip", "code": "DCGM_UNAVAILABLE", "action": "none",
           "message": "no DCGM host engine reachable"}


def small_fleet(store: ResultStore, now: dt.datetime = NOW) -> dict[str, Any]:
    """Eight nodes with one story each; returns what the tests should see."""
    h = dt.timedelta(hours=1)
    d = dt.timedelta(days=1)
    rows: list[Attempt] = []

    def all_pass(node, when, model=H100, **kw):
        for i, test in enumerate(TESTS):
            rows.append(attempt(node, test, "pass", when - i * dt.timedelta(minutes=5), gpu_model=model,
                                map_index=i, **kw))

    all_pass("gpu-001", now - 2 * h)                                     # healthy
    all_pass("gpu-002", now - 3 * h, model=A100)                         # healthy, other model
    all_pass("gpu-003", now - 5 * d)                                     # failing nccl since 1 h
    rows.append(attempt("gpu-003", "nccl_loopback", "fail", now - h, reason=XSS_REASON, map_index=7,
                        metrics={"nccl_busbw_gbps": 12.5}))
    all_pass("gpu-004", now - 6 * h)                                     # dl_unit errored
    rows.append(attempt("gpu-004", "dl_unit", "error", now - 30 * dt.timedelta(minutes=1),
                        reason="dl_unit: CUDA OOM in the attention test", map_index=3))
    all_pass("gpu-005", now - 10 * d)                                    # all stale (older than 7 d)
    for i, test in enumerate(TESTS):                                     # never executed: timeouts only
        rows.append(attempt("gpu-006", test, "timeout", now - 4 * h, duration_s=None, map_index=i,
                            reason="pod Pending for 20 min: Insufficient nvidia.com/gpu"))
    rows.append(attempt("gpu-010", "gpu_health", "pass", now - 2 * h,   # only one test ever ran, and a
                        checks=[{"name": "gpu_health.check", "status": "pass"}, NOT_RUN]))  # check of it did not
    all_pass("gpu-011", now - 1 * h)                                     # healthy, then preempted
    rows.append(attempt("gpu-011", "storage_fio", "preempted", now - 10 * dt.timedelta(minutes=1),
                        duration_s=120.0, reason="a user pod claimed the node", try_number=2))
    store.record(rows)
    hours = sum((a.duration_s or 0) * (a.gpu_count or 0) for a in rows
                if a.status in ("pass", "fail", "error", "preempted") and a.finished_at >= now - 7 * d
                and a.duration_s is not None) / 3600
    return {
        "nodes": ["gpu-001", "gpu-002", "gpu-003", "gpu-004", "gpu-005", "gpu-006", "gpu-010", "gpu-011"],
        "covered": ["gpu-001", "gpu-002", "gpu-003", "gpu-004", "gpu-011"],
        "never": ["gpu-006"],
        "failing": ["gpu-003", "gpu-004"],
        "gpu_hours_7d": hours,
        "attempts": rows,
    }


def plot_history(store: ResultStore, now: dt.datetime = NOW) -> list[Attempt]:
    """Older executed attempts of small_fleet's nodes for the node page's plots: every 3 days from 11
    to 41 days ago (older than every node's latest result, so the fleet page's figures stay those of
    small_fleet), values within a deterministic +-3 % of FIGURES. gpu-003's dl_unit failed 20 days ago
    (GEMM at 60 %) and passed again from 17 days ago: a red and a green status change on its plots."""
    models = {"gpu-001": H100, "gpu-002": A100, "gpu-003": H100, "gpu-004": H100, "gpu-005": H100,
              "gpu-011": H100}
    rows = []
    for node, model in models.items():
        for days in range(11, 42, 3):
            for i, test in enumerate(TESTS):
                noise = random.Random(f"{node}/{test}/{days}").uniform(-0.03, 0.03)
                status = "fail" if (node, test, days) == ("gpu-003", "dl_unit", 20) else "pass"
                metrics = key_metrics(test, 0.6 if status == "fail" else 1 + noise)
                rows.append(attempt(node, test, status, now - dt.timedelta(days=days, minutes=5 * i), gpu_model=model,
                                    map_index=i, metrics=metrics,
                                    reason="dl_unit: GEMM 438.9 TFLOPS below the floor" if status == "fail" else None))
    store.record(rows)
    return rows


def bulk_fleet(dsn: dict, n_nodes: int = 5000, now: dt.datetime = NOW) -> list[str]:
    """n_nodes x 4 tests, one attempt each (every 50th node failing nccl, every 7th stale)."""
    names = [f"gpu-{i:04d}" for i in range(1, n_nodes + 1)]
    rows = []
    for i, node in enumerate(names, start=1):
        for j, test in enumerate(TESTS):
            status = "fail" if (i % 50 == 0 and test == "nccl_loopback") else "pass"
            age = dt.timedelta(days=9) if i % 7 == 0 else dt.timedelta(hours=1 + (i % 24))
            a = attempt(node, test, status, now - age - j * dt.timedelta(minutes=3),
                        gpu_model=H100 if i % 3 else A100, map_index=j,
                        reason=("nccl_loopback: bus bandwidth 401.2 GB/s below the 460 GB/s floor "
                                "for NVIDIA H100 80GB HBM3 (10 % tolerance); transport NET/IB, 8 ranks")
                        if status == "fail" else None)
            rows.append(a.row())
    conn = psycopg.connect(**dsn)
    try:
        with conn.cursor() as cur:
            # The per-row state trigger is the slow part of a 20,000-row load; rebuild once instead.
            cur.execute("SET session_replication_role = replica")
            cur.executemany(
                f"INSERT INTO validation_history ({', '.join(Attempt.COLUMNS)}) "
                f"VALUES ({', '.join(['%s'] * len(Attempt.COLUMNS))})", rows)
            cur.execute("SET session_replication_role = DEFAULT")
            cur.execute("SELECT cluster_doctor_rebuild_pair_state()")
            cur.execute("SELECT cluster_doctor_inventory_from_history()")  # the nodes, as the trigger adds them
        conn.commit()
    finally:
        conn.close()
    return names


def peer_test(a: str, b: str, status: str, hours_ago: float) -> list[Attempt]:
    """One peer test between a and b, ended hours_ago: the attempt of each side, naming the other."""
    at = NOW - dt.timedelta(hours=hours_ago)
    return [Attempt(node_name=n, test_name="fabric_peer", status=status, peer=p, finished_at=at, gpu_model="H100",
                    dag_id="continuous_validation", run_id=f"r{hours_ago}") for n, p in ((a, b), (b, a))]
