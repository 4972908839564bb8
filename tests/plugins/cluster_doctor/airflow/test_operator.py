"""NodeValidationPodOperator pieces that need no cluster (the cluster paths run in tests/e2e)."""

import datetime as dt

import pytest
from cluster_doctor.airflow.operator import NodeValidationPodOperator
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.nodes import InvalidNodeName
from cluster_doctor.kube.pod_lifecycle import Ended


def operator(planned_at, **settings):
    run_config = {"settings": Settings(**settings).to_dict(), "configmap": "cluster-doctor-suites-0",
                  "suite_version": "sha256:0", "suite_files": ["__init__.py"]}
    return NodeValidationPodOperator(task_id="validate", node_name="gpu-001", test_name="dl_unit", gpu_count=8,
                                     planned_at=planned_at.isoformat(), run_config=run_config)


def test_a_decision_older_than_the_max_queue_time_creates_no_pod():
    now = dt.datetime.now(dt.UTC)
    op = operator(now - dt.timedelta(minutes=31))
    with pytest.raises(Ended) as ended:
        op._precheck(now)  # raises before any call to the cluster
    assert ended.value.status == "skipped"
    assert "31 min old, over the max queue time of 30 min; no pod created" in ended.value.reason


def test_the_operator_is_configured_for_validation():
    op = operator(dt.datetime.now(dt.UTC), pending_timeout_s=600, namespace="val")
    assert op.namespace == "val" and op.on_finish_action.value == "delete_pod"
    assert op.schedule_timeout_seconds == 600 and op.deferrable is False and op.do_xcom_push is False
    assert op.termination_message_policy == "FallbackToLogsOnError"


def test_a_bad_node_name_never_becomes_an_operator():
    with pytest.raises(InvalidNodeName):
        NodeValidationPodOperator(task_id="v", node_name="GPU_1", test_name="dl_unit", gpu_count=8,
                                  planned_at="2026-11-22T00:00:00Z", run_config={"settings": {}})


def test_the_kwargs_ship_suites_hands_expand_kwargs_build_the_operator():
    from cluster_doctor.domain.payloads import RunConfig, Validation

    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    run_config = RunConfig(settings=Settings(namespace="val"), configmap="cluster-doctor-suites-0",
                           suite_version="sha256:0", suite_files=["__init__.py"])
    kwargs = Validation(node_name="gpu-001", test_name="dl_unit", gpu_count=8, gpu_model="H200", planned_at=now,
                        why="stale", run_config=run_config).to_xcom()
    op = NodeValidationPodOperator(task_id="validate", **kwargs)
    # what map_index_template="{{ task.node_name }} · {{ task.test_name }}" renders
    assert (op.node_name, op.test_name, op.gpu_count, op.planned_at) == ("gpu-001", "dl_unit", 8, now)
    assert op.run_config == run_config and op.cd_settings.namespace == "val" and op.namespace == "val"


def test_malformed_kwargs_fail_the_task_on_one_line():
    from cluster_doctor.domain.payloads import InvalidPayload

    run_config = {"settings": {}, "configmap": "c", "suite_version": "v"}
    with pytest.raises(InvalidPayload, match="Validation: field planned_at: timestamp: not an ISO-8601 timestamp"):
        NodeValidationPodOperator(task_id="v", node_name="gpu-001", test_name="dl_unit", gpu_count=8,
                                  planned_at="soon", run_config=run_config)
