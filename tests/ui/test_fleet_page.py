"""The fleet health page in a real Airflow UI, driven by headless Chromium (Debian's /usr/bin/chromium).

One real ``airflow api-server`` for the module (SimpleAuthManager with a known user, this repo's
plugins/), a seeded results DB passed as AIRFLOW_CONN_VALIDATION_DB. Proves: the page and the
metrics are behind auth; a user logs in through the real login form, opens the page from the
navigation, sees seeded pass and fail rows and the coverage chart, narrows them with a filter, opens a
node's history and metric plots and follows the link to the task instance. Saves
artifacts/fleet_page.png (with the coverage chart) and artifacts/fleet_node.png (with the plots).
"""

from __future__ import annotations

import datetime as dt
import re
import urllib.error
import urllib.request

import pytest
from cluster_doctor.store import inventory
from cluster_doctor.store.history import ResultStore

from tests import clock
from tests.conftest import REPO, _fresh_database, dsn_to_url
from tests.support import fleet_seed as seed
from tests.support.airflow_server import api_server, chromium, sign_in

# clock: the api-server computes ages with the real clock (tests/test_clock.py moves it)
pytestmark = [pytest.mark.ui, pytest.mark.requires_tool("chromium")]

USER, PASSWORD = "sre", "correct-horse-battery-staple"
NEVER_ATTEMPTED = "gpu-012"  # a GPU node discovery saw and nothing ever ran on
ARTIFACTS = REPO / "artifacts"


@pytest.fixture(scope="module")
def results_db(pg_admin_dsn, template_db):
    with _fresh_database(pg_admin_dsn, template_db) as dsn:
        # relative to the real clock: the api-server computes ages with it
        now = clock.now()
        store = ResultStore(dsn)
        expected = seed.small_fleet(store, now=now)
        seed.plot_history(store, now=now)  # six weeks of older runs: plots and a coverage trend
        # what the last discovery saw: the nodes above, and one nothing ever ran on (busy for 3 h)
        seen = [inventory.SeenNode(n, 8, seed.H100, inventory.FREE) for n in expected["nodes"]]
        inventory.record_discovery(store.connect, [*seen, inventory.SeenNode(
            NEVER_ATTEMPTED, 8, seed.H100, "busy", "ml-team/llm-pretrain-7 requests 8 nvidia.com/gpu")],
            seen_at=now - dt.timedelta(hours=3), complete=True)
        expected = {**expected, "nodes": [*expected["nodes"], NEVER_ATTEMPTED]}
        yield dsn_to_url(dsn), expected


@pytest.fixture(scope="module")
def server(tmp_path_factory, results_db):
    # five H100 nodes in the seed: the fleet band needs three here (ten by default)
    with api_server(tmp_path_factory.mktemp("airflow_home"), users={USER: "viewer"}, passwords={USER: PASSWORD},
                    results_db_url=results_db[0],
                    extra_env={"CLUSTER_DOCTOR_FLEET_VERDICTS": '{"min_fleet_nodes": 3}'}) as base:
        yield base


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def fetch(url: str, accept: str = "application/json") -> tuple[int, str, str]:
    """(status, Location, body) without following redirects and without any credential."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers={"Accept": accept}), timeout=10) as r:
            return r.status, r.headers.get("Location", ""), r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Location", ""), exc.read().decode()


def test_page_and_metrics_are_behind_auth(server, browser):
    for path in ("/cluster-doctor/", "/cluster-doctor/nodes/gpu-003", "/cluster-doctor/metrics"):
        status, _, body = fetch(server + path)
        assert status == 401, path
        assert "gpu-003" not in body and "cluster_doctor_" not in body
    status, location, _ = fetch(server + "/cluster-doctor/?status=fail", accept="text/html")
    assert status == 303 and location.startswith("/auth/login?next=")
    # a browser without a session lands on the real login form, no data on the way
    context = browser.new_context()
    try:
        page = context.new_page()
        response = page.goto(server + "/cluster-doctor/")
        assert "/auth/login" in page.url
        assert "gpu-003" not in page.content()
        assert response is not None and response.ok  # the login page itself
    finally:
        context.close()


def visible_box(locator) -> dict:
    """The element's box on screen; it must be rendered with a size (not hidden, not collapsed)."""
    locator.scroll_into_view_if_needed()
    assert locator.is_visible()
    box = locator.bounding_box()
    assert box is not None and box["width"] > 50 and box["height"] > 50, box
    return box


