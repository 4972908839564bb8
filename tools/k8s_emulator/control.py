"""Control API under /_emulator/...: what tests and the demo use to shape the cluster and inject faults.
It is not part of the Kubernetes API and is not counted in the API call counters."""

from __future__ import annotations

import os
import re

from . import fixtures
from .admission import apply_node_lifecycle, validate_node
from .errors import ApiError, bad_request, not_found, raise_if
from .resources import TYPES
from .selectors import parse_label_selector
from .util import jcopy, rfc3339

NODE_KWARGS = {"name", "gpus", "product", "ready", "unschedulable", "taints", "labels", "cpu", "memory", "rdma",
               "pods", "annotations"}
POD_KWARGS = {"name", "namespace", "gpus", "kind", "phase", "labels", "priority_class", "image", "cpu", "memory",
              "reason", "message"}
READY = {"True": ("KubeletReady", "kubelet is posting ready status"),
         "False": ("KubeletNotReady", "container runtime network not ready: NetworkReady=false "
                                      "reason:NetworkPluginNotReady"),
         "Unknown": ("NodeStatusUnknown", "Kubelet stopped posting node status.")}


def _check(spec: dict, known: set, what: str):
    if unknown := set(spec) - known:
        raise bad_request(f"unknown {what} fields {sorted(unknown)}; known: {sorted(known)}")


def patch_node(cluster, name: str, spec: dict) -> dict:
    """Change a node the way its kubelet, its device plugin, node-problem-detector or an admin would: ready
    (True/False/"Unknown"), unschedulable, labels (None deletes a key), taints (user taints; the lifecycle
    taints follow), gpus (capacity, allocatable and GPU Feature Discovery's count), allocatable_gpus (the
    device plugin withdrew unhealthy GPUs: allocatable only), conditions (set by type as node-problem-detector
    writes them) and reboot (a new bootID and the kubelet's Rebooted event)."""
    with cluster.store.lock:
        v = cluster.store.current("nodes", name)
        if v is None:
            raise not_found("nodes", name)
        obj, now = jcopy(v.obj()), rfc3339()
        if "ready" in spec:
            status = {True: "True", False: "False"}.get(spec["ready"], str(spec["ready"]))
            status = status if status in READY else "Unknown"
            conds = obj["status"].setdefault("conditions", [])
            cond = next((c for c in conds if c["type"] == "Ready"), None)
            if cond is None:
                cond = {"type": "Ready", "lastTransitionTime": now}
                conds.append(cond)
            elif cond.get("status") != status:
                cond["lastTransitionTime"] = now
            cond.update(status=status, reason=READY[status][0], message=READY[status][1], lastHeartbeatTime=now)
        if "unschedulable" in spec:
            obj["spec"]["unschedulable"] = True
            if not spec["unschedulable"]:
                del obj["spec"]["unschedulable"]
        for k, val in (spec.get("labels") or {}).items():
            obj["metadata"].setdefault("labels", {})[k] = val
            if val is None:
                del obj["metadata"]["labels"][k]
        if "taints" in spec:
            obj["spec"]["taints"] = [dict(t) for t in spec["taints"] or []]
        if "gpus" in spec:
            for where in ("capacity", "allocatable"):
                obj["status"].setdefault(where, {})["nvidia.com/gpu"] = str(spec["gpus"])
            obj["metadata"].setdefault("labels", {})["nvidia.com/gpu.count"] = str(spec["gpus"])
        if "allocatable_gpus" in spec:  # the device plugin's ListAndWatch reports some devices Unhealthy
            obj["status"].setdefault("allocatable", {})["nvidia.com/gpu"] = str(spec["allocatable_gpus"])
        for cond in spec.get("conditions") or []:
            _set_condition(obj, cond, now)
        if spec.get("reboot"):
            obj["status"].setdefault("nodeInfo", {})["bootID"] = fixtures.boot_id(name, now)
        raise_if("Node", name, validate_node(obj))
        apply_node_lifecycle(obj, cluster.settings.node_lifecycle_taints)
        stored = cluster.store.put("nodes", name, obj).obj()
    if spec.get("reboot"):  # the kubelet's event on a new boot id (pkg/kubelet/nodestatus, NodeRebooted)
        boot = stored["status"]["nodeInfo"]["bootID"]
        cluster.events.emit(stored, "Rebooted", f"Node {name} has been rebooted, boot id: {boot}", type_="Warning",
                            host=name)
    return stored


def _set_condition(obj: dict, cond: dict, now: str) -> None:
    """A node condition set as node-problem-detector sets it (a status patch merged by type): the transition
    time moves only when the status changes, the heartbeat every time."""
    _check(cond, {"type", "status", "reason", "message"}, "node condition")
    if cond.get("type") in (None, "Ready"):
        raise bad_request("a condition needs a type other than Ready (use ready=)")
    conds = obj["status"].setdefault("conditions", [])
    current = next((c for c in conds if c["type"] == cond["type"]), None)
    if current is None:
        current = {"type": cond["type"], "lastTransitionTime": now}
        conds.append(current)
    elif current.get("status") != cond.get("status"):
        current["lastTransitionTime"] = now
    current.update(status=str(cond.get("status", "True")), reason=cond.get("reason", ""),
                   message=cond.get("message", ""), lastHeartbeatTime=now)


def node_event(cluster, name: str, spec: dict) -> dict:
    """An event on a node as node-problem-detector's kernel monitor records one (source component
    kernel-monitor, host the node; the same reason and message again counts up)."""
    _check(spec, {"reason", "message", "type", "component"}, "node event")
    v = cluster.store.current("nodes", name)
    if v is None:
        raise not_found("nodes", name)
    return cluster.events.emit(v.obj(), spec["reason"], spec.get("message", ""), type_=spec.get("type", "Warning"),
                               component=spec.get("component", "kernel-monitor"), host=name)


