"""What each task of the daily_fleet_report DAG does. The DAG file only wires these together."""

from __future__ import annotations

import logging
from typing import Any

from cluster_doctor.airflow import runtime, storage
from cluster_doctor.domain.errors import one_line
from cluster_doctor.kube import discovery

log = logging.getLogger(__name__)


def cluster_gpu_nodes(settings: Any) -> list[str] | None:
    """GPU node names from the Kubernetes API (the coverage denominator), or None when the cluster
    cannot be read: the report then falls back to the nodes known to the results DB."""
    try:
        found = discovery.discover(runtime.core_v1(settings.kubernetes_conn_id), settings)
    except Exception as exc:  # the report must not depend on the cluster API being up
        log.warning("GPU nodes not listed from the Kubernetes API (%s); the fleet is taken from the "
                    "results DB", one_line(exc, 300))
        return None
    return [n.name for n in found.free] + [n.name for n in found.ineligible]


def write_report(settings: Any, **kwargs: Any) -> dict[str, Any]:
    """The daily report, written where the settings say (a path or an object store URL), with what
    waits in the attempt spool."""
    from cluster_doctor.reports import daily

    return daily.run(runtime.results_store(settings.validation_db_conn_id), settings,
                     reports_dir=storage.reports_dir(settings), spool=storage.spool(settings).status(), **kwargs)
