"""Peer tests: one suite run BETWEEN two free nodes, a server pod on one and a client pod
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

Each pod goes through the same lifecycle as a single-node validation's (``kube.pod_lifecycle``: the
free-node check, the node watch while it waits, the verdict from its final state, deletion).

**Both run or neither does.** Without gang scheduling the launcher enforces it itself:

* before any pod, both nodes must still be free (``pod_lifecycle.ensure_free``), else both
  ``skipped``, no pod;
* both pods must be Running within the pending timeout (counted from the server's creation), else
  both are deleted and both recorded ``timeout`` with the cause (the stuck side's scheduler message,
  or its container's waiting reason once bound);
* while either pod exists, every availability interval, both nodes' pods are listed: a user pod
  claiming either node stops both, recorded ``preempted`` naming the claiming pod; a node that turns
  not ready / cordoned / tainted while a pod waits stops both (``skipped``);
* one side ending (or vanishing: preempted, evicted) stops the other: at once if the other has not
  started, else after ``PEER_GRACE_S`` to end on its own;
* a ``finally`` deletes both pods on every path (an exception, a killed task: ``stop()``).

**Who made a pod.** Each pod carries the labels of the try that created it (``owner_labels``: the same
``dag_id``, ``task_id``, ``map_index``, ``try_number`` the provider gives a validation task's pod): when a
deletion fails (the API away, refused, throttled) or the task dies, the next run's reaper
(``kube.orphans``) knows whose pod it is, records its side's result once if that try did not, and deletes it.

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
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from cluster_doctor.domain import results
from cluster_doctor.domain.attempts import ORCHESTRATION
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.nodes import validate_node_name
from cluster_doctor.domain.status import Status
from cluster_doctor.kube import pod_lifecycle as lifecycle
from cluster_doctor.kube import api_errors, podspec, retry
from cluster_doctor.kube.api import CoreV1

log = logging.getLogger(__name__)

TEST = "fabric_peer"
SERVER, CLIENT = "server", "client"
DEFAULT_PORT = 29500
POLL_S = 1.0
PEER_GRACE_S = 30  # after one side ended, how long the other may take to end on its own
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
    node_gpus: int | None = None  # the GPUs the node has (capacity / GFD label): the suite's bar

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


def sides(server: str, client: str, gpus: Mapping[str, tuple]) -> tuple[Side, Side]:
    """The two sides of a match; ``gpus``: node -> (gpu_count, gpu_model[, the GPUs the node has])."""
    def side(node: str, role: str, peer: str) -> Side:
        count, model, *has = gpus[node]
        return Side(node, count, model, role=role, peer=peer, node_gpus=has[0] if has else None)

    return side(server, SERVER, client), side(client, CLIENT, server)


def gang_scheduler(core_v1: CoreV1) -> str | None:
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


def owner_labels(*, dag_id: str, task_id: str, map_index: int, try_number: int) -> dict[str, str]:
    """The labels naming the try that creates a peer pod (what the reaper reads: ``orphans.owner_of``)."""
    return {"dag_id": podspec.label_value(dag_id), "task_id": podspec.label_value(task_id),
            "map_index": str(map_index), "try_number": str(try_number)}


def build_peer_pod(settings: Settings, side: Side, *, run_id: str, configmap: str, suite_version: str,
                   suite_files: list[str] | None, address: str | None, port: int = DEFAULT_PORT,
                   timeout_s: int | None = None, owner: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The validation pod of one side (``podspec.build_pod``) with the peer labels and environment; a
    generated name (``cv-fabric-peer-<node>-<random>``). ``owner``: ``owner_labels`` of the creating try."""
    pod = podspec.build_pod(settings, node_name=side.node_name, test_name=TEST, gpu_count=side.gpu_count,
                            gpu_model=side.gpu_model, run_id=run_id, configmap=configmap,
                            suite_version=suite_version, suite_files=suite_files, node_gpus=side.node_gpus)
    meta = pod["metadata"]
    meta["generateName"] = meta.pop("name")[:57] + "-"
    meta["labels"].update({**(owner or {}), PEER_LABEL: podspec.label_value(side.peer), ROLE_LABEL: side.role})
    meta["annotations"][PEER_LABEL] = side.peer
    container = next(c for c in pod["spec"]["containers"] if c.get("name") == "base")
    wait = timeout_s if timeout_s is not None else settings.pending_timeout_s
    env = {e["name"]: e for e in container.get("env") or []}
    for name, value in peer_env(side, address=address, port=port, timeout_s=wait).items():
        env[name] = {"name": name, "value": value}
    container["env"] = list(env.values())
    return pod


