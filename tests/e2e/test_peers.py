"""Peer tests between two nodes, end to end: the real DAG through Airflow, the peer launcher
against the Kubernetes API emulator, a real PostgreSQL. Both pods start (the client given the server pod's
IP) and each side's row names its peer; the nodes of the run's bundles are left out; the claims go."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.store.history import ResultStore

from tests.support.suite_results import script_result, summary, validation_pods

pytestmark = pytest.mark.e2e


def test_a_peer_test_runs_between_two_free_nodes_and_each_row_names_its_peer(runner, cluster, db_dsn, db_url):
    runner.env_overrides["CLUSTER_DOCTOR_PEER_TESTS"] = "true"
    for node in ("gpu-001", "gpu-002", "gpu-003"):
        cluster.add_gpu_node(node)
    # gpu-001 and gpu-002 are fresh for gpu_health (no bundle): free for a peer test; gpu-003 is due (its bundle)
    ResultStore(db_url).record([Attempt(node_name=n, test_name="gpu_health", status="pass", run_id="before",
                                        finished_at=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1),
                                        dag_id="continuous_validation") for n in ("gpu-001", "gpu-002")])
    script_result(cluster, "gpu-003")
    for node in ("gpu-001", "gpu-002"):  # each side runs a moment, as a real one waits for its peer
        cluster.set_script(node, "exit", exit_code=0, run_seconds=2, termination_message=summary(node, "fabric_peer"))

    result = runner.run()

    assert result["state"] == "success", runner.last_log[-4000:]
    with psycopg.connect(**db_dsn) as conn:
        rows = conn.execute("SELECT node_name, test_name, status, peer FROM validation_history WHERE run_id = %s "
                            "ORDER BY node_name", (result["run_id"],)).fetchall()
        claims = conn.execute("SELECT node_name FROM validation_claims").fetchall()
    assert rows == [("gpu-001", "fabric_peer", "pass", "gpu-002"), ("gpu-002", "fabric_peer", "pass", "gpu-001"),
                    ("gpu-003", "gpu_health", "pass", None)]
    assert claims == []
    assert result["states"][("peers.test", "gpu-001 ↔ gpu-002")] == "success"
    peers = sorted((p for p in validation_pods(cluster) if p["labels"]["cluster-doctor.io/test"] == "fabric_peer"),
                   key=lambda p: p["created"])
    assert [(p["node"], p["labels"]["cluster-doctor.io/peer-role"]) for p in peers] == [("gpu-001", "server"),
                                                                                       ("gpu-002", "client")]
