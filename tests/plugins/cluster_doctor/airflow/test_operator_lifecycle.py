"""NodeValidationPodOperator.execute against the Kubernetes API emulator with the real provider and
client: each of our hooks and overrides adds its behaviour and keeps the provider's."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from airflow.providers.cncf.kubernetes.callbacks import KubernetesPodOperatorCallback
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk.exceptions import AirflowSkipException
from cluster_doctor.airflow.operator import NodeValidationPodOperator, VerdictFailed

from tests.support.emulator import FAST
from tests.support.operator import FakeTI, operator, run
from tests.support.suite_results import script_result

NS = "cluster-doctor"
POD_SELECTOR = "app.kubernetes.io/name=cluster-doctor"


pytestmark = pytest.mark.emulator(pvc=True, settings=FAST)


@pytest.fixture
def cluster(operator_cluster):
    operator_cluster.add_gpu_node("gpu-001")
    return operator_cluster


def test_a_passing_pod_is_built_by_the_provider_and_recorded_once(cluster):
    script_result(cluster, "gpu-001")
    ti, written, returned, raised = run(operator())
    assert raised is None and returned["status"] == "pass"
    assert ti.xcom["attempt"] == returned and [a.status for a in written] == ["pass"]
    assert written[0].map_index == 3 and written[0].run_id == FakeTI().run_id
    (pod,) = cluster.pod_history(POD_SELECTOR)
    # build_pod_request_obj called super(): the provider's task labels, used to reattach, are on the pod
    assert pod["labels"]["dag_id"] == "continuous_validation" and pod["labels"]["map_index"] == "3"
    assert pod["labels"]["kubernetes_pod_operator"] == "True" and pod["deleted"]
    assert ti.xcom["pod_name"] == pod["name"]  # pushed by the provider's execute_sync


def test_a_failing_suite_is_judged_from_the_final_pod_after_the_providers_cleanup(cluster):
    script_result(cluster, "gpu-001", status="fail", checks=[
        {"name": "ecc_uncorrectable", "status": "fail", "device": "GPU3", "value": 2, "threshold": "== 0",
         "message": "2 uncorrectable ECC errors"}])
    ti, written, returned, raised = run(operator())
    assert isinstance(raised, VerdictFailed) and "ecc_uncorrectable" in str(raised)
    assert [a.status for a in written] == ["fail"] and written[0].checks[0]["device"] == "GPU3"
    (pod,) = cluster.pod_history(POD_SELECTOR)
    # the provider's cleanup ran: a failed pod is labelled already-checked before it is deleted
    assert pod["labels"].get("already_checked") == "True" and pod["deleted"]


# the shape of the suite's message (include/suites/checkers/xid.py), at the schema's 160 characters
XID_MESSAGE = ("Xid 94 (CONTAINED_ECC_ERROR, NVIDIA: RESTART_APP) on PCI 0000:3b:00.0 seen 1 min ago; "
               "kernel log: NVRM: Xid (PCI:0000:3b:00): 94, pid=4242, Ch 00000008")


class Recorded:
    """The operator's logger, keeping what it is told (Airflow's is a structlog logger, not caplog's)."""

    def __init__(self):
        self.messages: list[str] = []

    def __getattr__(self, level):
        return lambda msg, *args, **kw: self.messages.append(msg % args if args else msg)


def test_a_failing_task_logs_its_verdict_as_a_short_block_and_fails_without_a_retry(cluster):
    script_result(cluster, "gpu-001", status="fail", checks=[
        {"name": "xid", "status": "fail", "device": "GPU3", "value": 94, "threshold": "none", "code": "XID_RESET",
         "action": "reset_gpu", "message": XID_MESSAGE}])
    op = operator()
    op._cached_logger = logged = Recorded()
    ti, written, _, raised = run(op)
    assert isinstance(raised, VerdictFailed) and isinstance(raised, SystemExit)  # one line in the task runner
    (block,) = [m for m in logged.messages if m.startswith("Verdict:")]
    lines = block.splitlines()
    assert lines[:5] == ["Verdict: FAIL on gpu-001", "  node    gpu-001", "  suite   gpu_health", "  status  fail",
                         "  code    XID_RESET"]
    assert "  action  reset_gpu" in lines and any(line.startswith("  reason  ") for line in lines)
    assert any(line.startswith("    FAIL xid [GPU3] value=94") for line in lines)
    assert max(len(line) for line in lines) <= 100  # the long Xid message is folded, not cut
    assert " ".join(w for line in lines for w in line.split()).count("Ch 00000008") == 1
    # the retry policy fails it at once, as AirflowFailException did, and a retry would not run the suite again
    decision = op.retry_policy.evaluate(raised, try_number=1, max_tries=3)
    assert decision.action.value == "fail"
    assert op.retry_policy.evaluate(RuntimeError("api down"), try_number=1, max_tries=3).action.value == "default"


