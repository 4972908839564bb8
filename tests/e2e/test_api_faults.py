"""A flaky Kubernetes API server does not fail the run: the DAG's own calls are retried (kube/retry)."""

from __future__ import annotations

import psycopg
import pytest

from tests.e2e.conftest import NAMESPACE, script_result

pytestmark = pytest.mark.e2e


def test_429_500_503_and_a_lost_create_answer_during_a_run_are_retried(runner, cluster, db_dsn):
    nodes = ["gpu-001", "gpu-002"]
    for node in nodes:
        cluster.add_gpu_node(node)
        script_result(cluster, node)
    faults = {  # discovery's node and pod lists, the suite-code ConfigMap's create (it took effect)
        "/api/v1/nodes": ([429, 500, 500], "GET"),
        "/api/v1/pods": ([503], "GET"),
        f"/api/v1/namespaces/{NAMESPACE}/configmaps": (["reset-after"], "POST"),
    }
    for path, (sequence, method) in faults.items():
        cluster.inject_faults(path, sequence, method=method, retry_after=1)

    result = runner.run()

    assert result["state"] == "success", runner.last_log[-3000:]
    assert {r["path"]: r["hits"] for r in cluster.faults()} == {p: len(s) for p, (s, _) in faults.items()}
    with psycopg.connect(**db_dsn) as conn:
        recorded = conn.execute("SELECT node_name, status FROM validation_history ORDER BY node_name").fetchall()
    assert recorded == [(node, "pass") for node in nodes]
