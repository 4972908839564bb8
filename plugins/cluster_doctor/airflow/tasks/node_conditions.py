"""The body of the continuous_validation DAG's opt-in node_conditions task: after `record`, every GPU
node's `ClusterDoctorHealthy` condition from the latest verdict of every enabled suite
(cluster_doctor.kube.conditions). Off by default (setting node_conditions); makes no Kubernetes call
then. The DAG's node_conditions task, beside quarantine after `record`, calls it.
"""

from __future__ import annotations

import datetime as dt
import logging

from cluster_doctor.domain.conditions import ConditionReport
from cluster_doctor.domain.payloads import Discovered
from cluster_doctor.kube.api import CoreV1
from cluster_doctor.store.history import ResultStore

log = logging.getLogger(__name__)


def node_conditions(discovered: Discovered, store: ResultStore, core_v1: CoreV1,
                    now: dt.datetime | None = None) -> ConditionReport:
    """Write the conditions; an open circuit breaker or a patch that kept failing fails the task (a human
    decides), after every other node was written. A node's health is judged over every enabled suite
    (the setting `tests`), not over the subset a manual run chose."""
    from cluster_doctor.kube import conditions

    settings = discovered.settings
    report = conditions.publish_conditions(
        core_v1, store.connect, settings.node_conditions, tests=list(settings.tests),
        stale_after=dt.timedelta(days=settings.staleness_days), gpu_resource=settings.gpu_resource,
        node_selector=settings.node_selector, now=now, slow_window=dt.timedelta(hours=settings.slow_signal_window_hours),
        slow_spacing=dt.timedelta(hours=settings.slow_confirm_spacing_hours))
    log.info("%s", report.describe())
    if report.breaker_open or report.errors:
        from airflow.sdk.exceptions import AirflowFailException

        why = f"circuit breaker open: {report.breaker_reason}" if report.breaker_open else report.describe()
        raise AirflowFailException(f"node conditions {why}")
    return report
