"""Opt-in quarantine: through the real kubernetes client against the Kubernetes API emulator, with the
results in a real PostgreSQL."""

from __future__ import annotations

import datetime as dt
import logging

import pytest
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.kube import quarantine as q

from tests.support.emulator import gpu_fleet

TESTS = ["gpu_health", "nccl_loopback"]
NOW = dt.datetime(2026, 3, 10, 12, tzinfo=dt.UTC)
FAILED_CHECK = [{"name": "nccl_busbw", "status": "fail", "value": 310.2, "unit": "GB/s", "threshold": ">= 460",
                 "message": "bus bandwidth below floor", "device": None},
                {"name": "nccl_transport_ib", "status": "pass", "value": "IB", "unit": None, "threshold": None,
                 "message": "ok", "device": None}]


@pytest.fixture
def cluster(emulator):
    gpu_fleet(emulator, 20, cpu_nodes=1)
    emulator.reset_counters()
    return emulator


def _record(store, node: str, test: str, statuses: list[str], *, start: dt.datetime = NOW - dt.timedelta(hours=20)):
    attempts = []
    for i, status in enumerate(statuses):
        attempts.append(Attempt(
            node_name=node, test_name=test, status=status, finished_at=start + dt.timedelta(hours=6 * i),
            checks=FAILED_CHECK if status == "fail" else [], reason="bus bandwidth below floor" if status == "fail" else None,
            gpu_model="NVIDIA-H100-80GB-HBM3", dag_id="continuous_validation", run_id=f"r{start:%j%H}-{i}-{node}-{test}"))
    store.record(attempts)


def _healthy(store, nodes):
    for node in nodes:
        for test in TESTS:
            _record(store, node, test, ["pass"], start=NOW - dt.timedelta(days=2))


def _node(emulator, name):
    return emulator.core_v1().read_node(name).to_dict()


def _patches(emulator) -> int:
    return emulator.counters()["by_verb_resource"].get("patch nodes", 0)


def test_quarantine_then_release(cluster, store):
    _healthy(store, [f"gpu-{i:03d}" for i in range(1, 21)])
    _record(store, "gpu-004", "nccl_loopback", ["pass", "fail", "fail"])  # failed, retested, failed again
    _record(store, "gpu-005", "nccl_loopback", ["pass", "pass", "fail"])  # one failure: not confirmed yet
    policy = q.QuarantinePolicy(enabled=True, taint=True)
    core = cluster.core_v1()

    report = q.quarantine_failing(core, store.connect, policy, tests=TESTS, now=NOW)
    assert report.quarantined == ["gpu-004"] and not report.breaker_open and report.gpu_nodes == 20
    node = _node(cluster, "gpu-004")
    assert node["metadata"]["labels"][q.LABEL] == "fail"
    ann = node["metadata"]["annotations"]
    assert ann[q.ANN_TESTS] == "nccl_loopback"
    assert ann[q.ANN_CODES] == "nccl_loopback: nccl_busbw"
    assert ann[q.ANN_SINCE] == "2026-03-10T12:00:00Z"
    assert {"key": q.LABEL, "value": "fail", "effect": "NoSchedule"} in [
        {k: t[k] for k in ("key", "value", "effect")} for t in node["spec"]["taints"]]
    assert q.LABEL not in (_node(cluster, "gpu-005")["metadata"]["labels"] or {})

    # a second run changes nothing
    again = q.quarantine_failing(core, store.connect, policy, tests=TESTS, now=NOW + dt.timedelta(hours=1))
    assert again.quarantined == [] and again.already == ["gpu-004"] and again.released == []

    # repaired: it passes the failing test again (and every other one), so it is released
    _record(store, "gpu-004", "nccl_loopback", ["pass"], start=NOW + dt.timedelta(hours=2))
    released = q.quarantine_failing(core, store.connect, policy, tests=TESTS, now=NOW + dt.timedelta(hours=3))
    assert released.released == ["gpu-004"]
    node = _node(cluster, "gpu-004")
    assert q.LABEL not in (node["metadata"]["labels"] or {})
    assert not set(q.ANNOTATIONS) & set(node["metadata"].get("annotations") or {})
    assert not [t for t in node["spec"].get("taints") or [] if t["key"] == q.LABEL]


