"""Scenario files: a YAML/JSON document that sets up a cluster in one go.

settings: {startup_delay: 0.5, executables: {python: /usr/bin/python3}}
namespaces: [cluster-doctor]
priority_classes:
  - {name: cluster-doctor-low, value: -1000, preemptionPolicy: Never}
pvcs: {cluster-doctor-data: /tmp/cd-data}
nodes:
  - {name: gpu-01, gpus: 8, product: NVIDIA-H100-80GB-HBM3}
  - {name: gpu-02, ready: false}
  - {name: gpu-03, unschedulable: true}
  - {count: 5, prefix: gpu-1, gpus: 8}          # gpu-10 .. gpu-14
user_pods:
  - {node: gpu-01, gpus: 8, kind: Job}
scripts:
  - {node: gpu-02, action: exit, exit_code: 1, termination_message: '{"status": "fail"}'}
objects:                                         # any served kind, as the API would take it
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: default}, data: {a: b}}
bulk: {nodes: 5000, pods: 150000}
"""

from __future__ import annotations

import os

from .control import add_node, add_user_pod
from .fixtures import bulk_cluster
from .resources import TYPES

KIND_TO_PLURAL = {t.kind: p for p, t in TYPES.items()}


def load(path: str) -> dict:
    import yaml

    with open(path) as f:
        return yaml.safe_load(f) or {}


def apply_scenario(cluster, doc: dict) -> dict:
    api = cluster.api
    summary = {"nodes": 0, "user_pods": 0, "scripts": 0, "objects": 0}
    if doc.get("settings"):
        cluster.settings.update(doc["settings"])
        cluster.store.snapshot_ttl = cluster.settings.snapshot_ttl
        cluster.kubelet.write_shims()
    for ns in doc.get("namespaces") or []:
        if cluster.store.current("namespaces", ns) is None:
            api.create(TYPES["namespaces"], None, {"metadata": {"name": ns}}, {})
    for pc in doc.get("priority_classes") or []:
        obj = (
            pc
            if "metadata" in pc
            else {"metadata": {"name": pc["name"]}, **{k: v for k, v in pc.items() if k != "name"}}
        )
        api.create(TYPES["priorityclasses"], None, obj, {})
    for claim, path in (doc.get("pvcs") or {}).items():
        os.makedirs(path, exist_ok=True)
        cluster.settings.pvc_dirs[claim] = os.path.abspath(path)
    for n in doc.get("nodes") or []:
        if "count" in n:
            n = dict(n)
            count, prefix, start = n.pop("count"), n.pop("prefix", "gpu-node-"), n.pop("start", 0)
            for i in range(start, start + count):
                add_node(cluster, {**n, "name": f"{prefix}{i}"})
                summary["nodes"] += 1
        else:
            add_node(cluster, n)
            summary["nodes"] += 1
    for obj in doc.get("objects") or []:
        rt = TYPES[KIND_TO_PLURAL[obj["kind"]]]
        api.create(
            rt,
            (obj.get("metadata") or {}).get("namespace") or ("default" if rt.namespaced else None),
            obj,
            {},
        )
        summary["objects"] += 1
    for p in doc.get("user_pods") or []:
        add_user_pod(cluster, p)
        summary["user_pods"] += 1
    for s in doc.get("scripts") or []:
        cluster.scripts.add(s)
        summary["scripts"] += 1
    if doc.get("bulk"):
        summary["bulk"] = bulk_cluster(cluster, **doc["bulk"])
    cluster.scheduler.poke()
    return summary
