"""quarantine (opt-in, setting quarantine): label/taint confirmed failures (step 8)."""

from __future__ import annotations

import datetime as dt

from cluster_doctor.airflow.tasks._common import log
from cluster_doctor.domain.payloads import Discovered
from cluster_doctor.domain.quarantine import QuarantineReport
from cluster_doctor.kube.api import CoreV1
from cluster_doctor.store.history import ResultStore


def quarantine(discovered: Discovered, store: ResultStore, core_v1: CoreV1, *, run_id: str | None = None,
               now: dt.datetime | None = None) -> QuarantineReport:
    """Label (and optionally taint) nodes with confirmed failures, release recovered ones, name repeat
    offenders (settings repeat_offender_*); off by default. An open circuit breaker fails the
    task: a human decides."""
    from cluster_doctor.domain.transitions import RepeatPolicy
    from cluster_doctor.kube import quarantine as q

    settings = discovered.settings
    report = q.quarantine_failing(core_v1, store.connect, settings.quarantine,
                         tests=discovered.params.tests, gpu_resource=settings.gpu_resource,
                         node_selector=settings.node_selector, now=now, repeat=RepeatPolicy.of(settings),
                         run_id=run_id, slow_window=dt.timedelta(hours=settings.slow_signal_window_hours),
                         slow_spacing=dt.timedelta(hours=settings.slow_confirm_spacing_hours))
    log.info("%s", report.describe())
    if report.breaker_open:
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException(f"quarantine circuit breaker open: {report.breaker_reason}")
    return report