def test_other_taints_and_a_label_set_by_a_person_are_left_alone(cluster, store):
    cluster.patch_node("gpu-006", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    cluster.patch_node("gpu-007", labels={q.LABEL: "fail"})  # an SRE's own quarantine: no annotation of ours
    _healthy(store, ["gpu-006", "gpu-007"])
    _record(store, "gpu-006", "gpu_health", ["fail", "fail"])
    policy = q.QuarantinePolicy(enabled=True, taint=True)
    core = cluster.core_v1()
    assert q.quarantine_failing(core, store.connect, policy, tests=TESTS, now=NOW).quarantined == ["gpu-006"]
    assert {t["key"] for t in _node(cluster, "gpu-006")["spec"]["taints"]} == {"nvidia.com/gpu", q.LABEL}
    _record(store, "gpu-006", "gpu_health", ["pass"], start=NOW + dt.timedelta(hours=1))
    report = q.quarantine_failing(core, store.connect, policy, tests=TESTS, now=NOW + dt.timedelta(hours=2))
    assert report.released == ["gpu-006"]
    assert [t["key"] for t in _node(cluster, "gpu-006")["spec"]["taints"]] == ["nvidia.com/gpu"]
    assert _node(cluster, "gpu-007")["metadata"]["labels"][q.LABEL] == "fail"  # a person's label stays


def test_confirmed_verdict_quarantines(cluster, store):
    _healthy(store, ["gpu-008"])
    with store.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT history_id FROM validation_pair_state WHERE node_name = 'gpu-008' AND test_name = 'nccl_loopback'")
        hid = cur.fetchone()[0]
        cur.execute("INSERT INTO validation_verdicts (history_id, node_name, test_name, metric, kind, value, "
                    "fleet_median, confirmed) VALUES (%s, 'gpu-008', 'nccl_loopback', 'nccl_busbw_gbps', "
                    "'straggler', 400, 480, true)", (hid,))
        conn.commit()
    report = q.quarantine_failing(cluster.core_v1(), store.connect, q.QuarantinePolicy(enabled=True), tests=TESTS, now=NOW)
    assert report.quarantined == ["gpu-008"]
    node = _node(cluster, "gpu-008")
    assert node["metadata"]["annotations"][q.ANN_CODES] == "nccl_loopback: straggler:nccl_busbw_gbps"
    assert not [t for t in node["spec"].get("taints") or [] if t["key"] == q.LABEL]  # taint is opt-in too


def test_breaker_trips_when_too_many_nodes_fail_at_once(cluster, store, caplog):
    # 20 GPU nodes, 5 %: at most 1 node per 24 h. A bad driver rollout fails three at once.
    for node in ("gpu-010", "gpu-011", "gpu-012"):
        _record(store, node, "nccl_loopback", ["fail", "fail"])
    with caplog.at_level(logging.ERROR, logger="cluster_doctor.kube.quarantine"):
        report = q.quarantine_failing(cluster.core_v1(), store.connect, q.QuarantinePolicy(enabled=True), tests=TESTS,
                             now=NOW)
    assert report.breaker_open and report.limit == 1
    assert report.quarantined == [] and report.held_back == ["gpu-010", "gpu-011", "gpu-012"]
    assert "3 node(s) would be quarantined" in report.breaker_reason
    assert "CIRCUIT BREAKER OPEN" in caplog.text and "CIRCUIT BREAKER OPEN" in report.describe()
    assert _patches(cluster) == 0
    assert all(q.LABEL not in (_node(cluster, n)["metadata"]["labels"] or {}) for n in report.held_back)


def test_breaker_counts_the_window(cluster, store):
    policy = q.QuarantinePolicy(enabled=True, max_share=0.1)  # 2 of 20 nodes per 24 h
    core = cluster.core_v1()
    _record(store, "gpu-001", "gpu_health", ["fail", "fail"])
    _record(store, "gpu-002", "gpu_health", ["fail", "fail"])
    assert q.quarantine_failing(core, store.connect, policy, tests=TESTS, now=NOW).quarantined == ["gpu-001", "gpu-002"]
    _record(store, "gpu-003", "gpu_health", ["fail", "fail"], start=NOW)
    blocked = q.quarantine_failing(core, store.connect, policy, tests=TESTS, now=NOW + dt.timedelta(hours=7))
    assert blocked.breaker_open and blocked.in_window == 2 and blocked.held_back == ["gpu-003"]
    # a day later the earlier two are out of the window: the third one may go
    later = q.quarantine_failing(core, store.connect, policy, tests=TESTS, now=NOW + dt.timedelta(hours=25))
    assert not later.breaker_open and later.quarantined == ["gpu-003"]


def test_dry_run_patches_nothing_and_says_what_it_would_do(cluster, store, caplog):
    _record(store, "gpu-004", "nccl_loopback", ["fail", "fail"])
    with caplog.at_level(logging.INFO, logger="cluster_doctor.kube.quarantine"):
        report = q.quarantine_failing(cluster.core_v1(), store.connect, q.QuarantinePolicy(enabled=True, dry_run=True, taint=True),
                             tests=TESTS, now=NOW)
    assert report.dry_run and report.quarantined == ["gpu-004"]
    assert "would label and taint gpu-004 (nccl_loopback: nccl_busbw (unknown))" in caplog.text
    assert report.describe().startswith("would quarantine 1: gpu-004")
    assert _patches(cluster) == 0
    assert q.LABEL not in (_node(cluster, "gpu-004")["metadata"]["labels"] or {})


def test_disabled_makes_no_call_at_all(cluster, store):
    _record(store, "gpu-004", "nccl_loopback", ["fail", "fail"])
    report = q.quarantine_failing(cluster.core_v1(), store.connect, q.QuarantinePolicy(), tests=TESTS, now=NOW)
    assert not report.enabled and report.quarantined == []
    assert cluster.api_calls() == 0
    assert "disabled" in report.describe()


def test_a_concurrent_edit_is_retried_not_overwritten(cluster, store):
    _record(store, "gpu-004", "nccl_loopback", ["fail", "fail"])
    core = cluster.core_v1()
    real_list = core.list_node

    def list_then_edit(**kwargs):  # someone labels the node between our read and our patch
        response = real_list(**kwargs)
        cluster.patch_node("gpu-004", labels={"team": "infra"})
        return response

    core.list_node = list_then_edit
    q.quarantine_failing(core, store.connect, q.QuarantinePolicy(enabled=True), tests=TESTS, now=NOW)
    labels = _node(cluster, "gpu-004")["metadata"]["labels"]
    assert labels["team"] == "infra" and labels[q.LABEL] == "fail"
    assert _patches(cluster) == 2  # the first one conflicted on the resourceVersion


@pytest.mark.parametrize("values, message", [
    ({"enabled": "true"}, "quarantine.enabled: expected true or false"),
    ({"max_share": 0}, r"quarantine.max_share: must be a share in \(0, 1\]"),
    ({"max_nodes": 0}, "quarantine.max_nodes: must be an integer >= 1"),
    ({"window_hours": -1}, "quarantine.window_hours: must be a number > 0"),
    ({"taints": True}, r"quarantine: unknown key\(s\) taints"),
    ({"actions": []}, "quarantine.actions: must be a non-empty list of none, retest"),
    ({"actions": "reboot"}, "quarantine.actions: must be a non-empty list"),
    ({"actions": ["reboot", "format_disk"]}, "quarantine.actions: .*'format_disk'"),
])
def test_bad_policy_is_refused_by_name(values, message):
    with pytest.raises(q.InvalidQuarantinePolicy, match=message):
        q.QuarantinePolicy.from_mapping(values)


def test_a_taint_the_validation_pods_do_not_tolerate_is_refused():
    from cluster_doctor.domain.config import Settings

    policy = q.QuarantinePolicy(enabled=True, taint=True)
    with pytest.raises(q.InvalidQuarantinePolicy, match="never released"):
        policy.check_tolerations(Settings().tolerations)
    policy.check_tolerations([*Settings().tolerations, q.TOLERATION])
    q.QuarantinePolicy(enabled=True).check_tolerations(Settings().tolerations)  # no taint: no need


def test_limit():
    p = q.QuarantinePolicy()
    assert [p.limit(n) for n in (4, 20, 100, 199, 5000)] == [1, 1, 5, 9, 10]


def test_the_dag_task_fails_loudly_when_the_breaker_opens(cluster, store):
    from airflow.sdk.exceptions import AirflowFailException
    from cluster_doctor.airflow import tasks
    from cluster_doctor.domain.config import Settings
    from cluster_doctor.domain.payloads import Discovered, Params

    for node in ("gpu-010", "gpu-011"):
        _record(store, node, "nccl_loopback", ["fail", "fail"])

    def discovered(settings):
        return Discovered(settings=settings, params=Params(tests=TESTS, max_pairs=16),
                          started_at=dt.datetime.now(dt.UTC))

    with pytest.raises(AirflowFailException, match="circuit breaker open: 2 node"):
        tasks.quarantine(discovered(Settings(quarantine={"enabled": True})), store, cluster.core_v1())
    assert tasks.quarantine(discovered(Settings()), store, cluster.core_v1()).enabled is False


def test_settings_refuse_a_bad_quarantine_or_verdict_setting():
    from cluster_doctor.domain.config import InvalidSettings, Settings

    with pytest.raises(InvalidSettings, match="setting quarantine.taint needs the validation pods to tolerate"):
        Settings(quarantine={"enabled": True, "taint": True})
    with pytest.raises(InvalidSettings, match="setting fleet_verdicts.k_mad: must be a number > 0"):
        Settings.load(env={"CLUSTER_DOCTOR_FLEET_VERDICTS": '{"k_mad": -1}'})


# ---------------------------------------------------------------------------- keyed on the action
def _record_action(store, node: str, test: str, action: str, *, runs: int = 2) -> None:
    check = {**FAILED_CHECK[0], "action": action}
    store.record([Attempt(node_name=node, test_name=test, status="fail", checks=[check], reason="failed",
                          finished_at=NOW - dt.timedelta(hours=20) + dt.timedelta(hours=6 * i),
                          dag_id="continuous_validation", run_id=f"r{i}-{node}-{test}") for i in range(runs)])


def test_quarantine_acts_only_on_the_actions_it_is_given(cluster, store):
    """By default a node fault (reset_gpu, reboot, drain_and_service, unknown) quarantines; a fabric or
    storage finding, or a flake to retest, is left to a person and reported."""
    _record_action(store, "gpu-001", "gpu_health", "reboot")
    _record_action(store, "gpu-002", "nccl_loopback", "check_fabric")
    _record_action(store, "gpu-003", "gpu_health", "retest")
    policy = q.QuarantinePolicy(enabled=True, max_nodes=10, max_share=1.0)
    core = cluster.core_v1()
    report = q.quarantine_failing(core, store.connect, policy, tests=TESTS, now=NOW)
    assert report.quarantined == ["gpu-001"]
    assert report.not_acted_on == ["gpu-002 (nccl_loopback: nccl_busbw (check_fabric))",
                                   "gpu-003 (gpu_health: nccl_busbw (retest))"]
    assert "left to a person" in report.describe()
    assert _node(cluster, "gpu-001")["metadata"]["annotations"][q.ANN_ACTION] == "reboot"
    # keyed on the fabric too: now it goes
    fabric = q.QuarantinePolicy(enabled=True, max_nodes=10, max_share=1.0, actions=["check_fabric", "reboot"])
    assert q.quarantine_failing(core, store.connect, fabric, tests=TESTS, now=NOW).quarantined == ["gpu-002"]


def test_the_actions_setting_loads_and_is_checked():
    from cluster_doctor.domain.config import InvalidSettings, Settings

    settings = Settings.load(env={"CLUSTER_DOCTOR_QUARANTINE": '{"enabled": true, "actions": ["reboot"]}'})
    assert q.QuarantinePolicy.from_mapping(settings.quarantine).actions == ("reboot",)
    assert q.QuarantinePolicy().actions == ("reset_gpu", "reboot", "drain_and_service", "unknown")
    with pytest.raises(InvalidSettings, match="setting quarantine.actions"):
        Settings(quarantine={"actions": ["drain"]})