def test_login_navigate_filter_and_open_history(server, browser, results_db):
    ARTIFACTS.mkdir(exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    problems: list[str] = []
    page = context.new_page()
    page.on("console", lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    try:
        # 1. log in through the real form (the UI sends anonymous users there)
        sign_in(page, server, USER, PASSWORD)
        assert any(c["name"] == "_token" for c in context.cookies())

        # 2. the page is in the UI's navigation and opens inside the UI
        nav = page.get_by_role("link", name="Fleet", exact=True)
        # the whole label shows: no element of the nav button is cut ("Fleet he…" before)
        assert nav.evaluate("a => [a, ...a.querySelectorAll('*')].every(e => e.scrollWidth <= e.clientWidth + 1)")
        assert nav.inner_text().strip() == "Fleet"
        nav.click()
        page.wait_for_url(re.compile(r".*/plugin/fleet-health.*"), timeout=20_000)
        frame = page.frame_locator("iframe[title='Fleet']")
        rows = frame.locator("#matrix tbody tr[data-node]")
        rows.first.wait_for(timeout=20_000)
        assert rows.evaluate_all("rs => rs.map(r => r.dataset.node)") == results_db[1]["nodes"]
        assert frame.locator("#coverage .value").inner_text() == "55.6 %"  # 5 of 9, rounded as the CLI does
        assert frame.locator("#failing .value").inner_text() == "2"
        # beside it, the slow nodes (they pass their floors, so no status counts them): none in this fleet
        assert frame.locator("#slow .value").inner_text() == "0 / 0"
        fail_cell = frame.locator("tr[data-node='gpu-003'] td[data-test='nccl_loopback']")
        assert fail_cell.get_attribute("data-status") == "fail"
        assert frame.locator("tr[data-node='gpu-001'] td[data-test='dl_unit']").get_attribute("data-status") == "pass"
        # the reason shows on hover as plain text: escaped once, never executed
        assert seed.XSS_REASON in fail_cell.get_attribute("title")
        # a failing cell says, on the page itself, what to do and why (short); a never cell is quieter
        error_cell = frame.locator("tr[data-node='gpu-004'] td[data-test='dl_unit']")
        assert error_cell.locator(".why").inner_text() == "action: retest · dl_unit: CUDA OOM in the attention test"
        assert error_cell.locator(".why").is_visible()
        assert fail_cell.locator(".why .action").inner_text() == "unknown"  # a fail whose checks name no action
        never_cell = frame.locator("tr[data-node='gpu-006'] td[data-test='dl_unit']")
        assert never_cell.get_attribute("data-status") == "never"
        opacity = "el => Number(getComputedStyle(el).opacity)"
        assert never_cell.locator("a").evaluate(opacity) < error_cell.locator("a").evaluate(opacity)
        weight = "el => Number(getComputedStyle(el).fontWeight)"
        assert error_cell.locator("a").evaluate(weight) > never_cell.locator("a").evaluate(weight)
        assert "Insufficient nvidia.com/gpu" in never_cell.get_attribute("title")  # the whole reason: on hover
        tried = never_cell.locator(".tried").inner_text()  # a short word on the page, clipped
        assert tried.startswith("timeout ") and tried.endswith("…") and "Insufficient" not in tried, tried
        # the coverage chart: drawn, with one point per day of the last 30 (the last one now)
        chart = frame.locator("svg#coverage-chart")
        visible_box(chart)
        assert chart.locator("circle").count() == 30
        assert chart.locator("polyline.series-pair_coverage").count() == 1
        page.screenshot(path=str(ARTIFACTS / "fleet_page.png"), full_page=True)

        # 3. a filter narrows the rows (server-side), and the UI's URL keeps it
        frame.locator("select[name='status']").select_option("failing")
        frame.locator("button[type='submit']").click()
        frame.locator("#match-count", has_text="2 nodes match").wait_for(timeout=10_000)
        assert rows.evaluate_all("rs => rs.map(r => r.dataset.node)") == ["gpu-003", "gpu-004"]
        page.wait_for_url(re.compile(r".*/plugin/fleet-health/cluster-doctor/\?.*status=failing.*"), timeout=10_000)
        frame.locator("input[name='nodes']").fill("gpu-00[4-9]")
        frame.locator("button[type='submit']").click()
        frame.locator("#match-count", has_text="1 node match").wait_for(timeout=10_000)
        assert rows.evaluate_all("rs => rs.map(r => r.dataset.node)") == ["gpu-004"]

        # 4. a node's history: attempts, reasons as text, the task instance link
        frame.locator("input[name='nodes']").fill("")
        frame.locator("button[type='submit']").click()
        frame.locator("#match-count", has_text="2 nodes match").wait_for(timeout=10_000)
        frame.locator("a.node-link", has_text="gpu-003").click()
        frame.locator("#history").wait_for(timeout=10_000)
        assert frame.locator("#node-name").inner_text() == "gpu-003"
        latest = frame.locator("#latest tr[data-test='nccl_loopback']")
        assert latest.get_attribute("data-status") == "fail"
        assert seed.XSS_REASON in latest.locator("td.reason").inner_text()
        history = frame.locator("#history tbody tr")
        assert history.count() == 49 and history.first.get_attribute("data-status") == "fail"  # 5 + 44 older
        assert frame.locator("body").evaluate("() => window.__xss") is None  # nothing injected ran
        # the metric plots: every judged metric drawn with points, the fleet band and status changes
        plots = frame.locator("#plots svg.metric-plot")
        assert plots.count() == 9  # dl_unit 2, nccl 1, storage 4, the speed probe 2
        for i in range(plots.count()):
            visible_box(plots.nth(i))
        nccl = frame.locator("svg#plot-nccl_loopback-nccl_busbw_gbps")
        assert nccl.locator("circle.point").count() == 13 and nccl.locator("circle.st-fail").count() == 1
        band = nccl.locator("rect.band").bounding_box()
        assert band is not None and band["width"] > 10 and band["height"] > 0
        assert nccl.locator("g.transition.to-fail").count() == 1
        gemm = frame.locator("svg#plot-dl_unit-gemm_bf16_tflops_min")
        assert gemm.locator("g.transition.to-fail").count() == 1 and gemm.locator("g.transition.to-pass").count() == 1
        marker = gemm.locator("g.transition.to-fail path").bounding_box()
        assert marker is not None and marker["width"] > 0 and marker["height"] > 0
        # the UI sizes its iframe to the window: a taller one shows the latest results and every plot
        page.set_viewport_size({"width": 1400, "height": 1400})
        frame.locator("#back").scroll_into_view_if_needed()
        visible_box(frame.locator("#plots"))
        page.screenshot(path=str(ARTIFACTS / "fleet_node.png"), full_page=True)
        page.set_viewport_size({"width": 1400, "height": 900})
        frame.locator("#back").click()  # back to the filtered fleet
        frame.locator("#match-count", has_text="2 nodes match").wait_for(timeout=10_000)

        # 5. the task instance link leaves the iframe and opens Airflow's task instance page
        frame.locator("a.node-link", has_text="gpu-003").click()
        link = frame.locator("#history a.ti-link").first
        href = link.get_attribute("href")
        assert re.fullmatch(r"/dags/continuous_validation/runs/scheduled__[^/]+/tasks/validate\.[a-z_]+/mapped/7"
                            r"\?try_number=1", href)
        link.click()
        page.wait_for_url(re.compile(r".*/dags/continuous_validation/runs/.+/tasks/validate\.[a-z_]+/mapped/7"
                                     r"\?try_number=1$"),
                          timeout=10_000)
        assert "/plugin/" not in page.url  # the whole UI navigated, not the iframe
        assert problems == []
    finally:
        context.close()


def test_a_never_attempted_gpu_node_is_listed_with_its_reason(server, browser):
    """A GPU node discovery saw and nothing ever ran on is a row of the fleet, never
    validated, with why (busy for 3 h, by whom); the "not eligible" card and filter find it; its node
    page is not "Unknown node"."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        sign_in(page, server, USER, PASSWORD)
        page.goto(server + "/plugin/fleet-health")
        frame = page.frame_locator("iframe[title='Fleet']")
        row = frame.locator(f"#matrix tr[data-node='{NEVER_ATTEMPTED}']")
        row.wait_for(timeout=20_000)
        visible_box(frame.locator("#matrix"))
        cells = row.locator("td[data-test]")
        assert cells.evaluate_all("cs => cs.map(c => c.dataset.status)") == ["never"] * 4
        now = row.locator("td.now")
        assert now.get_attribute("data-eligibility") == "busy"
        # seen busy 3 h before the seed: what the page says is that plus the minutes the module took so far
        busy = re.fullmatch(r"busy for (\d+) h(?: (\d+) min)?", now.locator(".now-label").inner_text())
        assert busy and 175 <= int(busy[1]) * 60 + int(busy[2] or 0) <= 200, now.inner_text()
        assert "ml-team/llm-pretrain-7 requests 8 nvidia.com/gpu" in now.get_attribute("title")
        assert now.locator(".holder").inner_text() == "ml-team/llm-pretrain-7 requests 8 nvidia.com/gpu"  # who holds it, and how much
        assert frame.locator("#never .value").inner_text() == "2"  # gpu-006 (timeouts only) and gpu-012
        card = frame.locator("#not-eligible")
        assert card.locator(".value").inner_text() == "1" and "busy 1" in card.inner_text()
        card.locator(".value a").click()
        frame.locator("#match-count", has_text="1 node match").wait_for(timeout=10_000)
        assert frame.locator("#matrix tbody tr[data-node]").evaluate_all(
            "rs => rs.map(r => r.dataset.node)") == [NEVER_ATTEMPTED]
        page.screenshot(path=str(ARTIFACTS / "fleet_never_attempted.png"), full_page=True)
        frame.locator("a.node-link", has_text=NEVER_ATTEMPTED).click()
        frame.locator("#latest").wait_for(timeout=10_000)  # its tests, all never executed: not an unknown node
        assert frame.locator("#node-name").inner_text() == NEVER_ATTEMPTED
        assert frame.locator("#latest tbody tr").count() == 4
    finally:
        context.close()
