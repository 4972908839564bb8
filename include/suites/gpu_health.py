"""gpu_health: seconds, no load. GPU count, Xid events, ECC, retired pages / row remapping, throttle
reasons, PCIe link, NVLink state, fabric state, leftover processes, and `dcgmi diag -r 1` when DCGM
is present.

Data comes from NVML (nvidia-ml-py) or, when NVML cannot be loaded, from `nvidia-smi -q -x` and
`nvidia-smi nvlink -s`; Xids from the kernel log (dmesg) and live NVML events.

    python -m cluster_doctor_suites.gpu_health [--expected-gpus 8] [--dcgm-level 1]

CPU mode (--device cpu) judges what exists without a GPU: the GPU count against --expected-gpus
(0 by default) and the kernel log; everything that needs NVML is reported as `skip`.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import time

from . import parsers
from .baselines import Baselines, model_for_node
from .common import Check, Context, NvmlUnavailable, SuiteError, fmt, main_entry, nvml_init, one_line, run_suite

SUITE = "gpu_health"
# NVML clock event reason bits (nvml.h nvmlClocksEventReason*; stable ABI values)
THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THROTTLE_FAIL = {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"}
THROTTLE_WARN = {"sw_power_cap"}
FABRIC_STATES = {0: None, 1: "Not Started", 2: "In Progress", 3: "Completed"}
NVML_ERR_NOT_SUPPORTED, NVML_ERR_GPU_IS_LOST = 3, 15
# nvmlGpuRecoveryAction_t (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION), named as nvidia-smi -q prints them
RECOVERY_ACTIONS = {
    0: "None",
    1: "GPU Reset",
    2: "Node Reboot",
    3: "Drain P2P",
    4: "Drain and Reset",
    5: "Recover IMEX Domain",
    6: "Bus Reset",
    7: "System Reboot",
}


def add_arguments(p) -> None:
    g = p.add_argument_group("gpu_health")
    g.add_argument(
        "--source",
        choices=("auto", "nvml", "nvidia-smi"),
        default="auto",
        help="where GPU state comes from; auto = NVML, else nvidia-smi",
    )
    g.add_argument(
        "--nvidia-smi",
        default=os.environ.get("CLUSTER_DOCTOR_NVIDIA_SMI", "nvidia-smi"),
        help="nvidia-smi binary [CLUSTER_DOCTOR_NVIDIA_SMI]",
    )
    g.add_argument("--dcgmi", default="dcgmi", help="dcgmi binary; used when found in PATH")
    g.add_argument("--dcgm-level", type=int, default=1, help="dcgmi diag run level; 0 disables")
    g.add_argument(
        "--dcgm-host",
        default=os.environ.get("CLUSTER_DOCTOR_DCGM_HOST"),
        help="nv-hostengine to use, e.g. the GPU operator's nvidia-dcgm service (default: local) "
        "[CLUSTER_DOCTOR_DCGM_HOST]",
    )
    g.add_argument(
        "--xid-window-hours",
        type=float,
        default=None,
        help="critical Xids older than this only warn (default from baselines.yaml)",
    )
    g.add_argument(
        "--xid-listen-seconds",
        type=float,
        default=None,
        help="listen for live Xid events via NVML (default 2 s; 0 disables)",
    )
    g.add_argument("--dmesg", default="dmesg", help="dmesg binary (kernel log source)")
    g.add_argument(
        "--journal-dir",
        default=os.environ.get("CLUSTER_DOCTOR_JOURNAL_DIR") or None,
        help="the node's systemd journal directory mounted read-only (e.g. /host/var/log/journal): "
        "read the kernel log from it instead of dmesg, no CAP_SYSLOG needed [CLUSTER_DOCTOR_JOURNAL_DIR]",
    )
    g.add_argument("--journalctl", default="journalctl", help="journalctl binary (with --journal-dir)")
    g.add_argument("--no-kernel-log", action="store_true", help="do not read the kernel log for Xids")


def default_timeout(args) -> float:
    return 120 if args.device == "cpu" else 300  # dcgmi diag -r 1 plus NVML queries


# --------------------------------------------------------------------------------------------------
# State collection: one normalised dict per GPU (same keys as parsers.parse_smi_xml)
# --------------------------------------------------------------------------------------------------
def _q(nv, fn_name: str, *args, lost: list | None = None):
    fn = getattr(nv, fn_name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception as exc:  # NVMLError_*: NotSupported on this GPU, or worse
        if getattr(exc, "value", None) == NVML_ERR_GPU_IS_LOST and lost is not None:
            lost.append(str(exc))
        return None


def _s(x) -> str | None:
    if x is None:
        return None
    return x.decode(errors="replace") if isinstance(x, bytes) else str(x)


def collect_nvml(nv) -> dict:
    """Query every visible GPU through NVML. Unsupported queries become None, never an exception."""
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
        ecc = _q(nv, "nvmlDeviceGetEccMode", h)
        remap = _q(nv, "nvmlDeviceGetRemappedRows", h)
        pending = _q(nv, "nvmlDeviceGetRetiredPagesPendingStatus", h)
        dbe_pages = _q(
            nv, "nvmlDeviceGetRetiredPages", h, 1
        )  # NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
        pstate = _q(nv, "nvmlDeviceGetPerformanceState", h)
        procs = _q(nv, "nvmlDeviceGetComputeRunningProcesses", h)
        state = {
            "index": i,
            "name": _s(_q(nv, "nvmlDeviceGetName", h, lost=lost)),
            "uuid": _s(_q(nv, "nvmlDeviceGetUUID", h)),
            "pci_bus_id": _s(pci.busId) if pci is not None else None,
            "ecc_enabled": (ecc[0] == 1) if ecc else None,
            "volatile_uncorrected": _q(nv, "nvmlDeviceGetTotalEccErrors", h, 1, 0),  # UNCORRECTED, VOLATILE
            "aggregate_uncorrected": _q(nv, "nvmlDeviceGetTotalEccErrors", h, 1, 1),  # UNCORRECTED, AGGREGATE
            "retired_pending": (pending == 1) if pending is not None else None,
            "retired_dbe": len(dbe_pages) if dbe_pages is not None else None,
            "remap_pending": bool(remap[2]) if remap else None,
            "remap_failure": bool(remap[3]) if remap else None,
            "remap_uncorrectable": remap[1] if remap else None,
            "throttle_active": sorted(n for b, n in THROTTLE_BITS.items() if reasons & b)
            if reasons is not None
            else None,
            "pcie_gen": _q(nv, "nvmlDeviceGetCurrPcieLinkGeneration", h),
            "pcie_gen_max": _q(nv, "nvmlDeviceGetMaxPcieLinkGeneration", h),
            "pcie_gen_gpu_max": _q(nv, "nvmlDeviceGetGpuMaxPcieLinkGeneration", h),
            "pcie_width": _q(nv, "nvmlDeviceGetCurrPcieLinkWidth", h),
            "pcie_width_max": _q(nv, "nvmlDeviceGetMaxPcieLinkWidth", h),
            "pcie_replays": _q(nv, "nvmlDeviceGetPcieReplayCounter", h),
            "pstate": pstate if isinstance(pstate, int) and pstate < 32 else None,
            "temp_c": _q(nv, "nvmlDeviceGetTemperature", h, 0),  # NVML_TEMPERATURE_GPU
            "slowdown_temp_c": _q(nv, "nvmlDeviceGetTemperatureThreshold", h, 1),  # THRESHOLD_SLOWDOWN
            "fabric_state": None,
            "fabric_status": None,
            "recovery_action": None,
            "reset_required": None,
            "processes": len(procs) if procs is not None else None,
            "process_mib": round(sum((getattr(p, "usedGpuMemory", 0) or 0) for p in procs) / 2**20)
            if procs
            else 0,
            "nvlinks": _nvml_nvlinks(nv, h),
        }
        _nvml_fabric(nv, h, state)
        _nvml_recovery(nv, h, state)
        if lost:
            state["lost"] = lost[0]
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


def _nvml_nvlinks(nv, h) -> dict[int, bool] | None:
    """{link: active} for the links this GPU has; None when NVLink is not supported at all."""
    links = {}
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            links[link] = bool(nv.nvmlDeviceGetNvLinkState(h, link))
        except Exception:  # NotSupported / InvalidArgument: the link does not exist on this GPU
            continue
    return links or None


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


def _nvml_fabric(nv, h, state: dict) -> None:
    """NVSwitch fabric registration (Hopper+): a GPU whose fabric is not Completed/Success cannot
    run CUDA ('system not yet initialized')."""
    if not hasattr(nv, "c_nvmlGpuFabricInfo_t"):
        return
    try:
        info = nv.c_nvmlGpuFabricInfo_t()
        nv.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(info))
    except Exception:
        return
    st = FABRIC_STATES.get(int(info.state))
    if st is None:
        return  # NOT_SUPPORTED: no NVSwitch fabric on this system
    state["fabric_state"] = st
    state["fabric_status"] = "Success" if int(info.status) == 0 else f"NVML error {int(info.status)}"


def collect_smi(ctx: Context, smi: str) -> dict:
    rc, out, err = ctx.run_tool([smi, "-q", "-x"], timeout=90)
    if rc != 0:
        raise RuntimeError(one_line(out.strip() or err.strip() or f"exit code {rc}", 200))
    state = parsers.parse_smi_xml(out)  # ValueError on garbage
    try:
        rc2, out2, _ = ctx.run_tool([smi, "nvlink", "-s"], timeout=60)
        if rc2 == 0 and out2.strip():
            links = parsers.parse_nvlink_status(out2)
            for g in state["gpus"]:
                if g["index"] in links:
                    g["nvlinks"] = {k: v is not None for k, v in links[g["index"]].items()} or None
    except (ValueError, SuiteError, OSError) as exc:
        ctx.log(f"nvidia-smi nvlink -s unusable: {exc}")
    for g in state["gpus"]:
        g.setdefault("processes", None)
    return state


# --------------------------------------------------------------------------------------------------
# Judging (pure apart from ctx)
# --------------------------------------------------------------------------------------------------
# One judge per concern. Each takes the normalised state of one GPU and returns its checks (pure);
# judge_gpu records them. A value the driver does not report becomes a `skip` with the reason, never
# a silent pass.


def _where(g: dict) -> str:
    return f" ({g['pci_bus_id']})" if g.get("pci_bus_id") else ""


def _dev(g: dict) -> str:
    return f"cuda:{g['index']}"


def judge_ecc(g: dict, model: dict) -> list[Check]:
    dev, where, out = _dev(g), _where(g), []
    v = g.get("volatile_uncorrected")
    if v is None:
        # with ECC off the driver reports the counters as N/A: say so rather than blame the driver
        why = "ECC is disabled on this GPU"
        if g.get("ecc_enabled") is not False:
            why = "ECC counters not reported by the driver"
        out.append(Check("ecc_uncorrected_volatile", "skip", device=dev, message=why + where,
                         code="ECC_COUNTERS_UNAVAILABLE"))
    else:
        out.append(Check("ecc_uncorrected_volatile", "pass" if v == 0 else "fail", v, "errors", "== 0",
                         f"{v} uncorrected ECC error(s) since driver load{where}", dev))
    a = g.get("aggregate_uncorrected")
    if a:
        out.append(Check("ecc_uncorrected_aggregate", "warn", a, "errors", "== 0",
                         f"{a} uncorrected ECC error(s) over the GPU's lifetime{where}", dev))
    if g.get("ecc_enabled") is False and model.get("memory_gib"):
        out.append(Check("ecc_mode", "warn", "disabled", message=f"ECC is disabled{where}", device=dev))
    return out


def judge_retired_pages(g: dict) -> list[Check]:
    dev, where, out = _dev(g), _where(g), []
    if g.get("retired_pending"):
        out.append(Check("retired_pages_pending", "fail", True,
                         message=f"page retirement pending: reset the GPU or reboot{where}", device=dev))
    if g.get("retired_dbe"):
        out.append(Check("retired_pages_dbe", "warn", g["retired_dbe"], "pages",
                         message=f"{g['retired_dbe']} page(s) retired for double-bit ECC errors{where}", device=dev))
    return out


def judge_row_remap(g: dict) -> list[Check]:
    dev, where, out = _dev(g), _where(g), []
    rows = g.get("remap_uncorrectable") or 0
    if g.get("remap_failure"):
        out.append(Check("row_remap_failure", "fail", True, device=dev,
                         message=f"row remapping failed: GPU memory can no longer be repaired (RMA criterion){where}"))
    if g.get("remap_pending"):
        out.append(Check("row_remap_pending", "fail", True, device=dev,
                         message=f"row remapping pending ({rows} uncorrectable rows): reset the GPU{where}"))
    elif g.get("remap_pending") is False and not g.get("remap_failure"):
        out.append(Check("row_remap", "pass", rows, "rows", device=dev,
                         message=f"no remap pending or failed ({rows} uncorrectable rows remapped)"))
    return out


def judge_recovery(g: dict) -> list[Check]:
    """The driver's own verdict (R570+): recovery action and reset-required state."""
    dev, where, out = _dev(g), _where(g), []
    action = g.get("recovery_action")
    if action is None:
        out.append(Check("recovery_action", "skip", device=dev, code="GPU_RECOVERY_STATE_UNAVAILABLE",
                         message="driver reports no GPU recovery action (needs driver R570 or later)"))
    elif action.lower() != "none":
        out.append(Check("recovery_action", "fail", action, device=dev,
                         message=f"driver requests recovery action '{action}'{where}"))
    else:
        out.append(Check("recovery_action", "pass", action, device=dev, message="no recovery action requested"))
    if g.get("reset_required") or g.get("drain_and_reset"):
        what = "drain and reset recommended" if g.get("drain_and_reset") else "GPU reset required"
        out.append(Check("reset_required", "fail", True, device=dev, message=f"driver reports {what}{where}"))
    return out


