"""The acceptance gate on the nodes (opt-in; the policy is ``cluster_doctor.domain.acceptance``).

Once per read of the cluster (every fast-path tick and every run's discovery, ``gate_new_nodes``):

* nodes carrying the gate's taint key: a pass of every enabled suite since the gate closed removes the taint
  (transition ``accepted``); a failure keeps it (the quarantine policy takes the node; a later pass, after
  a repair, opens the gate); no answer within ``max_hold_hours`` removes it and reports the node
  (``released``, cause 'acceptance gate: max hold'). A node the provisioning tainted gets our gated-at
  annotation the first time we see it: its hold counts from then;
* nodes the inventory reports new, rebooted or uncordoned after our quarantine (``policy.changes``): the
  taint, within ``max_nodes`` and the breaker (transition ``gated``); every one of them, gated or not, is
  recorded as suspect, so its whole bundle runs first and the fast path starts it within minutes.

A dry run logs what it would do, patches nothing and writes no transition (the suspicion is still
recorded: it only orders validations). Patches carry the node's resourceVersion (``node_patch``) and need
only ``patch`` on nodes: the opt-in ClusterRole in include/k8s/acceptance/.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from cluster_doctor.domain import acceptance as gate
from cluster_doctor.domain import signals, timestamps
from cluster_doctor.domain import transitions as life
from cluster_doctor.domain.acceptance import ANN_SINCE, ANN_WHY, AcceptancePolicy
from cluster_doctor.kube.api import CoreV1
from cluster_doctor.kube.node_patch import annotation_time, is_quarantined, patch_node, taints
from cluster_doctor.store import suspects, transitions
from cluster_doctor.store.history import ResultStore

log = logging.getLogger(__name__)
SOURCE = {"new": signals.NEW_NODE, "reboot": signals.REBOOT, "uncordoned": signals.UNCORDONED,
          gate.PROVISIONED: signals.NEW_NODE}


@dataclasses.dataclass
class AcceptanceReport:
    enabled: bool
    dry_run: bool = False
    gated: list[str] = dataclasses.field(default_factory=list)  # carrying the taint after this read's changes
    applied: dict[str, str] = dataclasses.field(default_factory=dict)  # node -> why (new, reboot, ...)
    accepted: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)  # kept out: a suite failed since the gate
    let_go: list[str] = dataclasses.field(default_factory=list)  # max hold: taint removed, reported
    # over the limit or past the breaker: not tainted, validated first all the same
    waiting: list[str] = dataclasses.field(default_factory=list)
    breaker_open: bool = False
    breaker_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        if not self.enabled:
            return "acceptance gate disabled (setting acceptance.enabled)"
        verb = "would " if self.dry_run else ""
        parts = [f"{verb}gate {len(self.applied)}: " + (", ".join(f"{n} ({w})" for n, w in sorted(self.applied.items()))
                                                        or "-"),
                 f"{verb}accept {len(self.accepted)}: {', '.join(self.accepted) or '-'}",
                 f"gated now {len(self.gated)}"]
        if self.failed:
            parts.append(f"kept out, failed since gated: {', '.join(self.failed)}")
        if self.let_go:
            parts.append(f"{verb}let go at the maximum hold, never validated: {', '.join(self.let_go)}")
        if self.waiting:
            parts.append(f"not gated (limit or breaker): {len(self.waiting)}")
        if self.breaker_open:
            parts.insert(0, f"ACCEPTANCE BREAKER OPEN: {self.breaker_reason}")
        return "; ".join(parts)


def is_gated(node: Mapping[str, Any], policy: AcceptancePolicy) -> bool:
    return any(t.get("key") == policy.taint_key for t in taints(node))


def _since(node: Mapping[str, Any]) -> dt.datetime | None:
    return annotation_time(node, ANN_SINCE)


def gate_new_nodes(core_v1: CoreV1, store: ResultStore, policy: AcceptancePolicy, *,
                   changes: Sequence[signals.NodeChange], tests: Sequence[str], run_id: str, node_selector: str = "",
                   now: dt.datetime | None = None) -> AcceptanceReport:
    """One read's gate; see the module docstring. ``changes``: what the inventory says changed with this
    discovery; ``tests``: the enabled suites (all must pass). Makes no call at all when disabled."""
    if not policy.enabled:
        return AcceptanceReport(enabled=False)
    from cluster_doctor.kube.listing import paginate

    now = now or dt.datetime.now(dt.UTC)
    report = AcceptanceReport(enabled=True, dry_run=policy.dry_run)
    nodes = {n["metadata"]["name"]: n for n in paginate(
        core_v1.list_node, [0], **({"label_selector": node_selector} if node_selector else {}))}
    ours = {name: n for name, n in nodes.items() if is_gated(n, policy)}
    _open_or_keep(core_v1, store, policy, ours, tests, report, run_id=run_id, now=now)

    asking = {c.node_name: c.kind for c in changes if c.kind in policy.changes and c.node_name in nodes
              and c.node_name not in ours and not is_quarantined(nodes[c.node_name])}
    choice = gate.choose(list(asking), gated=len(report.gated), policy=policy)
    report.waiting = choice.waiting
    if choice.breaker_open:
        report.breaker_open, report.breaker_reason = True, choice.breaker_reason
        log.error("acceptance CIRCUIT BREAKER OPEN: %s", choice.breaker_reason)
    for name in choice.gate:
        _close(core_v1, store, policy, nodes[name], asking[name], run_id=run_id, now=now)
        report.applied[name] = asking[name]
        report.gated.append(name)
    ungated = ("breaker open, NOT tainted" if choice.breaker_open
               else f"over acceptance.max_nodes ({policy.max_nodes}), NOT tainted")
    _suspect(store, {**asking, **{n: gate.PROVISIONED for n in report.applied if n not in asking}}, now,
             ungated={n: ungated for n in choice.waiting})
    log.info("%s", report.describe())
    return report


def _open_or_keep(core_v1: CoreV1, store: ResultStore, policy: AcceptancePolicy, ours: Mapping[str, Mapping[str, Any]],
                  tests: Sequence[str], report: AcceptanceReport, *, run_id: str, now: dt.datetime) -> None:
    """The gated nodes: accepted, let go at the maximum hold, or kept (failed, or waiting for their bundle)."""
    states = store.pair_states(list(ours), list(tests)) if ours else {}
    provisioned = {}
    for name, node in sorted(ours.items()):
        since = _since(node)
        if since is None:  # the provisioning's taint: the hold counts from our first sight of it
            provisioned[name] = gate.PROVISIONED
            if not policy.dry_run:
                patch_node(core_v1, node, lambda _n: {"metadata": {"annotations": {
                    ANN_SINCE: timestamps.rfc3339(now), ANN_WHY: gate.PROVISIONED}}})
            since = now
        verdict = gate.judge({t: states.get((name, t)) for t in tests}, tests, since=since, now=now, policy=policy)
        if verdict == gate.PASSED:
            if _open(core_v1, store, policy, node, life.ACCEPTED,
                     f"every enabled suite passed since {timestamps.rfc3339(since)}", run_id=run_id, now=now):
                report.accepted.append(name)
        elif verdict == gate.MAX_HOLD:
            if _open(core_v1, store, policy, node, life.RELEASED,
                     f"acceptance gate: max hold ({policy.max_hold_hours:g} h) with no validation answered: let go, "
                     "not validated", run_id=run_id, now=now):
                log.error("acceptance gate: %s held %s without a validation answering: taint removed, node NOT "
                          "validated", name, now - since)
                report.let_go.append(name)
        else:
            report.gated.append(name)
            if verdict == gate.FAILED:
                report.failed.append(name)
                log.warning("acceptance gate: %s failed a suite since gated: kept out (quarantine policy)", name)
    _suspect(store, provisioned, now)


def _close(core_v1: CoreV1, store: ResultStore, policy: AcceptancePolicy, node: Mapping[str, Any], why: str, *,
           run_id: str, now: dt.datetime) -> None:
    name = node["metadata"]["name"]
    if policy.dry_run:
        log.info("acceptance dry run: would taint %s %s:NoSchedule (%s)", name, policy.taint_key, why)
        return

    def build(current: Mapping[str, Any]) -> dict[str, Any]:
        # a merge patch replaces the taint list whole: the node's own taints plus ours
        others = [t for t in taints(current) if t.get("key") != policy.taint_key]
        return {"metadata": {"annotations": {ANN_SINCE: timestamps.rfc3339(now), ANN_WHY: why}},
                "spec": {"taints": others + [policy.taint]}}

    patch_node(core_v1, node, build)
    transitions.record(store.connect, [life.Transition(name, life.GATED, now, f"acceptance gate: {why}",
                                                       {"taint": policy.taint_key}, run_id)])
    log.warning("acceptance gate: %s tainted %s:NoSchedule (%s): no user pod lands until its bundle passes",
                name, policy.taint_key, why)


def _open(core_v1: CoreV1, store: ResultStore, policy: AcceptancePolicy, node: Mapping[str, Any], kind: str,
          cause: str, *, run_id: str, now: dt.datetime) -> bool:
    """Remove the taint; False when another reader (a fast-path tick beside a run's accept task) removed it
    first: its transition is already recorded, not twice."""
    name = node["metadata"]["name"]
    if policy.dry_run:
        log.info("acceptance dry run: would remove the taint %s from %s (%s)", policy.taint_key, name, cause)
        return True
    gone = []

    def build(current: Mapping[str, Any]) -> dict[str, Any]:
        kept = [t for t in taints(current) if t.get("key") != policy.taint_key]
        if len(kept) == len(taints(current)):  # a conflict's re-read: someone else opened it
            gone.append(True)
            return {}
        return {"metadata": {"annotations": {ANN_SINCE: None, ANN_WHY: None}}, "spec": {"taints": kept}}

    patch_node(core_v1, node, build)
    if gone:
        log.info("acceptance gate: %s already opened by another read", name)
        return False
    transitions.record(store.connect, [life.Transition(name, kind, now, cause, {"taint": policy.taint_key}, run_id)])
    log.warning("acceptance gate: %s %s: taint %s removed (%s)", name, life.SHOWN[kind], policy.taint_key, cause)
    return True


def _suspect(store: ResultStore, why: Mapping[str, str], now: dt.datetime, *,
             ungated: Mapping[str, str] | None = None) -> None:
    """The gated nodes, and those the limit or the breaker left untainted, are suspect: whole bundle first,
    the fast path starts it. ``ungated``: node -> why it carries no taint, said in its evidence (the fleet
    page, the node page and ``cluster-doctor status`` show it)."""
    if not why:
        return
    ungated = ungated or {}

    def text(name: str, kind: str) -> str:
        if name in ungated:
            return f"acceptance gate ({kind}): {ungated[name]}: its whole bundle first, users not held"
        return f"acceptance gate ({kind}): its whole bundle before users"

    at = timestamps.rfc3339(now)
    suspects.record(store.connect, [signals.Evidence(name, SOURCE[kind], f"acceptance {at}", text(name, kind), now)
                                    for name, kind in sorted(why.items())], seen_at=now)
