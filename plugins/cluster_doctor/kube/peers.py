"""Peer tests (issue 23 §2): one suite run BETWEEN two free nodes, a server pod on one and a client pod
on the other (suite ``fabric_peer``: a two-node NCCL all-reduce forced onto the network, ib_write_bw per
rail). Each pod is an ordinary validation pod (``kube.podspec``: hardened, pinned to its node by
required node affinity, the lowest PriorityClass, the suite ConfigMap) plus the peer environment:

    CLUSTER_DOCTOR_PEER_ROLE     server | client (rank 0 / 1)
    CLUSTER_DOCTOR_PEER_NODE     the other node's name
    CLUSTER_DOCTOR_PEER_ADDRESS  (client) the server pod's IP; the server binds 0.0.0.0
    CLUSTER_DOCTOR_PEER_PORT     base TCP port (ib_write_bw uses base + 1 + rail)
    CLUSTER_DOCTOR_PEER_TIMEOUT  seconds a side waits for the other

**Rendezvous by pod IP**, which works on any cluster without hostNetwork, Services or DNS: the server
pod is created first; once its kubelet has started the sandbox (``status.podIP`` set), the client pod
is created with that address. Both pods are pod-network pods like any other (NCCL and the RDMA tests
use the node's HCAs through the device plugin's resources, as the single-node suites do).

**Both run or neither does.** Without gang scheduling the launcher enforces it itself:

* before any pod, both nodes must still be free (``kube.guards``), else both ``skipped``, no pod;
* both pods must be Running within the pending timeout (counted from the server's creation), else
  both are deleted and both recorded ``timeout`` with the cause (the stuck side's scheduler message);
* while either pod exists, every availability interval, both nodes' pods are listed: a user pod
  claiming either node stops both, recorded ``preempted`` naming the claiming pod; a node that turns
  not ready / cordoned / tainted while a pod waits stops both (``skipped``);
* one side ending (or vanishing: preempted, evicted) stops the other: at once if the other has not
  started, else after ``PEER_GRACE_S`` to end on its own;
* a ``finally`` deletes both pods on every path (an exception, a killed task: ``stop()``).

**Gang scheduling.** ``gang_scheduler`` reads API discovery for the coscheduling PodGroup
(``scheduling.x-k8s.io/v1alpha1`` ``podgroups``, the scheduler-plugins project) and Kueue
(``kueue.x-k8s.io``) and the launcher logs what it found. It does not use them: a gang admits the pods
only once BOTH exist (PodGroup ``minMember: 2`` holds them in Permit; Kueue's pod groups gate them),
while the IP rendezvous needs the server scheduled before the client exists. A gang would need a
DNS rendezvous (a headless Service + ``hostname``/``subdomain``, as JobSet does) and the RBAC to create
Services; the launcher's own all-or-nothing rule above bounds what a half-placed pair costs (one idle
lowest-priority pod, preemptible, for at most the pending timeout).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from cluster_doctor.domain import results
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.nodes import validate_node_name
from cluster_doctor.kube import guards, podspec, retry

log = logging.getLogger(__name__)

TEST = "fabric_peer"
SERVER, CLIENT = "server", "client"
DEFAULT_PORT = 29500
POLL_S = 1.0
NODE_CHECK_S = 5  # a waiting pod's node is read this often (capped by availability_check_s)
PEER_GRACE_S = 30  # after one side ended, how long the other may take to end on its own
LOG_TAIL_LINES = 200
PEER_LABEL = f"{podspec.LABEL_PREFIX}/peer"
ROLE_LABEL = f"{podspec.LABEL_PREFIX}/peer-role"
COSCHEDULING = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
KUEUE_GROUP = "kueue.x-k8s.io"


@dataclasses.dataclass(frozen=True)
class Side:
    """One node of a peer test and its role."""

    node_name: str
    gpu_count: int
    gpu_model: str | None
    role: str  # SERVER or CLIENT
    peer: str  # the other node

    def __post_init__(self) -> None:
        validate_node_name(self.node_name)
        validate_node_name(self.peer)
        if self.role not in (SERVER, CLIENT):
            raise ValueError(f"peer role must be {SERVER} or {CLIENT}, got {self.role!r}")
        if self.node_name == self.peer:
            raise ValueError(f"a peer test needs two nodes, got {self.node_name} twice")


@dataclasses.dataclass
class SideResult:
    """How one side ended: its outcome (``domain.results.PodOutcome``) and its pod."""

    side: Side
    outcome: results.PodOutcome
    pod_name: str | None = None


@dataclasses.dataclass
class PeerResult:
    server: SideResult
    client: SideResult
    gang: str | None = None  # the gang scheduler the cluster serves (not used: see the module doc)

    @property
    def sides(self) -> list[SideResult]:
        return [self.server, self.client]


def sides(server: str, client: str, gpus: Mapping[str, tuple[int, str | None]]) -> tuple[Side, Side]:
    """The two sides of a match; ``gpus``: node -> (gpu_count, gpu_model)."""
    return (Side(server, *gpus[server], role=SERVER, peer=client),
            Side(client, *gpus[client], role=CLIENT, peer=server))


def gang_scheduler(core_v1: Any) -> str | None:
    """The gang scheduling the cluster serves, from API discovery: "coscheduling" (PodGroups of the
    scheduler-plugins project), "kueue", or None. Never raises: unknown is None."""
    try:
        from kubernetes import client as k8s

        apis = retry.sibling(core_v1, k8s.ApisApi)
        groups = {g.name: [v.version for v in g.versions or []] for g in apis.get_api_versions().groups or []}
        group, version, plural = COSCHEDULING
        if version in groups.get(group, []):
            listed = retry.sibling(core_v1, k8s.CustomObjectsApi).get_api_resources(group, version)
            if any(r.name == plural for r in listed.resources or []):
                return "coscheduling"
        if KUEUE_GROUP in groups:
            return "kueue"
    except Exception as exc:  # noqa: BLE001 - discovery is advice only
        log.debug("API discovery for gang scheduling failed: %s", one_line(exc))
    return None


def peer_env(side: Side, *, address: str | None, port: int, timeout_s: int) -> dict[str, str]:
    """The peer environment of one side's pod (the suite's contract)."""
    env = {"CLUSTER_DOCTOR_PEER_ROLE": side.role, "CLUSTER_DOCTOR_PEER_NODE": side.peer,
           "CLUSTER_DOCTOR_PEER_PORT": str(port), "CLUSTER_DOCTOR_PEER_TIMEOUT": str(timeout_s)}
    if side.role == CLIENT:
        if not address:
            raise ValueError("the client side needs the server's address")
        env["CLUSTER_DOCTOR_PEER_ADDRESS"] = address
    return env


def build_peer_pod(settings: Settings, side: Side, *, run_id: str, configmap: str, suite_version: str,
                   suite_files: list[str] | None, address: str | None, port: int = DEFAULT_PORT,
                   timeout_s: int | None = None) -> dict[str, Any]:
    """The validation pod of one side (``podspec.build_pod``) with the peer labels and environment; a
    generated name (``cv-fabric-peer-<node>-<random>``)."""
    pod = podspec.build_pod(settings, node_name=side.node_name, test_name=TEST, gpu_count=side.gpu_count,
                            gpu_model=side.gpu_model, run_id=run_id, configmap=configmap,
                            suite_version=suite_version, suite_files=suite_files)
    meta = pod["metadata"]
    meta["generateName"] = meta.pop("name")[:57] + "-"
    meta["labels"].update({PEER_LABEL: podspec.label_value(side.peer), ROLE_LABEL: side.role})
    meta["annotations"][PEER_LABEL] = side.peer
    container = next(c for c in pod["spec"]["containers"] if c.get("name") == "base")
    wait = timeout_s if timeout_s is not None else settings.pending_timeout_s
    env = {e["name"]: e for e in container.get("env") or []}
    for name, value in peer_env(side, address=address, port=port, timeout_s=wait).items():
        env[name] = {"name": name, "value": value}
    container["env"] = list(env.values())
    return pod


class _Stop(Exception):
    """Internal: the peer test ends now; every side not yet ended gets ``status`` and ``reason``."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


