"""dl_unit: the full CPU-mode run, and fault injection on CPU virtual devices (a matmul that corrupts
one device's output, a device that is not deterministic, an optimizer that does not learn)."""

from __future__ import annotations

import time

import pytest
import torch
from cluster_doctor_suites import dl_unit
from cluster_doctor_suites.baselines import Expectation

FAST = ("--device", "cpu", "--only", "numerics,agreement")


def corrupt_matmul(monkeypatch, devices, *, scale=None, every_other=False):
    """Patch torch.matmul so that fp32 results computed on `devices` are off by one ulp in one element
    (or scaled): the kind of silent corruption a marginal GPU produces."""
    orig = torch.matmul
    calls: dict[str, int] = {}

    def fake(a, b, *args, **kw):
        out = orig(a, b, *args, **kw)
        dev = dl_unit.current_device()
        if dev not in devices or out.dtype != torch.float32 or "out" in kw:
            return out
        calls[dev] = calls.get(dev, 0) + 1
        if every_other and calls[dev] % 2:
            return out
        if scale is not None:
            return out * scale
        x = out.detach().reshape(-1)[7]
        delta = torch.zeros_like(out)
        delta.view(-1)[7] = torch.nextafter(x, x + 1) - x
        return out + delta  # gradients flow as before: only the forward output is wrong

    monkeypatch.setattr(torch, "matmul", fake)


def statuses(ns, name):
    return {c["device"]: c["status"] for c in ns.result["checks"] if c["name"] == name}


def test_cpu_mode_full_run_passes(run_cli, h):
    t0 = time.monotonic()
    ns = run_cli("dl_unit", "--device", "cpu", "--cpu-devices", "2", timeout=180)
    h.check_artifacts(ns, status="pass", suite="dl_unit")
    assert time.monotonic() - t0 < 60
    names = {c["name"] for c in ns.result["checks"]}
    for op in (
        "matmul_fp32",
        "matmul_bf16",
        "matmul_fp16",
        "conv2d_fp32",
        "conv2d_bf16",
        "layer_norm_fp32",
        "softmax_bf16",
        "sdpa_fp32",
        "sdpa_bf16",
        "gelu_fp32",
        "cross_entropy_fp32",
    ):
        assert {f"{op}_fwd", f"{op}_bwd"} <= names, op
    assert statuses(ns, "cross_device_agreement") == {"cpu:0": "pass", "cpu:1": "pass"}
    assert statuses(ns, "determinism") == {"cpu:0": "pass", "cpu:1": "pass"}
    for name in (
        "gemm_fp32_tflops",
        "gemm_fp32_tflops_vs_node_best",
        "mem_bw_gbps",
        "training_smoke",
        "memory_pattern",
    ):
        assert set(statuses(ns, name)) == {"cpu:0", "cpu:1"}, name
    m = ns.summary["metrics"]
    assert m["gemm_fp32_tflops_min"] > 0 and m["mem_bw_gbps_min"] > 0 and m["sdc_suspects"] == 0
    assert ns.result["environment"]["baseline"] == "cpu" and ns.result["environment"]["torch"]


def test_one_ulp_corruption_on_one_of_three_devices_names_it(run_inproc, monkeypatch, h):
    corrupt_matmul(monkeypatch, {"cpu:1"})
    ns = run_inproc(dl_unit, *FAST, "--cpu-devices", "3")
    h.check_artifacts(ns, status="fail", suite="dl_unit")
    assert statuses(ns, "cross_device_agreement") == {"cpu:0": "pass", "cpu:1": "fail", "cpu:2": "pass"}
    assert statuses(ns, "matmul_fp32_fwd")["cpu:1"] == "pass", (
        "1 ulp is within tolerance: only bitwise catches it"
    )
    bad = h.failing(ns, "cross_device_agreement")[0]
    assert (
        "silent-data-corruption suspect" in bad["message"] and "differs from the majority" in bad["message"]
    )
    assert "matmul_fp32.out" in bad["message"]
    assert ns.summary["reason"].startswith("cross_device_agreement[cpu:1]: silent-data-corruption suspect")
    assert ns.summary["metrics"]["sdc_suspects"] == 1


def test_two_devices_that_disagree_are_both_named(run_inproc, monkeypatch, h):
    corrupt_matmul(monkeypatch, {"cpu:1"})
    ns = run_inproc(dl_unit, *FAST, "--cpu-devices", "2")
    h.check_artifacts(ns, status="fail", suite="dl_unit")
    assert statuses(ns, "cross_device_agreement") == {"cpu:0": "fail", "cpu:1": "fail"}


