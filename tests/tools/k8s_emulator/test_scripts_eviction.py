"""Scripted outcomes per node (fault injection), eviction (API and kubelet), preemption of running pods,
and the pod history with tombstones."""

from __future__ import annotations

import json

import pytest

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


def _term(p):
    return p.status.container_statuses[0].state.terminated


def test_exit_crash_oom_scripts(emu, v1):
    for n in ("ok", "bad", "crash", "oom"):
        emu.add_gpu_node(n)
    emu.set_script(
        "ok", "exit", exit_code=0, log="all good\nsecond line", termination_message='{"status":"pass"}'
    )
    emu.set_script("bad", "exit", exit_code=1, run_seconds=0.2, log="check failed: nccl 120 GB/s < 460")
    emu.set_script("crash", "crash")
    emu.set_script("oom", "oom")
    for n in ("ok", "bad", "crash", "oom"):
        p = pod(f"on-{n}", command=["python", "-m", "suite"], node=n, gpus=8)
        p["spec"]["containers"][0]["terminationMessagePolicy"] = "FallbackToLogsOnError"
        v1.create_namespaced_pod("default", p)
    ok = wait_pod(v1, "on-ok")
    assert ok.status.phase == "Succeeded" and json.loads(_term(ok).message) == {"status": "pass"}
    assert (
        v1.read_namespaced_pod_log("on-ok", "default", _preload_content=False).data
        == b"all good\nsecond line\n"
    )
    bad = wait_pod(v1, "on-bad")
    assert bad.status.phase == "Failed" and _term(bad).exit_code == 1 and _term(bad).reason == "Error"
    assert _term(bad).message == "check failed: nccl 120 GB/s < 460\n"  # FallbackToLogsOnError
    crash = wait_pod(v1, "on-crash")
    assert _term(crash).exit_code == 139 and _term(crash).reason == "Error"
    oom = wait_pod(v1, "on-oom")
    assert _term(oom).exit_code == 137 and _term(oom).reason == "OOMKilled"
    assert emu.processes() == []  # scripted pods run no local process


def test_never_schedule_and_never_start(emu, v1):
    emu.add_gpu_node("nosched")
    emu.add_gpu_node("nostart")
    emu.set_script("nosched", "never_schedule")
    emu.set_script("nostart", "never_start")
    for n in ("nosched", "nostart"):
        v1.create_namespaced_pod("default", pod(f"p-{n}", command=["true"], node=n, gpus=8))
    p = wait_pod(v1, "p-nosched", until=unschedulable)
    assert "Insufficient nvidia.com/gpu" in p.status.conditions[-1].message
    assert any(e.reason == "FailedScheduling" for e in events_for(v1, "p-nosched"))
    p = wait_pod(v1, "p-nostart", until=lambda p: scheduled(p) and p.status.container_statuses)
    assert p.status.phase == "Pending"
    assert p.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    for n in ("nosched", "nostart"):  # deleting them works from either state
        v1.delete_namespaced_pod(f"p-{n}", "default")
    for n in ("nosched", "nostart"):
        wait_gone(v1, f"p-{n}")


def test_once_versus_sticky_and_label_scoped_scripts(emu, v1):
    emu.add_gpu_node("gpu-1")
    emu.set_script("gpu-1", "exit", exit_code=0)  # sticky default for the node
    emu.set_script("gpu-1", "exit", exit_code=5, once=True)  # the next pod only
    emu.set_script("gpu-1", "exit", exit_code=7, labels={"test": "nccl"})  # pods with that label
    v1.create_namespaced_pod("default", pod("first", command=["x"], node="gpu-1"))
    assert _term(wait_pod(v1, "first")).exit_code == 5
    v1.create_namespaced_pod("default", pod("second", command=["x"], node="gpu-1"))
    assert _term(wait_pod(v1, "second")).exit_code == 0
    v1.create_namespaced_pod("default", pod("labelled", command=["x"], node="gpu-1", labels={"test": "nccl"}))
    assert _term(wait_pod(v1, "labelled")).exit_code == 7
    emu.clear_scripts()
    assert emu.scripts() == []


