"""The speed of the host a benchmark ran on, printed beside its absolute figures.

A short fixed pure-Python loop, timed a few times (p50): on a slower or busier host it takes longer, so
a reader on another machine can tell a slow host from slow code. The regression judgement does not use
it (bench/figures.py: ratios to a baseline measured in the same run); it only says what the absolute
figures were measured on.
"""

from __future__ import annotations

import os
import statistics
import time

LOOP = 200_000  # iterations: ~10-20 ms on a 2026 server core, short beside any benchmark


def _loop() -> int:
    total = 0
    for i in range(LOOP):
        total += i * i % 7
    return total


def calibration_ms(repeats: int = 5) -> float:
    """The loop's p50 in milliseconds on this host, now (lower is faster)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        _loop()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def line(ms: float | None = None) -> str:
    """One line: the calibration figure, the load and the CPUs the figures beside it were measured on."""
    ms = calibration_ms() if ms is None else ms
    return (f"host: host_ms={ms:.1f} (a fixed {LOOP:,}-step pure-Python loop, p50 of 5; lower is faster), "
            f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
