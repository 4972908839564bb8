"""Memory bandwidth (GB/s, read + write of a device-to-device copy), all GPUs at once, every copy
verified word for word, the rate against the model's floor and the node's best device."""

from __future__ import annotations

from ..baselines import Baselines
from ..harness.context import Context
from ..harness.text import fmt
from . import perf
from .bench import Verdicts, bench
from .devices import Dev
from .judged import record


def run(ctx: Context, torch, devs: list[Dev], mib: int, seconds: float, baselines: Baselines, key, override,
        metric: str = "mem_bw_gbps", prefix: str = "") -> None:
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
    rates = bench(ctx, torch, devs, step, state, seconds, 2.0 * elems * 4 / 1e9, verify, verdicts)  # read + write
    del state
    for c in perf.sustained_checks(prefix + "membw_result", f"copy of {mib} MiB", verdicts, devs):
        ctx.record(c)
    record(ctx, perf.to_checks(
        metric, "GB/s", perf.summarise(rates, cpu=ctx.cpu),
        baselines.expectation(key, metric) if key else None, override, baselines.relative_tol(key),
        devs, ctx.expected_gpus or len(devs)))
