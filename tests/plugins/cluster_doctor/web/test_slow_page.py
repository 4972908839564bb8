"""The fleet and node pages show the slow nodes (fail-slow): a node that passes every floor yet runs under its fleet
is counted (failing / suspect), listed with its state, since when, its evidence and its estimated cost, and marked
slow where its gpu_health cell says pass; a healthy fleet shows none."""

from __future__ import annotations

import html as htmllib
import re

import pytest
from cluster_doctor.domain.config import Settings

from tests.support import fleet_seed
from tests.support import slow_seed as seed
from tests.support.web import make_client

NOW = fleet_seed.NOW  # the clock of make_client's app
SETTINGS = Settings(tests=["gpu_health"])


def row(page: str, node: str, where: str = "matrix") -> str:
    """The row of ``node`` in the matrix or in the slow-nodes list ('' when it has none there)."""
    start = page.index(f'id="{where}"')
    part = page[start:page.index("</table>", start)]
    found = re.search(rf'<tr data-node="{node}"[^>]*>(.*?)</tr>', part, re.S)
    return found.group(1) if found else ""


def median_of(line: str) -> float:
    return float(re.search(r"\(fleet median ([0-9.]+)\)", line).group(1))


@pytest.fixture
def slow_fleet(store, db_dsn):
    seed.fleet(store, NOW)
    return make_client(db_dsn, settings=SETTINGS)


def test_the_fleet_page_counts_lists_and_marks_the_slow_nodes(slow_fleet):
    page = slow_fleet.get("/cluster-doctor/").text
    assert re.search(r'id="slow" data-failing="1" data-suspect="2"', page)
    assert "of them <a href=\"#slow-nodes\">1 failing slow</a>" in page  # the failing card counts it

    listed = row(page, seed.FAILING, "slow-nodes")
    assert 'href="/cluster-doctor/nodes/gpu-100"' in listed and '<b class="slow" data-state="failing">failing (SLOW)' in listed
    assert f"{NOW - 2 * seed.H:%Y-%m-%d %H:%M} UTC" in listed  # since its last flagged probe
    probe_line = re.search(r'<li class="probe">probe (straggler:probe_gemm_tflops_min=623[^<]*)</li>', listed).group(1)
    assert "drain_and_service" in listed
    # ~N GPU-hours: 8 GPUs x 2 h x how far 623 is under the fleet median
    expected = 8 * 2 * (1 - 623 / median_of(probe_line))
    cost = htmllib.unescape(re.search(r'<td class="cost">(.*?)</td>', listed, re.S).group(1))
    assert cost.startswith(f"~{expected:.2g} GPU-hours at ~{100 * (1 - 623 / median_of(probe_line)):.1f} % slow since")
    assert "a synchronous job of k nodes loses k times that" in cost

    suspect = row(page, seed.SUSPECT, "slow-nodes")
    assert 'data-state="suspect">suspect' in suspect and "straggler:probe_gemm_tflops_min=610" in suspect
    assert "retested by the next sweep" in suspect and "drain_and_service" not in suspect
    signalled = row(page, seed.SIGNALLED, "slow-nodes")
    assert f'<li class="signal">signal {seed.SIGNAL}</li>' in signalled and "unknown: no probe figure under its fleet median" in signalled
    assert row(page, "gpu-001", "slow-nodes") == ""  # the healthy fleet, with its spread, is not listed

    # in the matrix: the node's gpu_health cell passes its floors, and says slow beside the pass
    cell = re.search(r'<td class="cell[^"]*" data-test="gpu_health" data-status="pass" data-slow="failing"[^>]*>(.*?)</td>',
                     row(page, seed.FAILING), re.S)
    assert cell and 'class="st-pass slow-failing"' in cell.group(1) and "pass · slow" in cell.group(1)
    assert "action: <b class=\"action\">drain_and_service</b>" in cell.group(1)
    assert "<b>slow (failing)</b> since" in row(page, seed.FAILING)
    assert 'data-slow="suspect"' in row(page, seed.SUSPECT)
    assert "data-slow" not in row(page, "gpu-001") and "slow (" not in row(page, "gpu-001")

    # the card's link narrows the matrix to the slow nodes
    link = htmllib.unescape(re.search(r'id="slow"[^>]*>\s*<div class="value"><a href="([^"]+)"', page).group(1))
    narrowed = slow_fleet.get(link).text
    assert re.findall(r'<tr data-node="([^"]+)">', narrowed[narrowed.index('id="matrix"'):]) == [
        seed.FAILING, seed.SUSPECT, seed.SIGNALLED]


