"""reserve (opt-in, setting reservation): taint overdue busy nodes and suspects (step 2b)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from cluster_doctor.airflow.tasks import signals
from cluster_doctor.airflow.tasks._common import _now, log
from cluster_doctor.domain.planning import due
from cluster_doctor.domain.planning.params import RunParams
from cluster_doctor.domain.payloads import Discovered
from cluster_doctor.kube import discovery
from cluster_doctor.kube.api import CoreV1
from cluster_doctor.store.history import ResultStore


def reserve(discovered: Discovered, store: ResultStore, core_v1: CoreV1, *, run_id: str,
            now: dt.datetime | None = None) -> Any:
    """Reservation of overdue busy nodes (setting ``reservation``, off by default): release what is done or
    held too long, taint the suspects not tainted yet (busy or free) and the overdue busy nodes within the
    limit; the reserved nodes that are free are planned first. A run limited to a node range leaves the
    taints outside it alone. An open breaker reserves nothing new and fails the run at its verdict, never
    its validations."""
    from cluster_doctor.kube import reservation

    settings = discovered.settings
    policy = settings.reservation
    if not policy.enabled:
        return reservation.ReservationReport(enabled=False)
    run = RunParams.of(discovered.params)
    if run.dry_run:  # a run that only plans taints nothing either
        policy = policy.model_copy(update={"dry_run": True})
    busy = [n.name for n in discovered.ineligible if n.reason == discovery.BUSY]
    free = [n.name for n in discovered.free]
    report = reservation.reserve_and_release(
        core_v1, store.connect, policy, busy=busy, free=free, gpu_nodes=len(discovered.gpu_nodes), tests=run.tests,
        latest=store.pair_states(busy + free, run.tests), due_policy=due.policy(settings, run), run_id=run_id,
        node_selector=settings.node_selector, now=now,
        suspects=signals.current_suspects(store, settings.tests, busy + free, now or _now()),
        node_range=run.node_range)
    log.info("%s", report.describe())
    return report
