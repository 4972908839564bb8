"""The seven end-to-end scenarios of the continuous_validation DAG (plus bad input), each a real
DagRun through Airflow against the Kubernetes API emulator and a real PostgreSQL results DB."""

from __future__ import annotations

import datetime as dt
import threading
import time

import psycopg
import pytest
from cluster_doctor.domain.planning import due
from cluster_doctor.store.history import ResultStore

from tests.e2e.conftest import NAMESPACE, PVC
from tests.support.suite_results import script_result, summary, validation_pods
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.e2e


def rows(db_dsn, where="TRUE", params=()):
    with psycopg.connect(**db_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT node_name, test_name, status, reason, gpu_model, checks, run_id, pod_name "
                    f"FROM validation_history WHERE {where} ORDER BY node_name, test_name, finished_at", params)
        cols = [c.name for c in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]


def validate_states(result) -> dict:
    """The states of the validate group's steps of the run's suites, by label (the steps of suites the
    run does not enable skip themselves: not planned on any node)."""
    tests = set((result["summary"] or {}).get("params", {}).get("tests") or ["gpu_health"])
    return {label: state for (task, label), state in result["states"].items()
            if task.startswith("validate.") and task.split(".", 1)[1] in tests}


# 1 ------------------------------------------------------------------------------------------------
# covered fast by kube/test_against_emulator.py (who is free, and why not), airflow/test_tasks.py (not_eligible
# in the summary), airflow/test_operator_lifecycle.py (a pass recorded, its pod deleted); pods and rows of a
# real scheduler's run, pool slots included: the stack test
@pytest.mark.slow
def test_only_free_gpu_nodes_are_validated_and_the_others_are_explained(runner, cluster, db_dsn):
    for i in range(1, 11):
        product = "NVIDIA-H200" if i % 2 else "NVIDIA-H100-80GB-HBM3"
        cluster.add_gpu_node(f"gpu-{i:03d}", gpus=8, product=product)
    cluster.add_user_pod("gpu-007", gpus=8)
    cluster.add_user_pod("gpu-008", gpus=1, kind="Deployment")
    cluster.cordon("gpu-009")
    cluster.set_node_ready("gpu-010", False)
    cluster.add_gpu_node("cpu-001", gpus=0)  # not a GPU node at all
    for i in range(1, 7):
        script_result(cluster, f"gpu-{i:03d}", gpu_model="NVIDIA-H200" if i % 2 else "NVIDIA-H100-80GB-HBM3")

    result = runner.run()

    assert result["state"] == "success", runner.last_log[-3000:]
    assert validate_states(result) == {f"gpu-{i:03d} · gpu_health": "success" for i in range(1, 7)}
    pods = validation_pods(cluster)
    assert sorted(p["node"] for p in pods) == [f"gpu-{i:03d}" for i in range(1, 7)]
    assert all(p["deleted"] for p in pods)
    recorded = rows(db_dsn)
    assert [(r["node_name"], r["status"]) for r in recorded] == [(f"gpu-{i:03d}", "pass") for i in range(1, 7)]
    assert {r["node_name"]: r["gpu_model"] for r in recorded}["gpu-001"] == "NVIDIA-H200"
    assert {r["node_name"]: r["gpu_model"] for r in recorded}["gpu-002"] == "NVIDIA-H100-80GB-HBM3"
    not_eligible = result["summary"]["not_eligible"]
    assert not_eligible == {"busy": ["gpu-007", "gpu-008"], "cordoned": ["gpu-009"], "not ready": ["gpu-010"]}
    # the validation tasks ran through the pool, never more pods at once than its slots
    assert max_concurrent(pods) <= 2


def max_concurrent(pods) -> int:
    events = []
    for p in pods:
        events.append((p["created"], 1))
        events.append((p["deleted_at"] or "9999", -1))
    live = peak = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):
        live += delta
        peak = max(peak, live)
    return peak


