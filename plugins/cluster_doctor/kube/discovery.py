"""Which GPU nodes are free right now, from the Kubernetes API.

A GPU node has allocatable of the GPU resource (default ``nvidia.com/gpu``) > 0 and matches the
optional label selector. It is eligible when Ready, not cordoned, and every NoSchedule/NoExecute
taint is tolerated by the validation pods. It is free when no non-terminal pod bound to it requests
(or limits) the GPU resource — init and sidecar containers counted the way the scheduler counts
them, our own validation pods included — and no pending pod is nominated to it (a preemption in
progress means a user job is about to land there).

Reads are three list calls with field selectors whatever the cluster size, never a call per node.
Each is first asked with ``resourceVersion="0"`` and no limit: the apiserver answers from its watch
cache in one response instead of paging through etcd (at 150,000 pods, seconds instead of a minute).
Only the fields discovery uses are decoded, by msgspec into plain dicts, skipping the rest of each
object (most of a pod's JSON) without building it; the client's model deserializer is never used.
When the server refuses that read (an error, or it pages anyway), discovery falls back to paginated
consistent lists (limit/continue). The client it is given retries transient failures (kube/retry):
a watch cache answering 429 while it initializes is waited for, then a refusal that lasts falls back. The results are exact for the state the list returns; a watch
cache can lag etcd by a moment, which is safe here because the operator re-checks the chosen node
with a consistent read right before it creates a pod, and again while its pod is Pending.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal
from typing import Any, TypedDict

import hostlist
import msgspec

from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.nodes import InvalidNodeName, NodeRange, validate_node_name
from cluster_doctor.domain.taints import untolerated_taints

log = logging.getLogger(__name__)

VALIDATION_APP_LABEL = ("app.kubernetes.io/name", "cluster-doctor")
PAGE_SIZE = 500
BOUND_ACTIVE_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
UNBOUND_PENDING_PODS = "spec.nodeName=,status.phase=Pending"

# Reasons a GPU node is not eligible, in the order they are checked.
NOT_READY, CORDONED, TAINTED, BUSY, VALIDATING, NOMINATED, INVALID_NAME = (
    "not ready", "cordoned", "tainted", "busy", "validation running", "reserved", "invalid name")


@dataclasses.dataclass(frozen=True)
class GpuNode:
    name: str
    gpu_count: int
    gpu_model: str | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Ineligible:
    name: str
    reason: str  # one of the constants above
    detail: str  # e.g. "ml-team/trainer-0 requests 8 nvidia.com/gpu"
    gpu_count: int = 0
    gpu_model: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Discovery:
    free: list[GpuNode]
    ineligible: list[Ineligible]
    api_calls: int
    nodes_seen: int
    pods_seen: int
    decode_seconds: float = 0.0  # of the wall time, spent decoding list responses
    read_mode: str = "watch-cache"  # or "paged" when the server refused resourceVersion=0 lists

    def to_dict(self) -> dict[str, Any]:
        return {
            "free": [n.to_dict() for n in self.free],
            "ineligible": [n.to_dict() for n in self.ineligible],
            "api_calls": self.api_calls,
            "nodes_seen": self.nodes_seen,
            "pods_seen": self.pods_seen,
            "decode_seconds": round(self.decode_seconds, 3),
            "read_mode": self.read_mode,
        }


# ---------------------------------------------------------------------------- quantities
def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes resource quantity ('8', '500m', '1Gi') as a number, by the kubernetes client's own
    parser (``kubernetes.utils.parse_quantity``); None is 0. ValueError names a value that is not one."""
    if value is None:
        return _ZERO
    if isinstance(value, str) and value.isdigit():  # the common case for GPU counts ("8"): no parser
        return Decimal(value)
    # Imported on first use: the kubernetes package takes over a second to import, and every caller of
    # discovery holds a client (so has imported it) already.
    from kubernetes.utils.quantity import parse_quantity as kubernetes_quantity

    try:
        number = kubernetes_quantity(str(value).strip() if isinstance(value, (str, float)) else value)
    except (ValueError, TypeError, ArithmeticError):
        raise ValueError(f"not a Kubernetes quantity: {value!r}") from None
    if not number.is_finite():  # Decimal accepts "NaN" and "Infinity"; the apiserver never sends them
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    return number


