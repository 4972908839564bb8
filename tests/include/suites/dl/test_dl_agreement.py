"""dl/agreement.py: determinism and cross-device agreement, through the suite with a corrupting
matmul on CPU virtual devices, and the pure votes."""

from __future__ import annotations

from cluster_doctor_suites import dl_unit
from cluster_doctor_suites.dl import agreement
from cluster_doctor_suites.dl.agreement import DeviceOutputs

from tests.support.dl_faults import FAST, corrupt_matmul, statuses


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


def _outputs(name, first, second=None, model="m"):
    return DeviceOutputs(name, model, f" (pci-{name})", dict(first), dict(second if second is not None else first))


def test_the_odd_device_is_the_suspect_and_is_measured_against_one_above_suspicion():
    runs = [_outputs("cuda:0", {"a.out": "x", "b.out": "y"}), _outputs("cuda:1", {"a.out": "x", "b.out": "Z"}),
            _outputs("cuda:2", {"a.out": "x", "b.out": "y"})]
    det = agreement.determinism(runs)
    v = agreement.vote(runs, det)
    assert v.keys == ["a.out", "b.out"] and v.suspects == {"cuda:1": ["b.out"]}
    assert v.compared_with("cuda:1") == "cuda:0"
    judged = agreement.cross_device_checks(runs, v, {"cuda:1": 0.5})
    got = {c.device: c for c in judged.checks}
    assert [got[d].status for d in ("cuda:0", "cuda:1", "cuda:2")] == ["pass", "fail", "pass"]
    assert "differs from the majority on 1 output(s) (b.out; max abs diff 0.5)" in got["cuda:1"].message
    assert "(pci-cuda:1)" in got["cuda:1"].message and got["cuda:1"].code == "SDC_SUSPECT"
    assert [(m.key, m.value, m.summary) for m in judged.metrics] == [("sdc_suspects", 1, True)]


def test_outputs_that_change_between_runs_are_not_compared_across_devices():
    runs = [_outputs("cuda:0", {"a.out": "x"}, {"a.out": "x2"}), _outputs("cuda:1", {"a.out": "y"})]
    det = agreement.determinism(runs)
    assert det.own("cuda:0") == {"a.out"} and det.everywhere == set()
    assert agreement.vote(runs, det).suspects == {}
    checks = agreement.determinism_checks(runs, det).checks
    assert [(c.device, c.status) for c in checks] == [("cuda:0", "fail"), ("cuda:1", "pass")]


def test_one_device_or_mixed_models_are_not_compared():
    assert "single device" in agreement.not_comparable([_outputs("cuda:0", {})]).message
    mixed = agreement.not_comparable([_outputs("cuda:0", {}, model="A"), _outputs("cuda:1", {}, model="B")])
    assert mixed.status == "skip" and "mixed models" in mixed.message
    assert agreement.not_comparable([_outputs("cuda:0", {}), _outputs("cuda:1", {})]) is None


def test_a_benchmark_output_without_majority_names_both_devices():
    v = agreement.output_vote({"cuda:0": "x", "cuda:1": "y"}, {("H100", 132)})
    assert v.majority is None and v.odd_ones() == {"cuda:0": "cuda:1", "cuda:1": "cuda:0"}
    checks = agreement.output_checks("gemm_agreement", "GEMM", v, {"cuda:0": (3, "d0"), "cuda:1": (3, "d1")})
    assert [(c.status, c.code) for c in checks] == [("fail", "SDC_SUSPECT")] * 2
    assert "differs from cuda:1 in 3 element(s)" in checks[0].message


def test_a_benchmark_output_is_compared_only_on_one_model():
    v = agreement.output_vote({"cuda:0": "x", "cuda:1": "x"}, {("H100", 132), ("H100", 114)})
    checks = agreement.output_checks("gemm_agreement", "GEMM", v, {})
    assert {(c.status, c.code) for c in checks} == {("skip", "AGREEMENT_NOT_APPLICABLE")}
    v3 = agreement.output_vote({"cuda:0": "x", "cuda:1": "x", "cuda:2": "z"}, {("H100", 132)})
    assert v3.odd_ones() == {"cuda:2": "cuda:0"}


def test_on_a_single_device_a_change_between_two_runs_is_its_fault():
    """With one device nothing tells the library's kernel from the GPU: what changed is a finding;
    with two devices that both change, it is the library's (a warning, excluded)."""
    from cluster_doctor_suites.dl.agreement import DeviceOutputs, determinism, determinism_checks

    one = [DeviceOutputs("cuda:0", "H100", "", first={"a.out": "1", "b.out": "2"}, second={"a.out": "1", "b.out": "3"})]
    det = determinism(one)
    assert det.everywhere == set() and det.own("cuda:0") == {"b.out"}
    assert [(c.name, c.status) for c in determinism_checks(one, det).checks] == [("determinism", "fail")]
    two = one + [DeviceOutputs("cuda:1", "H100", "", first={"a.out": "1", "b.out": "2"}, second={"a.out": "1", "b.out": "4"})]
    det = determinism(two)
    assert det.everywhere == {"b.out"} and not det.own("cuda:0") and not det.own("cuda:1")
