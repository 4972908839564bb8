"""What the signals between validations read, as a real cluster shows it: allocatable below capacity, a new bootID
with the kubelet's Rebooted event, conditions and events of node-problem-detector, failed pods with their
termination reason and message, an admission failure (texts: SOURCES.md)."""

from __future__ import annotations

import json


def _node(v1, name):
    return json.loads(v1.read_node(name, _preload_content=False).data)


def _events(v1, selector):
    return json.loads(v1.list_event_for_all_namespaces(field_selector=selector, _preload_content=False).data)["items"]


def test_the_device_plugin_withdrawing_a_gpu_lowers_allocatable_not_capacity(emu, v1):
    emu.add_gpu_node("gpu-001", 8)
    emu.patch_node("gpu-001", allocatable_gpus=7)
    status = _node(v1, "gpu-001")["status"]
    assert (status["allocatable"]["nvidia.com/gpu"], status["capacity"]["nvidia.com/gpu"]) == ("7", "8")


def test_a_reboot_gives_a_new_boot_id_and_the_kubelets_event(emu, v1):
    emu.add_gpu_node("gpu-001", 8)
    before = _node(v1, "gpu-001")["status"]["nodeInfo"]["bootID"]
    emu.patch_node("gpu-001", reboot=True)
    after = _node(v1, "gpu-001")["status"]["nodeInfo"]["bootID"]
    assert after != before and len(after) == 36
    [event] = _events(v1, "involvedObject.kind=Node,reason=Rebooted")
    assert (event["type"], event["message"]) == ("Warning", f"Node gpu-001 has been rebooted, boot id: {after}")
    assert event["involvedObject"]["name"] == "gpu-001" and event["source"] == {"component": "kubelet",
                                                                              "host": "gpu-001"}


def test_a_condition_moves_its_transition_time_only_when_its_status_changes(emu, v1):
    emu.add_gpu_node("gpu-001", 8)
    cond = {"type": "SysLogsXIDError", "status": "True", "reason": "XidError", "message": "Xid 79"}
    emu.patch_node("gpu-001", conditions=[cond])
    first = next(c for c in _node(v1, "gpu-001")["status"]["conditions"] if c["type"] == "SysLogsXIDError")
    emu.patch_node("gpu-001", conditions=[{**cond, "message": "Xid 79 again"}])
    again = next(c for c in _node(v1, "gpu-001")["status"]["conditions"] if c["type"] == "SysLogsXIDError")
    assert again["lastTransitionTime"] == first["lastTransitionTime"] and again["message"] == "Xid 79 again"
    assert {c["type"] for c in _node(v1, "gpu-001")["status"]["conditions"]} >= {"Ready", "SysLogsXIDError"}


def test_node_problem_detector_events_count_up(emu, v1):
    emu.add_gpu_node("gpu-001", 8)
    for _ in range(2):
        emu.node_event("gpu-001", "XidHardwareFailure", "NVRM: Xid (PCI:0000:b9:00): 79, pid=<unknown>")
    [event] = _events(v1, "involvedObject.kind=Node")
    assert (event["reason"], event["count"], event["source"]["component"]) == ("XidHardwareFailure", 2,
                                                                               "kernel-monitor")


def test_a_failed_pod_keeps_its_termination_reason_and_message(emu, v1):
    emu.add_gpu_node("gpu-001", 8)
    pod = emu.add_user_pod("gpu-001", name="trainer-0", namespace="default")
    emu.complete_pod("default", pod["metadata"]["name"], 1, message="RuntimeError: CUDA error: uncorrectable ECC error")
    got = json.loads(v1.list_pod_for_all_namespaces(field_selector="status.phase=Failed",
                                                    _preload_content=False).data)["items"]
    [term] = [cs["state"]["terminated"] for cs in got[0]["status"]["containerStatuses"]]
    assert (term["exitCode"], term["reason"], term["message"]) == (1, "Error",
                                                                   "RuntimeError: CUDA error: uncorrectable ECC error")


def test_a_pod_rejected_at_admission_fails_with_the_device_plugins_message(emu, v1):
    emu.add_gpu_node("gpu-001", 8)
    emu.add_user_pod("gpu-001", name="trainer-1", phase="Failed", gpus=8)
    pod = json.loads(v1.read_namespaced_pod("trainer-1", "default", _preload_content=False).data)
    assert (pod["spec"]["nodeName"], pod["status"]["phase"], pod["status"]["reason"]) == (
        "gpu-001", "Failed", "UnexpectedAdmissionError")
    assert pod["status"]["message"] == ("Pod was rejected: Allocate failed due to requested number of devices "
                                        "unavailable for nvidia.com/gpu. Requested: 8, Available: 0, which is unexpected")
    [event] = _events(v1, "reason=UnexpectedAdmissionError")
    assert event["message"].startswith("Allocate failed due to requested number of devices")
