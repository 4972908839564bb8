"""Act on confirmed failures: opt-in node quarantine, with a circuit breaker and a dry run.

Off by default. When enabled (setting ``quarantine``), after every run:

* a GPU node with a *confirmed* failure whose recommended action is one quarantine acts on (setting
  ``quarantine.actions``, default reset_gpu, reboot, drain_and_service and unknown: a fault of the node
  itself; check_fabric / check_storage point at a switch or the shared file system, retest at a flake)
  gets the label ``cluster-doctor.io/health=fail``, annotations naming the failing test(s), code(s),
  the most severe action and the time, and (``taint: true``) a
  ``cluster-doctor.io/health=fail:NoSchedule`` taint so new user pods stay off it. Confirmed means
  the pair failed twice in a row (the failed-retest path ran it again 6 h later and it failed again)
  or a straggler/drift verdict was confirmed by a second run: one flaky result never quarantines.
* a node that Cluster Doctor quarantined and that now passes every enabled test, with no verdict
  left, gets its label, annotations and taint removed. Labels set by a person (no
  ``quarantined-at`` annotation of ours) are never touched.
* circuit breaker: if the nodes quarantined within the window (default 24 h) plus the ones this run
  would add exceed the limit (default: 5 % of the GPU nodes or 10 nodes, whichever is lower, at
  least 1), nothing new is quarantined. The report says so (``breaker_open``), it is logged as an
  error and the run fails, so a human decides: a fleet-wide failure is more likely a bad image or
  driver rollout than bad nodes. Releases still happen (they only give capacity back).
* dry run: everything is computed and logged as "would quarantine/release"; nothing is patched.

The repair loop and repeat offenders: every transition is recorded in ``node_transitions``
(quarantined, released; the inventory's trigger records repaired, and makes a quarantined node that rebooted
suspect so its whole bundle runs at once). A node quarantined again within ``repeat_offender_days`` of a
release, or for the ``repeat_offender_failures``-th time in that period, is a **repeat offender**: its
recommended-action annotation says ``replace``, ``cluster-doctor.io/repeat-offender`` says why, and it is not
released when it passes again: a person releases it by removing the label; the next run records it released
by a person and removes our taint and annotations. Nothing is recorded in a dry run.

The breaker keeps no state of its own: the window is read from the nodes' ``quarantined-at``
annotations, so it stays open while the candidates keep failing, and resets when they are fixed.

Patches carry the node's resourceVersion (a concurrent edit is retried, never overwritten) and need
only ``patch`` on nodes: the opt-in ClusterRole in include/k8s/quarantine/. With ``taint: true`` the
validation pods must tolerate the taint (setting ``tolerations``), or a quarantined node could never
be validated again and released: that combination is refused.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from cluster_doctor.domain import actions as action_rules
from cluster_doctor.domain import timestamps
from cluster_doctor.domain import transitions as life
from cluster_doctor.domain.quarantine import (  # noqa: F401  (the names operators and tests use)
    ANN_ACTION,
    ANN_CODES,
    ANN_REPEAT,
    ANN_SINCE,
    ANN_TESTS,
    ANNOTATIONS,
    DOMAIN,
    LABEL,
    LABEL_VALUE,
    TAINT,
    TOLERATION,
    Failure,
    InvalidQuarantinePolicy,
    QuarantinePolicy,
    QuarantineReport,
    node_action,
)
from cluster_doctor.domain.transitions import RepeatPolicy, Transition
from cluster_doctor.kube.api import CoreV1
from cluster_doctor.kube.node_patch import patch_node
from cluster_doctor.store import transitions as stored_transitions
from cluster_doctor.store.quarantine import Records, confirmed_failures, healthy, records

log = logging.getLogger(__name__)
_MAX_ANNOTATION = 1000  # characters: a summary, the history has the details


# ---------------------------------------------------------------------------- the cluster side
def _nodes(core_v1: CoreV1, **kwargs: Any) -> list[dict[str, Any]]:
    from cluster_doctor.kube import discovery

    return list(discovery.paginate(core_v1.list_node, [0], **kwargs))


def _since(node: Mapping[str, Any]) -> dt.datetime | None:
    return timestamps.parse(((node.get("metadata") or {}).get("annotations") or {}).get(ANN_SINCE))


def _quarantine_body(failures: Sequence[Failure], now: dt.datetime, taint: bool, repeat: str | None = None):
    def build(node: Mapping[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"metadata": {
            "labels": {LABEL: LABEL_VALUE},
            "annotations": {
                ANN_TESTS: ",".join(sorted({f.test_name for f in failures}))[:_MAX_ANNOTATION],
                ANN_CODES: "; ".join(f"{f.test_name}: {f.code}" for f in failures)[:_MAX_ANNOTATION],
                ANN_SINCE: timestamps.rfc3339(now),
                ANN_ACTION: life.REPLACE if repeat else _action_of(failures),
                **({ANN_REPEAT: repeat[:_MAX_ANNOTATION]} if repeat else {}),
            }}}
        if taint:
            # taints are replaced as a whole by a patch: send the node's own plus ours
            current = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != LABEL]
            body["spec"] = {"taints": current + [dict(TAINT)]}
        return body
    return build


_action_of = node_action  # the name this module's callers used


def _describe(failure: Failure) -> str:
    return f"{failure.test_name}: {failure.code}" + ("" if failure.verdict else f" ({action_rules.shown(failure.action)})")


def _release_body(node: Mapping[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"labels": {LABEL: None}, "annotations": {a: None for a in ANNOTATIONS}}}
    taints = (node.get("spec") or {}).get("taints") or []
    if any(t.get("key") == LABEL for t in taints):
        body["spec"] = {"taints": [t for t in taints if t.get("key") != LABEL]}
    return body


def _is_gpu_node(node: Mapping[str, Any], resource: str) -> bool:
    from cluster_doctor.kube.discovery import parse_quantity

    try:
        return parse_quantity(((node.get("status") or {}).get("allocatable") or {}).get(resource)) > 0
    except ValueError:
        return False


def quarantine_failing(
    core_v1: CoreV1,
    connect: Any,
    policy: QuarantinePolicy,
    *,
    tests: Sequence[str],
    gpu_resource: str = "nvidia.com/gpu",
    node_selector: str = "",
    now: dt.datetime | None = None,
    repeat: RepeatPolicy | None = None,
    run_id: str | None = None,
    slow_window: dt.timedelta | None = None,
    slow_spacing: dt.timedelta | None = None,
) -> QuarantineReport:
    """Quarantine the nodes with confirmed failures and release the ones that recovered, recording every
    transition (repeat offenders named, kept until a person releases them); see the module docstring. Makes
    no call at all when disabled."""
    if not policy.enabled:
        return QuarantineReport(enabled=False)
    now = now or dt.datetime.now(dt.UTC)
    repeat = repeat or RepeatPolicy()
    report = QuarantineReport(enabled=True, dry_run=policy.dry_run)
    nodes = {n["metadata"]["name"]: n for n in _nodes(core_v1, **({"label_selector": node_selector}
                                                                     if node_selector else {}))}
    gpu = {name: n for name, n in nodes.items() if _is_gpu_node(n, gpu_resource)}
    report.gpu_nodes = len(gpu)
    report.limit = policy.limit(len(gpu))
    ours = {name: n for name, n in gpu.items()
            if ((n["metadata"].get("labels") or {}).get(LABEL) == LABEL_VALUE and _since(n) is not None)}
    labelled = {name for name, n in gpu.items() if (n["metadata"].get("labels") or {}).get(LABEL) == LABEL_VALUE}
    confirmed = {name: f for name, f in confirmed_failures(
        connect, tests, now=now, **({"slow_window": slow_window} if slow_window else {}),
        **({"slow_spacing": slow_spacing} if slow_spacing is not None else {})).items() if name in gpu}
    failures = {name: kept for name, found in confirmed.items() if (kept := [f for f in found if policy.acts_on(f)])}
    report.not_acted_on = sorted(f"{name} ({'; '.join(_describe(f) for f in found)})"
                                 for name, found in confirmed.items() if name not in failures)
    if report.not_acted_on:
        log.info("quarantine leaves %d node(s) with confirmed failures to a person (their action is not one of "
                 "%s): %s", len(report.not_acted_on), ", ".join(policy.actions), "; ".join(report.not_acted_on))
    candidates = sorted(name for name in failures if name not in labelled)
    report.already = sorted(name for name in failures if name in labelled)
    window = dt.timedelta(hours=policy.window_hours)
    report.in_window = sum(1 for n in ours.values() if now - _since(n) < window)
    known = records(connect, candidates, since=now - repeat.window)
    done: list[Transition] = []  # written whatever happens next: a patch that raised leaves the earlier ones true
    try:
        _released_by_person(core_v1, report, known, gpu, labelled, now, run_id, done)
        _release(core_v1, connect, report, known, ours, set(failures), tests, now, run_id, done)
        _breaker_or_quarantine(core_v1, policy, report, gpu, candidates, failures, known, repeat, now, run_id, done)
    finally:
        if done and not report.dry_run:  # nothing happened in a dry run
            stored_transitions.record(connect, done)
    return report


def _breaker_or_quarantine(core_v1: CoreV1, policy: QuarantinePolicy, report: QuarantineReport,
                           gpu: Mapping[str, Any], candidates: list[str], failures: Mapping[str, list[Failure]],
                           known: Records, repeat: RepeatPolicy, now: dt.datetime, run_id: str | None,
                           done: list[Transition]) -> None:
    """Quarantine the candidates, unless they would open the breaker (then none of them)."""
    if candidates and report.in_window + len(candidates) > report.limit:
        report.breaker_open = True
        report.held_back = candidates
        report.breaker_reason = (
            f"{len(candidates)} node(s) would be quarantined with {report.in_window} already quarantined in the "
            f"last {policy.window_hours:g} h: more than the limit of {report.limit} ({policy.max_share:.0%} of "
            f"{len(gpu)} GPU nodes, at most {policy.max_nodes}); quarantined none of them. A fleet-wide failure "
            "is more likely a bad image or driver rollout than bad nodes: a human decides")
        log.error("quarantine CIRCUIT BREAKER OPEN: %s. Held back: %s", report.breaker_reason, ", ".join(candidates))
        return
    for name in candidates:
        _quarantine(core_v1, policy, report, gpu[name], failures[name],
                    life.repeat_reason(known.past.get(name, ()), now, repeat), now, run_id, done)


def _released_by_person(core_v1: CoreV1, report: QuarantineReport, known: Records, gpu: Mapping[str, Any],
                        labelled: set[str], now: dt.datetime, run_id: str | None, done: list[Transition]) -> None:
    """Nodes in quarantine by our records whose label is gone (a person removed it: the way a repeat offender
    comes back) are released by that person; our taint and annotations go with the label."""
    for name in sorted(set(known.in_quarantine) & set(gpu) - labelled):
        offender = known.offenders.get(name)
        what = "a repeat offender released by a person" if offender else "released by a person"
        if not report.dry_run and (_release_body(gpu[name]).get("spec") or _ours_left(gpu[name])):
            patch_node(core_v1, gpu[name], _release_body)
        done.append(Transition(name, life.RELEASED, now, f"{what}: the label {LABEL} was removed",
                               {"by": "person", **({"repeat_offender": offender.cause} if offender else {})}, run_id))
        report.released_by_person.append(name)
        log.warning("%s: %s (label %s removed)", name, what, LABEL)


def _ours_left(node: Mapping[str, Any]) -> bool:
    return any(a in ((node.get("metadata") or {}).get("annotations") or {}) for a in ANNOTATIONS)


def _release(core_v1: CoreV1, connect: Any, report: QuarantineReport, known: Records, ours: Mapping[str, Any],
             failing: set[str], tests: Sequence[str], now: dt.datetime, run_id: str | None,
             done: list[Transition]) -> None:
    """Release the nodes we quarantined that pass every enabled test again, but for repeat offenders: those
    stay out until a person releases them. Releases never need the breaker (they give capacity back)."""
    for name in sorted(healthy(connect, set(ours) - failing, tests)):
        if name in known.offenders:
            report.kept_for_person.append(name)
            log.warning("%s passes every enabled test again but is a repeat offender (%s): it stays quarantined "
                        "until a person releases it (removes the label %s)", name, known.offenders[name].cause, LABEL)
            continue
        if report.dry_run:
            log.info("quarantine dry run: would release %s (passes every test again)", name)
        else:
            patch_node(core_v1, ours[name], _release_body)
            log.info("released %s from quarantine: it passes every enabled test again", name)
        report.released.append(name)
        done.append(Transition(name, life.RELEASED, now, "passes every enabled test again",
                               {"tests": list(tests), "by": "cluster-doctor"}, run_id))


def _quarantine(core_v1: CoreV1, policy: QuarantinePolicy, report: QuarantineReport, node: Mapping[str, Any],
                failures: Sequence[Failure], repeat: str | None, now: dt.datetime,
                run_id: str | None, done: list[Transition]) -> None:
    """Label (and taint) one node; its transitions: quarantined, and repeat_offender when it is one."""
    name = node["metadata"]["name"]
    what = "; ".join(_describe(f) for f in failures)
    if policy.dry_run:
        log.info("quarantine dry run: would label%s %s (%s)%s", " and taint" if policy.taint else "", name, what,
                 f"; a repeat offender: {repeat}" if repeat else "")
    else:
        patch_node(core_v1, node, _quarantine_body(failures, now, policy.taint, repeat))
        log.warning("quarantined %s: label %s=%s%s (%s)", name, LABEL, LABEL_VALUE,
                    ", taint NoSchedule" if policy.taint else "", what)
    report.quarantined.append(name)
    detail = {"tests": sorted({f.test_name for f in failures}), "codes": [f"{f.test_name}: {f.code}" for f in failures],
              "action": _action_of(failures)}
    done.append(Transition(name, life.QUARANTINED, now, what, detail, run_id))
    if repeat:
        log.error("REPEAT OFFENDER %s: %s; recommended action %s, kept out until a person releases it", name,
                  repeat, life.REPLACE)
        report.repeat_offenders.append(f"{name}: {repeat}")
        done.append(Transition(name, life.REPEAT_OFFENDER, now, repeat, {**detail, "action": life.REPLACE}, run_id))
