"""Opt-in node conditions: set, updated and cleared through the real kubernetes client on the Kubernetes
API emulator (nodes/status, strategic merge by type), with the results in a real PostgreSQL and the
permissions of include/k8s/conditions as the only write the client holds."""

from __future__ import annotations

import datetime as dt
import logging
import pathlib
import types

import pytest
import yaml
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.conditions import CONDITION_TYPE, ConditionPolicy
from cluster_doctor.kube import conditions as c

from tests.support.emulator import gpu_fleet

REPO = pathlib.Path(__file__).resolve().parents[4]
TESTS = ["gpu_health", "ib_health"]
NOW = dt.datetime(2026, 3, 10, 12, tzinfo=dt.UTC)
WEEK = dt.timedelta(days=7)
ON = ConditionPolicy(enabled=True)
FLAP = [{"name": "ib_counters", "status": "fail", "device": "mlx5_6:1", "code": "IB_LINK_FLAPPED", "action": "check_fabric",
         "message": "link_downed +2 (0 -> 2)"},
        {"name": "ib_port_state", "status": "fail", "device": "mlx5_7:1", "code": "IB_PORT_DOWN", "action": "check_fabric",
         "message": "port DOWN / Disabled"}]
XID = [{"name": "xid", "status": "fail", "device": "cuda:3", "code": "GPU_FALLEN_OFF_BUS", "action": "reboot",
        "message": "Xid 79"}]


def rules(path: str) -> list[dict]:
    return next(d for d in yaml.safe_load_all((REPO / path).read_text()) if d and d["kind"] == "ClusterRole")["rules"]


@pytest.fixture
def cluster(emulator):
    gpu_fleet(emulator, 20, cpu_nodes=1)
    # the Airflow side holds the discovery role and the opt-in conditions role, nothing else
    emulator.configure(rbac_rules=rules("include/k8s/rbac-cluster.yaml") + rules("include/k8s/conditions/conditions-rbac.yaml"))
    emulator.reset_counters()
    return emulator


def record(store, node: str, test: str, status: str, at: dt.datetime, checks=(), action=None, i=0):
    store.record([Attempt(node_name=node, test_name=test, status=status, finished_at=at, checks=list(checks),
                          action=action or ("none" if status == "pass" else None), reason=None if status == "pass" else "x",
                          dag_id="continuous_validation", run_id=f"r-{node}-{test}-{at:%j%H%M}-{i}")])


def healthy(store, nodes, at=NOW - dt.timedelta(hours=3)):
    for node in nodes:
        for test in TESTS:
            record(store, node, test, "pass", at)


def cond(emu, node) -> dict | None:
    return c.current(emu.core_v1().read_node(node).to_dict())  # get nodes: what the discovery role grants


def patches(emu) -> int:
    return emu.counters()["by_verb_resource"].get("patch nodes/status", 0)


def publish(emu, store, policy=ON, now=NOW):
    return c.publish_conditions(emu.core_v1(), store.connect, policy, tests=TESTS, stale_after=WEEK, now=now)


def test_set_true_false_and_unknown_and_leave_the_kubelets_conditions(cluster, store):
    healthy(store, [f"gpu-{i:03d}" for i in range(1, 19) if i != 5])
    record(store, "gpu-004", "ib_health", "fail", NOW - dt.timedelta(hours=2), FLAP, "check_fabric")
    healthy(store, ["gpu-005"], at=NOW - dt.timedelta(days=9))  # stale evidence
    record(store, "gpu-006", "ib_health", "error", NOW - dt.timedelta(hours=1),
           [{"name": "nvbw", "status": "error", "code": "TOOL_MISSING"}], "retest")
    # gpu-019, gpu-020: never validated
    report = publish(cluster, store)
    assert report.set_false == ["gpu-004"] and not report.breaker_open and report.gpu_nodes == 20
    assert sorted(report.set_unknown) == ["gpu-005", "gpu-006", "gpu-019", "gpu-020"] and len(report.set_true) == 15
    flap = cond(cluster, "gpu-004")
    assert (flap["status"], flap["reason"]) == ("False", "IB_LINK_FLAPPED")
    assert flap["message"].startswith("ib_health failed IB_LINK_FLAPPED; action: check_fabric; evidence 2 h old")
    assert flap["last_transition_time"] == flap["last_heartbeat_time"]
    assert (cond(cluster, "gpu-005")["status"], cond(cluster, "gpu-005")["reason"]) == ("Unknown", "EvidenceStale")
    assert "gpu_health: last pass 9 d old" in cond(cluster, "gpu-005")["message"]
    assert cond(cluster, "gpu-006")["reason"] == "TOOL_MISSING" and cond(cluster, "gpu-019")["reason"] == "NotValidated"
    ok = cond(cluster, "gpu-001")
    assert (ok["status"], ok["reason"]) == ("True", "AllSuitesPassed") and "oldest evidence 3 h old" in ok["message"]
    node = cluster.core_v1().read_node("gpu-004").to_dict()
    assert [x["type"] for x in node["status"]["conditions"]][-1] == CONDITION_TYPE
    assert {x["type"]: x["status"] for x in node["status"]["conditions"]}["Ready"] == "True"
    assert cond(cluster, "cpu-001") is None  # not a GPU node
    assert patches(cluster) == 20


