"""The state of every GPU, normalised to one dict per GPU whatever the source: NVML (nvidia-ml-py)
or `nvidia-smi -q -x` + `nvidia-smi nvlink -s`, whose exit codes are read as NVML defines them
(nvidia-smi(1) RETURN VALUE). The checkers build their observations from these dicts."""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass

from . import parsers
from .checkers.clocks import THROTTLE_BITS
from .checkers.kernel_log import short_pci
from .checkers.recovery import NVML_ACTIONS as RECOVERY_ACTIONS
from .harness.checks import SuiteError
from .harness.text import one_line

NVML_ERR_NOT_SUPPORTED, NVML_ERR_GPU_IS_LOST = 3, 15
# NVML_ERROR_INVALID_ARGUMENT (2: a link / counter this GPU does not have), NOT_SUPPORTED (3),
# FUNCTION_NOT_FOUND (13): the value does not exist here, which the checkers report as not run
NVML_NOT_THERE = {2, 3, 13}
FABRIC_STATES = {0: None, 1: "Not Started", 2: "In Progress", 3: "Completed"}
# nvmlGpuRecoveryAction_t (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION), named as nvidia-smi -q prints them




def _q(nv, fn_name: str, *args, lost: list | None = None):
    """One NVML query; None when the driver does not support it. A GPU reported lost, and any other
    NVML error (not "not supported"), is noted in `lost` as (kind, text): never silently no data."""
    fn = getattr(nv, fn_name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception as exc:  # NVMLError_*: NotSupported on this GPU, or worse
        value = getattr(exc, "value", None)
        if lost is not None and value == NVML_ERR_GPU_IS_LOST:
            lost.append(("lost", str(exc)))
        elif lost is not None and isinstance(value, int) and value not in NVML_NOT_THERE:
            lost.append(("error", f"{fn_name}: {exc}"))
        return None


def _s(x) -> str | None:
    if x is None:
        return None
    return x.decode(errors="replace") if isinstance(x, bytes) else str(x)


def collect_nvml(nv) -> dict:
    """Query every visible GPU through NVML. Unsupported queries become None, never an exception."""
    # Long: one flat NVML query per field of the normalised state; splitting it would only scatter them.
    driver = _s(_q(nv, "nvmlSystemGetDriverVersion"))
    cuda_v = _q(nv, "nvmlSystemGetCudaDriverVersion")
    cuda = f"{cuda_v // 1000}.{(cuda_v % 1000) // 10}" if isinstance(cuda_v, int) and cuda_v else None
    count = nv.nvmlDeviceGetCount()
    gpus = []
    handles = {}
    for i in range(count):
        lost: list = []
        try:
            h = nv.nvmlDeviceGetHandleByIndex(i)
        except Exception as exc:
            gpus.append({"index": i, "lost": f"no handle: {exc}"})
            continue
        handles[i] = h
        pci = _q(nv, "nvmlDeviceGetPciInfo", h, lost=lost)
        reasons = _q(nv, "nvmlDeviceGetCurrentClocksEventReasons", h, lost=lost)
        if reasons is None:
            reasons = _q(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", h, lost=lost)
        ecc = _q(nv, "nvmlDeviceGetEccMode", h, lost=lost)
        remap = _q(nv, "nvmlDeviceGetRemappedRows", h, lost=lost)
        pending = _q(nv, "nvmlDeviceGetRetiredPagesPendingStatus", h, lost=lost)
        dbe_pages = _q(
            nv, "nvmlDeviceGetRetiredPages", h, 1
        )  # NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
        pstate = _q(nv, "nvmlDeviceGetPerformanceState", h, lost=lost)
        procs = _q(nv, "nvmlDeviceGetComputeRunningProcesses", h, lost=lost)
        state = {
            "index": i,
            "name": _s(_q(nv, "nvmlDeviceGetName", h, lost=lost)),
            "uuid": _s(_q(nv, "nvmlDeviceGetUUID", h, lost=lost)),
            "pci_bus_id": _s(pci.busId) if pci is not None else None,
            "ecc_enabled": (ecc[0] == 1) if ecc else None,
            "volatile_uncorrected": _q(nv, "nvmlDeviceGetTotalEccErrors", h, 1, 0, lost=lost),  # UNCORRECTED, VOLATILE
            "aggregate_uncorrected": _q(nv, "nvmlDeviceGetTotalEccErrors", h, 1, 1, lost=lost),  # UNCORRECTED, AGGREGATE
            "retired_pending": (pending == 1) if pending is not None else None,
            "retired_dbe": len(dbe_pages) if dbe_pages is not None else None,
            "remap_pending": bool(remap[2]) if remap else None,
            "remap_failure": bool(remap[3]) if remap else None,
            "remap_uncorrectable": remap[1] if remap else None,
            "throttle_active": sorted(n for b, n in THROTTLE_BITS.items() if reasons & b)
            if reasons is not None
            else None,
            "pcie_gen": _q(nv, "nvmlDeviceGetCurrPcieLinkGeneration", h, lost=lost),
            "pcie_gen_max": _q(nv, "nvmlDeviceGetMaxPcieLinkGeneration", h, lost=lost),
            "pcie_gen_gpu_max": _q(nv, "nvmlDeviceGetGpuMaxPcieLinkGeneration", h, lost=lost),
            "pcie_width": _q(nv, "nvmlDeviceGetCurrPcieLinkWidth", h, lost=lost),
            "pcie_width_max": _q(nv, "nvmlDeviceGetMaxPcieLinkWidth", h, lost=lost),
            "pcie_replays": _q(nv, "nvmlDeviceGetPcieReplayCounter", h, lost=lost),
            "pstate": pstate if isinstance(pstate, int) and pstate < 32 else None,
            "temp_c": _q(nv, "nvmlDeviceGetTemperature", h, 0, lost=lost),  # NVML_TEMPERATURE_GPU
            "slowdown_temp_c": _q(nv, "nvmlDeviceGetTemperatureThreshold", h, 1, lost=lost),  # THRESHOLD_SLOWDOWN
            "thermal_violation_ns": _thermal_violation(nv, h, lost),
            "fabric_state": None,
            "fabric_status": None,
            "recovery_action": None,
            "reset_required": None,
            "processes": len(procs) if procs is not None else None,
            "process_mib": round(sum((getattr(p, "usedGpuMemory", 0) or 0) for p in procs) / 2**20)
            if procs
            else 0,
            "nvlink": _nvml_nvlinks(nv, h),
            "mig_mode": _mig_mode(_q(nv, "nvmlDeviceGetMigMode", h, lost=lost)),
            "persistence": _enabled(_q(nv, "nvmlDeviceGetPersistenceMode", h, lost=lost)),
        }
        _nvml_fabric(nv, h, state)
        _nvml_recovery(nv, h, state)
        gone = [text for kind, text in lost if kind == "lost"]
        if gone:
            state["lost"] = gone[0]
        state["field_errors"] = [text for kind, text in lost if kind == "error"]
        gpus.append(state)
    _sample_throttle(nv, gpus, handles)
    return {"driver": driver, "cuda": cuda, "attached_gpus": count, "gpus": gpus}


def _sample_throttle(nv, gpus: list[dict], handles: dict, rounds: int = 3, interval: float = 0.25) -> None:
    """Throttle reasons are instantaneous: a reason counts as active when it is set in most of a few
    samples; one that comes and goes is kept as `throttle_transient` (a warning, not a failure)."""
    seen: dict[int, list[set]] = {
        g["index"]: [set(g["throttle_active"])]
        for g in gpus
        if not g.get("lost") and g["index"] in handles and g.get("throttle_active") is not None
    }
    for _ in range(rounds - 1):
        time.sleep(interval)
        for g in gpus:
            if g["index"] not in seen:
                continue
            h = handles[g["index"]]
            r = _q(nv, "nvmlDeviceGetCurrentClocksEventReasons", h)
            if r is None:
                r = _q(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", h)
            if r is not None:
                seen[g["index"]].append({n for b, n in THROTTLE_BITS.items() if r & b})
    for g in gpus:
        samples = seen.get(g["index"])
        if not samples:
            continue
        names = set().union(*samples)
        g["throttle_active"] = sorted(n for n in names if sum(n in x for x in samples) * 2 > len(samples))
        g["throttle_transient"] = sorted(names - set(g["throttle_active"]))


def _thermal_violation(nv, h, lost: list) -> int | None:
    """Nanoseconds thermal limits have held this GPU below its requested clocks since the driver
    loaded (nvmlDeviceGetViolationStatus, NVML_PERF_POLICY_THERMAL = 1: nvmlViolationTime_t's
    violationTime, in ns; checkers/thermal_violation.py judges its growth). None: not supported."""
    v = _q(nv, "nvmlDeviceGetViolationStatus", h, getattr(nv, "NVML_PERF_POLICY_THERMAL", 1), lost=lost)
    return int(v.violationTime) if v is not None else None


def _nvml_nvlinks(nv, h) -> dict | None:
    """{links {link: active}} for the links this GPU has; {} links when NVLink is not supported."""
    links = {}
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            links[link] = bool(nv.nvmlDeviceGetNvLinkState(h, link))
        except Exception:  # NotSupported / InvalidArgument: the link does not exist on this GPU
            continue
    return {"links": links, "all_inactive": False, "unparsed": []}


def _nvml_fields(nv, h, ids: list[int]) -> dict[int, int]:
    """{field id: unsigned value} for the fields this driver supports (nvmlDeviceGetFieldValues)."""
    try:
        values = nv.nvmlDeviceGetFieldValues(h, ids)
    except Exception:  # older NVML without the call, or the whole query refused
        return {}
    out = {}
    for fid, v in zip(ids, values):
        if int(getattr(v, "nvmlReturn", 1)) == 0:
            out[fid] = int(v.value.uiVal)
    return out


def _nvml_recovery(nv, h, state: dict) -> None:
    """The driver's recovery action and reset state (R570+ field values; what `nvidia-smi -q` shows
    as 'GPU Recovery Action' and 'GPU Reset Status'). Left None where the driver has no such field."""
    f_action = getattr(nv, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", 230)
    f_reset = getattr(nv, "NVML_FI_DEV_RESET_STATUS", 226)
    f_drain = getattr(nv, "NVML_FI_DEV_DRAIN_AND_RESET_STATUS", 227)
    got = _nvml_fields(nv, h, [f_action, f_reset, f_drain])
    if f_action in got:
        state["recovery_action"] = RECOVERY_ACTIONS.get(got[f_action], f"unknown action {got[f_action]}")
    if f_reset in got:
        state["reset_required"] = bool(got[f_reset])
    if f_drain in got:
        state["drain_and_reset"] = bool(got[f_drain])


def _mig_mode(value) -> str | None:
    """nvmlDeviceGetMigMode's (current, pending) as nvidia-smi prints the current one."""
    if not isinstance(value, (tuple, list)) or not value:
        return None
    return "Enabled" if int(value[0]) == 1 else "Disabled"


def _enabled(value) -> bool | None:
    return None if value is None else int(value) == 1


def _nvml_fabric(nv, h, state: dict) -> None:
    """NVSwitch fabric registration (Hopper+): a GPU whose fabric is not Completed/Success cannot
    run CUDA ('system not yet initialized'). Why it was not read is kept (`fabric_unavailable`): on a
    SKU with NVSwitches the check is then a visible not-run, never absent."""
    if not hasattr(nv, "c_nvmlGpuFabricInfo_t"):
        state["fabric_unavailable"] = "this nvidia-ml-py has no c_nvmlGpuFabricInfo_t (older than the R530 bindings)"
        return
    try:
        info = nv.c_nvmlGpuFabricInfo_t()
        nv.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(info))
    except Exception as exc:  # not supported here: no fabric; any other error: kept, the check says not run
        if getattr(exc, "value", None) not in NVML_NOT_THERE:
            state["fabric_error"] = f"nvmlDeviceGetGpuFabricInfo: {one_line(exc, 160)}"
        else:
            state["fabric_unavailable"] = f"nvmlDeviceGetGpuFabricInfo: {one_line(exc, 160)}"
        return
    st = FABRIC_STATES.get(int(info.state))
    if st is None:
        state["fabric_unavailable"] = "nvmlDeviceGetGpuFabricInfo: state NOT_SUPPORTED"
        return  # NOT_SUPPORTED: no NVSwitch fabric on this system
    state["fabric_state"] = st
    state["fabric_status"] = "Success" if int(info.status) == 0 else f"NVML error {int(info.status)}"


# nvidia-smi exits with NVML's return codes (nvidia-smi(1), RETURN VALUE): which mean the node is
# at fault, and which only that the query could not run here
SMI_EXIT = {
    2: "a supplied argument or flag is invalid",
    3: "the requested operation is not available on the target device",
    4: "the current user does not have permission",
    6: "a query to find an object was unsuccessful",
    8: "a device's external power cables are not properly attached",
    9: "the NVIDIA driver is not loaded",
    10: "the NVIDIA kernel detected an interrupt issue with a GPU",
    12: "the NVML shared library could not be found or loaded",
    13: "the local NVML does not implement this function",
    14: "the infoROM is corrupted",
    15: "the GPU has fallen off the bus or has otherwise become inaccessible",
    255: "other error or internal driver error",
}
SMI_NODE_FAULT = {8: "GPU_POWER_FAULT", 9: "GPU_DRIVER_UNREACHABLE", 10: "GPU_DRIVER_UNREACHABLE",
                  14: "INFOROM_CORRUPTED", 15: "GPU_LOST", 255: "GPU_DRIVER_UNREACHABLE"}


@dataclass
class SmiQuery:
    """What nvidia-smi gave: the parsed state (None when nothing parsed) and its exit code."""

    state: dict | None
    rc: int
    message: str

    @property
    def fault_code(self) -> str | None:
        return SMI_NODE_FAULT.get(self.rc)

    def explain(self) -> str:
        return f"nvidia-smi exit {self.rc} ({SMI_EXIT.get(self.rc, 'undocumented exit code')}): {self.message}"


def collect_smi(ctx, smi: str) -> SmiQuery:
    """`nvidia-smi -q -x` and `nvidia-smi nvlink -s`. Raises ValueError when nvidia-smi exits 0 with
    output that is no nvidia_smi_log (garbage)."""
    rc, out, err = ctx.run_tool([smi, "-q", "-x"], timeout=90)
    text = out if "<nvidia_smi_log" not in out else ""  # its own message (exit 9) is on stdout
    msg = one_line(text.strip() or err.strip() or f"exit code {rc}", 200)
    try:
        state = parsers.parse_smi_xml(out)
    except ValueError:
        if rc == 0:
            raise
        return SmiQuery(None, rc, msg)
    for g in state["gpus"]:
        g.setdefault("processes", None)
    _smi_nvlinks(ctx, smi, state)
    return SmiQuery(state, rc, msg if rc else "")


def _smi_nvlinks(ctx, smi: str, state: dict) -> None:
    """`nvidia-smi nvlink -s` into each GPU's `nvlink` ({links {n: active}, all_inactive, unparsed});
    a run that fails leaves `nvlink` None with `nvlink_why` (the check says it could not run). A block
    is matched to its GPU by UUID, else by index; a block no GPU of `-q -x` takes is kept in
    `state["nvlink_unmapped"]` (reported, never dropped)."""
    why, per_gpu = None, {}
    try:
        rc, out, err = ctx.run_tool([smi, "nvlink", "-s"], timeout=60)
        if rc != 0:
            why = f"nvidia-smi nvlink -s exit {rc} ({SMI_EXIT.get(rc, 'undocumented')}): {one_line(err or out, 120)}"
        else:
            per_gpu = parsers.parse_nvlink_status(out) if out.strip() else {}
    except (ValueError, SuiteError, OSError) as exc:
        why = f"nvidia-smi nvlink -s unusable: {one_line(str(exc), 150)}"
    by_uuid = {nv["uuid"]: i for i, nv in per_gpu.items() if nv.get("uuid")}
    claimed = {by_uuid[g["uuid"]] for g in state["gpus"] if g.get("uuid") in by_uuid}
    taken: set[int] = set()
    for g in state["gpus"]:
        # the block with the GPU's UUID, else the block of its index unless another GPU's UUID claims it
        i = by_uuid[g["uuid"]] if g.get("uuid") in by_uuid else (g["index"] if g["index"] not in claimed else None)
        if why:
            g["nvlink"], g["nvlink_why"] = None, why
        elif i in per_gpu and i not in taken:
            taken.add(i)
            nv = per_gpu[i]
            g["nvlink"] = {"links": {k: v is not None for k, v in nv["links"].items()},
                           "all_inactive": nv["all_inactive"], "unparsed": nv["unparsed"]}
        else:
            g["nvlink"] = {"links": {}, "all_inactive": False, "unparsed": []}  # no line for this GPU
    state["nvlink_unmapped"] = [
        {"index": i, "uuid": nv.get("uuid"), "links": {k: v is not None for k, v in nv["links"].items()},
         "all_inactive": nv["all_inactive"], "unparsed": nv["unparsed"]}
        for i, nv in sorted(per_gpu.items()) if i not in taken]


def listen_xids(nv, seconds: float) -> list[dict] | None:
    """Live Xid events for `seconds` via NVML (catches a GPU that is erroring right now)."""
    try:
        es = nv.nvmlEventSetCreate()
    except Exception:
        return None
    events = []
    try:
        registered = 0
        for i in range(nv.nvmlDeviceGetCount()):
            try:
                h = nv.nvmlDeviceGetHandleByIndex(i)
                nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, es)
                registered += 1
            except Exception:
                continue
        if not registered:
            return None
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                data = nv.nvmlEventSetWait(es, int(left * 1000))
            except Exception:  # NVMLError_Timeout: no event
                break
            pci = None
            try:
                pci = short_pci(_s(nv.nvmlDeviceGetPciInfo(data.device).busId))
            except Exception:
                pass
            events.append({"pci": pci, "xid": int(data.eventData)})
    finally:
        try:
            nv.nvmlEventSetFree(es)
        except Exception:
            pass
    return events


