"""nvbandwidth: its output read as the tool prints it (public outputs, fixtures/SOURCES.md), and the
suite run against a fake nvbandwidth that replays them with the tool's exit codes."""

from __future__ import annotations

import pytest
from cluster_doctor_suites import nvbandwidth as suite
from cluster_doctor_suites.checkers import nvbandwidth as nvbw

A100 = "NVIDIA-A100-SXM4-80GB"
WRITE, H2D = "device_to_device_memcpy_write_ce", "host_to_device_memcpy_ce"


def _fx(h, name: str) -> str:
    return h.fx("nvbandwidth", name)


def test_readme_matrix_is_read_pair_by_pair(h):
    out = nvbw.parse(_fx(h, "readme_v0.8_d2d_write_ce_8gpu.txt"), [WRITE])
    m = out.matrices[WRITE]
    assert m.description == "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)"
    values, missing = nvbw.pairs(nvbw.TESTCASES[WRITE], m)
    assert len(values) == 56 and not missing  # 8 x 7 pairs, the 0.00 diagonal is no pair
    assert values[(6, 0)] == 274.89 and min(values.values()) == 274.89


def test_na_diagonal_and_sum_line_of_v0_8(h):
    out = nvbw.parse(_fx(h, "issue50_6xA6000_v0.8_d2d_read_ce.txt").replace(
        "...\n", "...\nRunning device_to_device_memcpy_read_ce.\n"), ["device_to_device_memcpy_read_ce"])
    m = out.matrices["device_to_device_memcpy_read_ce"]
    assert out.version == "v0.8" and out.driver == "580.95.05" and m.total == 715.53
    values, missing = nvbw.pairs(nvbw.TESTCASES["device_to_device_memcpy_read_ce"], m)
    assert len(values) == 30 and not missing and values[(0, 3)] == 21.95


def test_verification_failure_is_found_with_the_testcase_it_stopped_in(h):
    out = nvbw.parse(_fx(h, "issue34_8xA100-SXM4-80GB_v0.7_verification_failed.txt"), ["device_to_device_memcpy_read_ce"])
    assert out.running == "device_to_device_memcpy_read_ce" and len(out.devices) == 8
    assert "0x70a640000000" in out.mismatch and not out.matrices


def test_old_and_new_waived_lines(h):
    old = nvbw.parse(_fx(h, "issue13_2xRTX2080Ti_v0.2_waiving_d2d_write_ce.txt"), [WRITE])
    assert old.waived == {WRITE} and len(old.devices) == 2
    # v0.6+ prints `Waived: ` (output.cpp addTestcase with an empty message): the next requested one
    new = nvbw.parse("Running host_to_device_memcpy_ce.\n" + _fx(h, "readme_v0.8_h2d_ce_8gpu.txt").split("\n", 1)[1]
                     + "\nWaived: \n", [H2D, WRITE])
    assert new.waived == {WRITE} and H2D in new.matrices


def _tool(fake_tool, h, body: str, rc: int = 0):
    return str(fake_tool("nvbandwidth", f'{body}\nexit {rc}'))


def _readme_tool(fake_tool, h, tmp_path, write: str | None = None):
    """A fake nvbandwidth printing the README's outputs for the testcases it is asked for."""
    w = tmp_path / "write.txt"
    w.write_text(write or _fx(h, "readme_v0.8_d2d_write_ce_8gpu.txt"))
    h2d = h.FIXTURES / "nvbandwidth" / "readme_v0.8_h2d_ce_8gpu.txt"
    return _tool(fake_tool, h, f'for t in "$@"; do case "$t" in {WRITE}) cat "{w}" ;; {H2D}) cat "{h2d}" ;; esac; done')


def _run(run_cli, tool: str, *args: str):
    return run_cli("nvbandwidth", "--nvbandwidth", tool, "--testcases", f"{WRITE},{H2D}", *args)