def judge_throttle(g: dict) -> list[Check]:
    dev, where = _dev(g), _where(g)
    if g.get("throttle_active") is None:
        return [Check("clock_throttle", "skip", device=dev, message="clock event reasons not reported")]
    active = set(g.get("throttle_active") or [])
    bad = sorted(active & THROTTLE_FAIL)
    if bad:
        return [Check("clock_throttle", "fail", ",".join(bad), device=dev,
                      message=f"clocks slowed down by {', '.join(bad)} while idle{where}")]
    if active & THROTTLE_WARN:
        return [Check("clock_throttle", "warn", ",".join(sorted(active)), device=dev,
                      message="software power cap active while idle")]
    flick = sorted(set(g.get("throttle_transient") or []) & THROTTLE_FAIL)
    if flick:
        return [Check("clock_throttle", "warn", ",".join(flick), device=dev,
                      message=f"{', '.join(flick)} seen in one sample while idle{where}")]
    names = ", ".join(sorted(active)) or "none"
    return [Check("clock_throttle", "pass", ",".join(sorted(active)) or "none", device=dev,
                  message=f"no slowdown reason active ({names})")]


def judge_pcie(g: dict, model: dict, settings: dict) -> tuple[list[Check], int | None]:
    dev, where, out = _dev(g), _where(g), []
    w, wmax = g.get("pcie_width"), g.get("pcie_width_max")
    want_w = (model.get("pcie") or {}).get("width") or wmax
    if w is None or want_w is None:
        out.append(Check("pcie_width", "skip", device=dev, message="PCIe link width not reported",
                         code="PCIE_STATE_UNAVAILABLE"))
    else:
        out.append(Check("pcie_width", "pass" if w >= want_w else "fail", w, "lanes", f">= {want_w}",
                         f"PCIe x{w} (max x{wmax}){where}", dev))
    gen, gmax, gpu_max = g.get("pcie_gen"), g.get("pcie_gen_max"), g.get("pcie_gen_gpu_max")
    if gen is None or gmax is None:
        out.append(Check("pcie_gen", "skip", device=dev, message="PCIe link generation not reported",
                         code="PCIE_STATE_UNAVAILABLE"))
    elif gen >= gmax:
        out.append(Check("pcie_gen", "pass", gen, None, f">= {gmax}", f"PCIe Gen{gen}", dev))
    elif g.get("pstate") == 0:
        out.append(Check("pcie_gen", "fail", gen, None, f">= {gmax}",
                         f"PCIe Gen{gen} < Gen{gmax} at P0 (full clocks){where}", dev))
    else:
        # GPUs retrain to a lower generation when idle to save power: not a fault
        out.append(Check("pcie_gen", "pass", gen, None, f">= {gmax} under load",
                         f"PCIe Gen{gen} at idle (P{g.get('pstate')}); max Gen{gmax}", dev))
    if gen is not None and gmax is not None and gpu_max and gmax < gpu_max:
        out.append(Check("pcie_gen_max", "warn", gmax, None, f">= {gpu_max}",
                         f"link limited to Gen{gmax} by the host slot/riser; GPU supports Gen{gpu_max}{where}", dev))
    replays = g.get("pcie_replays")
    if replays is not None:
        lim = settings.get("pcie_replay_warn", 100)
        if replays > lim:
            out.append(Check("pcie_replays", "warn", replays, None, f"<= {lim}",
                             f"{replays} PCIe replays (link retransmissions){where}", dev))
    return out, replays