def test_a_pod_that_never_schedules_hits_the_pending_window(cluster):
    cluster.set_script("gpu-001", "never_schedule", message="0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    ti, written, _, raised = run(operator(pending_timeout_s=3))
    assert isinstance(raised, AirflowSkipException)
    (attempt,) = written
    assert attempt.status == "timeout" and "Pending after 3 s" in attempt.reason
    assert "Insufficient nvidia.com/gpu" in attempt.reason
    assert all(p["deleted"] for p in cluster.pod_history(POD_SELECTOR))


def test_a_user_pod_claiming_the_node_while_ours_is_pending_preempts_ours(cluster):
    cluster.set_script("gpu-001", "never_schedule", message="waiting for the gang scheduler")

    def user_job_arrives():
        cluster.wait_for(lambda: cluster.pod_history(POD_SELECTOR), timeout=30, message="our pod")
        cluster.add_user_pod("gpu-001", gpus=8, name="llm-pretrain-0", namespace="default")

    arrival = threading.Thread(target=user_job_arrives, daemon=True)
    arrival.start()
    ti, written, _, raised = run(operator())
    arrival.join(5)
    assert isinstance(raised, AirflowSkipException)
    (attempt,) = written
    # preempted, not the pending window's timeout: the user pod's arrival ended the wait
    assert attempt.status == "preempted" and "default/llm-pretrain-0" in attempt.reason
    assert all(p["deleted"] for p in cluster.pod_history(POD_SELECTOR))


def test_user_callbacks_still_run_beside_ours(cluster):
    seen = []

    class Audit(KubernetesPodOperatorCallback):
        @staticmethod
        def on_pod_creation(*, pod, **kwargs):
            seen.append(("created", pod.metadata.name))

        @staticmethod
        def on_pod_cleanup(*, pod, **kwargs):
            seen.append(("cleanup", pod.metadata.name))

    script_result(cluster, "gpu-001")
    op = operator()
    op2 = NodeValidationPodOperator(task_id="validate", node_name="gpu-001", test_name="gpu_health", gpu_count=8,
                                    planned_at=op.planned_at, run_config=op.run_config, callbacks=Audit)
    _, written, returned, _ = run(op2)
    assert returned["status"] == "pass"
    assert [event for event, _ in seen] == ["created", "cleanup"]


def test_the_task_timeout_comes_from_the_run_settings_not_the_dag_file():
    raised = operator(pending_timeout_s=60, suite_timeouts_s={"gpu_health": 5000}, task_margin_s=30)
    assert raised.execution_timeout == dt.timedelta(seconds=60 + 5000 + 30)
    assert raised.cd_settings.pod_deadline_s("gpu_health") == 5060  # the pod's activeDeadlineSeconds


def test_overrides_call_the_provider():
    """Every method we override is the provider's, extended: none replaces it."""
    import inspect

    for name in ("build_pod_request_obj", "await_pod_start", "cleanup", "on_kill", "execute"):
        assert hasattr(KubernetesPodOperator, name)
        source = inspect.getsource(getattr(NodeValidationPodOperator, name))
        assert f"super().{name}(" in source, name


@pytest.mark.parametrize("version", ["1.25", "1.31"])  # before 1.26: no DisruptionTarget, only the event
def test_a_pending_pod_preempted_and_removed_is_preempted_not_an_orchestration_error(cluster, version):
    cluster.configure(kubernetes_version=version)
    cluster.set_script("gpu-001", "never_schedule", message="0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")

    def scheduler_preempts_ours():
        (pod,) = cluster.wait_for(lambda: cluster.pod_history(POD_SELECTOR), timeout=30, message="our pod")
        time.sleep(0.5)
        cluster.preempt(NS, pod["name"])

    thread = threading.Thread(target=scheduler_preempts_ours, daemon=True)
    thread.start()
    _, written, _, raised = run(operator())
    thread.join(5)
    assert isinstance(raised, AirflowSkipException)
    (attempt,) = written
    assert attempt.status == "preempted" and "Preempted by pod" in attempt.reason, attempt.reason


def test_an_unreachable_kubelet_after_a_pass_never_changes_the_verdict(cluster):
    cluster.configure(unreachable_kubelets=["gpu-001"])  # pods/log answers 500, as the apiserver's proxy does
    script_result(cluster, "gpu-001")
    _, written, returned, raised = run(operator())
    assert raised is None and returned["status"] == "pass", (raised, written)
    assert [a.status for a in written] == ["pass"]


def test_a_long_scheduler_message_is_kept_whole(cluster):
    filters = ", ".join(f"{i} node(s) didn't match Pod's node affinity/selector" for i in range(1, 25))
    message = f"0/4000 nodes are available: {filters}. preemption: 0/4000 nodes are available: END-OF-MESSAGE."
    cluster.set_script("gpu-001", "never_schedule", message=message)
    _, written, _, _ = run(operator(pending_timeout_s=3))
    (attempt,) = written
    assert 1000 < len(message) < 1800 and "END-OF-MESSAGE" in attempt.reason


def test_a_killed_task_records_its_try_once_through_xcom_too():
    """on_kill (DagRun timeout, manual stop) records the try and pushes it to XCom, so the record task
    sees it and never adds a second 'did not report' row for the same try."""
    op = operator()
    ti = FakeTI()
    op._context = {"ti": ti, "run_id": ti.run_id}
    written = []
    op._write = written.append
    op.on_kill()  # no pod yet: the provider's on_kill has nothing to delete
    (attempt,) = written
    assert attempt.status == "skipped" and "killed" in attempt.reason
    assert ti.xcom["attempt"] == attempt.to_dict() and attempt.try_number == 1 and attempt.map_index == 3
    op.on_kill()  # a second signal records nothing more
    assert len(written) == 1
