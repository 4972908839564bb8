"""gpu_health: seconds, no load. GPU count, Xid events and every other driver error in the kernel
log (and live NVML events), ECC, row remapping / retired pages, the driver's recovery action,
clocks and throttle reasons, thermal throttling under load since the previous run, PCIe link,
NVLink, NVSwitch fabric, leftover processes, and `dcgmi diag -r 1` — one checker per concern
(checkers/), each judged against what the node's model should have (baselines.yaml `expect`,
overridable with --expect).

Data comes from NVML (nvidia-ml-py) or, when NVML cannot be loaded, from `nvidia-smi -q -x` and
`nvidia-smi nvlink -s` (gpu_state.py). Every expected check appears in every result: pass, fail, or
skip with the reason it could not run.

    python -m cluster_doctor_suites.gpu_health [--expected-gpus 8] [--dcgm-level 1]

Thermal throttling that happened under load (a failing thermal interface or sensor: the GPU is cool
while idle) is seen in NVML's cumulative thermal violation time, judged by its growth since the
previous gpu_health result of this node (`<output-dir>/gpu_health/<node>/`, or --previous); the
first run, and the first after a reboot, keep the baseline and say so (skip). A GPU that failed it
fails every run for `thermal_violation_window_hours` (24), through idle runs and reboots alike.

CPU mode (--device cpu) judges what exists without a GPU: the GPU count against --expected-gpus
(0 by default) and the kernel log; everything that needs NVML is reported as `skip`.
"""

from __future__ import annotations

import os
import shutil

from . import gpu_state
from .baselines import Baselines, expectations, model_for_node
from .checkers import (clocks, dcgm, driver_log, ecc, fabric, gpu_mode, kernel_log, log_evidence, nvlink, pcie,
                       processes, recovery, retired_pages, row_remap, thermal_violation, xid)
from .dl import probe
from .harness.checks import Check, SuiteError
from .harness.context import Context
from .harness.inventory import NvmlUnavailable, nvml_init
from .harness.previous import BOOT_ID, previous_sample, read_boot_id
from .harness.runner import main_entry, run_suite
from .harness.text import fmt, one_line, utcnow

SUITE = "gpu_health"
# checks every GPU must have a result for, and the node-level ones (a missing one is added as `skip`)
GPU_CHECKS = ("ecc_uncorrected_volatile", "row_remap", "recovery_action", "clock_throttle", "thermal_violation",
              "pcie_width", "pcie_gen", "nvlink")
NODE_CHECKS = ("gpu_count", "xid", "driver_log", "gpu_fallen_off_bus", "dcgm_diag")
LOG_CHECKS = ("xid", "driver_log", "gpu_fallen_off_bus")  # what the kernel log proves
# names that stand for an expected check (row_remap_pending satisfies row_remap, ...)
SATISFIES = {"row_remap": ("row_remap", "row_remap_pending", "row_remap_failure", "retired_pages",
                           "retired_pages_pending"), "xid": ("xid",)}


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
    g.add_argument("--dcgm-timeout", type=float, default=os.environ.get("CLUSTER_DOCTOR_DCGM_TIMEOUT") or None,
                   help="seconds dcgmi diag may take before it counts as hung, an error against the GPUs "
                   "(default 240 at -r 1, 3600 above) [CLUSTER_DOCTOR_DCGM_TIMEOUT]")
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
    g.add_argument("--previous", default=os.environ.get("CLUSTER_DOCTOR_GPU_PREVIOUS") or None,
                   help="a previous gpu_health result JSON to judge the thermal violation counters' growth against "
                   "(default: the newest in <output-dir>/gpu_health/<node>/) [CLUSTER_DOCTOR_GPU_PREVIOUS]")
    g.add_argument("--boot-id-file", default=BOOT_ID, help="where the kernel's boot id is read from")
    g.add_argument("--probe-seconds", type=float, default=os.environ.get("CLUSTER_DOCTOR_PROBE_SECONDS") or None,
                   help="the speed probe: seconds of GEMM and of HBM copy per GPU (e.g. 3); 0, the default: no "
                   "probe (the orchestrator sets it on the sweeps that probe the node) [CLUSTER_DOCTOR_PROBE_SECONDS]")
    g.add_argument("--probe-gemm-size", type=int, default=None, help="the probe's GEMM dimension (8192; 128 in CPU mode)")
    g.add_argument("--probe-membw-mib", type=int, default=None, help="the probe's copy size in MiB (1024; 16 in CPU mode)")


