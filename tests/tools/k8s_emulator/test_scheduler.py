"""The simulated scheduler: resource fit (GPUs, init containers), taints, cordon, affinity, preemption."""

from __future__ import annotations

import time

from kubernetes import client

from tests.support.emu_helpers import (
    SLOW_EXIT,
    events_for,
    pod,
    scheduled,
    unschedulable,
    wait_gone,
    wait_pod,
    wait_ready,
)


def _pod_scheduled_condition(p):
    return next(c for c in p.status.conditions if c.type == "PodScheduled")


def test_gpu_fit_and_failed_scheduling_then_fits_when_freed(emu, v1):
    emu.add_gpu_node("gpu-1", gpus=8)
    emu.set_script("gpu-1", "never_start")  # keep our pods bound without running anything
    emu.add_user_pod("gpu-1", name="user", gpus=6)
    v1.create_namespaced_pod("default", pod("small", gpus=2, node="gpu-1"))
    v1.create_namespaced_pod("default", pod("big", gpus=4, node="gpu-1"))
    assert wait_pod(v1, "small", until=scheduled).spec.node_name == "gpu-1"
    p = wait_pod(v1, "big", until=unschedulable)
    cond = _pod_scheduled_condition(p)
    assert cond.reason == "Unschedulable"
    assert cond.message == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are "
        "available: 1 No preemption victims found for incoming pod."
    )
    evs = [e for e in events_for(v1, "big") if e.reason == "FailedScheduling"]
    assert len(evs) == 1 and evs[0].type == "Warning" and evs[0].message == cond.message
    assert evs[0].reporting_component == "default-scheduler" and evs[0].event_time is not None
    # a cluster change makes the scheduler retry: each attempt is an event object of its own
    emu.patch_node("gpu-1", labels={"touched": "yes"})
    emu.wait_for(lambda: len([e for e in events_for(v1, "big") if e.reason == "FailedScheduling"]) == 2)
    v1.delete_namespaced_pod("user", "default")
    p = wait_pod(v1, "big", until=scheduled)
    assert p.spec.node_name == "gpu-1"
    assert any(
        e.reason == "Scheduled" and e.message == "Successfully assigned default/big to gpu-1"
        for e in events_for(v1, "big")
    )


def test_init_containers_count_the_kubernetes_way(emu, v1):
    emu.add_gpu_node("gpu-1", gpus=8)
    emu.set_script("gpu-1", "never_start")
    emu.add_user_pod("gpu-1", name="user", gpus=4)  # 4 GPUs left

    def with_init(name, init_gpus, app_gpus):
        p = pod(name, node="gpu-1")
        p["spec"]["initContainers"] = [
            {"name": f"init{i}", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": str(g)}}}
            for i, g in enumerate(init_gpus)
        ]
        p["spec"]["containers"] = [
            {"name": f"app{i}", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": str(g)}}}
            for i, g in enumerate(app_gpus)
        ]
        return p

    # init requests are not added to app requests: max(max(init)=4, sum(app)=2+2) = 4 fits
    v1.create_namespaced_pod("default", with_init("fits", [4, 3], [2, 2]))
    assert wait_pod(v1, "fits", until=scheduled)
    v1.delete_namespaced_pod("fits", "default")
    wait_gone(v1, "fits")
    # but the largest init container alone must fit: max(8, 1) = 8 > 4
    v1.create_namespaced_pod("default", with_init("too-big-init", [8], [1]))
    p = wait_pod(v1, "too-big-init", until=unschedulable)
    assert "1 Insufficient nvidia.com/gpu" in _pod_scheduled_condition(p).message


def test_taints_tolerations_cordon_and_not_ready(emu, v1):
    emu.add_gpu_node("tainted", taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}])
    emu.add_gpu_node("cordoned")
    emu.add_gpu_node("down", ready=False)
    emu.add_gpu_node("gone", ready="Unknown")
    emu.set_script("*", "never_start")
    v1.patch_node("cordoned", {"spec": {"unschedulable": True}})  # what `kubectl cordon` sends
    node = v1.read_node("cordoned")
    assert {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"} in [
        {"key": t.key, "effect": t.effect} for t in node.spec.taints
    ]
    v1.create_namespaced_pod("default", pod("plain", gpus=1))
    msg = _pod_scheduled_condition(wait_pod(v1, "plain", until=unschedulable)).message
    assert msg.startswith(
        "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: ml}, "
        "1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, "
        "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, "
        "1 node(s) were unschedulable."
    )
    tolerating = pod(
        "tolerating",
        gpus=1,
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
    )
    v1.create_namespaced_pod("default", tolerating)
    assert wait_pod(v1, "tolerating", until=scheduled).spec.node_name == "tainted"
    # default tolerations were added at admission (DefaultTolerationSeconds)
    tol = {
        (t.key, t.effect, t.toleration_seconds)
        for t in v1.read_namespaced_pod("plain", "default").spec.tolerations
    }
    assert ("node.kubernetes.io/not-ready", "NoExecute", 300) in tol
    v1.patch_node("cordoned", {"spec": {"unschedulable": None}})  # uncordon: the pending pod now fits
    assert wait_pod(v1, "plain", until=scheduled).spec.node_name == "cordoned"
    emu.set_node_ready("down", True)
    assert not any(t.key == "node.kubernetes.io/not-ready" for t in v1.read_node("down").spec.taints or [])


