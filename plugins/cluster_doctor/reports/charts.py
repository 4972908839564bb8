"""Server-side SVG charts for the pages: hand-written, no script, no external resource.

Every text that reaches the SVG is escaped (markupsafe), numbers are formatted here; the result is
Markup the templates embed as is.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup, escape

from cluster_doctor.domain import fail_slow, fleet_verdicts
from cluster_doctor.domain.status import Status
from cluster_doctor.reports.templating import _CONTROL  # the control characters no page shows
from cluster_doctor.reports.text import percent

WIDTH, HEIGHT = 640, 150
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 10, 24


def _x(i: int, n: int) -> float:
    span = WIDTH - LEFT - RIGHT
    return LEFT + (span * i / (n - 1) if n > 1 else span / 2)


def _y(ratio: float) -> float:
    return TOP + (HEIGHT - TOP - BOTTOM) * (1 - max(0.0, min(1.0, ratio)))


def _day(value: Any) -> str:
    return value.strftime("%m-%d") if isinstance(value, dt.datetime) else str(value)[5:10]


def _runs(flags: Sequence[bool]) -> list[tuple[int, int]]:
    """(first, last) index of each run of True in ``flags``."""
    out, start = [], None
    for i, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            out.append((start, i - 1))
            start = None
    return out


def coverage_svg(samples: Sequence[Mapping[str, Any]], *, target: float | None = None) -> Markup:
    """Coverage over time: pair coverage (the SLO, solid) and node coverage (dashed), 0-100 %. A sample
    without data (before the fleet was first seen: ``pair_coverage`` None) is no point and no 0 %: its
    days are a grey band labelled "no data"."""
    n = len(samples)
    has = [s.get("pair_coverage") is not None for s in samples]
    if sum(has) < 2:
        return Markup('<p class="small muted" id="coverage-chart">Not enough history for a coverage chart yet'
                      + (f" ({n - sum(has)} of the last {n} days before the fleet was first seen: no data)"
                         if n and not all(has) else "") + ".</p>")
    parts = [f'<svg id="coverage-chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
             'xmlns="http://www.w3.org/2000/svg" font-size="10" font-family="system-ui, sans-serif">',
             f"<title>{escape('Coverage over the last %d days' % n)}</title>"]
    for first, last in _runs([not h for h in has]):  # days before the first sighting: no data, not 0 %
        x0 = _x(first, n) - (0 if first == 0 else (_x(1, n) - _x(0, n)) / 2)
        x1 = _x(last, n) + (_x(1, n) - _x(0, n)) / 2 if last < n - 1 else _x(last, n)
        tip = escape(f"{_day(samples[first]['as_of'])} to {_day(samples[last]['as_of'])}: no data "
                     "(before the fleet was first seen)")
        parts.append(f'<g class="no-data"><title>{tip}</title><rect x="{x0:.1f}" y="{TOP}" width="{x1 - x0:.1f}" '
                     f'height="{HEIGHT - TOP - BOTTOM}" fill="currentColor" fill-opacity="0.06"/>'
                     f'<text x="{(x0 + x1) / 2:.1f}" y="{(TOP + HEIGHT - BOTTOM) / 2 + 3:.1f}" text-anchor="middle" '
                     f'fill="currentColor" fill-opacity="0.6">no data</text></g>')
    for ratio in (0.0, 0.5, 1.0):
        y = _y(ratio)
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="currentColor" '
                     'stroke-opacity="0.15"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 3:.1f}" text-anchor="end" fill="currentColor">{ratio:.0%}</text>')
    if target is not None:
        y = _y(target)
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#e07b00" '
                     'stroke-dasharray="2 3"/>')
    for first, last in _runs(has):
        for key, style in (("coverage", 'stroke-dasharray="5 3" stroke="#8a8f98"'),
                           ("pair_coverage", 'stroke="#1f8a3b"')):
            coords = " ".join(f"{_x(i, n):.1f},{_y(samples[i][key] or 0.0):.1f}" for i in range(first, last + 1))
            parts.append(f'<polyline class="series-{key}" fill="none" stroke-width="2" {style} points="{coords}"/>')
    for i, s in enumerate(samples):
        if not has[i]:
            continue
        tip = escape(f"{_day(s['as_of'])}: {percent(s['pair_coverage'])} of pairs fresh, "
                     f"{percent(s['coverage'] or 0)} of nodes covered")
        parts.append(f'<circle cx="{_x(i, n):.1f}" cy="{_y(s["pair_coverage"]):.1f}" r="2.5" fill="#1f8a3b">'
                     f"<title>{tip}</title></circle>")
    labelled = {0: "start", n // 2: "middle", n - 1: "end"}  # two samples: two labels, not three
    for i, anchor in sorted(labelled.items()):  # the outer labels inside the chart
        parts.append(f'<text x="{_x(i, n):.1f}" y="{HEIGHT - 6}" text-anchor="{anchor}" fill="currentColor">'
                     f"{escape(_day(samples[i]['as_of']))}</text>")
    parts.append("</svg>")
    return Markup("".join(parts))


# ---------------------------------------------------------------------------- node page: metric history
PLOT_W, PLOT_H = 440, 170
P_LEFT, P_RIGHT, P_TOP, P_BOTTOM = 46, 12, 30, 22
STATUS_COLORS = {Status.PASS: "#1f8a3b", Status.FAIL: "#c62828", Status.ERROR: "#e07b00"}
BAND_COLOR = "#2f6fdf"

# What the node page plots per test: the judged metrics (cluster_doctor.domain.fleet_verdicts
# .JUDGED_METRICS) and what the suites measure instead in CPU mode (the demo, tests, laptops: dl_unit's
# GEMM runs in fp32 there). A node's page shows the ones it has values of.
CPU_MODE_METRICS: dict[str, tuple[str, ...]] = {"dl_unit": ("gemm_fp32_tflops_min",)}
PLOTTED_METRICS: dict[str, tuple[str, ...]] = {
    test: (*metrics, *CPU_MODE_METRICS.get(test, ())) for test, metrics in fleet_verdicts.JUDGED_METRICS.items()}

# What the node page calls each plotted metric: label, unit.
METRIC_LABELS: dict[str, tuple[str, str]] = {
    "gemm_bf16_tflops_min": ("GEMM bf16, slowest GPU", "TFLOPS"),
    "gemm_fp32_tflops_min": ("GEMM fp32, slowest device (CPU mode)", "TFLOPS"),
    "mem_bw_gbps_min": ("HBM bandwidth, slowest GPU", "GB/s"),
    "nccl_busbw_gbps": ("NCCL all-reduce bus bandwidth", "GB/s"),
    "fio_seq_read_mibps": ("fio sequential read", "MiB/s"),
    "fio_seq_write_mibps": ("fio sequential write", "MiB/s"),
    "fio_rand_read_iops": ("fio random read (4k)", "IOPS"),
    "fio_rand_write_iops": ("fio random write (4k)", "IOPS"),
    **{f"{figure}_min": (what, fail_slow.PROBE_FIGURES[figure]) for figure, what in (
        ("probe_gemm_tflops", "speed probe GEMM (bf16; fp32 in CPU mode), slowest GPU"),
        ("probe_hbm_gbps", "speed probe HBM copy, slowest GPU"))},
}


def _text(value: Any, limit: int = 200) -> Markup:
    """Data as SVG text: control characters dropped (as the templates do), clipped, escaped."""
    text = _CONTROL.sub("", str(value))
    return escape(text if len(text) <= limit else text[: limit - 1] + "…")


def fmt_value(value: float) -> str:
    """Compact axis/tooltip number: 731.5, 2,950, 250k, 1.2M."""
    a = abs(value)
    if a >= 1e6:
        return f"{value / 1e6:.3g}M"
    if a >= 1e4:
        return f"{value / 1e3:.3g}k"
    if a >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.3g}"


def nice_ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    """Round axis values (steps of 1, 2, 2.5 or 5 x 10^k) inside [lo, hi]."""
    if not math.isfinite(hi - lo) or hi <= lo:
        return [lo] if math.isfinite(lo) and hi == lo else []
    mag = 10 ** math.floor(math.log10((hi - lo) / max(1, n)))
    # the finest round step that gives at most n + 1 ticks
    step = next(m * e for e in (mag / 10, mag, mag * 10) for m in (1, 2, 2.5, 5)
                if math.floor(hi / (m * e)) - math.ceil(lo / (m * e)) + 1 <= n + 1)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def value_range(values: Sequence[float]) -> tuple[float, float]:
    """The y range of a plot: the data (and band) with 8 % room, never below 0 for positive data."""
    lo, hi = min(values), max(values)
    if not math.isfinite((hi - lo) * 1.2):
        return lo, hi  # values near the float limits: no room to add
    pad = (hi - lo) * 0.08 if hi > lo else max(abs(hi) * 0.05, 1.0)
    low = lo - pad
    return (0.0 if lo >= 0 > low else low), hi + pad


# Candidate spacings of time ticks, finest first; every one divides a day or is whole days, so ticks
# aligned on multiples of it (from the Unix epoch, a UTC midnight) fall on round hours and midnights.
TICK_STEPS = tuple(dt.timedelta(seconds=s) for s in (
    60, 120, 300, 600, 900, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600,
    86400, 2 * 86400, 7 * 86400, 14 * 86400, 28 * 86400, 91 * 86400, 182 * 86400, 364 * 86400))
MAX_TIME_TICKS = 8
CHAR_W = 5.6  # about the width of a character of the 10 px axis font
LABEL_GAP = 8.0  # at least this many pixels between two tick labels


def _tick_labels(ticks: Sequence[dt.datetime], step: dt.timedelta) -> list[str]:
    """Labels that never repeat: days for day steps (with the year when the ticks span years); for
    finer steps, a midnight shows its day and other ticks their time — with the day as well when the
    ticks span more than a day (06:00 would otherwise come twice), and on the first tick when no
    midnight says which day it is."""
    if step >= dt.timedelta(days=1):
        fmt = "%Y-%m-%d" if ticks[0].year != ticks[-1].year else "%m-%d"
        return [t.strftime(fmt) for t in ticks]
    day_long = ticks[-1] - ticks[0] >= dt.timedelta(days=1)
    midnight = [t.hour == 0 and t.minute == 0 for t in ticks]
    out = []
    for i, t in enumerate(ticks):
        if midnight[i]:
            out.append(t.strftime("%m-%d"))
        elif day_long or (i == 0 and not any(midnight)):
            out.append(t.strftime("%m-%d %H:%M"))
        else:
            out.append(t.strftime("%H:%M"))
    return out


def _placed(xs: Sequence[float], labels: Sequence[str]) -> list[tuple[float, str, str]]:
    """(x, text-anchor, label) for each tick whose label fits inside the plot without touching the
    previous one; the others are left out."""
    placed, right_of_previous = [], -math.inf
    for x, label in zip(xs, labels, strict=True):
        width = len(label) * CHAR_W
        anchor, left = "middle", x - width / 2
        if left < 2:
            anchor, left = "start", x
        elif x + width / 2 > PLOT_W - 2:
            anchor, left = "end", x - width
        if left >= right_of_previous + LABEL_GAP:
            placed.append((x, anchor, label))
            right_of_previous = left + width
    return placed


def _best_ticks(start: dt.datetime, end: dt.datetime, most: int) -> list[tuple[float, str, str]]:
    """The placed ticks of the step (at most ``most`` ticks) that labels the most, all of them if
    possible, the finer on a tie."""
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    best: list[tuple[float, str, str]] = []
    best_score = 0.0
    for step in TICK_STEPS:
        first = epoch + step * math.ceil((start - epoch) / step)
        count = (end - first) // step + 1 if first <= end else 0
        if not 0 < count <= most:
            continue
        ticks = [first + i * step for i in range(count)]
        placed = _placed([time_x(t, start, end) for t in ticks], _tick_labels(ticks, step))
        score = len(placed) - (0.5 if len(placed) < count else 0.0)  # a tick left out looks irregular
        if score > best_score:
            best, best_score = placed, score
    return best


def time_ticks(start: dt.datetime, end: dt.datetime) -> list[tuple[float, str, str]]:
    """(x, text-anchor, label) of the time axis of a plot spanning [start, end], in UTC, at most
    MAX_TIME_TICKS: the round spacing (TICK_STEPS) that labels the most ticks, preferring one whose
    every label fits, then the finer; labels never repeat. A plot without a span gets one label, its
    moment."""
    start, end = start.astimezone(dt.UTC), end.astimezone(dt.UTC)
    if end <= start:
        return [(time_x(start, start, end), "middle", start.strftime("%Y-%m-%d %H:%M"))]
    best: list[tuple[float, str, str]] = []
    for most in (MAX_TIME_TICKS - 2, MAX_TIME_TICKS):  # a calm axis first; denser when it is too sparse
        best = _best_ticks(start, end, most)
        if len(best) >= 3:
            break
    if len(best) >= 2 or (best and end - start < 2 * TICK_STEPS[-1]):
        return best
    if end - start < TICK_STEPS[-1]:  # shorter than a minute, between two round minutes: its middle
        middle = start + (end - start) / 2
        return [(time_x(middle, start, end), "middle", middle.strftime("%Y-%m-%d %H:%M:%S"))]
    # longer than the longest step allows: the two ends, as dates
    return [(time_x(t, start, end), anchor, t.strftime("%Y-%m-%d")) for t, anchor in ((start, "start"), (end, "end"))]


def time_x(at: dt.datetime, start: dt.datetime, end: dt.datetime) -> float:
    """x of a moment on a plot spanning [start, end] (the middle when the span is empty)."""
    span = PLOT_W - P_LEFT - P_RIGHT
    total = (end - start).total_seconds()
    if total <= 0:
        return P_LEFT + span / 2
    return P_LEFT + span * max(0.0, min(1.0, (at - start).total_seconds() / total))


def value_y(value: float, lo: float, hi: float) -> float:
    """y of a value on a plot whose axis spans [lo, hi] (higher values are higher up)."""
    span = PLOT_H - P_TOP - P_BOTTOM
    return P_TOP + span * (1 - max(0.0, min(1.0, (value - lo) / (hi - lo)))) if hi > lo else P_TOP + span / 2


def transitions(points: Sequence[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], str, str]]:
    """(point, previous status, status) wherever the executed status changed from one attempt to the next."""
    out, previous = [], None
    for p in points:
        status = p.get("status")
        if status not in STATUS_COLORS:
            continue
        if previous is not None and status != previous:
            out.append((p, previous, status))
        previous = status
    return out


def _when(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


@dataclasses.dataclass(frozen=True)
class _Frame:
    """A metric plot's axes: time over [start, end], values over [lo, hi]."""

    start: dt.datetime
    end: dt.datetime
    lo: float
    hi: float

    def x(self, at: dt.datetime) -> float:
        return time_x(at, self.start, self.end)

    def y(self, v: float) -> float:
        return value_y(v, self.lo, self.hi)


