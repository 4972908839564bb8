"""Behaviour seen on a real kube-apiserver and kube-scheduler that the emulator reproduces (the message texts
are the upstream ones; SOURCES.md names where each comes from)."""

from __future__ import annotations

import json

import pytest
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


def _preempt_pending(emu, v1):
    """A validation-like pod bound to a node but not started (Pending), preempted by a higher-priority pod."""
    emu.configure(static_termination_seconds=1)  # the kubelet takes a moment to tear down its sandbox
    client.SchedulingV1Api(v1.api_client).create_priority_class({"metadata": {"name": "high"}, "value": 1000})
    emu.add_gpu_node("gpu-1")
    emu.set_script("gpu-1", "never_start", labels={"role": "victim"})
    v1.create_namespaced_pod("default", pod("victim", gpus=8, node="gpu-1", labels={"role": "victim"}))
    assert wait_pod(v1, "victim", until=scheduled).status.phase == "Pending"
    v1.create_namespaced_pod("default", pod("urgent", gpus=8, node="gpu-1", priorityClassName="high"))
    victim = wait_pod(v1, "victim", until=lambda p: p.metadata.deletion_timestamp is not None)
    uid = v1.read_namespaced_pod("urgent", "default").metadata.uid
    [event] = [e for e in events_for(v1, "victim") if e.reason == "Preempted"]
    assert event.message == f"Preempted by pod {uid} on node gpu-1" and event.action == "Preempting"
    wait_gone(v1, "victim")
    return victim


def test_preemption_before_1_26_has_no_disruption_condition(emu, v1):
    emu.configure(kubernetes_version="1.25")
    victim = _preempt_pending(emu, v1)
    assert not any(c.type == "DisruptionTarget" for c in victim.status.conditions)
    assert client.VersionApi(v1.api_client).get_code().minor == "25"


def test_preemption_from_1_26_adds_the_disruption_condition(emu, v1):
    victim = _preempt_pending(emu, v1)
    [cond] = [c for c in victim.status.conditions if c.type == "DisruptionTarget"]
    assert cond.reason == "PreemptionByScheduler"


def test_scheduler_events_are_events_k8s_io_shaped_and_never_aggregated(emu, v1):
    emu.add_gpu_node("gpu-1", gpus=4)
    v1.create_namespaced_pod("default", pod("big", gpus=8))
    wait_pod(v1, "big", until=unschedulable)
    emu.patch_node("gpu-1", labels={"touched": "1"})  # a cluster change: the scheduler tries again
    emu.wait_for(lambda: len([e for e in events_for(v1, "big") if e.reason == "FailedScheduling"]) == 2)
    raw = json.loads(v1.list_namespaced_event("default", field_selector="reason=FailedScheduling",
                                              _preload_content=False).data)["items"]
    assert len({e["metadata"]["name"] for e in raw}) == 2
    for e in raw:
        assert e["eventTime"] and e["reportingComponent"] == "default-scheduler" and e["reportingInstance"]
        assert e["action"] == "Scheduling" and e["count"] is None
        assert e["firstTimestamp"] is None and e["lastTimestamp"] is None


def test_pod_log_through_an_unreachable_kubelet_is_a_500(emu, v1):
    emu.add_gpu_node("gpu-1")
    emu.set_script("gpu-1", "exit", log="done")
    v1.create_namespaced_pod("default", pod("p", command=["x"], node="gpu-1"))
    done = wait_pod(v1, "p")
    emu.configure(unreachable_kubelets=["gpu-1"])
    with pytest.raises(client.ApiException) as exc:
        v1.read_namespaced_pod_log("p", "default", follow=True, _preload_content=False)
    body = json.loads(exc.value.body)
    ip = done.status.host_ip
    assert exc.value.status == 500 and body == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 500,
        "message": f'Get "https://{ip}:10250/containerLogs/default/p/base?follow=true": dial tcp {ip}:10250: '
                   "connect: connection refused"}
    emu.configure(unreachable_kubelets=[])
    assert v1.read_namespaced_pod_log("p", "default", _preload_content=False).data == b"done\n"


