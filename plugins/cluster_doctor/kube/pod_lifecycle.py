"""The one lifecycle of a validation pod, in named phases, for every pod Cluster Doctor runs.

    ensure_free → submit → wait scheduled (NodeWatch: the node, a user pod claiming it, the pending
    timeout) → wait running → collect the result (read the final state, classify it) → delete and
    wait until gone

An attempt that ends before (or instead of) a suite result raises ``Ended`` with its status and reason.

Two launchers go through it. The validation operator (``airflow/operator.py``) is the provider's
KubernetesPodOperator: the provider's PodManager submits, waits for, streams and deletes its pod, and
the operator adds the phases here through the provider's hooks (``ensure_free`` before the provider
creates the pod, a ``NodeWatch`` beside its wait for the start, ``collect`` on the final state). The
peer launcher (``kube/peers.py``) drives its two pods through every phase with ``PodRun``. No Airflow
here (the layer contract): the API client comes in as an argument.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cluster_doctor.domain import results
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.status import Status
from cluster_doctor.kube import api_errors, guards
from cluster_doctor.kube.api import CoreV1

log = logging.getLogger(__name__)

# While our pod waits, its node is read this often (capped by availability_check_s): a node that turns
# NotReady, is cordoned or gains a taint we do not tolerate ends the wait within seconds.
NODE_CHECK_S = 5
LOG_TAIL_LINES = 200  # the end of the suite's log the verdict may quote
GONE_WAIT_S = 30  # how long delete_and_wait waits for deleted pods to go
BASE_CONTAINER = "base"
PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"
TERMINAL = (SUCCEEDED, FAILED)


class Ended(Exception):
    """The attempt ended with ``status`` before (or instead of) a suite result, for ``reason``."""

    def __init__(self, status: Status | str, reason: str):
        super().__init__(reason)
        self.status, self.reason = Status.parse(status), reason


# ---------------------------------------------------------------------------- before submit
def ensure_free(core_v1: CoreV1, node_name: str, settings: Settings, *, name_node: bool = False) -> None:
    """The node can still take our pod (one GET of the node, one list of its pods: ``kube.guards``),
    else ``Ended(skipped)`` with the cause; ``name_node``: the reason names the node (a peer test has
    two), else it says "the node"."""
    problem = guards.node_problem(core_v1, node_name, settings.tolerations)
    if problem:
        named = f"{node_name}: " if name_node else ""
        raise Ended(Status.SKIPPED, f"{named}{problem.describe()} since planning; no pod created")
    holders = guards.gpu_holders(core_v1, node_name, settings.gpu_resource)
    if holders:
        subject = node_name if name_node else "the node"
        raise Ended(Status.SKIPPED, f"{subject} is no longer free ({holders[0]}); no pod created")


# ---------------------------------------------------------------------------- wait scheduled
@dataclasses.dataclass(frozen=True)
class Watched:
    """Why a waiting pod should not start after all: its node's problem, or the user pod that claimed it."""

    node_name: str
    problem: guards.NodeProblem | None = None
    claimed_by: str | None = None