def test_gross_corruption_fails_numerics_with_the_number(run_inproc, monkeypatch, h):
    corrupt_matmul(monkeypatch, {"cpu:2"}, scale=1.01)
    ns = run_inproc(dl_unit, *FAST, "--cpu-devices", "3")
    h.check_artifacts(ns, status="fail", suite="dl_unit")
    bad = [c for c in h.failing(ns, "matmul_fp32_fwd")]
    assert [c["device"] for c in bad] == ["cpu:2"]
    assert bad[0]["value"] == pytest.approx(0.01, rel=0.05) and bad[0]["threshold"] == "<= 3e-05"
    assert ns.summary["reason"].startswith("matmul_fp32_fwd[cpu:2]: 0.01")
    assert statuses(ns, "cross_device_agreement")["cpu:2"] == "fail"


def test_a_device_that_is_not_deterministic_fails(run_inproc, monkeypatch, h):
    corrupt_matmul(monkeypatch, {"cpu:1"}, every_other=True)
    ns = run_inproc(dl_unit, *FAST, "--cpu-devices", "3")
    h.check_artifacts(ns, status="fail", suite="dl_unit")
    assert statuses(ns, "determinism") == {"cpu:0": "pass", "cpu:1": "fail", "cpu:2": "pass"}
    assert "matmul_fp32.out" in h.failing(ns, "determinism")[0]["message"]


def test_library_nondeterminism_everywhere_is_a_warning_not_a_fault(run_inproc, monkeypatch, h):
    corrupt_matmul(monkeypatch, {"cpu:0", "cpu:1"}, every_other=True)
    ns = run_inproc(dl_unit, *FAST, "--cpu-devices", "2")
    h.check_artifacts(ns, status="pass", suite="dl_unit")
    warn = [c for c in ns.result["checks"] if c["name"] == "deterministic_kernels"]
    assert warn and warn[0]["status"] == "warn" and "matmul_fp32.out" in warn[0]["message"]


def test_training_that_does_not_learn_fails(run_inproc, monkeypatch, h):
    class Frozen(torch.optim.SGD):
        def __init__(self, params, **kw):
            super().__init__(params, lr=0.0)

    monkeypatch.setattr(torch.optim, "AdamW", Frozen)
    ns = run_inproc(dl_unit, "--device", "cpu", "--only", "training", "--train-steps", "12")
    h.check_artifacts(ns, status="fail", suite="dl_unit")
    bad = h.failing(ns, "training_smoke")
    assert {c["device"] for c in bad} == {"cpu:0", "cpu:1"} and bad[0]["value"] > 0.5


def test_no_gpu_visible_with_expected_8_fails(run_inproc, h):
    ns = run_inproc(dl_unit, "--device", "cuda", "--expected-gpus", "8")  # this machine has no GPU
    h.check_artifacts(ns, status="fail", suite="dl_unit")
    assert ns.summary["reason"].startswith("gpu_count: expected 8 GPUs, found 0")
    assert ns.summary["check_counts"]["fail"] == 1


class _Ctx:
    """Just enough of Context for the pure judging helpers."""

    def __init__(self):
        import argparse

        from cluster_doctor_suites.harness.context import Context

        self.c = Context(
            "dl_unit", argparse.Namespace(node="n", device="cuda", gpu_model=None, expected_gpus=None)
        )
        self.c.log = lambda msg: None

    def __getattr__(self, k):
        return getattr(self.c, k)


def _devs(n):
    return [dl_unit.Dev(f"cuda:{i}", None, {"pci_bus_id": f"00000000:{0x18 + i:02X}:00.0"}) for i in range(n)]


def test_perf_slow_gpu_fails_absolute_and_relative():
    ctx = _Ctx()
    per = {f"cuda:{i}": 735.0 for i in range(8)}
    per["cuda:5"] = 540.0
    exp = Expectation("gemm_bf16_tflops", 730, 0.15, "gpu-fryer")
    dl_unit.judge_perf(ctx.c, "gemm_bf16_tflops", "TFLOPS", per, exp, None, 0.10, _devs(8), 8)
    fails = [(c.name, c.device) for c in ctx.c.checks if c.status == "fail"]
    assert fails == [("gemm_bf16_tflops", "cuda:5"), ("gemm_bf16_tflops_vs_node_best", "cuda:5")]
    abs_check = next(c for c in ctx.c.checks if c.name == "gemm_bf16_tflops" and c.device == "cuda:5")
    assert "540 TFLOPS < 620.5 TFLOPS" in abs_check.message and "00000000:1D:00.0" in abs_check.message
    total = next(c for c in ctx.c.checks if c.name == "gemm_bf16_tflops_node_total")
    assert total.threshold == ">= 4964" and total.status == "pass"
    assert ctx.c.metrics["gemm_bf16_tflops_min"] == 540.0


