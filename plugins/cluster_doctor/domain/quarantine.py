"""Node quarantine, the policy: which nodes may be labelled and tainted, how many at once (the
circuit breaker), and what a reconciliation did. Pure; ``cluster_doctor.kube.quarantine`` acts on it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator

from cluster_doctor.domain import actions as action_rules
from cluster_doctor.domain.policy import Policy, above_zero, count, flag, share
from cluster_doctor.domain.taints import tolerates

DOMAIN = "cluster-doctor.io"
LABEL = f"{DOMAIN}/health"
LABEL_VALUE = "fail"
ANN_TESTS = f"{DOMAIN}/failing-tests"
ANN_CODES = f"{DOMAIN}/failure-codes"
ANN_SINCE = f"{DOMAIN}/quarantined-at"
# the most severe recommended action of the failures (domain.actions), for remediation tooling
ANN_ACTION = f"{DOMAIN}/recommended-action"
# a repeat offender's cause: its recommended action is then replace, and quarantine keeps it out
# until a person releases it (removes the label)
ANN_REPEAT = f"{DOMAIN}/repeat-offender"
ANNOTATIONS = (ANN_TESTS, ANN_CODES, ANN_SINCE, ANN_ACTION, ANN_REPEAT)
# what the ``actions`` key accepts: the fixed set and ``unknown`` (a failure without a recorded action)
ACTION_CHOICES = (*action_rules.ACTIONS, action_rules.UNKNOWN)
TAINT = {"key": LABEL, "value": LABEL_VALUE, "effect": "NoSchedule"}
TOLERATION = {"key": LABEL, "operator": "Exists", "effect": "NoSchedule"}


class InvalidQuarantinePolicy(ValueError):
    pass


def _actions(wanted: Any) -> tuple[str, ...]:
    if isinstance(wanted, str) or not isinstance(wanted, (list, tuple)) or not wanted or any(
            a not in ACTION_CHOICES for a in wanted):
        raise ValueError(f"must be a non-empty list of {', '.join(ACTION_CHOICES)}, got {wanted!r}")
    return tuple(dict.fromkeys(wanted))


class QuarantinePolicy(Policy):
    setting: ClassVar[str] = "quarantine"
    error: ClassVar[type[ValueError]] = InvalidQuarantinePolicy

    enabled: Annotated[bool, BeforeValidator(flag)] = False
    dry_run: Annotated[bool, BeforeValidator(flag)] = False
    taint: Annotated[bool, BeforeValidator(flag)] = False
    max_share: Annotated[float, BeforeValidator(share)] = 0.05  # of the GPU nodes, per window
    max_nodes: Annotated[int, BeforeValidator(count)] = 10  # per window
    window_hours: Annotated[float, BeforeValidator(above_zero)] = 24.0
    # the recommended actions of a confirmed failure that quarantine acts on (domain.actions.QUARANTINE_ACTIONS:
    # reset_gpu, reboot, drain_and_service, unknown); confirmed fleet verdicts always count
    actions: Annotated[tuple[str, ...], BeforeValidator(_actions)] = action_rules.QUARANTINE_ACTIONS

    def acts_on(self, failure: Failure) -> bool:
        """A confirmed verdict always; a failed check when its recommended action is one of ``actions``."""
        return failure.verdict or action_rules.shown(failure.action) in self.actions

    def limit(self, gpu_nodes: int) -> int:
        """How many nodes may be in quarantine-by-us within the window."""
        return max(1, min(self.max_nodes, math.floor(self.max_share * gpu_nodes)))

    def check_tolerations(self, tolerations: Sequence[Mapping[str, Any]]) -> None:
        if self.taint and not any(tolerates(t, TAINT) for t in tolerations):
            raise InvalidQuarantinePolicy(
                f"quarantine.taint needs the validation pods to tolerate {LABEL}:NoSchedule (add "
                f"{json.dumps(TOLERATION)} to the tolerations setting), or a quarantined node is never "
                "validated again and never released")


@dataclasses.dataclass(frozen=True)
class Failure:
    test_name: str
    code: str  # failed check names, or "<verdict kind>:<metric>"
    action: str | None = None  # the failed result's recommended action; None: unknown (or a verdict)
    verdict: bool = False  # a confirmed straggler/drift verdict, not a failed check
    since: dt.datetime | None = None  # when the failure began (the pair's failing streak, the verdict's judging)


def node_action(failures: Sequence[Failure]) -> str:
    """The most severe action of the failed checks (unknown when none is recorded; a verdict alone:
    drain_and_service, a person looks at a slow GPU)."""
    found = action_rules.most_severe(f.action for f in failures if not f.verdict)
    if found:
        return found
    return "drain_and_service" if failures and all(f.verdict for f in failures) else action_rules.UNKNOWN


@dataclasses.dataclass
class QuarantineReport:
    enabled: bool
    dry_run: bool = False
    quarantined: list[str] = dataclasses.field(default_factory=list)
    released: list[str] = dataclasses.field(default_factory=list)
    held_back: list[str] = dataclasses.field(default_factory=list)  # candidates the open breaker kept out
    already: list[str] = dataclasses.field(default_factory=list)
    # confirmed failures left alone because their action is not one quarantine acts on: "node (test: action)"
    not_acted_on: list[str] = dataclasses.field(default_factory=list)
    breaker_open: bool = False
    breaker_reason: str | None = None
    # nodes named repeat offenders by this run ("node: cause"); repeat offenders that pass again but
    # stay quarantined until a person releases them; nodes whose label a person removed (released by a person)
    repeat_offenders: list[str] = dataclasses.field(default_factory=list)
    kept_for_person: list[str] = dataclasses.field(default_factory=list)
    released_by_person: list[str] = dataclasses.field(default_factory=list)
    limit: int | None = None
    in_window: int = 0
    gpu_nodes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        if not self.enabled:
            return "quarantine is disabled (setting quarantine.enabled): no node was labelled or tainted"
        verb = "would " if self.dry_run else ""
        parts = [f"{verb}quarantine {len(self.quarantined)}: {', '.join(self.quarantined) or '-'}",
                 f"{verb}release {len(self.released)}: {', '.join(self.released) or '-'}",
                 f"already quarantined {len(self.already)}"]
        if self.not_acted_on:
            parts.append(f"left to a person (action not quarantined): {', '.join(self.not_acted_on)}")
        if self.repeat_offenders:
            parts.append(f"REPEAT OFFENDER(S), action replace: {'; '.join(self.repeat_offenders)}")
        if self.kept_for_person:
            parts.append(f"repeat offender(s) passing again, kept until a person releases them: "
                         f"{', '.join(self.kept_for_person)}")
        if self.released_by_person:
            parts.append(f"released by a person (label removed): {', '.join(self.released_by_person)}")
        if self.breaker_open:
            parts.insert(0, f"CIRCUIT BREAKER OPEN: {self.breaker_reason}")
        return "; ".join(parts)
