"""A node's life as transitions: quarantined, repaired, accepted, released, repeat offender,
each with its time and cause; and the rule that names a repeat offender. Pure Python; the store keeps them
(``cluster_doctor.store.transitions``), the quarantine task writes most of them (``kube.quarantine``).

A **repeat offender** is a node confirmed failing again within ``RepeatPolicy.days`` (default 30) after a
release, or quarantined ``RepeatPolicy.failures`` times (default 3) within that period, this time included:
its recommended action is ``replace`` (more severe than any action of an attempt: a person takes the node out
of the fleet for an RMA, not a reboot), and quarantine keeps it out until a person releases it (removes the
label ``cluster-doctor.io/health``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

QUARANTINED = "quarantined"
REPAIRED = "repaired"  # rebooted while quarantined (a new status.nodeInfo.bootID)
ACCEPTED = "accepted"  # passed the acceptance gate
RELEASED = "released"
REPEAT_OFFENDER = "repeat_offender"
GATED = "gated"  # new, rebooted or back from quarantine: the acceptance gate's taint
KINDS = (QUARANTINED, REPAIRED, ACCEPTED, RELEASED, REPEAT_OFFENDER, GATED)
# How a kind reads on the pages, in the CLI and the daily report.
SHOWN = {QUARANTINED: "quarantined", REPAIRED: "repaired", ACCEPTED: "accepted", RELEASED: "released",
         REPEAT_OFFENDER: "repeat offender", GATED: "gated"}
# The node-level action of a repeat offender: beyond domain.actions.ACTIONS (an attempt's), never an attempt's.
REPLACE = "replace"


@dataclasses.dataclass(frozen=True)
class Transition:
    """One step of a node's life: what (``kind``), when, why (``cause``, one line for people) and details."""

    node_name: str
    kind: str
    at: dt.datetime
    cause: str
    detail: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    run_id: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"transition kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.at.tzinfo is None:
            raise ValueError("a transition's time must be timezone-aware")

    def line(self) -> str:
        """'2026-11-28 10:04 UTC quarantined: gpu_health: gpu_count (drain_and_service)'"""
        return f"{self.at.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC {SHOWN[self.kind]}: {self.cause}"


class InvalidRepeatPolicy(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class RepeatPolicy:
    """Settings repeat_offender_days (0: no node is ever named) and repeat_offender_failures."""

    days: float = 30.0
    failures: int = 3

    def __post_init__(self) -> None:
        if isinstance(self.days, bool) or not isinstance(self.days, (int, float)) or self.days < 0:
            raise InvalidRepeatPolicy(f"repeat_offender_days: must be a number >= 0, got {self.days!r}")
        if isinstance(self.failures, bool) or not isinstance(self.failures, int) or self.failures < 2:
            raise InvalidRepeatPolicy(f"repeat_offender_failures: must be an integer >= 2, got {self.failures!r}")

    @classmethod
    def of(cls, settings: Any) -> RepeatPolicy:
        return cls(days=settings.repeat_offender_days, failures=settings.repeat_offender_failures)

    @property
    def window(self) -> dt.timedelta:
        return dt.timedelta(days=self.days)


def repeat_reason(past: Iterable[Transition], now: dt.datetime, policy: RepeatPolicy) -> str | None:
    """Why a node quarantined now (a new confirmed failure) is a repeat offender, from its past transitions;
    None when it is not one (or the policy names none)."""
    if policy.days <= 0:
        return None
    since = now - policy.window
    recent = [t for t in past if since <= t.at <= now]
    released = [t for t in recent if t.kind == RELEASED]
    quarantined = [t for t in recent if t.kind == QUARANTINED]
    if released:
        last = max(released, key=lambda t: t.at)
        return (f"confirmed failing again {_span(now - last.at)} after its release at "
                f"{last.at.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC (within {policy.days:g} days)")
    if len(quarantined) + 1 >= policy.failures:
        return f"quarantined {len(quarantined) + 1} times within {policy.days:g} days"
    return None


def _span(delta: dt.timedelta) -> str:
    hours = delta.total_seconds() / 3600
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} days"


@dataclasses.dataclass(frozen=True)
class RepeatOffender:
    """A repeat offender now: named at ``since`` for ``cause``; action replace until a person releases it."""

    node_name: str
    since: dt.datetime
    cause: str

    def describe(self) -> str:
        return (f"repeat offender since {self.since.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC ({self.cause}): "
                f"action {REPLACE}")


def open_offenders(transitions: Iterable[Transition]) -> dict[str, RepeatOffender]:
    """The nodes whose latest repeat-offender transition has no release after it."""
    latest: dict[str, Transition] = {}
    for t in sorted(transitions, key=lambda t: t.at):
        if t.kind in (REPEAT_OFFENDER, RELEASED):
            latest[t.node_name] = t
    return {n: RepeatOffender(n, t.at, t.cause) for n, t in latest.items() if t.kind == REPEAT_OFFENDER}


# ---------------------------------------------------------------------------- durations, for the metrics
@dataclasses.dataclass(frozen=True)
class Durations:
    """Seconds each finished quarantine lasted (quarantined → released) and from the repair to the release
    (the first reboot seen while quarantined → released), over the releases a window holds."""

    in_quarantine: tuple[float, ...] = ()
    repair_to_release: tuple[float, ...] = ()

    @staticmethod
    def quantiles(values: Sequence[float]) -> dict[str, float]:
        """{"0.5": median, "0.9": p90} (nearest rank), empty without values."""
        if not values:
            return {}
        ordered = sorted(values)
        return {"0.5": statistics.median(ordered), "0.9": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]}


def durations(transitions: Iterable[Transition], since: dt.datetime) -> Durations:
    """Per node, in time order: each release at or after ``since`` closes the quarantine before it (and its
    first repair, if one was seen)."""
    by_node: dict[str, list[Transition]] = {}
    for t in sorted(transitions, key=lambda t: t.at):
        by_node.setdefault(t.node_name, []).append(t)
    held: list[float] = []
    repaired: list[float] = []
    for steps in by_node.values():
        start = repair = None
        for t in steps:
            if t.kind == QUARANTINED and start is None:
                start, repair = t.at, None
            elif t.kind == REPAIRED and start is not None and repair is None:
                repair = t.at
            elif t.kind == RELEASED and start is not None:
                if t.at >= since:
                    held.append((t.at - start).total_seconds())
                    if repair is not None:
                        repaired.append((t.at - repair).total_seconds())
                start = repair = None
    return Durations(tuple(held), tuple(repaired))
