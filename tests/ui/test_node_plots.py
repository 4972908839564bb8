"""The node page's metric plots on demo-like data, rendered by headless Chromium (Debian's /usr/bin/chromium).

The data is what ``make demo`` leaves: its seeded earlier runs (tools/demo.py ``seed_history``, CPU-mode
figures) plus a run of every suite on its nodes with the figures the suites record in CPU mode (dl_unit's
GEMM in fp32, no bf16) and gpu-004's injected ECC fault. The page comes from the real app (its auth
dependency overridden: tests/ui/test_fleet_page.py covers Airflow's login) and is laid out by a real
browser, which proves what the SVG text alone cannot: every plot is drawn with its points, and its time
labels are distinct and do not overlap on screen. Saves artifacts/node_plots_demo.png.
"""

from __future__ import annotations

import datetime as dt

import demo
import pytest
from cluster_doctor.domain import suites
from cluster_doctor.domain.config import Settings
from cluster_doctor.store.history import ResultStore
from cluster_doctor.web import app as webapp
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.conftest import REPO, _fresh_database, dsn_to_url
from tests.support.airflow_server import chromium

pytestmark = [pytest.mark.ui, pytest.mark.requires_tool("chromium")]

NOW = dt.datetime(2026, 11, 25, 14, 34, tzinfo=dt.UTC)
NODES = [f"gpu-00{i}" for i in range(1, 7)]
ARTIFACTS = REPO / "artifacts"


@pytest.fixture(scope="module")
def pages(pg_admin_dsn, template_db) -> dict[str, str]:
    """The node pages of the demo's nodes, as the app renders them."""
    with _fresh_database(pg_admin_dsn, template_db) as dsn:
        url = dsn_to_url(dsn)
        demo.seed_history(url, now=NOW)
        run = []
        for i, node in enumerate(NODES):
            for j, test in enumerate(suites.CATALOG):
                when = NOW - dt.timedelta(minutes=40 - 5 * j)
                fault = node == demo.FAULTY and test == "gpu_health"
                run.append({"node_name": node, "test_name": test, "status": "fail" if fault else "pass",
                            "finished_at": when, "duration_s": 60.0, "gpu_model": "NVIDIA-H100-80GB-HBM3",
                            "gpu_count": 8, "metrics": demo.cpu_mode_metrics(test, node, when),
                            "reason": "ecc_uncorrected_volatile on GPU 3: 2 errors" if fault else None,
                            "dag_id": "continuous_validation", "run_id": "manual__demo", "map_index": i * 4 + j})
        ResultStore(url).record(run)
        sub = webapp.create_app(connector_provider=lambda _s: dsn, settings_provider=Settings,
                                clock=lambda: NOW)
        sub.dependency_overrides[webapp.require_ui_access] = lambda: "viewer"
        root = FastAPI()
        root.mount(webapp.MOUNT_PREFIX, sub)
        client = TestClient(root)
        yield {node: client.get(f"/cluster-doctor/nodes/{node}").text for node in NODES}


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


# What the browser reports of each plot: its points, its line, and its time labels with their boxes.
PLOTS_JS = """() => [...document.querySelectorAll('#plots svg.metric-plot')].map(svg => ({
    id: svg.id,
    points: svg.querySelectorAll('circle.point').length,
    line: svg.querySelectorAll('polyline.series').length,
    ticks: [...svg.querySelectorAll('text.time-tick')].map(t => {
        const r = t.getBoundingClientRect();
        return {label: t.textContent, left: r.left, right: r.right, width: r.width};
    }),
    box: (r => ({left: r.left, right: r.right}))(svg.getBoundingClientRect()),
}))"""


def test_every_plot_of_the_demo_nodes_has_points_and_distinct_readable_time_labels(pages, browser):
    ARTIFACTS.mkdir(exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 1600})
    try:
        page = context.new_page()
        seen = set()
        for node, html in pages.items():
            page.set_content(html)
            assert page.locator(".metric-plot-empty").count() == 0, node  # no "no value recorded" plot
            plots = page.evaluate(PLOTS_JS)
            seen |= {p["id"].split("-", 2)[2] for p in plots}
            assert plots, f"{node}: no plot"
            for plot in plots:
                where = f"{node} {plot['id']}"
                assert plot["points"] >= 1, where
                labels = [t["label"] for t in plot["ticks"]]
                assert len(labels) >= 3 and len(set(labels)) == len(labels), (where, labels)
                for tick in plot["ticks"]:  # on screen, inside the plot, not cut
                    assert tick["width"] > 0 and plot["box"]["left"] <= tick["left"] <= tick["right"] <= \
                        plot["box"]["right"] + 0.5, (where, tick)
                for a, b in zip(plot["ticks"], plot["ticks"][1:]):
                    assert a["right"] < b["left"], (where, a, b)  # readable: no two labels overlap
            if node == "gpu-001":  # two weeks of earlier runs and this one: lines, not dots
                assert any(p["line"] == 1 and p["points"] >= 3 for p in plots), plots
                page.screenshot(path=str(ARTIFACTS / "node_plots_demo.png"), full_page=True)
        # CPU mode's GEMM is plotted; the bf16 GEMM, which CPU mode does not measure, is not drawn empty
        assert {"gemm_fp32_tflops_min", "mem_bw_gbps_min", "nccl_busbw_gbps", "fio_seq_read_mibps"} <= seen
        assert "gemm_bf16_tflops_min" not in seen
    finally:
        context.close()