def judge_clocks_power(g: dict, settings: dict) -> list[Check]:
    """Temperature margin, NVSwitch fabric registration and leftover processes: the state an idle
    node must be in before it takes a job."""
    dev, out = _dev(g), []
    t, slow = g.get("temp_c"), g.get("slowdown_temp_c")
    if t is not None and slow:
        margin = settings.get("temperature_margin_c", 10)
        out.append(Check("temperature", "pass" if t < slow - margin else "warn", t, "C", f"< {slow - margin}",
                         f"{t} C at idle, slowdown at {slow} C", dev))
    fs, fst = g.get("fabric_state"), g.get("fabric_status")
    if fs:
        ok = fs == "Completed" and (fst or "Success") == "Success"
        out.append(Check("fabric", "pass" if ok else "fail", f"{fs}/{fst}", device=dev,
                         message=f"NVSwitch fabric state {fs}, status {fst}"
                         + ("" if ok else " (fabric manager not running or GPU not registered)")))
    if g.get("processes"):
        out.append(Check("leftover_processes", "warn", g["processes"], device=dev,
                         message=f"{g['processes']} compute process(es) hold {g.get('process_mib', '?')} MiB "
                         f"on a node that should be idle"))
    return out


def judge_gpu(ctx: Context, g: dict, model: dict, settings: dict) -> None:
    if g.get("lost"):
        ctx.record(Check("gpu_reachable", "fail", device=_dev(g),
                         message=f"GPU is lost / unreachable{_where(g)}: {g['lost']}"))
        return
    pcie, replays = judge_pcie(g, model, settings)
    for c in (
        judge_ecc(g, model)
        + judge_retired_pages(g)
        + judge_row_remap(g)
        + judge_recovery(g)
        + judge_throttle(g)
        + pcie
        + judge_clocks_power(g, settings)
    ):
        ctx.record(c)
    if replays is not None:
        ctx.metric(f"pcie_replays_cuda{g['index']}", replays)


