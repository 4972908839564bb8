"""The simulated cluster of `make up`: the churn's decisions (pure), and the cluster it builds and moves
in a real emulator."""

from __future__ import annotations

import random

import pytest
import stack_cluster as sc
from k8s_emulator import EmulatorProcess

from tests.support.suite_pods import run_suite_pod

NODES = tuple(sc.node_names(10))


def view(*, busy=(), cordoned=(), finished=()) -> sc.View:
    return sc.View(NODES, frozenset(cordoned), frozenset(busy), tuple(finished))


def test_user_jobs_arrive_on_idle_schedulable_nodes_until_the_occupancy():
    knobs = sc.Knobs(occupancy=0.3, cordon_rate=0, uncordon_rate=0, fault_rate=0)
    for seed in range(50):
        [arrive] = sc.plan(view(busy=NODES[:2], cordoned=NODES[2:4]), random.Random(seed), knobs)
        assert arrive["action"] == "arrive" and arrive["node"] in NODES[4:]
        assert arrive["namespace"] in sc.USER_NAMESPACES and 120 <= arrive["run_seconds"] <= 900
    assert sc.plan(view(busy=NODES[:3]), random.Random(0), knobs) == []  # 3 of 10 busy: enough


def test_the_fault_node_is_kept_free_for_its_first_run():
    # make up's churn keeps user jobs and cordons off the node with the injected fault (gpu-004), so the
    # first run validates it and shows its failure, whatever the seed
    assert sc.FAULTY in NODES
    kept = frozenset({sc.FAULTY})
    for seed in range(200):
        for knobs in (sc.Knobs(occupancy=1, cordon_rate=0, uncordon_rate=0, fault_rate=0, keep_free=kept),
                      sc.Knobs(occupancy=0, cordon_rate=1, uncordon_rate=0, fault_rate=0, keep_free=kept)):
            assert all(a.get("node") != sc.FAULTY for a in sc.plan(view(), random.Random(seed), knobs))
    unkept = sc.Knobs(occupancy=1, cordon_rate=0, uncordon_rate=0, fault_rate=0)
    assert any(sc.plan(view(), random.Random(seed), unkept)[0]["node"] == sc.FAULTY for seed in range(200))


def test_cordons_stay_bounded_and_get_lifted():
    knobs = sc.Knobs(occupancy=0, cordon_rate=1, uncordon_rate=0, fault_rate=0, max_cordoned=2)
    [cordon] = sc.plan(view(cordoned=NODES[:1]), random.Random(1), knobs)
    assert cordon["action"] == "cordon" and cordon["node"] not in NODES[:1]
    assert sc.plan(view(cordoned=NODES[:2]), random.Random(1), knobs) == []  # at the bound
    lift = sc.Knobs(occupancy=0, cordon_rate=0, uncordon_rate=1, fault_rate=0)
    assert sc.plan(view(cordoned=NODES[3:5]), random.Random(1), lift)[0] in (
        {"action": "uncordon", "node": NODES[3]}, {"action": "uncordon", "node": NODES[4]})


def test_finished_jobs_are_cleaned_up_and_faults_come_at_their_rate():
    knobs = sc.Knobs(occupancy=0, cordon_rate=0, uncordon_rate=0, fault_rate=0.25)
    rng = random.Random(7)
    steps = [sc.plan(view(finished=("ml-research/train-a",)), rng, knobs) for _ in range(400)]
    assert all(step[0] == {"action": "cleanup", "pod": "ml-research/train-a"} for step in steps)
    faults = [a for step in steps for a in step if a["action"] == "fault"]
    assert 60 <= len(faults) <= 140 and {a["node"] for a in faults} <= set(NODES)


def test_the_same_seed_makes_the_same_churn():
    knobs = sc.Knobs(fault_rate=0.5)
    run = [sc.plan(view(busy=NODES[:1]), random.Random(3), knobs) for _ in range(2)]
    assert run[0] == run[1]


@pytest.fixture
def emu(tmp_path):
    with EmulatorProcess(state_dir=str(tmp_path / "emu")) as e:
        yield e


