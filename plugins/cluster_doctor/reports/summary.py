"""The end-of-run summary: what happened in this run, what it means for the fleet.

The result is a ``RunSummary`` payload (the summarize task's return value) plus a text rendering for
the task log.
"""

from __future__ import annotations

import collections
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from cluster_doctor.domain import coverage as cov
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.nodes import compress
from cluster_doctor.domain.peers import PEER_SUITE
from cluster_doctor.domain.payloads import (
    AttemptLine,
    Blocked,
    Coverage,
    DeferredPair,
    Discovered,
    IneligibleNode,
    Plan,
    RunSummary,
)
from cluster_doctor.domain.status import FAILING, Status
from cluster_doctor.reports.text import percent, table
from cluster_doctor.store import fleet, inventory
from cluster_doctor.store.history import ResultStore


MAX_DETAIL = 200  # not-eligible nodes listed with their detail in the summary (all are in the inventory)


def coverage(latest_rows: Sequence[Mapping[str, Any]], gpu_nodes: Sequence[str], tests: Sequence[str],
             now: dt.datetime, staleness: dt.timedelta) -> Coverage:
    """Share of GPU nodes whose every enabled test has an executed result younger than ``staleness``
    (the definitions of ``cluster_doctor.domain.coverage``)."""
    return coverage_of(cov.assess(latest_rows, tests=tests, now=now, staleness=staleness,
                                  nodes=sorted(set(gpu_nodes))).summary())


def from_inventory(store: ResultStore, discovered: Discovered,
                   now: dt.datetime) -> tuple[Coverage, list[IneligibleNode]]:
    """The fleet's coverage as every other view counts it (``store.fleet`` over the GPU node
    inventory, one snapshot), and the detail of this run's not-eligible nodes (busy since, by whom),
    at most MAX_DETAIL of them."""
    names = [n.name for n in discovered.ineligible][:MAX_DETAIL]
    with fleet.open_for(discovered.settings, store.connect, now=now, application_name="cluster-doctor-summary") as q:
        covered = coverage_of(q.assessment().summary())
        with q.conn.cursor() as cur:
            rows = inventory.read(cur, names)
    reasons = {n.name: n.reason for n in discovered.ineligible}
    detail = [IneligibleNode(name=name, reason=reasons[name],
                             detail=rows[name].describe() if name in rows else "",
                             gpu_count=(rows[name].gpu_count or 0) if name in rows else 0,
                             gpu_model=rows[name].gpu_model if name in rows else None) for name in names]
    return covered, detail


def coverage_of(assessed: Mapping[str, Any]) -> Coverage:
    """A ``coverage.Assessment.summary()`` as the run summary's Coverage."""
    total = assessed["gpu_nodes"]
    return Coverage(
        gpu_nodes=total,
        covered_nodes=assessed["covered_nodes"],
        coverage=round(assessed["coverage"], 4) if total else None,
        never_validated=sorted(assessed["never_validated"]),
        failing_nodes=sorted(assessed["failing_nodes"]),
        pair_coverage=round(assessed["pair_coverage"], 4) if assessed["pairs"] else None,
    )