def judge_nvlinks(ctx: Context, gpus: list[dict], model: dict) -> None:
    expected = model.get("nvlinks_per_gpu")
    have = [g for g in gpus if g.get("nvlinks") is not None and not g.get("lost")]
    if not have:
        if expected:
            ctx.check(
                "nvlink",
                "skip",
                message="NVLink state not available (no NVML nvlink support, no nvidia-smi nvlink)",
            )
        return
    best = max(sum(g["nvlinks"].values()) for g in have)
    for g in have:
        dev = f"cuda:{g['index']}"
        up = sum(g["nvlinks"].values())
        down = sorted(k for k, v in g["nvlinks"].items() if not v)
        want = expected if expected else best
        ctx.metric(f"nvlinks_active_cuda{g['index']}", up)
        if down or up < want:
            parts = []
            if down:
                parts.append(f"link(s) {','.join(map(str, down))} inactive")
            parts.append(f"{up} active, expected {want}" + ("" if expected else " (best GPU of this node)"))
            ctx.check(
                "nvlink",
                "fail",
                value=up,
                unit="links",
                threshold=f">= {want}",
                device=dev,
                message="NVLink " + "; ".join(parts),
            )
        else:
            ctx.check(
                "nvlink",
                "pass",
                value=up,
                unit="links",
                threshold=f">= {want}",
                device=dev,
                message=f"{up} NVLink links active",
            )


