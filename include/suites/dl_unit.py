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
"""

from __future__ import annotations

import hashlib
import math
import os
import statistics
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

from .baselines import Baselines, model_for_node
from .harness.checks import SuiteError
from .harness.context import Context
from .harness.inventory import gpu_inventory
from .harness.runner import main_entry, run_suite
from .harness.text import fmt, one_line

SUITE = "dl_unit"
GROUPS = ("numerics", "agreement", "gemm", "membw", "training", "memory")
# CUDA error texts that mean the hardware is at fault, not the software (-> fail, not error)
HW_ERRORS = (
    "uncorrectable ecc",
    "ecc error",
    "fallen off the bus",
    "gpu is lost",
    "nvlink",
    "xid",
    "unspecified launch failure",
    "illegal instruction",
    "hardware stack error",
)

_current: str | None = None


def current_device() -> str | None:
    """Name of the device the suite is computing on right now (for logs and fault-injection tests)."""
    return _current


@contextmanager
def on_device(name: str | None):
    global _current
    prev, _current = _current, name
    try:
        yield
    finally:
        _current = prev


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


@dataclass
class Dev:
    name: str  # cuda:3 / cpu:1
    tdev: Any  # torch.device
    info: dict = field(default_factory=dict)
    broken: str | None = None  # set after a hardware-class error: later tests skip the device

    @property
    def where(self) -> str:
        pci = self.info.get("pci_bus_id")
        return f" ({pci})" if pci else ""


def _classify(exc: BaseException) -> str:
    text = str(exc).lower()
    return "fail" if any(h in text for h in HW_ERRORS) else "error"


# --------------------------------------------------------------------------------------------------
# Numerics
# --------------------------------------------------------------------------------------------------
@dataclass
class OpCase:
    op: str
    dtype: str  # fp32, tf32, bf16, fp16
    make: Callable  # (torch, gen, sizes) -> list of fp32 CPU input tensors (+ int targets)
    fn: Callable  # (torch, *inputs) -> output tensor
    grad_inputs: tuple  # indices of inputs that get gradients
    cuda_only: bool = False
    atomic_bwd: bool = False  # CUDA backward may accumulate with atomics: gradients not compared bitwise


def _sizes(cpu: bool, n: int) -> dict:
    if cpu:
        return {
            "mm": n,
            "conv": (2, 8, 12, 12, 16),
            "rows": 32,
            "feat": 96,
            "attn": (2, 2, 32, 16),
            "cls": 10,
        }
    return {
        "mm": n,
        "conv": (8, 64, 32, 32, 64),
        "rows": 512,
        "feat": 1024,
        "attn": (4, 8, 512, 64),
        "cls": 1000,
    }


def op_cases() -> list[OpCase]:
    # Long: a table of the op/dtype cases, one small closure each; splitting it would scatter the table.
    def rnd(torch, gen, *shape, scale=1.0):
        return torch.randn(*shape, generator=gen, dtype=torch.float32) * scale

    def mm(torch, g, s):
        return [rnd(torch, g, s["mm"], s["mm"]), rnd(torch, g, s["mm"], s["mm"])]

    def conv(torch, g, s):
        n, c, h, w, o = s["conv"]
        return [
            rnd(torch, g, n, c, h, w),
            rnd(torch, g, o, c, 3, 3, scale=1 / math.sqrt(9 * c)),
            rnd(torch, g, o),
        ]

    def ln(torch, g, s):
        return [
            rnd(torch, g, s["rows"], s["feat"], scale=3.0) + 1.0,
            1 + 0.1 * rnd(torch, g, s["feat"]),
            0.1 * rnd(torch, g, s["feat"]),
        ]

    def rows(torch, g, s):
        return [rnd(torch, g, s["rows"], s["feat"], scale=2.0)]

    def attn(torch, g, s):
        b, h, seq, d = s["attn"]
        return [rnd(torch, g, b, h, seq, d), rnd(torch, g, b, h, seq, d), rnd(torch, g, b, h, seq, d)]

    def ce(torch, g, s):
        return [
            rnd(torch, g, s["rows"], s["cls"], scale=2.0),
            torch.randint(0, s["cls"], (s["rows"],), generator=g),
        ]

    F = lambda torch: torch.nn.functional  # noqa: E731
    cases = []
    for dt in ("fp32", "tf32", "bf16", "fp16"):
        cases.append(OpCase("matmul", dt, mm, lambda t, a, b: t.matmul(a, b), (0, 1), cuda_only=dt == "tf32"))
    for dt in ("fp32", "bf16", "fp16"):
        cases.append(
            OpCase(
                "conv2d",
                dt,
                conv,
                lambda t, x, w, b: F(t).conv2d(x, w, b, padding=1),
                (0, 1, 2),
                cuda_only=dt == "fp16",
            )
        )
    for dt in ("fp32", "bf16"):
        cases.append(
            OpCase(
                "layer_norm",
                dt,
                ln,
                lambda t, x, w, b: F(t).layer_norm(x, (x.shape[-1],), w, b, 1e-5),
                (0, 1, 2),
            )
        )
        cases.append(OpCase("softmax", dt, rows, lambda t, x: t.softmax(x, dim=-1), (0,)))
        cases.append(
            OpCase(
                "sdpa",
                dt,
                attn,
                lambda t, q, k, v: F(t).scaled_dot_product_attention(q, k, v, is_causal=True),
                (0, 1, 2),
                atomic_bwd=True,
            )
        )
        cases.append(OpCase("gelu", dt, rows, lambda t, x: F(t).gelu(x), (0,)))
    cases.append(OpCase("cross_entropy", "fp32", ce, lambda t, x, y: F(t).cross_entropy(x, y), (0,)))
    return cases


def _tdtype(torch, dt: str):
    return {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dt]


@contextmanager
def fp32_precision(torch, mode: str):
    """'ieee' (no TF32 anywhere) or 'tf32'. Uses the torch >= 2.9 API when present."""
    m, c = torch.backends.cuda.matmul, torch.backends.cudnn
    if hasattr(m, "fp32_precision") and hasattr(getattr(c, "conv", None), "fp32_precision"):
        old = (m.fp32_precision, c.conv.fp32_precision)
        m.fp32_precision, c.conv.fp32_precision = mode, mode
        try:
            yield
        finally:
            m.fp32_precision, c.conv.fp32_precision = old
    else:
        old = (m.allow_tf32, c.allow_tf32)
        m.allow_tf32 = c.allow_tf32 = mode == "tf32"
        try:
            yield
        finally:
            m.allow_tf32, c.allow_tf32 = old


def _digest(t) -> str:
    flat = t.detach().contiguous().reshape(-1)
    return hashlib.sha256(flat.view(torch_mod().uint8).cpu().numpy().tobytes()).hexdigest()[:24]


def torch_mod():
    import torch

    return torch


def _norm_err(torch, out, ref) -> float:
    out64 = out.detach().to("cpu", torch.float64)
    if not torch.isfinite(out64).all():
        return float("inf")
    scale = ref.abs().max().item()
    return (out64 - ref).abs().max().item() / max(scale, 1e-30)


class Reference:
    """Inputs and float64 results per case, shared by every device (identical inputs everywhere)."""

    def __init__(self, torch, cases: list[OpCase], sizes: dict, cuda: bool):
        self.data = {}
        gen = torch.Generator().manual_seed(1234)
        for case in cases:
            if case.cuda_only and not cuda:
                continue
            inputs = case.make(torch, gen, sizes)
            dt = _tdtype(torch, case.dtype)
            q = [x.to(dt) if x.is_floating_point() else x for x in inputs]  # what the device receives
            ref_in = [
                x.to(torch.float64).requires_grad_(i in case.grad_inputs) if x.is_floating_point() else x
                for i, x in enumerate(q)
            ]
            out = case.fn(torch, *ref_in)
            gout = torch.randn(out.shape, generator=gen, dtype=torch.float32).to(dt) if out.dim() else None
            out.backward(gout.to(torch.float64) if gout is not None else None)
            grads = [ref_in[i].grad.detach() for i in case.grad_inputs]
            self.data[(case.op, case.dtype)] = (q, gout, out.detach(), grads)


def run_case(torch, case: OpCase, ref: Reference, dev: Dev) -> tuple[float, float, list[str], list]:
    """(fwd error, bwd error, digests, CPU copies of outputs) of one case on one device."""
    q, gout, ref_out, ref_grads = ref.data[(case.op, case.dtype)]
    # copy=True: on the CPU .to() would hand back the shared reference tensor and grads would accumulate
    inputs = [
        x.to(dev.tdev, copy=True).requires_grad_(i in case.grad_inputs)
        if x.is_floating_point()
        else x.to(dev.tdev, copy=True)
        for i, x in enumerate(q)
    ]
    with fp32_precision(torch, "tf32" if case.dtype == "tf32" else "ieee"):
        out = case.fn(torch, *inputs)
        out.backward(gout.to(dev.tdev) if gout is not None else None)
    grads = [inputs[i].grad for i in case.grad_inputs]
    fwd = _norm_err(torch, out, ref_out)
    bwd = max(_norm_err(torch, g, r) for g, r in zip(grads, ref_grads, strict=True))
    tensors = [out] + grads
    skip_grads = case.atomic_bwd and dev.tdev.type == "cuda"
    digests = [_digest(t) if i == 0 or not skip_grads else None for i, t in enumerate(tensors)]
    return fwd, bwd, digests, [t.detach().to("cpu") for t in tensors]


def numerics(
    ctx: Context, torch, devs: list[Dev], tolerances: dict, size: int, do_numerics: bool, do_agreement: bool
) -> None:
    cuda = not ctx.cpu
    cases = [c for c in op_cases() if cuda or not c.cuda_only]
    ctx.set_phase(f"numerics: {len(cases)} op/dtype cases vs float64 on {len(devs)} device(s)")
    ref = Reference(torch, cases, _sizes(ctx.cpu, size), cuda)
    with deterministic(torch, cuda):
        _numerics_devices(ctx, torch, devs, tolerances, cases, ref, do_numerics, do_agreement)


@contextmanager
def deterministic(torch, on: bool):
    """Deterministic kernels where torch has them (cuBLAS needs CUBLAS_WORKSPACE_CONFIG, set before
    CUDA init). Only around the numerics: it makes torch.empty fill memory, which the benchmarks
    must not pay for."""
    if not on:
        yield
        return
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old)


def _numerics_devices(
    ctx: Context,
    torch,
    devs: list[Dev],
    tolerances: dict,
    cases: list[OpCase],
    ref: Reference,
    do_numerics: bool,
    do_agreement: bool,
) -> None:
    # Long: one loop over devices x cases with its error handling in place; the checks it records read top to bottom.
    bwd_factor = float(tolerances.get("backward_factor", 2.5))
    runs: dict[str, list[dict]] = {}  # device -> [pass A digests, pass B digests]
    outputs: dict[str, dict] = {}  # device -> {key: [cpu tensors]} of pass A
    worst: dict[str, float] = {}
    for dev in devs:
        if dev.broken:
            continue
        runs[dev.name] = [{}, {}]
        outputs[dev.name] = {}
        with on_device(dev.name):
            for case in cases:
                key = f"{case.op}_{case.dtype}"
                tol = float(tolerances.get(case.dtype, 1e-2))
                try:
                    for rep in (0, 1):
                        fwd, bwd, digests, tensors = run_case(torch, case, ref, dev)
                        for i, d in enumerate(digests):
                            if d is not None:
                                runs[dev.name][rep][f"{key}.{'out' if i == 0 else 'grad' + str(i)}"] = d
                        if rep == 0:
                            outputs[dev.name][key] = tensors
                            first = (fwd, bwd)
                except (RuntimeError, NotImplementedError, TypeError) as exc:
                    if ctx.cpu and (
                        "not implemented" in str(exc).lower() or isinstance(exc, NotImplementedError)
                    ):
                        if do_numerics:
                            ctx.check(
                                f"{key}_fwd",
                                "skip",
                                device=dev.name,
                                message=f"not supported on CPU: {one_line(exc, 100)}",
                            )
                        continue
                    status = _classify(exc)
                    ctx.check(
                        f"{key}_fwd",
                        status,
                        device=dev.name,
                        message=f"{case.op} {case.dtype} raised "
                        f"{type(exc).__name__}: {one_line(exc, 200)}{dev.where}",
                    )
                    if status == "fail":
                        dev.broken = str(exc)
                        break
                    continue
                fwd, bwd = first
                worst[case.dtype] = max(worst.get(case.dtype, 0.0), fwd, bwd)
                if do_numerics:
                    for direction, err, limit in (("fwd", fwd, tol), ("bwd", bwd, tol * bwd_factor)):
                        ctx.at_most(
                            f"{key}_{direction}",
                            err,
                            limit,
                            unit="rel_err",
                            device=dev.name,
                            basis=f"max|out-ref|/max|ref| vs float64{dev.where if err > limit else ''}",
                        )
    for dt, v in worst.items():
        ctx.metric(f"numerics_max_rel_err_{dt}", v, summary=False)
    if do_agreement:
        agreement(ctx, torch, devs, runs, outputs)


def agreement(ctx: Context, torch, devs: list[Dev], runs: dict, outputs: dict) -> None:
    """Each device against itself (two identical runs), then the devices against each other."""
    names, nondet = _determinism(ctx, runs)
    _cross_device(ctx, torch, devs, runs, outputs, names, nondet)


def _determinism(ctx: Context, runs: dict) -> tuple[list[str], dict[str, set]]:
    names = list(runs)  # the devices that ran the numerics, in device order
    # 1. run twice on the same device: an output that changes is non-deterministic there
    nondet: dict[str, set] = {n: {k for k, v in runs[n][0].items() if runs[n][1].get(k) != v} for n in names}
    all_keys = set().union(*(set(runs[n][0]) for n in names)) if names else set()
    everywhere = {k for k in all_keys if names and all(k in nondet[n] for n in names)}
    if everywhere:
        # every device varies run to run: the library picked a non-deterministic kernel, not a fault
        ctx.check(
            "deterministic_kernels",
            "warn",
            value=len(everywhere),
            message="non-deterministic on every device, excluded from comparisons: "
            + ", ".join(sorted(everywhere)[:6]),
        )
    for n in names:
        own = nondet[n] - everywhere
        ctx.check(
            "determinism",
            "fail" if own else "pass",
            value=len(own),
            unit="outputs",
            threshold="== 0",
            device=n,
            message=(
                f"results changed between two identical runs: {', '.join(sorted(own)[:5])}"
                if own
                else f"{len(runs[n][0]) - len(nondet[n])} outputs identical in two runs"
            ),
        )
    ctx.metric("determinism_failures", sum(bool(nondet[n] - everywhere) for n in names))
    return names, nondet


def _cross_device(ctx: Context, torch, devs: list[Dev], runs: dict, outputs: dict, names: list[str],
                  nondet: dict[str, set]) -> None:
    # Long: the majority vote and its two verdict shapes (pass / named suspect) belong together.
    all_keys = set().union(*(set(runs[n][0]) for n in names)) if names else set()
    # 2. across devices, on the outputs that are deterministic everywhere
    models = {d.info.get("name") for d in devs if d.name in runs}
    if len(names) < 2:
        ctx.check("cross_device_agreement", "skip", message="single device: nothing to compare")
        return
    if len(models) > 1:
        ctx.check(
            "cross_device_agreement",
            "skip",
            message=f"mixed models {sorted(map(str, models))}: "
            "different kernels, bitwise comparison meaningless",
        )
        return
    # outputs missing on a device (its case raised, already reported) are not compared
    keys = sorted(
        k for k in all_keys if all(k in runs[n][0] for n in names) and not any(k in nondet[n] for n in names)
    )
    suspects: dict[str, list[str]] = {}
    for k in keys:
        groups: dict[str, list[str]] = {}
        for n in names:
            groups.setdefault(runs[n][0][k], []).append(n)
        if len(groups) == 1:
            continue
        top = max(groups.values(), key=len)
        majority = top if len(top) * 2 > len(names) else None
        for members in groups.values():
            if members is majority:
                continue
            for n in members:
                suspects.setdefault(n, []).append(k)
    ctx.metric("sdc_suspects", len(suspects), summary=True)
    dev_by = {d.name: d for d in devs}
    for n in names:
        bad = suspects.get(n)
        if not bad:
            ctx.check(
                "cross_device_agreement",
                "pass",
                device=n,
                value=0,
                unit="outputs",
                threshold="== 0",
                message=f"bit-identical to the other {len(names) - 1} device(s) on {len(keys)} outputs",
            )
            continue
        diff = _max_diff(torch, outputs, n, names, suspects, bad[0])
        alone = len(suspects) < len(names) and len(names) >= 3
        ctx.check(
            "cross_device_agreement",
            "fail",
            device=n,
            value=len(bad),
            unit="outputs",
            threshold="== 0",
            message=f"silent-data-corruption suspect{dev_by[n].where}: differs from "
            f"{'the majority' if alone else 'the other device(s)'} on {len(bad)} output(s) "
            f"({', '.join(bad[:4])}{'...' if len(bad) > 4 else ''}"
            + (f"; max abs diff {fmt(diff)})" if diff == diff else ")"),
        )


def _max_diff(torch, outputs, n, names, suspects, key) -> float:
    case, _, part = key.partition(".")
    idx = 0 if part == "out" else int(part[4:])
    ref_dev = next((m for m in names if m not in suspects), next(m for m in names if m != n))
    try:
        a = outputs[n][case][idx].double()
        b = outputs[ref_dev][case][idx].double()
        return float((a - b).abs().max().item())
    except (KeyError, IndexError, RuntimeError):
        return float("nan")


# --------------------------------------------------------------------------------------------------
# Throughput
# --------------------------------------------------------------------------------------------------
def _sync(torch, devs):
    for d in devs:
        if d.tdev.type == "cuda":
            torch.cuda.synchronize(d.tdev)


class Verdicts:
    """What `verify` said after every chunk of a benchmark, per device: a benchmark that only times
    its kernels would pass a GPU that computes garbage once it is hot."""

    def __init__(self, devs: list[Dev]):
        self.chunks = {d.name: 0 for d in devs}
        self.bad = {d.name: 0 for d in devs}
        self.first_bad: dict[str, tuple[int, float, str]] = {}  # chunk, seconds into the run, detail
        self.t0 = time.monotonic()

    def record(self, d: Dev, result: tuple[int, str]) -> None:
        wrong, detail = result
        self.chunks[d.name] += 1
        if wrong:
            self.bad[d.name] += wrong
            self.first_bad.setdefault(d.name, (self.chunks[d.name], time.monotonic() - self.t0, detail))


def _step_on(d: Dev, step, st) -> None:
    with on_device(d.name):
        step(d, st)


def bench_concurrent(
    torch,
    devs: list[Dev],
    step: Callable[[Dev, Any], None],
    state: dict,
    seconds: float,
    work_per_step: float,
    verify: Callable[[Dev, Any], tuple[int, str]] | None = None,
    verdicts: Verdicts | None = None,
) -> dict[str, list[float]]:
    """Run `step` on every GPU at once (kernel launches are asynchronous) in timed chunks; returns the
    rate (work units / s) of each chunk per device, timed with CUDA events. After every chunk
    `verify(dev, state)` checks the data the last step produced (outside the timed window)."""
    for _ in range(3):  # warm-up: cuBLAS heuristics, clocks
        for d in devs:
            step(d, state[d.name])
    _sync(torch, devs)
    t = time.perf_counter()
    for d in devs:
        step(d, state[d.name])
    _sync(torch, devs)
    per_step = max(time.perf_counter() - t, 1e-6)
    k = max(1, int(0.25 / per_step))  # ~0.25 s chunks
    rates: dict[str, list[float]] = {d.name: [] for d in devs}
    end = time.monotonic() + seconds
    while time.monotonic() < end or not rates[devs[0].name]:
        ev = {}
        for d in devs:
            s = torch.cuda.current_stream(d.tdev)
            ev[d.name] = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            ev[d.name][0].record(s)
        for _ in range(k):
            for d in devs:
                _step_on(d, step, state[d.name])
        for d in devs:
            ev[d.name][1].record(torch.cuda.current_stream(d.tdev))
        _sync(torch, devs)
        for d in devs:
            ms = ev[d.name][0].elapsed_time(ev[d.name][1])
            rates[d.name].append(work_per_step * k / (ms / 1e3))
            if verify is not None and verdicts is not None:
                with on_device(d.name):
                    verdicts.record(d, verify(d, state[d.name]))
    return rates


def bench_sequential(
    devs: list[Dev],
    step,
    state: dict,
    seconds: float,
    work_per_step: float,
    verify: Callable[[Dev, Any], tuple[int, str]] | None = None,
    verdicts: Verdicts | None = None,
) -> dict[str, list[float]]:
    """CPU mode: virtual devices share the cores, so they take turns, round-robin, and the best round
    counts: a noisy neighbour on a shared CI machine slows every device alike instead of one."""
    for d in devs:
        _step_on(d, step, state[d.name])
    rates: dict[str, list[float]] = {d.name: [] for d in devs}
    end = time.monotonic() + seconds
    while time.monotonic() < end or len(rates[devs[0].name]) < 5:
        for d in devs:
            t = time.perf_counter()
            _step_on(d, step, state[d.name])
            rates[d.name].append(work_per_step / max(time.perf_counter() - t, 1e-9))
            if verify is not None and verdicts is not None:
                with on_device(d.name):
                    verdicts.record(d, verify(d, state[d.name]))
    return rates


def judge_verdicts(ctx: Context, name: str, what: str, verdicts: Verdicts, devs: list[Dev]) -> None:
    """One check per device: did the benchmark's data stay right for the whole sustained run?"""
    for d in devs:
        chunks, bad = verdicts.chunks[d.name], verdicts.bad[d.name]
        if bad:
            chunk, when, detail = verdicts.first_bad[d.name]
            ctx.check(
                name,
                "fail",
                value=bad,
                unit="elements",
                threshold="== 0",
                device=d.name,
                message=f"{what} produced {bad} wrong element(s) under sustained load, first in chunk "
                f"{chunk} of {chunks} ({fmt(when)} s into the run): {detail}{d.where}",
                code="BENCH_RESULT_CORRUPT",
            )
        elif not chunks:
            ctx.check(name, "error", device=d.name, message=f"{what}: no chunk was verified",
                      code="NO_MEASUREMENT")
        else:
            ctx.check(name, "pass", value=0, unit="elements", threshold="== 0", device=d.name,
                      message=f"{what} verified after each of {chunks} chunk(s)")


