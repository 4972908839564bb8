"""The boundary between what a validation pod said and the attempt that is recorded.

Each hostile report below once crashed the validate task after the verdict was known (``Attempt``
refused what the result reader had accepted), so the try was recorded as ``skipped`` ("did not
report") and ``validation_latest`` kept showing the older ``pass``. Now the attempt is recorded with
the status the exit code and the summary support, in the real results database.
"""

import datetime as dt
import json
import math

import pytest
from cluster_doctor.domain import results
from cluster_doctor.domain.attempts import Attempt

NODE, TEST = "gpu-004", "dl_unit"
NOW = dt.datetime(2026, 11, 22, 10, 5, tzinfo=dt.UTC)
CREATED = "2026-11-22T09:59:30Z"


def summary(status="fail", **kw):
    base = {"schema_version": "1", "suite": TEST, "node": NODE, "status": status,
            "reason": "gemm_bf16_tflops on cuda:3: 512.3 < 657.0 TFLOPS" if status == "fail" else "all 10 checks passed",
            "started_at": "2026-11-22T10:00:00Z", "finished_at": "2026-11-22T10:04:00Z",
            "duration_s": 240.0, "suite_version": "sha256:0123456789abcdef", "gpu_model": "NVIDIA H100 80GB HBM3",
            "gpu_count": 8, "metrics": {"gemm_bf16_tflops_min": 512.3}, "checks": [], "truncated": False,
            "check_counts": {"pass": 9, "fail": 1 if status == "fail" else 0, "warn": 0, "error": 0, "skip": 0},
            "log_path": "/data/continuous_validation/dl_unit/gpu-004/dl_unit_gpu-004_1763805600.log",
            "result_path": "/data/continuous_validation/dl_unit/gpu-004/dl_unit_gpu-004_1763805600.json"}
    base.update(kw)
    return base


def pod(exit_code, message, *, started="2026-11-22T10:00:00Z", finished="2026-11-22T10:04:01Z", reason=None):
    terminated = {"exitCode": exit_code, "reason": reason or ("Completed" if exit_code == 0 else "Error"),
                  "startedAt": started, "finishedAt": finished, "message": message}
    return {"metadata": {"name": "cv-dl-unit-gpu-004-abcd", "creationTimestamp": CREATED},
            "status": {"phase": "Succeeded" if exit_code == 0 else "Failed",
                       "containerStatuses": [{"name": "base", "state": {"terminated": terminated}}]}}


def boundary(p, now=NOW, run_id="scheduled__2026-11-22T10:00:00+00:00", **kw):
    return results.attempt_from_pod(p, node_name=NODE, test_name=TEST, now=now, gpu_count=8,
                                    dag_id="continuous_validation", run_id=run_id, map_index=0, try_number=1, **kw)


def older_pass(store):
    store.record([Attempt(node_name=NODE, test_name=TEST, status="pass", finished_at=NOW - dt.timedelta(days=1),
                          run_id="scheduled__yesterday", dag_id="continuous_validation")])


def latest(store):
    (row,) = [r for r in store.latest() if (r["node_name"], r["test_name"]) == (NODE, TEST)]
    return row