# 2 ------------------------------------------------------------------------------------------------
@pytest.mark.slow  # covered fast by airflow/test_operator_lifecycle.py (the pending window)
def test_a_pod_that_never_schedules_times_out_and_frees_its_slot(runner, cluster, db_dsn):
    runner.env_overrides["CLUSTER_DOCTOR_PENDING_TIMEOUT_S"] = "4"
    cluster.add_gpu_node("gpu-001")
    cluster.add_gpu_node("gpu-002")
    cluster.set_script("gpu-001", "never_schedule", message="0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    script_result(cluster, "gpu-002")

    result = runner.run()

    assert result["state"] == "success"
    assert validate_states(result) == {"gpu-001 · gpu_health": "skipped", "gpu-002 · gpu_health": "success"}
    timed_out = rows(db_dsn, "node_name = 'gpu-001'")
    assert [r["status"] for r in timed_out] == ["timeout"]
    assert "Pending after 4 s" in timed_out[0]["reason"] and "Insufficient nvidia.com/gpu" in timed_out[0]["reason"]
    assert all(p["deleted"] for p in validation_pods(cluster))
    assert [r["status"] for r in rows(db_dsn, "node_name = 'gpu-002'")] == ["pass"]


# 3 ------------------------------------------------------------------------------------------------
@pytest.mark.slow  # covered fast by airflow/test_operator_lifecycle.py (same scenario)
def test_a_user_pod_claiming_the_node_while_ours_is_pending_preempts_ours(runner, cluster, db_dsn, db_url):
    cluster.add_gpu_node("gpu-001")
    cluster.core_v1().create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    cluster.set_script("gpu-001", "never_schedule", message="waiting for the gang scheduler")

    def user_job_arrives():
        cluster.wait_for(lambda: validation_pods(cluster), timeout=900, message="our validation pod")
        time.sleep(0.5)
        cluster.add_user_pod("gpu-001", gpus=8, name="llm-pretrain-0", namespace="ml")

    arrival = threading.Thread(target=user_job_arrives, daemon=True)
    arrival.start()
    result = runner.run()
    arrival.join(5)

    assert result["state"] == "success"
    assert validate_states(result) == {"gpu-001 · gpu_health": "skipped"}
    (row,) = rows(db_dsn)
    assert row["status"] == "preempted" and "ml/llm-pretrain-0" in row["reason"]
    (pod,) = validation_pods(cluster)
    assert pod["deleted"]
    # the pair stays due: a preemption never makes it fresh
    states = ResultStore(db_url).pair_states(["gpu-001"], ["gpu_health"])
    assert due.why_due(states[("gpu-001", "gpu_health")], dt.datetime.now(dt.UTC), due.Policy()) \
        == due.NEVER


# 4 ------------------------------------------------------------------------------------------------
def test_failing_crashing_hung_and_garbage_suites(runner, cluster, db_dsn):
    """One run, four ways a suite can go wrong: each node's row says which, and the run fails."""
    # the hung pod's deadline: pending window + budget, 13 s (a pod is Running in well under a second)
    runner.env_overrides.update({"CLUSTER_DOCTOR_PENDING_TIMEOUT_S": "10",
                                 "CLUSTER_DOCTOR_SUITE_TIMEOUTS_S": '{"gpu_health": 3}'})
    for node in ("gpu-001", "gpu-002", "gpu-003", "gpu-004"):
        cluster.add_gpu_node(node)
    check = {"name": "ecc_uncorrected", "status": "fail", "device": "GPU 3", "value": 2, "unit": "errors",
             "threshold": "== 0", "message": "volatile uncorrected ECC errors on GPU 3"}
    script_result(cluster, "gpu-001", status="fail", checks=[check])
    cluster.set_script("gpu-002", "crash", exit_code=139, log="Segmentation fault (core dumped)")
    cluster.set_script("gpu-003", "exit", exit_code=0, log="ok ok ok\n%%% not json %%%")
    cluster.set_script("gpu-004", "run")  # hangs: only activeDeadlineSeconds ends it

    result = runner.run()

    assert result["state"] == "failed"  # this run found a bad node: the DagRun says so
    assert result["states"][("verdict", -1)] == "failed"
    assert validate_states(result) == {f"gpu-00{i} · gpu_health": "failed" for i in (1, 2, 3, 4)}
    by_node = {r["node_name"]: r for r in rows(db_dsn)}
    assert by_node["gpu-001"]["status"] == "fail"
    assert by_node["gpu-001"]["checks"][0]["device"] == "GPU 3" and "GPU 3" in by_node["gpu-001"]["reason"]
    assert by_node["gpu-002"]["status"] == "error" and "Segmentation fault" in by_node["gpu-002"]["reason"]
    assert by_node["gpu-003"]["status"] == "error" and "without a result" in by_node["gpu-003"]["reason"]
    assert by_node["gpu-004"]["status"] == "error" and "run-time budget" in by_node["gpu-004"]["reason"]
    # the task's verdict block: what a person reads first in its log
    assert "Verdict: FAIL on gpu-001" in runner.last_log and "  action  " in runner.last_log
    assert "FAIL ecc_uncorrected [GPU 3] value=2 errors threshold=== 0" in runner.last_log
    assert all(p["deleted"] for p in validation_pods(cluster))  # the hung one killed at its deadline too


# 5 ------------------------------------------------------------------------------------------------
def test_results_db_down_during_record_then_back_rows_arrive_once(runner, cluster, db_dsn):
    proxy = TcpProxy(db_dsn.get("host", "127.0.0.1"), int(db_dsn.get("port", 5432)))
    if str(db_dsn.get("host", "")).startswith("/"):
        pytest.skip("needs a TCP PostgreSQL (CI has one)")
    runner.db_url = (f"postgresql://{db_dsn.get('user', 'postgres')}@127.0.0.1:{proxy.port}/{db_dsn['dbname']}")
    for node in ("gpu-001", "gpu-002"):
        cluster.add_gpu_node(node)
        script_result(cluster, node)

    went_down = threading.Event()

    def outage():
        # down as soon as the first validation pod exists, back a few seconds after the last one ends; the
        # waits only guard a hang (on a loaded machine the DagRun's first pod came after 2 minutes)
        cluster.wait_for(lambda: validation_pods(cluster), timeout=900, message="first validation pod")
        proxy.down()
        went_down.set()
        cluster.wait_for(lambda: len(validation_pods(cluster)) == 2 and all(p["deleted"] for p in validation_pods(cluster)),
                         timeout=900, message="both validation pods done")
        time.sleep(4)
        proxy.up()

    thread = threading.Thread(target=outage, daemon=True)
    thread.start()
    try:
        result = runner.run()
    finally:
        thread.join(10)
        proxy.close()
    assert went_down.is_set(), "the outage never started: no validation pod was seen"
    assert result["state"] == "success", runner.last_log[-3000:]
    assert "results DB write deferred to the record task" in runner.last_log
    assert "retry" in runner.last_log
    recorded = rows(db_dsn)
    assert [(r["node_name"], r["status"]) for r in recorded] == [("gpu-001", "pass"), ("gpu-002", "pass")]


# 6 ------------------------------------------------------------------------------------------------
# make test-slow (five DagRuns, ~1.5 min): in make test, domain/planning/test_due.py takes the stalest pairs
# first within the cap and after a cutoff, kube/test_against_emulator.py takes exactly a range's nodes,
# test_bundles runs a node's suites as one bundle, and the stack test's overlapping runs never put two of our
# pods on a node.
@pytest.mark.slow
def test_runs_take_the_next_stalest_pairs_and_a_range_revalidation_takes_exactly_its_nodes(runner, cluster, db_dsn):
    runner.env_overrides["CLUSTER_DOCTOR_TESTS"] = "gpu_health,storage_fio"
    for i in range(1, 5):
        node = f"gpu-{i:03d}"
        cluster.add_gpu_node(node)
        script_result(cluster, node, "gpu_health")
    # storage_fio results for every node come from a label-specific script
    for i in range(1, 5):
        node = f"gpu-{i:03d}"
        cluster.set_script(node, "exit", labels={"cluster-doctor.io/test": "storage_fio"}, exit_code=0,
                           termination_message=summary(node, "storage_fio"), run_seconds=0.2)

    first = runner.run({"max_pairs": 2})
    rest = runner.run({"max_pairs": 6})

    def pairs(result):
        return sorted((r["node_name"], r["test_name"]) for r in rows(db_dsn, "run_id = %s", (result["run_id"],)))

    # a chosen node runs every due suite in the same run (its bundle): two pairs are one node
    assert pairs(first) == [("gpu-001", "gpu_health"), ("gpu-001", "storage_fio")]
    assert pairs(rest) == [(f"gpu-{i:03d}", t) for i in (2, 3, 4) for t in ("gpu_health", "storage_fio")]
    # one after another on each node, never two of our pods on a node at once
    by_node: dict[str, list] = {}
    for pod in validation_pods(cluster):
        by_node.setdefault(pod["node"], []).append((pod["created"], pod["deleted_at"] or "9999"))
    for node, spans in by_node.items():
        spans.sort()
        assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:])), node
    # everything is fresh now: a plain run has nothing to do, and says why
    quiet = runner.run()
    assert pairs(quiet) == [] and quiet["summary"]["why_empty"].startswith(
        "nothing planned: all pairs of the 4 free node(s) are fresh since ")
    # re-validate two nodes after a "driver upgrade": exactly those, all their suites
    cutoff = dt.datetime.now(dt.UTC).isoformat()
    revalidation = runner.run({"node_range": "gpu-00[1-2]", "stale_before": cutoff})
    assert pairs(revalidation) == [(n, t) for n in ("gpu-001", "gpu-002") for t in ("gpu_health", "storage_fio")]


