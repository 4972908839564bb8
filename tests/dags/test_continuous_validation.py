"""The DAG as Airflow loads it: no import errors or warnings, the contract of its shape."""

import datetime as dt
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


def test_loads_without_import_errors_or_warnings(dagbag):
    assert dagbag.import_errors == {}
    assert dagbag.caught_warnings == []
    assert "continuous_validation" in dagbag.dags


def test_schedule_and_run_limits(dagbag):
    dag = dagbag.dags["continuous_validation"]
    assert dag.schedule == "@hourly"
    assert dag.catchup is False and dag.max_active_runs == 1
    assert dag.dagrun_timeout < dt.timedelta(hours=1)
    assert dag.doc_md and "DagRun state" in dag.doc_md
    assert {"cluster-doctor"} <= set(dag.tags)


def steps(dag) -> list[str]:
    return [t for t in dag.task_ids if t.startswith("validate.") and t != "validate.finish_node"]


def test_tasks_flow_in_one_direction_along_one_line(dagbag):
    """The Graph view: one line from discover to verdict, every edge between neighbours."""
    dag = dagbag.dags["continuous_validation"]
    order = ["discover", "reap_orphans", "load_latest", "prioritize", "ship_suites", *steps(dag),
             "validate.finish_node", "record", "summarize", "verdict"]
    for upstream, downstream in zip(order, order[1:]):
        assert downstream in dag.get_task(upstream).downstream_task_ids, (upstream, downstream)
    assert dag.get_task("reserve").upstream_task_ids == {"discover"}
    assert dag.get_task("reserve").downstream_task_ids == {"prioritize"}
    assert dag.get_task("quarantine").upstream_task_ids == {"record"}
    # no edge skips ahead: a task reads the XComs of tasks further up by id, not as arguments
    assert dag.get_task("discover").downstream_task_ids == {"reap_orphans", "reserve"}
    assert dag.get_task("record").upstream_task_ids == {"validate.finish_node", "sweep.finish_node", "peers.finish"}
    # the peers group beside validate: after ship_suites, plan, one test per pair, finish,
    # then record; the health sweep's too: its bundles, a step per health suite, finish_node
    for upstream, downstream in (("ship_suites", "peers.plan"), ("peers.plan", "peers.test"),
                                 ("peers.test", "peers.finish"), ("ship_suites", "ship_sweep"),
                                 ("ship_sweep", "sweep.gpu_health")):
        assert dag.get_task(downstream).upstream_task_ids == {upstream}
    assert "sweep.gpu_health" in dag.get_task("sweep.finish_node").upstream_task_ids
    assert dag.get_task("ship_suites").upstream_task_ids == {"prioritize"}


def test_peer_tests_are_a_pool_limited_mapped_task_holding_a_slot_per_node(dagbag):
    from airflow.sdk import TriggerRule

    dag = dagbag.dags["continuous_validation"]
    test = dag.get_task("peers.test")
    assert type(test).__name__.endswith("MappedOperator")
    assert test.pool == "gpu_validation" and test.pool_slots == 2 and test.retries == 0
    assert test.map_index_template == "{{ label }}"
    assert test.execution_timeout > dt.timedelta(seconds=1200)  # the pending window and the suite's budget
    assert dag.get_task("peers.finish").trigger_rule == TriggerRule.ALL_DONE
    assert "peers" in dag.doc_md and "peer_tests" in dag.doc_md


def test_orphans_are_reaped_after_discovery_and_before_the_run_reads_results_or_plans(dagbag):
    dag = dagbag.dags["continuous_validation"]
    reap = dag.get_task("reap_orphans")
    assert reap.upstream_task_ids == {"discover"}
    assert {"load_latest", "prioritize"} <= set(reap.get_flat_relative_ids(upstream=False))
    # it never fails, so the default trigger rule is enough for the run to go on
    assert "reap_orphans" in dag.doc_md


