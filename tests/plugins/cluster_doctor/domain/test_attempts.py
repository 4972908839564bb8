import datetime as dt
import math

import pytest
from cluster_doctor.domain.attempts import Attempt, InvalidAttempt, from_suite_result

BASE = {"node_name": "gpu-001", "test_name": "dl_unit", "status": "pass", "finished_at": "2026-11-22T10:00:00Z"}


def test_minimal_attempt_normalizes_timestamps_to_utc():
    a = Attempt.from_dict({**BASE, "started_at": "2026-11-22T11:55:00+02:00"})
    assert a.finished_at == dt.datetime(2026, 11, 22, 10, 0, tzinfo=dt.UTC)
    assert a.started_at == dt.datetime(2026, 11, 22, 9, 55, tzinfo=dt.UTC)
    assert a.executed and a.metrics == {} and a.checks == []


@pytest.mark.parametrize("change, message", [
    ({"status": "passed"}, "unknown status 'passed'"),
    ({"node_name": "GPU_01"}, "invalid Kubernetes node name 'GPU_01'"),
    ({"test_name": "DL unit"}, "invalid test name"),
    ({"metrics": [1, 2]}, "metrics must be a JSON object"),
    ({"metrics": "fast"}, "metrics must be a JSON object"),
    ({"checks": {"a": 1}}, "checks must be a JSON array"),
    ({"checks": [{"status": "pass"}]}, r"checks\[0\] must be an object with a 'name'"),
    ({"finished_at": "yesterday"}, "finished_at: not an ISO-8601 timestamp"),
    ({"finished_at": "2026-11-22T10:00:00"}, "has no time zone"),
    ({"duration_s": -1}, "duration_s"),
    ({"try_number": "1"}, "try_number"),
    ({"surprise": 1}, "unknown attempt field"),
    ({"reason": "a\x00b"}, "NUL"),
    # what Postgres would refuse is refused here, with the field named, before anything is written
    ({"reason": "bad \ud800"}, "reason: not valid Unicode"),
    ({"metrics": {"x": "a\x00b"}}, r"metrics.x: contains a NUL"),
    ({"metrics": {"a\x00": 1}}, "metrics key: contains a NUL"),
    ({"metrics": {"x": 2**63}}, "metrics.x: an integer out of range"),
    ({"checks": [{"name": "c", "value": -(2**63) - 1}]}, r"checks\[0\].value"),
    ({"duration_s": 10**400}, "duration_s: must be a finite number"),
    ({"finished_at": 1e12}, "finished_at: not a Unix timestamp between the years 1 and 9999"),
    ({"finished_at": 1e20}, "finished_at: not a Unix timestamp"),
    ({"finished_at": "0001-01-01T00:00:00+01:00"}, "out of range in UTC"),
    ({"gpu_count": 2**31}, "gpu_count"),
    ({"try_number": 2**31}, "try_number"),
    ({"map_index": -(2**31) - 1}, "map_index"),
    ({"run_id": "r\x00"}, "run_id: contains a NUL"),
    ({"test_name": "dl_unit\n"}, "invalid test name"),
])
def test_malformed_attempts_are_refused_naming_the_field(change, message):
    with pytest.raises(InvalidAttempt, match=message):
        Attempt.from_dict({**BASE, **change})


def test_missing_fields_are_named():
    with pytest.raises(InvalidAttempt, match="finished_at"):
        Attempt.from_dict({"node_name": "gpu-001", "test_name": "dl_unit", "status": "pass"})


def test_non_finite_numbers_become_null_for_jsonb():
    a = Attempt.from_dict({**BASE, "metrics": {"tflops": math.nan, "ok": 1.5},
                           "checks": [{"name": "x", "value": math.inf}]})
    assert a.metrics == {"tflops": None, "ok": 1.5}
    assert a.checks[0]["value"] is None
    assert "NaN" not in a.row()[6] and "Infinity" not in a.row()[7]


def test_round_trip_through_dict():
    a = Attempt.from_dict({**BASE, "metrics": {"x": 1}, "reason": "ok", "run_id": "r1", "map_index": 3})
    assert Attempt.from_dict(a.to_dict()) == a


SUMMARY = {
    "schema_version": "1", "suite": "dl_unit", "node": "gpu-007", "status": "fail",
    "reason": "matmul_bf16 on cuda:3: max error 0.5 > 0.01", "started_at": "2026-11-22T10:00:00Z",
    "finished_at": "2026-11-22T10:04:00Z", "duration_s": 240.0, "suite_version": "sha256:0123456789abcdef",
    "gpu_model": "NVIDIA-H100-80GB-HBM3", "gpu_count": 8, "metrics": {"gemm_bf16_tflops_min": 701.2},
    "checks": [{"name": "matmul_bf16", "status": "fail", "device": "cuda:3", "value": 0.5, "threshold": 0.01}],
    "check_counts": {"pass": 80, "fail": 1}, "truncated": False,
    "log_path": "/data/continuous_validation/dl_unit/gpu-007/dl_unit_gpu-007_1763805600.log",
}


def test_attempt_from_a_suite_summary():
    a = from_suite_result(SUMMARY, dag_id="continuous_validation", run_id="scheduled__x", pod_name="p", try_number=1)
    assert (a.node_name, a.test_name, a.status, a.gpu_model) == ("gpu-007", "dl_unit", "fail", "NVIDIA-H100-80GB-HBM3")
    assert a.checks[0]["device"] == "cuda:3" and a.metrics["gemm_bf16_tflops_min"] == 701.2
    assert a.log_path.endswith(".log") and a.pod_name == "p"


def test_attempt_from_a_full_result_takes_the_model_from_the_environment():
    full = {k: v for k, v in SUMMARY.items() if k not in ("gpu_model", "log_path")}
    full["environment"] = {"gpu_model": "NVIDIA H200"}
    full["result_path"] = "/data/continuous_validation/dl_unit/gpu-007/dl_unit_gpu-007_1.json"
    a = from_suite_result(full)
    assert a.gpu_model == "NVIDIA H200" and a.log_path.endswith("dl_unit_gpu-007_1.log")


@pytest.mark.parametrize("status", ["timeout", "garbage", None])
def test_a_suite_can_only_report_executed_statuses(status):
    with pytest.raises(InvalidAttempt, match="status"):
        from_suite_result({**SUMMARY, "status": status})


def test_the_largest_values_postgres_takes_are_accepted(store):
    extremes = {**BASE, "metrics": {"x": 2**63 - 1, "y": -(2**63), "z": 1.7e308}, "gpu_count": 2**31 - 1,
                "try_number": 2**31 - 1, "map_index": -(2**31), "duration_s": 1e300,
                "finished_at": "9999-12-31T23:59:59Z", "started_at": "0001-01-01T00:00:00Z"}
    far_future = Attempt.from_dict(extremes)  # a valid Attempt: Postgres could store it ...
    with pytest.raises(InvalidAttempt, match="in the future"):  # ... but a future finish would pin the pair
        store.record([far_future])
    a = Attempt.from_dict({**extremes, "finished_at": dt.datetime.now(dt.UTC).isoformat()})
    assert store.record([a]).inserted == 1
