"""nvbandwidth: minutes, all GPUs. Device-to-device bandwidth of every GPU pair (copy engine and SM
copies, NVLink or PCIe) and each GPU's host link (host-to-device and device-to-host, copy engine),
measured by NVIDIA's nvbandwidth and judged against the floors of the GPU model (baselines.yaml,
with their sources) and the node's own median; a slow pair is named by its two GPUs. Every copy is
verified by the tool: corrupted data fails the node.

    python -m cluster_doctor_suites.nvbandwidth [--expected-gpus 8] [--testcases ...]

CPU mode (--device cpu) has nothing to measure: every testcase is a visible not-run.
"""

from __future__ import annotations

import os
import shutil
import statistics

from .baselines import Baselines, expectations, model_for_node
from .checkers import nvbandwidth as nvbw
from .harness import gpu_expectation
from .harness.checks import SuiteError
from .harness.context import Context
from .harness.runner import main_entry, run_suite
from .harness.text import fmt, one_line

SUITE = "nvbandwidth"


def add_arguments(p) -> None:
    g = p.add_argument_group("nvbandwidth")
    g.add_argument("--nvbandwidth", default=os.environ.get("CLUSTER_DOCTOR_NVBANDWIDTH", "nvbandwidth"),
                   help="nvbandwidth binary [CLUSTER_DOCTOR_NVBANDWIDTH]")
    g.add_argument("--testcases", default=",".join(nvbw.DEFAULT_TESTCASES),
                   help=f"comma-separated testcases to run and judge, among {', '.join(nvbw.TESTCASES)}")
    g.add_argument("--buffer-mib", type=int, default=None, help="nvbandwidth -b (default: the tool's, 512 MiB)")
    g.add_argument("--run-timeout", type=float, default=780, help="seconds before nvbandwidth is stopped (error)")
    g.add_argument("--min-d2d-gbps", type=float, default=None, help="override the device-to-device floor (GB/s per pair)")
    g.add_argument("--min-host-gbps", type=float, default=None, help="override the host-link floor (GB/s per GPU)")


def default_timeout(args) -> float:
    return 60 if args.device == "cpu" else 900


def _requested(a) -> list[nvbw.Testcase]:
    names = [t.strip() for t in a.testcases.split(",") if t.strip()]
    unknown = [t for t in names if t not in nvbw.TESTCASES]
    if unknown or not names:
        raise SuiteError(f"unknown nvbandwidth testcase(s) {', '.join(unknown) or '(none given)'}; "
                         f"known: {', '.join(nvbw.TESTCASES)}")
    return [nvbw.TESTCASES[t] for t in names]


# --------------------------------------------------------------------------------------------------
# the checks without which the suite proves nothing: one not judged for want of a floor is an error
KEY_CHECKS = ("nvbw_d2d_*", "nvbw_h2d_*", "nvbw_d2h_*", "baseline")


def run(ctx: Context) -> None:
    ctx.key_checks = KEY_CHECKS
    a = ctx.args
    wanted = _requested(a)
    baselines = Baselines.load(a.baselines)
    if ctx.cpu:
        ctx.check_gpu_count(0, source="CPU mode")
        for tc in wanted:
            ctx.check(tc.check, "skip", code="NVBW_NOT_APPLICABLE", message=f"CPU mode: no GPU, {tc.key} not run")
        return
    binary = shutil.which(a.nvbandwidth)
    if not binary:
        raise SuiteError(f"nvbandwidth not found (looked for {a.nvbandwidth!r} in PATH)", code="TOOL_MISSING")
    argv = [binary, "-t", *[tc.key for tc in wanted]] + (["-b", str(a.buffer_mib)] if a.buffer_mib else [])
    ctx.set_phase(f"nvbandwidth: {len(wanted)} testcase(s)")
    try:
        rc, out, err = ctx.run_tool(argv, timeout=a.run_timeout)
    except SuiteError as exc:  # a hang: judge what it printed before, then report the hang
        _judge(ctx, a, baselines, wanted, nvbw.parse(exc.output, [t.key for t in wanted]), None)
        raise
    for line in (out + err).splitlines():
        ctx.log(f"| {line}")
    _judge(ctx, a, baselines, wanted, nvbw.parse(out + "\n" + err, [t.key for t in wanted]), rc, err)


