"""Opt-in reservation of overdue nodes: through the real kubernetes client against the
Kubernetes API emulator (its scheduler honours NoSchedule taints), the rows in a real PostgreSQL."""

from __future__ import annotations

import datetime as dt

import pytest
from cluster_doctor.domain.planning import due
from cluster_doctor.domain import quarantine as q
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.reservation import KEY, MAX_HOLD, NOT_OVERDUE, VALIDATED, ReservationPolicy
from cluster_doctor.kube import podspec
from cluster_doctor.kube import reservation as r
from cluster_doctor.store import reservations as rows

from tests.support.emulator import gpu_fleet

TESTS = ["gpu_health", "dl_unit"]
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
DUE = due.Policy(staleness=dt.timedelta(days=5.5))
# a small fleet: the default shares (20 % reserved at once, breaker at 30 % overdue) would allow one node
SMALL = {"max_share": 1.0, "breaker_share": 1.0}
POLICY = ReservationPolicy(enabled=True, target_days=7, lead_hours=30, **SMALL)


pytestmark = pytest.mark.emulator(settings={"scheduler_interval": 0.05})


@pytest.fixture
def cluster(emulator):
    gpu_fleet(emulator, 6)
    emulator.reset_counters()
    return emulator


def _validated(store, node, days):
    store.record([Attempt(node_name=node, test_name=t, status="pass", finished_at=NOW - dt.timedelta(days=days),
                          gpu_model="NVIDIA-H100-80GB-HBM3", dag_id="continuous_validation", run_id=f"old-{node}-{t}-{days}")
                  for t in TESTS])


def _reconcile(cluster, store, *, busy, free=(), policy=POLICY, now=NOW, gpu_nodes=6):
    nodes = [*busy, *free]
    return r.reserve_and_release(cluster.core_v1(), store.connect, policy, busy=list(busy), free=list(free), gpu_nodes=gpu_nodes,
                       tests=TESTS, latest=store.pair_states(nodes, TESTS), due_policy=DUE, run_id="scheduled__1",
                       now=now)


def _taints(cluster, node):
    return [t.key for t in cluster.core_v1().read_node(node).spec.taints or []]


def _patches(cluster) -> int:
    return cluster.counters()["by_verb_resource"].get("patch nodes", 0)


def test_an_overdue_busy_node_is_reserved_no_user_pod_lands_ours_does_and_validation_frees_it(cluster, store, caplog):
    _validated(store, "gpu-001", 6)  # due (5.5 d) and within 30 h of the 7-day target
    _validated(store, "gpu-002", 2)  # busy too, but fresh: never reserved
    for node in ("gpu-001", "gpu-002"):
        cluster.add_user_pod(node, name=f"job-{node}")
    report = _reconcile(cluster, store, busy=["gpu-001", "gpu-002"])
    assert report.applied == ["gpu-001"] and report.reserved == ["gpu-001"] and report.free == []
    assert _taints(cluster, "gpu-001") == [KEY] and _taints(cluster, "gpu-002") == []
    assert "reserved gpu-001: taint cluster-doctor.io/reserved:NoSchedule" in caplog.text
    [opened] = rows.open_reservations(store.connect).values()
    assert (opened.node_name, opened.gpu_count, opened.reserved_by) == ("gpu-001", 8, "scheduled__1")

    # the job ends: a new user pod for the node stays Pending on our taint, as a real scheduler keeps it
    core = cluster.core_v1()
    core.delete_namespaced_pod("job-gpu-001", "default", grace_period_seconds=0)
    user = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "next-job", "namespace": "default"},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": "gpu-001"},
                     "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    core.create_namespaced_pod("default", user)
    # while the validation pod (the settings enabled: it tolerates the taint) is scheduled onto it
    settings = Settings(reservation={"enabled": True}, namespace="default")
    pod = podspec.build_pod(settings, node_name="gpu-001", test_name="gpu_health", gpu_count=8, gpu_model=None,
                            run_id="scheduled__2", configmap="cm", suite_version="v1", suite_files=None)
    assert {"key": KEY, "operator": "Exists", "effect": "NoSchedule"} in pod["spec"]["tolerations"]
    cluster.wait_for(lambda: "untolerated taint {cluster-doctor.io/reserved" in " ".join(
        e.message or "" for e in core.list_namespaced_event("default").items if e.involved_object.name == "next-job"),
        message="the user pod's FailedScheduling")
    assert core.read_namespaced_pod("next-job", "default").spec.node_name is None
    core.delete_namespaced_pod("next-job", "default", grace_period_seconds=0)

    # the next run sees it free: kept reserved, planned first; the validation's end removes the taint
    later = NOW + dt.timedelta(minutes=30)
    report = _reconcile(cluster, store, busy=["gpu-002"], free=["gpu-001"], now=later)
    assert report.reserved == ["gpu-001"] and report.free == ["gpu-001"] and report.applied == []
    assert r.release_after_validation(core, store.connect, "gpu-001", policy=POLICY, run_id="scheduled__2",
                                      now=later + dt.timedelta(minutes=45))
    assert _taints(cluster, "gpu-001") == []
    assert not r.release_after_validation(core, store.connect, "gpu-001", policy=POLICY, run_id="scheduled__2")
    totals = rows.totals(store.connect, NOW - dt.timedelta(hours=1), later + dt.timedelta(hours=2))
    assert totals.applied == 1 and totals.released == {VALIDATED: 1} and totals.open_now == 0
    # idle from the last time a run saw it busy (NOW) to the taint's removal, 8 GPUs: 75 min
    assert totals.idle_gpu_hours == pytest.approx(8 * 75 / 60)