def judge_xids(
    ctx: Context,
    events: list[dict],
    gpus: list[dict],
    settings: dict,
    window_h: float,
    uptime_s: float | None,
    source: str,
    fallen: bool = True,
) -> None:
    critical = set(settings.get("critical_xids") or [])
    app = set(settings.get("application_xids") or [])
    by_pci = {parsers.short_pci(g.get("pci_bus_id")): g["index"] for g in gpus if g.get("pci_bus_id")}
    fallen_events = [e for e in events if e.get("kind") == "fallen_off_bus"]
    events = [e for e in events if e.get("kind", "xid") == "xid"]
    if fallen:  # the kernel log carries these reports; the live NVML event stream does not
        judge_fallen_off_bus(ctx, fallen_events, by_pci, window_h, uptime_s, source)
    per_dev: dict[str, list] = {}
    for e in events:
        idx = by_pci.get(e["pci"])
        dev = f"cuda:{idx}" if idx is not None else f"pci:{e['pci']}"
        age_h = (
            (uptime_s - e["uptime_s"]) / 3600
            if (uptime_s is not None and e.get("uptime_s") is not None)
            else None
        )
        if age_h is not None and age_h < 0:
            age_h = None  # log from another boot / clock: unknown age, judged as recent
        if e["xid"] in critical:
            status = "fail" if (age_h is None or age_h <= window_h) else "warn"
        else:
            status = "warn"
        per_dev.setdefault(dev, []).append((status, e, age_h))
    ctx.metric("xid_events", len(events), summary=bool(events))
    if not events:
        ctx.check(
            "xid", "pass", value=0, unit="events", threshold="== 0", message=f"no Xid events in the {source}"
        )
        return
    for dev, items in sorted(per_dev.items()):
        worst = "fail" if any(s == "fail" for s, _, _ in items) else "warn"
        desc = []
        for _, e, age in items[-5:]:
            kind = (
                "critical" if e["xid"] in critical else ("application" if e["xid"] in app else "unclassified")
            )
            when = f", {fmt(age)} h ago" if age is not None else ""
            desc.append(f"Xid {e['xid']} ({kind}{when}): {one_line(e['message'], 60)}")
        ctx.check(
            "xid",
            worst,
            value=max(e["xid"] for _, e, _ in items if e["xid"] in critical)
            if worst == "fail"
            else items[-1][1]["xid"],
            unit="xid",
            threshold=f"no critical Xid within {fmt(window_h)} h",
            device=dev,
            message=f"{len(items)} Xid event(s) in the {source}; " + "; ".join(desc),
        )


