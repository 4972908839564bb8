"""cluster_doctor.web.app: the fleet page behind Airflow's auth, rendered from a real PostgreSQL.

The app is mounted under /cluster-doctor of a bare FastAPI app, as the api-server mounts it. The auth
tests run Airflow's real get_user / SimpleAuthManager code with real JWTs; only the revoked-token
lookup (a metadata-DB query) is stubbed. tests/ui/test_fleet_page.py covers the real api-server.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest
from cluster_doctor.domain import coverage
from cluster_doctor.domain.config import Settings
from cluster_doctor.store.history import ResultStore
from cluster_doctor.web import app as webapp
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.conftest import _fresh_database
from tests.support import fleet_seed as seed
from tests.support.web import JWT_SECRET, make_client


@pytest.fixture
def client(small_db):
    return make_client(small_db)


def rows(html: str) -> list[str]:
    return re.findall(r'<tr data-node="([^"]+)"', html)


# ---------------------------------------------------------------------------------------- auth
@pytest.fixture
def airflow_auth(monkeypatch):
    """Airflow's SimpleAuthManager as the api-server's auth manager, and a valid JWT for a viewer."""
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", JWT_SECRET)
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "sre:viewer")
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
    from airflow.api_fastapi import app as airflow_app
    from airflow.api_fastapi.auth.managers.base_auth_manager import BaseAuthManager
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.models.revoked_token import RevokedToken

    def clear():  # the signer/validator are cached per process with the secret of their first use
        BaseAuthManager._get_token_signer.__func__.cache_clear()
        BaseAuthManager._get_token_validator.__func__.cache_clear()

    clear()
    monkeypatch.setattr(RevokedToken, "is_revoked", classmethod(lambda cls, jti, **kw: False))
    manager = SimpleAuthManager()
    monkeypatch.setattr(airflow_app._AuthManagerState, "instance", manager)
    token = manager.generate_jwt(SimpleAuthManagerUser(username="sre", role="viewer"))
    yield manager, token
    clear()


def test_anonymous_browser_is_sent_to_the_login_page(small_db, airflow_auth):
    c = make_client(small_db, authenticated=False)
    r = c.get("/cluster-doctor/?status=fail", headers={"Accept": "text/html"})
    assert r.status_code == 303
    # back to the page inside the Airflow UI (the external view), filters kept
    assert r.headers["location"] == "/auth/login?next=%2Fplugin%2Ffleet-health%2Fcluster-doctor%2F%3Fstatus%3Dfail"
    r = c.get("/cluster-doctor/nodes/gpu-003", headers={"Accept": "text/html"})
    assert r.status_code == 303 and r.headers["location"].startswith("/auth/login?next=")


def test_anonymous_api_client_gets_401_without_any_data(small_db, airflow_auth):
    c = make_client(small_db, authenticated=False)
    for path in ("/cluster-doctor/", "/cluster-doctor/nodes/gpu-003", "/cluster-doctor/metrics"):
        r = c.get(path, headers={"Accept": "application/json"})
        assert r.status_code == 401, path
        assert "gpu-003" not in r.text and "cluster_doctor_" not in r.text


def test_forged_or_foreign_tokens_are_refused(small_db, airflow_auth):
    c = make_client(small_db, authenticated=False)
    _, token = airflow_auth
    header, payload, _sig = token.split(".")
    for bad in ("not-a-jwt", f"{header}.{payload}.AAAA"):
        r = c.get("/cluster-doctor/", headers={"Authorization": f"Bearer {bad}"})
        assert r.status_code == 403 and "gpu-0" not in r.text


def test_valid_jwt_in_cookie_or_header_sees_the_page(small_db, airflow_auth):
    c = make_client(small_db, authenticated=False)
    _, token = airflow_auth
    r = c.get("/cluster-doctor/", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and "gpu-003" in r.text
    c.cookies.set("_token", token)  # what the UI's login sets
    r = c.get("/cluster-doctor/nodes/gpu-003")
    assert r.status_code == 200 and "nccl_loopback" in r.text


def test_auth_manager_decides_authorization(small_db, airflow_auth, monkeypatch):
    manager, token = airflow_auth
    seen = {}

    def deny(*, method, access_entity, details, user):
        seen.update(method=method, entity=access_entity.name, dag_id=details.id, user=user.username)
        return False

    monkeypatch.setattr(manager, "is_authorized_dag", deny)
    c = make_client(small_db, authenticated=False)
    r = c.get("/cluster-doctor/", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 403 and "gpu-003" not in r.text
    assert seen == {"method": "GET", "entity": "TASK_INSTANCE", "dag_id": "continuous_validation", "user": "sre"}


# ---------------------------------------------------------------------------------------- content
def test_summary_and_matrix(client):
    r = client.get("/cluster-doctor/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    assert re.search(r'id="coverage">\s*<div class="value">62\.5 %</div>', html)
    assert "5 of 8 GPU nodes fully validated within 7 days" in html
    assert re.search(r'id="never">\s*<div class="value"><a [^>]*>1</a>', html)
    assert re.search(r'id="failing">\s*<div class="value"><a [^>]*>2</a>', html)
    assert "30.9" in html  # GPU-hours, 7 days
    assert "every GPU node discovery has seen" in html  # the definition is on the page
    assert rows(html) == ["gpu-001", "gpu-002", "gpu-003", "gpu-004", "gpu-005", "gpu-006", "gpu-010", "gpu-011"]
    assert re.search(r'class="cell" data-test="nccl_loopback" data-status="fail" title="nccl_loopback: fail since '
                     + _utc(seed.NOW - dt.timedelta(hours=1)) + r' \(1 h\), before: pass', html)
    assert 'class="cell stale" data-test="gpu_health" data-status="pass"' in html  # gpu-005: 10 days old
    assert 'data-test="dl_unit" data-status="never"' in html


@pytest.mark.parametrize("query, expected", [
    ("status=failing", ["gpu-003", "gpu-004"]),
    ("status=never", ["gpu-006"]),
    ("nodes=gpu-[001-002]", ["gpu-001", "gpu-002"]),
    ("nodes=gpu-01*", ["gpu-010", "gpu-011"]),
    (f"gpu_model={seed.A100}", ["gpu-002"]),
    ("status=healthy&nodes=gpu-00?", ["gpu-001", "gpu-002"]),
])
def test_filters_narrow_the_rows(client, query, expected):
    r = client.get(f"/cluster-doctor/?{query}")
    assert r.status_code == 200 and rows(r.text) == expected
    assert f"{len(expected)} node" in r.text


@pytest.mark.parametrize("query, message", [
    ("nodes=gpu-[1-", "unbalanced"),
    ("nodes=GPU_01", "not a valid Kubernetes node name"),
    ("status=nonsense", "unknown status filter"),
])
def test_invalid_filters_are_refused_with_a_message(client, query, message):
    r = client.get(f"/cluster-doctor/?{query}")
    assert r.status_code == 400 and message in r.text and rows(r.text) == []


def test_reasons_and_names_are_escaped(client):
    for path in ("/cluster-doctor/", "/cluster-doctor/nodes/gpu-003"):
        html = client.get(path).text
        assert "<script>window.__xss" not in html and "<img src=x" not in html
        assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in html
    # echoed back in the filter input's value and in the error message of the invalid range
    r = client.get('/cluster-doctor/', params={"nodes": '"><script>alert(1)</script>'})
    assert r.status_code == 400 and "<script>alert(1)" not in r.text
    assert 'value="&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"' in r.text


def test_pages_carry_a_restrictive_csp_with_a_nonce(client):
    r = client.get("/cluster-doctor/")
    csp = r.headers["content-security-policy"]
    nonce = re.search(r"'nonce-([^']+)'", csp).group(1)
    assert f'<script nonce="{nonce}">' in r.text and "default-src 'none'" in csp and "frame-ancestors 'self'" in csp
    assert r.text.count("<script") == 1  # no other script than the nonced one


def test_node_page_history_metrics_and_task_instance_links(client):
    r = client.get("/cluster-doctor/nodes/gpu-003?q=status%3Dfailing%26evil%3D1")
    assert r.status_code == 200
    html = r.text
    assert 'id="node-name">gpu-003<' in html
    assert 'href="/cluster-doctor/?status=failing" id="back"' in html  # filters kept, junk dropped
    # latest results: status, since, key figure, failing check
    assert re.search(r'<tr id="test-nccl_loopback" data-test="nccl_loopback" data-status="fail">', html)
    assert "nccl_busbw_gbps <b>12.50</b>" in html and "gemm_bf16_tflops_min <b>731.5</b>" in html
    assert "✗ nccl_loopback.check" in html
    # the task instance that produced the result, in the Airflow 3.3 UI's route
    run_hour = (seed.NOW - dt.timedelta(hours=2)).strftime("%Y-%m-%dT%H")  # seed.attempt's run_id
    assert (f'href="/dags/continuous_validation/runs/scheduled__{run_hour}%3A00%3A00%2B00%3A00/tasks/'
            'validate.nccl_loopback/mapped/7?try_number=1" target="_top"') in html
    history = re.findall(r'<tr data-test="([a-z_]+)" data-status="([a-z]+)">', html.split('id="history"')[1])
    assert history[0] == ("nccl_loopback", "fail") and len(history) == 5
    only = client.get("/cluster-doctor/nodes/gpu-003?test=nccl_loopback").text.split('id="history"')[1]
    assert {t for t, _ in re.findall(r'<tr data-test="([a-z_]+)" data-status="([a-z]+)">', only)} == {"nccl_loopback"}


@pytest.fixture(scope="module")
def plots_db(pg_admin_dsn, template_db):
    with _fresh_database(pg_admin_dsn, template_db) as dsn:
        store = ResultStore(dsn)
        seed.small_fleet(store)
        seed.plot_history(store)
        yield dsn


def _utc(at: dt.datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC")


def _svgs(html: str) -> dict[str, str]:
    return {m.group(1): m.group(0) for m in re.finditer(r'<svg id="plot-([a-z_]+-[a-z0-9_]+)".*?</svg>', html, re.S)}


def test_node_page_plots_metric_history_with_fleet_band_and_status_changes(plots_db):
    # five H100 nodes in the seed: a band needs three here (the default minimum is ten)
    settings = Settings(fleet_verdicts={"min_fleet_nodes": 3})
    c = make_client(plots_db, settings=settings)
    html = c.get("/cluster-doctor/nodes/gpu-003").text
    plots = _svgs(html)
    # gpu_health's: its speed probe's figures against the model's fleet band
    assert set(plots) == {"gpu_health-probe_gemm_tflops_min", "gpu_health-probe_hbm_gbps_min",
                          "dl_unit-gemm_bf16_tflops_min", "dl_unit-mem_bw_gbps_min", "nccl_loopback-nccl_busbw_gbps",
                          "storage_fio-fio_seq_read_mibps", "storage_fio-fio_seq_write_mibps",
                          "storage_fio-fio_rand_read_iops", "storage_fio-fio_rand_write_iops"}
    assert html.index('id="plots"') < html.index('id="history"')  # the plots come before the long table
    nccl = plots["nccl_loopback-nccl_busbw_gbps"]
    assert nccl.count('<circle class="point') == 13  # 11 older runs (11 to 41 days ago), 5 days and 1 h ago
    assert nccl.count('class="point st-fail"') == 1 and "12.5 GB/s (fail)" in nccl
    assert 'class="band"' in nccl and 'class="band-median"' in nccl and "fleet p10–p90, 5 nodes" in nccl
    assert nccl.count('class="transition to-fail"') == 1 and 'class="transition to-pass"' not in nccl
    assert 'class="band"' in plots["gpu_health-probe_gemm_tflops_min"]  # the probe against its model's fleet
    gemm = plots["dl_unit-gemm_bf16_tflops_min"]  # failed 20 days ago, passed again 17 days ago
    assert gemm.count('class="transition to-fail"') == 1 and gemm.count('class="transition to-pass"') == 1
    changed = seed.NOW - dt.timedelta(minutes=5)  # dl_unit is the second test: 5 min before each run's first
    assert (f"pass → fail, {_utc(changed - dt.timedelta(days=20))}" in gemm
            and f"fail → pass, {_utc(changed - dt.timedelta(days=17))}" in gemm)
    assert "<script" not in "".join(plots.values())
    # one test only: its plots only; a node of a model without enough peers: plots without a band
    only = _svgs(c.get("/cluster-doctor/nodes/gpu-003?test=nccl_loopback").text)
    assert set(only) == {"nccl_loopback-nccl_busbw_gbps"}
    a100 = c.get("/cluster-doctor/nodes/gpu-002").text
    assert len(_svgs(a100)) == 9 and 'class="band"' not in a100 and "no fleet band" in a100
    # a node without any plotted value (timeouts only): no plot section at all
    assert 'id="plots"' not in c.get("/cluster-doctor/nodes/gpu-006").text


def test_node_page_plots_what_cpu_mode_suites_record_and_names_tests_without_values(pg_admin_dsn, template_db):
    """The demo's case: dl_unit in CPU mode records fp32 GEMM (no bf16), storage_fio runs recorded no
    figure; every plot drawn has points, the others are named, and no time label repeats."""
    rows = []
    for i, hours in enumerate((200, 150, 100, 50, 2)):
        at = seed.NOW - dt.timedelta(hours=hours)
        rows.append(seed.attempt("cpu-001", "dl_unit", "pass", at, gpu_model="cpu", map_index=i,
                                 metrics={"gemm_fp32_tflops_min": 0.2 + i / 100, "mem_bw_gbps_min": 9.5 + i}))
        rows.append(seed.attempt("cpu-001", "storage_fio", "pass", at, gpu_model="cpu", map_index=i, metrics={}))
    with _fresh_database(pg_admin_dsn, template_db) as dsn:
        ResultStore(dsn).record(rows)
        html = make_client(dsn).get("/cluster-doctor/nodes/cpu-001").text
    plots = _svgs(html)
    assert set(plots) == {"dl_unit-gemm_fp32_tflops_min", "dl_unit-mem_bw_gbps_min"}
    for svg in plots.values():
        assert svg.count('<circle class="point') == 5
        ticks = re.findall(r'<text class="time-tick"[^>]*>([^<]+)</text>', svg)
        assert len(ticks) >= 3 and len(set(ticks)) == len(ticks), ticks
    assert "GEMM fp32, slowest device (CPU mode)" in plots["dl_unit-gemm_fp32_tflops_min"]
    assert webapp.key_figures("dl_unit", {"gemm_fp32_tflops_min": 0.104, "mem_bw_gbps_min": 13.5}) == \
        [("mem_bw_gbps_min", "13.50"), ("gemm_fp32_tflops_min", "0.10")]  # the CPU-mode GEMM among the figures
    assert re.search(r'id="plots-missing">No value to plot yet for storage_fio:', html)


def test_node_page_errors(client):
    assert client.get("/cluster-doctor/nodes/gpu-999").status_code == 404
    r = client.get("/cluster-doctor/nodes/Bad_Node", headers={"Accept": "text/html"})
    assert r.status_code == 400 and "invalid Kubernetes node name" in r.text
    assert client.get("/cluster-doctor/nodes/gpu-003?test=Robert%27)%3B").status_code == 400


def test_links_follow_the_mount_point_and_base_url(small_db):
    """Behind [api] base_url=/airflow/ the api-server's root_path is /airflow: links must follow it."""
    sub = webapp.create_app(connector_provider=lambda s: small_db, settings_provider=Settings, clock=lambda: seed.NOW)
    sub.dependency_overrides[webapp.require_ui_access] = lambda: "u"
    root = FastAPI(root_path="/airflow")
    root.mount(webapp.MOUNT_PREFIX, sub)
    html = TestClient(root).get("/airflow/cluster-doctor/nodes/gpu-003").text
    assert 'href="/airflow/dags/continuous_validation/runs/' in html
    assert 'href="/airflow/cluster-doctor/" id="back"' in html


