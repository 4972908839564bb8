"""No pod outlives its run, for peer tests too: a peer-test pod whose deletion failed is deleted by
the next run's reaper, whatever its phase, and its side's result is recorded once if it was not yet (naming
its peer). The peer task (``airflow.tasks.peers.run_peer_test``) against the Kubernetes API emulator with the
real client, the reaper (``kube.orphans``), a real PostgreSQL results database."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from cluster_doctor.airflow.tasks import peers
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain import payloads
from cluster_doctor.domain.payloads import RunConfig
from cluster_doctor.domain.peers import PeerMatch
from cluster_doctor.kube import orphans, pod_lifecycle, retry

from tests.support.emulator import FAST_DELETE
from tests.support.suite_results import summary

NS = "cluster-doctor"
SELECTOR = "app.kubernetes.io/name=cluster-doctor"
DAG_ID = "continuous_validation"
RUN_ID = "scheduled__2026-11-22T10:00:00+00:00"
GPUS = {"gpu-001": (8, "NVIDIA-H100-80GB-HBM3"), "gpu-002": (8, "NVIDIA-H100-80GB-HBM3")}
SETTINGS = Settings(pending_timeout_s=20, availability_check_s=1, suite_device="cpu")


pytestmark = pytest.mark.emulator(pvc=True, settings=FAST_DELETE)


@pytest.fixture
def cluster(operator_cluster):
    for node in GPUS:
        operator_cluster.add_gpu_node(node)
    for node, peer in (("gpu-001", "gpu-002"), ("gpu-002", "gpu-001")):
        text = json.loads(summary(node, "fabric_peer", checks=[{"name": "nccl_allreduce", "status": "pass"}]))
        text["peer"] = peer
        operator_cluster.set_script(node, "exit", exit_code=0, run_seconds=2,
                            termination_message=json.dumps(text, separators=(",", ":")))
    return operator_cluster


@pytest.fixture(autouse=True)
def _short_gone_wait(monkeypatch):
    # the launcher waits this long for pods it could not delete to go: they never will here
    monkeypatch.setattr(pod_lifecycle, "GONE_WAIT_S", 1)


def peer_test() -> payloads.PeerTest:
    return payloads.PeerTest(
        match=PeerMatch(server="gpu-001", client="gpu-002", model="H100", reason="never peer-tested"), gpus=GPUS,
        planned_at=dt.datetime.now(dt.UTC), run_config=RunConfig(settings=SETTINGS, configmap="cluster-doctor-suites-0",
                                                                 suite_version="sha256:0000000000000000"))


def run_undeletable(cluster, store) -> list:
    """The peer task of try 1, map index 3, with the API refusing every pod deletion: both sides pass and
    both pods stay (Completed)."""
    cluster.configure(forbidden=["delete pods"])
    try:
        attempts = peers.run_peer_test(peer_test(), retry.wrap(cluster.core_v1()), store, dag_id=DAG_ID,
                                            run_id=RUN_ID, map_index=3, try_number=1)
    finally:
        cluster.configure(forbidden=[])
    assert [(a.node_name, a.status) for a in attempts] == [("gpu-001", "pass"), ("gpu-002", "pass")]
    left = [p for p in cluster.pod_history(SELECTOR) if not p["deleted"]]
    assert sorted(p["phase"] for p in left) == ["Succeeded", "Succeeded"]
    return attempts


def rows(store) -> list[tuple]:
    return sorted((r["node_name"], r["status"], r["peer"], r["map_index"], r["try_number"], r["pod_name"])
                  for r in store.attempts_for_run(DAG_ID, RUN_ID))


def test_a_peer_pod_whose_deletion_failed_goes_with_the_next_runs_reaper_keeping_one_row_per_side(cluster, store):
    attempts = run_undeletable(cluster, store)
    before = rows(store)

    # the peer test's DagRun may still be running: the rows of its try say the task is done with its pods
    report = orphans.reap(cluster.core_v1(), store, SETTINGS, run_state=lambda dag_id, run_id: "running")

    assert report.errors == [] and report.kept == [], report
    assert sorted(d.split(" ")[0] for d in report.deleted) == sorted(a.pod_name for a in attempts), report
    assert all("could not delete it" in d for d in report.deleted)
    cluster.wait_for(lambda: cluster.live_pods(SELECTOR) == [], timeout=30, message="the peer pods gone")
    assert rows(store) == before == [("gpu-001", "pass", "gpu-002", 3, 1, attempts[0].pod_name),
                                     ("gpu-002", "pass", "gpu-001", 3, 1, attempts[1].pod_name)]


def test_an_unrecorded_peer_pod_is_recorded_once_naming_its_peer_then_deleted(cluster, store):
    """The task never wrote its sides (it died after its pods ended): the record task's "did not report"
    placeholders become each side's real result, once, naming its peer."""
    attempts = run_undeletable(cluster, None)
    store.record(peers.reported(None, payloads.PeerTests(tests=[peer_test()]), dag_id=DAG_ID, run_id=RUN_ID))

    report = orphans.reap(cluster.core_v1(), store, SETTINGS, run_state=lambda dag_id, run_id: "failed")
    again = orphans.reap(cluster.core_v1(), store, SETTINGS, run_state=lambda dag_id, run_id: "failed")

    assert report.errors == [] and len(report.deleted) == 2 and all("(superseded)" in r for r in report.recorded), report
    cluster.wait_for(lambda: cluster.live_pods(SELECTOR) == [], timeout=30, message="the peer pods gone")
    assert again.recorded == [] and again.deleted == []
    assert rows(store) == [("gpu-001", "pass", "gpu-002", 3, 1, attempts[0].pod_name),
                           ("gpu-002", "pass", "gpu-001", 3, 1, attempts[1].pod_name)]