def _age_h(e: dict, uptime_s: float | None) -> float | None:
    if uptime_s is None or e.get("uptime_s") is None:
        return None
    age = (uptime_s - e["uptime_s"]) / 3600
    return age if age >= 0 else None  # another boot / clock: unknown age, judged as recent


def judge_fallen_off_bus(
    ctx: Context, events: list[dict], by_pci: dict, window_h: float, uptime_s: float | None, source: str
) -> None:
    """The driver's "fallen off the bus" report, which recent drivers print without an Xid line."""
    per_dev: dict[str, list] = {}
    for e in events:
        idx = by_pci.get(e["pci"])
        per_dev.setdefault(f"cuda:{idx}" if idx is not None else f"pci:{e['pci']}", []).append(e)
    if not events:
        ctx.check("gpu_fallen_off_bus", "pass", value=0, unit="events", threshold="== 0",
                  message=f"no GPU reported fallen off the bus in the {source}")
        return
    for dev, items in sorted(per_dev.items()):
        ages = [_age_h(e, uptime_s) for e in items]
        recent = any(a is None or a <= window_h for a in ages)
        known = [a for a in ages if a is not None]
        when = f", latest {fmt(min(known))} h ago" if known else ""
        ctx.check(
            "gpu_fallen_off_bus",
            "fail" if recent else "warn",
            value=len(items),
            unit="events",
            threshold=f"none within {fmt(window_h)} h",
            device=dev,
            message=f"{len(items)} 'GPU has fallen off the bus' report(s) for PCI {items[-1]['pci']} in the "
            f"{source}{when}",
            code="GPU_FALLEN_OFF_BUS" if recent else "XID_WARNING",
        )


def judge_dcgm(ctx: Context, parsed: dict) -> None:
    ctx.environment["dcgm"] = parsed.get("version")
    for t in parsed["tests"]:
        name = "dcgm_" + re.sub(r"[^a-z0-9]+", "_", t["name"].lower()).strip("_")
        status = t["status"]
        msgs = "; ".join(t["messages"])[:300]
        failing = sorted(g for g, s in t["gpus"].items() if s == "Fail")
        if status == "Fail":
            for g in failing or [None]:
                ctx.check(
                    name,
                    "fail",
                    value="Fail",
                    device=f"cuda:{g}" if g is not None else None,
                    message=f"dcgmi diag {t['category']}/{t['name']} failed" + (f": {msgs}" if msgs else ""),
                )
        elif status == "Warn" or any(m.startswith("Warning") for m in t["messages"]):
            ctx.check(name, "warn", value=status, message=f"dcgmi diag {t['name']}: {msgs or status}")
        elif status == "Pass":
            ctx.check(name, "pass", value="Pass", message=f"dcgmi diag {t['category']}/{t['name']} passed")
        else:
            ctx.check(name, "skip", value=status, message=f"dcgmi diag {t['name']}: {status}")


# --------------------------------------------------------------------------------------------------
# Sources of Xids and DCGM
# --------------------------------------------------------------------------------------------------
def read_kernel_log(ctx: Context) -> tuple[str | None, str]:
    """The kernel log: the node's journal when --journal-dir points at it (mounted read-only into
    the pod, needs no capability), else dmesg (needs CAP_SYSLOG where kernel.dmesg_restrict=1).
    Returns (text, what) or (None, why it could not be read)."""
    why = []
    jdir = ctx.args.journal_dir
    if jdir:
        journalctl = shutil.which(ctx.args.journalctl)
        if not journalctl:
            why.append(f"{ctx.args.journalctl} not installed")
        elif not os.path.isdir(jdir):
            why.append(f"journal directory {jdir} does not exist")
        else:
            try:
                rc, out, err = ctx.run_tool(
                    [journalctl, "-k", "-b", "-D", jdir, "-o", "short-monotonic", "--no-pager", "-q"],
                    timeout=60,
                )
                if rc == 0:
                    return out, f"node journal ({jdir})"
                why.append(f"journalctl: {one_line(err or out, 120)}")
            except SuiteError as exc:
                why.append(str(exc))
    dmesg = shutil.which(ctx.args.dmesg)
    if not dmesg:
        why.append(f"{ctx.args.dmesg} not installed")
        return None, "; ".join(why)
    try:
        rc, out, err = ctx.run_tool([dmesg], timeout=30)
    except SuiteError as exc:
        why.append(str(exc))
        return None, "; ".join(why)
    if rc != 0:
        why.append(
            f"dmesg: {one_line(err or out or f'exit code {rc}', 120)} (needs CAP_SYSLOG or "
            f"kernel.dmesg_restrict=0, or mount the node's journal and pass --journal-dir)"
        )
        return None, "; ".join(why)
    return out, "kernel log (dmesg)"