def default_timeout(args) -> float:
    return 120 if args.device == "cpu" else 300  # dcgmi diag -r 1 plus NVML queries



# --------------------------------------------------------------------------------------------------
def run(ctx: Context) -> None:
    a = ctx.args
    baselines = Baselines.load(a.baselines)
    settings = baselines.section("gpu_health")
    ctx.set_phase("collect GPU state")
    nv, state, source, why_none = _collect(ctx, a)
    try:
        gpus = (state or {}).get("gpus") or []
        expect, model, ok = _inventory(ctx, a, baselines, state, source, why_none)
        if ok and gpus:
            ctx.set_phase(f"judge {len(gpus)} GPU(s) from {source}")
            _judge_gpus(ctx, gpus, model, expect, settings, (state or {}).get("nvlink_unmapped") or [])
            _judge_thermal(ctx, a, gpus, settings, source)
        _judge_driver_log(ctx, a, gpus, settings, nv)
        _judge_dcgm(ctx, a, gpus)
        _speed_probe(ctx, a, baselines, gpus, ok)
        nvswitch = not ctx.cpu and bool(expect.get("nvswitch"))
        _ensure_expected(ctx, gpus, None if state is not None else "no GPU state: " + "; ".join(why_none),
                         ("fabric",) if nvswitch else ())
    finally:
        if nv is not None:
            try:
                nv.nvmlShutdown()
            except Exception:
                pass


def _collect(ctx: Context, a) -> tuple:
    """(nvml module or None, state or None, source, why there is no state)."""
    nv, why_none = None, []
    if a.source in ("auto", "nvml"):
        try:
            nv = nvml_init()
            return nv, gpu_state.collect_nvml(nv), "NVML", why_none
        except NvmlUnavailable as exc:
            why_none.append(str(exc))
        except Exception as exc:  # NVML loaded but a query crashed: the driver is unhealthy
            why_none.append(f"NVML query failed: {exc}")
    if a.source not in ("auto", "nvidia-smi"):
        return nv, None, None, why_none
    smi = shutil.which(a.nvidia_smi)
    if not smi:
        why_none.append(f"{a.nvidia_smi} not found")
        return nv, None, None, why_none
    try:
        q = gpu_state.collect_smi(ctx, smi)
    except ValueError as exc:
        ctx.check("gpu_query", "error", code="TOOL_OUTPUT_UNPARSEABLE", message=f"nvidia-smi -q -x output unparseable: {exc}")
        why_none.append("nvidia-smi output unparseable")
        return nv, None, "unparseable", why_none  # cannot count GPUs: an error, not "0 GPUs"
    except SuiteError as exc:  # hung: the tool exists but the driver does not answer
        ctx.check("gpu_query", "skip" if ctx.cpu else "fail", code="GPU_STATE_UNAVAILABLE" if ctx.cpu else "GPU_DRIVER_UNREACHABLE",
                  message=f"nvidia-smi failed: {exc}")
        why_none.append(f"nvidia-smi failed: {exc}")
        return nv, None, None, why_none
    if q.rc != 0:
        fault = q.fault_code and not ctx.cpu
        ctx.check("gpu_query", "fail" if fault else "skip", value=q.rc, code=q.fault_code if fault else "GPU_STATE_UNAVAILABLE",
                  message=q.explain())
        if q.state is None:
            why_none.append(q.explain())
            return nv, None, None, why_none
    return nv, q.state, "nvidia-smi", why_none