def test_healthy_a100_readme_run_passes_complete(run_cli, fake_tool, tmp_path, h):
    ns = _run(run_cli, _readme_tool(fake_tool, h, tmp_path), "--gpu-model", A100, "--expected-gpus", "8")
    h.check_artifacts(ns, status="pass", suite="nvbandwidth")
    assert ns.result["incomplete"] is False
    checks = {c["name"]: c for c in ns.result["checks"]}
    assert checks["nvbw_d2d_write_ce"]["value"] == 274.89 and "56 pair(s)" in checks["nvbw_d2d_write_ce"]["message"]
    assert checks["nvbw_h2d_ce"]["threshold"] == ">= 21.34" and checks["nvbw_data_verification"]["status"] == "pass"
    assert ns.result["metrics"]["nvbw_d2d_write_ce_min_gbps"] == 274.89
    assert ns.result["environment"]["baseline"] == "a100-sxm4-80gb"


def test_a_pair_below_the_floor_is_named_by_its_two_gpus(run_cli, fake_tool, tmp_path, h):
    slow = _fx(h, "readme_v0.8_d2d_write_ce_8gpu.txt").replace("276.60", "138.30")  # GPUs 3 -> 5 lost half
    ns = _run(run_cli, _readme_tool(fake_tool, h, tmp_path, slow), "--gpu-model", A100, "--expected-gpus", "8")
    h.check_artifacts(ns, status="fail", suite="nvbandwidth")
    bad = h.failing(ns, "nvbw_d2d_write_ce")
    assert [(c["device"], c["code"], c["action"]) for c in bad] == [("cuda:3,cuda:5", "NVBW_D2D_LOW", "reset_gpu")]
    assert "GPUs 3 and 5: 138.3 GB/s < 224.4 GB/s" in ns.summary["reason"]


def test_without_a_floor_the_node_median_still_names_a_slow_pair(run_cli, fake_tool, tmp_path, h):
    slow = _fx(h, "readme_v0.8_d2d_write_ce_8gpu.txt").replace("276.60", "200.00")
    ns = _run(run_cli, _readme_tool(fake_tool, h, tmp_path, slow), "--gpu-model", "Some-Future-GPU",
              "--expected-gpus", "8", "--expect", "nvlinks_per_gpu=12")
    h.check_artifacts(ns, status="fail", suite="nvbandwidth")
    assert [(c["device"], c["code"]) for c in h.failing(ns)] == [("cuda:3,cuda:5", "NVBW_SLOW_VS_PEERS")]


def test_pcie_pairs_without_nvlink_or_floor_are_not_compared(run_cli, fake_tool, tmp_path, h):
    # an unknown model without an NVLink expectation: GPU pairs under different PCIe switches
    # legitimately differ (NVIDIA/nvbandwidth#50: 26 vs 22 GB/s): no floor, no comparison, said so
    # and the suite's key measurement was not judged: an error (a configuration finding), never a pass
    slow = _fx(h, "readme_v0.8_d2d_write_ce_8gpu.txt").replace("276.60", "200.00")
    ns = _run(run_cli, _readme_tool(fake_tool, h, tmp_path, slow), "--gpu-model", "Some-Future-GPU",
              "--expected-gpus", "8")
    h.check_artifacts(ns, status="error", suite="nvbandwidth")
    assert ns.summary["code"] == "BASELINE_MISSING" and ns.summary["reason"].startswith("not judged, no baseline"), ns.summary
    d2d = next(c for c in ns.result["checks"] if c["name"] == "nvbw_d2d_write_ce")
    assert d2d["status"] == "skip" and d2d["code"] == "BASELINE_MISSING"
    assert any(c["name"] == "baseline" and "Some-Future-GPU" in c["message"] for c in ns.result["checks"])


def test_corrupted_copy_fails_the_node(run_cli, fake_tool, h):
    tool = _tool(fake_tool, h, f'cat "{h.FIXTURES / "nvbandwidth" / "issue34_8xA100-SXM4-80GB_v0.7_verification_failed.txt"}"', 1)
    ns = run_cli("nvbandwidth", "--nvbandwidth", tool, "--testcases", "device_to_device_memcpy_read_ce,host_to_device_memcpy_ce",
                 "--gpu-model", A100, "--expected-gpus", "8")
    h.check_artifacts(ns, status="fail", suite="nvbandwidth")
    assert ns.summary["code"] == "NVBW_DATA_MISMATCH" and ns.summary["action"] == "drain_and_service"
    skipped = {c["name"]: c["code"] for c in ns.result["checks"] if c["status"] == "skip"}
    assert skipped == {"nvbw_d2d_read_ce": "NVBW_NOT_RUN", "nvbw_h2d_ce": "NVBW_NOT_RUN"}  # never a pass