def test_setup_builds_the_cluster_of_include_k8s_and_the_churn_moves_it(emu, tmp_path):
    nodes = sc.node_names(6)
    started = sc.setup(emu, nodes, tmp_path / "pvc", random.Random(5))
    v1 = emu.core_v1()
    claim = v1.read_namespaced_persistent_volume_claim(sc.PVC, sc.NAMESPACE)
    assert claim.status.phase == "Bound" and claim.spec.volume_name == "stack-nfs"
    assert {s["node"] for s in emu.scripts()} == {sc.FAULTY}  # the ECC fault, gpu_health pods only
    assert started[0] == {"action": "fault", "node": sc.FAULTY, "sticky": True}
    seen = sc.observe(v1, nodes)
    assert seen.busy == {a["node"] for a in started if a["action"] == "arrive"} and len(seen.busy) == 1
    assert seen.cordoned == frozenset() and seen.finished_jobs == ()

    idle = sorted(set(nodes) - seen.busy)
    sc.apply(emu, v1, [{"action": "arrive", "node": idle[0], "namespace": "inference", "run_seconds": 0.2},
                       {"action": "cordon", "node": idle[1]}, {"action": "fault", "node": idle[2]}])
    after = sc.observe(v1, nodes)
    assert idle[1] in after.cordoned
    assert idle[2] in {s["node"] for s in emu.scripts() if s["once"]}
    done = emu.wait_for(lambda: sc.observe(v1, nodes).finished_jobs, timeout=30, message="the user job to end")
    [job] = v1.list_namespaced_pod("inference", label_selector=f"{sc.CHURN_LABEL}={idle[0]}").items
    assert job.spec.node_name == idle[0] and done == (f"inference/{job.metadata.name}",)
    sc.apply(emu, v1, [{"action": "cleanup", "pod": done[0]}, {"action": "uncordon", "node": idle[1]}])
    emu.wait_for(lambda: not v1.list_namespaced_pod("inference", label_selector=f"{sc.CHURN_LABEL}={idle[0]}").items,
                 timeout=30, message="the cleanup")
    assert sc.observe(v1, nodes).cordoned == frozenset()


def test_the_injected_fault_is_the_suites_own_failure_with_its_code_and_action(emu, tmp_path):
    """gpu-004's gpu_health pods run the real suite, which finds the fault in the node's kernel log: the
    summary the operator records carries the suite's code and recommended action (never a hand-written
    summary without them); another node's gpu_health, and gpu-004's other suites, are not touched."""
    nodes = sc.node_names(6)
    sc.setup(emu, nodes, tmp_path / "pvc", random.Random(5))
    faulty = run_suite_pod(emu, sc.FAULTY, "gpu_health", tmp_path / "out")
    assert faulty["node"] == sc.FAULTY and faulty["status"] == "fail"
    assert faulty["code"] == "XID_MEMORY_ERROR" and faulty["action"] == "reset_gpu", faulty
    [xid] = [c for c in faulty["checks"] if c["status"] == "fail"]
    assert xid["name"] == "xid" and xid["code"] == "XID_MEMORY_ERROR" and xid["action"] == "reset_gpu"
    assert "Xid 94" in faulty["reason"] and "Contained ECC error" in faulty["reason"]
    assert faulty["gpu_model"] is None or "A100" not in faulty["gpu_model"]  # no other node's GPU state
    healthy = run_suite_pod(emu, "gpu-001", "gpu_health", tmp_path / "out")
    assert healthy["status"] == "pass" and "Xid" not in healthy["reason"]
    # a churn fault: the node's next gpu_health run only
    sc.apply(emu, emu.core_v1(), [{"action": "fault", "node": "gpu-002"}])
    assert run_suite_pod(emu, "gpu-002", "gpu_health", tmp_path / "out")["code"] == "XID_MEMORY_ERROR"
    assert run_suite_pod(emu, "gpu-002", "gpu_health", tmp_path / "out")["status"] == "pass"
