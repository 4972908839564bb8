"""checkers/fabric: the NVSwitch fabric registration, and a query that fails is a visible not-run,
never "no fabric on this system" (issue 29: the exception used to be swallowed and the check absent)."""

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
