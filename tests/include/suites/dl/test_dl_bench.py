"""dl/bench.py through gemm and membw: the data is verified after every chunk of a sustained run."""

from __future__ import annotations

import pytest
from cluster_doctor_suites import dl_unit

from tests.support.dl_faults import corrupt_when_hot, statuses


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
