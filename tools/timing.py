"""How long a developer command took, measured from its own process start, with where the time went and
the machine and load it ran on: the line `make demo` and `make up` print last (the README quotes it)."""

from __future__ import annotations

import os
import time

import psutil


def since_start() -> float:
    """Seconds since this process started (the interpreter's start and imports included)."""
    return time.time() - psutil.Process().create_time()


def machine() -> str:
    """The CPUs and the load the figure was measured under, e.g. '2 CPUs, load 2.1 (1 min) / 2.4 (5 min)'."""
    one, five, _ = os.getloadavg()
    return f"{os.cpu_count()} CPUs, load {one:.1f} (1 min) / {five:.1f} (5 min)"


class Phases:
    """The seconds of each named phase, from one mark to the next (the first from the process start)."""

    def __init__(self) -> None:
        self._marks: list[tuple[str, float]] = []
        self._start = time.time() - since_start()

    def mark(self, name: str) -> None:
        self._marks.append((name, time.time()))

    def breakdown(self) -> str:
        edges = [("start", self._start), *self._marks, ("end", time.time())]
        return ", ".join(f"{name} {end - at:.0f} s" for (name, at), (_, end) in zip(edges, edges[1:]))

    def line(self, what: str) -> str:
        return f"{what} in {since_start():.0f} s ({self.breakdown()}; {machine()})"
