"""GEMM throughput (bf16 TFLOPS; fp32 in CPU mode), all GPUs loaded at once: each device's first
result judged against a float64 reference, every later result bit for bit against the first, the
first results bit for bit across devices, the rate against the model's floor and the node's best."""

from __future__ import annotations

from ..baselines import Baselines
from ..harness.context import Context
from ..harness.text import fmt
from . import agreement, perf
from .bench import Verdicts, bench
from .compare import bit_differences, norm_err
from .devices import Dev, on_device
from .judged import record


def run(
    ctx: Context,
    torch,
    devs: list[Dev],
    n: int,
    seconds: float,
    baselines: Baselines,
    key,
    override,
    tolerance: float = 2e-2,
    metric: str | None = None,
    prefix: str = "",
    agreement_check: bool = True,
) -> None:
    """``metric``: the figure's name (default by dtype); ``prefix``: before the checks' names (the speed
    probe's ``probe_``), so a suite that runs both keeps them apart; ``agreement_check``: judge the first
    results bit for bit across devices (the probe leaves that to dl_unit: it measures speed)."""
    dt = torch.float32 if ctx.cpu else torch.bfloat16
    metric = metric or ("gemm_fp32_tflops" if ctx.cpu else "gemm_bf16_tflops")
    ctx.set_phase(
        f"GEMM {n}x{n}x{n} {str(dt).split('.')[-1]}, {fmt(seconds)} s, {len(devs)} device(s)"
        + (" concurrently" if not ctx.cpu else "")
    )
    verdicts = Verdicts(devs)  # its clock starts before the first results, as the run does
    state, firsts, pre_bad = _first_results(torch, devs, n, dt, float(tolerance))

    def step(d, s):
        torch.matmul(s[0], s[1], out=s[2])

    def verify(d, s) -> tuple[int, str]:
        # bit for bit: the same GEMM on the same inputs is deterministic (cuBLAS with one stream and
        # CUBLAS_WORKSPACE_CONFIG), so any flipped bit, even the lowest of a mantissa, is corruption
        return bit_differences(torch, s[2], s[3])

    rates = bench(ctx, torch, devs, step, state, seconds, 2.0 * n**3 / 1e12, verify, verdicts)
    del state
    for name, why in pre_bad.items():
        verdicts.reference_wrong(name, why)
    for c in perf.sustained_checks(prefix + "gemm_result", f"GEMM {n}x{n}x{n}", verdicts, devs):
        ctx.record(c)
    if agreement_check:
        agreement.judge_outputs(ctx, torch, prefix + "gemm_agreement", f"GEMM {n}x{n}x{n}", firsts, devs)
    exp = baselines.expectation(key, metric) if key else None
    record(ctx, perf.to_checks(metric, "TFLOPS", perf.summarise(rates, cpu=ctx.cpu), exp, override,
                               baselines.relative_tol(key), devs, ctx.expected_gpus or len(devs)))


def _first_results(torch, devs: list[Dev], n: int, dt, tol: float) -> tuple[dict, dict, dict[str, str]]:
    """(benchmark state per device [a, b, out, first result], first results, devices whose first
    result is off the float64 reference of a few rows computed from the same rounded inputs)."""
    g = torch.Generator().manual_seed(7)
    a0 = torch.randn(n, n, generator=g).to(dt)
    b0 = torch.randn(n, n, generator=g).to(dt)
    rows = sorted({0, n // 3, (2 * n) // 3, n - 1})
    ref_rows = a0[rows].double() @ b0.double()
    state = {d.name: [a0.to(d.tdev), b0.to(d.tdev), torch.empty(n, n, dtype=dt, device=d.tdev), None] for d in devs}
    pre_bad: dict[str, str] = {}
    firsts: dict = {}  # each device's first result: compared bit for bit across devices
    for d in devs:
        with on_device(d.name):
            torch.matmul(state[d.name][0], state[d.name][1], out=state[d.name][2])
            first = state[d.name][2].clone()
        err = norm_err(torch, first[rows].double().cpu(), ref_rows)
        if not err <= tol:  # NaN too
            pre_bad[d.name] = f"first result off the float64 reference by {fmt(err)} (> {fmt(tol)})"
        state[d.name][3] = first
        firsts[d.name] = first
    return state, firsts, pre_bad
