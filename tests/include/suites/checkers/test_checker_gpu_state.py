"""The per-GPU checkers (ecc, row_remap, retired_pages, recovery, clocks, pcie, nvlink, fabric,
processes) on states parsed from genuine nvidia-smi outputs, and what they say when a value is N/A."""

from __future__ import annotations

import pytest
from cluster_doctor_suites import parsers
from cluster_doctor_suites.baselines import Expectations
from cluster_doctor_suites.checkers import clocks, ecc, nvlink, pcie, recovery, retired_pages, row_remap

NONE = Expectations({}, {})
H100 = Expectations({"pcie_gen": 5, "pcie_width": 16, "nvlinks_per_gpu": 18}, {"pcie_gen": "test", "pcie_width": "test",
                                                                               "nvlinks_per_gpu": "test"})


@pytest.fixture
def a100(h):
    return parsers.parse_smi_xml(h.fx("smi", "nvidia-smi-q-x_510.47.03_A100-SXM4-40GB_mig.xml"))["gpus"][0]


@pytest.fixture
def a5000(h):
    return parsers.parse_smi_xml(h.fx("smi", "nvidia-smi-q-x_590.44.01_2xRTX-A5000.xml"))["gpus"][0]


def test_row_remap_na_is_a_visible_skip_never_no_check(a100):
    """The A100 MIG output reports <remapped_rows>N/A</remapped_rows> and no page retirement state:
    both checks appear, as not run."""
    remap, pages = row_remap.observe(a100), retired_pages.observe(a100)
    assert not remap.supported
    [c] = row_remap.to_checks(remap, expected=pages.pending is None)
    assert (c.name, c.status, c.code) == ("row_remap", "skip", "ROW_REMAP_UNAVAILABLE")


def test_row_remap_pending_and_failure_each_named():
    s = row_remap.RowRemapStatus(1, "x", True, True, 3)
    assert {(c.name, c.code) for c in row_remap.to_checks(s)} == {
        ("row_remap_failure", "ROW_REMAP_FAILURE"), ("row_remap_pending", "ROW_REMAP_PENDING")}


def test_ecc_off_is_said(a5000):
    [c] = ecc.to_checks(ecc.observe(a5000), has_ecc_memory=False)
    assert c.status == "skip" and "ECC is disabled" in c.message


def test_ecc_uncorrected_fails_with_the_number():
    [c] = ecc.to_checks(ecc.EccStatus(2, "00000000:1B:00.0", True, 4, 0))
    assert (c.status, c.value, c.device, c.code, c.action) == ("fail", 4, "cuda:2", "ECC_UNCORRECTED", "reset_gpu")


def test_pcie_judged_against_the_sku_not_the_link(a5000):
    """The RTX A5000 idles at Gen1 with a Gen4 link: with an H100 SKU's Gen5 expectation the link
    itself is too slow; without an expectation the link's own maximum is the bar (and said so)."""
    link = pcie.observe(a5000)
    got = {c.name: c for c in pcie.to_checks(link, H100)}
    assert got["pcie_gen"].status == "fail" and "expected Gen5" in got["pcie_gen"].message
    got = {c.name: c for c in pcie.to_checks(link, NONE)}
    assert got["pcie_gen"].status == "pass" and "link capable of Gen4, expected Gen4" in got["pcie_gen"].message
    narrow = pcie.PcieLink(0, None, 5, 5, 5, 8, 8, 0, 0)  # x8 max and current: the link "agrees" with itself
    assert {c.name: c.status for c in pcie.to_checks(narrow, H100)}["pcie_width"] == "fail"


def test_recovery_action_carries_the_drivers_action(a5000):
    [c] = recovery.to_checks(recovery.observe(a5000))
    assert c.status == "pass" and c.value == "None"
    [c] = recovery.to_checks(recovery.RecoveryState(0, None, "Node Reboot", None, None))
    assert c.status == "fail" and c.action == "reboot"
    assert recovery.action_for("Something New") == "drain_and_service"


def test_nvlink_all_inactive_and_expected_count(h):
    parsed = parsers.parse_nvlink_status(h.fx("smi", "nvidia-smi-nvlink-s_B200_all_inactive_gpud1085.txt"))
    s = nvlink.NvlinkStatus(2, None, {}, parsed[2]["all_inactive"])
    [c] = nvlink.to_checks([s], H100)
    assert c.status == "fail" and c.code == "NVLINK_DOWN" and "all NVLink links inactive" in c.message
    twelve = nvlink.NvlinkStatus(0, None, {i: True for i in range(12)})
    [c] = nvlink.to_checks([twelve], H100)
    assert c.status == "fail" and "12 active, expected 18" in c.message  # the SKU's count, not the best GPU's
    [c] = nvlink.to_checks([nvlink.NvlinkStatus(0, None, None, why_unavailable="exit 3")], H100)
    assert c.status == "skip" and c.code == "NVLINK_STATE_UNAVAILABLE"
    [c] = nvlink.to_checks([nvlink.NvlinkStatus(0, None, {0: True}, unparsed=("Link 1: Degraded",))], H100)
    assert c.status == "error" and c.code == "TOOL_OUTPUT_UNPARSEABLE"


def test_clock_reasons_not_reported_is_a_skip():
    [c] = clocks.to_checks(clocks.ClockState(0, None, None, (), None, None))
    assert c.status == "skip" and c.code == "CLOCK_THROTTLE_UNAVAILABLE"


def test_a_field_the_driver_answers_with_an_error_is_reported(h):
    """nvidia-smi prints 'Unknown Error' where the driver failed a query: not the same as N/A."""
    xml = h.fx("smi", "nvidia-smi-q-x_510.47.03_A100-SXM4-40GB_mig.xml")
    old = "<current_link_width>16x</current_link_width>"
    assert old in xml
    g = parsers.parse_smi_xml(xml.replace(old, "<current_link_width>Unknown Error</current_link_width>", 1))["gpus"][0]
    assert g["field_errors"] == ["current_link_width"] and g["pcie_width"] is None


def test_nvlink_blocks_are_matched_by_uuid_and_a_block_no_gpu_takes_is_kept(h):
    """nccl-tests#228's two blocks: matched to the GPUs of `-q` by UUID first (whatever the index),
    and a block of a GPU `-q` does not list kept for the report, never dropped."""
    from types import SimpleNamespace

    from cluster_doctor_suites import gpu_state

    text = h.fx("smi", "nvidia-smi-nvlink-s_2xA100-SXM4-80GB.txt")
    ctx = SimpleNamespace(run_tool=lambda argv, timeout: (0, text, ""))
    state = {"gpus": [{"index": 0, "uuid": "GPU-0c512562-871f-8257-6187-b5ae1b986d5e"}]}  # the second block's GPU
    gpu_state._smi_nvlinks(ctx, "nvidia-smi", state)
    assert state["gpus"][0]["nvlink"]["links"] == {i: True for i in range(12)}
    assert [(b["index"], b["uuid"]) for b in state["nvlink_unmapped"]] == [(0, "GPU-ff8a40d4-abc6-08d1-f939-15848b5d4e05")]
    [c] = nvlink.to_checks(nvlink.unmapped(state["nvlink_unmapped"]), Expectations({}, {}))
    assert c.status == "warn" and c.code == "NVLINK_GPU_UNMAPPED" and c.device.startswith("nvidia-smi GPU 0 (GPU-ff8a")