def test_validate_is_a_group_mapped_over_nodes_one_kpo_step_per_suite_health_first(dagbag):
    """A node's suites one after another in one run, each step its own pool-limited
    KubernetesPodOperator task; later steps outrank other nodes' first steps for a slot."""
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
    from airflow.sdk import TriggerRule
    from cluster_doctor.airflow.operator import NodeValidationPodOperator

    dag = dagbag.dags["continuous_validation"]
    group = dag.task_group_dict["validate"]
    assert type(group).__name__ == "MappedTaskGroup"
    STEPS = steps(dag)
    assert STEPS[:4] == ["validate.gpu_health", "validate.dl_unit", "validate.nccl_loopback", "validate.storage_fio"]
    assert len(STEPS) == 4  # the enabled suites only (CLUSTER_DOCTOR_TESTS at parse time), not the catalog
    weights = []
    for i, task_id in enumerate(STEPS):
        step = dag.get_task(task_id)
        assert isinstance(step, NodeValidationPodOperator) and isinstance(step, KubernetesPodOperator)
        assert step.pool == "gpu_validation" and step.retries == 0
        assert step.steps_before == tuple(STEPS[:i])
        assert step.trigger_rule == (TriggerRule.ALL_DONE if i else TriggerRule.ALL_SUCCESS)
        assert step.map_index_template.startswith("{{ task.node_name }} · {{ task.test_name }}")
        assert step.weight_rule in ("absolute", getattr(step.weight_rule, "value", None)) or str(step.weight_rule).endswith("absolute")
        weights.append(step.priority_weight)
        if i:
            assert STEPS[i - 1] in step.upstream_task_ids
    assert weights == sorted(weights) and len(set(weights)) == len(weights)
    finish = dag.get_task("validate.finish_node")
    assert finish.trigger_rule == TriggerRule.ALL_DONE and STEPS[-1] in finish.upstream_task_ids


def test_a_step_its_bundle_does_not_plan_is_labelled_not_due_in_the_grid(dagbag):
    """The grid's skipped steps read apart at a glance. A step its node's bundle does not plan is
    skipped without an attempt and labelled "node · test · not due"; a planned step (pass, fail, or an
    attempt recorded skipped) keeps "node · test"; before the bundle is rendered, the plain label."""
    from types import SimpleNamespace

    dag = dagbag.dags["continuous_validation"]
    bundle = {"node_name": "gpu-001", "steps": [{"test_name": "gpu_health", "why": "due"}]}
    labels = {}
    for task_id in steps(dag):
        step = dag.get_task(task_id)
        task = SimpleNamespace(node_name="gpu-001", test_name=step.test_name, bundle=bundle)
        labels[step.test_name] = dag.get_template_env().from_string(step.map_index_template).render(task=task)
    assert labels == {"gpu_health": "gpu-001 · gpu_health", "dl_unit": "gpu-001 · dl_unit · not due",
                      "nccl_loopback": "gpu-001 · nccl_loopback · not due",
                      "storage_fio": "gpu-001 · storage_fio · not due"}
    unrendered = SimpleNamespace(node_name="gpu-001", test_name="dl_unit", bundle=None)
    template = dag.get_task("validate.dl_unit").map_index_template
    assert dag.get_template_env().from_string(template).render(task=unrendered) == "gpu-001 · dl_unit"


def test_the_health_sweep_is_a_group_mapped_over_free_nodes_below_every_bundle_step_in_the_pool(dagbag):
    """The sweep's steps take a pool slot after every due bundle's (a lower priority_weight
    than any validate step, peer tests included), read the attempts of their own group, and record reads
    them too."""
    from airflow.sdk import TriggerRule
    from cluster_doctor.airflow.operator import NodeValidationPodOperator

    dag = dagbag.dags["continuous_validation"]
    assert type(dag.task_group_dict["sweep"]).__name__ == "MappedTaskGroup"
    sweep = [t for t in dag.task_ids if t.startswith("sweep.") and t != "sweep.finish_node"]
    assert sweep == ["sweep.gpu_health"]  # ib_health is not among the enabled suites (CLUSTER_DOCTOR_TESTS)
    step = dag.get_task("sweep.gpu_health")
    assert isinstance(step, NodeValidationPodOperator) and step.pool == "gpu_validation" and step.retries == 0
    assert step.steps_before == () and step.trigger_rule == TriggerRule.ALL_SUCCESS
    assert step.priority_weight < min(dag.get_task(t).priority_weight for t in steps(dag))
    assert step.priority_weight < dag.get_task("peers.test").priority_weight
    finish = dag.get_task("sweep.finish_node")
    assert finish.trigger_rule == TriggerRule.ALL_DONE and "sweep.gpu_health" in finish.upstream_task_ids
    assert "sweep_interval_hours" in dag.doc_md


