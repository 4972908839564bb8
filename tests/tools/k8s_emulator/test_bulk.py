"""Bulk-generated clusters: realistic shapes, fast paginated lists, and live objects (scheduler, deletes)."""

from __future__ import annotations

import json

from tests.support.emu_helpers import scheduled, wait_pod


def _all(v1, fn, **kw):
    items, cont, pages, first_meta = [], None, 0, None
    while True:
        r = fn(limit=500, _continue=cont, _preload_content=False, **kw)
        d = json.loads(r.data)
        first_meta = first_meta or d["metadata"]
        items += d["items"]
        pages += 1
        cont = d["metadata"].get("continue")
        if not cont:
            return items, pages, first_meta


def test_bulk_cluster_shapes_and_pagination(emu, v1):
    summary = emu.bulk_generate(nodes=300, pods=9000, seed=7)
    assert summary["nodes"] == 300 and summary["pods"] == 9000
    assert 600 <= summary["avg_pod_bytes"] <= 1300
    pods, pages, meta = _all(v1, v1.list_pod_for_all_namespaces)
    assert len(pods) == 9000 and pages == 18 and meta["remainingItemCount"] == 8500
    assert len({(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods}) == 9000
    phases = {p["status"]["phase"] for p in pods}
    assert phases == {"Running", "Pending", "Succeeded", "Failed"}
    gpu_pods = [
        p for p in pods if "nvidia.com/gpu" in json.dumps(p["spec"]["containers"][0].get("resources"))
    ]
    assert gpu_pods and all(p["metadata"]["ownerReferences"][0]["kind"] in ("Job", "DaemonSet") for p in pods)
    nodes, _, _ = _all(v1, v1.list_node)
    cordoned = [n for n in nodes if n["spec"].get("unschedulable")]
    notready = [
        n
        for n in nodes
        if any(c["type"] == "Ready" and c["status"] != "True" for c in n["status"]["conditions"])
    ]
    assert len(nodes) == 300 and summary["node_states"]["cordoned"] == len(cordoned)
    assert summary["node_states"]["notready"] == len(notready)
    assert all(n["status"]["allocatable"]["nvidia.com/gpu"] == "8" for n in nodes)
    # every shape deserializes into the client's typed models (required fields present)
    typed = v1.list_pod_for_all_namespaces(limit=2000)
    assert len(typed.items) == 2000 and typed.metadata.remaining_item_count == 7000
    assert all(n.status.node_info.kubelet_version for n in v1.list_node(limit=50).items)
    # server-side filtering: bound, non-terminal
    live, _, meta = _all(
        v1,
        v1.list_pod_for_all_namespaces,
        field_selector="status.phase!=Succeeded,status.phase!=Failed,spec.nodeName!=",
    )
    assert "remainingItemCount" not in meta
    assert len(live) == sum(1 for p in pods if p["status"]["phase"] == "Running")
    # a single node's pods through the nodeName index
    node = live[0]["spec"]["nodeName"]
    on_node = v1.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    assert {p.metadata.name for p in on_node} == {
        p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") == node
    }


def test_bulk_pods_are_live_objects(emu, v1):
    emu.bulk_generate(nodes=50, pods=1500, seed=3, pending_share=0.02)
    pending = v1.list_pod_for_all_namespaces(field_selector="status.phase=Pending").items[0]
    affinity = pending.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    node = affinity.node_selector_terms[0].match_expressions[0].values[0]
    # free the node the pending pod is pinned to: the scheduler binds it
    for p in v1.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items:
        if p.status.phase == "Running":
            v1.delete_namespaced_pod(p.metadata.name, p.metadata.namespace)
    emu.set_script(node, "never_start")
    p = wait_pod(v1, pending.metadata.name, pending.metadata.namespace, until=scheduled, timeout=10)
    assert p.spec.node_name == node
