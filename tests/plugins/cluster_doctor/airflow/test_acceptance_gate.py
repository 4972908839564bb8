"""The acceptance gate in the DAGs' task bodies — the fast path's tick and the
hourly run's discover — against the Kubernetes API emulator (real client) and a real PostgreSQL: a new node
is tainted, planned whole and first, and accepted when every suite passed; a failing one stays out and is
quarantined; a mass reboot opens the breaker; a node no validation answered is let go at the maximum hold; a
dry run patches nothing; a startup taint the provisioning put on is the gate too."""

from __future__ import annotations

import datetime as dt

import pytest
from cluster_doctor.airflow import tasks
from cluster_doctor.airflow.tasks import signals
from cluster_doctor.domain import acceptance as gate
from cluster_doctor.domain.planning import due
from cluster_doctor.domain import transitions as life
from cluster_doctor.domain.config import DEFAULT_TOLERATIONS, Settings
from cluster_doctor.domain.quarantine import LABEL
from cluster_doctor.domain.quarantine import TOLERATION as QUARANTINE_TOLERATION
from cluster_doctor.kube import discovery
from cluster_doctor.store import inventory, suspects, transitions

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=20)  # every step is in the past
M, H = dt.timedelta(minutes=1), dt.timedelta(hours=1)
TESTS = ["gpu_health", "dl_unit"]
NODES = [f"gpu-{i:03d}" for i in range(1, 5)]


def settings(**gate_changes):
    return Settings(tests=TESTS, signal_node_changes=[], tolerations=[*DEFAULT_TOLERATIONS, QUARANTINE_TOLERATION],
                    quarantine={"enabled": True, "taint": True, "max_share": 0.5},
                    acceptance={"enabled": True, "breaker_nodes": 3, **gate_changes})


pytestmark = pytest.mark.emulator(pvc=True)


@pytest.fixture
def cluster(validation_cluster):
    for name in NODES:
        validation_cluster.add_gpu_node(name)
    return validation_cluster


def record(store, node, test, status, at):
    store.record([{"node_name": node, "test_name": test, "status": status, "started_at": at - M, "finished_at": at,
                   "run_id": f"r-{node}-{test}-{at:%d%H%M%S}", "gpu_model": "NVIDIA-H100-80GB-HBM3",
                   "action": "none" if status == "pass" else "drain_and_service"}])


def taints(cluster, node):
    return [t.key for t in cluster.core_v1().read_node(node).spec.taints or []]


def kinds(store, node):
    with store.connect() as conn, conn.cursor() as cur:
        return [t.kind for t in transitions.timeline(cur, node)]


def suspect_now(store):
    with store.connect() as conn, conn.cursor() as cur:
        return suspects.current(cur, TESTS)


def tasks_update(cluster, store, config, at):
    """What a discovery at ``at`` tells the inventory changed (the fast path's first step)."""
    found = discovery.discover(cluster.core_v1(), config)
    return inventory.record_discovery(store.connect, signals.seen_nodes(found), seen_at=at, complete=True)


def tick(cluster, store, config, at):
    return signals.tick(config, cluster.core_v1(), store, paused=False, active_runs=0, next_run=None, now=at)