# ------------------------------------------------------------------ the reported defects, end to end
HOSTILE = {
    "NUL byte in reason": (1, json.dumps(summary(reason="ECC error on cuda:3\u0000\u001b[2J")), "fail"),
    "NaN duration_s": (1, json.dumps(summary(duration_s=math.nan)), "fail"),
    "Infinity duration_s": (1, json.dumps(summary(duration_s=math.inf)), "fail"),
    "huge integer duration_s": (1, json.dumps(summary(duration_s=10**400)), "fail"),
    "huge integer metric": (1, json.dumps(summary(metrics={"gemm_bf16_tflops_min": 10**30})), "fail"),
    "NaN metric on a pass": (0, json.dumps(summary("pass", metrics={"x": math.nan})), "error"),  # NaN measures nothing
    "NUL inside a metric value": (1, json.dumps(summary(metrics={"ab": "x\u0000y"})), "fail"),
    "NUL inside a metric name (breaks the contract)": (1, json.dumps(summary(metrics={"a\u0000b": 1})), "error"),
    "lone surrogate in reason": (1, json.dumps(summary(reason="bad \ud800 text")), "fail"),
    "huge integer gpu_count": (1, json.dumps(summary(gpu_count=10**30)), "fail"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_report_is_recorded_with_its_true_status(store, name):
    exit_code, message, expected = HOSTILE[name]
    older_pass(store)
    attempt = boundary(pod(exit_code, message))
    assert attempt.status == expected
    assert store.record([attempt]).inserted == 1
    row = latest(store)
    assert row["status"] == expected and row["last_attempt_status"] == expected
    assert row["finished_at"] <= NOW
    (stored,) = [h for h in store.history(NODE, TEST) if h["run_id"] != "scheduled__yesterday"]
    assert "\x00" not in (stored["reason"] or "") and "\x1b" not in (stored["reason"] or "")
    assert stored["duration_s"] is not None and 0 <= stored["duration_s"] <= results.MAX_DURATION_S


def test_non_finite_duration_falls_back_to_the_pods_own_timing_and_is_noted():
    attempt = boundary(pod(1, json.dumps(summary(duration_s=math.nan))))
    assert attempt.duration_s == 241.0  # startedAt 10:00:00 .. finishedAt 10:04:01
    assert "duration_s" in attempt.reason and "pod's timing" in attempt.reason
    notes = [c for c in attempt.checks if c["name"] == results.NOTE_CHECK]
    assert notes and notes[0]["status"] == "error" and "duration_s" in notes[0]["message"]
    assert notes[0]["code"] == results.VALUE_INVALID


@pytest.mark.parametrize("field, literal", [
    ("duration_s", "NaN"), ("duration_s", "Infinity"), ("duration_s", "-Infinity"), ("duration_s", "1e400"),
    ("duration_s", "-5"), ("duration_s", "1e12"), ("metrics", "NaN"), ("metrics", "1e400"),
    ("metrics", "99999999999999999999999"), ("gpu_count", "1e400"),
])
def test_a_pass_holding_a_number_nobody_can_judge_is_an_error_with_a_code(field, literal):
    """Exactly as a pod's JSON can say it: NaN/Infinity are what Python's json writes for them."""
    body = summary("pass", metrics={"busbw_gbps": "__X__"}) if field == "metrics" else summary("pass", **{field: "__X__"})
    attempt = boundary(pod(0, json.dumps(body).replace('"__X__"', literal)))
    assert attempt.status == "error", (field, literal, attempt.reason)
    assert attempt.reason.startswith(results.VALUE_INVALID + ":") and field in attempt.reason
    check = next(c for c in attempt.checks if c.get("code") == results.VALUE_INVALID)
    assert check["status"] == "error" and check["name"] == results.NOTE_CHECK
    assert "the suite said:" in attempt.reason or "malformed suite result" in attempt.reason  # and why else


def test_a_fail_with_a_bad_number_stays_a_fail():
    attempt = boundary(pod(1, json.dumps(summary(metrics={"x": math.inf}))))
    assert attempt.status == "fail" and any(c.get("code") == results.VALUE_INVALID for c in attempt.checks)


def test_a_huge_metric_becomes_null_and_is_noted():
    attempt = boundary(pod(1, json.dumps(summary(metrics={"big": 10**30, "ok": 1.5}))))
    assert attempt.metrics == {"big": None, "ok": 1.5}
    assert any("metrics.big" in c.get("message", "") for c in attempt.checks)


def test_control_characters_are_removed_and_the_reason_kept_long():
    long_reason = "0/12 nodes are available: " + ", ".join(f"{i} node(s) had untolerated taint" for i in range(100))
    attempt = boundary(pod(1, json.dumps(summary(reason="\u202eevil\u0007 " + long_reason))))
    assert attempt.reason.startswith("evil 0/12 nodes are available")
    assert 1000 < len(attempt.reason) <= results.MAX_REASON


def test_a_rejected_summary_is_an_error_with_the_reason_never_skipped(store):
    older_pass(store)
    bad = summary("pass", metrics=[1, 2], checks="all good")
    attempt = boundary(pod(0, json.dumps(bad)))
    assert attempt.status == "error" and "malformed suite result" in attempt.reason
    store.record([attempt])
    assert latest(store)["status"] == "error"


def test_nesting_deeper_than_the_parser_is_an_error_not_a_crash():
    attempt = boundary(pod(0, "[" * 4000))
    assert attempt.status == "error" and "without a result" in attempt.reason


def test_a_non_zero_exit_is_never_a_pass():
    for code in (1, 2, 3, 137, 255, -1, 2**40):
        assert boundary(pod(code, json.dumps(summary("pass")))).status != "pass", code


# ------------------------------------------------------------------ clocks that lie
def test_a_finish_in_the_future_cannot_pin_a_pair(store):
    """A node whose clock runs a day ahead: its pass is recorded at the observation time, so the real
    failure an hour later is the latest."""
    ahead = boundary(pod(0, json.dumps(summary("pass")), started="2026-11-23T10:00:00Z",
                         finished="2026-11-23T10:04:01Z"), run_id="r1")
    assert ahead.status == "pass" and ahead.finished_at == NOW and ahead.started_at is None
    assert "finishedAt 2026-11-23T10:04:01+00:00 is outside the pod's lifetime" in ahead.reason
    later = NOW + dt.timedelta(hours=1)
    failing = boundary(pod(1, json.dumps(summary()), started="2026-11-22T11:00:00Z",
                           finished="2026-11-22T11:04:00Z"), now=later, run_id="r2")
    store.record([ahead])
    store.record([failing])
    row = latest(store)
    assert row["status"] == "fail" and row["finished_at"] == failing.finished_at
    assert store.check_latest() == []


def test_a_finish_within_the_clock_skew_allowance_is_the_pods_own_whenever_it_is_read():
    """A kubelet 2 minutes ahead: the attempt keeps its time, so a second read (a retried task, the orphan
    reaper) a minute later is the same attempt, stored as a duplicate rather than a conflict."""
    ahead = pod(0, json.dumps(summary("pass")), finished="2026-11-22T10:07:00Z")
    first, again = boundary(ahead), boundary(ahead, now=NOW + dt.timedelta(minutes=1))
    assert first.finished_at == again.finished_at == dt.datetime(2026, 11, 22, 10, 7, tzinfo=dt.UTC)
    assert first == again and "adjusted" not in first.reason


def test_a_start_before_the_pod_existed_is_not_believed():
    attempt = boundary(pod(1, json.dumps(summary()), started="2020-01-01T00:00:00Z"))
    assert attempt.status == "fail" and attempt.started_at is None
    assert "startedAt 2020-01-01T00:00:00+00:00" in attempt.reason


@pytest.mark.parametrize("stamp", ["yesterday", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "", None])
def test_unreadable_or_absurd_container_times_fall_back_to_now(stamp):
    attempt = boundary(pod(1, json.dumps(summary()), started=stamp, finished=stamp))
    assert attempt.status == "fail" and attempt.finished_at == NOW


# ------------------------------------------------------------------ the operator uses the same boundary
def test_the_operator_records_a_hostile_report_with_its_status():
    from cluster_doctor.airflow.operator import NodeValidationPodOperator
    from cluster_doctor.domain.config import Settings

    run_config = {"settings": Settings().to_dict(), "configmap": "cluster-doctor-suites-0",
                  "suite_version": "sha256:0", "suite_files": ["__init__.py"]}
    op = NodeValidationPodOperator(task_id="validate", node_name=NODE, test_name=TEST, gpu_count=8,
                                   planned_at=NOW.isoformat(), run_config=run_config)
    for exit_code, message, expected in HOSTILE.values():
        outcome = results.classify(pod(exit_code, message), node_name=NODE, test_name=TEST, now=NOW)
        attempt = op._attempt(None, outcome)
        assert attempt.status == expected
        assert Attempt.from_dict(attempt.to_dict()) == attempt  # survives XCom to the record task


def test_to_attempt_keeps_the_try_even_when_a_value_is_still_refused():
    """An outcome built by hand (not through classify) with a value Postgres cannot take: the try is
    still recorded, never as pass, with why."""
    outcome = results.PodOutcome("pass", "ok", summary={"metrics": {"x": 2**70}})
    attempt = results.to_attempt(outcome, node_name=NODE, test_name=TEST, run_id="r", try_number=3, now=NOW)
    assert attempt.status == "error" and attempt.try_number == 3 and attempt.finished_at == NOW
    assert "could not be recorded as given (metrics.x" in attempt.reason and "it said: pass: ok" in attempt.reason
    timeout = results.to_attempt(results.PodOutcome("timeout", "Pending\x00 for 20 min"), node_name=NODE,
                                 test_name=TEST, now=NOW)
    assert timeout.status == "timeout" and timeout.reason == "Pending for 20 min"