def _inventory(ctx: Context, a, baselines: Baselines, state, source, why_none) -> tuple:
    """GPU count, model and expectations; (expect, model, whether the GPUs can be judged)."""
    gpus = (state or {}).get("gpus") or []
    ctx.environment.update(
        driver=(state or {}).get("driver"),
        cuda=(state or {}).get("cuda"),
        gpu_count=len(gpus),
        gpu_state_source=source if state else None,
        gpus=[{k: g.get(k) for k in ("index", "name", "uuid", "pci_bus_id")} for g in gpus],
    )
    if source == "unparseable":
        ctx.check("gpu_count", "error", code="GPU_COUNT_UNKNOWN", message="cannot count GPUs: " + "; ".join(why_none))
        ok = False
    else:
        ok = ctx.check_gpu_count(len(gpus), source=source or "neither NVML nor nvidia-smi",
                                 models=[g.get("name") for g in gpus])
    key, name = model_for_node(ctx, baselines, [g.get("name") for g in gpus])
    ctx.environment.update(gpu_model=name if (not ctx.cpu or gpus) else a.gpu_model,
                           baseline=key if not ctx.cpu else None)
    expect = expectations(baselines, key if not ctx.cpu else None, a)
    ctx.environment["expectations"] = expect.as_environment()
    names = sorted({g.get("name") for g in gpus if g.get("name")})
    if len(names) > 1:
        ctx.check("gpu_models", "warn", value=len(names), code="GPU_MODELS_MIXED",
                  message=f"mixed GPU models on one node: {', '.join(names)}")
    ctx.metric("gpus_visible", len(gpus), summary=True)
    return expect, (baselines.model(key) if not ctx.cpu else {}), ok


def _judge_gpus(ctx: Context, gpus: list[dict], model: dict, expect, settings: dict,
                unmapped_nvlinks: list[dict]) -> None:
    live = []
    for g in gpus:
        if g.get("lost"):
            ctx.check("gpu_reachable", "fail", device=f"cuda:{g['index']}", code="GPU_LOST",
                      message=f"GPU is lost / unreachable{' (' + g['pci_bus_id'] + ')' if g.get('pci_bus_id') else ''}: {g['lost']}")
            continue
        live.append(g)
        if g.get("field_errors"):
            ctx.check("gpu_fields", "warn", value=len(g["field_errors"]), device=f"cuda:{g['index']}", code="GPU_FIELD_ERROR",
                      message="the driver answered with an error for: " + ", ".join(g["field_errors"][:8]))
        remap = row_remap.observe(g)
        pages = retired_pages.observe(g)
        for c in (
            # ECC off is a warning wherever the GPU has ECC memory: a model that says so, or any GPU
            # the driver reports ECC off for (one without ECC reports the mode as N/A)
            ecc.to_checks(ecc.observe(g), has_ecc_memory=model.get("ecc_memory", True) is not False)
            + row_remap.to_checks(remap, expected=pages.pending is None)
            + retired_pages.to_checks(pages, uses_row_remap=remap.supported)
            + recovery.to_checks(recovery.observe(g))
            + clocks.to_checks(clocks.observe(g), settings.get("temperature_margin_c", 10))
            + pcie.to_checks(pcie.observe(g), expect, settings.get("pcie_replay_warn", 100))
            + fabric.to_checks(fabric.observe(g), nvswitch=bool(expect.get("nvswitch")))
            + gpu_mode.to_checks(gpu_mode.observe(g), expect)
            + processes.to_checks(processes.observe(g))
        ):
            ctx.record(c)
        if g.get("pcie_replays") is not None:
            ctx.metric(f"pcie_replays_cuda{g['index']}", g["pcie_replays"])
    statuses = [nvlink.observe(g) for g in live]
    for c in nvlink.to_checks(statuses + nvlink.unmapped(unmapped_nvlinks), expect):
        ctx.record(c)
    for s in statuses:
        ctx.metric(f"nvlinks_active_cuda{s.gpu_index}", s.active)
    ctx.metric("ecc_uncorrected_volatile_total", sum(g.get("volatile_uncorrected") or 0 for g in live), summary=True)