def uptime_seconds() -> float | None:
    try:
        with open("/proc/uptime") as fh:
            return float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


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
                pci = parsers.short_pci(_s(nv.nvmlDeviceGetPciInfo(data.device).busId))
            except Exception:
                pass
            events.append(
                {
                    "uptime_s": None,
                    "pci": pci or "unknown",
                    "xid": int(data.eventData),
                    "message": "live NVML event",
                }
            )
    finally:
        try:
            nv.nvmlEventSetFree(es)
        except Exception:
            pass
    return events


_NO_HOSTENGINE = re.compile(
    r"unable to establish a connection|Host engine connection invalid|is not running", re.I
)


def run_dcgm(ctx: Context, dcgmi: str, level: int) -> None:
    """`dcgmi diag -r N -j` (JSON, DCGM 3.x and 4.x); when dcgmi prints no JSON document (a dcgmi
    without -j rejects the flag with its usage text), `dcgmi diag -r N` and its table.

    dcgmi exits non-zero when a test fails (DCGM_ST_NVVS_ERROR, 226): the exit code is logged, the
    verdict comes from the results it printed; no results at all is an error, never a pass."""
    host = ["--host", ctx.args.dcgm_host] if ctx.args.dcgm_host else []
    timeout = 240 if level <= 1 else 3600
    base = [dcgmi, "diag", "-r", str(level)]
    try:
        rc, out, err = ctx.run_tool(base + ["-j"] + host, timeout=timeout)
    except SuiteError as exc:
        ctx.check("dcgm_diag", "error", message=str(exc))
        return
    if not _dcgm_log_and_engine(ctx, rc, out, err):
        return
    try:
        judge_dcgm(ctx, parsers.parse_dcgmi_diag_json(out))
        return
    except ValueError as exc:
        if _has_json_object(out):  # dcgmi understood -j; its document says why nothing ran
            ctx.check(
                "dcgm_diag",
                "error",
                value=rc,
                message=f"dcgmi diag -j (exit code {rc}): {one_line(str(exc), 200)}",
                code="DCGM_UNAVAILABLE" if "did not run" in str(exc) else None,
            )
            return
        ctx.log(f"dcgmi diag -j printed no JSON ({exc}); falling back to the table output")
    try:
        rc, out, err = ctx.run_tool(base + host, timeout=timeout)
    except SuiteError as exc:
        ctx.check("dcgm_diag", "error", message=str(exc))
        return
    if not _dcgm_log_and_engine(ctx, rc, out, err):
        return
    try:
        parsed = parsers.parse_dcgmi_diag(out)
    except ValueError as exc:
        text = out + "\n" + err
        ctx.check(
            "dcgm_diag",
            "error",
            value=rc,
            message=f"unparseable dcgmi diag output ({exc}): {one_line(text.strip()[:200] or 'empty', 160)}",
        )
        return
    judge_dcgm(ctx, parsed)


def _has_json_object(text: str) -> bool:
    try:
        parsers.extract_json_object(text)
    except ValueError:
        return False
    return True


def _dcgm_log_and_engine(ctx: Context, rc: int, out: str, err: str) -> bool:
    """Log what dcgmi printed; False (and a skip) when it could not reach a host engine."""
    text = out + "\n" + err
    for line in text.strip().splitlines()[:200]:
        ctx.log(f"| {line}")
    ctx.log(f"dcgmi exit code {rc}")
    if _NO_HOSTENGINE.search(text):
        ctx.check("dcgm_diag", "skip", message="dcgmi present but no nv-hostengine reachable")
        ctx.warn("dcgmi found but no DCGM host engine: start nv-hostengine or use the DCGM exporter's engine")
        return False
    return True


