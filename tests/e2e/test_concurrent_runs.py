"""Two DagRuns of the real DAG at once (a backfill run beside the hourly one): both
plan from the same validation_latest, and the run-to-run claims in the results DB make them split the
free nodes instead of validating the same ones."""

from __future__ import annotations

import datetime as dt
import shutil
import threading
import time

import psycopg
import pytest
from cluster_doctor.store import claims, database

from tests.e2e.conftest import Runner
from tests.support.suite_results import script_result, validation_pods

# make test-slow (two DagRuns at once, then three in a row): in make test, the stack test's overlapping
# runs (a real scheduler) never validate or hold the same node, and the claims' own tests
# (store/test_claims.py) cover concurrent runs and a run that ended without releasing.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _waiting_for_claims(cur) -> int:
    cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
    return cur.fetchone()[0]


def test_overlapping_runs_never_validate_the_same_node(runner, cluster, db_dsn, db_url, airflow_template, tmp_path):
    nodes = [f"gpu-{i:03d}" for i in range(1, 7)]
    for node in nodes:
        cluster.add_gpu_node(node)
        script_result(cluster, node)
    home = tmp_path / "airflow-2"  # a second Airflow beside the first, same cluster and results DB
    home.mkdir()
    shutil.copy(airflow_template / "airflow.db", home / "airflow.db")
    runners = {"hourly": runner, "backfill": Runner(home, cluster, db_url)}
    dates = {"hourly": dt.datetime(2026, 11, 22, 10, tzinfo=dt.UTC), "backfill": dt.datetime(2026, 11, 20, 3, tzinfo=dt.UTC)}
    results: dict[str, dict] = {}
    errors: list[BaseException] = []

    def run(name):
        try:
            results[name] = runners[name].run({"max_pairs": 3}, logical_date=dates[name])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    # The test holds the claims lock until both runs wait for it in prioritize: both have read the
    # same (empty) history and planned gpu-001..003, the duplicate plan the issue saw. Only the
    # claims stand between them and validating the same nodes.
    gate = psycopg.connect(**db_dsn, autocommit=True)
    gate.execute("SELECT pg_advisory_lock(%s)", (claims.LOCK_KEY,))
    threads = [threading.Thread(target=run, args=(name,)) for name in runners]
    for t in threads:
        t.start()
    try:
        with psycopg.connect(**db_dsn, autocommit=True) as watch, watch.cursor() as cur:
            while _waiting_for_claims(cur) < 2:
                assert not errors and all(t.is_alive() for t in threads), \
                    f"a run ended before it claimed: {errors or [r['state'] for r in results.values()]}"
                time.sleep(0.2)
    finally:
        gate.close()  # releases the lock: the runs claim one after the other
    for t in threads:
        t.join(timeout=360)
    assert not errors, errors

    for name, result in results.items():
        assert result["state"] == "success", (name, runners[name].last_log[-3000:])
    ran = {}
    with psycopg.connect(**db_dsn) as conn, conn.cursor() as cur:
        for name, result in results.items():
            cur.execute("SELECT node_name, test_name, status FROM validation_history WHERE run_id = %s ORDER BY 1",
                        (result["run_id"],))
            ran[name] = cur.fetchall()
        cur.execute("SELECT node_name, test_name, count(*) FROM validation_history GROUP BY 1, 2 HAVING count(*) > 1")
        assert cur.fetchall() == [], "a pair was recorded more than once"
    first, second = sorted(runners, key=lambda name: len(results[name]["summary"]["deferred"]))
    # whoever claimed first kept the top three; the other deferred exactly those and took the next three
    assert [r[0] for r in ran[first]] == nodes[:3] and [r[0] for r in ran[second]] == nodes[3:]
    assert all(status == "pass" for run_rows in ran.values() for _, _, status in run_rows)
    assert results[first]["summary"]["deferred"] == []
    assert [(d["node_name"], d["run_id"]) for d in results[second]["summary"]["deferred"]] == \
        [(n, results[first]["run_id"]) for n in nodes[:3]]

    # the cluster's own record: one validation pod per node, never two at once on a node
    pods = validation_pods(cluster)
    assert sorted(p["node"] for p in pods) == nodes
    by_node: dict[str, list] = {}
    for p in pods:
        by_node.setdefault(p["node"], []).append((p["created"], p["deleted_at"] or "9999", p["labels"].get("run_id")))
    for node, spans in by_node.items():
        spans.sort()
        for (_, end, run_a), (start, _, run_b) in zip(spans, spans[1:]):
            assert start >= end, f"{node}: pods of runs {run_a} and {run_b} overlapped"
    # every claim was released by its run's record task
    assert claims.live(database.params_connector(db_dsn)) == []


def test_a_run_that_ended_without_releasing_does_not_hold_its_nodes(runner, cluster, db_dsn):
    for node in ("gpu-001", "gpu-002", "gpu-003"):
        cluster.add_gpu_node(node)
        script_result(cluster, node)
    first = runner.run({"max_pairs": 1})
    assert first["state"] == "success", runner.last_log[-3000:]
    with psycopg.connect(**db_dsn) as conn:
        # the first run kept a claim (as when its record task failed for good); a run this Airflow does
        # not know (another deployment sharing the results DB) holds gpu-003
        conn.execute("INSERT INTO validation_claims VALUES ('gpu-002', 'gpu_health', 'continuous_validation', %s, "
                     "now(), now() + interval '1 hour'), ('gpu-003', 'gpu_health', 'continuous_validation', "
                     "'elsewhere', now(), now() + interval '1 hour')", (first["run_id"],))
    second = runner.run({"max_pairs": 2}, logical_date=dt.datetime(2026, 11, 21, 5, tzinfo=dt.UTC))
    assert second["state"] == "success", runner.last_log[-3000:]
    # Airflow says the first run ended: its claim is dead at once; the unknown run's claim is respected
    assert f"run {first['run_id']} ended without releasing its claim of gpu-002" in runner.last_log
    assert [d["node_name"] for d in second["summary"]["deferred"]] == ["gpu-003"]
    with psycopg.connect(**db_dsn) as conn:
        ran = conn.execute("SELECT node_name FROM validation_history WHERE run_id = %s", (second["run_id"],)).fetchall()
    assert ran == [("gpu-002",)]
    assert [(c.node_name, c.run_id) for c in claims.live(database.params_connector(db_dsn))] == [("gpu-003", "elsewhere")]