def test_database_down_or_schema_missing_is_a_503_with_the_reason(small_db, empty_db_dsn):
    down = make_client({**small_db, "host": "127.0.0.1", "port": 1})
    r = down.get("/cluster-doctor/")
    assert r.status_code == 503 and "Results database unavailable" in r.text and "cannot connect" in r.text
    r = make_client(empty_db_dsn).get("/cluster-doctor/")
    assert r.status_code == 503 and "cluster-doctor db upgrade" in r.text


def test_missing_airflow_connection_is_reported(small_db):
    def missing(settings):
        from cluster_doctor.airflow import runtime

        return runtime.hook_connector("no_such_connection_for_tests")

    sub = webapp.create_app(connector_provider=missing, settings_provider=Settings, clock=lambda: seed.NOW)
    sub.dependency_overrides[webapp.require_ui_access] = lambda: "u"
    root = FastAPI()
    root.mount(webapp.MOUNT_PREFIX, sub)
    r = TestClient(root).get("/cluster-doctor/")
    assert r.status_code == 503 and "no_such_connection_for_tests" in r.text


# ---------------------------------------------------------------------------------------- scale
@pytest.fixture(scope="module")
def big_db(pg_admin_dsn, template_db):
    with _fresh_database(pg_admin_dsn, template_db) as dsn:
        seed.bulk_fleet(dsn, 5000)
        yield dsn


