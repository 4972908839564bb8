"""dl_unit: are the GPUs mathematically correct, consistent and as fast as they should be?

Per device (every GPU; in CPU mode --cpu-devices virtual devices on the CPU):
* numerics: matmul (fp32, tf32, bf16, fp16), conv2d, layer_norm, softmax, scaled-dot-product
  attention, GELU, cross-entropy, forward and backward, against a float64 reference computed from
  the same rounded inputs, with a tolerance per dtype (baselines.yaml dl_unit.numerics_tolerance);
* agreement: the same deterministic computation must give bit-identical results on every device;
  a device that disagrees is named as a silent-data-corruption suspect (majority vote with >= 3
  devices; with 2 that disagree both are named); and run twice, a device must agree with itself;
* GEMM throughput (bf16 TFLOPS; fp32 in CPU mode) and memory bandwidth (GB/s), all GPUs loaded at
  once, judged against the model baseline and against the best device of the node (10 %);
* training smoke test: a small CNN on synthetic data, the loss must fall;
* memory: most of the free device memory is allocated, written with a pattern and verified.

    python -m cluster_doctor_suites.dl_unit [--expected-gpus 8] [--gemm-seconds 20]
    python -m cluster_doctor_suites.dl_unit --device cpu --cpu-devices 2

Each group is a module of dl/ (running apart from judging, like checkers/); this module parses the
arguments and wires the groups.
"""

from __future__ import annotations

import warnings

from .baselines import Baselines, model_for_node
from .dl import devices, gemm, membw, memory, numerics, training
from .dl.devices import Dev, on_device
from .harness.checks import SuiteError
from .harness.context import Context
from .harness.runner import main_entry, run_suite
from .harness.text import one_line

SUITE = "dl_unit"
GROUPS = ("numerics", "agreement", "gemm", "membw", "training", "memory")


def add_arguments(p) -> None:
    g = p.add_argument_group("dl_unit")
    g.add_argument("--cpu-devices", type=int, default=2, help="virtual devices in CPU mode")
    g.add_argument("--only", default=",".join(GROUPS), help="comma-separated subset of " + ",".join(GROUPS))
    g.add_argument(
        "--numerics-size",
        type=int,
        default=None,
        help="matmul dimension of the numerics checks; default 1024 (GPU), 96 (CPU)",
    )
    g.add_argument(
        "--gemm-size", type=int, default=None, help="GEMM benchmark dimension; default 8192 (GPU), 256 (CPU)"
    )
    g.add_argument(
        "--gemm-seconds",
        type=float,
        default=None,
        help="GEMM benchmark duration; default 20 (GPU), 0.3 (CPU)",
    )
    g.add_argument(
        "--membw-mib", type=int, default=None, help="copy buffer size; default 2048 (GPU), 32 (CPU)"
    )
    g.add_argument(
        "--membw-seconds",
        type=float,
        default=None,
        help="copy benchmark duration; default 5 (GPU), 0.3 (CPU)",
    )
    g.add_argument(
        "--train-steps", type=int, default=None, help="training smoke steps; default 200 (GPU), 40 (CPU)"
    )
    g.add_argument(
        "--memory-fraction",
        type=float,
        default=None,
        help="fraction of free device memory to pattern-test (default from baselines.yaml)",
    )
    g.add_argument(
        "--cpu-memory-mib", type=int, default=64, help="pattern-tested memory per virtual CPU device"
    )
    g.add_argument("--min-gemm-tflops", type=float, default=None, help="override the GEMM floor")
    g.add_argument("--min-membw-gbps", type=float, default=None, help="override the memory bandwidth floor")


def default_timeout(args) -> float:
    return 240 if args.device == "cpu" else 900


# the checks without which the suite proves nothing: an unknown model has no GEMM / HBM floors
KEY_CHECKS = ("baseline",)