# 7 ------------------------------------------------------------------------------------------------
# make test-slow: covered fast by airflow/test_tasks.py (a dry run plans, claims and records nothing),
# airflow/tasks/test_ship_suites.py (it maps no bundle: no pod) and kube/test_against_emulator.py (GPU nodes
# only)
@pytest.mark.slow
def test_non_gpu_nodes_and_a_dry_run_create_no_pod(runner, cluster, db_dsn, db_url):
    """Nodes without GPUs are not GPU nodes; a dry run plans (gpu-002 is due, gpu-001 fresh) and creates no
    pod. A run that plans nothing at all: test_backfill's last run; its summary: airflow/test_tasks.py."""
    cluster.add_gpu_node("cpu-001", gpus=0)
    cluster.add_gpu_node("cpu-002", gpus=0)
    cluster.add_gpu_node("gpu-001")
    cluster.add_gpu_node("gpu-002")
    ResultStore(db_url).record([{"node_name": "gpu-001", "test_name": "gpu_health", "status": "pass",
                                 "finished_at": dt.datetime.now(dt.UTC), "run_id": "earlier"}])
    dry = runner.run({"dry_run": True})
    assert dry["state"] == "success", dry["states"]
    assert dry["summary"]["planned"] == 1 and dry["summary"]["gpu_nodes"] == 2
    assert validation_pods(cluster) == [] and len(rows(db_dsn)) == 1