def test_5000_nodes_page_is_bounded_and_pages(big_db):
    c = make_client(big_db)
    r = c.get("/cluster-doctor/")
    assert r.status_code == 200
    assert len(r.content) < 300_000  # its speed: make bench-page
    assert "5000 nodes" in r.text and "page 1 of 50" in r.text
    assert rows(r.text)[:2] == ["gpu-0001", "gpu-0002"] and len(rows(r.text)) == 100
    last = c.get("/cluster-doctor/?page=50")
    assert rows(last.text)[-1] == "gpu-5000" and "page 50 of 50" in last.text
    assert 'href="/cluster-doctor/?page=49" rel="prev"' in last.text
    big = c.get("/cluster-doctor/?per_page=200&status=failing")  # 100 failing nodes, one page
    assert rows(big.text) == [f"gpu-{i:04d}" for i in range(50, 5001, 50)]
    assert c.get("/cluster-doctor/?per_page=5000").status_code == 400  # never the whole fleet at once (one-line JSON)


def test_age_formatting():
    assert [webapp.format_age(s) for s in (None, 5, 300, 3600, 5400, 86400 * 3 + 7200, 86400 * 12)] == \
        ["never", "5 s", "5 min", "1 h", "1 h 30 min", "3 d 2 h", "12 d"]
    assert webapp.format_duration(3725) == "1 h 2 min" and webapp.format_duration(42.4) == "42 s"
    assert webapp.format_ts(dt.datetime(2026, 1, 2, 3, 4, tzinfo=dt.UTC)) == "2026-01-02 03:04 UTC"


