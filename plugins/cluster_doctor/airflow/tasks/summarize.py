"""summarize: counts, newly failing nodes, coverage, the run's CTRF report (step 7)."""

from __future__ import annotations

import datetime as dt

from cluster_doctor.airflow import storage
from cluster_doctor.airflow.tasks._common import _now, log
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.payloads import Discovered, Plan, Recorded, RunSummary, SpoolState
from cluster_doctor.store.history import ResultStore


def summarize(discovered: Discovered, planned: Plan, recorded: Recorded | None, store: ResultStore, *,
              dag_id: str | None = None, run_id: str | None = None, now: dt.datetime | None = None,
              waited: str | None = None, reservation_breaker: str | None = None) -> RunSummary:
    """Counts, newly failing nodes, ineligible nodes, coverage, why nothing was planned, what the run
    waited for; and the run's CTRF report on disk."""
    from cluster_doctor.reports import ctrf
    from cluster_doctor.reports import summary as report

    now = now or _now()
    attempts = recorded.attempts if recorded is not None else []
    latest_rows = store.latest(tests=discovered.params.tests) if discovered.gpu_nodes else []
    fleet_coverage, detail = report.from_inventory(store, discovered, now)  # what every view of the fleet counts
    summary = report.run_summary(discovered, planned, attempts, latest_rows, now=now, fleet_coverage=fleet_coverage,
                                 detail=detail)
    summary = summary.model_copy(update={"spool": spool_state(discovered.settings, now),
                                         "why_empty": planned.why_empty, "waited": waited,
                                         "reservation_breaker": reservation_breaker})
    log.info("%s", report.render(summary))
    if dag_id and run_id:
        path = ctrf.write_run_report([a.to_dict() for a in attempts], summary, settings=discovered.settings,
                                     dag_id=dag_id, run_id=run_id, now=now,
                                     reports_dir=storage.reports_dir(discovered.settings))
        summary = summary.model_copy(update={"ctrf_path": str(path) if path else None})
    return summary


def recorded_or_fail(discovered: Discovered, planned: Plan, recorded: Recorded | None) -> Recorded | None:
    """What record left; None when there was nothing to record. A run that created pods and recorded
    nothing fails here instead, naming what waits in the spool."""
    if recorded is None and planned.creates_pods:
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException(unrecorded(discovered))
    return recorded


def spool_state(settings: Settings, now: dt.datetime) -> SpoolState:
    """What waits in the attempt spool (never raises: an unreadable spool is said to be one)."""
    status = storage.spool(settings).status()
    return SpoolState(location=status.location, waiting=status.waiting, rejected=status.rejected,
                      oldest_at=status.oldest_at, error=status.error, line=status.describe(now))


def unrecorded(discovered: Discovered, now: dt.datetime | None = None) -> str:
    """Why summarize stops when record failed, with what waits in the spool."""
    line = spool_state(discovered.settings, now or _now()).line
    return "the attempts of this run could not be recorded: see the record task" + (f"; {line}" if line else "")
