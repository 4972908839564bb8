"""domain.slow_cost: the GPU-hours a slow node loses, from its flagged probe lines, its GPU count and since when."""

from __future__ import annotations

import datetime as dt

import pytest
from cluster_doctor.domain import slow_cost

from tests.clock import now as clock_now

NOW = clock_now().replace(microsecond=0)
H = dt.timedelta(hours=1)


def test_a_probe_line_as_the_store_writes_it_is_read_back():
    f = slow_cost.parse_probe("straggler:probe_gemm_tflops_min=612.0000 (fleet median 700.0000)")
    assert (f.kind, f.metric, f.value, f.fleet_median) == ("straggler", "probe_gemm_tflops_min", 612.0, 700.0)
    assert f.slowdown == pytest.approx(88 / 700)
    drift = slow_cost.parse_probe("drift:probe_hbm_gbps_min=2500")
    assert drift.fleet_median is None and drift.slowdown is None  # judged against its own past: no fleet figure
    assert slow_cost.parse_probe("GPU 2: hardware thermal slowdown") is None
    assert slow_cost.parse_probe("straggler:probe_gemm_tflops_min=abc (fleet median 700)") is None


def test_the_estimate_is_gpus_times_hours_since_times_the_slowdown():
    cost = slow_cost.estimate(["straggler:probe_gemm_tflops_min=612 (fleet median 700)"], since=NOW - 25 * H,
                              now=NOW, gpus=8)
    assert cost.slowdown == pytest.approx(88 / 700)
    assert cost.gpu_hours == pytest.approx(8 * 25 * 88 / 700)  # 25.1
    text = cost.describe()
    assert text.startswith(f"~25 GPU-hours at ~12.6 % slow since {NOW - 25 * H:%Y-%m-%d %H:%M} UTC")
    assert "8 GPUs × 1 d 1 h × 12.6 %" in text and "probe_gemm_tflops_min 612 vs fleet median 700" in text
    assert "a synchronous job of k nodes loses k times that" in text


def test_the_worst_metric_sets_the_slowdown():
    lines = ["straggler:probe_gemm_tflops_min=665 (fleet median 700)",  # 5 %
             "straggler:probe_hbm_gbps_min=2400 (fleet median 3000)",  # 20 %
             "drift:probe_gemm_tflops_min=100"]  # no fleet median: not counted
    cost = slow_cost.estimate(lines, since=NOW - 10 * H, now=NOW, gpus=4)
    assert cost.figure.metric == "probe_hbm_gbps_min" and cost.gpu_hours == pytest.approx(4 * 10 * 0.2)
    assert cost.describe().startswith("~8 GPU-hours at ~20.0 % slow")


def test_signals_only_or_a_figure_not_under_the_median_is_not_estimated():
    assert slow_cost.estimate([], since=NOW - H, now=NOW, gpus=8).gpu_hours is None
    above = slow_cost.estimate(["drift:probe_gemm_tflops_min=710 (fleet median 700)"], since=NOW - H, now=NOW, gpus=8)
    assert above.figure is None and above.describe().startswith("unknown: no probe figure")


def test_an_unknown_gpu_count_gives_the_loss_per_gpu():
    cost = slow_cost.estimate(["straggler:probe_gemm_tflops_min=630 (fleet median 700)"], since=NOW - 20 * H,
                              now=NOW, gpus=None)
    assert cost.gpu_hours is None
    assert "GPU count unknown, ~2 GPU-hours per GPU" in cost.describe()  # 20 h x 10 %


def test_evidence_from_the_future_costs_nothing_yet():
    cost = slow_cost.estimate(["straggler:probe_gemm_tflops_min=630 (fleet median 700)"], since=NOW + H, now=NOW,
                              gpus=8)
    assert cost.hours == 0 and cost.gpu_hours == 0