def run_summary(
    discovered: Discovered,
    planned: Plan,
    recorded: Sequence[Attempt],
    latest_rows: Sequence[Mapping[str, Any]],
    *,
    now: dt.datetime,
    fleet_coverage: Coverage | None = None,
    detail: Sequence[IneligibleNode] | None = None,
) -> RunSummary:
    """``fleet_coverage`` and ``detail`` from the inventory (``from_inventory``: what the DAG passes);
    without them, coverage over the discovered nodes from ``latest_rows`` (planning only, tests)."""
    counts = {str(status): 0 for status in Status}
    counts.update(collections.Counter(str(a.status) for a in recorded))
    state = {(r["node_name"], r["test_name"]): r for r in latest_rows}
    newly_failing = []
    for a in recorded:
        if a.status not in FAILING:
            continue
        latest = state.get((a.node_name, a.test_name))
        # the failure streak starts with this attempt: the previous executed result was not a failure
        if latest and latest.get("previous_status") in (None, Status.PASS) and \
                latest.get("status") == a.status and latest.get("status_since") == latest.get("finished_at"):
            newly_failing.append(_line(a))
    not_eligible: dict[str, list[str]] = {}
    for node in discovered.ineligible:
        not_eligible.setdefault(node.reason, []).append(node.name)
    gpu_nodes = discovered.gpu_nodes
    return RunSummary(
        run_started_at=discovered.started_at,
        params=discovered.params,
        dry_run=planned.dry_run,
        gpu_nodes=len(gpu_nodes),
        free_nodes=len(discovered.free),
        planned=len(planned.pairs),
        # pairs left to another live run that held their node (cluster_doctor.store.claims)
        deferred=[DeferredPair(node_name=h.node_name, test_name=h.test_name, run_id=h.run_id)
                  for h in planned.held_by_other_runs],
        counts=counts,
        attempts=[_line(a) for a in recorded],
        newly_failing=newly_failing,
        not_eligible={reason: sorted(names) for reason, names in sorted(not_eligible.items())},
        not_eligible_detail=list(detail) if detail is not None else discovered.ineligible[:MAX_DETAIL],
        blocked=blocked(discovered),
        coverage=fleet_coverage or coverage(latest_rows, gpu_nodes, discovered.params.tests, now,
                                            dt.timedelta(days=discovered.settings.staleness_days)),
        warnings=list(discovered.warnings),
    )


def _line(attempt: Attempt) -> AttemptLine:
    return AttemptLine(node_name=attempt.node_name, test_name=attempt.test_name, status=str(attempt.status),
                       reason=attempt.reason, peer=attempt.peer)


def _peer_failures(lines: Sequence[AttemptLine]) -> list[str]:
    """Failed peer tests as node pairs, each once: neither side is blamed by one failed test (the
    fleet's triangulation decides once a third node was tried with each)."""
    pairs = sorted({tuple(sorted((a.node_name, a.peer or "?"))) for a in lines})
    return [f"{a} ↔ {b}" for a, b in pairs]


def blocked(discovered: Discovered) -> Blocked | None:
    """Tests none of whose pods were created because they could not mount a volume, and why (one line)."""
    volumes = discovered.volumes
    if not volumes.blocked_tests:
        return None
    return Blocked(tests=volumes.blocked_tests, reason=volumes.problem, codes=volumes.codes)


def blocked_line(item: Blocked) -> str:
    return f"{item.reason}: no validation pod of {', '.join(item.tests)} was created"


def render(summary: RunSummary) -> str:
    lines = [f"Run summary: {summary.gpu_nodes} GPU node(s), {summary.free_nodes} free, "
             f"{summary.planned} pair(s) planned" + (" (dry run)" if summary.dry_run else "")]
    counts = summary.counts
    lines.append("attempts: " + (", ".join(f"{s} {counts[s]}" for s in Status if counts.get(s)) or "none"))
    if summary.attempts:
        lines.append(table([[a.node_name, a.test_name, a.status, a.reason or ""]
                            for a in summary.attempts], ["NODE", "TEST", "STATUS", "REASON"], max_width=100))
    if summary.blocked:
        lines.append(f"NOT RUN: {blocked_line(summary.blocked)}")
    if summary.deferred:
        lines.append(f"deferred: {len(summary.deferred)} pair(s), their node held by another live run: "
                     f"{compress(d.node_name for d in summary.deferred)}")
    for item in summary.newly_failing:
        if item.test_name == PEER_SUITE:
            lines.append(f"NEWLY SUSPECT: {item.node_name} (peer test with {item.peer or '?'}): {item.reason}")
        else:
            lines.append(f"NEWLY FAILING: {item.node_name} · {item.test_name}: {item.reason}")
    for reason, names in summary.not_eligible.items():
        lines.append(f"not eligible ({reason}): {compress(names)}")
    if summary.why_empty:
        lines.append(summary.why_empty)
    if summary.waited:
        lines.append(summary.waited)
    for line in notices(summary):
        lines.append(f"WARNING: {line}")
    cov = summary.coverage
    if cov is not None and cov.gpu_nodes:
        lines.append(f"coverage: {cov.covered_nodes}/{cov.gpu_nodes} GPU node(s) fully validated within the "
                     f"staleness window ({percent(cov.coverage)}); never validated: {len(cov.never_validated)} GPU "
                     f"node(s); failing: {compress(cov.failing_nodes) or 'none'}")
    return "\n".join(lines)