def test_pool_weights_put_every_sweep_step_below_every_bundle_step():
    from cluster_doctor.domain.planning import steps

    weights = steps.pool_weights(["gpu_health", "ib_health", "dl_unit"], ["gpu_health", "ib_health"])
    assert weights.sweep == (1, 2) and weights.validate == (3, 4, 5) and weights.peer == 3
    assert steps.pool_weights(["dl_unit"], []) == steps.PoolWeights(validate=(1,), sweep=(), peer=1)


def test_every_validation_task_uses_the_pool(dagbag):
    from cluster_doctor.airflow.operator import NodeValidationPodOperator

    for dag in dagbag.dags.values():
        for task in dag.tasks:
            if isinstance(task, NodeValidationPodOperator):
                assert task.pool == "gpu_validation", task.task_id


def test_params_form(dagbag):
    dag = dagbag.dags["continuous_validation"]
    params = dag.params
    assert set(params) == {"node_range", "tests", "stale_before", "max_pairs", "dry_run"}
    for name in params:
        param = params.get_param(name)
        assert param.schema.get("title") and param.description, name
    # the suites the validate group has a step for: those enabled when the DAG was parsed
    assert params.get_param("tests").schema["items"]["enum"] == ["gpu_health", "dl_unit", "nccl_loopback",
                                                                   "storage_fio"]


# What parsing the DAG file may import besides Airflow and the provider: the library and a few small
# packages. The parse time itself is a figure of make bench-discovery; a heavy import (torch, numpy, the
# kubernetes models, ...) added at parse time shows up here, on any machine, whatever its load.
IMPORTED_AT_PARSE = {"airflow", "cluster_doctor", "cluster_doctor_suites", "croniter", "dotenv", "hostlist",
                     "packaging", "psycopg", "psycopg_binary", "pydantic", "pydantic_settings"}


def test_parsing_the_dag_file_imports_nothing_heavy():
    code = ("import json, sys, airflow.sdk, airflow.providers.cncf.kubernetes.operators.pod, runpy\n"
            "before = set(sys.modules)\nrunpy.run_path('dags/continuous_validation.py')\n"
            "new = {m.split('.')[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names)\n"
            "print(json.dumps(sorted(new)))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    imported = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert imported <= IMPORTED_AT_PARSE, sorted(imported - IMPORTED_AT_PARSE)


def test_the_default_trigger_form_is_valid_and_tests_render_as_a_multi_select(dagbag):
    import jsonschema

    params = dagbag.dags["continuous_validation"].params
    # every default validates against its own schema (the UI disables Trigger otherwise)
    for name in params:
        param = params.get_param(name)
        jsonschema.validate(param.value, param.schema)
    node_range = params.get_param("node_range").schema
    assert "null" in node_range["type"]  # not required: empty means every GPU node
    # the UI's rule for a multi-select: type array with `examples` (or a top-level enum)
    tests = params.get_param("tests").schema
    assert tests["type"] == "array" and set(tests["examples"]) == set(tests["items"]["enum"])


@pytest.mark.parametrize("value, ok", [
    (None, True), ("gpu-001", True), ("gpu-[001-064,100]", True), ("gpu-a*", True), ("gpu-00?", True),
    ("gpu-[001-004],cpu-01", True), ("node.example.com", True),
    ("gpu-[001-", False), ("GPU_01", False), ("gpu 001", False), ("rm -rf /", False), ("gpu-001;ls", False),
    ("", True), ("gpu-[]", False),
])
def test_obviously_bad_node_ranges_are_refused_at_trigger_time(dagbag, value, ok):
    import jsonschema

    schema = dagbag.dags["continuous_validation"].params.get_param("node_range").schema
    valid = jsonschema.Draft7Validator(schema).is_valid(value)
    assert valid is ok