_RIGHT, _BOTTOM = PLOT_W - P_RIGHT, PLOT_H - P_BOTTOM  # the plot area's right and bottom edges


def metric_svg(
    points: Sequence[Mapping[str, Any]],
    *,
    metric: str,
    chart_id: str,
    band: Mapping[str, Any] | None = None,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
) -> Markup:
    """One key metric of a node over time, with the fleet band of its GPU model and its status changes.

    ``points``: the node's executed attempts of the metric's test, oldest first, each ``{"at": datetime,
    "status": pass|fail|error, "value": float or None}`` (an attempt without the value still marks a
    status change). ``band``: ``{"median", "p10", "p90", "nodes", "since", "gpu_model"}`` or None (too few
    nodes); drawn from ``since`` on (the baseline window). The x axis spans [start, end] (default: the
    points). Status changes: a red line where the test went from pass to fail or error, a green one
    where it passed again."""
    label, unit = METRIC_LABELS.get(metric, (metric, ""))
    valued = [p for p in points if p.get("value") is not None and math.isfinite(p["value"])]
    if not valued:
        return Markup(f'<p class="small muted metric-plot-empty" id="{_text(chart_id)}">'
                      f"{_text(label)}: no value recorded yet.</p>")
    times = [p["at"] for p in points]
    ys = [p["value"] for p in valued]
    if band:
        ys += [band[k] for k in ("p10", "p90", "median") if band.get(k) is not None]
    frame = _Frame(min([start, *times]) if start else min(times), max([end, *times]) if end else max(times),
                   *value_range(ys))
    unit_text = f" {unit}" if unit else ""
    parts = [f'<svg id="{_text(chart_id)}" class="metric-plot" data-metric="{_text(metric)}" role="img" '
             f'viewBox="0 0 {PLOT_W} {PLOT_H}" width="{PLOT_W}" height="{PLOT_H}" '
             'xmlns="http://www.w3.org/2000/svg" font-size="10" font-family="system-ui, sans-serif">',
             f"<title>{_text(f'{label} ({metric}){unit_text} over time')}</title>",
             f'<text x="4" y="12" font-size="12" font-weight="600" fill="currentColor">'
             f'{_text(label)}<tspan font-weight="400" fill-opacity="0.7">{_text(unit_text)}</tspan></text>',
             *_value_grid(frame)]
    if band and band.get("p10") is not None and band.get("p90") is not None:
        parts += _band(band, frame, unit_text)
    parts += _transitions(points, frame)
    parts += _series(valued, frame, unit_text)
    parts += _time_grid(frame)
    parts.append("</svg>")
    return Markup("".join(parts))


