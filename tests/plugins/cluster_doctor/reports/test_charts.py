"""cluster_doctor.reports.charts: the hand-written SVG of the fleet page (coverage) and the node page (metrics)."""

from __future__ import annotations

import datetime as dt
import re
import xml.etree.ElementTree as ET

import pytest
from cluster_doctor.reports import charts

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(2)>\x1b[31m\u202e'


def pt(day: float, value: float | None, status: str = "pass") -> dict:
    return {"at": T0 + day * DAY, "value": value, "status": status}


def parse(svg: str) -> ET.Element:
    """Well-formed XML or the test fails: an unescaped text would break it."""
    return ET.fromstring(str(svg))


def circles(root: ET.Element) -> list[tuple[float, float, str]]:
    return [(float(c.get("cx")), float(c.get("cy")), c.get("class")) for c in root.iter(f"{SVG}circle")]


def band(**kw) -> dict:
    return {"median": 100.0, "p10": 95.0, "p90": 104.0, "nodes": 12, "since": T0 + 2 * DAY,
            "gpu_model": "NVIDIA H100 80GB HBM3", **kw}


# ---------------------------------------------------------------------------- metric plots
def test_values_map_to_coordinates():
    start, end = T0, T0 + 10 * DAY
    points = [pt(0, 90.0), pt(5, 100.0), pt(10, 110.0)]
    root = parse(charts.metric_svg(points, metric="nccl_busbw_gbps", chart_id="p", start=start, end=end))
    lo, hi = charts.value_range([90.0, 100.0, 110.0])
    assert lo < 90.0 and hi > 110.0  # room around the data
    got = circles(root)
    assert [round(x, 1) for x, _, _ in got] == [charts.P_LEFT, (charts.P_LEFT + charts.PLOT_W - charts.P_RIGHT) / 2,
                                                 charts.PLOT_W - charts.P_RIGHT]
    assert [y for _, y, _ in got] == pytest.approx([round(charts.value_y(v, lo, hi), 1) for v in (90, 100, 110)],
                                                   abs=0.051)
    assert got[0][1] > got[1][1] > got[2][1]  # higher values are drawn higher up
    # the line joins the points in time order
    line = next(root.iter(f"{SVG}polyline")).get("points").split()
    assert [tuple(map(float, p.split(","))) for p in line] == [(x, y) for x, y, _ in got]


def test_axis_helpers():
    assert charts.time_x(T0, T0, T0 + DAY) == charts.P_LEFT
    assert charts.time_x(T0 + DAY, T0, T0 + DAY) == charts.PLOT_W - charts.P_RIGHT
    assert charts.time_x(T0 + 2 * DAY, T0, T0 + DAY) == charts.PLOT_W - charts.P_RIGHT  # clamped
    assert charts.value_y(10, 10, 20) == charts.PLOT_H - charts.P_BOTTOM and charts.value_y(20, 10, 20) == charts.P_TOP
    assert charts.value_range([0.0, 50.0])[0] == 0.0  # never below zero for positive data
    assert charts.value_range([7.0, 7.0]) == pytest.approx((6.0, 8.0))  # flat data still gets a range
    assert charts.nice_ticks(0, 100) == [0, 25, 50, 75, 100]
    assert charts.nice_ticks(2910, 3040) == [2925, 2950, 2975, 3000, 3025]
    assert [charts.fmt_value(v) for v in (731.5, 2950.0, 250000.0, 1.2e6, 12.5, 8.0)] == \
        ["732", "2,950", "250k", "1.2M", "12.5", "8"]


def test_band_is_drawn_from_the_baseline_window_with_its_median():
    points = [pt(0, 101.0), pt(4, 99.0), pt(8, 80.0, "fail")]
    root = parse(charts.metric_svg(points, metric="gemm_bf16_tflops_min", chart_id="p", band=band(),
                                   start=T0, end=T0 + 8 * DAY))
    lo, hi = charts.value_range([101.0, 99.0, 80.0, 95.0, 104.0, 100.0])
    rect = next(r for r in root.iter(f"{SVG}rect") if r.get("class") == "band")
    assert float(rect.get("x")) == pytest.approx(charts.time_x(T0 + 2 * DAY, T0, T0 + 8 * DAY), abs=0.05)
    assert float(rect.get("y")) == pytest.approx(charts.value_y(104.0, lo, hi), abs=0.05)  # p90 on top
    assert float(rect.get("y")) + float(rect.get("height")) == pytest.approx(charts.value_y(95.0, lo, hi), abs=0.1)
    median = next(e for e in root.iter(f"{SVG}line") if e.get("class") == "band-median")
    assert float(median.get("y1")) == pytest.approx(charts.value_y(100.0, lo, hi), abs=0.05)
    text = "".join(root.itertext())
    assert "12 nodes" in text and "NVIDIA H100 80GB HBM3" in text and "median 100, p10 95, p90 104" in text
    # no band (too few nodes): no rect, the plot still draws
    root = parse(charts.metric_svg(points, metric="gemm_bf16_tflops_min", chart_id="p"))
    assert not [r for r in root.iter(f"{SVG}rect")] and len(circles(root)) == 3


def test_status_changes_are_marked():
    points = [pt(0, 100.0), pt(1, 101.0), pt(2, 50.0, "fail"), pt(3, None, "error"), pt(4, 60.0, "fail"),
              pt(5, 99.0), pt(6, 100.0)]
    root = parse(charts.metric_svg(points, metric="nccl_busbw_gbps", chart_id="p", start=T0, end=T0 + 6 * DAY))
    marks = [(g.get("class"), float(next(g.iter(f"{SVG}line")).get("x1")))
             for g in root.iter(f"{SVG}g") if "transition" in (g.get("class") or "")]
    x = [round(charts.time_x(T0 + d * DAY, T0, T0 + 6 * DAY), 1) for d in range(7)]
    # pass -> fail, fail -> error (no value: still a change), error -> fail, fail -> pass
    assert marks == [("transition to-fail", x[2]), ("transition to-fail", x[3]), ("transition to-fail", x[4]),
                     ("transition to-pass", x[5])]
    titles = [g.find(f"{SVG}title").text for g in root.iter(f"{SVG}g")]
    assert titles[0] == "pass → fail, 2026-11-03 00:00 UTC" and titles[-1].startswith("fail → pass")
    assert [c for _, _, c in circles(root)] == ["point st-pass", "point st-pass", "point st-fail", "point st-fail",
                                               "point st-pass", "point st-pass"]  # the error had no value
    assert charts.transitions([pt(0, 1.0), pt(1, 2.0)]) == []


def test_empty_and_one_point_series():
    empty = str(charts.metric_svg([], metric="fio_rand_read_iops", chart_id="plot-x"))
    assert "<svg" not in empty and 'id="plot-x"' in empty and "no value recorded" in empty
    no_values = str(charts.metric_svg([pt(0, None, "error")], metric="fio_rand_read_iops", chart_id="p"))
    assert "<svg" not in no_values
    one = parse(charts.metric_svg([pt(0, 42.0)], metric="fio_rand_read_iops", chart_id="p"))
    (x, y, _), = circles(one)
    assert x == pytest.approx((charts.P_LEFT + charts.PLOT_W - charts.P_RIGHT) / 2, abs=0.05)  # no span: the middle
    assert charts.P_TOP < y < charts.PLOT_H - charts.P_BOTTOM
    assert not list(one.iter(f"{SVG}polyline"))  # one point is no line
    placed = parse(charts.metric_svg([pt(1, 42.0)], metric="fio_rand_read_iops", chart_id="p", start=T0,
                                     end=T0 + 2 * DAY))
    assert circles(placed)[0][0] == pytest.approx(charts.time_x(T0 + DAY, T0, T0 + 2 * DAY), abs=0.05)


def test_hostile_text_is_escaped():
    svg = str(charts.metric_svg([pt(0, 1.0), pt(1, 2.0, "fail")], metric=HOSTILE, chart_id=HOSTILE,
                                band=band(gpu_model=HOSTILE)))
    root = parse(svg)  # well-formed: every text and attribute escaped
    assert "<script" not in svg and "<img" not in svg and "\x1b" not in svg and "\u202e" not in svg
    assert "&lt;script&gt;" in svg and "&#34;&gt;&lt;img" in svg
    assert root.get("id").startswith("<script>alert(1)</script>")  # the same text, as data
    assert {e.tag.removeprefix(SVG) for e in root.iter()} <= {"svg", "title", "text", "tspan", "line", "rect", "g",
                                                              "path", "polyline", "circle"}
    assert not any(k.startswith("on") or k == "href" for e in root.iter() for k in e.attrib)


def test_values_at_the_float_limits_still_draw():
    svg = str(charts.metric_svg([pt(0, -1.7e308), pt(1, 1.7e308), pt(2, 5e-324)], metric="m", chart_id="p"))
    root = parse(svg)
    assert len(circles(root)) == 3 and "nan" not in svg and "inf" not in svg


def test_unknown_metric_is_labelled_by_its_name():
    root = parse(charts.metric_svg([pt(0, 3.0), pt(1, 4.0)], metric="custom_metric_x", chart_id="p"))
    assert root.find(f"{SVG}text").text == "custom_metric_x"
    assert root.get("class") == "metric-plot" and root.get("data-metric") == "custom_metric_x"


# ---------------------------------------------------------------------------- coverage chart
def test_coverage_chart():
    samples = [{"as_of": T0 + i * DAY, "pair_coverage": r, "coverage": r / 2} for i, r in enumerate((0.5, 1.0, 0.0))]
    root = parse(charts.coverage_svg(samples, target=0.9))
    ys = [y for _, y, _ in circles(root)]
    assert ys == [round(charts._y(0.5), 1), round(charts._y(1.0), 1), round(charts._y(0.0), 1)]
    labels = [t.text for t in root.iter(f"{SVG}text")]
    assert labels[-3:] == ["11-01", "11-02", "11-03"]
    too_few = str(charts.coverage_svg(samples[:1]))
    assert "<svg" not in too_few and re.search(r'id="coverage-chart"', too_few)


# ---------------------------------------------------------------------------- time axis
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def tick_labels(svg) -> list[str]:
    return [t.text for t in parse(svg).iter(f"{SVG}text") if t.get("class") == "time-tick"]


@pytest.mark.parametrize("span, expected", [
    (dt.timedelta(hours=5), ["11-01 10:00", "11:00", "12:00", "13:00", "14:00"]),
    (DAY, ["18:00", "11-01", "06:00", "12:00"]),  # a midnight says which day
    (DAY + dt.timedelta(hours=7), ["10-31 12:00", "10-31 18:00", "11-01", "11-01 06:00", "11-01 12:00"]),
    (10 * DAY, ["10-24", "10-26", "10-28", "10-30", "11-01"]),
    (41 * DAY, ["09-24", "10-01", "10-08", "10-15", "10-22", "10-29"]),
])
def test_time_ticks_fall_on_round_times_and_never_repeat(span, expected):
    end = T0 + dt.timedelta(hours=14, minutes=34)
    assert [label for _, _, label in charts.time_ticks(end - span, end)] == expected


def test_a_day_of_demo_runs_gets_hours_not_the_same_date_three_times():
    """The demo's case: every point within the last day, on the node page's one-day-minimum axis."""
    end = T0 + dt.timedelta(hours=9, minutes=12)
    points = [pt(0.3, 12.0), pt(0.37, 12.4)]
    labels = tick_labels(charts.metric_svg(points, metric="gemm_fp32_tflops_min", chart_id="p",
                                           start=end - DAY, end=end))
    assert len(labels) >= 3 and len(set(labels)) == len(labels)
    assert any(":" in label for label in labels)


@given(start=st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2099, 1, 1),
                          timezones=st.just(dt.UTC)),
       seconds=st.floats(min_value=1, max_value=3 * 365 * 86400))
