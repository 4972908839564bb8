"""An outage of the results DB longer than every retry of the record task, in two DagRuns in a row:
both runs fail loudly, their attempts wait in the spool, and the first run after the database is back
records every one of them exactly once (real DAG, real PostgreSQL behind a switchable TCP proxy).

Slow by nature: each failed run spends the record task's whole retry budget (about 3.6 min)."""

from __future__ import annotations

import threading

import psycopg
import pytest
from cluster_doctor.store import spool
from cluster_doctor.store.history import ResultStore

from tests.support.suite_results import script_result, validation_pods
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # ~8 min; the task-level outage test runs in make test


def history(db_dsn):
    with psycopg.connect(**db_dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT run_id, node_name, status FROM validation_history ORDER BY run_id, node_name")
        return cur.fetchall()


def test_an_outage_through_every_retry_of_two_runs_loses_no_attempt(runner, cluster, db_dsn, db_url):
    if str(db_dsn.get("host", "")).startswith("/"):
        pytest.skip("needs a TCP PostgreSQL (CI has one)")
    proxy = TcpProxy(db_dsn.get("host", "127.0.0.1"), int(db_dsn.get("port", 5432)))
    runner.db_url = f"postgresql://{db_dsn.get('user', 'postgres')}@127.0.0.1:{proxy.port}/{db_dsn['dbname']}"
    box = spool.Spool()  # the test's private spool (CLUSTER_DOCTOR_SPOOL_DIR), inherited by the DagRuns
    runner.env_overrides["CLUSTER_DOCTOR_MAX_PAIRS_PER_RUN"] = "2"
    for node in ("gpu-001", "gpu-002", "gpu-003", "gpu-004"):
        cluster.add_gpu_node(node)
        script_result(cluster, node)

    def outage_from_the_first_pod(pods_before: int):
        # load_latest has read the database by then; it stays down through the record task's retries
        cluster.wait_for(lambda: len(validation_pods(cluster)) > pods_before, timeout=900, message="a validation pod")
        proxy.down()

    runs = []
    try:
        for _ in range(2):
            proxy.up()
            thread = threading.Thread(target=outage_from_the_first_pod, args=(len(validation_pods(cluster)),),
                                      daemon=True)
            thread.start()
            runs.append(runner.run(timeout=900))
            thread.join(5)
            assert runs[-1]["state"] == "failed", runner.last_log[-3000:]  # the run that could not record fails
            assert runs[-1]["states"][("record", -1)] == "failed"
            assert "spooled to" in runner.last_log
        assert len(box) >= 4
        proxy.up()
        assert history(db_dsn) == []
        third = runner.run(timeout=600)  # its record task replays the spool before its own attempts
    finally:
        proxy.close()

    assert third["state"] == "success", runner.last_log[-3000:]
    assert len(box) == 0
    recorded = history(db_dsn)
    first, second = runs[0]["run_id"], runs[1]["run_id"]
    of = lambda run_id: sorted((n, s) for r, n, s in recorded if r == run_id)  # noqa: E731
    assert len(of(first)) == 2 and len(of(second)) == 2
    assert all(s == "pass" for _, s in of(first) + of(second))
    # every attempt of both runs exactly once
    assert len({(r, n) for r, n, _ in recorded}) == len(recorded)
    assert {r for r, _, _ in recorded} <= {first, second, third["run_id"]}
    assert ResultStore(db_url).check_latest() == []
    latest = ResultStore(db_url).latest()
    assert {r["node_name"] for r in latest} == {n for _, n, _ in recorded}
    assert all(r["status"] == "pass" for r in latest)
