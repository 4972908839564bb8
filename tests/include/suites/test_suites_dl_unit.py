"""dl_unit: the full CPU-mode run, every group wired and every check present. The groups' own tests,
fault injection on CPU virtual devices included, are in dl/ (one file per module of
cluster_doctor_suites.dl)."""

from __future__ import annotations

from tests.support.dl_faults import statuses


def test_cpu_mode_full_run_passes(run_cli, h):
    ns = run_cli("dl_unit", "--device", "cpu", "--cpu-devices", "2", timeout=180)
    h.check_artifacts(ns, status="pass", suite="dl_unit")
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


def test_only_runs_the_groups_asked_for(run_inproc, h):
    from cluster_doctor_suites import dl_unit

    ns = run_inproc(dl_unit, "--device", "cpu", "--only", "training,memory")
    h.check_artifacts(ns, status="pass", suite="dl_unit")
    names = {c["name"] for c in ns.result["checks"]}
    assert names == {"gpu_count", "training_smoke", "memory_pattern"}
    m = ns.summary["metrics"]
    assert m["training_loss_ratio_max"] > 0 and m["memory_tested_gib_min"] > 0


def test_only_with_an_unknown_group_is_an_error(run_inproc, h):
    from cluster_doctor_suites import dl_unit

    ns = run_inproc(dl_unit, "--device", "cpu", "--only", "numerics,gpu")
    h.check_artifacts(ns, status="error", suite="dl_unit")
    assert "--only: choose from numerics, agreement, gemm, membw, training, memory" in ns.summary["reason"]
