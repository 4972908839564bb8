"""The continuous_validation DAG opens the acceptance gate right after its record: a gated node
whose whole bundle passed loses the taint at the run's end, not at the next fast-path tick."""


def test_accept_runs_after_record_beside_quarantine(dagbag):
    dag = dagbag.dags["continuous_validation"]
    accept = dag.get_task("accept")
    assert accept.upstream_task_ids == {"record"} and accept.downstream_task_ids == set()
    assert "**accept** (setting `acceptance`)" in dag.doc_md
