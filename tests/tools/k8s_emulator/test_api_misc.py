"""Smaller API surfaces: discovery, merge patches, status subresources, generateName, events and namespace
deletion."""

from __future__ import annotations

import json
import urllib.request

import pytest
from kubernetes import client

from tests.support.emu_helpers import pod, wait_gone, wait_pod


def _get(emu, path):
    with urllib.request.urlopen(emu.url + path) as r:
        return json.loads(r.read())


def test_discovery_documents(emu, v1):
    assert _get(emu, "/version")["major"] == "1"
    assert _get(emu, "/api")["versions"] == ["v1"]
    core = {r["name"]: r for r in _get(emu, "/api/v1")["resources"]}
    assert {"pods", "pods/log", "pods/status", "pods/eviction", "nodes", "events", "configmaps"} <= set(core)
    assert core["pods"]["namespaced"] and not core["nodes"]["namespaced"]
    groups = [g["name"] for g in _get(emu, "/apis")["groups"]]
    assert "scheduling.k8s.io" in groups
    pcs = client.SchedulingV1Api(v1.api_client).list_priority_class().items
    assert {p.metadata.name for p in pcs} == {"system-cluster-critical", "system-node-critical"}


def test_merge_patches_and_status_subresource(emu, v1):
    emu.add_gpu_node("gpu-1")
    v1.patch_node("gpu-1", {"metadata": {"labels": {"a": "1", "b": "2"}}})  # the client's strategic merge
    v1.patch_node("gpu-1", {"metadata": {"labels": {"a": None}}}, _content_type="application/merge-patch+json")
    labels = v1.read_node("gpu-1").metadata.labels
    assert "a" not in labels and labels["b"] == "2" and labels["kubernetes.io/hostname"] == "gpu-1"
    with pytest.raises(client.ApiException) as exc:  # JSON patch is not emulated, and says so
        v1.patch_node("gpu-1", [{"op": "remove", "path": "/metadata/labels/b"}])
    assert exc.value.status == 415
    # the main resource ignores status; the status subresource changes it
    v1.patch_node("gpu-1", {"status": {"allocatable": {"nvidia.com/gpu": "1"}}})
    assert v1.read_node("gpu-1").status.allocatable["nvidia.com/gpu"] == "8"
    before = {c.type: c for c in v1.read_node_status("gpu-1").status.conditions}
    v1.patch_node_status("gpu-1", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    node = v1.read_node_status("gpu-1")
    # node conditions merge by their patchMergeKey `type`: the other conditions stay, Ready keeps its
    # other fields; with a JSON merge patch the list would be replaced whole
    after = {c.type: c for c in node.status.conditions}
    assert set(after) == set(before) and len(before) > 1
    assert after["Ready"].status == "False" and after["Ready"].reason == before["Ready"].reason
    assert {t.key for t in node.spec.taints} == {"node.kubernetes.io/not-ready"}
    v1.patch_node_status("gpu-1", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                         _content_type="application/merge-patch+json")
    assert [c.type for c in v1.read_node_status("gpu-1").status.conditions] == ["Ready"]


def test_generate_name_and_resource_versions(emu, v1):
    cm = v1.create_namespaced_config_map("default", {"metadata": {"generateName": "cfg-"}})
    assert cm.metadata.name.startswith("cfg-") and len(cm.metadata.name) == 9
    assert cm.metadata.uid and cm.metadata.creation_timestamp and cm.metadata.resource_version
    rv1 = int(cm.metadata.resource_version)
    cm2 = v1.patch_namespaced_config_map(cm.metadata.name, "default", {"data": {"k": "v"}})
    assert int(cm2.metadata.resource_version) > rv1
    same = v1.patch_namespaced_config_map(cm.metadata.name, "default", {"data": {"k": "v"}})
    assert same.metadata.resource_version == cm2.metadata.resource_version  # no-op writes don't bump it


def test_events_selectors_and_create(emu, v1):
    emu.add_gpu_node("gpu-1")
    emu.set_script("gpu-1", "exit")
    v1.create_namespaced_pod("default", pod("p", command=["x"], node="gpu-1"))
    wait_pod(v1, "p")
    evs = v1.list_namespaced_event("default", field_selector="involvedObject.name=p,involvedObject.kind=Pod")
    assert evs.kind == "EventList" and {e.reason for e in evs.items} >= {"Scheduled", "Started"}
    kubelet = [e for e in evs.items if e.source.component == "kubelet"]
    assert kubelet and all(e.source.host == "gpu-1" and e.count == 1 and e.first_timestamp for e in kubelet)
    v1.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "custom.1"},
            "reason": "Custom",
            "message": "hi",
            "involvedObject": {"kind": "Node", "name": "gpu-1"},
            "type": "Normal",
        },
    )
    mine = v1.list_event_for_all_namespaces(field_selector="reason=Custom").items
    assert [e.message for e in mine] == ["hi"]


def test_namespace_deletion_cascades(emu, v1):
    v1.create_namespace({"metadata": {"name": "scratch"}})
    v1.create_namespaced_config_map("scratch", {"metadata": {"name": "c"}})
    emu.add_gpu_node("gpu-1")
    sleeper = pod("sleeper", command=["python", "-c", "import time; time.sleep(60)"], namespace="scratch", node="gpu-1")
    v1.create_namespaced_pod("scratch", sleeper)
    wait_pod(v1, "sleeper", "scratch", phases=("Running",))
    v1.delete_namespace("scratch")
    wait_gone(v1, "sleeper", "scratch")
    assert v1.list_namespaced_config_map("scratch").items == []
    emu.wait_for(lambda: emu.processes() == [], message="pod process killed")