def test_a_new_node_is_gated_validated_whole_and_first_then_accepted(cluster, store):
    config = settings()
    tasks.discover({}, config, cluster.core_v1(), now=NOW, store=store)  # the inventory knows the fleet
    cluster.add_gpu_node("gpu-005")
    decision = tick(cluster, store, config, NOW + 5 * M)
    assert taints(cluster, "gpu-005") == [gate.KEY] and decision.nodes == ["gpu-005"]  # a run for it, now
    assert kinds(store, "gpu-005") == [life.GATED]
    # our pods tolerate the gate: the node is free for them, and the plan takes its whole bundle first
    run = tasks.discover({"node_range": "gpu-005"}, config, cluster.core_v1(), now=NOW + 6 * M, store=store)
    assert [n.name for n in run.free] == ["gpu-005"]
    plan = tasks.prioritize(run, tasks.load_latest(run, store), NOW + 6 * M, store=store,
                            dag_id="continuous_validation", run_id=decision.run_id)
    assert [(p.node_name, p.test_name, p.why) for p in plan.pairs] == [
        ("gpu-005", "gpu_health", due.SUSPECT), ("gpu-005", "dl_unit", due.SUSPECT)]
    record(store, "gpu-005", "gpu_health", "pass", NOW + 8 * M)
    tick(cluster, store, config, NOW + 9 * M)
    assert taints(cluster, "gpu-005") == [gate.KEY]  # one suite is not the bundle
    record(store, "gpu-005", "dl_unit", "pass", NOW + 12 * M)
    # the run's accept task, right after its record: the taint goes now, not at the next tick
    report = signals.accept_after_run(run, store, cluster.core_v1(), run_id=decision.run_id, now=NOW + 13 * M)
    assert report.accepted == ["gpu-005"] and report.applied == {}
    assert taints(cluster, "gpu-005") == [] and kinds(store, "gpu-005") == [life.GATED, life.ACCEPTED]
    assert not cluster.core_v1().read_node("gpu-005").metadata.annotations.get(gate.ANN_SINCE)


def test_a_failing_new_node_stays_out_and_is_quarantined(cluster, store):
    config = settings()
    tasks.discover({}, config, cluster.core_v1(), now=NOW, store=store)
    cluster.add_gpu_node("gpu-005")
    tick(cluster, store, config, NOW + 5 * M)
    for at in (NOW + 10 * M, NOW + 20 * M):  # failed, and failed its retest: confirmed
        record(store, "gpu-005", "gpu_health", "fail", at)
    found = tasks.discover({}, config, cluster.core_v1(), now=NOW + 21 * M, store=store)
    assert tasks.quarantine(found, store, cluster.core_v1(), run_id="r2", now=NOW + 22 * M).quarantined == ["gpu-005"]
    report = signals.accept(cluster.core_v1(), config, None, store, run_id="r3", now=NOW + 13 * H)
    assert report.failed == ["gpu-005"] and report.let_go == []  # a failure is kept past the maximum hold
    assert gate.KEY in taints(cluster, "gpu-005") and LABEL in cluster.core_v1().read_node("gpu-005").metadata.labels
    assert kinds(store, "gpu-005") == [life.GATED, life.QUARANTINED]


def test_a_mass_reboot_opens_the_breaker_and_each_node_is_still_validated_first(cluster, store, caplog):
    config = settings()
    tasks.discover({}, config, cluster.core_v1(), now=NOW, store=store)
    for name in NODES:  # a driver rollout: every node rebooted
        cluster.patch_node(name, reboot=True)
    decision = tick(cluster, store, config, NOW + 5 * M)
    assert all(taints(cluster, n) == [] for n in NODES) and all(kinds(store, n) == [] for n in NODES)
    assert "acceptance CIRCUIT BREAKER OPEN: 4 node(s) joined, rebooted or came back at once" in caplog.text
    assert decision.nodes == NODES  # suspects all the same: validated first, without the taint
    # and each says so wherever suspicion shows (fleet page, node page, cluster-doctor status)
    assert all("acceptance gate (reboot): breaker open, NOT tainted: its whole bundle first, users not held"
               in " ".join(s.evidence) for s in suspect_now(store).values())


def test_over_max_nodes_the_rest_are_validated_first_untainted_and_say_why(cluster, store):
    config = settings(max_nodes=1)
    tasks.discover({}, config, cluster.core_v1(), now=NOW, store=store)
    cluster.add_gpu_node("gpu-005")
    cluster.add_gpu_node("gpu-006")
    report = signals.accept(cluster.core_v1(), config, tasks_update(cluster, store, config, NOW + 5 * M), store,
                                 run_id="r1", now=NOW + 5 * M)
    assert report.applied == {"gpu-005": "new"} and report.waiting == ["gpu-006"]
    assert taints(cluster, "gpu-005") == [gate.KEY] and taints(cluster, "gpu-006") == []
    found = suspect_now(store)
    assert "its whole bundle before users" in found["gpu-005"].evidence[0]
    assert "over acceptance.max_nodes (1), NOT tainted" in found["gpu-006"].evidence[0]


