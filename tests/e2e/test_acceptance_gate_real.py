"""The acceptance gate on a real Airflow scheduler: a node that joins the cluster is
tainted by the fast path, its bundle runs within minutes without waiting for the hour, a user pod meant for it
stays Pending meanwhile, and the validation run's own accept task removes the taint right after its record.

A real Airflow 3.3 (api-server, scheduler, dag-processor; LocalExecutor on the e2e harness's SQLite metadata DB)
runs both DAGs unpaused against the Kubernetes API emulator and a real PostgreSQL, the fast path every 30 s
(5 minutes by default). The figures it prints are those of docs/node-lifecycle.md (the acceptance gate).
"""

from __future__ import annotations

import datetime as dt
import time

import pytest
from cluster_doctor.domain import acceptance as gate
from cluster_doctor.store import transitions
from cluster_doctor.store.history import ResultStore

from tests.support.real_airflow import airflow
from tests.support.real_airflow import runs as _runs
from tests.support.real_airflow import wait as _wait
from tests.support.suite_results import summary

# make test-slow (about 2 minutes: a real Airflow starts, then two DAGs run); every case of the gate runs in
# make test at task level (tests/plugins/cluster_doctor/airflow/test_acceptance_gate.py).
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

GOAL_S = 600  # from the node's join to its validation pod Running: the fast path's goal
USER_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "first-job", "namespace": "default"},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": "gpu-002"},
                     "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}


def _tainted(cluster, node: str) -> bool:
    return any(t.key == gate.KEY for t in cluster.core_v1().read_node(node).spec.taints or [])


def _running_pod(cluster, node: str) -> bool:
    pods = cluster.core_v1().list_namespaced_pod("cluster-doctor", label_selector="app.kubernetes.io/name=cluster-doctor",
                                                 field_selector=f"spec.nodeName={node}").items
    return any(p.status.phase == "Running" for p in pods)


def _life(store: ResultStore, node: str) -> list[tuple[str, str]]:
    with store.connection() as conn, conn.cursor() as cur:
        return [(t.kind, t.run_id) for t in transitions.timeline(cur, node)]


def test_a_node_that_joins_is_gated_validated_within_minutes_and_accepted_at_the_runs_end(
        runner, cluster, db_url, tmp_path):
    store = ResultStore(db_url)
    an_hour_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    cluster.add_gpu_node("gpu-001")  # fresh: the first scheduled run plans nothing, only the join makes work
    store.record([{"node_name": "gpu-001", "test_name": "gpu_health", "status": "pass", "run_id": "before",
                   "started_at": an_hour_ago, "finished_at": an_hour_ago}])
    text = summary("gpu-002")
    cluster.set_script("gpu-002", "exit", exit_code=0, run_seconds=15, termination_message=text,
                       log=f"CLUSTER_DOCTOR_RESULT {text}\n")
    runner.env_overrides.update({"CLUSTER_DOCTOR_FAST_PATH_MINUTES": "0.5", "CLUSTER_DOCTOR_FAST_PATH_QUIET_MINUTES": "0",
                                 "CLUSTER_DOCTOR_SWEEP_INTERVAL_HOURS": "0",
                                 "CLUSTER_DOCTOR_ACCEPTANCE": '{"enabled": true}'})
    logs = tmp_path / "logs"
    logs.mkdir()
    core = cluster.core_v1()
    with airflow(runner.env(), logs):
        # the first scheduled run and a fast-path tick know the fleet before the node joins
        _wait("the first continuous_validation run and a fast-path tick", lambda: (
            (runs := _runs(runner.home, "continuous_validation")) and all(s in ("success", "failed") for _, s in runs)
            and any(s == "success" for _, s in _runs(runner.home, "suspect_signals"))), 420, logs, 2)
        joined = time.monotonic()
        cluster.add_gpu_node("gpu-002")
        _wait("gpu-002 tainted by the gate", lambda: _tainted(cluster, "gpu-002"), GOAL_S, logs, 0.5)
        tainted = time.monotonic() - joined
        core.create_namespaced_pod("default", USER_POD)  # a user's job meant for the new node
        _wait("gpu-002's validation pod Running", lambda: _running_pod(cluster, "gpu-002"), GOAL_S, logs, 0.5)
        running = time.monotonic() - joined
        assert core.read_namespaced_pod("first-job", "default").spec.node_name is None  # users wait
        _wait("gpu-002 accepted: the taint gone", lambda: not _tainted(cluster, "gpu-002"), 300, logs, 0.5)
        accepted = time.monotonic() - joined
        _wait("the user's job on gpu-002", lambda: core.read_namespaced_pod("first-job", "default").spec.node_name,
              60, logs, 0.5)
        core.delete_namespaced_pod("first-job", "default", grace_period_seconds=0)
    print(f"\nacceptance gate: join to taint {tainted:.0f} s, to validation pod Running {running:.0f} s, "
          f"to accepted {accepted:.0f} s (goal {GOAL_S} s to Running)")
    life = _life(store, "gpu-002")
    assert [kind for kind, _ in life] == ["gated", "accepted"], life
    # the fast path gated it; the validation run's accept task (its run id, not the fast path's) accepted it
    assert life[0][1] == "suspect_signals" and life[1][1].startswith("suspects__"), life