def _judge_thermal(ctx: Context, a, gpus: list[dict], settings: dict, source: str | None) -> None:
    """Thermal throttling under load since the previous gpu_health run of this node, from each GPU's
    cumulative thermal violation time (checkers/thermal_violation.py); this run's counters are kept
    in the result (`environment.thermal_violation`) as the next run's baseline, with each GPU's failure,
    which fails every run of that GPU for `thermal_violation_window_hours`."""
    at = utcnow()
    boot = read_boot_id(a.boot_id_file)
    previous, why = previous_sample(ctx, SUITE, thermal_violation.KEY, a.previous, thermal_violation.usable)
    base = thermal_violation.baseline(previous, why, boot)
    share = float(settings.get("thermal_violation_max_share", 0.02))
    window_h = float(settings.get("thermal_violation_window_hours", thermal_violation.WINDOW_H))
    samples = [thermal_violation.observe(g, source) for g in gpus if not g.get("lost")]
    records = {}
    for s in samples:
        v = thermal_violation.judge(s, base, at, share, window_h)
        ctx.record(v.check)
        records[s.gpu_index] = v.record
        if s.ns is not None:
            ctx.metric(f"thermal_violation_s_cuda{s.gpu_index}", s.ns / 1e9)
    unseen = thermal_violation.unseen(samples, base.previous, at, window_h)  # lost now: their failure kept
    ctx.environment[thermal_violation.KEY] = thermal_violation.to_json(samples, boot, at, source, records, unseen)


def _judge_driver_log(ctx: Context, a, gpus: list[dict], settings: dict, nv) -> None:
    """Xids and every other driver message of the kernel log, and live Xids from NVML."""
    ctx.set_phase("driver messages (kernel log)")
    window_h = a.xid_window_hours if a.xid_window_hours is not None else float(settings.get("xid_window_hours", 24))
    critical = set(settings.get("critical_xids") or [])
    by_pci = {kernel_log.short_pci(g.get("pci_bus_id")): g["index"] for g in gpus if g.get("pci_bus_id")}

    def device_of(pci):
        if pci in by_pci:
            return f"cuda:{by_pci[pci]}"
        return f"pci:{pci}" if pci else "node"

    if a.no_kernel_log:
        text, what = None, "kernel log disabled (--no-kernel-log)"
    else:
        text, what = kernel_log.read(ctx)
    if text is None:
        # never a silent pass: the driver's history was not checked, and the verdict says so
        for name in LOG_CHECKS:
            ctx.check(name, "skip", code="KERNEL_LOG_UNREADABLE", message=f"kernel log not readable: {what}")
    else:
        messages = kernel_log.split(text)
        events, reviewed = driver_log.classify(messages)
        now = kernel_log.uptime_seconds()
        # the GPUs found, by bus id: an event on a GPU that is not there stays a failure
        hist = log_evidence.history(messages, set(by_pci))
        ctx.metric("xid_events", sum(e.kind == "xid" for e in events), summary=any(e.kind == "xid" for e in events))
        ctx.metric("driver_error_messages", sum(e.kind != "xid" for e in events))
        found = xid.to_checks(events, device_of, critical, window_h, now, what, hist) + driver_log.to_checks(
            events, device_of, window_h, now, what, reviewed, hist)
        cover = log_evidence.coverage(messages, float(settings.get("kernel_log_boot_window_s",
                                                                   log_evidence.BOOT_WINDOW_S)))
        for c in _unless_covered(found, cover, what):
            ctx.record(c)
    listen_s = a.xid_listen_seconds if a.xid_listen_seconds is not None else (0 if ctx.cpu else 2.0)
    if nv is not None and gpus and listen_s > 0:
        live = gpu_state.listen_xids(nv, listen_s)
        if live is not None:
            for c in xid.to_checks(xid.live_events(live), device_of, critical, window_h, None,
                                   f"live NVML event stream ({fmt(listen_s)} s)"):
                ctx.record(c)


def _unless_covered(found: list[Check], cover: log_evidence.Coverage, what: str) -> list[Check]:
    """The log's findings as they are; but a clean log proves nothing unless it reaches back to the
    boot: then each of the three checks that found no failure is a visible not-run with the reason."""
    if cover.covered:
        return [c if c.status != "pass" else _with_coverage(c, cover) for c in found]
    out = [c for c in found if c.status != "pass"]
    for name in LOG_CHECKS:
        if not any(c.name == name and c.status == "fail" for c in out):
            out.append(Check(name, "skip", code="KERNEL_LOG_INCOMPLETE",
                             message=f"{what} not proven complete: {cover.why}"))
    return out


