"""Backfill re-validates a node range progressively: each run of the backfill takes the next stalest
pairs of the range whose last executed result is older than stale_before, so N runs cover the range
without repeats."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import dag_runner
import psycopg
import pytest
from cluster_doctor.store.history import ResultStore

from tests.support.suite_results import script_result, validation_pods

pytestmark = pytest.mark.e2e


# make test-slow (three DagRuns): covered fast by domain/planning/test_due.py (stale_before, stalest first, the
# cap) and kube/test_against_emulator.py (the node range)
@pytest.mark.slow
def test_backfill_runs_walk_the_range_without_repeats(runner, cluster, db_dsn, db_url):
    now = dt.datetime.now(dt.UTC)
    nodes = [f"gpu-{i:03d}" for i in range(1, 9)]
    for node in nodes:
        cluster.add_gpu_node(node)
        script_result(cluster, node)
    # every node validated two days ago (fresh by the 7-day rule); the driver upgrade was an hour ago
    ResultStore(db_url).record([{"node_name": n, "test_name": "gpu_health", "status": "pass", "run_id": "before",
                                 "finished_at": now - dt.timedelta(days=2, minutes=i)} for i, n in enumerate(nodes)])
    conf = {"node_range": "gpu-[001-004]", "stale_before": (now - dt.timedelta(hours=1)).isoformat(), "max_pairs": 2}
    first_date = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)

    covered = []
    for hour in range(3):
        result = runner.run(conf, logical_date=first_date + dt.timedelta(hours=hour))
        assert result["state"] == "success"
        with psycopg.connect(**db_dsn) as conn, conn.cursor() as cur:
            cur.execute("SELECT node_name FROM validation_history WHERE run_id = %s ORDER BY 1", (result["run_id"],))
            covered.append([r[0] for r in cur.fetchall()])

    # the stalest of the range first (gpu-004 was validated earliest in it; gpu-005..008, staler still, are
    # outside it), two per run, no repeats, then nothing
    assert covered == [["gpu-003", "gpu-004"], ["gpu-001", "gpu-002"], []]
    assert sorted(p["node"] for p in validation_pods(cluster)) == nodes[:4]


def test_the_documented_backfill_command_validates_its_conf(airflow_home):
    env = dag_runner.airflow_env(airflow_home)
    dag_runner.airflow(env, "dags", "reserialize")
    good = json.dumps({"node_range": "gpu-[001-064]", "stale_before": "2026-11-21T00:00:00Z"})
    base = [str(dag_runner.pathlib.Path(sys.executable).with_name("airflow")), "backfill", "create",
            "--dag-id", "continuous_validation", "--from-date", "2026-11-20T00:00:00", "--to-date",
            "2026-11-20T02:00:00", "--max-active-runs", "1", "--dry-run", "--dag-run-conf"]
    ok = subprocess.run([*base, good], env=env, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "2026-11-20 02:00:00" in ok.stdout, ok.stderr[-2000:]
    bad = subprocess.run([*base, json.dumps({"max_pairs": "many"})], env=env, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode != 0 and "many" in (bad.stdout + bad.stderr)