# --------------------------------------------------------------------------------------------------
def run(ctx: Context) -> None:
    a = ctx.args
    baselines = Baselines.load(a.baselines)
    settings = baselines.section("gpu_health")
    window_h = (
        a.xid_window_hours if a.xid_window_hours is not None else float(settings.get("xid_window_hours", 24))
    )
    listen_s = a.xid_listen_seconds if a.xid_listen_seconds is not None else (0 if ctx.cpu else 2.0)

    ctx.set_phase("collect GPU state")
    nv, state, source, why_none = None, None, None, []
    if a.source in ("auto", "nvml"):
        try:
            nv = nvml_init()
            state, source = collect_nvml(nv), "NVML"
        except NvmlUnavailable as exc:
            why_none.append(str(exc))
        except Exception as exc:  # NVML loaded but a query crashed: the driver is unhealthy
            why_none.append(f"NVML query failed: {exc}")
    smi = shutil.which(a.nvidia_smi)
    if state is None and a.source in ("auto", "nvidia-smi"):
        if smi:
            try:
                state, source = collect_smi(ctx, smi), "nvidia-smi"
            except ValueError as exc:
                ctx.check("gpu_query", "error", message=f"nvidia-smi -q -x output unparseable: {exc}")
                why_none.append("nvidia-smi output unparseable")
                source = "unparseable"  # cannot count GPUs: an error, not "0 GPUs"
            except (RuntimeError, SuiteError) as exc:
                # the tool exists but cannot talk to the driver (or hangs): a node fault on a GPU node
                ctx.check("gpu_query", "skip" if ctx.cpu else "fail", message=f"nvidia-smi failed: {exc}")
                why_none.append(f"nvidia-smi failed: {exc}")
        else:
            why_none.append(f"{a.nvidia_smi} not found")
    try:
        _judge_all(ctx, a, baselines, settings, state, source, why_none, nv, window_h, listen_s)
    finally:
        if nv is not None:
            try:
                nv.nvmlShutdown()
            except Exception:
                pass


def _judge_all(ctx, a, baselines, settings, state, source, why_none, nv, window_h, listen_s) -> None:
    gpus = (state or {}).get("gpus") or []
    if state is None:
        ctx.check("gpu_state_source", "skip", message="no GPU state: " + "; ".join(why_none))
    ctx.environment.update(
        driver=(state or {}).get("driver"),
        cuda=(state or {}).get("cuda"),
        gpu_count=len(gpus),
        gpu_state_source=source if state else None,
        gpus=[{k: g.get(k) for k in ("index", "name", "uuid", "pci_bus_id")} for g in gpus],
    )
    if source == "unparseable":
        ctx.check("gpu_count", "error", message="cannot count GPUs: " + "; ".join(why_none))
        ok = False
    else:
        ok = ctx.check_gpu_count(len(gpus), source=source or "neither NVML nor nvidia-smi")
    key, name = model_for_node(ctx, baselines, [g.get("name") for g in gpus])
    if not ctx.cpu or gpus:
        ctx.environment.update(gpu_model=name, baseline=key)
    else:
        ctx.environment.update(gpu_model=a.gpu_model, baseline=None)
    model = baselines.model(key) if not ctx.cpu else {}
    names = sorted({g.get("name") for g in gpus if g.get("name")})
    if len(names) > 1:
        ctx.check(
            "gpu_models",
            "warn",
            value=len(names),
            message=f"mixed GPU models on one node: {', '.join(names)}",
        )
    ctx.metric("gpus_visible", len(gpus), summary=True)
    if ok and gpus:
        ctx.set_phase(f"judge {len(gpus)} GPU(s) from {source}")
        for g in gpus:
            judge_gpu(ctx, g, model, settings)
        judge_nvlinks(ctx, gpus, model)
        unc = sum(g.get("volatile_uncorrected") or 0 for g in gpus)
        ctx.metric("ecc_uncorrected_volatile_total", unc, summary=True)

    ctx.set_phase("Xid events")
    if a.no_kernel_log:
        ctx.check("xid", "skip", message="kernel log disabled (--no-kernel-log)", code="KERNEL_LOG_UNREADABLE")
    else:
        log, what = read_kernel_log(ctx)
        if log is None:
            # never a silent pass: the Xid history was not checked, and the verdict says so
            ctx.check("xid", "skip", message=f"kernel log not readable: {what}", code="KERNEL_LOG_UNREADABLE")
        else:
            judge_xids(ctx, parsers.parse_xids(log), gpus, settings, window_h, uptime_seconds(), what)
    if nv is not None and gpus and listen_s > 0:
        live = listen_xids(nv, listen_s)
        if live is not None:
            judge_xids(
                ctx, live, gpus, settings, window_h, None, f"live NVML event stream ({fmt(listen_s)} s)",
                fallen=False,
            )

    if a.dcgm_level > 0 and not ctx.cpu:
        dcgmi = shutil.which(a.dcgmi)
        if dcgmi and gpus:
            ctx.set_phase(f"dcgmi diag -r {a.dcgm_level}")
            run_dcgm(ctx, dcgmi, a.dcgm_level)
        else:
            ctx.log("dcgmi not found: DCGM diagnostics skipped" if not dcgmi else "no GPU: DCGM skipped")


DESCRIPTION = __doc__.split("\n\n")[0]


def main(argv: list[str] | None = None) -> int:
    """Run in-process (tests, embedding); returns the exit code. `python -m` owns the process instead."""
    return run_suite(SUITE, DESCRIPTION, add_arguments, run, argv, default_timeout)


if __name__ == "__main__":
    main_entry(SUITE, DESCRIPTION, add_arguments, run, default_timeout)