def test_time_tick_labels_are_distinct_ordered_inside_the_plot_and_apart(start, seconds):
    end = start + dt.timedelta(seconds=seconds)
    ticks = charts.time_ticks(start, end)
    labels = [label for _, _, label in ticks]
    assert 1 <= len(ticks) <= charts.MAX_TIME_TICKS and len(set(labels)) == len(labels), labels
    xs = [x for x, _, _ in ticks]
    assert xs == sorted(xs) and all(charts.P_LEFT <= x <= charts.PLOT_W - charts.P_RIGHT for x in xs)
    extents = []
    for x, anchor, label in ticks:
        width = len(label) * charts.CHAR_W
        left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
        assert 0 <= left and left + width <= charts.PLOT_W, (x, anchor, label)
        extents.append((left, left + width))
    assert all(b[0] >= a[1] for a, b in zip(extents, extents[1:])), labels  # no two labels overlap


def test_a_plot_without_a_span_gets_its_moment():
    (x, anchor, label), = charts.time_ticks(T0, T0)
    assert label == "2026-11-01 00:00" and anchor == "middle"


def test_two_coverage_samples_get_two_labels():
    samples = [{"as_of": T0 + i * DAY, "pair_coverage": 0.5, "coverage": 0.5} for i in range(2)]
    labels = [t.text for t in parse(charts.coverage_svg(samples)).iter(f"{SVG}text")]
    assert labels[-2:] == ["11-01", "11-02"] and labels.count("11-02") == 1


def test_cpu_mode_gemm_is_plotted_for_dl_unit():
    assert "gemm_fp32_tflops_min" in charts.PLOTTED_METRICS["dl_unit"]
    assert set(charts.PLOTTED_METRICS["dl_unit"]) >= {"gemm_bf16_tflops_min", "mem_bw_gbps_min"}
    assert all(m in charts.METRIC_LABELS for ms in charts.PLOTTED_METRICS.values() for m in ms)