def test_node_selector_and_affinity(emu, v1):
    emu.add_gpu_node("h100-1")
    emu.add_gpu_node("a100-1", product="NVIDIA-A100-SXM4-80GB")
    emu.add_gpu_node("a100-2", product="NVIDIA-A100-SXM4-80GB")
    emu.set_script("*", "never_start")
    v1.create_namespaced_pod(
        "default", pod("sel", gpus=8, nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    )
    assert wait_pod(v1, "sel", until=scheduled).spec.node_name == "h100-1"
    v1.create_namespaced_pod("default", pod("pinned", gpus=8, node="a100-2"))
    assert wait_pod(v1, "pinned", until=scheduled).spec.node_name == "a100-2"
    v1.create_namespaced_pod("default", pod("pinned-full", gpus=1, node="a100-2"))
    msg = _pod_scheduled_condition(wait_pod(v1, "pinned-full", until=unschedulable)).message
    assert msg == (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node "
        "affinity/selector. preemption: 0/3 nodes are available: 1 No preemption victims found for "
        "incoming pod, 2 Preemption is not helpful for scheduling."
    )


def test_priority_preemption_evicts_lower_priority_running_pod(emu, v1):
    sched = client.SchedulingV1Api(v1.api_client)
    sched.create_priority_class({"metadata": {"name": "validation-low"}, "value": -1000})
    sched.create_priority_class({"metadata": {"name": "user-high"}, "value": 1000})
    emu.add_gpu_node("gpu-1")
    low = pod(
        "low",
        gpus=8,
        node="gpu-1",
        command=SLOW_EXIT,
        priorityClassName="validation-low",
        terminationGracePeriodSeconds=5,
    )
    v1.create_namespaced_pod("default", low)
    running = wait_pod(v1, "low", phases=("Running",))
    wait_ready(v1, "low")
    assert running.spec.priority == -1000 and running.spec.preemption_policy == "PreemptLowerPriority"
    pids = emu.processes()
    assert len(pids) == 1
    v1.create_namespaced_pod("default", pod("high", gpus=8, node="gpu-1", priorityClassName="user-high"))
    victim = wait_pod(v1, "low", until=lambda p: p.metadata.deletion_timestamp is not None)
    dt = next(c for c in victim.status.conditions if c.type == "DisruptionTarget")
    assert dt.reason == "PreemptionByScheduler" and dt.message == (
        "default-scheduler: preempting to accommodate a higher priority pod"
    )
    high_uid = v1.read_namespaced_pod("high", "default").metadata.uid
    assert any(
        e.reason == "Preempted" and e.message == f"Preempted by pod {high_uid} on node gpu-1"
        for e in events_for(v1, "low")
    )
    wait_gone(v1, "low")
    assert wait_pod(v1, "high", until=scheduled).spec.node_name == "gpu-1"
    emu.wait_for(lambda: not emu.processes(), message="victim process killed")
    hist = {h["name"]: h for h in emu.pod_history()}
    assert hist["low"]["deleted"] and hist["low"]["deletion_requested"]


def test_preemption_policy_never_and_equal_priority(emu, v1):
    sched = client.SchedulingV1Api(v1.api_client)
    sched.create_priority_class({"metadata": {"name": "polite"}, "value": 100, "preemptionPolicy": "Never"})
    emu.add_gpu_node("gpu-1")
    emu.add_user_pod("gpu-1", name="user", gpus=8)  # priority 0
    v1.create_namespaced_pod("default", pod("polite", gpus=8, priorityClassName="polite"))
    msg = _pod_scheduled_condition(wait_pod(v1, "polite", until=unschedulable)).message
    assert msg == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: not eligible due to "
        "preemptionPolicy=Never."
    )
    v1.create_namespaced_pod("default", pod("same-priority", gpus=8))
    msg = _pod_scheduled_condition(wait_pod(v1, "same-priority", until=unschedulable)).message
    assert msg.endswith(
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    )
    assert v1.read_namespaced_pod("user", "default").metadata.deletion_timestamp is None


def test_unserved_scheduler_stays_pending_until_bound(emu, v1):
    emu.add_gpu_node("gpu-1")
    emu.set_script("*", "never_start")
    v1.create_namespaced_pod("default", pod("custom", gpus=1, schedulerName="my-scheduler"))
    v1.create_namespaced_pod("default", pod("vc", gpus=1, schedulerName="volcano"))
    assert wait_pod(v1, "vc", until=scheduled).spec.node_name == "gpu-1"
    time.sleep(0.3)
    p = v1.read_namespaced_pod("custom", "default")
    assert p.status.phase == "Pending" and not p.status.conditions and not events_for(v1, "custom")
    # another scheduler would bind it through the binding subresource
    v1.create_namespaced_pod_binding(
        "custom",
        "default",
        {"metadata": {"name": "custom"}, "target": {"kind": "Node", "name": "gpu-1"}},
        _preload_content=False,
    )
    assert wait_pod(v1, "custom", until=scheduled).spec.node_name == "gpu-1"


def test_pending_user_pod_lands_when_node_frees(emu, v1):
    emu.add_gpu_node("gpu-1")
    emu.add_user_pod("gpu-1", name="first", gpus=8)
    emu.add_user_pod("gpu-1", name="second", gpus=8, phase="Pending")
    assert wait_pod(v1, "second", until=unschedulable)
    emu.complete_pod("default", "first")
    p = wait_pod(v1, "second", phases=("Running",))
    assert p.spec.node_name == "gpu-1"


def test_match_fields_pins_by_node_name(emu, v1):
    emu.add_gpu_node("gpu-1")
    emu.add_gpu_node("gpu-2")
    emu.set_script("*", "never_start")
    p = pod("by-field", gpus=8)
    p["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-2"]}]}
                ]
            }
        }
    }
    v1.create_namespaced_pod("default", p)
    assert wait_pod(v1, "by-field", until=scheduled).spec.node_name == "gpu-2"
