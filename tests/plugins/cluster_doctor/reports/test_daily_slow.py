"""The daily report's "Slow nodes" section: each node that passes its floors yet runs under its fleet, with its state,
since when, its evidence, the action of code SLOW, a link to its node page and the GPU-hours it costs, estimated; a
healthy fleet's report says none."""

from __future__ import annotations

import re

import pytest
from cluster_doctor.reports import daily

from tests.clock import now as clock_now
from tests.support import slow_seed as seed

NOW = clock_now().replace(microsecond=0)


def report(store):
    return daily.build(store, NOW.date(), tests=["gpu_health"], staleness_days=7, now=NOW, ui_base="/airflow/")


def section(markdown: str) -> str:
    return markdown[markdown.index("## Slow nodes"):markdown.index("## Repeat offenders")]


def test_the_report_names_each_slow_node_with_its_evidence_action_and_cost(store):
    seed.fleet(store, NOW)
    data = report(store)
    rows = {r["node_name"]: r for r in data["slow_nodes"]}
    assert list(rows) == [seed.FAILING, seed.SUSPECT, seed.SIGNALLED]  # the failing one first
    failing = rows[seed.FAILING]
    assert (failing["state"], failing["action"]) == ("failing", "drain_and_service")
    assert failing["since"] == (NOW - 2 * seed.H).isoformat()
    assert failing["node_url"] == "/airflow/cluster-doctor/nodes/gpu-100"  # as the failures of the day link theirs
    [line] = failing["probes"]
    median = float(re.search(r"\(fleet median ([0-9.]+)\)", line).group(1))
    assert line.startswith("straggler:probe_gemm_tflops_min=623")
    assert failing["cost_gpu_hours"] == pytest.approx(seed.GPUS * 2 * (1 - 623 / median), abs=1e-3)
    assert rows[seed.SIGNALLED]["signals"] == [seed.SIGNAL] and rows[seed.SIGNALLED]["cost_gpu_hours"] is None

    text = daily.render_markdown(data)
    assert "- Slow nodes (they pass every floor): 1 failing (code SLOW), 2 suspect: gpu-100, gpu-200, gpu-300" in text
    part = section(text)
    assert f"### gpu-100 — slow, failing (code SLOW), since {NOW - 2 * seed.H:%Y-%m-%d %H:%M} UTC" in part
    assert "Action: drain_and_service" in part and f"- probe {line}" in part
    pct = 100 * (1 - 623 / median)
    assert (f"Cost (estimate): \\~{failing['cost_gpu_hours']:.2g} GPU-hours at \\~{pct:.1f} % slow since "
            f"{NOW - 2 * seed.H:%Y-%m-%d %H:%M} UTC") in part
    assert "node page: /airflow/cluster-doctor/nodes/gpu-100" in part
    assert f"- signal {seed.SIGNAL}" in part and "unknown: no probe figure under its fleet median" in part
    assert "gpu-001" not in part

    page = daily.render_html(data)
    assert '<a href="/airflow/cluster-doctor/nodes/gpu-100">node page</a>' in page
    assert "<b>1 / 2</b>slow nodes: failing (code SLOW) / suspect" in page
    assert "GPU-hours at ~" in page


def test_a_healthy_fleet_has_no_slow_node_in_the_report(store):
    seed.fleet(store, NOW, slow=False)
    data = report(store)
    assert data["slow_nodes"] == []
    text = daily.render_markdown(data)
    assert "No GPU node was slow at the end of the day" in section(text)
    assert "- Slow nodes (they pass every floor): 0 failing (code SLOW), 0 suspect\n" in text


def test_a_past_days_report_reads_the_slow_nodes_as_of_the_end_of_that_day(store):
    import datetime as dt

    day = NOW.date() - dt.timedelta(days=2)
    end = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)
    seed.fleet(store, end + 4.5 * seed.H)  # gpu-100's first flagged probe 2.5 h before the end, the rest after it
    data = daily.build(store, day, tests=["gpu_health"], staleness_days=7, now=NOW, ui_base="/airflow/")
    rows = {r["node_name"]: r for r in data["slow_nodes"]}
    assert list(rows) == [seed.FAILING]  # gpu-200's probe and gpu-300's signal came the next day
    assert (rows[seed.FAILING]["state"], rows[seed.FAILING]["action"]) == ("suspect", None)
    assert rows[seed.FAILING]["probes"][0].startswith("straggler:probe_gemm_tflops_min=625")