def test_perf_unknown_model_is_relative_only():
    ctx = _Ctx()
    per = {"cuda:0": 100.0, "cuda:1": 98.0, "cuda:2": 97.0}
    dl_unit.judge_perf(ctx.c, "gemm_bf16_tflops", "TFLOPS", per, None, None, 0.10, _devs(3), 3)
    st = {(c.name, c.device): c.status for c in ctx.c.checks}
    assert {s for (n, _), s in st.items() if n == "gemm_bf16_tflops"} == {"skip"}
    assert {s for (n, _), s in st.items() if n == "gemm_bf16_tflops_vs_node_best"} == {"pass"}


def test_op_cases_cover_the_issue():
    cases = {(c.op, c.dtype) for c in dl_unit.op_cases()}
    for op in ("matmul", "conv2d", "layer_norm", "softmax", "sdpa", "gelu", "cross_entropy"):
        assert any(o == op for o, _ in cases), op
    assert {("matmul", d) for d in ("fp32", "tf32", "bf16", "fp16")} <= cases


def corrupt_when_hot(monkeypatch, device: str, after: int, kind: str):
    """A device that computes right while cool and corrupts its output after `after` benchmark steps
    (the fault class 'corruption under sustained load'): GEMM results or copied words go wrong."""
    calls = {"n": 0}
    if kind == "gemm":
        orig = torch.matmul

        def fake(a, b, *args, **kw):
            out = orig(a, b, *args, **kw)
            if "out" in kw and dl_unit.current_device() == device:
                calls["n"] += 1
                if calls["n"] > after:
                    kw["out"].view(-1)[5] = kw["out"].view(-1)[5] * 2 + 1
            return out

        monkeypatch.setattr(torch, "matmul", fake)
    else:
        orig_copy = torch.Tensor.copy_

        def fake_copy(self, src, *args, **kw):
            out = orig_copy(self, src, *args, **kw)
            if dl_unit.current_device() == device and self.dtype == torch.int32 and self.numel() > 1 << 16:
                calls["n"] += 1
                if calls["n"] > after:
                    self.view(-1)[77].bitwise_xor_(1 << 20)  # one flipped bit in one word
            return out

        monkeypatch.setattr(torch.Tensor, "copy_", fake_copy)
    return calls


@pytest.mark.parametrize("kind, check, group", [("gemm", "gemm_result", "gemm"), ("membw", "membw_result", "membw")])
def test_corruption_under_sustained_load_fails_the_benchmark(run_inproc, monkeypatch, h, kind, check, group):
    calls = corrupt_when_hot(monkeypatch, "cpu:1", after=3, kind=kind)
    ns = run_inproc(dl_unit, "--device", "cpu", "--cpu-devices", "2", "--only", group)
    h.check_artifacts(ns, status="fail", suite="dl_unit")
    assert calls["n"] > 3, "the hook must have been reached under load"
    assert statuses(ns, check) == {"cpu:0": "pass", "cpu:1": "fail"}
    bad = h.failing(ns, check)[0]
    assert bad["code"] == "BENCH_RESULT_CORRUPT" and "under sustained load" in bad["message"]
    assert "first in chunk" in bad["message"] and bad["value"] >= 1
    assert ns.summary["code"] == "BENCH_RESULT_CORRUPT"


def test_benchmarks_verify_their_data_on_a_healthy_run(run_inproc, h):
    ns = run_inproc(dl_unit, "--device", "cpu", "--cpu-devices", "2", "--only", "gemm,membw")
    h.check_artifacts(ns, status="pass", suite="dl_unit")
    for check in ("gemm_result", "membw_result"):
        got = {c["device"]: c for c in ns.result["checks"] if c["name"] == check}
        assert set(got) == {"cpu:0", "cpu:1"} and all(c["status"] == "pass" for c in got.values())
        assert all("verified after each of" in c["message"] for c in got.values())
