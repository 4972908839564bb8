"""The benchmarks' last recorded figures, read from bench/figures.toml, and the REGRESSION lines of a run
that is more than 20 % worse than one of them.

Each figure is keyed in the file (``metrics.scrape_ms``) and holds the number last measured at each size
(``5,000 nodes``, ``10 M rows`` ...; units in its label). A benchmark compares what it measured at a size
the file has; sizes the file lacks (the small runs of tests/tools/test_benchmarks.py) are not compared.
docs/benchmarks.md quotes the figures in tables whose first cell names the key; ``quoted`` reads them
back, so a test can check that what the page says is what the file holds.

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
import tomllib

# the file holding the last figures ($CLUSTER_DOCTOR_BENCH_FIGURES: another one, for tests)
FIGURES = pathlib.Path(os.environ.get("CLUSTER_DOCTOR_BENCH_FIGURES") or
                       pathlib.Path(__file__).resolve().with_name("figures.toml"))
TOLERANCE = 0.20  # a figure more than 20 % worse than the recorded one is a regression
_KEY = re.compile(r"`([a-z_]+\.[a-z0-9_]+)`")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def load(text: str | None = None) -> dict:
    """The whole file (or ``text`` in its format) as a dict."""
    return tomllib.loads(FIGURES.read_text() if text is None else text)


def size_label(size: int, unit: str) -> str:
    """How the file names a size: 5,000 nodes; 10 M rows (millions as M)."""
    if unit == "rows" and size >= 1_000_000 and size % 1_000_000 == 0:
        return f"{size // 1_000_000} M rows"
    return f"{size:,} {unit}"


def recorded(key: str, column: str, text: str | None = None) -> float | None:
    """The number recorded for figure ``key`` at size ``column``, if there is one."""
    value = load(text).get("figures", {}).get(key, {}).get(column)
    return float(value) if isinstance(value, (int, float)) else None


def regressions(measured: dict[tuple[str, str], float], *, higher_is_worse: bool = True,
                text: str | None = None) -> list[str]:
    """A REGRESSION line per figure more than TOLERANCE worse than the recorded one; ``measured``:
    {(figure key, size column): value}."""
    lines = []
    for (key, column), value in measured.items():
        before = recorded(key, column, text)
        if before is None or before <= 0:
            continue
        worse = (value - before) / before if higher_is_worse else (before - value) / before
        if worse > TOLERANCE:
            lines.append(f"REGRESSION: {key} at {column}: {value:g} against {before:g} in bench/figures.toml "
                         f"({worse:+.0%}, more than {TOLERANCE:.0%} worse)")
    return lines


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def quoted(markdown: str) -> dict[tuple[str, str], float]:
    """{(key, column): number} of every table row of ``markdown`` whose first cell names a figure key in
    code (`` `metrics.scrape_ms` ``), under each header cell that names a size."""
    found: dict[tuple[str, str], float] = {}
    header: list[str] | None = None
    for line in markdown.splitlines():
        if not line.lstrip().startswith("|"):
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = cells
            continue
        for key in _KEY.findall(cells[0]):
            for column, cell in zip(header[1:], cells[1:]):
                number = _NUMBER.search(cell)
                if re.fullmatch(r"[\d,]+ (nodes|M rows)", column) and number:
                    found[(key, column)] = float(number.group().replace(",", ""))
    return found


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
            lines.append(f"REGRESSION: {key} at {column}: {value:.3g}x against {before:g}x in bench/figures.toml, both "
                         f"against {baseline} in the same run ({worse:.0%} worse, more than {TOLERANCE:.0%})")
    return lines
