"""Every "never" says why, in a real Airflow UI driven by headless Chromium: on the fleet page a
pair whose only attempt did not run its suite shows that attempt and its reason in the cell (not "never"
beside a "Last attempt" of minutes ago), a busy node shows who holds it in the row (not only in a
tooltip); the page of a never-validated node says why (not eligible since when and by whom, or due and
waiting), and in CPU mode a key figure like gpus_visible 0 beside the node's 8 GPUs says it is CPU mode.

One api-server for the module, with the suites' device set to cpu (CLUSTER_DOCTOR_SUITE_DEVICE), as
`make demo` and `make up` run them."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from cluster_doctor.store import inventory
from cluster_doctor.store.history import ResultStore

from tests import clock
from tests.conftest import REPO, _fresh_database, dsn_to_url
from tests.support import fleet_seed as seed
from tests.support.airflow_server import api_server, chromium, sign_in

pytestmark = [pytest.mark.ui, pytest.mark.requires_tool("chromium")]

USER, PASSWORD = "sre", "correct-horse-battery-staple"
BUSY = "gpu-012"  # seen busy, nothing ever ran on it
HOLDER = "ml-team/llm-pretrain-7 requests 8 nvidia.com/gpu"
SKIPPED_ONLY = ("gpu-010", "dl_unit")  # its only attempt was skipped 11 minutes ago
SKIP_REASON = "node busy at submit time: inference/vllm-7b-5d9f requests 8 nvidia.com/gpu"
ARTIFACTS = REPO / "artifacts"


@pytest.fixture(scope="module")
def results_db(pg_admin_dsn, template_db):
    with _fresh_database(pg_admin_dsn, template_db) as dsn:
        now = clock.now()  # the api-server computes ages with the real clock
        store = ResultStore(dsn)
        expected = seed.small_fleet(store, now=now)
        store.record([
            seed.attempt(*SKIPPED_ONLY, "skipped", now - dt.timedelta(minutes=11), duration_s=None,
                         reason=SKIP_REASON),
            # gpu_health in CPU mode: no GPU visible on a node of 8
            seed.attempt("gpu-001", "gpu_health", "pass", now - dt.timedelta(minutes=30),
                         metrics={"gpus_visible": 0, "xid_events": 0}),
        ])
        seen = [inventory.SeenNode(n, 8, seed.H100, inventory.FREE) for n in expected["nodes"]]
        inventory.record_discovery(store.connect, [*seen, inventory.SeenNode(BUSY, 8, seed.H100, "busy", HOLDER)],
                                   seen_at=now - dt.timedelta(hours=3), complete=True)
        yield dsn_to_url(dsn)


@pytest.fixture(scope="module")
def page(tmp_path_factory, results_db):
    with api_server(tmp_path_factory.mktemp("airflow_home"), users={USER: "viewer"}, passwords={USER: PASSWORD},
                    results_db_url=results_db, extra_env={"CLUSTER_DOCTOR_SUITE_DEVICE": "cpu"}) as base, \
            chromium() as browser:
        page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
        sign_in(page, base, USER, PASSWORD)
        page.base = base
        yield page


def fleet(page):
    page.goto(page.base + "/plugin/fleet-health")
    frame = page.frame_locator("iframe[title='Fleet']")
    frame.locator("#matrix tbody tr[data-node]").first.wait_for(timeout=20_000)
    return frame


def node_page(page, node: str):
    page.goto(f"{page.base}/cluster-doctor/nodes/{node}")
    page.locator("#latest").wait_for(timeout=20_000)
    return page


def test_a_never_cell_shows_its_last_attempt_and_why(page):
    frame = fleet(page)
    node, test = SKIPPED_ONLY
    cell = frame.locator(f"tr[data-node='{node}'] td[data-test='{test}']")
    assert cell.get_attribute("data-status") == "never"
    text = cell.inner_text()  # what is on the page, not the tooltip
    assert re.search(r"skipped 1[12] min ago: node busy at submit", text), text  # short: the rest on hover
    assert "node busy at submit time" in cell.get_attribute("title")
    # a pair nothing ever attempted says nothing more than never
    assert frame.locator(f"tr[data-node='{BUSY}'] td[data-test='dl_unit']").inner_text().strip() == "never"
    ARTIFACTS.mkdir(exist_ok=True)
    frame.locator("#matrix").screenshot(path=str(ARTIFACTS / "fleet_never_says_why.png"))


def test_a_busy_node_shows_who_holds_it_in_the_row(page):
    now = fleet(page).locator(f"tr[data-node='{BUSY}'] td.now")
    assert now.get_attribute("data-eligibility") == "busy"
    assert now.locator(".holder").is_visible()
    assert now.locator(".holder").inner_text() == HOLDER  # by whom, in the row itself
    assert re.fullmatch(r"busy for \d+ h(?: \d+ min)?", now.locator(".now-label").inner_text())


def test_the_page_of_a_never_validated_node_says_why(page):
    busy = node_page(page, BUSY)
    why = busy.locator("#never-why").inner_text()
    assert why.startswith("Never validated: not eligible: busy since ") and HOLDER in why, why
    busy.screenshot(path=str(ARTIFACTS / "node_never_says_why.png"))
    timeouts = node_page(page, "gpu-006")  # free at the last discovery, its attempts timed out
    why = timeouts.locator("#never-why").inner_text()
    assert "free at the last discovery" in why and "due, waiting for a run" in why, why
    latest = timeouts.locator("#latest tr[data-test='gpu_health']")
    assert "timeout" in latest.inner_text() and "Insufficient nvidia.com/gpu" in latest.inner_text()
    validated = node_page(page, "gpu-001")
    assert validated.locator("#never-why").count() == 0  # nothing to explain; what it is now, all the same
    assert validated.locator("#now").inner_text().startswith("Now: free since ")


def test_in_cpu_mode_gpus_visible_0_says_it_is_cpu_mode(page):
    node = node_page(page, "gpu-001")
    assert "CPU mode" in node.locator("#cpu-mode").inner_text()
    row = node.locator("#history tbody tr[data-test='gpu_health']").first
    assert "gpus_visible 0 (CPU mode: the suite ran without a GPU)" in row.inner_text()
    assert row.locator("td").nth(6).inner_text() == "8"  # the node's GPUs, beside it
