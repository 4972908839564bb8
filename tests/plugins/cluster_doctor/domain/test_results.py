"""How a validation pod's end is read. Pod dicts are shaped like the API's (sanitize_for_serialization).
The pod's times are minutes before one ``NOW``, which is also the time the pod is observed at."""

import datetime as dt
import json

import pytest
from cluster_doctor.domain import results

from tests import clock

NODE, TEST = "gpu-004", "dl_unit"
NOW = clock.now()
STARTED, FINISHED = NOW - dt.timedelta(minutes=5), NOW - dt.timedelta(minutes=1)


def iso(at: dt.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")  # as the API writes a time


def summary(status="pass", **kw):
    base = {"schema_version": "1", "suite": TEST, "node": NODE, "status": status,
            "reason": "all 10 checks passed" if status == "pass" else "gemm_bf16_tflops on cuda:3: 512.3 < 657.0 TFLOPS",
            "started_at": iso(STARTED), "finished_at": iso(FINISHED - dt.timedelta(seconds=1)),
            "duration_s": 240.0, "suite_version": "sha256:0123456789abcdef", "gpu_model": "NVIDIA H100 80GB HBM3",
            "gpu_count": 8, "metrics": {"gemm_bf16_tflops_min": 512.3}, "checks": [], "truncated": False,
            "check_counts": {"pass": 10, "fail": 0, "warn": 0, "error": 0, "skip": 0} if status != "fail" else
            {"pass": 9, "fail": 1, "warn": 0, "error": 0, "skip": 0},  # a fail counts its failing check
            "log_path": f"/data/continuous_validation/dl_unit/gpu-004/dl_unit_gpu-004_{STARTED.timestamp():.0f}.log",
            "result_path": f"/data/continuous_validation/dl_unit/gpu-004/dl_unit_gpu-004_{STARTED.timestamp():.0f}.json"}
    base.update(kw)
    return base


def pod(exit_code=0, message=None, reason=None, phase=None, conditions=None, pod_reason=None, deleting=False):
    terminated = {"exitCode": exit_code, "reason": reason or ("Completed" if exit_code == 0 else "Error"),
                  "startedAt": iso(STARTED), "finishedAt": iso(FINISHED)}
    if message is not None:
        terminated["message"] = message
    out = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "cv-dl-unit-gpu-004-abcd", "namespace": "cluster-doctor"},
           "status": {"phase": phase or ("Succeeded" if exit_code == 0 else "Failed"),
                      "conditions": conditions or [],
                      "containerStatuses": [{"name": "base", "ready": False, "restartCount": 0,
                                             "state": {"terminated": terminated}}]}}
    if pod_reason:
        out["status"]["reason"] = pod_reason
    if deleting:
        out["metadata"]["deletionTimestamp"] = iso(FINISHED - dt.timedelta(seconds=1))
    return out


def classify(p, **kw):
    return results.classify(p, node_name=NODE, test_name=TEST, now=NOW, **kw)


def test_pass_from_the_termination_message():
    out = classify(pod(0, json.dumps(summary())))
    assert out.status == "pass" and out.summary["metrics"]["gemm_bf16_tflops_min"] == 512.3
    assert out.started_at == STARTED and out.finished_at == FINISHED


def test_fail_with_checks():
    s = summary("fail", checks=[{"name": "gemm_bf16_tflops", "status": "fail", "device": "cuda:3", "value": 512.3,
                                 "unit": "TFLOPS", "threshold": ">= 657.0", "message": "below baseline"}])
    out = classify(pod(1, json.dumps(s)))
    assert out.status == "fail" and "cuda:3" in out.reason
    assert results.failing_checks(out.summary) == [
        "FAIL  gemm_bf16_tflops [cuda:3] value=512.3 TFLOPS threshold=>= 657.0: below baseline"]


def test_the_recommended_action_of_a_suite_reaches_the_attempt():
    """Suites report the most severe action in the summary and each finding's in its check
    (schema_version 1, fields added compatibly): the summary is accepted and the checks keep them."""
    s = summary("fail", code="ROW_REMAP_PENDING", action="reset_gpu", incomplete=False,
                checks=[{"name": "row_remap_pending", "status": "fail", "device": "cuda:1", "code": "ROW_REMAP_PENDING",
                         "action": "reset_gpu", "message": "row remapping pending"}])
    out = classify(pod(1, json.dumps(s)))
    assert out.status == "fail" and out.summary["action"] == "reset_gpu"
    attempt = results.to_attempt(out, node_name=NODE, test_name=TEST, now=NOW)
    assert attempt.checks[0]["action"] == "reset_gpu"
    bad = classify(pod(1, json.dumps(summary("fail", action="format_the_disk"))))
    assert bad.status == "error"  # an action outside the fixed set breaks the contract
    assert attempt.action == "reset_gpu"


def test_an_incomplete_pass_reaches_the_attempt_with_its_count():
    """The summary's own skip count wins over the checks it kept (cut to fit 4 KiB)."""
    s = summary(action="none", incomplete=True, truncated=True, checks_omitted=3,
                check_counts={"pass": 9, "fail": 0, "warn": 0, "error": 0, "skip": 3},
                checks=[{"name": "dcgm_diag", "status": "skip", "code": "DCGM_UNAVAILABLE", "action": "none"}])
    attempt = results.attempt_from_pod(pod(0, json.dumps(s)), node_name=NODE, test_name=TEST, now=NOW)
    assert attempt.status == "pass"
    assert (attempt.action, attempt.incomplete, attempt.checks_not_run) == ("none", True, 3)


