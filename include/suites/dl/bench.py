"""The benchmark loop of gemm and membw: a step run on every device in timed chunks (all GPUs at once;
in CPU mode the virtual devices take turns), the rate of each chunk, and after every chunk a check of
the data the step produced (Verdicts), so a device that computes garbage once it is hot is caught."""

from __future__ import annotations

import time
from typing import Any, Callable

from .devices import Dev, on_device, sync

Verify = Callable[[Dev, Any], tuple[int, str]]  # (wrong elements, where the first is)


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

    def reference_wrong(self, device: str, why: str) -> None:
        """The device's first result, the reference of its later chunks, was itself wrong."""
        self.bad[device] += 1
        self.first_bad.setdefault(device, (0, 0.0, why))


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
    verify: Verify | None = None,
    verdicts: Verdicts | None = None,
) -> dict[str, list[float]]:
    """Run `step` on every GPU at once (kernel launches are asynchronous) in timed chunks; returns the
    rate (work units / s) of each chunk per device, timed with CUDA events. After every chunk
    `verify(dev, state)` checks the data the last step produced (outside the timed window)."""
    for _ in range(3):  # warm-up: cuBLAS heuristics, clocks
        for d in devs:
            step(d, state[d.name])
    sync(torch, devs)
    t = time.perf_counter()
    for d in devs:
        step(d, state[d.name])
    sync(torch, devs)
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
        sync(torch, devs)
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
    verify: Verify | None = None,
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


def bench(ctx, torch, devs: list[Dev], step, state: dict, seconds: float, work_per_step: float,
          verify: Verify, verdicts: Verdicts) -> dict[str, list[float]]:
    """Sequential in CPU mode, concurrent on GPUs."""
    if ctx.cpu:
        return bench_sequential(devs, step, state, seconds, work_per_step, verify, verdicts)
    return bench_concurrent(torch, devs, step, state, seconds, work_per_step, verify, verdicts)