def test_held_too_long_or_no_longer_overdue_the_taint_goes(cluster, store):
    for node in ("gpu-001", "gpu-002"):
        _validated(store, node, 6)
        cluster.add_user_pod(node)
    assert _reconcile(cluster, store, busy=["gpu-001", "gpu-002"]).applied == ["gpu-001", "gpu-002"]
    # gpu-002 was validated by another run meanwhile; gpu-001's job never ended within the hold
    _validated(store, "gpu-002", 0)
    report = _reconcile(cluster, store, busy=["gpu-001", "gpu-002"], now=NOW + dt.timedelta(hours=36))
    assert report.released == {"gpu-001": MAX_HOLD, "gpu-002": NOT_OVERDUE}
    assert _taints(cluster, "gpu-001") == [] and _taints(cluster, "gpu-002") == []
    # a node still busy at its maximum hold stood idle for nothing: it cost nothing
    totals = rows.totals(store.connect, NOW - dt.timedelta(hours=1), NOW + dt.timedelta(days=2))
    assert totals.released == {MAX_HOLD: 1, NOT_OVERDUE: 1} and totals.idle_gpu_hours == 0
    # held back at the next run: gpu-001 is overdue and busy again, so it is reserved anew
    assert _reconcile(cluster, store, busy=["gpu-001"], now=NOW + dt.timedelta(hours=37)).applied == ["gpu-001"]


def test_never_a_quarantined_node_and_at_most_the_limit_stalest_first(cluster, store):
    for i, node in enumerate(["gpu-001", "gpu-002", "gpu-003", "gpu-004"]):
        _validated(store, node, 6 + i / 10)
        cluster.add_user_pod(node)
    cluster.patch_node("gpu-004", labels={q.LABEL: q.LABEL_VALUE})  # quarantined (its pods tolerate it)
    limited = ReservationPolicy(enabled=True, target_days=7, lead_hours=30, max_nodes=2, **SMALL)
    report = _reconcile(cluster, store, busy=["gpu-001", "gpu-002", "gpu-003", "gpu-004"], policy=limited)
    assert report.applied == ["gpu-003", "gpu-002"] and report.waiting == ["gpu-001"]
    assert _taints(cluster, "gpu-004") == []


def test_the_breaker_reserves_none_a_dry_run_patches_nothing_and_disabled_calls_nothing(cluster, store):
    for i in range(1, 7):
        _validated(store, f"gpu-{i:03d}", 8)
    busy = [f"gpu-{i:03d}" for i in range(1, 7)]
    report = _reconcile(cluster, store, busy=busy, policy=ReservationPolicy(enabled=True, breaker_share=0.5))
    assert report.breaker_open and report.applied == [] and "6 busy node(s) are overdue at once" in report.breaker_reason
    dry = _reconcile(cluster, store, busy=busy[:2], policy=ReservationPolicy(enabled=True, dry_run=True, **SMALL))
    assert dry.applied == ["gpu-001", "gpu-002"] and _patches(cluster) == 0
    assert rows.open_reservations(store.connect) == {}
    cluster.reset_counters()
    assert not _reconcile(cluster, store, busy=busy, policy=ReservationPolicy()).enabled
    assert cluster.api_calls() == 0
