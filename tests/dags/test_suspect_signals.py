"""The fast path DAG: every fast_path_minutes, read the signals, then trigger a
continuous_validation run limited to the new free suspects, and record which run took them."""

from __future__ import annotations

import datetime as dt


def test_the_fast_path_reads_then_triggers_then_marks(dagbag):
    assert not dagbag.import_errors
    dag = dagbag.dags["suspect_signals"]
    assert [t.task_id for t in dag.topological_sort()] == ["read_signals", "trigger", "mark_triggered"]
    assert dag.max_active_runs == 1 and not dag.catchup
    trigger = dag.get_task("trigger")
    assert trigger.trigger_dag_id == "continuous_validation"
    assert "node_range" not in str(trigger.conf)  # the conf comes whole from read_signals' decision
    assert trigger.wait_for_completion is False and trigger.skip_when_already_exists is True


def test_the_fast_path_runs_every_five_minutes_by_default(dagbag):
    dag = dagbag.dags["suspect_signals"]
    assert dag.timetable.delta == dt.timedelta(minutes=5)
