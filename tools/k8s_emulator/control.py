"""Control API under /_emulator/...: what tests and the demo use to shape the cluster and inject faults.
It is not part of the Kubernetes API and is not counted in the API call counters."""

from __future__ import annotations

import os
import re

from . import fixtures
from .admission import apply_node_lifecycle, raise_if, validate_node
from .errors import ApiError, bad_request, not_found
from .resources import TYPES
from .selectors import parse_label_selector
from .util import jcopy, rfc3339

NODE_KWARGS = {
    "name",
    "gpus",
    "product",
    "ready",
    "unschedulable",
    "taints",
    "labels",
    "cpu",
    "memory",
    "rdma",
    "pods",
    "annotations",
}
POD_KWARGS = {
    "name",
    "namespace",
    "gpus",
    "kind",
    "phase",
    "labels",
    "priority_class",
    "image",
    "cpu",
    "memory",
}


def add_node(cluster, spec: dict) -> dict:
    if "object" in spec:
        obj = spec["object"]
    else:
        unknown = set(spec) - NODE_KWARGS
        if unknown:
            raise bad_request(f"unknown node fields {sorted(unknown)}; known: {sorted(NODE_KWARGS)}")
        obj = fixtures.gpu_node(**spec)
    return cluster.api.create(TYPES["nodes"], None, obj, {}).obj()