def bit_differences(torch, out, ref) -> tuple[int, str]:
    """(elements whose bits differ, where the first is): an exact comparison, NaN included."""
    if out.dtype == ref.dtype and torch.equal(out.reshape(-1).view(_int_view(torch, out)),
                                              ref.reshape(-1).view(_int_view(torch, ref))):
        return 0, ""
    a = out.reshape(-1).view(_int_view(torch, out))
    b = ref.reshape(-1).view(_int_view(torch, ref))
    bad = a != b
    n = int(bad.sum().item())
    idx = int(bad.nonzero()[0].item())
    return n, (f"element {idx} = {float(out.reshape(-1)[idx])!r} (bits {int(a[idx]) & 0xFFFFFFFF:#x}), first run "
               f"{float(ref.reshape(-1)[idx])!r} (bits {int(b[idx]) & 0xFFFFFFFF:#x})")


def _int_view(torch, t):
    return {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]


def judge_agreement(ctx: Context, name: str, what: str, results: dict, devs: list[Dev]) -> None:
    """The same computation on the same inputs on every device of one model: bit-identical outputs,
    else the odd ones out are silent-data-corruption suspects (the majority wins with >= 3 devices;
    with 2 that disagree both are named)."""
    torch = torch_mod()
    names = [d.name for d in devs if d.name in results]
    kinds = {(d.info.get("name"), d.info.get("sms")) for d in devs if d.name in results}
    if len(names) < 2 or len(kinds) > 1:
        for n in names:
            ctx.check(name, "skip", device=n, code="AGREEMENT_NOT_APPLICABLE",
                      message="single device: nothing to compare" if len(names) < 2
                      else f"mixed models {sorted(map(str, kinds))}: different kernels, no bitwise comparison")
        return
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(_digest(results[n]), []).append(n)
    top = max(groups.values(), key=len)
    majority = top if len(top) * 2 > len(names) else None
    ref_dev = (majority or names)[0]
    for n in names:
        if (majority is not None and n in majority) or len(groups) == 1:
            ctx.check(name, "pass", value=0, unit="elements", threshold="== 0", device=n,
                      message=f"{what}: bit-identical to the other {len(names) - 1} device(s)")
            continue
        other = ref_dev if ref_dev != n else next(m for m in names if m != n)
        diff, detail = bit_differences(torch, results[n].to("cpu"), results[other].to("cpu"))
        ctx.check(name, "fail", value=diff, unit="elements", threshold="== 0", device=n, code="SDC_SUSPECT",
                  message=f"silent-data-corruption suspect: {what} differs from "
                  f"{'the majority' if majority else other} in {diff} element(s) with the same inputs; {detail}")


