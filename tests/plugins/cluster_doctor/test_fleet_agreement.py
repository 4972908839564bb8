"""One inventory of GPU nodes, one story: on the same results database the fleet page, the
daily report, ``cluster-doctor status``, the Prometheus metrics and the run summary count the same GPU
nodes — never-attempted ones included, a node that left counted only for the grace period — and agree
on coverage and never-validated nodes; each names its unit (GPU nodes or node-test pairs) beside the figure,
and the same thing has the same figure in each."""

from __future__ import annotations

import datetime as dt
import io
import re

from cluster_doctor.cli import main as cli
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.payloads import Discovered, RunSummary
from cluster_doctor.reports import daily, metrics
from cluster_doctor.reports import summary as run_summary
from cluster_doctor.store import inventory
from cluster_doctor.store.inventory import SeenNode
from cluster_doctor.web import app as webapp
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.support import fleet_seed as seed

H = dt.timedelta(hours=1)


def seed_fleet(store, now: dt.datetime) -> dict[str, list[str]]:
    """small_fleet's eight nodes with results, two GPU nodes nothing ever ran on (busy, cordoned), one
    that left an hour ago (counted: grace 24 h) and one that left two days ago (not counted)."""
    seed.small_fleet(store, now=now)
    with_results = ["gpu-001", "gpu-002", "gpu-003", "gpu-004", "gpu-005", "gpu-006", "gpu-010", "gpu-011"]
    store.record([seed.attempt("gpu-020", "gpu_health", "pass", now - 3 * 24 * H),
                  seed.attempt("gpu-021", "gpu_health", "pass", now - 3 * 24 * H)])
    seen = [SeenNode(n, 8, seed.H100, inventory.FREE) for n in with_results]
    seen += [SeenNode("gpu-012", 8, seed.H100, "busy", "ml/llm-pretrain-0 requests 8 nvidia.com/gpu"),
             SeenNode("gpu-013", 8, seed.A100, "cordoned", "spec.unschedulable is set")]
    inventory.record_discovery(store.connect, [*seen, SeenNode("gpu-020", 8, seed.H100, inventory.FREE)],
                               seen_at=now - 50 * H, complete=True)  # gpu-021 gone 50 h ago
    inventory.record_discovery(store.connect, seen, seen_at=now - H, complete=True)  # gpu-020 gone 1 h ago
    return {"counted": [*with_results, "gpu-012", "gpu-013", "gpu-020"],
            "never": ["gpu-006", "gpu-012", "gpu-013"]}


