"""The resource types served: names, scope, supported field selectors, and the small derived records
(PodInfo/NodeInfo) the store keeps next to each object so the scheduler never re-parses JSON."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .util import quantity_milli

TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class ResourceType:
    plural: str
    kind: str
    namespaced: bool
    group: str = ""
    field_names: tuple = ("metadata.name", "metadata.namespace")
    fields_fn: Callable[[dict], tuple] | None = None
    info_fn: Callable[[dict], object] | None = None
    subresources: tuple = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/v1" if self.group else "v1"

    @property
    def field_index(self) -> dict[str, int]:
        return {f: i for i, f in enumerate(self.field_names)}

    def fields(self, obj: dict) -> tuple:
        if self.fields_fn is not None:
            return self.fields_fn(obj)
        meta = obj.get("metadata") or {}
        return (meta.get("name", ""), meta.get("namespace", ""))

    def info(self, obj: dict):
        return self.info_fn(obj) if self.info_fn else None


def _requests(c: dict) -> dict[str, int]:
    res = c.get("resources") or {}
    # limits stand in for missing requests (apiserver defaulting)
    return {k: quantity_milli(q) for k, q in {**(res.get("limits") or {}), **(res.get("requests") or {})}.items()}


def _merge(a: dict, b: dict, fn) -> dict:
    return {k: fn(a.get(k, 0), b.get(k, 0)) for k in a.keys() | b.keys()}


def pod_requests(spec: dict) -> dict[str, int]:
    """The effective request as the scheduler computes it: max(sum of app containers and sidecars, the
    largest init container plus the sidecars started before it), plus the pod overhead."""
    app: dict = {}
    for c in spec.get("containers") or []:
        app = _merge(app, _requests(c), int.__add__)
    sidecars: dict = {}
    init_max: dict = {}
    for c in spec.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            sidecars = _merge(sidecars, _requests(c), int.__add__)
            init_max = _merge(init_max, sidecars, max)
        else:
            init_max = _merge(init_max, _merge(sidecars, _requests(c), int.__add__), max)
    eff = _merge(_merge(app, sidecars, int.__add__), init_max, max)
    eff = _merge(eff, {k: quantity_milli(q) for k, q in (spec.get("overhead") or {}).items()}, int.__add__)
    return {k: v for k, v in eff.items() if v}


class PodInfo:
    __slots__ = ("deleting", "node", "nominated", "phase", "preempt_never", "priority", "requests",
                 "scheduler", "uid")

    def __init__(self, uid, node, phase, deleting, requests, priority, scheduler, preempt_never, nominated=""):
        self.uid, self.node, self.phase, self.deleting = uid, node, phase, deleting
        self.requests, self.priority, self.scheduler = requests, priority, scheduler
        self.preempt_never, self.nominated = preempt_never, nominated

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES


def pod_info(obj: dict) -> PodInfo:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    try:
        req = pod_requests(spec)
    except ValueError:
        req = {}
    return PodInfo(meta.get("uid", ""), spec.get("nodeName") or "", status.get("phase") or "Pending",
                   bool(meta.get("deletionTimestamp")), req, int(spec.get("priority") or 0),
                   spec.get("schedulerName") or "default-scheduler", spec.get("preemptionPolicy") == "Never",
                   status.get("nominatedNodeName") or "")


POD_FIELDS = ("metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
              "spec.serviceAccountName", "status.phase", "status.podIP", "status.nominatedNodeName")


def pod_fields(obj: dict) -> tuple:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    return (meta.get("name", ""), meta.get("namespace", ""), spec.get("nodeName") or "",
            spec.get("restartPolicy") or "", spec.get("schedulerName") or "", spec.get("serviceAccountName") or "",
            status.get("phase") or "", status.get("podIP") or "", status.get("nominatedNodeName") or "")


LIFECYCLE_TAINT_KEYS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable",
                        "node.kubernetes.io/unschedulable")


def node_ready(obj: dict) -> str | None:
    """The Ready condition's status; None for a node that has not posted one yet (just registered)."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") or "Unknown"
    return None


def lifecycle_taints(ready: str | None, unschedulable: bool) -> list[dict]:
    """What the kubelet registers with and the node lifecycle controller keeps in sync: a new node is
    not-ready:NoSchedule until it reports Ready; NotReady adds NoExecute; a silent node is unreachable."""
    if ready is None:
        out = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    elif ready == "True":
        out = []
    else:
        key = "node.kubernetes.io/not-ready" if ready == "False" else "node.kubernetes.io/unreachable"
        out = [{"key": key, "effect": "NoSchedule"}, {"key": key, "effect": "NoExecute"}]
    if unschedulable:
        out.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    return out


class NodeInfo:
    __slots__ = ("allocatable", "labels", "name", "ready", "taints", "unschedulable")

    def __init__(self, name, labels, allocatable, ready, unschedulable, taints):
        self.name, self.labels, self.allocatable = name, labels, allocatable
        self.ready, self.unschedulable, self.taints = ready, unschedulable, taints


def node_info(obj: dict) -> NodeInfo:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    alloc = {}
    for k, v in (status.get("allocatable") or status.get("capacity") or {}).items():
        try:
            alloc[k] = quantity_milli(v)
        except ValueError:
            pass
    return NodeInfo(meta.get("name", ""), meta.get("labels") or {}, alloc, node_ready(obj),
                    bool(spec.get("unschedulable")), list(spec.get("taints") or []))


EVENT_FIELDS = ("metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace",
                "involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
                "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason", "reportingComponent",
                "source", "type")


def event_fields(obj: dict) -> tuple:
    meta, io = obj.get("metadata") or {}, obj.get("involvedObject") or {}
    return (meta.get("name", ""), meta.get("namespace", ""), *(io.get(f.split(".")[1], "") for f in EVENT_FIELDS[2:9]),
            obj.get("reason", ""), obj.get("reportingComponent", ""), (obj.get("source") or {}).get("component", ""),
            obj.get("type", ""))


def _phase_fields(obj: dict) -> tuple:
    return ((obj.get("metadata") or {}).get("name", ""), (obj.get("status") or {}).get("phase", ""))


TYPES = {t.plural: t for t in (
    ResourceType("pods", "Pod", True, field_names=POD_FIELDS, fields_fn=pod_fields, info_fn=pod_info,
                 subresources=("status", "log", "eviction", "binding")),
    ResourceType("nodes", "Node", False, field_names=("metadata.name", "spec.unschedulable"), info_fn=node_info,
                 fields_fn=lambda o: ((o.get("metadata") or {}).get("name", ""),
                                      "true" if (o.get("spec") or {}).get("unschedulable") else "false"),
                 subresources=("status",)),
    ResourceType("events", "Event", True, field_names=EVENT_FIELDS, fields_fn=event_fields),
    ResourceType("configmaps", "ConfigMap", True),
    ResourceType("namespaces", "Namespace", False, field_names=("metadata.name", "status.phase"),
                 fields_fn=_phase_fields, subresources=("status",)),
    ResourceType("persistentvolumeclaims", "PersistentVolumeClaim", True, subresources=("status",)),
    ResourceType("persistentvolumes", "PersistentVolume", False, field_names=("metadata.name", "status.phase"),
                 fields_fn=_phase_fields, subresources=("status",)),
    ResourceType("priorityclasses", "PriorityClass", False, group="scheduling.k8s.io"),
    ResourceType("storageclasses", "StorageClass", False, group="storage.k8s.io"),
)}
GROUPS = ("", "scheduling.k8s.io", "storage.k8s.io")