class PeerLauncher:
    """Runs one peer test to its end, synchronously: ``run()`` returns both sides' outcomes and never
    leaves a pod behind. Each side's pod goes through ``kube.pod_lifecycle`` (a ``PodRun``: submit,
    observe until it ends, collect its result), both nodes on one ``NodeWatch``; a rule of the module
    doc that stops the test raises ``pod_lifecycle.Ended``. ``core_v1``: a kubernetes CoreV1Api (retried:
    ``kube.retry``)."""

    def __init__(self, core_v1: CoreV1, settings: Settings, server: Side, client: Side, *, run_id: str,
                 configmap: str, suite_version: str, suite_files: list[str] | None = None,
                 port: int = DEFAULT_PORT, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, poll_s: float = POLL_S, logger: Any = None,
                 owner: Mapping[str, str] | None = None):
        if server.role != SERVER or client.role != CLIENT or server.peer != client.node_name:
            raise ValueError("a peer test needs a server and a client naming each other")
        self.core_v1, self.s, self.run_id = core_v1, settings, run_id
        self.by_role = {SERVER: server, CLIENT: client}
        self.pod_args = dict(configmap=configmap, suite_version=suite_version, suite_files=suite_files, port=port,
                             owner=owner)
        self.clock, self.sleep, self.poll_s = clock, sleep, poll_s
        self.log = logger or log
        self.runs = {role: lifecycle.PodRun(core_v1, settings, node_name=side.node_name, test_name=TEST,
                                            logger=self.log) for role, side in self.by_role.items()}
        self.ended: dict[str, SideResult] = {}

    @property
    def pods(self) -> dict[str, str]:
        """role -> the name of its pod, for the sides whose pod was created."""
        return {role: run.name for role, run in self.runs.items() if run.name is not None}

    @property
    def last(self) -> dict[str, dict[str, Any]]:
        """role -> its pod as last read."""
        return {role: run.last for role, run in self.runs.items() if run.last is not None}

    @property
    def running(self) -> set[str]:
        """The roles whose pod reached Running (or ended)."""
        return {role for role, run in self.runs.items() if run.reached_running}

    # ------------------------------------------------------------------ the whole test
    def run(self) -> PeerResult:
        gang = gang_scheduler(self.core_v1)
        if gang:
            self.log.info("the cluster serves %s gang scheduling; not used by peer tests (the IP rendezvous "
                          "needs the server scheduled first): both-or-neither is enforced here", gang)
        try:
            for side in self.by_role.values():
                lifecycle.ensure_free(self.core_v1, side.node_name, self.s, name_node=True)
            self._create(SERVER, address=None)
            self._watch()
        except lifecycle.Ended as stop:
            self._end_all(stop.status, stop.reason)
        except Exception as exc:  # noqa: BLE001 - recorded for both sides; the pods go in the finally
            self.log.error("peer test %s ↔ %s: orchestration error: %s", self.by_role[SERVER].node_name,
                           self.by_role[CLIENT].node_name, api_errors.describe(exc))
            # an orchestration failure says nothing about the nodes (domain.status): never error, even when
            # both sides were running; the pair stays due
            self._end_all(Status.SKIPPED, f"{ORCHESTRATION}: {api_errors.describe(exc)}")
        finally:
            self.stop()
        return PeerResult(server=self.ended[SERVER], client=self.ended[CLIENT], gang=gang)

    def stop(self) -> None:
        """Delete both pods and wait a little for them to go (every path ends here; safe to call twice,
        from another thread too; never raises)."""
        lifecycle.delete_and_wait(self.core_v1, self.s.namespace, self.pods.values(), clock=self.clock,
                                  sleep=self.sleep, poll_s=self.poll_s, logger=self.log)

    # ------------------------------------------------------------------ steps
    def _create(self, role: str, *, address: str | None) -> None:
        side = self.by_role[role]
        pod = build_peer_pod(self.s, side, run_id=self.run_id, address=address, **self.pod_args)
        name = self.runs[role].submit(pod)
        self.log.info("%s pod %s created on %s%s", role, name, side.node_name,
                      f" (server at {address})" if address else "")

    def _watch(self) -> None:
        """Until both sides ended: observe both pods, create the client once the server pod has an IP,
        and stop both by the rules of the module doc (each raises ``Ended``)."""
        start = self.clock()
        watch = lifecycle.NodeWatch(self.core_v1, self.s, start=start, logger=self.log)
        run_deadline = start + self.s.pod_deadline_s(TEST) + self.s.task_margin_s
        first_end: float | None = None
        while True:
            now = self.clock()
            self._observe()
            if set(self.ended) == {SERVER, CLIENT}:
                return
            if self._start_client():
                continue
            if self.ended:
                first_end = first_end if first_end is not None else now
                self._stop_after_first_end(now - first_end)
            both_running = self.running >= {SERVER, CLIENT}
            if not both_running and not self.ended and watch.pending_expired(now):
                raise lifecycle.Ended(Status.TIMEOUT, self._pending_reason())
            if now >= run_deadline:
                budget = self.s.pod_deadline_s(TEST)
                raise lifecycle.Ended(Status.ERROR, f"the peer test outlived its budget of {budget} s; pods deleted")
            self._check_nodes(watch, now)
            self.sleep(self.poll_s)

    def _observe(self) -> None:
        """Read each live side's pod once; a side that ended (judged from its final state) or vanished
        is ended."""
        for role, run in self.runs.items():
            if run.name is None or role in self.ended:
                continue
            outcome = run.observe()
            if outcome is not None:
                self.ended[role] = SideResult(self.by_role[role], outcome, run.name)
                self.log.info("%s side on %s ended: %s%s", role, run.node_name, outcome.status,
                              f" — {outcome.reason}" if outcome.reason else "")

    def _start_client(self) -> bool:
        """The rendezvous: the client pod is created once the server pod has an IP."""
        server = self.runs[SERVER]
        if self.runs[CLIENT].name is not None or SERVER in self.ended or server.last is None:
            return False
        ip = (server.last.get("status") or {}).get("podIP")
        if ip:
            self._create(CLIENT, address=ip)
        return bool(ip)

    def _stop_after_first_end(self, since_first_end: float) -> None:
        """One side ended (or vanished): the other stops, at once unless both were running (then it gets
        ``PEER_GRACE_S`` to end on its own)."""
        gone = next(iter(self.ended.values()))
        said = f"{gone.side.node_name}'s side ended first ({gone.outcome.status}: {gone.outcome.reason})"
        if gone.outcome.status == Status.PREEMPTED:
            raise lifecycle.Ended(Status.PREEMPTED, f"its peer {said}; both pods deleted")
        if self.runs[CLIENT].name is None or any(r not in self.ended and not run.reached_running
                                                 for r, run in self.runs.items()):
            raise lifecycle.Ended(Status.SKIPPED, f"its peer {said} before this side started; pod deleted")
        if since_first_end >= PEER_GRACE_S:
            raise lifecycle.Ended(Status.ERROR, f"stopped {PEER_GRACE_S} s after its peer {said}; pod deleted")

    def _check_nodes(self, watch: lifecycle.NodeWatch, now: float) -> None:
        """The node re-checks due now (``NodeWatch``): a waiting side's node going away stops both
        (``skipped``), a user pod claiming either node stops both (``preempted``)."""
        live = {role: run for role, run in self.runs.items() if run.name is not None and role not in self.ended}
        watched = watch.poll(now, waiting={run.node_name: run.name for run in live.values() if not run.reached_running},
                             live={run.node_name: run.name for run in live.values()})
        if watched is not None and watched.problem is not None:
            raise lifecycle.Ended(Status.SKIPPED, f"{watched.node_name}: {watched.problem.describe()} while the peer "
                                                  "test waited; both pods deleted")
        if watched is not None:
            raise lifecycle.Ended(Status.PREEMPTED, f"a user pod claimed {watched.node_name} ({watched.claimed_by}): "
                                                    "both sides of the peer test stopped; pods deleted")

    def _pending_reason(self) -> str:
        parts = []
        for role, run in self.runs.items():
            if run.reached_running:
                continue
            if run.name is None:
                parts.append(f"the {role} pod on {run.node_name} was never created (the server pod had no IP yet)")
                continue
            message = lifecycle.scheduling_message(run.last)
            waiting = lifecycle.waiting_message(run.last)
            parts.append(f"the {role} pod on {run.node_name} was still Pending"
                         + (f" (last scheduler message: {message})" if message else "")
                         + (f" (container waiting: {waiting})" if waiting and not message else ""))
        return (f"both pods of a peer test must be Running within {self.s.pending_timeout_s} s: "
                + "; ".join(parts) + "; both pods deleted")

    def _end_all(self, status: Status, reason: str) -> None:
        for role, side in self.by_role.items():
            if role not in self.ended:
                self.ended[role] = SideResult(side, results.PodOutcome(status, reason), self.runs[role].name)


def topology_labels(core_v1: CoreV1, settings: Settings, names: list[str]) -> dict[str, dict[str, str]]:
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