def patch_node(cluster, name: str, spec: dict) -> dict:
    """Flip node state the way the kubelet/admins would: ready (True/False/"Unknown"), unschedulable, labels
    (None deletes), taints (user taints; lifecycle taints follow automatically), gpus (capacity)."""
    store = cluster.store
    with store.lock:
        v = store.current("nodes", name)
        if v is None:
            raise not_found("nodes", name)
        obj = jcopy(v.obj())
        now = rfc3339()
        if "ready" in spec:
            ready = spec["ready"]
            status = (
                "True"
                if ready is True or ready == "True"
                else ("False" if ready is False or ready == "False" else "Unknown")
            )
            reason, msg = {
                "True": ("KubeletReady", "kubelet is posting ready status"),
                "False": (
                    "KubeletNotReady",
                    "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady",
                ),
                "Unknown": ("NodeStatusUnknown", "Kubelet stopped posting node status."),
            }[status]
            for c in obj["status"].setdefault("conditions", []):
                if c["type"] == "Ready":
                    if c.get("status") != status:
                        c["lastTransitionTime"] = now
                    c.update(status=status, reason=reason, message=msg, lastHeartbeatTime=now)
            if not any(c["type"] == "Ready" for c in obj["status"]["conditions"]):
                obj["status"]["conditions"].append(
                    {
                        "type": "Ready",
                        "status": status,
                        "reason": reason,
                        "message": msg,
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                )
        if "unschedulable" in spec:
            if spec["unschedulable"]:
                obj["spec"]["unschedulable"] = True
            else:
                obj["spec"].pop("unschedulable", None)
        if "labels" in spec:
            labels = obj["metadata"].setdefault("labels", {})
            for k, val in (spec["labels"] or {}).items():
                if val is None:
                    labels.pop(k, None)
                else:
                    labels[k] = val
        if "taints" in spec:
            obj["spec"]["taints"] = [dict(t) for t in spec["taints"] or []]
        if "gpus" in spec:
            for where in ("capacity", "allocatable"):
                obj["status"].setdefault(where, {})["nvidia.com/gpu"] = str(spec["gpus"])
            obj["metadata"].setdefault("labels", {})["nvidia.com/gpu.count"] = str(spec["gpus"])
        raise_if("Node", name, validate_node(obj))
        apply_node_lifecycle(obj, cluster.settings.node_lifecycle_taints)
        return store.put("nodes", name, obj).obj()


def add_user_pod(cluster, spec: dict) -> dict:
    """A user workload pod. phase Running (default): bound to `node`, running, simulated (no process); with
    run_seconds it completes after that long. phase Pending: created unbound and pinned to `node`, so the
    scheduler binds it when the node has room (or preempts lower priority pods), then it runs simulated."""
    spec = dict(spec)
    node = spec.pop("node", None)
    run_seconds = spec.pop("run_seconds", None)
    unknown = set(spec) - POD_KWARGS
    if unknown:
        raise bad_request(
            f"unknown user pod fields {sorted(unknown)}; "
            f"known: {sorted(POD_KWARGS | {'node', 'run_seconds'})}"
        )
    phase = spec.get("phase", "Running")
    node_ip = None
    if node and phase == "Running":
        nv = cluster.store.current("nodes", node)
        if nv is None:
            raise not_found("nodes", node)
        node_ip = cluster.kubelet.host_ip(node)
    pod = fixtures.user_pod(node, node_ip=node_ip, **spec)
    ns = pod["metadata"]["namespace"]
    if phase == "Running":
        v = cluster.api.create(TYPES["pods"], ns, pod, {}, static=True)
        if run_seconds is not None:
            cluster.kubelet.complete_later(
                v.obj()["metadata"]["namespace"] + "/" + v.obj()["metadata"]["name"],
                v.info.uid,
                float(run_seconds),
            )
        return v.obj()
    v = cluster.api.create(TYPES["pods"], ns, pod, {})
    cluster.kubelet.simulated[v.info.uid] = {"action": "run", "run_seconds": run_seconds}
    return v.obj()


def _pod(cluster, ns, name):
    v = cluster.store.current("pods", f"{ns}/{name}")
    if v is None:
        raise not_found("pods", name)
    return v


def handle(cluster, method: str, path: str, q: dict, body) -> tuple[int, object]:
    parts = [p for p in path.split("/") if p][1:]  # drop "_emulator"
    body = body if body is not None else {}
    route = "/".join(parts)
    if method == "GET" and route == "health":
        return 200, {"ok": True, "pid": os.getpid(), "url": cluster.url, "state_dir": cluster.state_dir}
    if route == "settings":
        if method == "POST":
            try:
                cluster.settings.update(body)
            except ValueError as exc:
                raise bad_request(str(exc)) from None
            cluster.store.snapshot_ttl = cluster.settings.snapshot_ttl
            cluster.kubelet.write_shims()
            cluster.scheduler.poke()
        return 200, cluster.settings.as_dict()
    if route == "nodes" and method == "POST":
        return 201, add_node(cluster, body)
    m = re.fullmatch(r"nodes/([^/]+)", route)
    if m and method in ("PATCH", "POST"):
        return 200, patch_node(cluster, m.group(1), body)
    if m and method == "DELETE":
        return 200, cluster.api.delete(TYPES["nodes"], None, m.group(1), None, {})
    if route == "pods" and method == "POST":
        return 201, add_user_pod(cluster, body)
    m = re.fullmatch(r"pods/([^/]+)/([^/]+)/(evict|preempt|complete)", route)
    if m and method == "POST":
        ns, name, what = m.groups()
        v = _pod(cluster, ns, name)
        key = f"{ns}/{name}"
        if what == "evict":
            if body.get("mode", "kubelet") == "api":
                return 201, cluster.api.evict(ns, name, {})
            cluster.kubelet.evict(key, v.info.uid, body.get("message"))
        elif what == "preempt":
            cluster.scheduler.preempt_pod(key, v.info.uid, preemptor=body.get("preemptor"))
        else:
            code = int(body.get("exit_code", 0))
            cluster.api.finish_static_pod(
                key, v.info.uid, phase="Succeeded" if code == 0 else "Failed", exit_code=code
            )
        return 200, {"ok": True}
    if route == "history" and method == "GET":
        lsel = parse_label_selector(q.get("labelSelector")) if q.get("labelSelector") else None
        return 200, {"items": cluster.history_list(lsel, q.get("namespace"))}
    if route == "scripts":
        if method == "POST":
            try:
                s = cluster.scripts.add(body)
            except ValueError as exc:
                raise bad_request(str(exc)) from None
            cluster.scheduler.poke()
            return 201, s
        if method == "DELETE":
            cluster.scripts.clear(q.get("node"))
            cluster.scheduler.poke()
            return 200, {"ok": True}
        return 200, {"items": cluster.scripts.list()}
    if route == "counters":
        return 200, cluster.counter_snapshot()
    if route == "counters/reset" and method == "POST":
        snap = cluster.counter_snapshot()
        with cluster._counter_lock:
            cluster.counters.clear()
        return 200, snap
    if route == "reset" and method == "POST":
        cluster.reset()
        return 200, {"ok": True}
    if route == "bulk" and method == "POST":
        return 200, fixtures.bulk_cluster(cluster, **body)
    if route == "pvcs" and method == "POST":
        path_ = os.path.abspath(body["path"])
        os.makedirs(path_, exist_ok=True)
        cluster.settings.pvc_dirs[body["claim"]] = path_
        return 200, {"claim": body["claim"], "path": path_}
    if route == "pvcs" and method == "GET":
        return 200, {
            "default_root": os.path.join(cluster.state_dir, "pvc"),
            "claims": dict(cluster.settings.pvc_dirs),
        }
    if route == "scenario" and method == "POST":
        from .scenario import apply_scenario

        return 200, apply_scenario(cluster, body)
    if route == "compact" and method == "POST":
        cluster.store.compact()
        return 200, {"ok": True}
    if route == "processes" and method == "GET":
        return 200, {"pids": cluster.kubelet.live_processes()}
    if route == "shutdown" and method == "POST":
        cluster.request_shutdown()
        return 200, {"ok": True}
    raise ApiError(404, "NotFound", f"no control endpoint {method} /_emulator/{route}")