def test_the_node_page_has_a_slow_section_and_keeps_the_probe_plots(slow_fleet):
    page = slow_fleet.get("/cluster-doctor/nodes/gpu-100").text
    section = re.search(r'<section id="slow" data-state="failing">(.*?)</section>', page, re.S).group(1)
    assert f"since {NOW - 2 * seed.H:%Y-%m-%d %H:%M} UTC" in section
    assert "Recommended action: <b class=\"action\">drain_and_service</b>" in section
    assert '<li class="probe">probe straggler:probe_gemm_tflops_min=623' in section
    assert "Cost (estimate): ~" in section and "GPU-hours at ~" in section
    # its gpu_health result passes, and is marked slow beside the pass
    latest = re.search(r'<tr id="test-gpu_health"[^>]*>(.*?)</tr>', page, re.S).group(1)
    assert 'data-status="pass"' in page and 'class="small slow-mark" href="#slow" data-state="failing"' in latest
    # the probe's figures over time, with the fleet band of the GPU model
    plot = re.search(r'<figure class="plot" data-test="gpu_health" data-metric="probe_gemm_tflops_min">(.*?)</figure>',
                     page, re.S)
    assert plot and "no fleet band" not in plot.group(1)

    suspect = slow_fleet.get("/cluster-doctor/nodes/gpu-300").text
    section = re.search(r'<section id="slow" data-state="suspect">(.*?)</section>', suspect, re.S).group(1)
    assert f'<li class="signal">signal {seed.SIGNAL}</li>' in section and "One sighting" in section
    healthy = slow_fleet.get("/cluster-doctor/nodes/gpu-001").text
    assert '<section id="slow"' not in healthy and 'class="small slow-mark"' not in healthy


def test_a_healthy_fleet_shows_no_slow_node(store, db_dsn):
    seed.fleet(store, NOW, slow=False)
    c = make_client(db_dsn, settings=SETTINGS)
    page = c.get("/cluster-doctor/").text
    assert re.search(r'id="slow" data-failing="0" data-suspect="0"', page)
    assert 'id="slow-nodes"' not in page and "data-slow" not in page and "failing slow" not in page
    assert '<section id="slow"' not in c.get("/cluster-doctor/nodes/gpu-001").text


def test_a_node_failing_slow_is_failing_on_the_page_in_status_the_metrics_and_the_daily_report(slow_fleet, store,
                                                                                                 db_dsn):
    from cluster_doctor.cli import main as cli
    from cluster_doctor.reports import daily
    from cluster_doctor.reports import metrics
    from cluster_doctor.store import fleet as stored_fleet

    from tests.support.metrics import samples

    page = slow_fleet.get("/cluster-doctor/").text
    card = re.search(r'id="failing">\s*<div class="value"><a href="[^"]*">(\d+)</a>', page)
    assert card and card.group(1) == "1"  # every gpu_health result passes: only gpu-100's slowness fails it
    failing = slow_fleet.get("/cluster-doctor/?status=failing").text
    assert re.findall(r'<tr data-node="([^"]+)">', failing[failing.index('id="matrix"'):]) == [seed.FAILING]
    healthy = slow_fleet.get("/cluster-doctor/?status=healthy&per_page=100").text
    listed = re.findall(r'<tr data-node="([^"]+)">', healthy[healthy.index('id="matrix"'):])
    assert seed.FAILING not in listed and seed.SUSPECT in listed  # a suspect is not failing

    with stored_fleet.open_for(SETTINGS, db_dsn, now=NOW) as q:
        summary = q.summary()
    assert summary["failing_nodes"] == 1
    assert "failing: 1 GPU node(s)" in cli.coverage_line(summary, 7)  # cluster-doctor status's line
    registry = metrics.make_registry(metrics.ClusterDoctorCollector(
        lambda s: db_dsn, lambda: SETTINGS, clock=lambda: NOW, cache_ttl_s=0))
    series = samples(metrics.render(registry, None)[0].decode())
    assert series[("cluster_doctor_fleet_failing_nodes", frozenset())] == 1
    assert series[("cluster_doctor_fleet_slow_nodes", frozenset({("state", "failing")}))] == 1
    data = daily.build(store, NOW.date(), tests=["gpu_health"], staleness_days=7, now=NOW, ui_base="/airflow/")
    assert data["fleet"]["failing_nodes"] == 1 and data["fleet"]["failing_total"] == 0  # its pairs all pass
    assert "- Failing GPU nodes at the end of the day: 1 (" in daily.render_markdown(data)