class NodeWatch:
    """The re-checks while our pods wait, on one schedule from ``start`` (the first pod's creation):

    - every ``NODE_CHECK_S`` (capped by availability_check_s), the node of each pod still waiting to
      start: not ready, cordoned, an untolerated NoSchedule/NoExecute taint, deleted (the scheduler
      would keep our pod Pending there for the whole pending window, holding a pool slot);
    - every availability interval, the pods of each node we hold a pod on: a user pod claiming it;
    - the pending window, counted from ``start`` (the provider's own timeouts restart when the pod is
      bound; this one does not).

    ``poll`` makes the calls that are due; an API error is the caller's (the check runs again)."""

    def __init__(self, core_v1: CoreV1, settings: Settings, *, start: float, logger: Any = None):
        self.core_v1, self.s, self.start = core_v1, settings, start
        self.log = logger or log
        self.node_every = min(NODE_CHECK_S, settings.availability_check_s)
        self.next_node = start + self.node_every
        self.next_claim = start + settings.availability_check_s

    @property
    def tick_s(self) -> float:
        """How often a caller should poll: often enough for the node checks, at least every second."""
        return min(1.0, self.node_every)

    def pending_expired(self, now: float) -> bool:
        return now - self.start >= self.s.pending_timeout_s

    def poll(self, now: float, *, waiting: Mapping[str, str], live: Mapping[str, str]) -> Watched | None:
        """The checks due at ``now``. ``waiting``: node -> our pod not started yet (its node is read);
        ``live``: node -> our pod that exists (that node's pods are listed, ours left out)."""
        if now >= self.next_node:
            for node in waiting:
                problem = guards.node_problem(self.core_v1, node, self.s.tolerations)
                if problem:
                    return Watched(node, problem=problem)
            self.next_node = now + self.node_every
        if now >= self.next_claim:
            for node, pod_name in live.items():
                holders = guards.gpu_holders(self.core_v1, node, self.s.gpu_resource, exclude_pod=pod_name)
                if holders:
                    return Watched(node, claimed_by=holders[0])
                if node in waiting:
                    self.log.info("Still Pending after %.0f s; %s is still free of other GPU pods",
                                  now - self.start, node)
            self.next_claim = now + self.s.availability_check_s
        return None


# ---------------------------------------------------------------------------- wait running
def phase(pod: Mapping[str, Any] | None) -> str | None:
    return ((pod or {}).get("status") or {}).get("phase")


