"""dl/perf.py: the pure judging of a benchmark's rates and of its data verified after every chunk."""

from __future__ import annotations

from cluster_doctor_suites.baselines import Expectation
from cluster_doctor_suites.dl import perf
from cluster_doctor_suites.dl.bench import Verdicts
from cluster_doctor_suites.dl.devices import Dev


def _devs(n):
    return [Dev(f"cuda:{i}", None, {"pci_bus_id": f"00000000:{0x18 + i:02X}:00.0"}) for i in range(n)]


def test_perf_slow_gpu_fails_absolute_and_relative():
    per = {f"cuda:{i}": 735.0 for i in range(8)}
    per["cuda:5"] = 540.0
    exp = Expectation("gemm_bf16_tflops", 730, 0.15, "gpu-fryer")
    judged = perf.to_checks("gemm_bf16_tflops", "TFLOPS", per, exp, None, 0.10, _devs(8), 8)
    fails = [(c.name, c.device) for c in judged.checks if c.status == "fail"]
    assert fails == [("gemm_bf16_tflops", "cuda:5"), ("gemm_bf16_tflops_vs_node_best", "cuda:5")]
    abs_check = next(c for c in judged.checks if c.name == "gemm_bf16_tflops" and c.device == "cuda:5")
    assert "540 TFLOPS < 620.5 TFLOPS" in abs_check.message and "00000000:1D:00.0" in abs_check.message
    total = next(c for c in judged.checks if c.name == "gemm_bf16_tflops_node_total")
    assert total.threshold == ">= 4964" and total.status == "pass"
    metrics = {m.key: m for m in judged.metrics}
    assert metrics["gemm_bf16_tflops_min"].value == 540.0 and metrics["gemm_bf16_tflops_min"].summary


def test_perf_unknown_model_is_relative_only():
    per = {"cuda:0": 100.0, "cuda:1": 98.0, "cuda:2": 97.0}
    judged = perf.to_checks("gemm_bf16_tflops", "TFLOPS", per, None, None, 0.10, _devs(3), 3)
    st = {(c.name, c.device): c.status for c in judged.checks}
    assert {s for (n, _), s in st.items() if n == "gemm_bf16_tflops"} == {"skip"}
    assert {s for (n, _), s in st.items() if n == "gemm_bf16_tflops_vs_node_best"} == {"pass"}


def test_a_missing_gpu_cannot_reach_the_node_total():
    per = {f"cuda:{i}": 700.0 for i in range(7)}  # each above its floor; 7 measured, 8 expected
    exp = Expectation("gemm_bf16_tflops", 730, 0.15, "gpu-fryer")
    judged = perf.to_checks("gemm_bf16_tflops", "TFLOPS", per, exp, None, 0.10, _devs(7), 8)
    total = next(c for c in judged.checks if c.name == "gemm_bf16_tflops_node_total")
    assert total.status == "fail" and "7 measured" in total.message and total.threshold == ">= 4964"
    assert {c.status for c in judged.checks if c.name == "gemm_bf16_tflops"} == {"pass"}


def test_summarise_takes_the_median_chunk_on_gpus_and_the_best_round_on_the_cpu():
    rates = {"x": [1.0, 9.0, 2.0]}
    assert perf.summarise(rates, cpu=False) == {"x": 2.0}
    assert perf.summarise(rates, cpu=True) == {"x": 9.0}


def test_sustained_checks_name_the_first_bad_chunk_and_a_device_never_verified():
    devs = _devs(3)
    v = Verdicts(devs)
    v.record(devs[0], (0, ""))
    v.record(devs[1], (0, ""))
    v.record(devs[1], (4, "element 5"))
    checks = perf.sustained_checks("gemm_result", "GEMM 8x8x8", v, devs)
    assert [(c.device, c.status) for c in checks] == [("cuda:0", "pass"), ("cuda:1", "fail"), ("cuda:2", "error")]
    assert checks[1].code == "BENCH_RESULT_CORRUPT" and checks[1].value == 4
    assert "first in chunk 2 of 2" in checks[1].message and "element 5 (00000000:19:00.0)" in checks[1].message
    assert checks[2].code == "NO_MEASUREMENT"
