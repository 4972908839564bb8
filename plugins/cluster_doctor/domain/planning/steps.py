"""One node's suites in one run, one after another: the order they run in, when a step stops the rest,
when the next step's queue time starts, when the run is done with the node, and the pool weights of the
steps. Pure; the validate task group's steps (``cluster_doctor.airflow.operator``) and its last task
(``tasks.finish_node``) call it with the attempts of the steps before them, and the simulator calls the
same functions.

* A step whose node failed ``gpu_health`` stops the rest: not worth the long suites on a failing
  node, and the health failure is the finding.
* A step that did not execute its suite (a user pod claimed the node, the node went away or was
  cordoned, the pod never started, the decision was too old, the run was stopped) stops the rest
  with that cause: the next step would only hit the same wall, and a user job must win the node.
* After an executed step (pass; fail or error of another suite) the next one runs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Protocol

from cluster_doctor.domain.status import EXECUTED, Status

# Runs first in every bundle: seconds long, and a node failing it is not worth the long suites.
HEALTH_FIRST = "gpu_health"

STOPPED_BY = "stopped by"  # how a skipped step's reason starts when an earlier step stopped the bundle
NODE_TAKEN = "the node is no longer free"  # the pre-submit check's reason when a user pod holds the node


class Step(Protocol):
    """What these rules read of a step's attempt: an ``attempts.Attempt``, or the simulator's step."""

    @property
    def test_name(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def reason(self) -> str | None: ...

    @property
    def finished_at(self) -> dt.datetime | None: ...


def stop_cause(previous: Iterable[Step | None]) -> str | None:
    """Why the next step must not run, given the attempts of the steps before it (in order; None for a
    step that was not planned or never reported), or None when it may run."""
    for attempt in previous:
        if attempt is None:
            continue
        if attempt.status == Status.FAIL and attempt.test_name == HEALTH_FIRST:
            return f"{STOPPED_BY} {HEALTH_FIRST} failing on this node ({attempt.reason or 'no reason given'})"
        if attempt.status not in EXECUTED:
            reason = attempt.reason or attempt.status
            if reason.startswith(STOPPED_BY):
                return reason  # carried from the step that stopped the bundle
            return f"{STOPPED_BY} {attempt.test_name}: {attempt.status}, {reason}"
    return None


def stopped_by_health(reason: str | None) -> bool:
    """Whether a skipped step's reason says the node's failing ``gpu_health`` stopped it (``stop_cause``)."""
    return bool(reason) and reason.startswith(f"{STOPPED_BY} {HEALTH_FIRST} failing")


def ready_at(planned_at: dt.datetime, previous: Iterable[Step | None]) -> dt.datetime:
    """When the next step could have started: the end of the last step that ran, else the decision.
    Its queue time (waiting for a pool slot) counts from here, not from the decision: the steps before
    it were the node's own work."""
    ends = [a.finished_at for a in previous if a is not None and a.finished_at is not None]
    return max([planned_at, *ends])


def done_with_node(planned: Sequence[str], attempts: Iterable[Step | None]) -> bool:
    """Whether the run is done with the node: every planned suite executed, or the bundle was stopped by
    a failing health check or a user pod. False when a step only ran out of time or queue (a reserved
    node keeps its reservation for the next run, within its maximum hold)."""
    by_test = {a.test_name: a for a in attempts if a is not None}
    for test in planned:
        attempt = by_test.get(test)
        if attempt is None:
            return False
        if attempt.status == Status.FAIL and test == HEALTH_FIRST:
            return True
        if attempt.status in EXECUTED:
            continue
        # the first step that did not run says why: a user won the node, or time ran out
        return attempt.status == Status.PREEMPTED or (attempt.reason or "").startswith(NODE_TAKEN)
    return True


def bundle_order(tests: Sequence[str]) -> list[str]:
    """The order a node's suites run in, one after another: health first, then the given order."""
    tests = list(dict.fromkeys(tests))
    return ([HEALTH_FIRST] if HEALTH_FIRST in tests else []) + [t for t in tests if t != HEALTH_FIRST]


@dataclasses.dataclass(frozen=True)
class PoolWeights:
    """The Airflow ``priority_weight`` (absolute) of every task that takes a pool slot: a sweep step below
    every step of a due bundle, so sweeps use the pool after the bundles; within each, a node's later steps
    above other nodes' first ones (a node that is free now finishes first); a peer test as a bundle's first
    step."""

    validate: tuple[int, ...]
    sweep: tuple[int, ...]
    peer: int


def pool_weights(steps: Sequence[str], sweep_steps: Sequence[str]) -> PoolWeights:
    """The weights of the validate group's ``steps`` and the sweep group's ``sweep_steps``, in their order."""
    below = len(sweep_steps)
    return PoolWeights(validate=tuple(below + 1 + i for i in range(len(steps))),
                       sweep=tuple(1 + i for i in range(below)), peer=below + 1)