# bad input ---------------------------------------------------------------------------------------
def test_a_bad_node_range_is_refused_before_any_pod(runner, cluster, db_dsn):
    cluster.add_gpu_node("gpu-001")
    # what the form's pattern lets through is still validated in full at run time
    result = runner.run({"node_range": "gpu-[064-001]"})
    assert result["state"] == "failed"
    assert result["states"][("discover", -1)] == "failed"
    assert result["states"][("record", -1)] in ("skipped", "upstream_failed")  # nothing planned to record
    assert result["states"][("verdict", -1)] == "failed"  # the DagRun tells alerting
    assert "param node_range" in runner.last_log and "gpu-[064-001]': start > stop" in runner.last_log
    assert validation_pods(cluster) == [] and rows(db_dsn) == []


@pytest.mark.slow  # covered fast by tests/dags/test_continuous_validation.py (the Param's pattern refuses it)
def test_an_obviously_bad_node_range_is_refused_at_trigger_time(runner, cluster, db_dsn):
    cluster.add_gpu_node("gpu-001")
    with pytest.raises(AssertionError, match="dag_runner failed"):
        runner.run({"node_range": "gpu-[001-"})
    assert "ParamValidationError" in runner.last_log and "node_range" in runner.last_log
    assert validation_pods(cluster) == [] and rows(db_dsn) == []


# at submit time ----------------------------------------------------------------------------------
# covered fast by airflow/test_operator_pending_node.py (the pre-submit check: no longer free, no pod); in a
# DagRun, test_bundles' user pod between suites meets the same check
@pytest.mark.slow
def test_no_pod_when_the_node_became_busy_after_planning(runner, cluster, db_dsn):
    for node in ("gpu-001", "gpu-002"):
        cluster.add_gpu_node(node)
    script_result(cluster, "gpu-002")

    def user_job_lands_after_planning():
        # the suite ConfigMap appears right after the plan: gpu-001 was free then, not at submit time
        cluster.wait_for(lambda: cluster.core_v1().list_namespaced_config_map("cluster-doctor").items,
                         timeout=900, interval=0.02, message="the suite ConfigMap")
        cluster.add_user_pod("gpu-001", gpus=8, name="batch-eval-0", namespace="default")

    thread = threading.Thread(target=user_job_lands_after_planning, daemon=True)
    thread.start()
    result = runner.run()
    thread.join(5)

    assert result["state"] == "success"
    by_node = {r["node_name"]: r for r in rows(db_dsn)}
    assert by_node["gpu-001"]["status"] == "skipped" and "no longer free" in by_node["gpu-001"]["reason"]
    assert "default/batch-eval-0" in by_node["gpu-001"]["reason"]
    assert by_node["gpu-002"]["status"] == "pass"
    assert sorted(p["node"] for p in validation_pods(cluster)) == ["gpu-002"]  # no pod for gpu-001