def judge_perf(
    ctx: Context,
    metric: str,
    unit: str,
    per_dev: dict[str, float],
    expectation,
    override: float | None,
    rel_tol: float,
    devs: list[Dev],
    n_total: int,
) -> None:
    if not per_dev:
        return
    vals = list(per_dev.values())
    ctx.metric(f"{metric}_min", min(vals), summary=True)
    ctx.metric(f"{metric}_max", max(vals))
    ctx.metric(f"{metric}_mean", statistics.fmean(vals))
    where = {d.name: d.where for d in devs}
    if override is not None:
        floor, basis = override, "override"
    elif expectation is not None:
        floor, basis = expectation.floor, expectation.basis()
    else:
        floor, basis = None, "unknown model: relative check only"
    best = max(vals)
    for name, v in per_dev.items():
        ctx.metric(f"{metric}.{name.replace(':', '')}", v)
        ctx.at_least(
            metric,
            v,
            floor,
            unit=unit,
            device=name,
            basis=basis + (where[name] if floor is not None and v < floor else ""),
        )
        if len(per_dev) > 1:
            rf = best * (1 - rel_tol)
            ctx.at_least(
                f"{metric}_vs_node_best",
                v,
                rf,
                unit=unit,
                device=name,
                basis=f"best device of this node {fmt(best)} -{rel_tol:.0%}"
                + (where[name] if v < rf else ""),
            )
    # the node total against the EXPECTED GPU count: a node with a GPU missing cannot reach it
    if expectation is not None and override is None and n_total > 1:
        total = sum(vals)
        node_exp = expectation.scaled(n_total)  # per_gpu scaling: the node total is n x per-GPU
        node_floor = expectation.floor * n_total
        ctx.metric(f"{metric}_node_total", total, summary=False)
        ctx.at_least(
            f"{metric}_node_total",
            total,
            node_floor,
            unit=unit,
            basis=f"{n_total} expected GPUs x {fmt(expectation.floor)} ({node_exp.metric} scaled per GPU; "
            f"{len(per_dev)} measured)",
        )