def _value_grid(frame: _Frame) -> list[str]:
    parts = []
    for tick in nice_ticks(frame.lo, frame.hi):
        ty = frame.y(tick)
        parts.append(f'<line x1="{P_LEFT}" y1="{ty:.1f}" x2="{_RIGHT}" y2="{ty:.1f}" stroke="currentColor" '
                     'stroke-opacity="0.12"/>')
        parts.append(f'<text x="{P_LEFT - 6}" y="{ty + 3:.1f}" text-anchor="end" fill="currentColor" '
                     f'fill-opacity="0.8">{_text(fmt_value(tick))}</text>')
    return parts


def _band(band: Mapping[str, Any], frame: _Frame, unit_text: str) -> list[str]:
    """The fleet's p10–p90 band and median of the GPU model, from ``since`` on, and its legend."""
    since = band.get("since")
    bx = frame.x(max(since, frame.start)) if isinstance(since, dt.datetime) else P_LEFT
    top, low = frame.y(band["p90"]), frame.y(band["p10"])
    model = f" of {band['gpu_model']}" if band.get("gpu_model") else ""
    tip = (f"fleet{model} ({band.get('nodes')} nodes, since {_day(since) if since else '?'}): "
           f"median {fmt_value(band['median'])}, p10 {fmt_value(band['p10'])}, p90 {fmt_value(band['p90'])}"
           f"{unit_text}")
    my = frame.y(band["median"])
    legend = _text(f"fleet p10–p90, {band.get('nodes')} nodes")
    return [f'<rect class="band" x="{bx:.1f}" y="{top:.1f}" width="{max(_RIGHT - bx, 1.0):.1f}" '
            f'height="{max(low - top, 1.5):.1f}" fill="{BAND_COLOR}" fill-opacity="0.14">'
            f"<title>{_text(tip, 400)}</title></rect>",
            f'<line class="band-median" x1="{bx:.1f}" y1="{my:.1f}" x2="{_RIGHT}" y2="{my:.1f}" '
            f'stroke="{BAND_COLOR}" stroke-width="1.5" stroke-dasharray="6 3"><title>{_text(tip, 400)}'
            "</title></line>",
            f'<text x="{_RIGHT}" y="12" text-anchor="end" fill="{BAND_COLOR}">{legend}</text>']


