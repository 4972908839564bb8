"""baselines.yaml: required models, provenance, label aliases, scaling with GPU count."""

from __future__ import annotations

import argparse

import pytest
from cluster_doctor_suites.baselines import Baselines, Expectation, model_for_node, normalize_model
from cluster_doctor_suites.harness.checks import SuiteError
from cluster_doctor_suites.harness.context import Context

REQUIRED = ("h100-sxm", "h100-pcie", "h200", "a100-sxm4-80gb", "b200", "l40s", "cpu")


@pytest.fixture(scope="module")
def b(request):
    from pathlib import Path

    return Baselines.load(str(Path(__file__).resolve().parents[3] / "include" / "suites" / "baselines.yaml"))


def test_required_models_with_provenance(b):
    assert set(REQUIRED) <= set(b.models)
    for key, model in b.models.items():
        metrics = model.get("metrics") or {}
        if key != "cpu":
            assert {"gemm_bf16_tflops", "mem_bw_gbps"} <= set(metrics), key
            assert model["aliases"], key
        for name, spec in metrics.items():
            assert spec["value"] > 0 and 0 <= spec["tolerance"] < 1, (key, name)
            assert any(w in spec["source"] for w in ("datasheet", "public tool", "public measurement", "derived", "fleet")), (
                key,
                name,
            )


@pytest.mark.parametrize(
    "name, key",
    [
        ("NVIDIA-H100-80GB-HBM3", "h100-sxm"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA-H100-80GB-HBM3-SHARED", "h100-sxm"),
        ("NVIDIA-H100-PCIe", "h100-pcie"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA-H200", "h200"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA-A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("NVIDIA-B200", "b200"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA-L40S", "l40s"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA-A100-SXM4-40GB", None),
        ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", None),
        ("Tesla T4", None),
        ("", None),
    ],
)
def test_aliases_resolve_labels_and_device_names(b, name, key):
    assert b.resolve(name) == key


def test_normalize():
    assert normalize_model(" NVIDIA-H100_80GB  HBM3 ") == "nvidia h100 80gb hbm3"


def test_expectations_scale_with_gpu_count(b):
    e8 = b.expectation("h100-sxm", "nccl_ib_busbw_gbps", 8, hcas=8)
    assert e8.floor == pytest.approx(40.05)  # AzureHPC NHC's 40 GB/s IB loop-back floor
    e16 = b.expectation("h100-sxm", "nccl_ib_busbw_gbps", 16, hcas=8)  # 16 GPUs share 8 NICs
    assert e16.value == pytest.approx(e8.value / 2) and "scaled" in e16.source
    assert b.expectation("h100-sxm", "nccl_ib_busbw_gbps", 4, hcas=8).value == e8.value  # a NIC each
    per_gpu = Expectation("x", 100, 0.1, "s", "per_gpu")
    assert per_gpu.scaled(8).value == 800 and per_gpu.scaled(8).floor == pytest.approx(720)
    assert b.expectation("l40s", "nccl_ib_busbw_gbps", 8) is None
    assert b.expectation(None, "gemm_bf16_tflops") is None


def test_expectations_per_sku_with_sources_and_node_pool_overrides(b):
    from types import SimpleNamespace

    from cluster_doctor_suites.baselines import expectations, parse_expect

    e = expectations(b, "h100-sxm", SimpleNamespace(expected_gpus=8, expect={}))
    assert (e.get("gpus"), e.get("hcas"), e.get("nvlinks_per_gpu"), e.get("pcie_gen"), e.get("pcie_width")) == (8, 8, 18, 5, 16)
    assert "ConnectX-7" in e.sources["hcas"] and "baselines.yaml h100-sxm" in e.sources["gpus"]
    # the orchestrator's count wins only where it is higher: a GPU that did not enumerate lowers it
    assert expectations(b, "h100-sxm", SimpleNamespace(expected_gpus=7, node_gpus=7, expect={})).get("gpus") == 8
    more = expectations(b, "h100-sxm", SimpleNamespace(expected_gpus=16, expect={}))
    assert more.get("gpus") == 16 and "--expected-gpus" in more.sources["gpus"]
    pool = expectations(b, "h100-sxm", SimpleNamespace(expected_gpus=8, expect=parse_expect("hcas=4, gpus=4")))
    assert pool.get("hcas") == 4 and pool.get("gpus") == 4 and "node pool override" in pool.basis("hcas")
    for bad in ("hcas=four", "nics=8", "hcas"):
        with pytest.raises(ValueError):
            parse_expect(bad)
    for key, model in b.models.items():  # every expectation of a model names its source
        block = model.get("expect") or {}
        for k in ("hcas", "nvlinks_per_gpu", "pcie_gen", "pcie_width"):
            if k in block:
                src = (block.get("sources") or {})
                assert src.get(k) or src.get(k.split("_")[0]), (key, k)


def test_relative_tolerance(b):
    assert b.relative_tol("h100-sxm") == pytest.approx(0.10)
    assert b.relative_tol(None) == pytest.approx(0.10)
    assert b.relative_tol("cpu") > 0.5


def test_storage_profiles(b):
    profiles = b.section("storage")["profiles"]
    for name in ("default", "cpu"):
        p = profiles[name]
        assert p["seq_read"]["min_mibps"] > 0 and p["seq_write"]["min_mibps"] > 0
        assert p["rand_read"]["min_iops"] > 0 and p["rand_write"]["min_iops"] > 0
        assert all(p[k]["max_p99_ms"] > 0 for k in p)


@pytest.mark.parametrize(
    "text, words",
    [
        ("models: [", "not valid YAML"),
        ("just a string", "expected a mapping"),
        ("models:\n  x:\n    metrics:\n      m: {value: 1}\n", "needs numeric value, tolerance and a source"),
        (
            "models:\n  x:\n    metrics:\n      m: {value: 1, tolerance: 1.5, source: s}\n",
            "bad scale or tolerance",
        ),
    ],
)
def test_invalid_files_are_suite_errors(tmp_path, text, words):
    p = tmp_path / "b.yaml"
    p.write_text(text)
    with pytest.raises(SuiteError, match=words):
        Baselines.load(str(p))
    with pytest.raises(SuiteError, match="cannot read"):
        Baselines.load(str(tmp_path / "missing.yaml"))


def _ctx(device="cuda", label=None):
    c = Context("dl_unit", argparse.Namespace(node="n", device=device, gpu_model=label, expected_gpus=None))
    c.log = lambda m: None
    return c


def test_model_for_node(b):
    c = _ctx(label="NVIDIA-H100-80GB-HBM3")
    assert model_for_node(c, b, ["NVIDIA H100 80GB HBM3"] * 8) == ("h100-sxm", "NVIDIA H100 80GB HBM3")
    assert c.warnings == []
    c = _ctx(label="NVIDIA-A100-SXM4-80GB")
    assert model_for_node(c, b, ["NVIDIA H100 80GB HBM3"])[0] == "h100-sxm"  # the hardware wins
    assert "disagrees with the hardware" in c.warnings[0]
    c = _ctx()
    assert model_for_node(c, b, ["NVIDIA Z900"]) == (None, "NVIDIA Z900")
    assert "unknown GPU model 'NVIDIA Z900'" in c.warnings[0] and "relative checks" in c.warnings[0]
    c = _ctx(label="NVIDIA-H200")
    assert model_for_node(c, b, []) == ("h200", "NVIDIA-H200")  # label only (no NVML in the pod)
    assert model_for_node(_ctx("cpu", "NVIDIA-H100-80GB-HBM3"), b, [])[0] == "cpu"
