"""Reservation of overdue nodes, the policy: which busy GPU nodes get our NoSchedule taint
so that no new user pod lands when their current job ends, how many at once, for how long, and the
circuit breaker. Pure: ``cluster_doctor.kube.reservation`` acts on it, ``cluster_doctor.simulator``
models it with the same functions.

A node is reserved when it is busy (a user pod holds its GPUs; never a cordoned, not-ready or
quarantined node), has a pair the prioritizer calls due, and its oldest enabled pair (never validated
counts as infinitely old) will be older than the target within ``lead_hours``. The lead must cover the
longest user job (the job keeps running: NoSchedule only stops new pods) plus the wait for the next
run and the bundle's own duration. The node is freed of the taint when its validation ends (pass or
fail), when ``max_hold_hours`` have passed (even if the job never ended), or when it is no longer
overdue (validated by another run). At most ``limit()`` nodes are reserved at once (stalest first);
when more than ``breaker_share`` of the GPU nodes are overdue at once, the breaker opens: nothing new
is reserved and the run fails — validation itself is probably broken (image, scheduling), and
reserving would only idle the fleet.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, ClassVar, Protocol

from pydantic import BeforeValidator

from cluster_doctor.domain.policy import Policy, count, flag, positive, share
from cluster_doctor.domain.status import PairState

DOMAIN = "cluster-doctor.io"
KEY = f"{DOMAIN}/reserved"
TAINT = {"key": KEY, "value": "validation", "effect": "NoSchedule"}
TOLERATION = {"key": KEY, "operator": "Exists", "effect": "NoSchedule"}
ANN_SINCE = f"{DOMAIN}/reserved-at"  # when the taint was applied: the hold is counted from it
ANN_RUN = f"{DOMAIN}/reserved-by"  # the run that applied it, for people reading the node

# why a reservation ended (a row of node_reservations, a log line, the metric's label)
VALIDATED, MAX_HOLD, NOT_OVERDUE, NOT_ELIGIBLE = "validated", "max hold", "no longer overdue", "not eligible"


class InvalidReservationPolicy(ValueError):
    pass


def _optional_positive(value: Any) -> Any:
    return None if value is None else positive(value)


class ReservationPolicy(Policy):
    setting: ClassVar[str] = "reservation"
    error: ClassVar[type[ValueError]] = InvalidReservationPolicy

    enabled: Annotated[bool, BeforeValidator(flag)] = False
    dry_run: Annotated[bool, BeforeValidator(flag)] = False
    # the promise; None: the staleness threshold (staleness_days)
    target_days: Annotated[float | None, BeforeValidator(_optional_positive)] = None
    # reserve this long before the target: the longest job + a run + a bundle
    lead_hours: Annotated[float, BeforeValidator(positive)] = 30.0
    max_nodes: Annotated[int, BeforeValidator(count)] = 200  # reserved at once, at most
    max_share: Annotated[float, BeforeValidator(share)] = 0.2  # of the GPU nodes reserved at once, at most
    max_hold_hours: Annotated[float, BeforeValidator(positive)] = 36.0  # then the taint goes, even if the node never freed
    # more overdue busy nodes than this share: reserve none, fail the run
    breaker_share: Annotated[float, BeforeValidator(share)] = 0.3

    def limit(self, gpu_nodes: int) -> int:
        """How many nodes may be reserved at once."""
        return max(1, min(self.max_nodes, math.floor(self.max_share * gpu_nodes)))

    def breaker_limit(self, gpu_nodes: int) -> int:
        return max(1, math.floor(self.breaker_share * gpu_nodes))

    def target(self, staleness: dt.timedelta) -> dt.timedelta:
        return dt.timedelta(days=self.target_days) if self.target_days is not None else staleness

    def reserve_after(self, staleness: dt.timedelta) -> dt.timedelta:
        """The age of a node's oldest pair from which a busy node with a due pair is reserved."""
        return max(self.target(staleness) - dt.timedelta(hours=self.lead_hours), dt.timedelta(0))

    def max_hold(self) -> dt.timedelta:
        return dt.timedelta(hours=self.max_hold_hours)


@dataclasses.dataclass(frozen=True)
class Overdue:
    """A busy node that will exceed its target soon: a reservation candidate."""

    node_name: str
    oldest: dt.datetime | None  # its oldest enabled pair's last executed result; None: a pair never ran

    def sort_key(self) -> tuple:
        return (self.oldest is not None, self.oldest or dt.datetime.min.replace(tzinfo=dt.UTC), self.node_name)


class DueRule(Protocol):
    """The planner's due rule (``planning.due.Policy``): a node with no due pair is never reserved."""

    @property
    def staleness(self) -> dt.timedelta: ...

    def why_due(self, state: PairState | None, now: dt.datetime) -> str | None: ...


def overdue(
    busy_nodes: Iterable[str],
    tests: Sequence[str],
    latest: Mapping[tuple[str, str], PairState],
    *,
    now: dt.datetime,
    due_policy: DueRule,
    policy: ReservationPolicy,
) -> list[Overdue]:
    """The busy nodes that may be reserved: a pair is due (the prioritizer's rule: never a node that is
    not overdue) and the oldest pair reaches the target within the lead. Stalest first."""
    after = policy.reserve_after(due_policy.staleness)
    found = []
    for node in dict.fromkeys(busy_nodes):
        states = [latest.get((node, t)) for t in tests]
        if not any(due_policy.why_due(s, now) for s in states):
            continue
        executed = [s.finished_at for s in states if s is not None and s.finished_at is not None]
        oldest = min(executed) if len(executed) == len(states) else None
        if oldest is None or now - oldest >= after:
            found.append(Overdue(node, oldest))
    return sorted(found, key=Overdue.sort_key)


@dataclasses.dataclass(frozen=True)
class Choice:
    reserve: list[Overdue]  # to taint now, stalest first
    waiting: list[Overdue]  # overdue but over the limit: next run
    breaker_open: bool = False
    breaker_reason: str | None = None


def choose(candidates: Sequence[Overdue], *, reserved: int, overdue_reserved: int, gpu_nodes: int,
           policy: ReservationPolicy) -> Choice:
    """Which ``candidates`` (overdue busy nodes not yet reserved) to reserve now, with ``reserved`` nodes
    reserved already (``overdue_reserved`` of them still overdue)."""
    overdue_now = len(candidates) + overdue_reserved
    if candidates and overdue_now > policy.breaker_limit(gpu_nodes):
        return Choice([], list(candidates), True, (
            f"{overdue_now} busy node(s) are overdue at once, more than {policy.breaker_share:.0%} of {gpu_nodes} GPU "
            f"nodes ({policy.breaker_limit(gpu_nodes)}): reserved none of them. So many overdue nodes point at "
            "validation itself failing (image, scheduling, the pool), not at busy nodes: a human decides"))
    room = max(0, policy.limit(gpu_nodes) - reserved)
    return Choice(list(candidates[:room]), list(candidates[room:]))


def idle_gpu_hours(gpu_count: int, free_since: dt.datetime | None, released_at: dt.datetime) -> float:
    """What a reservation cost: the GPU-hours its node stood idle while tainted (from when it was first
    seen free, or the last time it was seen busy, to the taint's removal)."""
    if free_since is None or released_at <= free_since:
        return 0.0
    return gpu_count * (released_at - free_since).total_seconds() / 3600