def test_page_daily_report_status_metrics_and_run_summary_agree(store, db_dsn, db_url, monkeypatch):
    now = dt.datetime.now(dt.UTC)
    expected = seed_fleet(store, now)
    settings = Settings()

    # the fleet page
    sub = webapp.create_app(connector_provider=lambda s: db_dsn, settings_provider=lambda: settings,
                            clock=lambda: now)
    sub.dependency_overrides[webapp.require_ui_access] = lambda: "sre"
    root = FastAPI()
    root.mount(webapp.MOUNT_PREFIX, sub)
    html = TestClient(root).get("/cluster-doctor/?per_page=200").text
    covered, nodes = map(int, re.search(r"coverage: (\d+) of (\d+) GPU nodes fully validated", html).groups())
    never, never_label = re.search(r'id="never">\s*<div class="value"><a [^>]*>(\d+)</a></div>\s*'
                                   r'<div class="label">([^<]+)</div>', html).groups()
    page = {"covered": covered, "nodes": nodes, "never": int(never)}
    assert never_label == "GPU nodes never validated"  # the unit, beside the figure
    stale, stale_label = re.search(r'id="stale">\s*<div class="value"><a [^>]*>(\d+)</a></div>\s*'
                                   r'<div class="label">([^<]+)</div>', html).groups()
    assert stale_label == "node · test pairs stale or never validated"
    assert re.findall(r'<tr data-node="([^"]+)"', html) == expected["counted"]

    # the daily report of today (as of now)
    data = daily.build(store, now.date(), tests=settings.tests, staleness_days=settings.staleness_days, now=now)
    report = {"covered": data["coverage"]["covered"], "nodes": data["coverage"]["nodes"],
              "never": sum(g["count"] for g in data["fleet"]["never_why"])}
    # what its reader sees says the unit of each figure: GPU nodes, or node-test pairs
    md = daily.render_markdown(data)
    report_nodes = int(re.search(r"Coverage: .*; never validated: (\d+) GPU node\(s\)", md).group(1))
    report_pairs = int(re.search(r"Node-test pairs in the fleet: \d+; .* never validated: (\d+) node-test "
                                 r"pair\(s\)", md).group(1))
    assert report_nodes == report["never"]
    cards = daily.render_html(data)
    assert f'<b>{data["fleet"]["counts"]["stale"] + report_pairs}</b>node-test pairs stale or never validated' in cards
    assert f"<b>{report_nodes}</b>GPU nodes never validated" in cards

    # cluster-doctor status
    out = io.StringIO()
    assert cli.main(["status", "--db-url", db_url], out=out) == 0
    line = re.search(r"coverage: (\d+)/(\d+) GPU node\(s\) .* never validated: (\d+) GPU node\(s\), "
                     r"(\d+) node-test pair\(s\);", out.getvalue())
    status = dict(zip(("covered", "nodes", "never"), map(int, line.groups()[:3]), strict=True))
    assert int(line.group(4)) == report_pairs  # the same figure for the same thing, in the same unit
    # a node nothing ever ran on is listed, with why
    assert re.search(r"gpu-012 +- +never attempted +busy since .*: ml/llm-pretrain-0 requests 8", out.getvalue())

    # the metrics
    collector = metrics.ClusterDoctorCollector(lambda s: db_dsn, lambda: settings, clock=lambda: now)
    samples = {f.name: f.samples for f in collector.collect()}
    value = {name.removeprefix("cluster_doctor_"): s[0].value for name, s in samples.items() if len(s) == 1}
    scraped = {"covered": int(value["fleet_covered_nodes"]), "nodes": int(value["fleet_gpu_nodes"]),
               "never": int(value["fleet_never_validated_nodes"])}
    helps = {f.name: f.documentation for f in collector.collect()}
    assert helps["cluster_doctor_fleet_never_validated_nodes"].startswith("GPU nodes ")
    assert helps["cluster_doctor_fleet_stale_pairs"].startswith("Node-test pairs ")
    assert int(value["fleet_stale_pairs"]) == int(stale) == data["fleet"]["counts"]["stale"] + report_pairs

    # the run summary (the DAG's verdict line)
    found = Discovered.of(settings=settings, params={"tests": settings.tests, "max_pairs": 16}, started_at=now,
                          free=[], ineligible=[("gpu-012", "busy"), ("gpu-013", "cordoned")])
    fleet_coverage, detail = run_summary.from_inventory(store, found, now)
    summary = {"covered": fleet_coverage.covered_nodes, "nodes": fleet_coverage.gpu_nodes,
               "never": len(fleet_coverage.never_validated)}
    verdict_text = run_summary.render(RunSummary(gpu_nodes=fleet_coverage.gpu_nodes, coverage=fleet_coverage))
    assert f"never validated: {summary['never']} GPU node(s);" in verdict_text

    truth = {"covered": 5, "nodes": len(expected["counted"]), "never": len(expected["never"])}
    assert page == report == status == scraped == summary == truth
    assert sorted(fleet_coverage.never_validated) == expected["never"]
    assert [d.detail for d in detail] == ["busy since " + (now - 50 * H).strftime("%Y-%m-%d %H:%M")
                                          + " UTC: ml/llm-pretrain-0 requests 8 nvidia.com/gpu",
                                          "cordoned since " + (now - 50 * H).strftime("%Y-%m-%d %H:%M")
                                          + " UTC: spec.unschedulable is set"]
    by_state = {s.labels["eligibility"]: s.value for s in samples["cluster_doctor_fleet_nodes_by_eligibility"]}
    assert by_state == {"busy": 1, "cordoned": 1, "free": 8, "gone": 1}
