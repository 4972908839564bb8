"""What every stage module of the continuous_validation DAG shares: its logger (one name for every stage,
so a task log and a caplog filter read the same) and the clock."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from cluster_doctor.reports.text import age

log = logging.getLogger("cluster_doctor.airflow.tasks")
WAIT_NOTE_S = 120  # a run that started this long after it was due says what it waited for


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def waited_for(dag_run: Any) -> str | None:
    """``waited_line`` of a DagRun (its type, when it was due, when it started)."""
    return waited_line(str(dag_run.run_type), dag_run.run_after, dag_run.start_date)


def waited_line(run_type: str | None, run_after: dt.datetime | None, started: dt.datetime | None) -> str | None:
    """What the run waited for before it started (its first task logs it, its note says it): a scheduled
    or manual run that started well after it was due waited for a free run slot (``max_active_runs=1``:
    another run of this DAG was still going) or for the scheduler. Backfill runs are due in the past."""
    if run_type not in ("scheduled", "manual") or run_after is None or started is None:
        return None
    waited = (started - run_after).total_seconds()
    if not WAIT_NOTE_S <= waited <= 24 * 3600:
        return None
    return (f"this run started {age(run_after, started)} after it was due ({run_after.isoformat(timespec='minutes')}): "
            "it waited for the run before it to end (max_active_runs=1) or for the scheduler")