def test_waived_device_to_device_on_an_nvlink_model_is_no_peer_access(run_cli, fake_tool, h):
    tool = _tool(fake_tool, h, f'cat "{h.FIXTURES / "nvbandwidth" / "issue13_2xRTX2080Ti_v0.2_waiving_d2d_write_ce.txt"}"')
    # the A100 label's SKU has 8 GPUs: this 2-GPU board's node pool says so (--expect gpus=2)
    ns = run_cli("nvbandwidth", "--nvbandwidth", tool, "--testcases", WRITE, "--gpu-model", A100, "--expected-gpus", "2",
                 "--expect", "gpus=2")
    h.check_artifacts(ns, status="fail", suite="nvbandwidth")
    assert [(c["device"], c["code"]) for c in h.failing(ns)] == [("cuda:0,cuda:1", "NVBW_NO_PEER_ACCESS")]


def test_a_testcase_the_tool_never_reported_is_an_error(run_cli, fake_tool, h):
    tool = _tool(fake_tool, h, f'cat "{h.FIXTURES / "nvbandwidth" / "issue42_1xA100-SXM4-40GB_v0.8_h2d_sm.txt"}"')
    ns = run_cli("nvbandwidth", "--nvbandwidth", tool, "--testcases", H2D, "--expected-gpus", "1")
    h.check_artifacts(ns, status="error", suite="nvbandwidth")
    assert ns.summary["code"] == "NVBW_TESTCASE_ERROR" and "no result" in ns.summary["reason"]


def test_missing_tool_and_cpu_mode(run_cli, h):
    ns = run_cli("nvbandwidth", "--nvbandwidth", "nvbandwidth-not-installed")
    h.check_artifacts(ns, status="error", suite="nvbandwidth")
    assert ns.summary["code"] == "TOOL_MISSING"
    cpu = run_cli("nvbandwidth", "--device", "cpu")
    h.check_artifacts(cpu, status="pass", suite="nvbandwidth")
    assert cpu.summary["incomplete"] is True
    assert {c["code"] for c in cpu.result["checks"] if c["status"] == "skip"} == {"NVBW_NOT_APPLICABLE"}


def test_unknown_testcase_is_refused():
    import pytest
    from cluster_doctor_suites.harness.checks import SuiteError

    with pytest.raises(SuiteError, match="unknown nvbandwidth testcase"):
        suite._requested(type("A", (), {"testcases": "device_to_device_memcpy_sideways"})())


def test_the_image_builds_nvbandwidth_at_a_pinned_release(h):
    import re

    text = (h.SUITES_DIR / "Dockerfile").read_text()
    ref = re.search(r"^ARG NVBANDWIDTH_REF=(\S+)$", text, re.M)
    assert ref and re.fullmatch(r"v\d+\.\d+(\.\d+)?", ref.group(1)), "a release tag, never a branch"
    assert "AS nvbandwidth" in text and "github.com/NVIDIA/nvbandwidth.git" in text
    assert "CMAKE_CUDA_ARCHITECTURES" in text  # the builder has no GPU to detect them from
    assert "COPY --from=nvbandwidth /out/bin/nvbandwidth /usr/local/bin/nvbandwidth" in text


def test_a_device_to_device_only_run_without_a_device_list_counts_the_gpus_of_its_matrix(run_cli, fake_tool, h):
    """nvbandwidth v0.10 lists no `Device N:` lines; a device-to-device-only run (the README's write
    matrix, printed without them) is a healthy 8-GPU run, never "found 0"."""
    tool = _tool(fake_tool, h, f'cat "{h.FIXTURES / "nvbandwidth" / "readme_v0.8_d2d_write_ce_8gpu.txt"}"')
    ns = run_cli("nvbandwidth", "--nvbandwidth", tool, "--testcases", WRITE, "--gpu-model", A100, "--expected-gpus", "8")
    h.check_artifacts(ns, status="pass", suite="nvbandwidth")
    checks = {c["name"]: c for c in ns.result["checks"]}
    assert checks["gpu_count"]["status"] == "pass" and "result matrices" in checks["gpu_count"]["message"]
    assert "56 pair(s)" in checks["nvbw_d2d_write_ce"]["message"] and ns.result["incomplete"] is False


