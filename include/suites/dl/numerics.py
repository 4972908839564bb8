"""Numerics: DL ops (matmul, conv2d, layer_norm, softmax, attention, GELU, cross-entropy), forward and
backward, per dtype, on every device against float64 computed from the same rounded inputs, with a
tolerance per dtype (baselines.yaml dl_unit.numerics_tolerance). Each case runs twice: the digests
of both runs feed the agreement checks (agreement.py)."""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable

from ..harness.checks import Check, at_most
from ..harness.context import Context
from ..harness.text import one_line
from . import agreement
from .compare import digest, norm_err
from .devices import Dev, classify, on_device


@dataclass
class OpCase:
    op: str
    dtype: str  # fp32, tf32, bf16, fp16
    make: Callable  # (torch, gen, sizes) -> list of fp32 CPU input tensors (+ int targets)
    fn: Callable  # (torch, *inputs) -> output tensor
    grad_inputs: tuple  # indices of inputs that get gradients
    cuda_only: bool = False
    atomic_bwd: bool = False  # CUDA backward may accumulate with atomics: gradients not compared bitwise

    @property
    def key(self) -> str:
        return f"{self.op}_{self.dtype}"


def sizes(cpu: bool, n: int) -> dict:
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


# --------------------------------------------------------------------------------------------------
# Observation and judging (pure)
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Raised:
    """An exception one case raised on one device."""

    type_name: str
    text: str
    not_implemented: bool  # NotImplementedError, or an op the backend does not implement


@dataclass(frozen=True)
class CaseResult:
    """One op/dtype case on one device: its forward and backward errors, or what it raised."""

    op: str
    dtype: str
    device: str
    where: str  # " (PCI bus id)" of the device, or ""
    fwd: float = math.nan
    bwd: float = math.nan
    raised: Raised | None = None

    @property
    def key(self) -> str:
        return f"{self.op}_{self.dtype}"


def to_checks(r: CaseResult, tolerances: dict, *, cpu: bool, numerics: bool) -> list[Check]:
    """The `<op>_<dtype>_fwd` / `_bwd` checks of one case: within the dtype's tolerance (backward:
    times backward_factor). A case that raised is judged even when only the agreement was asked
    (`numerics` False): a hardware error must not vanish; an op the CPU lacks is a skip."""
    if r.raised is not None:
        if cpu and r.raised.not_implemented:
            return [Check(f"{r.key}_fwd", "skip", device=r.device,
                          message=f"not supported on CPU: {one_line(r.raised.text, 100)}")] if numerics else []
        return [Check(f"{r.key}_fwd", classify(r.raised.text), device=r.device,
                      message=f"{r.op} {r.dtype} raised {r.raised.type_name}: {one_line(r.raised.text, 200)}{r.where}")]
    if not numerics:
        return []
    tol = float(tolerances.get(r.dtype, 1e-2))
    limits = (("fwd", r.fwd, tol), ("bwd", r.bwd, tol * float(tolerances.get("backward_factor", 2.5))))
    return [at_most(f"{r.key}_{direction}", err, limit, unit="rel_err", device=r.device,
                    basis=f"max|out-ref|/max|ref| vs float64{r.where if err > limit else ''}")
            for direction, err, limit in limits]


def breaks_device(r: CaseResult, *, cpu: bool) -> bool:
    """A case that raised a hardware-class error: the device is not tested further."""
    return (r.raised is not None and not (cpu and r.raised.not_implemented)
            and classify(r.raised.text) == "fail")


def worst_errors(results: list[CaseResult]) -> dict[str, float]:
    """The largest relative error (forward or backward) per dtype over the cases that ran."""
    worst: dict[str, float] = {}
    for r in results:
        if r.raised is None:
            worst[r.dtype] = max(worst.get(r.dtype, 0.0), r.fwd, r.bwd)
    return worst


# --------------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------------
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


def run_case(torch, case: OpCase, ref: Reference, dev: Dev) -> tuple[float, float, list[str | None], list]:
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
    fwd = norm_err(torch, out, ref_out)
    bwd = max(norm_err(torch, g, r) for g, r in zip(grads, ref_grads, strict=True))
    tensors = [out] + grads
    skip_grads = case.atomic_bwd and dev.tdev.type == "cuda"
    digests = [digest(torch, t) if i == 0 or not skip_grads else None for i, t in enumerate(tensors)]
    return fwd, bwd, digests, [t.detach().to("cpu") for t in tensors]


def run(ctx: Context, torch, devs: list[Dev], tolerances: dict, size: int, do_numerics: bool,
        do_agreement: bool) -> None:
    """Every case on every device that is not broken, judged as it completes; then the agreement."""
    cuda = not ctx.cpu
    cases = [c for c in op_cases() if cuda or not c.cuda_only]
    ctx.set_phase(f"numerics: {len(cases)} op/dtype cases vs float64 on {len(devs)} device(s)")
    ref = Reference(torch, cases, sizes(ctx.cpu, size), cuda)
    with deterministic(torch, cuda):
        outputs: list[agreement.DeviceOutputs] = []
        results: list[CaseResult] = []
        for dev in devs:
            if dev.broken:
                continue
            out = agreement.DeviceOutputs(dev.name, dev.info.get("name"), dev.where)
            outputs.append(out)
            with on_device(dev.name):
                results += _run_device(ctx, torch, dev, cases, ref, tolerances, do_numerics, out)
        for dt, v in worst_errors(results).items():
            ctx.metric(f"numerics_max_rel_err_{dt}", v, summary=False)
        if do_agreement:
            agreement.run(ctx, outputs)


def _run_device(ctx: Context, torch, dev: Dev, cases: list[OpCase], ref: Reference, tolerances: dict,
                do_numerics: bool, out: agreement.DeviceOutputs) -> list[CaseResult]:
    """The cases on one device, each twice (the digests go to `out`); stops at a hardware error."""
    results = []
    for case in cases:
        r = _run_twice(torch, case, ref, dev, out)
        results.append(r)
        for c in to_checks(r, tolerances, cpu=ctx.cpu, numerics=do_numerics):
            ctx.record(c)
        if breaks_device(r, cpu=ctx.cpu):
            dev.broken = r.raised.text
            break
    return results


def _run_twice(torch, case: OpCase, ref: Reference, dev: Dev, out: agreement.DeviceOutputs) -> CaseResult:
    """One case run twice on one device: the errors of the first run, the digests of both."""
    try:
        for rep, seen in enumerate((out.first, out.second)):
            fwd, bwd, digests, tensors = run_case(torch, case, ref, dev)
            for i, d in enumerate(digests):
                if d is not None:
                    seen[f"{case.key}.{'out' if i == 0 else 'grad' + str(i)}"] = d
            if rep == 0:
                out.tensors[case.key] = tensors
                first = (fwd, bwd)
    except (RuntimeError, NotImplementedError, TypeError) as exc:
        raised = Raised(type(exc).__name__, str(exc),
                        isinstance(exc, NotImplementedError) or "not implemented" in str(exc).lower())
        return CaseResult(case.op, case.dtype, dev.name, dev.where, raised=raised)
    return CaseResult(case.op, case.dtype, dev.name, dev.where, fwd=first[0], bwd=first[1])
