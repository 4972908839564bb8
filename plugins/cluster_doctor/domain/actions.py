"""What to do about an attempt: its recommended action and whether it checked everything.

The suites give every finding an action from a fixed set (include/suites/codes.yaml,
``cluster_doctor_suites.codes.ACTIONS``) and their summary the most severe one; this module is the
orchestrator's copy of that set and the rules for an attempt's action where the suite could not say:

* ``pass``: ``none``; ``fail``/``error``: the summary's action when the verdict is the suite's own,
  else the most severe action of the failing (erroring) checks; an ``error`` the orchestrator
  judged (OOM, deadline, a malformed result) is ``retest``;
* ``timeout``/``preempted``/``skipped`` never ran a check: ``retest`` (the pair stays due, the next run
  takes it again: nothing for a person to do unless it keeps happening);
* a step that a failing ``gpu_health`` stopped (skipped, no pod): the health failure's action wherever a
  person reads it (``for_node``), never ``retest`` — the node needs what its health failure needs;
* unknown (``None`` in the database, shown ``unknown``): a row recorded before the action was kept
  (migration 0004), or a fail whose checks name no action. Never read as ``none``.

An attempt is *incomplete* when a check could not run (status ``skip``): a pass with a not-run check
is shown as ``pass (incomplete: N checks not run)`` everywhere, never as a clean pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cluster_doctor.domain.status import FAILING, FAILING_CHECKS, CheckStatus, Status

# Least to most severe, as the suites order them (a test keeps the two copies equal).
ACTIONS = ("none", "retest", "check_storage", "check_fabric", "reset_gpu", "reboot", "drain_and_service")
UNKNOWN = "unknown"  # how an attempt without a recorded action is shown and filtered
SEVERITY = {a: i for i, a in enumerate(ACTIONS)}
NOT_EXECUTED_ACTION = "retest"
# What quarantine acts on by default: findings a reboot, a GPU reset or a person must fix on the node
# itself. check_fabric / check_storage point outside the node (a switch, the shared file system: one
# fault fails many nodes at once), retest is a flake; unknown keeps what quarantine did before 0004.
QUARANTINE_ACTIONS = ("reset_gpu", "reboot", "drain_and_service", UNKNOWN)
# A node failing for speed (domain.fail_slow.SLOW: two flagged probes, or a probe and a signal): a person
# looks at its clocks, cooling, power and links, as for a suite's GEMM_SLOW; quarantine acts on it.
SLOW_ACTION = "drain_and_service"


def valid(action: Any) -> str | None:
    """The action if it is one of ACTIONS, else None."""
    return action if isinstance(action, str) and action in SEVERITY else None


def most_severe(actions: Iterable[Any]) -> str | None:
    """The most severe valid action of ``actions``; None when there is none."""
    known = [a for a in actions if valid(a)]
    return max(known, key=SEVERITY.__getitem__) if known else None


def of_checks(checks: Iterable[Any], statuses: Iterable[str]) -> str | None:
    """The most severe action of the checks whose status is in ``statuses``."""
    wanted = set(statuses)
    return most_severe(c.get("action") for c in checks if isinstance(c, Mapping) and c.get("status") in wanted)


def for_attempt(status: str, summary: Mapping[str, Any] | None = None, checks: Iterable[Any] = ()) -> str | None:
    """An attempt's recommended action (see the module doc); None when nothing says (unknown)."""
    if status == Status.PASS:
        return "none"
    if status not in FAILING:
        return NOT_EXECUTED_ACTION
    summary = summary or {}
    if summary.get("status") == status and valid(summary.get("action")):
        return summary["action"]
    # the checks' own statuses (pass, fail, error, skip, warn) of the same names
    found = of_checks(checks or summary.get("checks") or [],
                      (CheckStatus.FAIL,) if status == Status.FAIL else FAILING_CHECKS)
    if found:
        return found
    # an error the suite did not report itself (OOM, deadline, malformed result): run it again
    return NOT_EXECUTED_ACTION if status == Status.ERROR else None


def shown(action: str | None) -> str:
    return action if action else UNKNOWN


HEALTH_SUITE = "gpu_health"  # the suite that stops a bundle when it fails (``planning.steps.HEALTH_FIRST``)


def for_node(status: str | None, action: str | None, stopped_by_health: bool, health_action: str | None) -> str:
    """The one action a person reads for an attempt on a node: a step the node's failing health check
    stopped (``stopped_by_health``: ``planning.steps.stopped_by_health`` of its reason) has that
    failure's action (``health_action``: the action of the gpu_health fail of the same run, or of the
    node's current one), shown as '<action> (gpu_health failed)'; anything else its own."""
    if status not in (Status.PASS, *FAILING) and stopped_by_health and valid(health_action):
        return f"{health_action} ({HEALTH_SUITE} failed)"
    return shown(action)


def not_run_count(summary: Mapping[str, Any] | None, checks: Iterable[Any]) -> int:
    """Checks that could not run: the summary's own count (its ``checks`` may be cut to fit 4 KiB),
    else the ``skip`` checks listed."""
    counts = (summary or {}).get("check_counts")
    skip = counts.get(CheckStatus.SKIP) if isinstance(counts, Mapping) else None
    listed = sum(1 for c in checks if isinstance(c, Mapping) and c.get("status") == CheckStatus.SKIP)
    if isinstance(skip, int) and not isinstance(skip, bool) and skip >= 0:
        return max(skip, listed)
    return listed


def status_text(status: str | None, incomplete: bool | None = None, not_run: int | None = None) -> str:
    """How a status reads wherever a person sees it: ``pass (incomplete: 2 checks not run)`` for a
    pass that did not check everything, the status itself otherwise (``never`` for none)."""
    if not status:
        return "never"
    if status == Status.PASS and (incomplete or (not_run or 0) > 0):
        if not_run:
            return f"pass (incomplete: {not_run} check{'s' if not_run != 1 else ''} not run)"
        return "pass (incomplete)"
    return status