def notices(summary: RunSummary) -> list[str]:
    """What the verdict says besides its judgement: deployment warnings, results waiting in the spool.
    They never fail a run by themselves (the record task that spooled has failed it already)."""
    out = list(summary.warnings)
    if summary.spool is not None and summary.spool.line:
        out.append(summary.spool.line)
    return out


def verdict(summary: RunSummary) -> str | None:
    """Why the DagRun should fail, or None. A failed run means: this run found a node failing a check
    or a suite erroring, or it could not run its validations (a volume the pods need is unusable).
    Timeouts, preemptions and skips never fail a run."""
    failing = [a for a in summary.attempts if cov.is_failing(a.status)]
    bad = [a for a in failing if a.test_name != PEER_SUITE]
    peer_failed = _peer_failures([a for a in failing if a.test_name == PEER_SUITE])
    # a planned validation that never reported means the run broke (suite shipping, a killed task)
    lost = [a for a in summary.attempts if (a.reason or "").startswith("the validation task did not report")]
    if not bad and not peer_failed and not lost and not summary.blocked and not summary.reservation_breaker:
        return None
    # the deployment problem first: it is why this run (and the next ones) validated nothing
    problems = [blocked_line(summary.blocked)] if summary.blocked else []
    if summary.reservation_breaker:
        problems.append(f"reservation circuit breaker open: {summary.reservation_breaker}")
    if bad:
        shown = "; ".join(f"{a.node_name} · {a.test_name}: {a.status}" for a in bad[:10])
        more = f" (+{len(bad) - 10} more)" if len(bad) > 10 else ""
        problems.append(f"{len(bad)} validation(s) failed in this run: {shown}{more}")
    if peer_failed:
        problems.append(f"{len(peer_failed)} peer test(s) failed between {', '.join(peer_failed[:10])}: both sides "
                        f"suspect until a third node is tried with each (the fleet page's peer column)")
    if lost:
        problems.append(f"{len(lost)} planned validation(s) never reported (see ship_suites / validate)")
    return "; ".join(problems)


NOTE_PREFIX = "Cluster Doctor: "


def note(summary: RunSummary) -> str:
    """The DagRun's note (what the Airflow UI shows on the run): what the run did, or why it planned
    nothing, and what it waited for. Markdown, a few lines."""
    lines = []
    if summary.why_empty:
        lines.append(summary.why_empty)
    else:
        counts = ", ".join(f"{s} {summary.counts[s]}" for s in Status if summary.counts.get(s)) or "nothing recorded"
        nodes = len({a.node_name for a in summary.attempts})
        lines.append(f"{summary.planned} pair(s) planned on {nodes} node(s)"
                     f"{' (dry run)' if summary.dry_run else ''}: {counts}")
    if summary.deferred:
        lines.append(f"deferred {len(summary.deferred)} node(s) held by other runs: "
                     f"{', '.join(sorted({d.run_id or '?' for d in summary.deferred}))}")
    if summary.waited:
        lines.append(summary.waited)
    problem = verdict(summary)
    if problem:
        lines.append(f"FAILED: {problem}")
    return NOTE_PREFIX + "\n\n".join(lines)
