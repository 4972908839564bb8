"""checkers/gpu_mode: MIG and persistence mode against the node pool's expectation (unstated: MIG off,
persistence on, a mismatch a warning; stated: a failure), from the genuine A100 output (MIG enabled,
persistence disabled) and the RTX A5000 one (no MIG support, persistence enabled)."""

from __future__ import annotations

from cluster_doctor_suites import parsers
from cluster_doctor_suites.baselines import Expectations
from cluster_doctor_suites.checkers import gpu_mode


def _gpu(h, name: str) -> dict:
    return parsers.parse_smi_xml(h.fx("smi", name))["gpus"][0]


def _checks(g: dict, **stated) -> dict:
    expect = Expectations(dict(stated), {k: "node pool override (--expect / CLUSTER_DOCTOR_EXPECT)" for k in stated})
    return {c.name: c for c in gpu_mode.to_checks(gpu_mode.observe(g), expect)}


def test_unstated_expectations_warn_on_a_mig_gpu_without_persistence(h):
    got = _checks(_gpu(h, "nvidia-smi-q-x_510.47.03_A100-SXM4-40GB_mig.xml"))
    assert (got["mig_mode"].status, got["mig_mode"].code) == ("warn", "MIG_MODE_UNEXPECTED")
    assert (got["persistence_mode"].status, got["persistence_mode"].code) == ("warn", "PERSISTENCE_MODE_UNEXPECTED")
    assert "default expectation of a training node" in got["mig_mode"].message


def test_a_node_pool_that_states_its_modes_fails_a_mismatch_and_passes_a_match(h):
    g = _gpu(h, "nvidia-smi-q-x_510.47.03_A100-SXM4-40GB_mig.xml")
    got = _checks(g, mig=0, persistence=1)
    assert {c.status for c in got.values()} == {"fail"} and got["mig_mode"].action == "reset_gpu"
    got = _checks(g, mig=1, persistence=0)  # an inference pool that partitions its GPUs
    assert {c.status for c in got.values()} == {"pass"}


def test_a_gpu_without_mig_support_is_not_judged_on_mig_unless_the_pool_expects_it(h):
    g = _gpu(h, "nvidia-smi-q-x_590.44.01_2xRTX-A5000.xml")
    got = _checks(g)
    assert "mig_mode" not in got and got["persistence_mode"].status == "pass"
    assert _checks(g, mig=1)["mig_mode"].status == "skip"
