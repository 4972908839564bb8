"""Publish every GPU node's health as a node condition: opt-in, with a circuit breaker and a dry run.

Off by default. When enabled (setting ``node_conditions``), after every run each GPU node gets the
condition ``ClusterDoctorHealthy`` (domain.conditions says what: True / False with the most severe
failing code as its reason and the action and age of the evidence in its message / Unknown when the
evidence is stale, missing or could not judge), where node-problem-detector consumers, autoscalers'
node repair and ``kubectl describe node`` read health.

* The condition is written through the ``nodes/status`` subresource with a strategic merge patch of
  that one condition: node conditions merge by ``type`` (``patchMergeKey``), so the kubelet's Ready,
  MemoryPressure, ... and other writers' conditions stay untouched, and no resourceVersion is sent
  (the kubelet rewrites the node status every few seconds; a precondition would only conflict).
  ``lastTransitionTime`` changes only with the status. An unchanged condition is not patched.
* Circuit breaker (as quarantine's): if the nodes whose condition turned False within the window
  (read from the conditions themselves: no state of its own) plus the ones this run would turn False
  exceed the limit (default 5 % of the GPU nodes or 10, at least 1), none of them is turned False:
  they keep their current condition, the report says so and the run fails, so a human decides (a
  fleet-wide failure is more likely a bad image or rollout than bad nodes). True and Unknown are
  still written.
* ``clear`` removes the condition from every node (`$patch: delete` of the element), for turning the
  feature off.

Needs only ``patch`` on ``nodes/status`` (the opt-in ClusterRole in include/k8s/conditions/); reading
nodes comes from the discovery role.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from cluster_doctor.domain import conditions as policy_of
from cluster_doctor.domain import timestamps
from cluster_doctor.domain.conditions import CONDITION_TYPE, FALSE, TRUE, ConditionPolicy, ConditionReport
from cluster_doctor.kube.api import CoreV1
from cluster_doctor.store.conditions import latest_by_node
from cluster_doctor.store.fail_slow import SLOW_SPACING, SLOW_WINDOW, read_slow_nodes
from cluster_doctor.store.transitions import repeat_offenders_now

log = logging.getLogger(__name__)
STRATEGIC = "application/strategic-merge-patch+json"


def _nodes(core_v1: CoreV1, node_selector: str) -> list[dict[str, Any]]:
    from cluster_doctor.kube.listing import paginate

    return list(paginate(core_v1.list_node, [0], **({"label_selector": node_selector} if node_selector else {})))


def _is_gpu_node(node: Mapping[str, Any], resource: str) -> bool:
    from cluster_doctor.kube.discovery import parse_quantity

    try:
        return parse_quantity(((node.get("status") or {}).get("allocatable") or {}).get(resource)) > 0
    except ValueError:
        return False


def current(node: Mapping[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == CONDITION_TYPE), None)


def _body(cond: policy_of.Condition, cur: Mapping[str, Any] | None, now: dt.datetime) -> dict[str, Any]:
    since = cur.get("lastTransitionTime") if cur and cur.get("status") == cond.status else None
    return {"status": {"conditions": [{
        "type": CONDITION_TYPE, "status": cond.status, "reason": cond.reason, "message": cond.message,
        "lastHeartbeatTime": timestamps.rfc3339(now), "lastTransitionTime": since or timestamps.rfc3339(now)}]}}


def publish_conditions(
    core_v1: CoreV1,
    connect: Any,
    policy: ConditionPolicy,
    *,
    tests: Sequence[str],
    stale_after: dt.timedelta,
    gpu_resource: str = "nvidia.com/gpu",
    node_selector: str = "",
    now: dt.datetime | None = None,
    slow_window: dt.timedelta = SLOW_WINDOW,
    slow_spacing: dt.timedelta = SLOW_SPACING,
) -> ConditionReport:
    """Write every GPU node's condition from the latest verdicts; see the module docstring. Makes no
    call at all when disabled."""
    if not policy.enabled:
        return ConditionReport(enabled=False)
    now = now or dt.datetime.now(dt.UTC)
    report = ConditionReport(enabled=True, dry_run=policy.dry_run)
    gpu = {n["metadata"]["name"]: n for n in _nodes(core_v1, node_selector) if _is_gpu_node(n, gpu_resource)}
    report.gpu_nodes, report.limit = len(gpu), policy.limit(len(gpu))
    latest = latest_by_node(connect, tests)
    wanted = {name: policy_of.condition(latest.get(name, ()), tests, now, stale_after) for name in sorted(gpu)}
    for name, node in read_slow_nodes(connect, now=now, window=slow_window, spacing=slow_spacing, nodes=wanted).items():
        if node.failing:  # slow: False like any failure, with its evidence
            wanted[name] = policy_of.slow(wanted[name], node)
    for name, offender in repeat_offenders_now(connect).items():  # False until a person releases it
        if name in wanted:
            wanted[name] = policy_of.repeat_offender(wanted[name], offender)
    window = dt.timedelta(hours=policy.window_hours)
    report.in_window = sum(1 for n in gpu.values() if (c := current(n)) and c.get("status") == FALSE
                           and (t := timestamps.parse(c.get("lastTransitionTime"))) and now - t < window)
    turning = [name for name, cond in wanted.items() if cond.status == FALSE and (current(gpu[name]) or {}).get("status") != FALSE]
    if turning and report.in_window + len(turning) > report.limit:
        report.breaker_open, report.held_back = True, turning
        report.breaker_reason = (
            f"{len(turning)} node(s) would turn {CONDITION_TYPE}=False with {report.in_window} already turned in the last "
            f"{policy.window_hours:g} h: more than the limit of {report.limit} ({policy.max_share:.0%} of {len(gpu)} GPU "
            f"nodes, at most {policy.max_nodes}); none of them was changed. A fleet-wide failure is more likely a bad "
            "image or driver rollout than bad nodes: a human decides")
        log.error("node conditions CIRCUIT BREAKER OPEN: %s. Held back: %s", report.breaker_reason, ", ".join(turning))
    for name, cond in wanted.items():
        if name in report.held_back:
            continue
        _write(core_v1, report, name, gpu[name], cond, now)
    return report


def _write(core_v1: CoreV1, report: ConditionReport, name: str, node: Mapping[str, Any], cond: policy_of.Condition,
           now: dt.datetime) -> None:
    from kubernetes.client.exceptions import ApiException

    cur = current(node)
    if cond.same(cur):
        report.unchanged += 1
        return
    target = {TRUE: report.set_true, FALSE: report.set_false}.get(cond.status, report.set_unknown)
    if report.dry_run:
        log.info("node conditions dry run: would set %s=%s (%s) on %s", CONDITION_TYPE, cond.status, cond.reason, name)
        target.append(name)
        return
    try:
        core_v1.patch_node_status(name, _body(cond, cur, now), _content_type=STRATEGIC)
    except ApiException as exc:
        if exc.status == 403:  # the opt-in role is missing: every node would fail the same way
            raise PermissionError(f"patching nodes/status of {name} was refused (403): apply include/k8s/conditions "
                                  f"(kubectl apply -k include/k8s/conditions) or disable node_conditions") from exc
        if exc.status == 404:  # the node left between the list and the patch
            return
        report.errors.append(f"{name}: HTTP {exc.status} {exc.reason}")
        return
    target.append(name)
    log.info("set %s=%s (%s) on %s", CONDITION_TYPE, cond.status, cond.reason, name)


def clear(core_v1: CoreV1, *, node_selector: str = "", dry_run: bool = False) -> list[str]:
    """Remove the condition from every node that has it; returns their names."""
    cleared = []
    for node in _nodes(core_v1, node_selector):
        if current(node) is None:
            continue
        name = node["metadata"]["name"]
        if not dry_run:
            core_v1.patch_node_status(name, {"status": {"conditions": [{"type": CONDITION_TYPE, "$patch": "delete"}]}},
                                      _content_type=STRATEGIC)
        cleared.append(name)
    return cleared
