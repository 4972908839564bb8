"""Where results wait and reports land, the Airflow way: settings ``spool_dir`` / ``reports_dir`` as
a path or an ``ObjectStoragePath`` URL, and whether the executor lets a local default work.

A plain path stays a ``pathlib.Path`` (fsync'd writes, on a local disk or a shared volume); a URL
(``s3://aws_default@bucket/spool``, ``gs://…``, ``file:///shared/spool``) becomes Airflow's
``ObjectStoragePath``, with the connection named in it. Only this module builds them; the layers
below take either (``cluster_doctor.store.files``).
"""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Mapping
from typing import Any

from cluster_doctor.domain.config import Settings
from cluster_doctor.store import files
from cluster_doctor.store.spool import Spool, default_dir

log = logging.getLogger(__name__)

# Executors whose tasks all run on the host of the scheduler that started them: a per-host spool works.
LOCAL_EXECUTORS = frozenset({"LocalExecutor", "SequentialExecutor", "DebugExecutor"})


def location(configured: str) -> pathlib.Path | Any:
    """A configured location as a path or, for a URL, an ``ObjectStoragePath``."""
    if "://" in configured:
        from airflow.sdk import ObjectStoragePath

        return ObjectStoragePath(configured)
    return pathlib.Path(configured).expanduser()


def spool(settings: Settings, env: Mapping[str, str] | None = None) -> Spool:
    """The attempt spool the settings name (the per-host default when ``spool_dir`` is empty)."""
    if settings.spool_dir:
        return Spool(location(settings.spool_dir))
    return Spool(default_dir(env))


def reports_dir(settings: Settings, env: Mapping[str, str] | None = None) -> pathlib.Path | Any:
    from cluster_doctor.reports.ctrf import resolve_reports_dir

    if settings.reports_dir and "://" in settings.reports_dir:
        return location(settings.reports_dir)
    return resolve_reports_dir(settings.reports_dir, env)


def executors() -> list[str]:
    """The executors configured in ``[core] executor`` (Airflow 3 allows several, comma-separated,
    each a name, a class path, or ``alias:class path``)."""
    from airflow.configuration import conf

    raw = conf.get("core", "executor", fallback="LocalExecutor") or "LocalExecutor"
    return [part.strip() for part in raw.split(",") if part.strip()]


def executor_warning(settings: Settings, configured: list[str] | None = None) -> str | None:
    """Why the spool may strand results under this executor, or None. Tasks of a non-local executor
    (Celery, Kubernetes, Edge, …) run on other hosts or in throw-away pods: a spool at the per-host
    default is seen only by record tasks that happen to land on the same host, or dies with the pod."""
    if settings.spool_dir:
        return None  # set on purpose: a shared volume or an object store
    configured = executors() if configured is None else configured
    remote = [name for name in configured
              if name.rsplit(":", 1)[-1].rsplit(".", 1)[-1] not in LOCAL_EXECUTORS]
    if not remote:
        return None
    return (f"executor {', '.join(remote)} runs tasks on several hosts but the attempt spool is the per-host "
            f"default ({files.describe(spool(settings).directory)}): attempts spooled during a results-database "
            "outage are stranded there; set CLUSTER_DOCTOR_SPOOL_DIR to a shared volume or an object store URL "
            "(docs/deployment.md, Executors)")