# ---------------------------------------------------------------------------------------- since when, SLO
def _cell(html: str, node: str, test: str) -> str:
    row = re.search(rf'<tr data-node="{node}">(.*?)</tr>', html, re.S).group(1)
    return re.search(rf'data-test="{test}".*?</td>', row, re.S).group(0)


def test_cells_show_how_long_the_status_has_held(client):
    html = client.get("/cluster-doctor/").text
    # gpu-003 nccl: failing for 1 h, ran 1 h ago; its other tests passed 5 days ago and still pass
    assert "for 1 h" in _cell(html, "gpu-003", "nccl_loopback")
    health = _cell(html, "gpu-003", "gpu_health")
    assert "for 5 d" in health and "ran 5 d ago" in health
    # gpu-011 storage_fio: passing since its run 1 h ago (the later preemption is no executed result)
    assert "for 1 h" in _cell(html, "gpu-011", "storage_fio")
    assert "class=\"since\"" not in _cell(html, "gpu-006", "dl_unit")  # never executed: no status to hold


def test_status_age_is_the_streak_not_the_last_run(db_dsn, store):
    """Three passes a day apart: the cell says 'for 3 d' (the streak), 'ran 1 h ago' (the last run)."""
    now = seed.NOW
    store.record([seed.attempt("gpu-001", "gpu_health", "pass", now - dt.timedelta(days=d, hours=1), map_index=d)
                  for d in (3, 2, 1, 0)])
    html = make_client(db_dsn).get("/cluster-doctor/").text
    cell = _cell(html, "gpu-001", "gpu_health")
    assert "for 3 d 1 h" in cell and "ran 1 h ago" in cell


