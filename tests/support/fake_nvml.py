"""A fake NVML module: the subset of nvidia-ml-py gpu_health uses, answering as the real one does
(pynvml's structs, NVMLError values: 3 not supported, 15 GPU lost, 10 timeout). Shared by the
gpu_health suite tests and the fault catalog."""

from __future__ import annotations

import ctypes
import time

import pynvml


class FakeNVMLError(Exception):
    """Like pynvml.NVMLError: the NVML return code in `value`."""

    def __init__(self, value):
        names = {2: "Invalid Argument", 3: "Not Supported", 15: "GPU is lost", 10: "Timeout"}
        super().__init__(names.get(value, "error"))
        self.value = value


class FabricInfo(ctypes.Structure):
    _fields_ = [("status", ctypes.c_uint), ("state", ctypes.c_uint)]


class Handle:
    """Opaque like nvmlDevice_t: code that passes an index where a handle belongs breaks. `i` is the
    physical GPU (its UUID and bus id), not the index it is enumerated at."""

    def __init__(self, i):
        self.i = i


class FakeNVML:
    """By default three GPUs: GPU 1 is sick, GPU 2 has fallen off the bus (`sick=False`: `count` healthy
    GPUs). `order` lists the physical GPU at each index (a changed enumeration order); `thermal_ns` is
    each physical GPU's cumulative thermal violation time, `thermal_unsupported` the GPUs whose driver
    answers the violation query with NOT_SUPPORTED."""

    NVML_NVLINK_MAX_LINKS = 18
    NVML_PERF_POLICY_THERMAL = pynvml.NVML_PERF_POLICY_THERMAL
    nvmlEventTypeXidCriticalError = 8
    c_nvmlGpuFabricInfo_t = FabricInfo

    def __init__(self, sick: bool = True, count: int = 3):
        self.sick = sick
        self.count = count
        self.order = list(range(count))
        self.samples = {}
        self.shutdown = False
        self.live_xids = [(0, 79)] if sick else []
        self.recovery = {i: 0 for i in range(min(count, 2))}  # nvmlGpuRecoveryAction_t per GPU (field 230)
        self.thermal_ns = {i: 0 for i in range(count)}
        self.thermal_unsupported: set[int] = set()

    def nvmlShutdown(self):
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self):
        return "570.124.06"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12080

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        return Handle(self.order[i])

    def nvmlDeviceGetName(self, h):
        if self.sick and h.i == 2:
            raise FakeNVMLError(15)
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h.i}"

    def nvmlDeviceGetPciInfo(self, h):
        return type("P", (), {"busId": f"00000000:{0x18 + h.i:02X}:00.0".encode()})()

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        h = h.i
        self.samples[h] = self.samples.get(h, 0) + 1
        if self.sick and h == 0 and self.samples[h] == 1:
            return 0x1 | 0x8  # HW slowdown in one sample only: transient
        return 0x1  # idle

    def nvmlDeviceGetViolationStatus(self, h, policy):
        """As nvidia-ml-py: a c_nvmlViolationTime_t (referenceTime a CPU timestamp in µs, violationTime
        in ns); only the thermal policy is answered here (another one is a caller's mistake)."""
        if policy != pynvml.NVML_PERF_POLICY_THERMAL:
            raise FakeNVMLError(2)
        if h.i in self.thermal_unsupported:
            raise FakeNVMLError(3)
        return pynvml.c_nvmlViolationTime_t(referenceTime=int(time.time() * 1e6), violationTime=self.thermal_ns[h.i])

    def nvmlDeviceGetEccMode(self, h):
        return [1, 1]

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        return 0

    def nvmlDeviceGetRemappedRows(self, h):
        return (0, 3, 0, 1) if self.sick and h.i == 1 else (0, 0, 0, 0)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        raise FakeNVMLError(3)  # Hopper: row remapping instead of page retirement

    def nvmlDeviceGetRetiredPages(self, h, cause):
        raise FakeNVMLError(3)

    def nvmlDeviceGetPerformanceState(self, h):
        return 0

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return []

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetPcieReplayCounter(self, h):
        return 0

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 35

    def nvmlDeviceGetTemperatureThreshold(self, h, kind):
        return 89

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= 18:
            raise FakeNVMLError(3)
        return 0 if (self.sick and h.i == 1 and link == 3) else 1

    def nvmlDeviceGetGpuFabricInfo(self, h, ref):
        ref._obj.state, ref._obj.status = 3, 0  # Completed / NVML_SUCCESS

    def nvmlDeviceGetFieldValues(self, h, ids):
        """Like nvidia-ml-py: an array of c_nvmlFieldValue_t; unsupported fields carry nvmlReturn 3."""
        out = (pynvml.c_nvmlFieldValue_t * len(ids))()
        for slot, fid in zip(out, ids):
            slot.fieldId = fid
            if fid == 230 and h.i in self.recovery:
                slot.nvmlReturn, slot.value.uiVal = 0, self.recovery[h.i]
            elif fid in (226, 227) and h.i in self.recovery:
                slot.nvmlReturn, slot.value.uiVal = 0, 0
            else:
                slot.nvmlReturn = 3
        return out

    def nvmlEventSetCreate(self):
        return "set"

    def nvmlDeviceRegisterEvents(self, h, kind, es):
        pass

    def nvmlEventSetWait(self, es, timeout_ms):
        if not self.live_xids:
            raise FakeNVMLError(10)
        dev, xid = self.live_xids.pop()
        return type("E", (), {"device": Handle(dev), "eventData": xid})()

    def nvmlEventSetFree(self, es):
        pass