def _summarise(ctx: Context, rates: dict[str, list[float]]) -> dict[str, float]:
    # GPU: the median chunk (sustained rate, robust to one slow chunk while clocks ramp);
    # CPU mode: the best round (shared cores make every other statistic noise)
    pick = max if ctx.cpu else statistics.median
    return {k: pick(v) for k, v in rates.items()}


def gemm(
    ctx: Context,
    torch,
    devs: list[Dev],
    n: int,
    seconds: float,
    baselines: Baselines,
    key,
    override,
    tolerance: float = 2e-2,
) -> None:
    # Long: the GEMM benchmark's setup, its float64 reference and its bit-exact verifier share local state.
    dt = torch.float32 if ctx.cpu else torch.bfloat16
    metric = "gemm_fp32_tflops" if ctx.cpu else "gemm_bf16_tflops"
    ctx.set_phase(
        f"GEMM {n}x{n}x{n} {str(dt).split('.')[-1]}, {fmt(seconds)} s, {len(devs)} device(s)"
        + (" concurrently" if not ctx.cpu else "")
    )
    state = {}
    g = torch.Generator().manual_seed(7)
    a0 = torch.randn(n, n, generator=g).to(dt)
    b0 = torch.randn(n, n, generator=g).to(dt)
    # float64 reference of a few rows, from the same rounded inputs: the first result of each device
    # must match it within the dtype's tolerance, every later result must equal the first
    rows = sorted({0, n // 3, (2 * n) // 3, n - 1})
    ref_rows = a0[rows].double() @ b0.double()
    tol = float(tolerance)
    for d in devs:
        state[d.name] = [a0.to(d.tdev), b0.to(d.tdev), torch.empty(n, n, dtype=dt, device=d.tdev), None]
    verdicts = Verdicts(devs)
    pre_bad: dict[str, str] = {}
    firsts: dict = {}  # each device's first result: compared bit for bit across devices
    for d in devs:  # the reference of each device: its first result, judged against float64
        with on_device(d.name):
            torch.matmul(state[d.name][0], state[d.name][1], out=state[d.name][2])
            first = state[d.name][2].clone()
        err = _norm_err(torch, first[rows].double().cpu(), ref_rows)
        if not err <= tol:  # NaN too
            pre_bad[d.name] = f"first result off the float64 reference by {fmt(err)} (> {fmt(tol)})"
        state[d.name][3] = first
        firsts[d.name] = first

    def step(d, s):
        torch.matmul(s[0], s[1], out=s[2])

    def verify(d, s) -> tuple[int, str]:
        # bit for bit: the same GEMM on the same inputs is deterministic (cuBLAS with one stream and
        # CUBLAS_WORKSPACE_CONFIG), so any flipped bit, even the lowest of a mantissa, is corruption
        return bit_differences(torch, s[2], s[3])

    flop = 2.0 * n**3 / 1e12
    rates = (
        bench_sequential(devs, step, state, seconds, flop, verify, verdicts)
        if ctx.cpu
        else bench_concurrent(torch, devs, step, state, seconds, flop, verify, verdicts)
    )
    del state
    for name, why in pre_bad.items():
        verdicts.bad[name] += 1
        verdicts.first_bad.setdefault(name, (0, 0.0, why))
    judge_verdicts(ctx, "gemm_result", f"GEMM {n}x{n}x{n}", verdicts, devs)
    judge_agreement(ctx, "gemm_agreement", f"GEMM {n}x{n}x{n}", firsts, devs)
    per_dev = _summarise(ctx, rates)
    exp = baselines.expectation(key, metric) if key else None
    judge_perf(ctx, metric, "TFLOPS", per_dev, exp, override, baselines.relative_tol(key), devs,
               ctx.expected_gpus or len(devs))


def membw(
    ctx: Context, torch, devs: list[Dev], mib: int, seconds: float, baselines: Baselines, key, override
) -> None:
    ctx.set_phase(f"memory bandwidth: copy of {mib} MiB, {fmt(seconds)} s, {len(devs)} device(s)")
    elems = mib * (1 << 20) // 4
    # a position-dependent pattern (not all ones), so a stuck bit or a misplaced block shows up
    state = {
        d.name: (
            torch.arange(elems, dtype=torch.int32, device=d.tdev).mul_(2654435761 & 0x7FFFFFFF),
            torch.empty(elems, dtype=torch.int32, device=d.tdev),
        )
        for d in devs
    }

    def step(d, s):
        s[1].copy_(s[0])

    def verify(d, s) -> tuple[int, str]:
        if torch.equal(s[1], s[0]):
            return 0, ""
        bad = s[1] != s[0]
        first = int(bad.nonzero()[0].item())
        return int(bad.sum().item()), f"first wrong word at index {first}"

    verdicts = Verdicts(devs)
    gb = 2.0 * elems * 4 / 1e9  # read + write
    rates = (
        bench_sequential(devs, step, state, seconds, gb, verify, verdicts)
        if ctx.cpu
        else bench_concurrent(torch, devs, step, state, seconds, gb, verify, verdicts)
    )
    del state
    judge_verdicts(ctx, "membw_result", f"copy of {mib} MiB", verdicts, devs)
    per_dev = _summarise(ctx, rates)
    judge_perf(
        ctx,
        "mem_bw_gbps",
        "GB/s",
        per_dev,
        baselines.expectation(key, "mem_bw_gbps") if key else None,
        override,
        baselines.relative_tol(key),
        devs,
        ctx.expected_gpus or len(devs),
    )


# --------------------------------------------------------------------------------------------------
# Training smoke test and memory pattern test
# --------------------------------------------------------------------------------------------------
def training(ctx: Context, torch, dev: Dev, steps: int, ratio: float) -> None:
    """A small CNN learns 10 noisy templates: conv/linear forward+backward and the optimizer, end to end."""
    nn = torch.nn
    g = torch.Generator().manual_seed(99)
    side = 16
    templates = torch.randn(10, 1, side, side, generator=g)
    torch.manual_seed(5)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.GELU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.GELU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(128, 10),
    ).to(dev.tdev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    amp = dev.tdev.type == "cuda"
    losses = []
    for _ in range(steps):
        y = torch.randint(0, 10, (128,), generator=g)
        x = templates[y] + 0.8 * torch.randn(128, 1, side, side, generator=g)
        x, y = x.to(dev.tdev, non_blocking=True), y.to(dev.tdev, non_blocking=True)
        with torch.autocast(device_type=dev.tdev.type, dtype=torch.bfloat16, enabled=amp):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    vals = [float(v) for v in torch.stack(losses).cpu()]
    k = max(1, min(5, steps // 4))
    first, last = statistics.fmean(vals[:k]), statistics.fmean(vals[-k:])
    r = last / first if first > 0 else float("inf")
    ctx.metric(f"training_loss_ratio.{dev.name.replace(':', '')}", r)
    if not all(math.isfinite(v) for v in vals):
        ctx.check(
            "training_smoke",
            "fail",
            device=dev.name,
            value="nan",
            message=f"loss became non-finite during training{dev.where}",
        )
        return
    ctx.at_most(
        "training_smoke",
        r,
        ratio,
        unit="loss ratio",
        device=dev.name,
        basis=f"loss {fmt(first)} -> {fmt(last)} in {steps} steps{dev.where if r > ratio else ''}",
    )


def memory_test(ctx: Context, torch, dev: Dev, fraction: float, cpu_mib: int) -> None:
    # Long: allocate, write both polarities, verify, report: one pass over the same chunks.
    chunk_mib = 8 if dev.tdev.type == "cpu" else 256
    if dev.tdev.type == "cuda":
        free, total = torch.cuda.mem_get_info(dev.tdev)
        used_gib = (total - free) / 2**30
        ctx.metric(f"memory_in_use_gib.{dev.name.replace(':', '')}", used_gib)
        if used_gib > 2.0 + 0.05 * total / 2**30:
            ctx.check(
                "memory_in_use",
                "warn",
                value=round(used_gib, 2),
                unit="GiB",
                device=dev.name,
                message=f"{fmt(used_gib)} GiB of {fmt(total / 2**30)} GiB already in use before the test "
                f"(another process?){dev.where}",
            )
        target = int(free * fraction)
    else:
        target = cpu_mib << 20
    chunk_elems = (chunk_mib << 20) // 4
    base = torch.arange(chunk_elems, dtype=torch.int32, device=dev.tdev)
    chunks, oom = [], None
    try:
        while (len(chunks) + 2) * (chunk_mib << 20) <= target:  # +1 for `base`, +1 for the verify temporary
            chunks.append(torch.empty(chunk_elems, dtype=torch.int32, device=dev.tdev))
    except (RuntimeError, MemoryError) as exc:  # torch.cuda.OutOfMemoryError is a RuntimeError
        oom = one_line(exc, 120)
        del chunks[-2:]  # leave room for the verification temporaries
        if dev.tdev.type == "cuda":
            torch.cuda.empty_cache()
    bad = 0
    first_bad = None
    for polarity in (0, -1):  # pattern, then its bitwise complement: every bit is tested as 0 and 1
        for i, c in enumerate(chunks):
            seed = (0x5A5A5A5A ^ (i * 0x9E3779B1)) & 0x7FFFFFFF
            c.copy_(base).bitwise_xor_(seed)
            if polarity:
                c.bitwise_not_()
        _sync(torch, [dev])
        for i, c in enumerate(chunks):
            seed = (0x5A5A5A5A ^ (i * 0x9E3779B1)) & 0x7FFFFFFF
            want = base.bitwise_xor(seed)
            if polarity:
                want.bitwise_not_()
            n = int((c != want).sum().item())
            if n and first_bad is None:
                first_bad = (
                    f"chunk {i} ({i * chunk_mib} MiB offset), polarity {'inverted' if polarity else 'plain'}"
                )
            bad += n
            del want
    tested = len(chunks) * chunk_mib / 1024
    del chunks, base
    if dev.tdev.type == "cuda":
        torch.cuda.empty_cache()
    ctx.metric(f"memory_tested_gib.{dev.name.replace(':', '')}", tested)
    if bad:
        ctx.check(
            "memory_pattern",
            "fail",
            value=bad,
            unit="words",
            threshold="== 0",
            device=dev.name,
            message=f"{bad} 32-bit word(s) read back wrong in {fmt(tested)} GiB, "
            f"first in {first_bad}{dev.where}",
        )
    elif not tested:
        ctx.check(
            "memory_pattern",
            "error",
            value=0,
            unit="GiB",
            device=dev.name,
            message=f"could not allocate memory to test ({oom or 'target too small'})",
        )
    else:
        short = tested * 2**30 < 0.5 * target
        ctx.check(
            "memory_pattern",
            "warn" if short else "pass",
            value=round(tested, 3),
            unit="GiB tested",
            device=dev.name,
            message=f"{fmt(tested)} GiB written twice (pattern, complement) and verified"
            + (f"; allocation stopped early: {oom}" if short and oom else ""),
        )


# --------------------------------------------------------------------------------------------------
def setup_devices(ctx: Context) -> tuple[Any, list[Dev]]:
    # Long: the CPU and the CUDA device setups side by side, so their differences stay visible.
    a = ctx.args
    if not ctx.cpu:
        # cuda:N == nvidia-smi index N; deterministic cuBLAS (required for bitwise agreement)
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    ctx.environment.update(torch=torch.__version__, cuda=torch.version.cuda)
    if ctx.cpu:
        if a.cpu_devices < 1:
            raise SuiteError("--cpu-devices must be >= 1")
        if a.expected_gpus:
            inv, _, src = gpu_inventory()
            ctx.check_gpu_count(len(inv), source=src)
        else:
            ctx.check_gpu_count(0, source="CPU mode")
        devs = [Dev(f"cpu:{i}", torch.device("cpu"), {"name": "cpu"}) for i in range(a.cpu_devices)]
        ctx.environment.update(gpu_model=a.gpu_model, gpu_count=0, baseline="cpu", cpu_devices=a.cpu_devices)
        # one thread: CPU mode proves the code paths; OpenMP threads spinning against a busy CI machine
        # make timings 100x worse instead of 2x better
        torch.set_num_threads(1)
        return torch, devs
    why = ""
    try:
        torch.cuda.init()
    except Exception as exc:  # e.g. "system not yet initialized" (fabric manager), driver mismatch
        why = f"; CUDA init failed: {one_line(exc, 150)}"
    n = torch.cuda.device_count() if not why else 0
    inv, driver, inv_source = gpu_inventory()
    ctx.environment.update(driver=driver, gpu_count=n)
    if not ctx.check_gpu_count(n, source="CUDA" + why):
        return torch, []
    if len(inv) > n and not os.environ.get("CUDA_VISIBLE_DEVICES"):
        # the driver sees a GPU that CUDA cannot open (lost, fabric not ready, ...)
        ctx.check(
            "cuda_devices",
            "fail",
            value=n,
            unit="GPUs",
            threshold=f"== {len(inv)}",
            message=f"{inv_source} sees {len(inv)} GPUs but CUDA can use only {n}",
        )
    devs = []
    for i in range(n):
        p = torch.cuda.get_device_properties(i)
        pci = None
        if getattr(p, "pci_bus_id", None) is not None:
            dom, dev_no = getattr(p, "pci_domain_id", 0), getattr(p, "pci_device_id", 0)
            pci = f"{dom:08X}:{p.pci_bus_id:02X}:{dev_no:02X}.0"  # nvidia-smi's format
        info = {
            "index": i,
            "name": p.name,
            "memory_gib": round(p.total_memory / 2**30, 1),
            "sms": p.multi_processor_count,
            "uuid": str(getattr(p, "uuid", "")) or None,
            "pci_bus_id": pci,
        }
        devs.append(Dev(f"cuda:{i}", torch.device("cuda", i), info))
    ctx.environment["gpus"] = [d.info for d in devs]
    try:
        v = torch.cuda.nccl.version()
        ctx.environment["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        pass
    return torch, devs


def run(ctx: Context) -> None:
    a = ctx.args
    only = {x.strip() for x in a.only.split(",") if x.strip()}
    if only - set(GROUPS) or not only:
        raise SuiteError(f"--only: choose from {', '.join(GROUPS)}")
    baselines = Baselines.load(a.baselines)
    settings = baselines.section("dl_unit")
    warnings.filterwarnings("ignore", message=".*deterministic.*")
    torch, devs = setup_devices(ctx)
    if not devs:
        return
    key, name = model_for_node(ctx, baselines, [d.info.get("name") for d in devs] if not ctx.cpu else [])
    if not ctx.cpu:
        ctx.environment.update(gpu_model=name, baseline=key)
    if "numerics" in only or "agreement" in only:
        tolerances = dict(settings.get("numerics_tolerance") or {})
        tolerances["backward_factor"] = settings.get("backward_factor", 2.5)
        numerics(ctx, torch, devs, tolerances, a.numerics_size or (96 if ctx.cpu else 1024),
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
        ("gemm", lambda: gemm(ctx, torch, live, a.gemm_size or (256 if cpu else 8192),
                              a.gemm_seconds if a.gemm_seconds is not None else (0.3 if cpu else 20),
                              baselines, key, a.min_gemm_tflops, tol)),
        ("membw", lambda: membw(ctx, torch, live, a.membw_mib or (32 if cpu else 2048),
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
                ctx.check(group, _classify(exc), message=f"{type(exc).__name__}: {one_line(exc, 200)}")
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
        ("training", "training_smoke", lambda d: training(ctx, torch, d, steps, ratio)),
        ("memory", "memory_pattern", lambda d: memory_test(ctx, torch, d, fraction, a.cpu_memory_mib)),
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
                    status = _classify(exc)
                    ctx.check(label, status, device=d.name, message=f"{type(exc).__name__}: {one_line(exc, 200)}{d.where}")
                    if status == "fail":
                        d.broken = str(exc)


DESCRIPTION = __doc__.split("\n\n")[0]


def main(argv: list[str] | None = None) -> int:
    """Run in-process (tests, embedding); returns the exit code. `python -m` owns the process instead."""
    return run_suite(SUITE, DESCRIPTION, add_arguments, run, argv, default_timeout)


if __name__ == "__main__":
    main_entry(SUITE, DESCRIPTION, add_arguments, run, default_timeout)