def test_a_matrix_printed_without_its_device_list_or_running_line_still_counts_its_gpus(run_cli, fake_tool, h):
    """nvbandwidth#50 as published: the device list and the `Running` line elided, the matrix and its
    `SUM device_to_device_memcpy_read_ce` line kept. A healthy 6-GPU PCIe node: 6 GPUs from the
    matrix's columns, never "found 0" and GPU_COUNT_LOW. The RTX A6000 has no baseline: its matrix is not
    judged, so the run is an error for the missing baseline (a configuration finding), not a pass."""
    read = "device_to_device_memcpy_read_ce"
    tool = _tool(fake_tool, h, f'cat "{h.FIXTURES / "nvbandwidth" / "issue50_6xA6000_v0.8_d2d_read_ce.txt"}"')
    ns = run_cli("nvbandwidth", "--nvbandwidth", tool, "--testcases", read, "--gpu-model", "NVIDIA-RTX-A6000",
                 "--expected-gpus", "6")
    checks = {c["name"]: c for c in ns.result["checks"]}
    assert (checks["gpu_count"]["status"], checks["gpu_count"]["value"]) == ("pass", 6)
    assert not [c for c in ns.result["checks"] if c.get("code") == "GPU_COUNT_LOW"]
    assert ns.result["status"] == "error" and checks["nvbw_d2d_read_ce"]["status"] == "skip"
    assert "BASELINE_MISSING" in {c.get("code") for c in ns.result["checks"]}
    out = nvbw.parse(_fx(h, "issue50_6xA6000_v0.8_d2d_read_ce.txt"), [read])
    assert out.matrices[read].total == 715.53 and nvbw.gpus_named(out) == 6


def test_every_ordered_pair_of_the_expected_gpus_must_be_measured(h):
    """A matrix that lacks a GPU is not a smaller node: each GPU none of whose pairs it holds is named,
    and any other missing pair by its two GPUs."""
    m = nvbw.parse(_fx(h, "readme_v0.8_d2d_write_ce_8gpu.txt"), [WRITE]).matrices[WRITE]
    j = nvbw.Judging(None, "no floor", 0.15, True)
    assert nvbw.absent(nvbw.TESTCASES[WRITE], m, 8) == []
    got = [(c.device, c.code) for c in nvbw.to_checks(nvbw.TESTCASES[WRITE], m, j, 9) if c.status == "fail"]
    assert got == [("cuda:8", "NVBW_NOT_MEASURED")]
    del m.rows["3"]  # one row missing: its seven pairs, each named
    got = [c.device for c in nvbw.to_checks(nvbw.TESTCASES[WRITE], m, j, 8) if c.code == "NVBW_NOT_MEASURED"]
    assert got == [f"cuda:3,cuda:{o}" for o in (0, 1, 2, 4, 5, 6, 7)]


@pytest.mark.parametrize("model", ["NVIDIA-GB200", "NVIDIA-H200-NVL", "NVIDIA-A100-SXM4-40GB", "NVIDIA-H20"])
def test_a_model_without_a_baseline_is_an_explicit_finding_and_never_a_pass(run_cli, fake_tool, tmp_path, h, model):
    """The README's healthy matrices, labelled as a model baselines.yaml does not know: the finding names
    the model, and the run is an error with the no-baseline code, whatever the numbers."""
    ns = _run(run_cli, _readme_tool(fake_tool, h, tmp_path, _fx(h, "readme_v0.8_d2d_write_ce_8gpu.txt")),
              "--gpu-model", model, "--expected-gpus", "8")
    h.check_artifacts(ns, status="error", suite="nvbandwidth")
    assert ns.summary["code"] == "BASELINE_MISSING" and ns.summary["action"] == "none"
    [finding] = [c for c in ns.result["checks"] if c["name"] == "baseline"]
    assert finding["status"] == "skip" and model in finding["message"] and "baselines.yaml" in finding["message"]
    assert ns.result["environment"]["baseline_missing"] == model