def test_update_changes_only_what_changed_and_keeps_the_transition_time(cluster, store):
    healthy(store, [f"gpu-{i:03d}" for i in range(1, 21)])
    record(store, "gpu-007", "gpu_health", "fail", NOW - dt.timedelta(hours=1), XID, "reboot")
    publish(cluster, store)
    cluster.reset_counters()
    again = publish(cluster, store)  # nothing new: nothing patched
    assert again.unchanged == 20 and patches(cluster) == 0
    later = NOW + dt.timedelta(hours=4)
    record(store, "gpu-007", "gpu_health", "pass", later - dt.timedelta(minutes=30))
    healthy(store, [f"gpu-{i:03d}" for i in range(1, 21) if i != 7], at=later - dt.timedelta(hours=1))
    fixed = publish(cluster, store, now=later)
    assert "gpu-007" in fixed.set_true and not fixed.set_false
    now_true = cond(cluster, "gpu-007")
    assert now_true["status"] == "True" and now_true["last_transition_time"] == later
    # a True node refreshed with new evidence keeps its transition time
    refreshed = cond(cluster, "gpu-001")
    assert refreshed["last_transition_time"] == NOW and refreshed["last_heartbeat_time"] == later


def test_clear_removes_the_condition_and_nothing_else(cluster, store):
    healthy(store, ["gpu-001", "gpu-002"])
    publish(cluster, store)
    cleared = c.clear(cluster.core_v1())
    assert len(cleared) == 20
    for node in ("gpu-001", "gpu-019"):
        status = cluster.core_v1().read_node(node).to_dict()["status"]
        assert cond(cluster, node) is None and {x["type"] for x in status["conditions"]} >= {"Ready"}
    assert c.clear(cluster.core_v1()) == []


def test_breaker_holds_back_a_fleet_wide_failure(cluster, store, caplog):
    healthy(store, [f"gpu-{i:03d}" for i in range(1, 21)])
    publish(cluster, store)
    for node in ("gpu-010", "gpu-011", "gpu-012"):  # 20 nodes, 5 %: at most 1 may turn False per 24 h
        record(store, node, "gpu_health", "fail", NOW + dt.timedelta(minutes=10), XID, "reboot")
    with caplog.at_level(logging.ERROR, logger="cluster_doctor.kube.conditions"):
        report = publish(cluster, store, now=NOW + dt.timedelta(hours=1))
    assert report.breaker_open and report.limit == 1 and report.held_back == ["gpu-010", "gpu-011", "gpu-012"]
    assert "CIRCUIT BREAKER OPEN" in caplog.text and "CIRCUIT BREAKER OPEN" in report.describe()
    assert {cond(cluster, n)["status"] for n in report.held_back} == {"True"}  # left as they were
    assert len(report.set_true) == 17  # the others are still written


def test_breaker_counts_the_nodes_already_turned_false_in_the_window(cluster, store):
    policy = ConditionPolicy(enabled=True, max_share=0.1)  # 2 of 20 per 24 h
    healthy(store, [f"gpu-{i:03d}" for i in range(1, 21)])
    for node in ("gpu-001", "gpu-002"):
        record(store, node, "gpu_health", "fail", NOW - dt.timedelta(hours=1), XID, "reboot")
    assert publish(cluster, store, policy).set_false == ["gpu-001", "gpu-002"]
    record(store, "gpu-003", "gpu_health", "fail", NOW + dt.timedelta(hours=1), XID, "reboot")
    blocked = publish(cluster, store, policy, now=NOW + dt.timedelta(hours=2))
    assert blocked.breaker_open and blocked.in_window == 2 and blocked.held_back == ["gpu-003"]
    passed = publish(cluster, store, policy, now=NOW + dt.timedelta(hours=30))  # outside the window
    assert "gpu-003" in passed.set_false and not passed.breaker_open


def test_disabled_makes_no_call_and_dry_run_writes_nothing(cluster, store):
    healthy(store, ["gpu-001"])
    assert publish(cluster, store, ConditionPolicy()).enabled is False
    assert cluster.counters()["total"] == 0
    dry = publish(cluster, store, ConditionPolicy(enabled=True, dry_run=True))
    assert dry.set_true == ["gpu-001"] and len(dry.set_unknown) == 19 and patches(cluster) == 0
    assert "would set" in dry.describe() and cond(cluster, "gpu-001") is None


def test_without_the_opt_in_role_the_patch_is_refused_and_said_so(cluster, store):
    cluster.configure(rbac_rules=rules("include/k8s/rbac-cluster.yaml") + rules("include/k8s/quarantine/quarantine-rbac.yaml"))
    healthy(store, ["gpu-001"])
    with pytest.raises(PermissionError, match="apply include/k8s/conditions"):
        publish(cluster, store)  # the quarantine role (patch nodes) does not grant nodes/status


def test_the_airflow_task_fails_on_an_open_breaker(cluster, store):
    from airflow.sdk.exceptions import AirflowFailException
    from cluster_doctor.airflow import tasks
    from cluster_doctor.domain.config import Settings

    for node in ("gpu-010", "gpu-011"):
        record(store, node, "gpu_health", "fail", NOW - dt.timedelta(hours=1), XID, "reboot")
    found = types.SimpleNamespace(settings=Settings(node_conditions={"enabled": True}, tests=TESTS))
    with pytest.raises(AirflowFailException, match="circuit breaker open"):
        tasks.node_conditions(found, store, cluster.core_v1(), now=NOW)
    assert {cond(cluster, n)["status"] for n in ("gpu-001", "gpu-020")} == {"Unknown"}  # the rest was written
