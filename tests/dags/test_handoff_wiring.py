"""The continuous_validation DAG hands off after quarantine, whatever quarantine did."""


def test_handoff_runs_after_quarantine_whatever_it_did(dagbag):
    from airflow.sdk import TriggerRule

    dag = dagbag.dags["continuous_validation"]
    handoff = dag.get_task("handoff")
    assert handoff.upstream_task_ids == {"quarantine"} and handoff.downstream_task_ids == set()
    assert handoff.trigger_rule == TriggerRule.ALL_DONE  # an open breaker fails quarantine, not the hand-off
    assert "handoff_conn_id" in dag.doc_md
