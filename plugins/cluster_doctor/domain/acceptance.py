"""The acceptance gate, the policy (opt-in): a node first seen, rebooted, or back from our
quarantine gets its whole bundle before users do. Pure: ``cluster_doctor.kube.acceptance`` acts on it,
``cluster_doctor.simulator`` models it.

A gated node carries a NoSchedule taint (``taint_key``: ours by default, or one the provisioning already
puts on nodes at join time, so no user pod lands in the minutes before the first read) that the validation
pods tolerate. It is **accepted** (the taint removed) when every enabled suite passed since it was gated; a
failure keeps it out (the quarantine policy takes it from there, a person or a later pass releases it); a
node no validation answered within ``max_hold_hours`` (no pool slot, a suite that never ran) is let go and
reported, never held forever. At most ``max_nodes`` are gated at once; when more than ``breaker_nodes``
nodes ask for the gate in one read (a fleet-wide driver rollout reboots hundreds), the breaker opens: none
of them is gated, and the read says so — holding half a fleet for validation would be an outage of its own.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from cluster_doctor.domain.status import PairState, Status

DOMAIN = "cluster-doctor.io"
KEY = f"{DOMAIN}/acceptance"
VALUE = "validation"
ANN_SINCE = f"{DOMAIN}/gated-at"  # when the gate closed: the passes that open it are counted from it
ANN_WHY = f"{DOMAIN}/gated-for"  # new | reboot | uncordoned | taint (put on by the provisioning)
CHANGES = ("new", "reboot", "uncordoned")  # what the inventory reports (domain.signals.NODE_CHANGES)
PROVISIONED = "taint"  # the node carried the taint key before we gated it

# how a gate ends
PASSED, FAILED, WAITING, MAX_HOLD = "passed", "failed", "waiting", "max hold"

# a label or taint key: an optional DNS-subdomain prefix and a name (Kubernetes' qualified name)
_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class InvalidAcceptancePolicy(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class AcceptancePolicy:
    enabled: bool = False
    dry_run: bool = False
    taint_key: str = KEY  # ours, or the provisioning's startup taint
    changes: tuple[str, ...] = CHANGES  # which node changes close the gate
    max_nodes: int = 50  # gated at once, at most
    max_hold_hours: float = 12.0  # then a node no validation answered is let go and reported
    breaker_nodes: int = 20  # more nodes than this asking for the gate in one read: gate none of them

    def __post_init__(self) -> None:
        for name in ("enabled", "dry_run"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidAcceptancePolicy(f"acceptance.{name}: expected true or false, got {getattr(self, name)!r}")
        if not isinstance(self.taint_key, str) or len(self.taint_key) > 316 or not _QUALIFIED.match(self.taint_key):
            raise InvalidAcceptancePolicy(f"acceptance.taint_key: not a Kubernetes taint key: {self.taint_key!r}")
        changes = self.changes
        if isinstance(changes, str) or not isinstance(changes, Sequence) or \
                any(c not in CHANGES for c in changes):
            raise InvalidAcceptancePolicy(f"acceptance.changes: a list of {', '.join(CHANGES)}, got {changes!r}")
        object.__setattr__(self, "changes", tuple(dict.fromkeys(changes)))
        for name in ("max_nodes", "breaker_nodes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidAcceptancePolicy(f"acceptance.{name}: must be an integer >= 1, got {value!r}")
        hold = self.max_hold_hours
        if isinstance(hold, bool) or not isinstance(hold, (int, float)) or not math.isfinite(hold) or hold <= 0:
            raise InvalidAcceptancePolicy(f"acceptance.max_hold_hours: must be a number > 0, got {hold!r}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> AcceptancePolicy:
        values = dict(values or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise InvalidAcceptancePolicy(f"acceptance: unknown key(s) {', '.join(unknown)} "
                                          f"(known: {', '.join(sorted(known))})")
        if isinstance(values.get("changes"), list):
            values["changes"] = tuple(values["changes"])
        return cls(**values)

    @property
    def taint(self) -> dict[str, str]:
        return {"key": self.taint_key, "value": VALUE, "effect": "NoSchedule"}

    @property
    def toleration(self) -> dict[str, str]:
        return {"key": self.taint_key, "operator": "Exists", "effect": "NoSchedule"}

    def max_hold(self) -> dt.timedelta:
        return dt.timedelta(hours=self.max_hold_hours)


@dataclasses.dataclass(frozen=True)
class Choice:
    gate: list[str]  # to taint now
    # asked for the gate over max_nodes or past the breaker: not tainted (an inventory change is reported
    # once, so no later read gates them), still suspect, so validated first
    waiting: list[str]
    breaker_open: bool = False
    breaker_reason: str | None = None


def choose(asking: Sequence[str], *, gated: int, policy: AcceptancePolicy) -> Choice:
    """Which of ``asking`` (nodes a change of ``policy.changes`` made eligible, not gated yet) to gate now,
    with ``gated`` nodes gated already."""
    asking = sorted(dict.fromkeys(asking))
    if len(asking) > policy.breaker_nodes:
        return Choice([], asking, True, (
            f"{len(asking)} node(s) joined, rebooted or came back at once, more than acceptance.breaker_nodes "
            f"({policy.breaker_nodes}): gated none of them (a fleet-wide rollout?). They are validated first "
            "as suspects, without the taint; a human decides"))
    room = max(0, policy.max_nodes - gated)
    return Choice(asking[:room], asking[room:])


def judge(states: Mapping[str, PairState | None], tests: Sequence[str], *, since: dt.datetime | None,
          now: dt.datetime, policy: AcceptancePolicy) -> str:
    """Where a gated node stands: ``passed`` when every enabled suite's last executed result is a pass
    since the gate closed, ``failed`` when one since then is a fail or an error, ``max hold`` when neither
    came within the hold, ``waiting`` otherwise. ``states``: test -> its pair state."""
    since = since or now
    results = [states.get(t) for t in tests]
    answered = [s for s in results if s is not None and s.finished_at is not None and s.finished_at >= since]
    if any(s.status != Status.PASS for s in answered):
        return FAILED
    if tests and len(answered) == len(tests):
        return PASSED
    return MAX_HOLD if now - since >= policy.max_hold() else WAITING