def _with_coverage(c: Check, cover: log_evidence.Coverage) -> Check:
    c.message = f"{c.message} ({cover.why})"
    return c


def _judge_dcgm(ctx: Context, a, gpus: list[dict]) -> None:
    if a.dcgm_level <= 0:
        ctx.check("dcgm_diag", "skip", code="DCGM_UNAVAILABLE", message="disabled (--dcgm-level 0)")
        return
    if ctx.cpu or not gpus:
        ctx.check("dcgm_diag", "skip", code="DCGM_UNAVAILABLE",
                  message="CPU mode: no GPU to diagnose" if ctx.cpu else "no GPU to diagnose")
        return
    ctx.set_phase(f"dcgmi diag -r {a.dcgm_level}")
    r = dcgm.run(ctx, a.dcgmi, a.dcgm_level, a.dcgm_host, float(a.dcgm_timeout) if a.dcgm_timeout else None)
    for line in r.log:
        ctx.log(f"| {line}")
    if r.rc is not None:
        ctx.log(f"dcgmi exit code {r.rc} ({dcgm.status_name(r.rc)})")
    if r.parsed:
        ctx.environment["dcgm"] = r.parsed.get("version")
    if r.not_run and "nv-hostengine" in r.not_run:
        ctx.warn("dcgmi found but no DCGM host engine: start nv-hostengine or use the DCGM exporter's engine")
    for c in dcgm.to_checks(r, [g["index"] for g in gpus if not g.get("lost")]):
        ctx.record(c)


def _speed_probe(ctx: Context, a, baselines: Baselines, gpus: list[dict], ok: bool) -> None:
    """A few seconds of GEMM and HBM copy per live GPU (dl/probe.py): the figures the orchestrator judges
    against the fleet every sweep that probes the node (the orchestrator's --probe-seconds)."""
    seconds = float(a.probe_seconds or 0)
    if seconds <= 0:
        ctx.environment["speed_probe"] = {"seconds": 0, "why": "not asked for (--probe-seconds 0): not due this sweep"}
        return
    live = [g["index"] for g in gpus if not g.get("lost") and isinstance(g.get("index"), int)]
    if not ctx.cpu and not (ok and live):
        ctx.check("speed_probe", "skip", code="PROBE_UNAVAILABLE", message="no live GPU to probe")
        return
    key = "cpu" if ctx.cpu else ctx.environment.get("baseline")
    probe.run(ctx, baselines, key, live, seconds=seconds, gemm_size=a.probe_gemm_size, membw_mib=a.probe_membw_mib)


def _ensure_expected(ctx: Context, gpus: list[dict], no_state: str | None, more: tuple = ()) -> None:
    """Every expected check appears: one that no checker produced is added as `skip` with why, so a
    check can never vanish from a result (and the result reads incomplete, never clean). `more`: the
    GPU checks the node's expectations add (the fabric on a SKU with NVSwitches)."""
    have = {(c.name, c.device) for c in ctx.checks}
    names = {c.name for c in ctx.checks}
    for name in NODE_CHECKS:
        if name not in names:
            ctx.check(name, "skip", code="CHECK_NOT_RUN", message="no result was produced for this check")
    if no_state is not None:
        for name in GPU_CHECKS + more:
            ctx.check(name, "skip", code="GPU_STATE_UNAVAILABLE", message=one_line(no_state, 300))
        return
    for g in gpus:
        if g.get("lost"):
            continue
        dev = f"cuda:{g['index']}"
        for name in GPU_CHECKS + more:
            if not any((n, dev) in have for n in SATISFIES.get(name, (name,))):
                ctx.check(name, "skip", device=dev, code="CHECK_NOT_RUN",
                          message="no result was produced for this check on this GPU")


DESCRIPTION = __doc__.split("\n\n")[0]


def main(argv: list[str] | None = None) -> int:
    """Run in-process (tests, embedding); returns the exit code. `python -m` owns the process instead."""
    return run_suite(SUITE, DESCRIPTION, add_arguments, run, argv, default_timeout)


if __name__ == "__main__":
    main_entry(SUITE, DESCRIPTION, add_arguments, run, default_timeout)