class PeerLauncher:
    """Runs one peer test to its end, synchronously: ``run()`` returns both sides' outcomes and never
    leaves a pod behind. ``core_v1``: a kubernetes CoreV1Api (retried: ``kube.retry``)."""

    def __init__(self, core_v1: Any, settings: Settings, server: Side, client: Side, *, run_id: str,
                 configmap: str, suite_version: str, suite_files: list[str] | None = None,
                 port: int = DEFAULT_PORT, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, poll_s: float = POLL_S, logger: Any = None):
        if server.role != SERVER or client.role != CLIENT or server.peer != client.node_name:
            raise ValueError("a peer test needs a server and a client naming each other")
        self.core_v1, self.s, self.run_id = core_v1, settings, run_id
        self.by_role = {SERVER: server, CLIENT: client}
        self.pod_args = dict(configmap=configmap, suite_version=suite_version, suite_files=suite_files, port=port)
        self.clock, self.sleep, self.poll_s = clock, sleep, poll_s
        self.log = logger or log
        self.pods: dict[str, str] = {}  # role -> pod name
        self.last: dict[str, dict[str, Any]] = {}  # role -> the pod as last read
        self.ended: dict[str, SideResult] = {}
        self.running: set[str] = set()

    # ------------------------------------------------------------------ the whole test
    def run(self) -> PeerResult:
        gang = gang_scheduler(self.core_v1)
        if gang:
            self.log.info("the cluster serves %s gang scheduling; not used by peer tests (the IP rendezvous "
                          "needs the server scheduled first): both-or-neither is enforced here", gang)
        try:
            self._precheck()
            self._create(SERVER, address=None)
            self._watch()
        except _Stop as stop:
            self._end_all(stop.status, stop.reason)
        except Exception as exc:  # noqa: BLE001 - recorded for both sides; the pods go in the finally
            self.log.error("peer test %s ↔ %s: orchestration error: %s", self.by_role[SERVER].node_name,
                           self.by_role[CLIENT].node_name, one_line(exc))
            # an orchestration failure says nothing about the nodes: unless both sides were running (the test
            # was under way), the peer test did not happen
            both = self.running >= {SERVER, CLIENT}
            self._end_all("error" if both else "skipped", f"orchestration error: {one_line(exc)}")
        finally:
            self.stop()
        return PeerResult(server=self.ended[SERVER], client=self.ended[CLIENT], gang=gang)

    def stop(self) -> None:
        """Delete both pods (every path ends here; safe to call twice, from another thread too), then wait
        a little for them to go."""
        for name in list(self.pods.values()):
            self._delete(name)
        end = self.clock() + 30
        try:
            while any(self._read(name) is not None for name in self.pods.values()) and self.clock() < end:
                self.sleep(min(self.poll_s, 0.5))
        except Exception as exc:  # noqa: BLE001 - deleted already; only the wait for it to go failed
            self.log.warning("could not confirm the peer pods are gone: %s", one_line(exc))

    # ------------------------------------------------------------------ steps
    def _precheck(self) -> None:
        for side in self.by_role.values():
            problem = guards.node_problem(self.core_v1, side.node_name, self.s.tolerations)
            if problem:
                raise _Stop("skipped", f"{side.node_name}: {problem.describe()} since planning; no pod created")
            holders = guards.gpu_holders(self.core_v1, side.node_name, self.s.gpu_resource)
            if holders:
                raise _Stop("skipped", f"{side.node_name} is no longer free ({holders[0]}); no pod created")

    def _create(self, role: str, *, address: str | None) -> None:
        side = self.by_role[role]
        pod = build_peer_pod(self.s, side, run_id=self.run_id, address=address, **self.pod_args)
        created = self.core_v1.create_namespaced_pod(self.s.namespace, pod)
        self.pods[role] = created.metadata.name
        self.log.info("%s pod %s created on %s%s", role, created.metadata.name, side.node_name,
                      f" (server at {address})" if address else "")

    def _watch(self) -> None:  # Long: one loop keeps every rule of the module doc in one place, in order
        s = self.s
        start = self.clock()
        pending_deadline = start + s.pending_timeout_s
        run_deadline = start + s.pod_deadline_s(TEST) + s.task_margin_s
        next_claim = start + s.availability_check_s
        node_every = min(NODE_CHECK_S, s.availability_check_s)
        next_node = start + node_every
        first_end: float | None = None
        while True:
            now = self.clock()
            for role in [r for r in self.pods if r not in self.ended]:
                self._observe(role)
            if set(self.ended) == {SERVER, CLIENT}:
                return
            server = self.last.get(SERVER)
            if CLIENT not in self.pods and SERVER not in self.ended and server is not None:
                ip = (server.get("status") or {}).get("podIP")
                if ip:
                    self._create(CLIENT, address=ip)
                    continue
            if self.ended:
                first_end = first_end if first_end is not None else now
                gone = next(iter(self.ended.values()))
                said = f"{gone.side.node_name}'s side ended first ({gone.outcome.status}: {gone.outcome.reason})"
                if gone.outcome.status == "preempted":
                    raise _Stop("preempted", f"its peer {said}; both pods deleted")
                waiting = [r for r in (SERVER, CLIENT) if r not in self.ended and r not in self.running]
                if waiting or CLIENT not in self.pods:
                    raise _Stop("skipped", f"its peer {said} before this side started; pod deleted")
                if now - first_end >= PEER_GRACE_S:
                    raise _Stop("error", f"stopped {PEER_GRACE_S} s after its peer {said}; pod deleted")
            both_running = self.running >= {SERVER, CLIENT}
            if not both_running and not self.ended and now >= pending_deadline:
                raise _Stop("timeout", self._pending_reason())
            if now >= run_deadline:
                raise _Stop("error", f"the peer test outlived its budget of {s.pod_deadline_s(TEST)} s; pods deleted")
            if now >= next_node and not both_running:
                next_node = now + node_every
                for role in self._live_roles():
                    side = self.by_role[role]
                    if role not in self.running:
                        problem = guards.node_problem(self.core_v1, side.node_name, s.tolerations)
                        if problem:
                            raise _Stop("skipped", f"{side.node_name}: {problem.describe()} while the peer test "
                                                   "waited; both pods deleted")
            if now >= next_claim:
                next_claim = now + s.availability_check_s
                for role in self._live_roles():
                    side = self.by_role[role]
                    holders = guards.gpu_holders(self.core_v1, side.node_name, s.gpu_resource,
                                                 exclude_pod=self.pods[role])
                    if holders:
                        raise _Stop("preempted", f"a user pod claimed {side.node_name} ({holders[0]}): both sides "
                                                 "of the peer test stopped; pods deleted")
            self.sleep(self.poll_s)

    def _live_roles(self) -> list[str]:
        return [r for r in (SERVER, CLIENT) if r in self.pods and r not in self.ended]

    def _observe(self, role: str) -> None:
        """Read one side's pod: Running, ended (judged now, before any deletion), or vanished."""
        name = self.pods[role]
        pod = self._read(name)
        side = self.by_role[role]
        if pod is None:
            reached = role in self.running
            reason = ("the pod disappeared while running (deleted or preempted)" if reached
                      else "the pod was removed while Pending (preempted or deleted)")
            self.ended[role] = SideResult(side, results.PodOutcome("preempted", reason), name)
            return
        self.last[role] = pod
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Running":
            self.running.add(role)
        elif phase in ("Succeeded", "Failed"):
            self.running.add(role)
            outcome = results.classify(pod, node_name=side.node_name, test_name=TEST, log_tail=self._log_tail(name),
                                       run_budget_s=self.s.suite_timeout(TEST))
            self.ended[role] = SideResult(side, outcome, name)
            self.log.info("%s side on %s ended: %s%s", role, side.node_name, outcome.status,
                          f" — {outcome.reason}" if outcome.reason else "")

    def _pending_reason(self) -> str:
        stuck = [r for r in (SERVER, CLIENT) if r not in self.running]
        parts = []
        for role in stuck:
            side = self.by_role[role]
            if role not in self.pods:
                parts.append(f"the {role} pod on {side.node_name} was never created (the server pod had no IP yet)")
                continue
            message = _scheduling_message(self.last.get(role))
            waiting = _waiting_message(self.last.get(role))
            parts.append(f"the {role} pod on {side.node_name} was still Pending"
                         + (f" (last scheduler message: {message})" if message else "")
                         + (f" (container waiting: {waiting})" if waiting and not message else ""))
        return (f"both pods of a peer test must be Running within {self.s.pending_timeout_s} s: "
                + "; ".join(parts) + "; both pods deleted")

    def _end_all(self, status: str, reason: str) -> None:
        for role, side in self.by_role.items():
            if role not in self.ended:
                self.ended[role] = SideResult(side, results.PodOutcome(status, reason), self.pods.get(role))

    # ------------------------------------------------------------------ API calls
    def _read(self, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            response = self.core_v1.read_namespaced_pod(name, self.s.namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(response.data)

    def _delete(self, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core_v1.delete_namespaced_pod(name, self.s.namespace)
        except ApiException as exc:
            if exc.status != 404:
                self.log.warning("could not delete peer pod %s: %s", name, one_line(exc))
        except Exception as exc:  # noqa: BLE001 - best effort: the orphan reaper deletes it later
            self.log.warning("could not delete peer pod %s: %s", name, one_line(exc))

    def _log_tail(self, name: str) -> list[str]:
        try:
            response = self.core_v1.read_namespaced_pod_log(name, self.s.namespace, container="base",
                                                            tail_lines=LOG_TAIL_LINES, _preload_content=False)
            text = response.data.decode("utf-8", "replace")
        except Exception as exc:  # noqa: BLE001 - the termination message is the result; the log is a help
            self.log.warning("could not read the log of %s: %s", name, one_line(exc))
            return []
        for line in text.splitlines():
            self.log.info("[%s] %s", name, line)
        return text.splitlines()


def _scheduling_message(pod: Mapping[str, Any] | None) -> str:
    for condition in ((pod or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return results.clean_text(condition.get("message") or condition.get("reason") or "", results.MAX_REASON)
    return ""


def topology_labels(core_v1: Any, settings: Settings, names: list[str]) -> dict[str, dict[str, str]]:
    """The ``peer_topology_labels`` each of ``names`` carries (node -> {label: value}): one list of the
    GPU nodes (``node_selector``), from the watch cache, only those labels decoded."""
    from cluster_doctor.kube import listing

    wanted = set(names)
    if not wanted:
        return {}
    response = core_v1.list_node(label_selector=settings.node_selector or None, resource_version="0",
                                 _preload_content=False)
    items, _ = listing.decode("nodes", response.data, [0])
    out: dict[str, dict[str, str]] = {}
    for node in items:
        if node.name in wanted:
            out[node.name] = {k: str(v) for k in settings.peer_topology_labels if (v := node.label(k)) is not None}
    return out


def _waiting_message(pod: Mapping[str, Any] | None) -> str:
    """Why a bound pod's container has not started (ContainerCreating, ErrImagePull: its message)."""
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting:
            text = waiting.get("reason") or ""
            if waiting.get("message"):
                text += f": {waiting['message']}"
            return results.clean_text(text, results.MAX_REASON)
    return ""