def test_an_error_the_orchestrator_judged_is_retested():
    attempt = results.attempt_from_pod(pod(137, reason="OOMKilled"), node_name=NODE, test_name=TEST, now=NOW)
    assert attempt.status == "error" and attempt.action == "retest"


def test_result_line_in_the_log_when_the_message_is_log_fallback():
    tail = ["step 1", "RuntimeError: CUDA error", "CLUSTER_DOCTOR_RESULT " + json.dumps(summary("error", reason="crash"))]
    out = classify(pod(2, "\n".join(tail)))
    assert out.status == "error" and out.reason == "crash"


def test_result_found_in_the_streamed_log_tail():
    out = classify(pod(0, ""), log_tail=["x", "CLUSTER_DOCTOR_RESULT " + json.dumps(summary())])
    assert out.status == "pass"


def test_exit_zero_without_a_result_is_never_a_pass():
    out = classify(pod(0, "all good!"))
    assert out.status == "error" and "without a result" in out.reason


def test_garbage_is_an_error_with_the_last_line():
    out = classify(pod(139, "Segmentation fault (core dumped)"))
    assert out.status == "error" and "Segmentation fault" in out.reason and "139" in out.reason


def test_malformed_summary_is_an_error():
    bad = summary()
    bad["metrics"] = [1, 2]
    out = classify(pod(0, json.dumps(bad)))
    assert out.status == "error" and "malformed" in out.reason


def test_a_result_from_another_node_is_refused():
    out = classify(pod(0, json.dumps(summary(node="gpu-999"))))
    assert out.status == "error" and "gpu-999" in out.reason


@pytest.mark.parametrize("exit_code, reported, expected", [(0, "fail", "fail"), (1, "pass", "fail"),
                                                            (2, "pass", "error"), (1, "error", "fail")])
def test_exit_code_and_report_disagreeing_take_the_worse(exit_code, reported, expected):
    out = classify(pod(exit_code, json.dumps(summary(reported))))
    assert out.status == expected and "disagrees" in out.reason


def test_oom_killed():
    out = classify(pod(137, "", reason="OOMKilled"))
    assert out.status == "error" and "OOMKilled" in out.reason


def test_preempted_while_running_is_not_a_failure():
    cond = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
             "message": "Preempted by ml/trainer-0 on node gpu-004"}]
    out = classify(pod(143, "", conditions=cond, deleting=True))
    assert out.status == "preempted" and "PreemptionByScheduler" in out.reason


def test_evicted():
    p = pod(137, "", pod_reason="Evicted")
    p["status"]["message"] = "The node was low on resource: memory."
    out = classify(p)
    assert out.status == "preempted" and "low on resource" in out.reason


def test_deleted_while_running():
    assert classify(pod(143, "", deleting=True)).status == "preempted"
    assert classify(None).status == "preempted"


def test_deadline_exceeded():
    p = pod(137, "", pod_reason="DeadlineExceeded")
    out = classify(p, run_budget_s=900)
    assert out.status == "error" and "900" in out.reason


def test_no_container_status():
    p = {"status": {"phase": "Failed", "containerStatuses": []}}
    assert classify(p).status == "error"


@pytest.mark.parametrize("status, changes, problem", [
    ("pass", {"check_counts": {"pass": 10, "fail": 2, "warn": 0, "error": 0, "skip": 0}}, "check_counts.fail 2"),
    ("pass", {"check_counts": {"pass": 10, "fail": 0, "warn": 0, "error": 1, "skip": 0}}, "check_counts.error 1"),
    ("pass", {"check_counts": {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 3}}, "no passing check"),
    ("fail", {"check_counts": {"pass": 10, "fail": 0, "warn": 0, "error": 0, "skip": 0}}, "without a failing check"),
    ("pass", {"checks": [{"name": "gemm_bf16_tflops", "status": "fail", "device": "cuda:3", "code": "GEMM_SLOW"}],
              "check_counts": {"pass": 10, "fail": 1, "warn": 0, "error": 0, "skip": 0}}, "status pass"),
    ("fail", {"checks": [{"name": "a", "status": "fail", "code": "X"}, {"name": "b", "status": "fail", "code": "X"}]},
     "lists 2 fail check(s)"),
])
def test_a_status_that_disagrees_with_its_own_counts_is_a_malformed_result(status, changes, problem, monkeypatch):
    """status pass with check_counts.fail 2 (and no checks listed) used to be recorded as a pass. The
    schema refuses it, and so does the rule itself where jsonschema is not installed."""
    s = summary(status, **changes)
    assert results.validate_summary(s) is not None
    out = classify(pod(0 if status == "pass" else 1, json.dumps(s)))
    assert out.status == "error" and "malformed suite result" in out.reason
    monkeypatch.setattr(results, "_summary_validator", lambda: None)
    assert problem in (results.validate_summary(s) or "")


def test_counts_that_agree_with_the_status_are_the_contract():
    assert results.validate_summary(summary("pass")) is None
    assert results.validate_summary(summary("fail", checks=[{"name": "x", "status": "fail", "code": "X"}])) is None
    truncated = summary("fail", checks=[], truncated=True, checks_omitted=10)  # cut: fewer listed than counted
    assert results.validate_summary(truncated) is None
