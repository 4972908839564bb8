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
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator

from cluster_doctor.domain.policy import Policy, count, flag, positive
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


def _taint_key(key: Any) -> Any:
    if not isinstance(key, str) or len(key) > 316 or not _QUALIFIED.match(key):
        raise ValueError(f"not a Kubernetes taint key: {key!r}")
    return key


def _changes(changes: Any) -> tuple[str, ...]:
    if isinstance(changes, str) or not isinstance(changes, Sequence) or any(c not in CHANGES for c in changes):
        raise ValueError(f"a list of {', '.join(CHANGES)}, got {changes!r}")
    return tuple(dict.fromkeys(changes))


class AcceptancePolicy(Policy):
    setting: ClassVar[str] = "acceptance"
    error: ClassVar[type[ValueError]] = InvalidAcceptancePolicy

    enabled: Annotated[bool, BeforeValidator(flag)] = False
    dry_run: Annotated[bool, BeforeValidator(flag)] = False
    taint_key: Annotated[str, BeforeValidator(_taint_key)] = KEY  # ours, or the provisioning's startup taint
    changes: Annotated[tuple[str, ...], BeforeValidator(_changes)] = CHANGES  # which node changes close the gate
    max_nodes: Annotated[int, BeforeValidator(count)] = 50  # gated at once, at most
    # then a node no validation answered is let go and reported
    max_hold_hours: Annotated[float, BeforeValidator(positive)] = 12.0
    # more nodes than this asking for the gate in one read: gate none of them
    breaker_nodes: Annotated[int, BeforeValidator(count)] = 20

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
