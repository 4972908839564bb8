"""verdict: the DagRun's state, what alerting hangs on (step 7)."""

from __future__ import annotations

from cluster_doctor.airflow.tasks._common import log
from cluster_doctor.domain.payloads import RunSummary


def verdict(summary: RunSummary) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from cluster_doctor.reports import summary as report

    problem = report.verdict(summary)
    notices = report.notices(summary)
    if problem:
        raise AirflowFailException("; ".join([problem, *notices]))
    for notice in notices:
        log.warning("%s", notice)
    if summary.why_empty:
        log.info("%s", summary.why_empty)
    log.info("no node failed a check in this run")