_ZERO = Decimal(0)


def container_request(container: Mapping[str, Any], resource: str) -> Decimal:
    """Extended resources: a limit without a request means request = limit."""
    resources = container.get("resources")
    if not resources:
        return _ZERO
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    if resource in requests:
        return parse_quantity(requests[resource])
    return parse_quantity(limits.get(resource))


def pod_request(pod: Mapping[str, Any], resource: str) -> Decimal:
    """The pod's effective request as the scheduler computes it, with restartable (sidecar) init
    containers: max(sum(app) + sum(sidecars), max over init i of (init_i + sidecars started before i))."""
    spec = pod.get("spec") or {}
    if not spec.get("initContainers"):  # most pods: just the sum over the app containers
        return sum((container_request(c, resource) for c in spec.get("containers") or []), _ZERO)
    app = sum((container_request(c, resource) for c in spec.get("containers") or []), _ZERO)
    sidecars = _ZERO
    init_peak = _ZERO
    for c in spec.get("initContainers") or []:
        amount = container_request(c, resource)
        if c.get("restartPolicy") == "Always":
            sidecars += amount
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + amount)
    return max(app + sidecars, init_peak)


# ---------------------------------------------------------------------------- taints


def is_ready(node: Mapping[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


# ---------------------------------------------------------------------------- decoding
# The fields discovery reads, as TypedDicts: msgspec decodes into plain dicts holding only these keys
# and skips everything else (managedFields, env, volumes, status details ...) without allocating it.
class _Meta(TypedDict, total=False):
    name: str
    namespace: str
    labels: dict[str, str]


class _Taint(TypedDict, total=False):
    key: str
    value: str
    effect: str


class _Condition(TypedDict, total=False):
    type: str
    status: str


class _NodeSpec(TypedDict, total=False):
    unschedulable: bool
    taints: list[_Taint]


class _NodeStatus(TypedDict, total=False):
    allocatable: dict[str, Any]
    conditions: list[_Condition]


class _Node(TypedDict, total=False):
    metadata: _Meta
    spec: _NodeSpec
    status: _NodeStatus


class _Resources(TypedDict, total=False):
    requests: dict[str, Any]
    limits: dict[str, Any]


class _Container(TypedDict, total=False):
    resources: _Resources
    restartPolicy: str


class _PodSpec(TypedDict, total=False):
    nodeName: str
    containers: list[_Container]
    initContainers: list[_Container]


class _PodStatus(TypedDict, total=False):
    phase: str
    nominatedNodeName: str


class _Pod(TypedDict, total=False):
    metadata: _Meta
    spec: _PodSpec
    status: _PodStatus


class _NodeList(msgspec.Struct):
    items: list[_Node] | None = None
    metadata: dict[str, Any] | None = None


class _PodList(msgspec.Struct):
    items: list[_Pod] | None = None
    metadata: dict[str, Any] | None = None


_DECODERS = {"nodes": msgspec.json.Decoder(_NodeList), "pods": msgspec.json.Decoder(_PodList)}


class ListRefused(RuntimeError):
    """The server would not serve an unpaginated list from its cache."""


class _Counter(list):
    """[api_calls] plus the decode time, shared by every list of one discovery."""

    def __init__(self) -> None:
        super().__init__([0])
        self.decode_seconds = 0.0


def _decode(kind: str | None, data: bytes, counter: list[int]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    start = time.perf_counter()
    if kind is None:
        body = json.loads(data)
        items, meta = body.get("items") or [], body.get("metadata") or {}
    else:
        try:
            decoded = _DECODERS[kind].decode(data)
        except msgspec.ValidationError as exc:
            # a field of an unexpected type: say which, rather than guess
            raise ValueError(f"unexpected {kind} list from the Kubernetes API: {exc}") from None
        items, meta = decoded.items or [], decoded.metadata or {}
    if isinstance(counter, _Counter):
        counter.decode_seconds += time.perf_counter() - start
    return items, meta


# ---------------------------------------------------------------------------- listing
def paginate(list_call: Callable[..., Any], counter: list[int], *, kind: str | None = None,
             **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Items of a paginated, consistent list call (``kind`` "nodes"/"pods": decode only what discovery
    reads; None: whole objects)."""
    token = None
    while True:
        params = dict(kwargs, limit=PAGE_SIZE, _preload_content=False)
        if token:
            params["_continue"] = token
        response = list_call(**params)
        counter[0] += 1
        items, meta = _decode(kind, response.data, counter)
        yield from items
        token = meta.get("continue")
        if not token:
            return


def list_cached(list_call: Callable[..., Any], counter: list[int], *, kind: str, **kwargs: Any) -> list[dict[str, Any]]:
    """Every item in one list call served from the apiserver's watch cache (resourceVersion=0, no
    limit). Raises ListRefused when the server answers with an error or pages the answer anyway."""
    from kubernetes.client.exceptions import ApiException

    try:
        response = list_call(**kwargs, resource_version="0", _preload_content=False)
    except ApiException as exc:
        if exc.status in (401, 403):
            raise  # a permission problem is not solved by paging
        raise ListRefused(f"HTTP {exc.status} {exc.reason}") from None
    counter[0] += 1
    items, meta = _decode(kind, response.data, counter)
    if meta.get("continue"):
        raise ListRefused("the server paged an unlimited resourceVersion=0 list")
    return items


def list_all(list_call: Callable[..., Any], counter: list[int], mode: list[str], *, kind: str,
             **kwargs: Any) -> list[dict[str, Any]] | Iterator[dict[str, Any]]:
    """The watch-cache read, or consistent pages when the server refuses it (``mode[0]`` says which)."""
    if mode[0] == "watch-cache":
        try:
            return list_cached(list_call, counter, kind=kind, **kwargs)
        except ListRefused as exc:
            log.warning("the API server refused a resourceVersion=0 list (%s); reading paged lists instead", exc)
            mode[0] = "paged"
    return paginate(list_call, counter, kind=kind, **kwargs)


def _pod_ref(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def discover(core_v1: Any, settings: Settings, node_range: NodeRange | None = None, *,
             watch_cache: bool = True) -> Discovery:
    """Classify every GPU node (within ``node_range``) as free or not eligible, with the reason.
    ``watch_cache=False`` reads paged consistent lists only."""
    calls = _Counter()
    mode = ["watch-cache" if watch_cache else "paged"]
    resource = settings.gpu_resource
    gpu_nodes: dict[str, dict[str, Any]] = {}
    nodes_seen = 0
    node_kwargs = {"label_selector": settings.node_selector} if settings.node_selector else {}
    for node in list_all(core_v1.list_node, calls, mode, kind="nodes", **node_kwargs):
        nodes_seen += 1
        name = (node.get("metadata") or {}).get("name", "")
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        try:
            gpus = int(parse_quantity(allocatable.get(resource)))
        except ValueError:
            gpus = 0
        if gpus <= 0:
            continue
        if node_range is not None and not node_range.matches(name):
            continue
        gpu_nodes[name] = {"node": node, "gpus": gpus,
                           "model": ((node.get("metadata") or {}).get("labels") or {}).get(settings.gpu_product_label)}

    ineligible: dict[str, Ineligible] = {}

    def exclude(name: str, reason: str, detail: str) -> None:
        if name not in ineligible:
            info = gpu_nodes[name]
            ineligible[name] = Ineligible(name, reason, detail, info["gpus"], info["model"])

    for name, info in gpu_nodes.items():
        node = info["node"]
        try:
            validate_node_name(name)
        except InvalidNodeName:
            exclude(name, INVALID_NAME, "not a valid Kubernetes node name; never put into a pod spec")
            continue
        if not is_ready(node):
            exclude(name, NOT_READY, "Ready condition is not True")
        elif (node.get("spec") or {}).get("unschedulable"):
            exclude(name, CORDONED, "spec.unschedulable is set")
        else:
            taints = untolerated_taints(node, settings.tolerations)
            if taints:
                exclude(name, TAINTED, "untolerated taint(s) " + ", ".join(taints))

    pods_seen = 0
    for pod in list_all(core_v1.list_pod_for_all_namespaces, calls, mode, kind="pods",
                        field_selector=BOUND_ACTIVE_PODS):
        pods_seen += 1
        name = (pod.get("spec") or {}).get("nodeName")
        if name not in gpu_nodes or name in ineligible:
            continue
        amount = pod_request(pod, resource)
        if amount <= 0:
            continue
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get(VALIDATION_APP_LABEL[0]) == VALIDATION_APP_LABEL[1]:
            exclude(name, VALIDATING, f"validation pod {_pod_ref(pod)} is on the node")
        else:
            exclude(name, BUSY, f"{_pod_ref(pod)} requests {amount.normalize():f} {resource}")
    for pod in list_all(core_v1.list_pod_for_all_namespaces, calls, mode, kind="pods",
                        field_selector=UNBOUND_PENDING_PODS):
        pods_seen += 1
        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        if nominated in gpu_nodes and pod_request(pod, resource) > 0:
            exclude(nominated, NOMINATED, f"pending {_pod_ref(pod)} is nominated to the node (preemption)")

    order = lambda n: (hostlist.numeric_sort_key(n), n)  # noqa: E731
    free = [GpuNode(name, info["gpus"], info["model"]) for name, info in gpu_nodes.items() if name not in ineligible]
    free.sort(key=lambda n: order(n.name))
    return Discovery(
        free=free,
        ineligible=sorted(ineligible.values(), key=lambda n: order(n.name)),
        api_calls=calls[0],
        nodes_seen=nodes_seen,
        pods_seen=pods_seen,
        decode_seconds=calls.decode_seconds,
        read_mode=mode[0],
    )


def node_gpu_pods(core_v1: Any, node_name: str, resource: str, *, exclude_pod: str | None = None) -> list[str]:
    """Non-terminal pods on one node that hold GPUs (the pre-submit and while-Pending re-check)."""
    validate_node_name(node_name)
    calls = [0]  # consistent (paged) reads on purpose: this is the guard against a stale cache
    holders = []
    for pod in paginate(core_v1.list_pod_for_all_namespaces, calls,
                        field_selector=f"spec.nodeName={node_name},status.phase!=Succeeded,status.phase!=Failed"):
        if (pod.get("metadata") or {}).get("name") == exclude_pod:
            continue
        amount = pod_request(pod, resource)
        if amount > 0:
            holders.append(f"{_pod_ref(pod)} requests {amount.normalize():f} {resource}")
    for pod in paginate(core_v1.list_pod_for_all_namespaces, calls, field_selector=UNBOUND_PENDING_PODS):
        if (pod.get("status") or {}).get("nominatedNodeName") == node_name and pod_request(pod, resource) > 0:
            holders.append(f"pending {_pod_ref(pod)} is nominated to the node (preemption)")
    return holders


def discover_from_kubeconfig(kubeconfig: str | None, settings: Settings,
                             node_range: NodeRange | None = None) -> Discovery:
    """For the CLI outside Airflow: the same discovery through a kubeconfig file."""
    from kubernetes import config

    from cluster_doctor.kube import retry

    return discover(retry.core_v1(config.new_client_from_config(config_file=kubeconfig)), settings, node_range)