def test_eviction_api_is_graceful_delete_with_disruption_condition(emu, v1):
    emu.add_gpu_node("gpu-1")
    v1.create_namespaced_pod("default", pod("victim", command=SLOW_EXIT, node="gpu-1"))
    wait_pod(v1, "victim", phases=("Running",))
    wait_ready(v1, "victim")
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "victim", "namespace": "default"},
    }
    v1.create_namespaced_pod_eviction("victim", "default", body)
    p = wait_pod(v1, "victim", until=lambda p: p.metadata.deletion_timestamp is not None)
    dt = next(c for c in p.status.conditions if c.type == "DisruptionTarget")
    assert dt.reason == "EvictionByEvictionAPI"
    wait_gone(v1, "victim")
    rec = next(h for h in emu.pod_history() if h["name"] == "victim")
    assert rec["deleted"] and rec["deletion_requested"]


def test_kubelet_eviction_leaves_failed_evicted_pod(emu, v1):
    emu.add_gpu_node("gpu-1")
    emu.add_gpu_node("gpu-2")
    v1.create_namespaced_pod("default", pod("pressured", command=SLOW_EXIT, node="gpu-1"))
    wait_pod(v1, "pressured", phases=("Running",))
    emu.evict("default", "pressured")  # node-pressure eviction by the kubelet, not the Eviction API
    p = wait_pod(v1, "pressured", timeout=5)
    assert p.status.phase == "Failed" and p.status.reason == "Evicted"
    assert p.status.message.startswith("The node was low on resource: memory.")
    assert any(c.type == "DisruptionTarget" and c.reason == "TerminationByKubelet" for c in p.status.conditions)
    assert "Evicted" in [e.reason for e in events_for(v1, "pressured")]
    # a simulated user pod behaves the same
    emu.add_user_pod("gpu-2", name="user", gpus=8)
    emu.evict("default", "user")
    u = v1.read_namespaced_pod("user", "default")
    assert u.status.phase == "Failed" and u.status.reason == "Evicted"
    assert u.status.container_statuses[0].state.terminated.exit_code == 137


def test_preempt_running_pod_via_control(emu, v1):
    emu.add_gpu_node("gpu-1")
    emu.add_gpu_node("gpu-2")
    v1.create_namespaced_pod("default", pod("short-lived", command=SLOW_EXIT, node="gpu-1"))
    wait_pod(v1, "short-lived", phases=("Running",))
    wait_ready(v1, "short-lived")
    emu.preempt("default", "short-lived")
    p = wait_pod(v1, "short-lived", until=lambda p: p.metadata.deletion_timestamp is not None, timeout=5)
    assert any(c.type == "DisruptionTarget" and c.reason == "PreemptionByScheduler" for c in p.status.conditions)
    wait_gone(v1, "short-lived")
    emu.add_user_pod("gpu-2", name="user", gpus=8)
    emu.preempt("default", "user")
    wait_gone(v1, "user")
    names = {h["name"]: h for h in emu.pod_history()}
    assert names["short-lived"]["deleted"] and names["user"]["deleted"]


def test_history_keeps_tombstones(emu, v1):
    emu.add_gpu_node("gpu-1")
    emu.set_script("gpu-1", "exit")
    v1.create_namespaced_pod("default", pod("a", command=["x"], node="gpu-1", labels={"app": "cd"}))
    v1.create_namespaced_pod("default", pod("b", command=["x"], node="gpu-1", labels={"app": "cd"}))
    wait_pod(v1, "a")
    v1.delete_namespaced_pod("a", "default")
    wait_gone(v1, "a")
    hist = emu.pod_history("app=cd")
    assert [(h["name"], h["deleted"]) for h in hist] == [("a", True), ("b", False)]
    assert hist[0]["node"] == "gpu-1" and hist[0]["phase"] == "Succeeded" and hist[0]["deleted_at"]
    assert [h["name"] for h in emu.live_pods("app=cd")] == ["b"]


def test_unknown_script_action_is_rejected(emu):
    from k8s_emulator import EmulatorError

    with pytest.raises(EmulatorError) as exc:
        emu.set_script("gpu-1", "explode")
    assert exc.value.code == 400