# settings read at run time -----------------------------------------------------------------------
def test_a_suite_budget_raised_in_the_variable_is_honoured_by_the_pod_and_the_task(runner, cluster, db_dsn):
    # Parsed with a 2 s budget: pod deadline 3 + 2 s, task timeout 3 + 2 + 2 s. The Variable raises the
    # budget to 40 s at run time; the suite needs 9 s and must pass, cut short by neither.
    runner.env_overrides.update({
        "CLUSTER_DOCTOR_PENDING_TIMEOUT_S": "3", "CLUSTER_DOCTOR_TASK_MARGIN_S": "2",
        "CLUSTER_DOCTOR_SUITE_TIMEOUTS_S": '{"gpu_health": 2}',
        "AIRFLOW_VAR_CLUSTER_DOCTOR_SETTINGS": '{"suite_timeouts_s": {"gpu_health": 40}}',
    })
    cluster.add_gpu_node("gpu-001")
    text = summary("gpu-001")
    cluster.set_script("gpu-001", "exit", exit_code=0, run_seconds=9, termination_message=text,
                       log=f"CLUSTER_DOCTOR_RESULT {text}\n")
    result = runner.run()
    assert validate_states(result) == {"gpu-001 · gpu_health": "success"}, runner.last_log[-3000:]
    assert [r["status"] for r in rows(db_dsn)] == ["pass"]
    assert result["state"] == "success"


# covered fast by airflow/test_tasks.py (discover refuses it before any call); a run whose discover fails:
# test_a_bad_node_range_is_refused_before_any_pod; the Variable read at run time: the suite budget test above
@pytest.mark.slow
def test_a_variable_changing_what_parsing_fixed_is_refused_before_any_pod(runner, cluster, db_dsn):
    runner.env_overrides["AIRFLOW_VAR_CLUSTER_DOCTOR_SETTINGS"] = '{"pool": "elsewhere"}'
    cluster.add_gpu_node("gpu-001")
    script_result(cluster, "gpu-001")
    result = runner.run()
    assert result["state"] == "failed" and result["states"][("discover", -1)] == "failed"
    assert "setting pool: 'elsewhere' from the Airflow Variable cannot take effect" in runner.last_log
    assert validation_pods(cluster) == [] and rows(db_dsn) == []


# the results volume ------------------------------------------------------------------------------
@pytest.mark.slow  # covered fast by kube/test_volumes.py (a missing claim: one reason, nothing planned, the verdict fails)
def test_a_missing_results_pvc_fails_the_run_with_its_reason_before_any_pod(runner, cluster, db_dsn):
    # the default 20-minute pending timeout: had a pod been created to wait for the claim, the run
    # could not end within the runner's limit; the claim is read once, before any pod
    runner.env_overrides["CLUSTER_DOCTOR_PENDING_TIMEOUT_S"] = "1200"
    for node in ("gpu-001", "gpu-002"):
        cluster.add_gpu_node(node)
        script_result(cluster, node)
    cluster.core_v1().delete_namespaced_persistent_volume_claim(PVC, NAMESPACE)

    result = runner.run()

    reason = f"PVC {NAMESPACE}/{PVC} does not exist (create it: include/k8s/pvc.yaml, or set pvc)"
    assert result["state"] == "failed"
    assert result["states"][("discover", -1)] == "success" and result["states"][("verdict", -1)] == "failed"
    assert validate_states(result) == {-1: "skipped"}  # mapped over nothing: not one validation task ran
    assert result["summary"]["blocked"] == {"tests": ["gpu_health"], "reason": reason, "codes": ["PVC_MISSING"]}
    # the one-line reason the verdict task fails the DagRun with
    assert f"{reason}: no validation pod of gpu_health was created" in runner.last_log
    assert validation_pods(cluster) == []  # the emulator never saw a validation pod
    assert rows(db_dsn) == []  # nothing per pair: no pass, no hourly duplicates
