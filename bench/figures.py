"""The benchmarks' last recorded figures, read from the README's benchmark tables, and the REGRESSION
lines of a run that is more than 20 % worse than one of them.

A table row names its figure in code (`` `metrics.scrape_ms` ``) in its first cell; the header names the
sizes (``5,000 nodes``, ``10,000 nodes``, ``10 M rows`` ...) and each cell under a size holds the number
last measured there (units in the row's label). A benchmark compares what it measured at a size the
table has; sizes the table lacks (the small runs of tests/tools/test_benchmarks.py) are not compared.

Speed is judged by ratios (``ratio_regressions``): each benchmark times a baseline in the same run,
alternating with what it measures (prometheus_client's own app, the naive query, one raw pod list), and the
ratio of the two is compared with the recorded one (``reference_ratio``). A slower or busier host slows
both alike, so it does not read as a regression; the absolute figures are printed with the host's speed
beside them (bench/host.py), not judged. Figures that do not depend on the host's speed (memory) are
judged as they are (``regressions``).
"""

from __future__ import annotations

import os
import pathlib
import re

# the README whose tables hold the last figures ($CLUSTER_DOCTOR_BENCH_README: another one, for tests)
README = pathlib.Path(os.environ.get("CLUSTER_DOCTOR_BENCH_README") or
                      pathlib.Path(__file__).resolve().parents[1] / "README.md")
TOLERANCE = 0.20  # a figure more than 20 % worse than the README's is a regression
_KEY = re.compile(r"`([a-z_]+\.[a-z0-9_]+)`")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def size_label(size: int, unit: str) -> str:
    """How a table header names a size: 5,000 nodes; 10 M rows (millions as M)."""
    if unit == "rows" and size >= 1_000_000 and size % 1_000_000 == 0:
        return f"{size // 1_000_000} M rows"
    return f"{size:,} {unit}"


def recorded(key: str, column: str, text: str | None = None) -> float | None:
    """The number in the README's row of figure ``key`` under the header ``column``, if there is one."""
    text = README.read_text() if text is None else text
    header: list[str] | None = None
    for line in text.splitlines():
        if not line.lstrip().startswith("|"):
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = cells
            continue
        keys = _KEY.findall(cells[0]) if cells else []
        if key in keys and column in header:
            found = _NUMBER.search(cells[header.index(column)] if header.index(column) < len(cells) else "")
            return float(found.group().replace(",", "")) if found else None
    return None


def regressions(measured: dict[tuple[str, str], float], *, higher_is_worse: bool = True,
                text: str | None = None) -> list[str]:
    """A REGRESSION line per figure more than TOLERANCE worse than the README's; ``measured``:
    {(figure key, size column): value}."""
    lines = []
    for (key, column), value in measured.items():
        before = recorded(key, column, text)
        if before is None or before <= 0:
            continue
        worse = (value - before) / before if higher_is_worse else (before - value) / before
        if worse > TOLERANCE:
            lines.append(f"REGRESSION: {key} at {column}: {value:g} against {before:g} in the README "
                         f"({worse:+.0%}, more than {TOLERANCE:.0%} worse)")
    return lines


# Figure keys that are ratios to a baseline of the same run: what each is measured against, and whether a
# higher ratio is the better one.
RATIOS = {
    "metrics.speedup": ("prometheus_client's own app", True),
    "page.speedup": ("the naive query", True),
    "page.node_speedup": ("the naive query", True),
    "store.speedup": ("the naive query", True),
    "discovery.ratio": ("one raw pod list", False),
}


def reference_ratio(key: str, column: str, text: str | None = None) -> float | None:
    """The ratio to its same-run baseline last recorded for figure ``key`` (one of RATIOS) at ``column``."""
    return recorded(key, column, text)


def ratio_regressions(measured: dict[tuple[str, str], float], text: str | None = None) -> list[str]:
    """A REGRESSION line per ratio to the same run's baseline more than TOLERANCE worse than its reference
    (``reference_ratio``); ``measured``: {(figure key, size column): ratio}, keys of RATIOS."""
    lines = []
    for (key, column), value in measured.items():
        baseline, higher_is_better = RATIOS[key]
        before = reference_ratio(key, column, text)
        if before is None or before <= 0 or value <= 0:
            continue
        worse = (before - value) / before if higher_is_better else (value - before) / before
        if worse > TOLERANCE:
            lines.append(f"REGRESSION: {key} at {column}: {value:.3g}x against {before:g}x in the README, both "
                         f"against {baseline} in the same run ({worse:.0%} worse, more than {TOLERANCE:.0%})")
    return lines