def test_coverage_slo_and_chart(client):
    html = client.get("/cluster-doctor/").text
    assert re.search(r'id="slo">\s*<div class="value">65\.6 %</div>', html)  # 21 of 32 pairs fresh
    # the fleet's first record is gpu-005's, ten days ago: the days before have no data, never 0 %
    first = seed.NOW - dt.timedelta(days=10, minutes=5 * (len(seed.TESTS) - 1))
    with_data = [end for end in coverage.day_ends(seed.NOW, 30) if end > first]
    days = len(with_data)
    assert f"over the {days} days since the fleet was first seen (no data for the {30 - days} before)" in html
    slo = re.search(r'id="slo">.*?</div>\s*</div>', html, re.S).group(0)
    assert "over the last 30 days" not in slo  # it read 0 % for the 19 days before
    # a pair never executed: no bold "never" but how many nodes were never validated, as a link
    card = re.search(r'<div class="card" id="worst-staleness" data-never="true">.*?</div>\s*</div>', html, re.S).group(0)
    assert ">n/a<" in card and "worst staleness: n/a — " in card and ">1 GPU node never validated</a>" in card
    assert ">never<" not in card
    svg = re.search(r'<svg id="coverage-chart".*?</svg>', html, re.S).group(0)
    assert svg.count("<circle") == days and "<script" not in svg and "href" not in svg
    assert svg.count('class="no-data"') == 1 and ">no data<" in svg