def _transitions(points: Sequence[Mapping[str, Any]], frame: _Frame) -> list[str]:
    """A dashed line and a marker where the status changed: green to a pass, red to a failure."""
    parts = []
    for p, before, after in transitions(points):
        tx = frame.x(p["at"])
        color = STATUS_COLORS[Status.PASS] if after == Status.PASS else STATUS_COLORS[Status.FAIL]
        kind = "to-pass" if after == Status.PASS else "to-fail"
        tip = _text(f"{before} → {after}, {_when(p['at'])}")
        parts.append(f'<g class="transition {kind}"><title>{tip}</title>'
                     f'<line x1="{tx:.1f}" y1="{P_TOP}" x2="{tx:.1f}" y2="{_BOTTOM}" stroke="{color}" '
                     'stroke-width="1.5" stroke-dasharray="3 2"/>'
                     f'<path d="M{tx - 5:.1f},{P_TOP - 8} L{tx + 5:.1f},{P_TOP - 8} L{tx:.1f},{P_TOP - 1} Z" '
                     f'fill="{color}"/></g>')
    return parts


def _series(valued: Sequence[Mapping[str, Any]], frame: _Frame, unit_text: str) -> list[str]:
    """The values: a line through them (two or more), a point per attempt coloured by its status."""
    parts = []
    if len(valued) > 1:
        coords = " ".join(f"{frame.x(p['at']):.1f},{frame.y(p['value']):.1f}" for p in valued)
        parts.append(f'<polyline class="series" fill="none" stroke="currentColor" stroke-opacity="0.55" '
                     f'stroke-width="1.5" points="{coords}"/>')
    for p in valued:
        status = p.get("status") if p.get("status") in STATUS_COLORS else Status.PASS
        tip = _text(f"{_when(p['at'])}: {fmt_value(p['value'])}{unit_text} ({status})")
        cx, cy = frame.x(p["at"]), frame.y(p["value"])
        parts.append(f'<circle class="point st-{status}" cx="{cx:.1f}" cy="{cy:.1f}" '
                     f'r="{3.5 if status == Status.PASS else 4.5}" fill="{STATUS_COLORS[status]}"><title>{tip}</title>'
                     "</circle>")
    return parts


def _time_grid(frame: _Frame) -> list[str]:
    parts = []
    for tx, anchor, label in time_ticks(frame.start, frame.end):
        parts.append(f'<line class="time-grid" x1="{tx:.1f}" y1="{P_TOP}" x2="{tx:.1f}" y2="{_BOTTOM}" '
                     'stroke="currentColor" stroke-opacity="0.08"/>')
        parts.append(f'<text class="time-tick" x="{tx:.1f}" y="{PLOT_H - 6}" text-anchor="{anchor}" '
                     f'fill="currentColor" fill-opacity="0.8">{_text(label)}</text>')
    return parts
