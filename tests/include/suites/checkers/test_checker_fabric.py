"""checkers/fabric: the NVSwitch fabric registration, and a query that fails is a visible not-run,
never "no fabric on this system" (the exception used to be swallowed and the check absent)."""

from __future__ import annotations

import pynvml
from cluster_doctor_suites import gpu_state
from cluster_doctor_suites.checkers import fabric


class _Nvml:
    """Just enough of nvidia-ml-py for `_nvml_fabric`: its ctypes struct and a query that raises
    what nvidia-ml-py raises for the driver's return code."""

    c_nvmlGpuFabricInfo_t = pynvml.c_nvmlGpuFabricInfo_t

    def __init__(self, error: int | None, state: int = 3):
        self.error, self.state = error, state

    def nvmlDeviceGetGpuFabricInfo(self, handle, info_ref):
        if self.error is not None:
            raise pynvml.NVMLError(self.error)  # nvidia-ml-py maps the code to NVMLError_Unknown etc.
        info_ref._obj.state = self.state


def _checks(error: int | None, state: int = 3):
    g = {"index": 0, "fabric_state": None, "fabric_status": None}
    gpu_state._nvml_fabric(_Nvml(error, state), None, g)
    return fabric.to_checks(fabric.observe(g))


def test_a_failed_fabric_query_is_a_visible_not_run():
    [c] = _checks(pynvml.NVML_ERROR_UNKNOWN)
    assert (c.name, c.status, c.code, c.device) == ("fabric", "skip", "FABRIC_STATE_UNKNOWN", "cuda:0")
    assert "Unknown Error" in c.message and c.action == "retest"


def test_not_supported_means_no_fabric_and_a_completed_one_passes():
    assert _checks(pynvml.NVML_ERROR_NOT_SUPPORTED) == []  # a GPU without NVSwitch fabric
    assert _checks(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND) == []  # a driver without the call
    [ok] = _checks(None, state=3)
    assert ok.status == "pass"
    [bad] = _checks(None, state=2)
    assert (bad.status, bad.code) == ("fail", "FABRIC_NOT_READY")


class _OldNvml:
    """An nvidia-ml-py from before the fabric struct: no c_nvmlGpuFabricInfo_t at all."""


def _on_nvswitch_sku(nv):
    g = {"index": 0, "fabric_state": None, "fabric_status": None}
    gpu_state._nvml_fabric(nv, None, g)
    return fabric.to_checks(fabric.observe(g), nvswitch=True), fabric.to_checks(fabric.observe(g))


def test_no_fabric_state_on_a_sku_with_nvswitches_is_a_visible_not_run():
    """What reads as "no fabric here" on a PCIe card cannot on an HGX board: NVML NOT_SUPPORTED, a
    state NOT_SUPPORTED, or an nvidia-ml-py without the struct leave the check visibly not run."""
    for nv, why in ((_Nvml(pynvml.NVML_ERROR_NOT_SUPPORTED), "Not Supported"), (_Nvml(None, state=0), "NOT_SUPPORTED"),
                    (_OldNvml(), "no c_nvmlGpuFabricInfo_t")):
        [c], elsewhere = _on_nvswitch_sku(nv)
        assert (c.name, c.status, c.code, c.device) == ("fabric", "skip", "FABRIC_STATE_UNKNOWN", "cuda:0"), why
        assert why in c.message and "should have NVSwitches" in c.message
        assert elsewhere == []  # a SKU without NVSwitches: nothing to judge


def test_nvidia_smi_without_a_fabric_section_on_a_sku_with_nvswitches(h):
    """The genuine A100 output of driver 510.47.03 prints no Fabric section at all."""
    from cluster_doctor_suites import parsers

    [g] = parsers.parse_smi_xml(h.fx("smi", "nvidia-smi-q-x_510.47.03_A100-SXM4-40GB_mig.xml"))["gpus"]
    [c] = fabric.to_checks(fabric.observe(g), nvswitch=True)
    assert c.status == "skip" and "nvidia-smi -q printed no Fabric section" in c.message
