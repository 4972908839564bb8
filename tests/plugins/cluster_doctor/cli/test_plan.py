"""``cluster-doctor plan`` shows what the next run would plan: with ``--live`` it reads the
cluster as the DAG's discover task does — the free nodes with their GPUs, and the claim the pods mount,
so tests a volume problem blocks are left out with a line saying so — and it claims nothing."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from cluster_doctor.cli import main as cli
from cluster_doctor.store import claims, reservations

NS = "cluster-doctor"
PVC = "cluster-doctor-results"
TESTS = ["gpu_health", "dl_unit", "nccl_loopback", "storage_fio"]


pytestmark = pytest.mark.emulator(pvc=True)


@pytest.fixture
def cluster(validation_cluster):
    """gpu-001 and gpu-002 free, gpu-003 busy with a user job; the results claim Bound."""
    for name in ("gpu-001", "gpu-002", "gpu-003"):
        validation_cluster.add_gpu_node(name, gpus=4 if name == "gpu-002" else 8)
    validation_cluster.add_user_pod("gpu-003")
    return validation_cluster


def plan(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = cli.main(["plan", *args], out=out)
    return code, out.getvalue()


def rows(out: str) -> list[tuple[str, str]]:
    """The table's (NODE, TEST) cells, in order."""
    return [(cells[1], cells[2]) for cells in map(str.split, out.splitlines())
            if len(cells) > 2 and cells[0].isdigit() and cells[1].startswith("gpu-")]


def test_live_plans_the_free_nodes_and_claims_nothing(cluster, store, db_url):
    code, out = plan("--live", "--kubeconfig", cluster.kubeconfig_path, "--max-pairs", "6", "--db-url", db_url)
    assert code == 0, out
    assert rows(out) == [("gpu-001", t) for t in TESTS] + [("gpu-002", "gpu_health"), ("gpu-002", "dl_unit")]
    assert "6 pair(s) planned from 2 free node(s) on 2 node(s), each node's suites one after another" in out
    assert claims.live(store.connect) == []  # planning only


def test_live_leaves_out_the_tests_a_volume_problem_blocks_saying_so(cluster, db_url, capsys):
    cluster.core_v1().delete_namespaced_persistent_volume_claim(PVC, NS)
    code, out = plan("--live", "--kubeconfig", cluster.kubeconfig_path, "--db-url", db_url)
    assert code == 0, out
    blocked = f"not planned: {', '.join(TESTS)} (PVC {NS}/{PVC} does not exist"
    assert "0 pair(s) planned from 2 free node(s)" in out and blocked in out
    assert f"nothing planned: no test can run (PVC {NS}/{PVC} does not exist" in out
    # JSON stays the plan alone; the lines go to stderr
    code, out = plan("--live", "--kubeconfig", cluster.kubeconfig_path, "--format", "json", "--db-url", db_url)
    assert code == 0 and json.loads(out) == [] and blocked in capsys.readouterr().err


def test_reserved_nodes_go_first_when_reservation_is_on(store, db_url, monkeypatch):
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    reservations.opened(store.connect, "gpu-002", gpu_count=8, run_id="r0", at=now - dt.timedelta(hours=2))
    args = ["--nodes", "gpu-[001-002]", "--tests", "gpu_health", "--now", now.isoformat(), "--db-url", db_url]
    assert rows(plan(*args)[1]) == [("gpu-001", "gpu_health"), ("gpu-002", "gpu_health")]
    monkeypatch.setenv("CLUSTER_DOCTOR_RESERVATION", '{"enabled": true}')
    code, out = plan(*args)
    assert code == 0 and rows(out) == [("gpu-002", "gpu_health"), ("gpu-001", "gpu_health")]
    assert "reserved for validation, planned first: gpu-002" in out


def test_a_plan_with_nothing_in_it_says_why(store, db_url, monkeypatch):
    monkeypatch.setenv("CLUSTER_DOCTOR_SWEEP_INTERVAL_HOURS", "0")  # the hour-old check is the sweep's otherwise
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    store.record([{"node_name": "gpu-001", "test_name": "gpu_health", "status": "pass", "run_id": "r0",
                   "finished_at": (now - dt.timedelta(hours=1)).isoformat()}])
    code, out = plan("--nodes", "gpu-001", "--tests", "gpu_health", "--now", now.isoformat(), "--db-url", db_url)
    assert code == 0 and "0 pair(s) planned from 1 free node(s)" in out
    assert "nothing planned: all pairs of the 1 free node(s) are fresh since" in out


def test_the_health_sweep_comes_after_the_due_bundles_marked_and_said(store, db_url, monkeypatch):
    """A free node with every suite fresh but a health check older than sweep_interval_hours
    gets a gpu_health pair marked ``health sweep``, after the due node's bundle; a check younger than the
    interval less 30 minutes is not swept."""
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    store.record([{"node_name": node, "test_name": test, "status": "pass", "run_id": "r0",
                   "finished_at": (now - age).isoformat()}
                  for node, age in (("gpu-001", dt.timedelta(hours=3)), ("gpu-003", dt.timedelta(minutes=20)))
                  for test in ("gpu_health", "dl_unit")])
    args = ["--nodes", "gpu-[001-003]", "--tests", "gpu_health,dl_unit", "--now", now.isoformat(), "--db-url", db_url]
    code, out = plan(*args)
    assert code == 0, out
    assert rows(out) == [("gpu-002", "gpu_health"), ("gpu-002", "dl_unit"), ("gpu-001", "gpu_health")]
    assert out.splitlines()[4].split()[3:5] == ["health", "sweep"]
    assert "health sweep (why: health sweep): 1 free node(s) with no due suite whose last health check is older " \
           "than 1 h" in out
    code, out = plan(*args, "--format", "json")
    assert [(p["node_name"], p["why"]) for p in json.loads(out)][-1] == ("gpu-001", "health sweep")
    monkeypatch.setenv("CLUSTER_DOCTOR_SWEEP_INTERVAL_HOURS", "0")  # the setting turns it off
    assert rows(plan(*args)[1]) == [("gpu-002", "gpu_health"), ("gpu-002", "dl_unit")]


def test_a_suspect_node_is_planned_first_with_its_whole_bundle_saying_why(cluster, store, db_url):
    from cluster_doctor.domain.signals import Evidence
    from cluster_doctor.store import suspects

    suspects.record(store.connect, [Evidence("gpu-002", "reboot", "b2", "rebooted")], seen_at=dt.datetime.now(dt.UTC))
    code, out = plan("--live", "--kubeconfig", cluster.kubeconfig_path, "--max-pairs", "6", "--db-url", db_url)
    assert code == 0, out
    assert rows(out)[:4] == [("gpu-002", t) for t in TESTS]  # as the DAG's prioritize plans it
    assert "gpu-002 suspect since " in out and "reboot: rebooted: its whole bundle first" in out