def _judge(ctx: Context, a, baselines: Baselines, wanted: list[nvbw.Testcase], out: nvbw.Output, rc: int | None,
           err: str = "") -> None:
    # nvbandwidth v0.10 lists no `Device N:` lines: then the GPUs are the ones its matrices name
    gpus = len(out.devices) or nvbw.gpus_named(out)
    ctx.environment.update(nvbandwidth=out.version, driver=out.driver, gpu_count=gpus,
                           gpus=[{"index": i, "name": n} for i, n in sorted(out.devices.items())])
    names = [n.rsplit(" (", 1)[0] for n in out.devices.values()]
    ctx.check_gpu_count(gpus, source="nvbandwidth" if out.devices else "nvbandwidth's result matrices (no device "
                        "list printed)", models=names)
    # every ordered pair (every GPU, for the host link) of the GPUs the node should have is measured
    expected = gpu_expectation.resolve(a, ctx.cpu, names).count or gpus
    key, model_name = model_for_node(ctx, baselines, names)
    ctx.environment.update(gpu_model=model_name, baseline=key)
    expect = expectations(baselines, key, a)
    ctx.environment["expectations"] = expect.as_environment()
    nvlink = bool(expect.get("nvlinks_per_gpu"))
    stopped = _exit(ctx, out, rc, err)
    rel = float(baselines.section("nvbandwidth").get("relative_tolerance", 0.15))
    for tc in wanted:
        j = nvbw.Judging(*_floor(baselines, key, tc, a), rel, nvlink)
        missing = nvbw.not_run(tc, out, j, expected)
        if missing is not None and stopped and missing.status == "error" and tc.key not in out.errors:
            ctx.check(tc.check, "skip", code="NVBW_NOT_RUN", message=f"{tc.key} not run: {stopped}")
        elif missing is not None:
            ctx.record(missing)
        else:
            for c in nvbw.to_checks(tc, out.matrices[tc.key], j, expected):
                ctx.record(c)
            _metrics(ctx, tc, out.matrices[tc.key])


def _exit(ctx: Context, out: nvbw.Output, rc: int | None, err: str) -> str | None:
    """nvbandwidth's exit code as its source defines it; returns why the run stopped early (None: it
    ran to the end). A verified copy is positive evidence: `nvbw_data_verification` passes only then."""
    if rc == 0:
        ctx.check("nvbw_data_verification", "pass", message="every copy verified by nvbandwidth (no mismatch)")
        return None
    where = f" during {out.running}" if out.running else ""
    if out.mismatch:
        ctx.check("nvbw_data_verification", "fail", code="NVBW_DATA_MISMATCH",
                  message=f"copied data did not match its pattern{where}: {one_line(out.mismatch, 200)}")
        return f"nvbandwidth stopped on a data mismatch{where}"
    if out.hw_error:
        ctx.check("nvbw_data_verification", "fail", code="GPU_HW_ERROR",
                  message=f"nvbandwidth stopped on a hardware-class CUDA error{where}: {one_line(out.hw_error, 200)}")
        return f"nvbandwidth stopped on a CUDA hardware error{where}"
    if rc is None:
        return f"nvbandwidth hung{where}"
    last = next((ln for ln in reversed(err.splitlines()) if ln.strip()), "") or "no message"
    ctx.check("nvbw_data_verification", "error", value=rc, code="NVBW_FAILED",
              message=f"nvbandwidth exited {rc}{where}: {one_line(last, 200)}")
    return f"nvbandwidth exited {rc}{where}"


def _floor(baselines: Baselines, key: str | None, tc: nvbw.Testcase, a) -> tuple[float | None, str]:
    override = a.min_d2d_gbps if tc.kind == "d2d" else a.min_host_gbps
    if override is not None:
        return override, f"--min-{'d2d' if tc.kind == 'd2d' else 'host'}-gbps"
    e = baselines.expectation(key, tc.floor_metric)
    if e is None:
        return None, f"no {tc.floor_metric} in baselines.yaml for {key or 'this (unknown) model'}"
    return e.floor, e.basis()


def _metrics(ctx: Context, tc: nvbw.Testcase, m: nvbw.Matrix) -> None:
    values, _ = nvbw.pairs(tc, m)
    if values:
        short = tc.check.removeprefix("nvbw_")
        ctx.metric(f"nvbw_{short}_min_gbps", min(values.values()), summary=tc.kind == "d2d" or short == "h2d_ce")
        ctx.metric(f"nvbw_{short}_median_gbps", statistics.median(values.values()))
        ctx.log(f"{tc.key}: {len(values)} value(s), min {fmt(min(values.values()))} GB/s")


DESCRIPTION = __doc__.split("\n\n")[0]


def main(argv: list[str] | None = None) -> int:
    """Run in-process (tests, embedding); returns the exit code. `python -m` owns the process instead."""
    return run_suite(SUITE, DESCRIPTION, add_arguments, run, argv, default_timeout)


if __name__ == "__main__":
    main_entry(SUITE, DESCRIPTION, add_arguments, run, default_timeout)
