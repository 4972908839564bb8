"""verdict: the DagRun's state, what alerting hangs on (step 7)."""

from __future__ import annotations

from cluster_doctor.airflow.tasks._common import log
from cluster_doctor.domain.payloads import RunSummary


def verdict(summary: RunSummary | None) -> None:
    """Fail the DagRun when a node failed a check, or when the run did not get as far as a summary (None)."""
    from airflow.sdk.exceptions import AirflowFailException

    from cluster_doctor.reports import summary as report

    if summary is None:
        raise AirflowFailException("the run did not complete (discover, plan, record or summarize failed): "
                                   "see the failed task")
    problem = report.verdict(summary)
    notices = report.notices(summary)
    if problem:
        raise AirflowFailException("; ".join([problem, *notices]))
    for notice in notices:
        log.warning("%s", notice)
    if summary.why_empty:
        log.info("%s", summary.why_empty)
    log.info("no node failed a check in this run")