def run(ctx: Context) -> None:
    ctx.key_checks = KEY_CHECKS
    a = ctx.args
    only = {x.strip() for x in a.only.split(",") if x.strip()}
    if only - set(GROUPS) or not only:
        raise SuiteError(f"--only: choose from {', '.join(GROUPS)}")
    baselines = Baselines.load(a.baselines)
    settings = baselines.section("dl_unit")
    warnings.filterwarnings("ignore", message=".*deterministic.*")
    torch, devs = devices.setup(ctx)
    if not devs:
        return
    key, name = model_for_node(ctx, baselines, [d.info.get("name") for d in devs] if not ctx.cpu else [])
    if not ctx.cpu:
        ctx.environment.update(gpu_model=name, baseline=key)
    if "numerics" in only or "agreement" in only:
        tolerances = dict(settings.get("numerics_tolerance") or {})
        tolerances["backward_factor"] = settings.get("backward_factor", 2.5)
        numerics.run(ctx, torch, devs, tolerances, a.numerics_size or (96 if ctx.cpu else 1024),
                     "numerics" in only, "agreement" in only)
    _benchmarks(ctx, torch, [d for d in devs if not d.broken], only, baselines, key, settings)
    _per_device_tests(ctx, torch, devs, only, settings)
    # node-level key figures for the summary (the per-device values stay in the full result)
    for prefix, mkey, agg in (
        ("training_loss_ratio.", "training_loss_ratio_max", max),
        ("memory_tested_gib.", "memory_tested_gib_min", min),
    ):
        vals = [v for k, v in ctx.metrics.items() if k.startswith(prefix) and isinstance(v, (int, float))]
        if vals:
            ctx.metric(mkey, agg(vals), summary=True)


def _benchmarks(ctx: Context, torch, live: list[Dev], only: set, baselines: Baselines, key, settings: dict) -> None:
    """GEMM and memory bandwidth on every live device at once; one broken benchmark never hides the other."""
    a, cpu = ctx.args, ctx.cpu
    tol = float((settings.get("numerics_tolerance") or {}).get("fp32" if cpu else "bf16", 2e-2))
    for group, fn in (
        ("gemm", lambda: gemm.run(ctx, torch, live, a.gemm_size or (256 if cpu else 8192),
                                  a.gemm_seconds if a.gemm_seconds is not None else (0.3 if cpu else 20),
                                  baselines, key, a.min_gemm_tflops, tol)),
        ("membw", lambda: membw.run(ctx, torch, live, a.membw_mib or (32 if cpu else 2048),
                                    a.membw_seconds if a.membw_seconds is not None else (0.3 if cpu else 5),
                                    baselines, key, a.min_membw_gbps)),
    ):
        if group not in only or not live:
            continue
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - one broken benchmark must not hide the others
            if "out of memory" in str(exc).lower():
                ctx.check(group, "error", message=f"out of memory: {one_line(exc, 200)}", code="OUT_OF_MEMORY")
            else:
                ctx.check(group, devices.classify(exc), message=f"{type(exc).__name__}: {one_line(exc, 200)}")
        if not cpu:
            torch.cuda.empty_cache()


def _per_device_tests(ctx: Context, torch, devs: list[Dev], only: set, settings: dict) -> None:
    """Training smoke test and memory pattern test, one device after the other; a device that failed
    with a hardware error is skipped (and said so)."""
    a = ctx.args
    steps = a.train_steps or (40 if ctx.cpu else 200)
    ratio = float(settings.get("training_loss_ratio", 0.5))
    fraction = a.memory_fraction or float(settings.get("memory_fraction", 0.9))
    for group, label, fn in (
        ("training", "training_smoke", lambda d: training.run(ctx, torch, d, steps, ratio)),
        ("memory", "memory_pattern", lambda d: memory.run(ctx, torch, d, fraction, a.cpu_memory_mib)),
    ):
        if group not in only:
            continue
        ctx.set_phase(f"{label} on {len(devs)} device(s)")
        for d in devs:
            if d.broken:
                ctx.check(label, "skip", device=d.name, code="SKIPPED_AFTER_HW_ERROR",
                          message=f"skipped after a hardware error: {one_line(d.broken, 100)}")
                continue
            with on_device(d.name):
                try:
                    fn(d)
                except Exception as exc:  # noqa: BLE001
                    status = devices.classify(exc)
                    ctx.check(label, status, device=d.name, message=f"{type(exc).__name__}: {one_line(exc, 200)}{d.where}")
                    if status == "fail":
                        d.broken = str(exc)


DESCRIPTION = __doc__.split("\n\n")[0]


def main(argv: list[str] | None = None) -> int:
    """Run in-process (tests, embedding); returns the exit code. `python -m` owns the process instead."""
    return run_suite(SUITE, DESCRIPTION, add_arguments, run, argv, default_timeout)


if __name__ == "__main__":
    main_entry(SUITE, DESCRIPTION, add_arguments, run, default_timeout)