def test_unbound_and_missing_claims_keep_the_pod_pending(emu, v1):
    emu.add_gpu_node("gpu-1")
    emu.add_gpu_node("gpu-2")
    emu.set_script("*", "never_start")
    v1.create_namespaced_persistent_volume_claim("default", {"metadata": {"name": "results"}, "spec": {
        "accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "10Gi"}}}})
    assert v1.read_namespaced_persistent_volume_claim("results", "default").status.phase == "Pending"
    for name, claim in (("unbound", "results"), ("missing", "nope")):
        p = pod(name, gpus=1)
        p["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        v1.create_namespaced_pod("default", p)
    tail = " preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    p = wait_pod(v1, "unbound", until=unschedulable)
    assert p.status.conditions[-1].message == (
        "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims." + tail)
    p = wait_pod(v1, "missing", until=unschedulable)
    assert p.status.conditions[-1].message == '0/2 nodes are available: persistentvolumeclaim "nope" not found.' + tail
    # a matching volume appears: the claim binds (both Bound) and the pod schedules
    v1.create_persistent_volume({"metadata": {"name": "pv-1"}, "spec": {
        "capacity": {"storage": "100Gi"}, "accessModes": ["ReadWriteMany"], "nfs": {"server": "nfs", "path": "/x"}}})
    assert wait_pod(v1, "unbound", until=scheduled).spec.node_name
    claim = v1.read_namespaced_persistent_volume_claim("results", "default")
    assert claim.status.phase == "Bound" and claim.spec.volume_name == "pv-1"
    assert v1.read_persistent_volume("pv-1").status.phase == "Bound"
    assert [c.metadata.name for c in v1.list_persistent_volume_claim_for_all_namespaces().items] == ["results"]


def test_pvc_dirs_claims_are_bound_objects_and_deleting_one_leaves_the_pod_pending(tmp_path):
    """A claim named in pvc_dirs is a real Bound PVC (at start, in later namespaces, after reset), so a client
    reading it sees what a cluster with a provisioned claim has; once deleted, nothing stands in for it."""
    from k8s_emulator import EmulatorProcess

    from tests.tools.k8s_emulator.conftest import FAST

    with EmulatorProcess(pvc_dirs={"results": str(tmp_path)}, settings=dict(FAST)) as emu:
        v1 = emu.core_v1()
        for _ in range(2):  # as started, then after a reset
            v1.create_namespace({"metadata": {"name": "validation"}})
            claim = v1.read_namespaced_persistent_volume_claim("results", "validation")
            assert claim.status.phase == "Bound" and claim.spec.volume_name and claim.metadata.uid
            assert claim.metadata.annotations["pv.kubernetes.io/bind-completed"] == "yes"
            assert v1.read_namespaced_persistent_volume_claim("results", "default").status.phase == "Bound"
            emu.reset()
        v1.create_namespace({"metadata": {"name": "validation"}})
        emu.add_gpu_node("gpu-1")
        emu.set_script("*", "never_start")
        v1.delete_namespaced_persistent_volume_claim("results", "validation")
        p = pod("needs-results", gpus=1, namespace="validation")
        p["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "results"}}]
        v1.create_namespaced_pod("validation", p)
        p = wait_pod(v1, "needs-results", "validation", until=unschedulable)
        assert p.status.conditions[-1].message.startswith(
            '0/1 nodes are available: persistentvolumeclaim "results" not found.')
        # set_pvc_dir at run time: the claim exists again where it is missing, and the pod schedules
        emu.set_pvc_dir("results", str(tmp_path / "again"))
        assert wait_pod(v1, "needs-results", "validation", until=scheduled).spec.node_name == "gpu-1"
        v1.delete_namespace("validation")


def test_storage_classes_are_served_with_their_defaults(emu, v1):
    storage = client.StorageV1Api(v1.api_client)
    made = storage.create_storage_class({"metadata": {"name": "standard"}, "provisioner": "kubernetes.io/no-provisioner"})
    assert (made.volume_binding_mode, made.reclaim_policy) == ("Immediate", "Delete")
    storage.create_storage_class({"metadata": {"name": "local"}, "provisioner": "rancher.io/local-path",
                                  "volumeBindingMode": "WaitForFirstConsumer"})
    assert storage.read_storage_class("local").volume_binding_mode == "WaitForFirstConsumer"
    assert sorted(c.metadata.name for c in storage.list_storage_class().items) == ["local", "standard"]
    with pytest.raises(client.ApiException) as info:
        storage.create_storage_class({"metadata": {"name": "bad"}, "volumeBindingMode": "Later"})
    body = json.loads(info.value.body)
    assert info.value.status == 422 and body["message"] == (
        'StorageClass.storage.k8s.io "bad" is invalid: [provisioner: Required value, volumeBindingMode: Unsupported '
        'value: "Later": supported values: "Immediate", "WaitForFirstConsumer"]')
    with pytest.raises(client.ApiException) as info:
        storage.read_storage_class("nope")
    assert info.value.status == 404 and json.loads(info.value.body)["message"] == \
        'storageclasses.storage.k8s.io "nope" not found'


def test_forbidden_resources_answer_the_rbac_authorizers_403(emu, v1):
    emu.configure(forbidden=["get persistentvolumeclaims", "storageclasses.storage.k8s.io"])
    with pytest.raises(client.ApiException) as info:
        v1.read_namespaced_persistent_volume_claim("results", "default")
    body = json.loads(info.value.body)
    assert info.value.status == 403 and body["reason"] == "Forbidden"
    assert body["message"] == ('persistentvolumeclaims "results" is forbidden: User "system:anonymous" cannot get '
                               'resource "persistentvolumeclaims" in API group "" in the namespace "default"')
    assert body["details"] == {"name": "results", "kind": "persistentvolumeclaims"}
    assert v1.list_namespaced_persistent_volume_claim("default").items == []  # only "get" is refused
    with pytest.raises(client.ApiException) as info:
        client.StorageV1Api(v1.api_client).list_storage_class()
    assert json.loads(info.value.body)["message"] == (
        'storageclasses.storage.k8s.io is forbidden: User "system:anonymous" cannot list resource "storageclasses" '
        'in API group "storage.k8s.io" at the cluster scope')


def test_new_nodes_are_tainted_not_ready_until_ready(emu, v1):
    emu.add_gpu_node("gpu-1", ready=None)  # just registered: no Ready condition yet
    assert [(t.key, t.effect) for t in v1.read_node("gpu-1").spec.taints] == [("node.kubernetes.io/not-ready",
                                                                                 "NoSchedule")]
    v1.create_namespaced_pod("default", pod("p", gpus=1))
    p = wait_pod(v1, "p", until=unschedulable)
    assert "1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }" in p.status.conditions[-1].message
    emu.set_node_ready("gpu-1", True)
    assert not v1.read_node("gpu-1").spec.taints
    assert wait_pod(v1, "p", until=scheduled).spec.node_name == "gpu-1"


def test_a_deleted_bound_pod_is_terminating_until_its_kubelet_confirms(emu, v1):
    emu.add_gpu_node("gpu-1")
    v1.create_namespaced_pod("default", pod("p", command=SLOW_EXIT, node="gpu-1", labels={"app": "x"}))
    wait_pod(v1, "p", phases=("Running",))
    wait_ready(v1, "p")
    emu.set_node_ready("gpu-1", False)  # the kubelet cannot confirm: the pod stays, Terminating
    v1.delete_namespaced_pod("p", "default", grace_period_seconds=1)
    listed = v1.list_namespaced_pod("default", label_selector="app=x").items
    assert [p.metadata.name for p in listed] == ["p"] and listed[0].metadata.deletion_timestamp is not None
    emu.wait_for(lambda: wait_pod(v1, "p", phases=("Succeeded", "Failed")), message="containers stopped")
    assert v1.read_namespaced_pod("p", "default").metadata.deletion_timestamp is not None
    emu.set_node_ready("gpu-1", True)
    wait_gone(v1, "p")


def test_long_scheduler_messages_are_kept_whole(emu, v1):
    for i in range(40):
        emu.add_gpu_node(f"gpu-{i:03d}", taints=[{"key": f"team-{i:03d}", "value": "reserved", "effect": "NoSchedule"}])
    v1.create_namespaced_pod("default", pod("p", gpus=1))
    message = wait_pod(v1, "p", until=unschedulable).status.conditions[-1].message
    assert len(message) > 1500 and message.count("untolerated taint") == 40
    [event] = [e for e in events_for(v1, "p") if e.reason == "FailedScheduling"]
    assert event.message == message