def test_metrics_route_is_the_library_app_gzip_and_openmetrics(small_db):
    import gzip

    c = make_client(small_db)
    r = c.get("/cluster-doctor/metrics", headers={"Accept-Encoding": "gzip"})
    assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"
    assert r.headers["cache-control"] == "no-store" and r.headers["vary"] == "Accept, Accept-Encoding"
    assert b"cluster_doctor_up 1.0" in r.content  # the client decoded the gzip body
    raw = c.get("/cluster-doctor/metrics", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in raw.headers and gzip.compress(raw.content)
    om = c.get("/cluster-doctor/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert om.headers["content-type"].startswith("application/openmetrics-text") and om.text.endswith("# EOF\n")
    only = c.get("/cluster-doctor/metrics?name[]=cluster_doctor_fleet_failing_nodes")
    assert only.text.count("\ncluster_doctor_") == 1 and "cluster_doctor_fleet_failing_nodes 2.0" in only.text


def test_metrics_route_takes_the_airflow_jwt_and_no_private_token(small_db, airflow_auth, monkeypatch):
    """Prometheus sends Airflow's own JWT (from POST /auth/token) as a bearer token; the standalone
    exporter's scrape token means nothing here, even when set on the api-server."""
    monkeypatch.setenv("CLUSTER_DOCTOR_METRICS_TOKEN", "scrape-secret-123")
    _, token = airflow_auth
    c = make_client(small_db, authenticated=False)
    r = c.get("/cluster-doctor/metrics", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and "cluster_doctor_fleet_failing_nodes 2.0" in r.text
    for headers, status in (({}, 401), ({"Authorization": "Bearer scrape-secret-123"}, 403)):
        refused = c.get("/cluster-doctor/metrics", headers=headers)
        assert refused.status_code == status and "cluster_doctor_" not in refused.text


def test_metrics_route_asks_the_auth_manager(small_db, airflow_auth, monkeypatch):
    manager, token = airflow_auth
    monkeypatch.setattr(manager, "is_authorized_dag", lambda **kwargs: False)
    r = make_client(small_db, authenticated=False).get("/cluster-doctor/metrics",
                                                       headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 403 and "cluster_doctor_" not in r.text


# ---------------------------------------------------------------------------------------- incomplete passes
def test_an_incomplete_pass_is_never_shown_as_a_clean_pass_and_failures_show_their_action(db_dsn, store):
    import dataclasses

    now = seed.NOW
    skip = {"name": "dcgm_diag", "status": "skip", "code": "DCGM_UNAVAILABLE", "action": "none"}
    partial = seed.attempt("gpu-001", "gpu_health", "pass", now - dt.timedelta(hours=1))
    partial = dataclasses.replace(partial, checks=[*partial.checks, skip, {**skip, "name": "kernel_log"}],
                                  incomplete=None, checks_not_run=None)
    xid = {"name": "xid_events", "status": "fail", "code": "XID_79", "action": "reboot"}
    failed = dataclasses.replace(seed.attempt("gpu-002", "gpu_health", "fail", now - dt.timedelta(hours=1)),
                                 checks=[xid], action=None)
    store.record([partial, failed, seed.attempt("gpu-003", "gpu_health", "pass", now - dt.timedelta(hours=1))])
    c = make_client(db_dsn)
    html = c.get("/cluster-doctor/").text
    cell = _cell(html, "gpu-001", "gpu_health")
    assert 'data-incomplete="2"' in cell and "st-pass incomplete" in cell and "(2 not run)" in cell
    assert "pass (incomplete: 2 checks not run)" in cell  # the tooltip
    clean = _cell(html, "gpu-003", "gpu_health")
    assert "incomplete" not in clean and "not run" not in clean
    assert "recommended action: reboot" in _cell(html, "gpu-002", "gpu_health")
    node = c.get("/cluster-doctor/nodes/gpu-001").text
    latest = re.search(r'<tr id="test-gpu_health".*?</tr>', node, re.S).group(0)
    assert "pass (incomplete: 2 checks not run)" in latest
    history = re.search(r'<table id="history">.*?</table>', node, re.S).group(0)
    assert "pass (incomplete: 2 checks not run)" in history
    node = c.get("/cluster-doctor/nodes/gpu-002").text
    assert "action: reboot" in re.search(r'<tr id="test-gpu_health".*?</tr>', node, re.S).group(0)
