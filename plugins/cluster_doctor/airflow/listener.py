"""Run notes: when a continuous_validation run ends, its DagRun note (what the Airflow UI shows on the
run) says what it did — or why it planned nothing (all fresh since X, all claimed by run Y, none free) —
and what it waited for. A note a person wrote is never replaced.

An Airflow listener, registered by the plugin: it runs where the run's state changes (the scheduler,
or ``dag.test()``), with the run's own database session, so it reads the summarize task's XCom and
sets the note there; a task cannot (tasks have no metadata database access). Anything going wrong
here is logged and never touches the run.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from airflow.listeners import hookimpl

from cluster_doctor.domain.payloads import RunSummary
from cluster_doctor.reports import summary as report

log = logging.getLogger(__name__)
DAG_ID = "continuous_validation"
SUMMARY_TASK = "summarize"
MAX_NOTE = 1000  # characters: the dag_run_note column


class RunNotes:
    """The listener (an instance, as ``AirflowPlugin.listeners`` takes them)."""

    @hookimpl
    def on_dag_run_success(self, dag_run: Any, msg: str) -> None:
        write_note(dag_run)

    @hookimpl
    def on_dag_run_failed(self, dag_run: Any, msg: str) -> None:
        write_note(dag_run)


def write_note(dag_run: Any) -> str | None:
    """Set the run's note from its summary; the note written, or None (another DAG, a person's note, no
    summary: the run broke before summarize, and its failed task says why)."""
    if getattr(dag_run, "dag_id", None) != DAG_ID:
        return None
    from sqlalchemy.orm import object_session

    try:
        session = object_session(dag_run)
        if session is not None:  # the scheduler: its session, committed with the run's new state
            return _write(session, dag_run)
        # dag.test() hands over a detached run: the note in a session of our own
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session

        with create_session() as own:
            run = own.query(DagRun).filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id).one_or_none()
            return _write(own, run) if run is not None else None
    except Exception as exc:  # noqa: BLE001 - a note is never worth a scheduler error
        log.warning("could not write the note of run %s: %s", getattr(dag_run, "run_id", "?"), exc)
        return None


def _write(session: Any, dag_run: Any) -> str | None:
    current = dag_run.note
    if current and not current.startswith(report.NOTE_PREFIX):
        return None
    summary = _summary(session, dag_run)
    if summary is None:
        return None
    text = report.note(summary)
    text = text if len(text) <= MAX_NOTE else text[:MAX_NOTE - 1] + "…"
    dag_run.note = text
    return text


def _summary(session: Any, dag_run: Any) -> RunSummary | None:
    from airflow.models.xcom import XComModel

    row = session.query(XComModel.value).filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id,
                                                   task_id=SUMMARY_TASK, key="return_value").first()
    if row is None or row[0] is None:
        return None
    value = row[0]
    if isinstance(value, (str, bytes)):
        value = json.loads(value)
    return RunSummary.from_xcom(value)
