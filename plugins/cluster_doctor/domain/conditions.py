"""Node conditions, the policy: what each GPU node's `ClusterDoctorHealthy` condition says, from the
latest verdict of every enabled suite, and how many nodes may turn False at once (the circuit
breaker, as quarantine has). Pure; ``cluster_doctor.kube.conditions`` writes it to the nodes.

* True: every enabled suite's latest executed result is a pass younger than the staleness target;
* False: a fresh result failed; reason = the most severe failing code (its recommended action first,
  then the order of the checks), message = the suite, the action and the age of the evidence;
* Unknown: a suite never ran on the node, its latest result is older than the target (stale
  evidence, whatever it said), or the suite could not judge (error: its code is the reason).

A repeat offender is False with reason ``RepeatOffender`` and action replace, whatever its
latest results say, until a person releases it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator

from cluster_doctor.domain import actions, spans
from cluster_doctor.domain.fail_slow import SLOW
from cluster_doctor.domain.policy import Policy, above_zero, count, flag, share
from cluster_doctor.domain.status import CheckStatus, Status

CONDITION_TYPE = "ClusterDoctorHealthy"
TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"
REASON_PASSED = "AllSuitesPassed"
REASON_STALE = "EvidenceStale"
REASON_NEVER = "NotValidated"
REASON_ERROR = "SuiteError"
REASON_REPEAT = "RepeatOffender"  # action replace, whatever its latest results say
MESSAGE_LIMIT = 1024  # characters: a summary for `kubectl describe node`, the history has the details


class InvalidConditionPolicy(ValueError):
    pass


class ConditionPolicy(Policy):
    setting: ClassVar[str] = "node_conditions"
    error: ClassVar[type[ValueError]] = InvalidConditionPolicy

    enabled: Annotated[bool, BeforeValidator(flag)] = False
    dry_run: Annotated[bool, BeforeValidator(flag)] = False
    max_share: Annotated[float, BeforeValidator(share)] = 0.05  # of the GPU nodes that may turn False within the window
    max_nodes: Annotated[int, BeforeValidator(count)] = 10
    window_hours: Annotated[float, BeforeValidator(above_zero)] = 24.0

    def limit(self, gpu_nodes: int) -> int:
        """How many nodes may turn False within the window."""
        return max(1, min(self.max_nodes, math.floor(self.max_share * gpu_nodes)))


@dataclasses.dataclass(frozen=True)
class Latest:
    """One suite's latest executed result on a node (validation_latest)."""

    test_name: str
    status: str | None  # pass | fail | error; None: never executed
    finished_at: dt.datetime | None
    checks: Sequence[Mapping[str, Any]] = ()
    action: str | None = None
    reason: str | None = None


@dataclasses.dataclass(frozen=True)
class Condition:
    status: str
    reason: str
    message: str

    def same(self, current: Mapping[str, Any] | None) -> bool:
        return bool(current) and (current.get("status"), current.get("reason"), current.get("message")) == (
            self.status, self.reason, self.message)


def age(delta: dt.timedelta) -> str:
    return spans.duration(delta.total_seconds())


def _failing(latest: Latest) -> tuple[str, str]:
    """(code, action) of the most severe failing check; the result's own action when no check says."""
    best: tuple[int, int, str, str] | None = None
    for i, c in enumerate(latest.checks):
        if not isinstance(c, Mapping) or c.get("status") != CheckStatus.FAIL:
            continue
        act = actions.valid(c.get("action")) or actions.valid(latest.action) or "drain_and_service"
        key = (actions.SEVERITY[act], -i, str(c.get("code") or c.get("name") or "Failed"), act)
        best = key if best is None or key[:2] > best[:2] else best
    if best is None:
        return "Failed", actions.valid(latest.action) or actions.UNKNOWN
    return best[2], best[3]


def _error_code(latest: Latest) -> str:
    codes = [c.get("code") for c in latest.checks if isinstance(c, Mapping) and c.get("status") == CheckStatus.ERROR]
    return next((str(c) for c in codes if c), REASON_ERROR)