def test_a_node_no_validation_answered_is_let_go_at_the_maximum_hold_and_reported(cluster, store, caplog):
    config = settings(max_hold_hours=2)
    tasks.discover({}, config, cluster.core_v1(), now=NOW, store=store)
    cluster.add_gpu_node("gpu-005")
    tick(cluster, store, config, NOW + 5 * M)
    tick(cluster, store, config, NOW + 2 * H)
    assert taints(cluster, "gpu-005") == [gate.KEY]
    tick(cluster, store, config, NOW + 5 * M + 2 * H)
    assert taints(cluster, "gpu-005") == [] and kinds(store, "gpu-005") == [life.GATED, life.RELEASED]
    assert "gpu-005 held 2:00:00 without a validation answering: taint removed, node NOT validated" in caplog.text


def test_a_dry_run_patches_nothing_and_a_provisioning_taint_is_the_gate(cluster, store):
    dry = settings(dry_run=True)
    tasks.discover({}, dry, cluster.core_v1(), now=NOW, store=store)
    cluster.add_gpu_node("gpu-005")
    patches = cluster.counters()["by_verb_resource"].get("patch nodes", 0)
    assert tick(cluster, store, dry, NOW + 5 * M).nodes == ["gpu-005"]  # still validated first
    assert taints(cluster, "gpu-005") == [] and kinds(store, "gpu-005") == []
    assert cluster.counters()["by_verb_resource"].get("patch nodes", 0) == patches

    # a cluster whose provisioning taints nodes at join time: that key is the gate (no window for user pods)
    startup = {"key": "example.com/unvalidated", "value": "true", "effect": "NoSchedule"}
    config = settings(taint_key=startup["key"])
    cluster.add_gpu_node("gpu-006", taints=[startup])
    tick(cluster, store, config, NOW + 10 * M)
    assert cluster.core_v1().read_node("gpu-006").metadata.annotations[gate.ANN_WHY] == gate.PROVISIONED
    run = tasks.discover({"node_range": "gpu-006"}, config, cluster.core_v1(), now=NOW + 11 * M, store=store)
    assert [n.name for n in run.free] == ["gpu-006"]  # our pods tolerate it
    for test in TESTS:
        record(store, "gpu-006", test, "pass", NOW + 15 * M)
    tick(cluster, store, config, NOW + 16 * M)
    assert taints(cluster, "gpu-006") == [] and kinds(store, "gpu-006") == [life.ACCEPTED]


def test_a_gate_two_readers_open_at_once_is_recorded_accepted_once(cluster, store):
    """A fast-path tick and a run's accept task both judge the node passed from their own reads: the second
    patch conflicts (its resourceVersion is stale), re-reads, finds the taint gone and records nothing."""
    from cluster_doctor.kube import acceptance
    from cluster_doctor.kube.node_patch import read_node

    config = settings()
    tasks.discover({}, config, cluster.core_v1(), now=NOW, store=store)
    cluster.add_gpu_node("gpu-005")
    tick(cluster, store, config, NOW + 5 * M)
    stale = read_node(cluster.core_v1(), "gpu-005")  # the other reader's view: still gated
    for test in TESTS:
        record(store, "gpu-005", test, "pass", NOW + 10 * M)
    assert tick(cluster, store, config, NOW + 11 * M) is not None and taints(cluster, "gpu-005") == []
    policy = gate.AcceptancePolicy.from_mapping(config.acceptance)
    assert not acceptance._open(cluster.core_v1(), store, policy, stale, life.ACCEPTED, "late reader",
                                run_id="r2", now=NOW + 11 * M)
    assert kinds(store, "gpu-005") == [life.GATED, life.ACCEPTED]
