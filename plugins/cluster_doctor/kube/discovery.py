"""Which GPU nodes are free right now, from the Kubernetes API.

A GPU node has allocatable of the GPU resource (default ``nvidia.com/gpu``) > 0 and matches the
optional label selector. It is eligible when Ready, not cordoned, and every NoSchedule/NoExecute
taint is tolerated by the validation pods (``node_problem``, shared with the operator's guards). It
is free when no non-terminal pod bound to it requests (or limits) the GPU resource — init and sidecar
containers counted the way the scheduler counts them, our own validation pods included — and no
pending pod is nominated to it (a preemption in progress means a user job is about to land there).

Reads are two list calls whatever the cluster size, never a call per node: the nodes, and every
non-terminal pod (bound ones hold their node's GPUs; unbound pending ones may be nominated to a node).
Each is first asked with ``resourceVersion="0"`` and no limit: the apiserver answers from its watch
cache in one response instead of paging through etcd (at 150,000 pods, seconds instead of a minute).
The response is decoded as it arrives (``kube.listing``): only the fields discovery uses, a batch of
items at a time, each folded into per-node aggregates and dropped, so memory stays flat whatever the
number of pods; the client's model deserializer is never used. When the server refuses that read
(an error, or it pages anyway), discovery falls back to paginated consistent lists (limit/continue).
The client it is given retries transient failures (kube/retry): a watch cache answering 429 while it
initializes is waited for, then a refusal that lasts falls back. The results are exact for the state
the list returns; a watch cache can lag etcd by a moment, which is safe here because the operator
re-checks the chosen node right before it creates a pod, and again while its pod is Pending
(``kube.guards``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import gc
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

import hostlist

from cluster_doctor.domain import timestamps
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.nodes import InvalidNodeName, NodeRange, validate_node_name
from cluster_doctor.domain.quarantine import LABEL as QUARANTINE_LABEL
from cluster_doctor.domain.quarantine import LABEL_VALUE as QUARANTINE_VALUE
from cluster_doctor.domain.signals import ConditionSeen
from cluster_doctor.domain.taints import untolerated_taints
from cluster_doctor.kube import listing
from cluster_doctor.kube.api import CoreV1
from cluster_doctor.kube.listing import PAGE_SIZE, ListRefused, paginate  # noqa: F401 - re-exported

log = logging.getLogger(__name__)

VALIDATION_APP_LABEL = ("app.kubernetes.io/name", "cluster-doctor")
STREAM_ATTEMPTS = 3
PREFETCH_CHUNKS = 4  # MiB of a pod list read ahead while the previous chunk is decoded
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"

# Reasons a GPU node is not eligible, in the order they are checked.
NOT_READY, CORDONED, TAINTED, BUSY, VALIDATING, NOMINATED, INVALID_NAME = (
    "not ready", "cordoned", "tainted", "busy", "validation running", "preemption pending", "invalid name")


@dataclasses.dataclass(frozen=True)
class GpuNode:
    name: str
    gpu_count: int  # allocatable: what a pod can request (the validation pods request all of it)
    gpu_model: str | None
    # the GPUs the node has: its capacity or GPU Feature Discovery's count label, which do not drop
    # when the device plugin marks a GPU unhealthy; what its suites expect (None: neither is known)
    node_gpus: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class GpuShortfall:
    """A GPU node that offers fewer GPUs than it has: allocatable below its capacity or GPU Feature
    Discovery's count (after an Xid 79 the device plugin marks the GPU unhealthy). It is still
    validated — its pods request what is allocatable — and its suites expect the node's count."""

    name: str
    allocatable: int
    node_gpus: int
    source: str  # "capacity", "label nvidia.com/gpu.count", ...

    def line(self) -> str:
        return f"{self.name}: {self.allocatable} of its {self.node_gpus} GPUs allocatable ({self.source})"