def condition(latest: Iterable[Latest], tests: Sequence[str], now: dt.datetime, stale_after: dt.timedelta) -> Condition:
    """The node's condition from the latest result of each enabled test (see the module doc)."""
    by_test = {x.test_name: x for x in latest if x.test_name in tests}
    fresh = {t: x for t, x in by_test.items() if x.status and x.finished_at and now - x.finished_at <= stale_after}
    failed = [(x, *_failing(x)) for t in tests if (x := fresh.get(t)) and x.status == Status.FAIL]
    if failed:
        x, code, act = max(failed, key=lambda f: (actions.SEVERITY.get(f[2], len(actions.ACTIONS)), -tests.index(f[0].test_name)))
        others = [f"{y.test_name}: {c}" for y, c, _ in failed if y is not x]
        return Condition(FALSE, code, _cut(f"{x.test_name} failed {code}; action: {act}; evidence {age(now - x.finished_at)} "
                                           f"old ({_ts(x.finished_at)})" + (f"; also {', '.join(others)}" if others else "")
                                           + (f"; {x.reason}" if x.reason else "")))
    never = [t for t in tests if t not in by_test or not by_test[t].status]
    stale = [t for t in tests if t in by_test and t not in fresh and t not in never]
    errors = [fresh[t] for t in tests if t in fresh and fresh[t].status == Status.ERROR]
    if never or stale or errors:
        reason = REASON_NEVER if never else (REASON_STALE if stale else _error_code(errors[0]))
        parts = ([f"never validated: {', '.join(never)}"] if never else []) + [
            f"{t}: last {by_test[t].status} {age(now - by_test[t].finished_at)} old, older than the "
            f"{age(stale_after)} target" for t in stale] + [
            f"{e.test_name}: could not judge ({_error_code(e)}){'; ' + e.reason if e.reason else ''}" for e in errors]
        return Condition(UNKNOWN, reason, _cut("; ".join(parts)))
    oldest = min(fresh.values(), key=lambda x: x.finished_at)
    return Condition(TRUE, REASON_PASSED, _cut(f"{len(tests)} suite(s) passed ({', '.join(tests)}); oldest evidence "
                                                 f"{age(now - oldest.finished_at)} old ({oldest.test_name}, "
                                                 f"{_ts(oldest.finished_at)}); action: none"))


def repeat_offender(latest: Condition, offender: Any) -> Condition:
    """A repeat offender's condition (``domain.transitions.RepeatOffender``): False until a person releases it,
    whatever its latest results say (they follow in the message)."""
    return Condition(FALSE, REASON_REPEAT, _cut(f"{offender.describe()}; latest: {latest.message}"))


def slow(latest: Condition, node: Any) -> Condition:
    """A node failing for speed (``store.fail_slow.SlowNode``, code SLOW): False with its evidence, unless a
    failed suite already says False (that finding names the fault more precisely)."""
    if latest.status == FALSE:
        return latest
    return Condition(FALSE, SLOW, _cut(f"{node.describe()}; action: {actions.SLOW_ACTION}; latest: {latest.message}"))


def _ts(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%MZ")


def _cut(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT - 3] + "..."


@dataclasses.dataclass
class ConditionReport:
    enabled: bool
    dry_run: bool = False
    set_true: list[str] = dataclasses.field(default_factory=list)
    set_false: list[str] = dataclasses.field(default_factory=list)
    set_unknown: list[str] = dataclasses.field(default_factory=list)
    unchanged: int = 0
    held_back: list[str] = dataclasses.field(default_factory=list)  # would turn False, the open breaker kept them
    breaker_open: bool = False
    breaker_reason: str | None = None
    limit: int | None = None
    in_window: int = 0
    gpu_nodes: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)  # nodes whose patch failed, with why

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        if not self.enabled:
            return f"node conditions are disabled (setting node_conditions.enabled): no {CONDITION_TYPE} written"
        verb = "would set" if self.dry_run else "set"
        parts = [f"{verb} {CONDITION_TYPE}=True on {len(self.set_true)}, False on {len(self.set_false)}"
                 f"{': ' + ', '.join(self.set_false) if self.set_false else ''}, Unknown on {len(self.set_unknown)}",
                 f"unchanged {self.unchanged}"]
        if self.breaker_open:
            parts.insert(0, f"CIRCUIT BREAKER OPEN: {self.breaker_reason}")
        if self.errors:
            parts.append(f"failed to patch {len(self.errors)}: {'; '.join(self.errors[:5])}")
        return "; ".join(parts)
