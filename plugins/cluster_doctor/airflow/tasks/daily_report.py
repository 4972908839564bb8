"""What each task of the daily_fleet_report DAG does. The DAG file only wires these together."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from cluster_doctor.airflow import runtime, storage

log = logging.getLogger(__name__)


def write_report(settings: Any, **kwargs: Any) -> dict[str, Any]:
    """The daily report, written where the settings say (a path or an object store URL), with what
    waits in the attempt spool. Its fleet is the GPU node inventory the continuous_validation runs keep
    (no Kubernetes API call here: every view of the fleet counts the same nodes)."""
    from cluster_doctor.reports import daily
    from cluster_doctor.store import retention

    store = runtime.results_store(settings.validation_db_conn_id)
    written = daily.run(store, settings, reports_dir=storage.reports_dir(settings),
                        spool=storage.spool(settings).status(), ui_base=ui_base(), **kwargs)
    # then the history's retention (setting history_retention_days), after the report read its day;
    # at most a month of days per run, so a first pass over a long history spreads over a few runs
    retention.prune(store.connect, settings, now=dt.datetime.now(dt.UTC), max_days=31)
    return written


def ui_base() -> str:
    """Where the Airflow UI is (``[api] base_url``), for the report's links to node pages and task logs;
    unset: '/', links on the host that serves the report (the UI's own report page)."""
    from airflow.configuration import conf

    return conf.get("api", "base_url", fallback="") or "/"
