"""dl/numerics.py: the op/dtype cases, a gross corruption through the suite, and the pure judging of
one case on one device."""

from __future__ import annotations

import pytest
from cluster_doctor_suites import dl_unit
from cluster_doctor_suites.dl import numerics
from cluster_doctor_suites.dl.numerics import CaseResult, Raised

from tests.support.dl_faults import FAST, corrupt_matmul, statuses

TOL = {"fp32": 3e-5, "bf16": 2e-2, "backward_factor": 2.5}


def test_gross_corruption_fails_numerics_with_the_number(run_inproc, monkeypatch, h):
    corrupt_matmul(monkeypatch, {"cpu:2"}, scale=1.01)
    ns = run_inproc(dl_unit, *FAST, "--cpu-devices", "3")
    h.check_artifacts(ns, status="fail", suite="dl_unit")
    bad = [c for c in h.failing(ns, "matmul_fp32_fwd")]
    assert [c["device"] for c in bad] == ["cpu:2"]
    assert bad[0]["value"] == pytest.approx(0.01, rel=0.05) and bad[0]["threshold"] == "<= 3e-05"
    assert ns.summary["reason"].startswith("matmul_fp32_fwd[cpu:2]: 0.01")
    assert statuses(ns, "cross_device_agreement")["cpu:2"] == "fail"


def test_op_cases_cover_the_issue():
    cases = {(c.op, c.dtype) for c in numerics.op_cases()}
    for op in ("matmul", "conv2d", "layer_norm", "softmax", "sdpa", "gelu", "cross_entropy"):
        assert any(o == op for o, _ in cases), op
    assert {("matmul", d) for d in ("fp32", "tf32", "bf16", "fp16")} <= cases


def test_backward_gets_the_dtype_tolerance_times_the_backward_factor():
    r = CaseResult("matmul", "bf16", "cuda:3", " (00000000:1B:00.0)", fwd=0.01, bwd=0.045)
    fwd, bwd = numerics.to_checks(r, TOL, cpu=False, numerics=True)
    assert (fwd.name, fwd.status, fwd.threshold) == ("matmul_bf16_fwd", "pass", "<= 0.02")
    assert (bwd.name, bwd.status, bwd.threshold) == ("matmul_bf16_bwd", "pass", "<= 0.05")
    worse = CaseResult("matmul", "bf16", "cuda:3", " (00000000:1B:00.0)", fwd=0.03, bwd=0.001)
    bad = numerics.to_checks(worse, TOL, cpu=False, numerics=True)[0]
    assert bad.status == "fail" and bad.code == "NUMERICS_ERROR" and "00000000:1B:00.0" in bad.message
    assert numerics.to_checks(worse, TOL, cpu=False, numerics=False) == []  # agreement only


def test_a_hardware_error_fails_the_case_even_for_agreement_only_and_breaks_the_device():
    r = CaseResult("conv2d", "fp16", "cuda:1", "", raised=Raised("RuntimeError", "CUDA error: uncorrectable ECC error", False))
    (c,) = numerics.to_checks(r, TOL, cpu=False, numerics=False)
    assert (c.name, c.status) == ("conv2d_fp16_fwd", "fail")
    assert c.message == "conv2d fp16 raised RuntimeError: CUDA error: uncorrectable ECC error"
    assert numerics.breaks_device(r, cpu=False)
    soft = CaseResult("conv2d", "fp16", "cuda:1", "", raised=Raised("TypeError", "bad argument", False))
    assert numerics.to_checks(soft, TOL, cpu=False, numerics=True)[0].status == "error"
    assert not numerics.breaks_device(soft, cpu=False)


def test_an_op_the_cpu_lacks_is_a_skip_when_numerics_are_asked_and_nothing_otherwise():
    r = CaseResult("sdpa", "bf16", "cpu:0", "", raised=Raised("NotImplementedError", "no bf16 kernel", True))
    (c,) = numerics.to_checks(r, TOL, cpu=True, numerics=True)
    assert (c.status, c.message) == ("skip", "not supported on CPU: no bf16 kernel")
    assert numerics.to_checks(r, TOL, cpu=True, numerics=False) == []
    assert not numerics.breaks_device(r, cpu=True)


def test_worst_errors_per_dtype_over_the_cases_that_ran():
    results = [CaseResult("a", "fp32", "cpu:0", "", fwd=1e-6, bwd=2e-6),
               CaseResult("b", "fp32", "cpu:1", "", fwd=5e-6, bwd=1e-7),
               CaseResult("c", "bf16", "cpu:0", "", raised=Raised("RuntimeError", "x", False))]
    assert numerics.worst_errors(results) == {"fp32": 5e-6}
