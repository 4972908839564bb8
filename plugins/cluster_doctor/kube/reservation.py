"""Reservation of overdue nodes (opt-in): our NoSchedule taint on busy nodes that will exceed
their staleness target soon, so that no new user pod lands when their job ends and the next run
validates them — and on suspect nodes, busy or free, so that none lands before their
validation; removed when their validation is done, at the maximum hold, or when they are no longer
overdue (or suspect). The policy is ``cluster_doctor.domain.reservation``; what was done and what it cost
is in the results database (``cluster_doctor.store.reservations``, table ``node_reservations``).

Once per run, before planning (``reserve_and_release``):

* nodes carrying our taint: still busy → noted (the idle cost is counted from the last time a run saw
  them busy); free → noted as free since now at the latest, and planned first; held longer than
  ``max_hold_hours``, no longer overdue (another run validated them), cordoned, not ready or
  quarantined → the taint is removed;
* new reservations: suspect nodes (a signal said they may be broken), busy or free, first;
  then busy nodes (never cordoned, not ready, tainted by others or quarantined) with a due pair whose
  oldest pair reaches the target within the lead, stalest first; within the limit at once; when more
  than ``breaker_share`` of the GPU nodes are overdue at once, none (the breaker: the run fails, a human
  decides). A run limited to a node range (a manual one, or the fast path's) leaves the taints on nodes
  outside it as they are (they still count against the limit).

Removals need no breaker (they only give capacity back). Every taint applied or removed is logged and
counted (a row opened or closed). A dry run computes and logs everything, patches nothing, writes no
row. Patches carry the node's resourceVersion (a concurrent edit is retried, never overwritten) and
need only ``patch`` on nodes: the opt-in ClusterRole in include/k8s/reservation/.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from cluster_doctor.domain.planning import due
from cluster_doctor.domain import reservation as policy_of
from cluster_doctor.domain import timestamps
from cluster_doctor.domain.nodes import NodeRange
from cluster_doctor.domain.reservation import (
    ANN_RUN,
    ANN_SINCE,
    KEY,
    MAX_HOLD,
    NOT_ELIGIBLE,
    NOT_OVERDUE,
    TAINT,
    VALIDATED,
    ReservationPolicy,
)
from cluster_doctor.kube.api import CoreV1
from cluster_doctor.kube.node_patch import annotation_time, is_quarantined, patch_node, read_node, taints
from cluster_doctor.store import reservations as rows

log = logging.getLogger(__name__)


@dataclasses.dataclass
class ReservationReport:
    enabled: bool
    dry_run: bool = False
    reserved: list[str] = dataclasses.field(default_factory=list)  # carrying our taint after this run's changes
    free: list[str] = dataclasses.field(default_factory=list)  # of those, free now: plan them first
    applied: list[str] = dataclasses.field(default_factory=list)
    released: dict[str, str] = dataclasses.field(default_factory=dict)  # node -> why
    waiting: list[str] = dataclasses.field(default_factory=list)  # overdue, over the limit
    breaker_open: bool = False
    breaker_reason: str | None = None
    limit: int = 0
    gpu_nodes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ReservationReport:
        """Read back from XCom (None: the task did not run: nothing reserved)."""
        return cls(**data) if data else cls(enabled=False)

    def describe(self) -> str:
        if not self.enabled:
            return "reservation is disabled (setting reservation.enabled): no node was tainted"
        verb = "would " if self.dry_run else ""
        parts = [f"{verb}reserve {len(self.applied)}: {', '.join(self.applied) or '-'}",
                 f"{verb}release {len(self.released)}: " + (", ".join(f"{n} ({why})" for n, why in
                                                                   sorted(self.released.items())) or "-"),
                 f"reserved now {len(self.reserved)} of at most {self.limit} (free, planned first: "
                 f"{', '.join(self.free) or '-'})"]
        if self.waiting:
            parts.append(f"overdue over the limit, next run: {len(self.waiting)}")
        if self.breaker_open:
            parts.insert(0, f"CIRCUIT BREAKER OPEN: {self.breaker_reason}")
        return "; ".join(parts)


# ---------------------------------------------------------------------------- the node side
def is_reserved(node: Mapping[str, Any]) -> bool:
    return any(t.get("key") == KEY for t in taints(node))


def _since(node: Mapping[str, Any]) -> dt.datetime | None:
    return annotation_time(node, ANN_SINCE)


def _reserve_body(now: dt.datetime, run_id: str):
    def build(node: Mapping[str, Any]) -> dict[str, Any]:
        # taints are replaced as a whole by a patch: the node's own plus ours
        others = [t for t in taints(node) if t.get("key") != KEY]
        return {"metadata": {"annotations": {ANN_SINCE: timestamps.rfc3339(now), ANN_RUN: run_id[:250]}},
                "spec": {"taints": others + [dict(TAINT)]}}
    return build


def _release_body(node: Mapping[str, Any]) -> dict[str, Any]:
    return {"metadata": {"annotations": {ANN_SINCE: None, ANN_RUN: None}},
            "spec": {"taints": [t for t in taints(node) if t.get("key") != KEY]}}


# ---------------------------------------------------------------------------- once per run
def reserve_and_release(
    core_v1: CoreV1,
    connect: Any,
    policy: ReservationPolicy,
    *,
    busy: Sequence[str],
    free: Sequence[str],
    gpu_nodes: int,
    tests: Sequence[str],
    latest: Mapping[tuple[str, str], due.PairState],
    due_policy: due.Policy,
    run_id: str,
    node_selector: str = "",
    now: dt.datetime | None = None,
    suspects: Collection[str] = (),
    node_range: NodeRange | None = None,
) -> ReservationReport:
    """One run's reservations; see the module docstring. ``busy``/``free``: this run's discovery (busy: a
    user pod holds the GPUs; eligible otherwise) within ``node_range`` (None: every GPU node); ``latest``:
    the pair states of those nodes; ``suspects``: nodes a signal made suspect: one not
    reserved yet, busy or free, is reserved first, within the same limit and breaker, and kept until
    validated (a free one is planned first, released when its bundle is done). Makes no call at all when
    disabled. Long: the steps read in the order they happen, each a few lines."""
    if not policy.enabled:
        return ReservationReport(enabled=False)
    from cluster_doctor.kube import discovery

    now = now or dt.datetime.now(dt.UTC)
    report = ReservationReport(enabled=True, dry_run=policy.dry_run, gpu_nodes=gpu_nodes,
                               limit=policy.limit(gpu_nodes))
    kwargs = {"label_selector": node_selector} if node_selector else {}
    nodes = {n["metadata"]["name"]: n for n in discovery.paginate(core_v1.list_node, [0], **kwargs)}
    ours = {name: n for name, n in nodes.items() if is_reserved(n)}
    # a ranged run did not discover the others: their taints are not its business (it would release them)
    elsewhere = {name for name in ours if node_range is not None and not node_range.matches(name)}
    busy_set, free_set = set(busy), set(free)
    overdue_now = {o.node_name for o in policy_of.overdue(
        sorted(busy_set | free_set), tests, latest, now=now, due_policy=due_policy, policy=policy)}
    overdue_now |= set(suspects) & (busy_set | free_set)  # a suspect is due whatever its staleness
    _review(core_v1, connect, policy, report, {name: n for name, n in ours.items() if name not in elsewhere},
            busy=busy_set, free=free_set, overdue_now=overdue_now, now=now)

    # a free suspect too: a user job could land on it any moment before our pod does
    first = [policy_of.Overdue(n, None) for n in sorted(set(suspects) & ((busy_set | free_set) - set(ours)))]
    candidates = [o for o in first + [o for o in policy_of.overdue(
        sorted(busy_set - set(ours)), tests, latest, now=now, due_policy=due_policy, policy=policy)
        if o.node_name not in set(suspects)] if not is_quarantined(nodes.get(o.node_name) or {})]
    choice = policy_of.choose(candidates, reserved=len(report.reserved) + len(elsewhere),
                              overdue_reserved=len(set(report.reserved) & overdue_now) + len(elsewhere),
                              gpu_nodes=gpu_nodes, policy=policy)
    report.waiting = [o.node_name for o in choice.waiting]
    if choice.breaker_open:
        report.breaker_open, report.breaker_reason = True, choice.breaker_reason
        log.error("reservation CIRCUIT BREAKER OPEN: %s", choice.breaker_reason)
        return report
    for overdue in choice.reserve:
        node = nodes.get(overdue.node_name)
        if node is not None:
            _reserve(core_v1, connect, node, overdue, policy, run_id=run_id, now=now,
                     suspect=overdue.node_name in suspects)
            report.applied.append(overdue.node_name)
            report.reserved.append(overdue.node_name)
            if overdue.node_name in free_set:  # planned first and released when its bundle is done
                report.free.append(overdue.node_name)
    return report


def _review(core_v1: CoreV1, connect: Any, policy: ReservationPolicy, report: ReservationReport,
            ours: Mapping[str, Mapping[str, Any]], *, busy: Collection[str], free: Collection[str],
            overdue_now: Collection[str], now: dt.datetime) -> None:
    """``reserve_and_release``'s first step: each taint of ours this run discovered is kept (noted busy, or free since
    now at the latest) or removed, and why (into ``report``)."""
    known = {} if policy.dry_run else rows.open_reservations(connect)
    for name, node in sorted(ours.items()):
        since = _since(node) or (known[name].reserved_at if name in known else None)
        why = None
        if (name not in busy and name not in free) or is_quarantined(node):
            why = NOT_ELIGIBLE  # cordoned, not ready, tainted by someone else, quarantined, gone from range
        elif name not in overdue_now:
            why = NOT_OVERDUE
        elif since is not None and now - since >= policy.max_hold():
            why = MAX_HOLD
        if why:
            _release(core_v1, connect, node, policy, why, now, free=name in free)
            report.released[name] = why
            continue
        report.reserved.append(name)
        if name in free:
            report.free.append(name)
        if not policy.dry_run:
            rows.seen(connect, name, busy=name in busy, at=now)


def reserve_suspects(core_v1: CoreV1, connect: Any, policy: ReservationPolicy, *, suspects: Collection[str],
                     gpu_nodes: int, run_id: str, node_selector: str = "",
                     now: dt.datetime | None = None) -> ReservationReport:
    """The fast path's part: taint the suspects ``suspects`` now, busy or free (never a
    quarantined node), so no new user job lands on them before their validation — a busy one once its
    running job ends, a free one from now (its idle time until our pod is counted as a reservation's);
    within the same limit and breaker as ``reserve_and_release`` (every node carrying our taint counts against the
    limit, and as overdue for the breaker). Releases are left to the run that validates them
    (``release_after_validation``) and the runs' ``reserve_and_release``. Makes no call at all when disabled or when
    there is no suspect."""
    if not policy.enabled or not suspects:
        return ReservationReport(enabled=policy.enabled)
    now = now or dt.datetime.now(dt.UTC)
    report = ReservationReport(enabled=True, dry_run=policy.dry_run, gpu_nodes=gpu_nodes,
                               limit=policy.limit(gpu_nodes))
    from cluster_doctor.kube import discovery

    kwargs = {"label_selector": node_selector} if node_selector else {}
    nodes = {n["metadata"]["name"]: n for n in discovery.paginate(core_v1.list_node, [0], **kwargs)}
    report.reserved = sorted(name for name, n in nodes.items() if is_reserved(n))
    candidates = [policy_of.Overdue(n, None) for n in sorted(suspects)
                  if n in nodes and n not in report.reserved and not is_quarantined(nodes[n])]
    choice = policy_of.choose(candidates, reserved=len(report.reserved), overdue_reserved=len(report.reserved),
                              gpu_nodes=gpu_nodes, policy=policy)
    report.waiting = [o.node_name for o in choice.waiting]
    if choice.breaker_open:
        report.breaker_open, report.breaker_reason = True, choice.breaker_reason
        log.error("reservation CIRCUIT BREAKER OPEN: %s", choice.breaker_reason)
        return report
    for suspect in choice.reserve:
        _reserve(core_v1, connect, nodes[suspect.node_name], suspect, policy, run_id=run_id, now=now, suspect=True)
        report.applied.append(suspect.node_name)
        report.reserved.append(suspect.node_name)
    return report


def _reserve(core_v1: CoreV1, connect: Any, node: Mapping[str, Any], overdue: policy_of.Overdue,
             policy: ReservationPolicy, *, run_id: str, now: dt.datetime, suspect: bool) -> None:
    """Our taint on one chosen node (logged only in a dry run), and its row opened."""
    oldest = overdue.oldest.isoformat(timespec="minutes") if overdue.oldest else \
        "suspect" if suspect else "never validated"
    if policy.dry_run:
        log.info("reservation dry run: would taint %s %s:NoSchedule (oldest result: %s)", overdue.node_name,
                 KEY, oldest)
        return
    patch_node(core_v1, node, _reserve_body(now, run_id))
    rows.opened(connect, overdue.node_name, gpu_count=_gpus(node), run_id=run_id, at=now)
    log.warning("reserved %s: taint %s:NoSchedule, no new user pod lands on it; it is validated once free "
                "(oldest result: %s)", overdue.node_name, KEY, oldest)


def _gpus(node: Mapping[str, Any]) -> int:
    from cluster_doctor.kube.discovery import parse_quantity

    allocatable = (node.get("status") or {}).get("allocatable") or {}
    try:
        return max((int(parse_quantity(v)) for k, v in allocatable.items() if k.endswith("/gpu")), default=0)
    except ValueError:
        return 0


def _release(core_v1: CoreV1, connect: Any, node: Mapping[str, Any], policy: ReservationPolicy, why: str,
             now: dt.datetime, *, free: bool) -> float:
    name = node["metadata"]["name"]
    if policy.dry_run:
        log.info("reservation dry run: would remove the taint %s from %s (%s)", KEY, name, why)
        return 0.0
    patch_node(core_v1, node, _release_body)
    idle = rows.closed(connect, name, reason=why, at=now, free=free)
    log.warning("released %s: taint %s removed (%s); it stood idle for validation %.1f GPU-hour(s)", name, KEY,
                why, idle)
    return idle


def release_after_validation(core_v1: CoreV1, connect: Any, node_name: str, *, policy: ReservationPolicy,
                             run_id: str, now: dt.datetime | None = None) -> bool:
    """The node's validation is done (pass or fail: a fail is the quarantine policy's business): remove
    our taint now, not at the next run. False when the node carries no taint of ours any more."""
    now = now or dt.datetime.now(dt.UTC)
    node = read_node(core_v1, node_name)
    if not is_reserved(node):
        return False
    _release(core_v1, connect, node, policy, VALIDATED, now, free=True)
    log.info("run %s validated reserved node %s", run_id, node_name)
    return True
