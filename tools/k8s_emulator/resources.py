"""The resource types we serve: names, scope, supported field selectors, and the small derived records
(PodInfo/NodeInfo) the store keeps next to each object so the scheduler never re-parses JSON."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .util import quantity_milli

TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class ResourceType:
    plural: str
    kind: str
    namespaced: bool
    group: str = ""
    version: str = "v1"
    short_names: tuple = ()
    field_names: tuple = ("metadata.name",)
    fields_fn: Callable[[dict], tuple] | None = None
    info_fn: Callable[[dict], object] | None = None
    index_fns: dict = field(default_factory=dict)  # name -> fn(info, fields) -> hashable | None
    subresources: tuple = ()
    verbs: tuple = ("create", "delete", "deletecollection", "get", "list", "patch", "update")

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def field_index(self) -> dict[str, int]:
        return {f: i for i, f in enumerate(self.field_names)}

    def fields(self, obj: dict) -> tuple:
        if self.fields_fn is not None:
            return self.fields_fn(obj)
        meta = obj.get("metadata") or {}
        return (meta.get("name", ""), meta.get("namespace", ""))[: len(self.field_names)]

    def info(self, obj: dict):
        return self.info_fn(obj) if self.info_fn else None


# ---------------------------------------------------------------- pods


def container_requests(c: dict) -> dict[str, int]:
    res = c.get("resources") or {}
    out = {}
    for name, q in (res.get("limits") or {}).items():
        out[name] = quantity_milli(q)  # limits stand in for missing requests (apiserver defaulting)
    for name, q in (res.get("requests") or {}).items():
        out[name] = quantity_milli(q)
    return out


def _add(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def _max(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = max(out.get(k, 0), v)
    return out


def pod_requests(spec: dict) -> dict[str, int]:
    """Effective pod request as the scheduler computes it: max(sum(app + sidecars), max over init
    containers of
    (sidecars started before it + its own request)), plus pod overhead."""
    app: dict = {}
    for c in spec.get("containers") or []:
        app = _add(app, container_requests(c))
    sidecars: dict = {}
    init_max: dict = {}
    for c in spec.get("initContainers") or []:
        req = container_requests(c)
        if c.get("restartPolicy") == "Always":
            sidecars = _add(sidecars, req)
            init_max = _max(init_max, sidecars)
        else:
            init_max = _max(init_max, _add(sidecars, req))
    eff = _max(_add(app, sidecars), init_max)
    for name, q in (spec.get("overhead") or {}).items():
        eff[name] = eff.get(name, 0) + quantity_milli(q)
    return {k: v for k, v in eff.items() if v}


class PodInfo:
    __slots__ = (
        "deleting",
        "node",
        "nominated",
        "phase",
        "preempt_never",
        "priority",
        "requests",
        "scheduler",
        "uid",
    )

    def __init__(
        self, uid, node, phase, deleting, requests, priority, scheduler, preempt_never, nominated=""
    ):
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
    return PodInfo(
        meta.get("uid", ""),
        spec.get("nodeName") or "",
        status.get("phase") or "Pending",
        bool(meta.get("deletionTimestamp")),
        req,
        int(spec.get("priority") or 0),
        spec.get("schedulerName") or "default-scheduler",
        spec.get("preemptionPolicy") == "Never",
        status.get("nominatedNodeName") or "",
    )


POD_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)


def pod_fields(obj: dict) -> tuple:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    return (
        meta.get("name", ""),
        meta.get("namespace", ""),
        spec.get("nodeName") or "",
        spec.get("restartPolicy") or "",
        spec.get("schedulerName") or "",
        spec.get("serviceAccountName") or "",
        "true" if spec.get("hostNetwork") else "false",
        status.get("phase") or "",
        status.get("podIP") or "",
        status.get("nominatedNodeName") or "",
    )


# ---------------------------------------------------------------- nodes

LIFECYCLE_TAINT_KEYS = (
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/unschedulable",
)


def node_ready(obj: dict) -> str:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") or "Unknown"
    return "Unknown"  # a node that never posted a Ready condition is treated as not ready


def lifecycle_taints(ready: str, unschedulable: bool) -> list[dict]:
    """Taints the node lifecycle controller and TaintNodesByCondition keep in sync with the node's state."""
    out = []
    if ready == "False":
        out += [
            {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
        ]
    elif ready != "True":
        out += [
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
        ]
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
    ready, unsched = node_ready(obj), bool(spec.get("unschedulable"))
    taints = [t for t in spec.get("taints") or []]
    have = {(t.get("key"), t.get("effect")) for t in taints}
    taints += [t for t in lifecycle_taints(ready, unsched) if (t["key"], t["effect"]) not in have]
    return NodeInfo(meta.get("name", ""), meta.get("labels") or {}, alloc, ready, unsched, taints)


def node_fields(obj: dict) -> tuple:
    return (
        (obj.get("metadata") or {}).get("name", ""),
        "true" if (obj.get("spec") or {}).get("unschedulable") else "false",
    )


# ---------------------------------------------------------------- events

EVENT_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)


def event_fields(obj: dict) -> tuple:
    meta, io = obj.get("metadata") or {}, obj.get("involvedObject") or {}
    return (
        meta.get("name", ""),
        meta.get("namespace", ""),
        io.get("kind", ""),
        io.get("namespace", ""),
        io.get("name", ""),
        io.get("uid", ""),
        io.get("apiVersion", ""),
        io.get("resourceVersion", ""),
        io.get("fieldPath", ""),
        obj.get("reason", ""),
        obj.get("reportingComponent", ""),
        (obj.get("source") or {}).get("component", ""),
        obj.get("type", ""),
    )


TYPES = {
    "pods": ResourceType(
        "pods",
        "Pod",
        True,
        short_names=("po",),
        field_names=POD_FIELDS,
        fields_fn=pod_fields,
        info_fn=pod_info,
        index_fns={"node": lambda info, f: info.node},
        subresources=("status", "log", "eviction", "binding"),
    ),
    "nodes": ResourceType(
        "nodes",
        "Node",
        False,
        short_names=("no",),
        field_names=("metadata.name", "spec.unschedulable"),
        fields_fn=node_fields,
        info_fn=node_info,
        subresources=("status",),
    ),
    "events": ResourceType(
        "events", "Event", True, short_names=("ev",), field_names=EVENT_FIELDS, fields_fn=event_fields
    ),
    "configmaps": ResourceType(
        "configmaps",
        "ConfigMap",
        True,
        short_names=("cm",),
        field_names=("metadata.name", "metadata.namespace"),
    ),
    "namespaces": ResourceType(
        "namespaces",
        "Namespace",
        False,
        short_names=("ns",),
        field_names=("metadata.name", "status.phase"),
        fields_fn=lambda o: (
            (o.get("metadata") or {}).get("name", ""),
            (o.get("status") or {}).get("phase", ""),
        ),
        subresources=("status",),
    ),
    "priorityclasses": ResourceType(
        "priorityclasses", "PriorityClass", False, group="scheduling.k8s.io", short_names=("pc",)
    ),
}

GROUPS = {"": "v1", "scheduling.k8s.io": "v1", "policy": "v1"}


def type_for(group: str, plural: str) -> ResourceType | None:
    t = TYPES.get(plural)
    return t if t is not None and t.group == group else None