def add_user_pod(cluster, spec: dict) -> dict:
    """A user workload pod. phase Running (default): bound to `node`, running, simulated (no process); with
    run_seconds it completes after that long. phase Pending: created unbound and pinned to `node`, so the
    scheduler binds it when the node has room (or preempts lower priority pods), then it runs simulated."""
    spec = dict(spec)
    node, run_seconds = spec.pop("node", None), spec.pop("run_seconds", None)
    _check(spec, POD_KWARGS, "user pod")
    running = spec.get("phase", "Running") in ("Running", "Failed")  # Failed: bound, rejected at admission
    if running and node and cluster.store.current("nodes", node) is None:
        raise not_found("nodes", node)
    pod = fixtures.user_pod(node, node_ip=cluster.kubelet.host_ip(node) if running and node else None, **spec)
    v = cluster.api.create(TYPES["pods"], pod["metadata"]["namespace"], pod, static=running)
    if spec.get("phase") == "Failed":  # the kubelet's admission failure event (Kubelet.HandlePodAdditions)
        status = v.obj()["status"]
        cluster.events.emit(v.obj(), status["reason"], status["message"].removeprefix("Pod was rejected: "),
                            type_="Warning", host=node)
        return v.obj()
    key = f"{pod['metadata']['namespace']}/{v.obj()['metadata']['name']}"
    if running and run_seconds is not None:
        cluster.kubelet.complete_later(key, v.info.uid, float(run_seconds))
    elif not running:
        cluster.kubelet.simulated[v.info.uid] = {"action": "run", "run_seconds": run_seconds}
    return v.obj()


def handle(cluster, method: str, path: str, q: dict, body) -> tuple[int, object]:
    route, body = "/".join(p for p in path.split("/") if p)[len("_emulator/"):], body if body is not None else {}
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
        return 200, vars(cluster.settings)
    if route == "nodes" and method == "POST":
        obj = body.get("object") or (_check(body, NODE_KWARGS, "node") or fixtures.gpu_node(**body))
        return 201, cluster.api.create(TYPES["nodes"], None, obj).obj()
    if m := re.fullmatch(r"nodes/([^/]+)", route):
        if method == "DELETE":
            return 200, cluster.api.delete(TYPES["nodes"], None, m.group(1), None, {})
        return 200, patch_node(cluster, m.group(1), body)
    if (m := re.fullmatch(r"nodes/([^/]+)/events", route)) and method == "POST":
        return 201, node_event(cluster, m.group(1), body)
    if route == "pods" and method == "POST":
        return 201, add_user_pod(cluster, body)
    if (m := re.fullmatch(r"pods/([^/]+)/([^/]+)/(evict|preempt|complete)", route)) and method == "POST":
        ns, name, what = m.groups()
        v = cluster.store.current("pods", f"{ns}/{name}")
        if v is None:
            raise not_found("pods", name)
        if what == "evict" and body.get("mode") == "api":
            return 201, cluster.api.evict(ns, name, {})
        if what == "evict":
            cluster.kubelet.evict(f"{ns}/{name}", v.info.uid, body.get("message"))
        elif what == "preempt":
            cluster.scheduler.preempt_pod(f"{ns}/{name}", v.info.uid, preemptor=body.get("preemptor"))
        else:
            cluster.kubelet.finish_static_pod(f"{ns}/{name}", v.info.uid, int(body.get("exit_code", 0)),
                                              reason=body.get("reason"), message=body.get("message"))
        return 200, {"ok": True}
    if route == "history" and method == "GET":
        lsel = parse_label_selector(q["labelSelector"]) if q.get("labelSelector") else None
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
    if route == "faults":
        if method == "POST":
            try:
                return 201, cluster.faults.add(body)
            except ValueError as exc:
                raise bad_request(str(exc)) from None
        if method == "DELETE":
            cluster.faults.clear()
            return 200, {"ok": True}
        return 200, {"items": cluster.faults.list()}
    if route == "storms":
        if method == "POST":
            try:
                return 201, cluster.faults.add_storm(body)
            except ValueError as exc:
                raise bad_request(str(exc)) from None
        return 200, {"items": cluster.faults.storms()}
    if route in ("counters", "counters/reset"):
        return 200, cluster.counter_snapshot(reset=route.endswith("reset"))
    if route == "reset" and method == "POST":
        cluster.reset()
        return 200, {"ok": True}
    if route == "bulk" and method == "POST":
        return 200, fixtures.bulk_cluster(cluster, **body)
    if route == "pvcs" and method == "POST":
        path_ = os.path.abspath(body["path"])
        os.makedirs(path_, exist_ok=True)
        cluster.settings.pvc_dirs[body["claim"]] = path_
        cluster.provision_claims()
        cluster.scheduler.poke()
        return 200, {"claim": body["claim"], "path": path_}
    if route == "pvcs" and method == "GET":
        return 200, {"default_root": os.path.join(cluster.state_dir, "pvc"), "claims": dict(cluster.settings.pvc_dirs)}
    if route == "compact" and method == "POST":
        cluster.store.compact()
        return 200, {"ok": True}
    if route == "processes" and method == "GET":
        return 200, {"pids": sorted(cluster.kubelet.registry.pids)}
    raise ApiError(404, "NotFound", f"no control endpoint {method} /_emulator/{route}")