@dataclasses.dataclass(frozen=True)
class NodeFacts:
    """What the signals read of a GPU node in the same list: its boot id, whether it carries
    Cluster Doctor's quarantine label, and its conditions of the types setting signal_node_conditions names."""

    boot_id: str | None
    quarantined: bool
    conditions: tuple[ConditionSeen, ...] = ()


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
    # the nodes offering fewer GPUs than they have (still validated; their suites expect their count)
    short: list[GpuShortfall] = dataclasses.field(default_factory=list)
    # per GPU node (valid names), what the signals read: boot id, quarantine label, watched conditions
    facts: dict[str, NodeFacts] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "free": [n.to_dict() for n in self.free],
            "ineligible": [n.to_dict() for n in self.ineligible],
            "short": [dataclasses.asdict(n) for n in self.short],
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


# ---------------------------------------------------------------------------- node state
def ready_condition(node: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition
    return None


def is_ready(node: Mapping[str, Any]) -> bool:
    condition = ready_condition(node)
    return condition is not None and condition.get("status") == "True"


def node_problem(node: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """Why validation pods cannot be placed on ``node`` now — (NOT_READY | CORDONED | TAINTED, detail)
    — or None. The node lifecycle controller's not-ready/unreachable taints follow the Ready condition
    a moment later; the condition is read first, so either says "not ready"."""
    if not is_ready(node):
        condition = ready_condition(node)
        if condition is None:
            return NOT_READY, "no Ready condition yet"
        why = condition.get("reason") or ""
        return NOT_READY, f"Ready is {condition.get('status') or 'unset'}" + (f" ({why})" if why else "")
    if (node.get("spec") or {}).get("unschedulable"):
        return CORDONED, "spec.unschedulable is set"
    taints = untolerated_taints(node, tolerations)
    if taints:
        return TAINTED, "untolerated taint(s) " + ", ".join(taints)
    return None


# ---------------------------------------------------------------------------- listing
def list_all(list_call: Callable[..., Any], counter: list[int], mode: list[str], *, kind: str,
             prefetch: int = 0, **kwargs: Any) -> Iterator[list[Any]]:
    """The watch-cache read, streamed (``prefetch`` chunks read ahead), or consistent pages when the
    server refuses it (``mode[0]`` says which): lists of items, as they are decoded (a chunk's, a
    page's)."""
    if mode[0] == "watch-cache":
        try:
            return listing.list_cached(list_call, counter, kind=kind, batches=True, prefetch=prefetch, **kwargs)
        except ListRefused as exc:
            log.warning("the API server refused a resourceVersion=0 list (%s); reading paged lists instead", exc)
            mode[0] = "paged"
    return listing.pages(list_call, counter, kind=kind, **kwargs)


def _each(batches: Iterator[list[Any]]) -> Iterator[Any]:
    for batch in batches:
        yield from batch


def _pod_ref(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def discover(core_v1: CoreV1, settings: Settings, node_range: NodeRange | None = None, *,
             watch_cache: bool = True) -> Discovery:
    """Classify every GPU node (within ``node_range``) as free or not eligible, with the reason.
    ``watch_cache=False`` reads paged consistent lists only. Every list is folded item by item into
    per-node state; nothing holds a whole list.

    A streamed list whose connection is lost mid-body cannot be retried by the client (kube.retry
    leaves streamed bodies to us): discovery then starts over, at most STREAM_ATTEMPTS times."""
    from cluster_doctor.kube.retry import CONNECTION_ERRORS

    for attempt in range(1, STREAM_ATTEMPTS + 1):
        try:
            return _discover(core_v1, settings, node_range, watch_cache=watch_cache)
        except CONNECTION_ERRORS as exc:
            if not watch_cache or attempt == STREAM_ATTEMPTS:
                raise
            log.warning("a list was cut off mid-answer (%s); discovery starts over (try %d of %d)",
                        exc, attempt + 1, STREAM_ATTEMPTS)
    raise AssertionError("unreachable")


def _discover(core_v1: CoreV1, settings: Settings, node_range: NodeRange | None, *, watch_cache: bool) -> Discovery:
    calls = listing.Counter()
    mode = ["watch-cache" if watch_cache else "paged"]
    # The pod list is asked for first, in a thread that returns once its answer starts; the nodes are
    # read and judged meanwhile, without waiting for it: the server's time to its first byte (at 150,000
    # pods, a fifth of the list's) is spent judging the nodes, and its body is decoded ahead in that
    # thread while they are. Its items wait until the GPU nodes are known.
    with _collection_paused(), concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="cluster-doctor-list") as pool:
        # only the pods that name the GPU resource are decoded (the others cannot hold or want its GPUs)
        asked = pool.submit(list_all, core_v1.list_pod_for_all_namespaces, calls, mode, kind="pods",
                            field_selector=ACTIVE_PODS, prefetch=PREFETCH_CHUNKS,
                            keep=listing.quoted(settings.gpu_resource))
        try:
            return _classify(core_v1, settings, node_range, calls, mode, asked.result)
        finally:
            with contextlib.suppress(Exception):  # what was not read to its end gives its connection back
                close = getattr(asked.result(), "close", None)
                if close is not None:
                    close()


@contextlib.contextmanager
def _collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while discovery runs. Discovery keeps tens of thousands of
    small objects until it returns (per GPU node its facts, its entry, its reason), which set the collector
    off every 700 of them and, every few discoveries, over the whole process: ~50 ms in a bare process at
    5,000 nodes, more in an Airflow worker's heap. They form no cycles for it to find before discovery
    returns; it runs again, if it was on, when discovery returns."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _classify(core_v1: CoreV1, settings: Settings, node_range: NodeRange | None, calls: listing.Counter,
              mode: list[str], pod_list: Callable[[], Iterator[list[Any]]]) -> Discovery:
    """The nodes read and judged, then the pods (``pod_list()``: batches of them) folded in (see
    ``discover``)."""
    resource = settings.gpu_resource
    gpu_nodes: dict[str, tuple[int, str | None]] = {}  # name -> (GPUs, model)
    has: dict[str, int] = {}  # name -> the GPUs the node has, where known
    short: list[GpuShortfall] = []
    ineligible: dict[str, Ineligible] = {}
    facts: dict[str, NodeFacts] = {}

    def exclude(name: str, reason: str, detail: str) -> None:
        if name not in ineligible:
            gpus, model = gpu_nodes[name]
            ineligible[name] = Ineligible(name, reason, detail, gpus, model)

    nodes_seen = 0
    node_kwargs = {"label_selector": settings.node_selector} if settings.node_selector else {}
    # nodes come as listing.LazyNode: the GPU count and model read by key, the rest decoded for GPU nodes
    for node in _each(list_all(core_v1.list_node, calls, mode, kind="nodes", **node_kwargs)):
        nodes_seen += 1
        name = node.name
        try:
            gpus = int(parse_quantity(node.allocatable(resource)))
        except ValueError:
            gpus = 0
        if gpus <= 0 or (node_range is not None and not node_range.matches(name)):
            continue
        model = node.label(settings.gpu_product_label)
        gpu_nodes[name] = (gpus, str(model) if model is not None else None)
        if (counted := node_gpus(node, resource)) is not None:
            has[name] = counted[0]
            if counted[0] > gpus:
                short.append(GpuShortfall(name, gpus, *counted))
        try:
            validate_node_name(name)
        except InvalidNodeName:
            exclude(name, INVALID_NAME, "not a valid Kubernetes node name; never put into a pod spec")
            continue
        facts[name] = node_facts(node, whole := listing.node_dict(node), settings)
        problem = node_problem(whole, settings.tolerations)
        if problem:
            exclude(name, *problem)

    order = lambda n: (hostlist.numeric_sort_key(n), n)  # noqa: E731
    ranked = sorted(gpu_nodes, key=order)  # now, while the pod list still comes: not after its last byte
    pods_seen = 0
    # pods come as listing.LazyPod, a chunk's worth at a time: their containers are decoded only when
    # their node is still a candidate and they name the GPU resource at all; an unbound (pending) pod's
    # status only, for a node it is nominated to
    nominations: list[tuple[str, str]] = []  # applied after every bound pod: a holder is the reason first
    for batch in pod_list():
        pods_seen += listing.seen(batch)
        for pod in batch:
            name = pod.spec.nodeName if pod.spec else ""
            if not name:
                nominated = pod.nominated_node
                if nominated in gpu_nodes and listing.mentions(pod, resource) and \
                        pod_request(whole := listing.pod_dict(pod), resource) > 0:
                    nominations.append((nominated, _pod_ref(whole)))
            elif name in gpu_nodes and name not in ineligible and listing.mentions(pod, resource):
                holder = gpu_holder(listing.pod_dict(pod), resource)
                if holder:
                    exclude(name, *holder)
    for name, ref in nominations:
        exclude(name, NOMINATED, f"pending {ref} is nominated to the node (preemption)")

    free = [GpuNode(name, *gpu_nodes[name], has.get(name)) for name in ranked if name not in ineligible]
    return Discovery(
        free=free,
        ineligible=[ineligible[name] for name in ranked if name in ineligible],
        api_calls=calls[0],
        nodes_seen=nodes_seen,
        pods_seen=pods_seen,
        decode_seconds=calls.decode_seconds,
        read_mode=mode[0],
        short=sorted(short, key=lambda n: order(n.name)),
        facts=facts,
    )


def node_facts(node: listing.LazyNode, whole: Mapping[str, Any], settings: Settings) -> NodeFacts:
    """The boot id, our quarantine label and the watched conditions of a GPU node (never our own
    ``ClusterDoctorHealthy``: domain.signals.conditions leaves it out again)."""
    watched = settings.signal_node_conditions
    conditions = tuple(
        ConditionSeen(str(c.get("type")), str(c.get("status")), c.get("reason") or "", c.get("message") or "",
                      timestamps.parse(c.get("lastTransitionTime")))
        for c in (whole.get("status") or {}).get("conditions") or [] if c.get("type") in watched)
    return NodeFacts(node.boot_id or None, node.label(QUARANTINE_LABEL) == QUARANTINE_VALUE, conditions)


def node_gpus(node: listing.LazyNode, resource: str) -> tuple[int, str] | None:
    """(the GPUs the node has, from where): the larger of its capacity and GPU Feature Discovery's
    ``<resource>.count`` label (the capacity on a tie); None when neither says. Unreadable values count
    as unknown."""
    found: tuple[int, str] | None = None
    for source in ("capacity", f"label {resource}.count"):  # read in a loop, not through closures: per node
        try:
            value = int(parse_quantity(node.capacity(resource) if source == "capacity" else node.label(source[6:])))
        except (ValueError, TypeError, ArithmeticError):
            continue
        if value > 0 and (found is None or value > found[0]):
            found = (value, source)
    return found


def gpu_holder(pod: Mapping[str, Any], resource: str) -> tuple[str, str] | None:
    """(BUSY | VALIDATING, detail) when a bound, non-terminal pod holds GPUs of its node, else None."""
    amount = pod_request(pod, resource)
    if amount <= 0:
        return None
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if labels.get(VALIDATION_APP_LABEL[0]) == VALIDATION_APP_LABEL[1]:
        return VALIDATING, f"validation pod {_pod_ref(pod)} is on the node"
    return BUSY, f"{_pod_ref(pod)} requests {amount.normalize():f} {resource}"


def discover_from_kubeconfig(kubeconfig: str | None, settings: Settings,
                             node_range: NodeRange | None = None) -> Discovery:
    """For the CLI outside Airflow: the same discovery through a kubeconfig file."""
    from kubernetes import config

    from cluster_doctor.kube import retry

    return discover(retry.core_v1(config.new_client_from_config(config_file=kubeconfig)), settings, node_range)