def scheduling_message(pod: Mapping[str, Any] | None) -> str:
    """Why the scheduler has not bound the pod (its PodScheduled=False condition), or ""."""
    for condition in ((pod or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            text = condition.get("message") or condition.get("reason") or ""
            return results.clean_text(text, results.MAX_REASON)
    return ""


def waiting_message(pod: Mapping[str, Any] | None) -> str:
    """Why a bound pod's container has not started (ContainerCreating, ErrImagePull: its message)."""
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting:
            text = waiting.get("reason") or ""
            if waiting.get("message"):
                text += f": {waiting['message']}"
            return results.clean_text(text, results.MAX_REASON)
    return ""


# ---------------------------------------------------------------------------- collect the result
def collect(pod: Mapping[str, Any] | None, settings: Settings, *, node_name: str, test_name: str,
            log_tail: Iterable[str] = (), now: dt.datetime | None = None) -> results.PodOutcome:
    """The verdict from the pod's final state (its termination message, exit code and conditions), as
    of ``now`` (the clock's): ``domain.results.classify`` within the suite's run budget. None: the pod
    was gone."""
    return results.classify(pod, node_name=node_name, test_name=test_name, log_tail=list(log_tail),
                            run_budget_s=settings.suite_timeout(test_name), now=now or dt.datetime.now(dt.UTC))


def vanished(*, reached_running: bool, while_pending: str = " (preempted or deleted)") -> results.PodOutcome:
    """Our pod disappeared: preempted, evicted or deleted. ``while_pending``: what is known of a
    removal before the suite ran (the Preempted event, say)."""
    if reached_running:
        return results.PodOutcome(Status.PREEMPTED,
                                  "the pod disappeared while running (deleted or preempted)")
    return results.PodOutcome(Status.PREEMPTED, "the pod was removed while Pending" + while_pending)


# ---------------------------------------------------------------------------- API calls of each phase
def submit(core_v1: CoreV1, namespace: str, body: Mapping[str, Any]) -> str:
    """Create the pod; its name (the server completes a generateName)."""
    return core_v1.create_namespaced_pod(namespace, body).metadata.name


def read_pod(core_v1: CoreV1, namespace: str, name: str) -> dict[str, Any] | None:
    """The pod as the API serves it now (plain JSON), or None when it is gone (404)."""
    from kubernetes.client.exceptions import ApiException

    try:
        response = core_v1.read_namespaced_pod(name, namespace, _preload_content=False)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return json.loads(response.data)


def read_log_tail(core_v1: CoreV1, namespace: str, name: str, logger: Any = None) -> list[str]:
    """The last ``LOG_TAIL_LINES`` of the suite's container, each also logged; [] when unreadable (the
    termination message is the result, the log only a help)."""
    logger = logger or log
    try:
        response = core_v1.read_namespaced_pod_log(name, namespace, container=BASE_CONTAINER,
                                                   tail_lines=LOG_TAIL_LINES, _preload_content=False)
        text = response.data.decode("utf-8", "replace")
    except Exception as exc:  # noqa: BLE001
        logger.warning("could not read the log of %s: %s", name, api_errors.describe(exc))
        return []
    for line in text.splitlines():
        logger.info("[%s] %s", name, line)
    return text.splitlines()


def delete(core_v1: CoreV1, namespace: str, name: str, logger: Any = None) -> None:
    """Delete the pod; gone already is fine, any other failure is logged (the orphan reaper deletes it
    later)."""
    from kubernetes.client.exceptions import ApiException

    try:
        core_v1.delete_namespaced_pod(name, namespace)
    except ApiException as exc:
        if exc.status != 404:
            (logger or log).warning("could not delete pod %s: %s", name, api_errors.describe(exc))
    except Exception as exc:  # noqa: BLE001 - best effort
        (logger or log).warning("could not delete pod %s: %s", name, api_errors.describe(exc))


def delete_and_wait(core_v1: CoreV1, namespace: str, names: Iterable[str], *, clock: Callable[[], float],
                    sleep: Callable[[float], None], poll_s: float, logger: Any = None) -> None:
    """Delete the pods, then wait up to ``GONE_WAIT_S`` for them to go. Never raises: it runs in a
    ``finally`` (the pods are deleted already when only the wait fails)."""
    names = list(names)
    for name in names:
        delete(core_v1, namespace, name, logger)
    end = clock() + GONE_WAIT_S
    try:
        while any(read_pod(core_v1, namespace, name) is not None for name in names) and clock() < end:
            sleep(min(poll_s, 0.5))
    except Exception as exc:  # noqa: BLE001
        (logger or log).warning("could not confirm the pods are gone: %s", api_errors.describe(exc))


# ---------------------------------------------------------------------------- one pod, every phase
class PodRun:
    """One pod driven through the phases by its caller's loop: ``submit``, then ``observe`` until it
    returns the outcome (the pod ended and was judged, or vanished); deletion is the caller's
    (``delete_and_wait``, once for all its pods)."""

    def __init__(self, core_v1: CoreV1, settings: Settings, *, node_name: str, test_name: str,
                 logger: Any = None):
        self.core_v1, self.s, self.node_name, self.test_name = core_v1, settings, node_name, test_name
        self.log = logger or log
        self.name: str | None = None
        self.last: dict[str, Any] | None = None  # the pod as last read
        self.reached_running = False
        self.outcome: results.PodOutcome | None = None

    def submit(self, body: Mapping[str, Any]) -> str:
        self.name = submit(self.core_v1, self.s.namespace, body)
        return self.name

    @property
    def waiting(self) -> bool:
        """Created, and neither started nor ended."""
        return self.name is not None and not self.reached_running and self.outcome is None

    def observe(self) -> results.PodOutcome | None:
        """Read the pod once: Running, ended (judged now, from its final state, before any deletion),
        or vanished. The outcome once it ended, else None."""
        if self.outcome is not None or self.name is None:
            return self.outcome
        pod = read_pod(self.core_v1, self.s.namespace, self.name)
        if pod is None:
            self.outcome = vanished(reached_running=self.reached_running)
            return self.outcome
        self.last = pod
        if phase(pod) == RUNNING:
            self.reached_running = True
        elif phase(pod) in TERMINAL:
            self.reached_running = True
            tail = read_log_tail(self.core_v1, self.s.namespace, self.name, self.log)
            self.outcome = collect(pod, self.s, node_name=self.node_name, test_name=self.test_name, log_tail=tail)
        return self.outcome
