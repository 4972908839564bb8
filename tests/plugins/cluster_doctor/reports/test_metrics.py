"""cluster_doctor.reports.metrics: exposition from a real PostgreSQL, parsed back with prometheus_client."""

from __future__ import annotations

import datetime as dt
import gzip
import logging
import math

import pytest
from cluster_doctor.domain.config import Settings
from cluster_doctor.reports import metrics
from cluster_doctor.store import spool
from cluster_doctor.store.history import ResultStore
from prometheus_client.metrics_core import GaugeMetricFamily
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO, _fresh_database
from tests.support import fleet_seed as seed
from tests.support.metrics import samples, value

NOW_TS = seed.NOW.timestamp()


def scrape(dsn: dict, accept: str | None = None) -> tuple[str, str]:
    # the spool families come from the spool the settings name (the test's private one), as the plugin does
    registry = metrics.make_registry(metrics.ClusterDoctorCollector(
        lambda s: dsn, Settings, clock=lambda: seed.NOW, spool_provider=lambda s: spool.Spool().status()))
    body, content_type = metrics.render(registry, accept)
    return body.decode(), content_type


def names(series: dict) -> set[str]:
    return {name for name, _ in series}


def test_fleet_gauges(small_db):
    text, content_type = scrape(small_db)
    assert content_type.startswith("text/plain; version=0.0.4")
    s = samples(text)
    assert value(s, "cluster_doctor_up") == 1
    assert value(s, "cluster_doctor_fleet_gpu_nodes") == 8
    assert value(s, "cluster_doctor_fleet_covered_nodes") == 5
    assert value(s, "cluster_doctor_fleet_coverage_ratio") == pytest.approx(0.625)
    assert value(s, "cluster_doctor_fleet_never_validated_nodes") == 1
    assert value(s, "cluster_doctor_fleet_failing_nodes") == 2
    assert value(s, "cluster_doctor_fleet_stale_pairs") == 11
    assert value(s, "cluster_doctor_fleet_validation_gpu_hours_7d") == pytest.approx(30.9333, rel=1e-4)
    assert value(s, "cluster_doctor_staleness_threshold_seconds") == 7 * 86400
    assert 0 <= value(s, "cluster_doctor_scrape_duration_seconds") < 5


def test_per_pair_status_timestamps_and_staleness(small_db):
    s = samples(scrape(small_db)[0])
    status = {(dict(l)["node"], dict(l)["test"]): dict(l)["status"]
              for n, l in s if n == "cluster_doctor_validation_status"}
    assert len(status) == 8 * 4  # one series per pair: only the current state is exposed
    assert all(value(s, "cluster_doctor_validation_status", node=n, test=t, status=st) == 1
               for (n, t), st in status.items())
    assert status[("gpu-003", "nccl_loopback")] == "fail"
    assert status[("gpu-004", "dl_unit")] == "error"
    assert status[("gpu-011", "storage_fio")] == "pass"  # a later preemption does not change it
    assert status[("gpu-006", "gpu_health")] == "never"  # timeouts only
    assert status[("gpu-010", "dl_unit")] == "never"  # never even attempted

    pair = {"node": "gpu-003", "test": "nccl_loopback"}
    assert value(s, "cluster_doctor_validation_status_since_timestamp_seconds", **pair) == NOW_TS - 3600
    # "since when" only where it matters (failing pairs): passing pairs carry no since series
    assert ("cluster_doctor_validation_status_since_timestamp_seconds",
            frozenset({"node": "gpu-001", "test": "dl_unit"}.items())) not in s
    assert value(s, "cluster_doctor_validation_staleness_seconds", **pair) == 3600
    assert value(s, "cluster_doctor_validation_staleness_seconds", node="gpu-005", test="dl_unit") == \
        10 * 86400 + 300
    assert math.isinf(value(s, "cluster_doctor_validation_staleness_seconds", node="gpu-006", test="dl_unit"))
    assert "cluster_doctor_validation_last_executed_timestamp_seconds" not in names(s)  # = time() - staleness


def test_key_figures_one_family_per_catalog_metric(small_db):
    s = samples(scrape(small_db)[0])
    h100 = seed.H100
    assert value(s, "cluster_doctor_gemm_bf16_tflops_min", node="gpu-001", test="dl_unit") == 731.5
    assert value(s, "cluster_doctor_nccl_busbw_gbps", node="gpu-003", test="nccl_loopback") == 12.5
    assert value(s, "cluster_doctor_fio_seq_read_mibps", node="gpu-002", test="storage_fio") == 5120.0
    assert value(s, "cluster_doctor_gpus_visible", node="gpu-001", test="gpu_health") == 8
    # one family per key metric of the enabled suites of the catalog, whatever the suites rename them to
    from cluster_doctor.domain import suites
    from cluster_doctor.domain.config import Settings

    for suite in (suites.CATALOG[t] for t in Settings().tests):
        for key in suite.key_metrics:
            assert metrics.key_metric_name(key) in names(s)
    # never-executed pairs have no figures
    assert not [k for k in s if k[0] == "cluster_doctor_nccl_busbw_gbps" and ("node", "gpu-006") in k[1]]
    assert value(s, "cluster_doctor_node_info", node="gpu-002", gpu_model=seed.A100) == 1
    assert value(s, "cluster_doctor_node_info", node="gpu-006", gpu_model=h100) == 1


def test_openmetrics_on_request(small_db):
    text, content_type = scrape(small_db, accept="application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    families = {f.name: f for f in parse_openmetrics(text)}
    assert families["cluster_doctor_up"].samples[0].value == 1


def test_database_down_is_up_0_with_one_log_line(small_db, caplog):
    caplog.set_level(logging.WARNING, logger="cluster_doctor.reports.metrics")
    text, _ = scrape({**small_db, "host": "127.0.0.1", "port": 1})
    s = samples(text)
    assert value(s, "cluster_doctor_up") == 0
    # no partial data: only the self-metrics, and the spool's (read from the spool, not the database)
    assert names(s) == {"cluster_doctor_up", "cluster_doctor_scrape_duration_seconds", "cluster_doctor_skipped_values_total",
                        "cluster_doctor_spooled_attempts", "cluster_doctor_spool_oldest_age_seconds",
                        "cluster_doctor_spool_rejected_attempts", "cluster_doctor_spool_readable"}
    assert value(s, "cluster_doctor_spool_readable") == 1 and value(s, "cluster_doctor_spooled_attempts") == 0
    (record,) = [r for r in caplog.records if r.name == "cluster_doctor.reports.metrics"]
    assert "cannot connect" in record.getMessage() and "\n" not in record.getMessage() and not record.exc_info


def test_schema_missing_or_bad_settings_is_up_0(empty_db_dsn, small_db):
    assert value(samples(scrape(empty_db_dsn)[0]), "cluster_doctor_up") == 0

    def broken_settings():
        raise ValueError("Airflow Variable cluster_doctor_settings is not valid JSON")

    registry = metrics.make_registry(metrics.ClusterDoctorCollector(lambda s: small_db, broken_settings))
    assert value(samples(metrics.render(registry)[0].decode()), "cluster_doctor_up") == 0


def test_key_metric_names_are_sanitized_and_never_shadow_fixed_families():
    assert metrics.key_metric_name("nccl_busbw_gbps") == "cluster_doctor_nccl_busbw_gbps"
    assert metrics.key_metric_name("fio.seq-read:MiBps") == "cluster_doctor_fio_seq_read_mibps"
    assert metrics.key_metric_name("up") == "cluster_doctor_suite_up"
    assert metrics.key_metric_name("fleet_failing_nodes") == "cluster_doctor_suite_fleet_failing_nodes"
    assert metrics.key_metric_name("2x") == "cluster_doctor_suite_2x"


# ---------------------------------------------------------------------------------------- exporter app
def call(app, path="/metrics", **headers) -> tuple[str, dict, bytes]:
    out = {}
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": headers.pop("query", ""),
               **{f"HTTP_{k.upper()}": v for k, v in headers.items()}}
    body = b"".join(app(environ, lambda status, hdrs, exc_info=None: out.update(status=status, headers=dict(hdrs))))
    return out["status"], out["headers"], body


def exporter(dsn: dict, token=lambda: None):
    registry = metrics.make_registry(metrics.ClusterDoctorCollector(lambda s: dsn, Settings, clock=lambda: seed.NOW))
    return metrics.exporter_app(registry, token=token)


def test_exporter_app_serves_the_library_app_behind_the_scrape_token(small_db):
    app = exporter(small_db, token=lambda: "scrape-secret-123")
    status, headers, _ = call(app)
    assert status.startswith("401") and headers["WWW-Authenticate"].startswith("Bearer")
    assert call(app, authorization="Bearer scrape-secret-124")[0].startswith("401")
    status, headers, body = call(app, authorization="Bearer scrape-secret-123", accept_encoding="gzip")
    assert status.startswith("200") and headers["Content-Encoding"] == "gzip"
    assert headers["Vary"] == "Accept, Accept-Encoding"
    assert value(samples(gzip.decompress(body).decode()), "cluster_doctor_fleet_failing_nodes") == 2
    assert call(app, "/")[0].startswith("200") and call(app, "/nope")[0].startswith("404")


def test_token_from_a_file_is_read_on_every_request(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file\n")
    env = {metrics.TOKEN_FILE_ENV: str(token_file)}
    assert metrics.configured_token(env) == "from-a-file"
    token_file.write_text("rotated\n")  # a rotated Kubernetes Secret applies without a restart
    assert metrics.configured_token(env) == "rotated"
    assert metrics.configured_token({metrics.TOKEN_FILE_ENV: str(tmp_path / "missing")}) is None


def test_the_library_filters_families_by_name(small_db):
    """name[] (prometheus_client's filter) works: the collector describes its families up front."""
    status, _, body = call(exporter(small_db), query="name[]=cluster_doctor_up&name[]=cluster_doctor_node_info")
    assert status.startswith("200")
    assert names(samples(body.decode())) == {"cluster_doctor_up", "cluster_doctor_node_info"}


def test_token_comparison():
    assert metrics.token_matches("Bearer abc", "abc") and metrics.token_matches("bearer  abc ", "abc")
    assert not metrics.token_matches("Bearer abd", "abc") and not metrics.token_matches("Basic abc", "abc")
    assert not metrics.token_matches(None, "abc") and not metrics.token_matches("Bearer ", None)
    assert metrics.configured_token({}) is None and metrics.configured_token({metrics.TOKEN_ENV: " t "}) == "t"


# ---------------------------------------------------------------------------------------- docs
def test_documented_config_and_rules_parse_and_name_real_families(small_db):
    """docs/metrics.md points to the monitoring files (scrape jobs, alert rules, dashboard) instead of
    carrying copies; they parse, and every family the docs name exists in a real scrape."""
    import re

    import yaml

    doc = (REPO / "docs" / "metrics.md").read_text()
    assert "```yaml" not in doc  # the files are the only copies
    linked = set(re.findall(r"\]\(\.\./(deploy/monitoring/[\w.-]+|include/k8s/monitoring[\w./-]*)\)", doc))
    assert {"deploy/monitoring/prometheus-scrape.yaml", "deploy/monitoring/cluster-doctor.rules.yaml",
            "deploy/monitoring/cluster-doctor.dashboard.json", "include/k8s/monitoring"} <= linked
    assert all((REPO / path).exists() for path in linked), linked
    jobs = yaml.safe_load((REPO / "deploy" / "monitoring" / "prometheus-scrape.yaml").read_text())["scrape_configs"]
    assert {j["metrics_path"] for j in jobs if "metrics_path" in j} == {"/cluster-doctor/metrics"}
    rules = yaml.safe_load((REPO / "deploy" / "monitoring" / "cluster-doctor.rules.yaml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert {"GPUNodeFailingValidation", "GPUFleetValidationCoverageLow"} <= alerts
    assert {f"`{a}`" for a in alerts} <= set(re.findall(r"`\w+`", doc))  # each alert in the docs' table
    text = scrape(small_db)[0]
    exported = names(samples(text)) | set(re.findall(r"^# TYPE (\S+)", text, re.M))  # families without series too
    mentioned = set(re.findall(r"\bcluster_doctor_[a-z0-9_]*[a-z0-9]\b", doc)) - {"cluster_doctor_settings"}
    assert mentioned - exported == set()
    assert "cluster_doctor_validation_status" in mentioned


# ---------------------------------------------------------------------------------------- robustness
def test_coverage_slo_gauges(small_db):
    """Pair coverage now and over 30 days, worst staleness; the 30-day figure is recomputed here from
    the seeded attempts (each day end T: pairs with an executed attempt finished in [T - 7 d, T), of the
    nodes first seen before T: the days before the fleet's first record have no data, not 0 %)."""
    from cluster_doctor.domain import coverage

    s = samples(scrape(small_db)[0])
    assert value(s, "cluster_doctor_fleet_pair_coverage_ratio") == pytest.approx((32 - 11) / 32)
    assert math.isinf(value(s, "cluster_doctor_fleet_worst_staleness_seconds"))  # gpu-006 never executed
    seeded = _seeded_attempts()
    store_rows = [a for a in seeded if a.status in ("pass", "fail", "error")]
    first_seen: dict[str, dt.datetime] = {}
    for a in seeded:
        first_seen[a.node_name] = min(first_seen.get(a.node_name, a.finished_at), a.finished_at)
    fresh, pairs_known = [], []
    for end in coverage.day_ends(seed.NOW, 30):
        pairs = {(a.node_name, a.test_name) for a in store_rows
                 if end - dt.timedelta(days=7) <= a.finished_at < end and a.test_name in seed.TESTS}
        fresh.append(len(pairs))
        pairs_known.append(len(seed.TESTS) * sum(seen < end for seen in first_seen.values()))
    assert 0 in pairs_known and pairs_known[-1] == 32  # the seed starts ten days ago: days without data
    expected = sum(fresh) / sum(pairs_known)
    assert value(s, "cluster_doctor_fleet_pair_coverage_ratio_30d") == pytest.approx(expected)


def _seeded_attempts():
    class Capture:
        rows: list = []

        def record(self, rows):
            self.rows = list(rows)

    capture = Capture()
    seed.small_fleet(capture)
    return capture.rows


def _insert_raw(dsn: dict, sql: str, params: tuple) -> None:
    import psycopg

    with psycopg.connect(**dsn) as conn:
        conn.execute(sql, params)


def test_one_unrepresentable_stored_value_is_skipped_and_counted(pg_admin_dsn, template_db):
    """A huge integer in a metrics JSON and a time past year 9999 cost their own series, not the scrape."""
    from psycopg.types.json import Jsonb

    with _fresh_database(pg_admin_dsn, template_db) as dsn:
        seed.small_fleet(ResultStore(dsn))
        before = dict(metrics.numbers.SKIPPED_VALUES)
        _insert_raw(dsn, "INSERT INTO validation_history (node_name, test_name, status, finished_at, metrics, dag_id, "
                         "run_id, map_index, try_number) VALUES ('gpu-001', 'nccl_loopback', 'pass', %s, %s, 'd', 'huge', "
                         "0, 1)", (seed.NOW - dt.timedelta(minutes=1), Jsonb({"nccl_busbw_gbps": 10 ** 400})))
        _insert_raw(dsn, "INSERT INTO validation_history (node_name, test_name, status, finished_at, dag_id, run_id, "
                         "map_index, try_number) VALUES ('gpu-002', 'dl_unit', 'pass', '20000-01-01T00:00:00Z', 'd', "
                         "'future', 0, 1)", ())
        s = samples(scrape(dsn)[0])
        assert value(s, "cluster_doctor_up") == 1
        assert ("cluster_doctor_nccl_busbw_gbps", frozenset({"node": "gpu-001", "test": "nccl_loopback"}.items())) \
            not in s
        assert value(s, "cluster_doctor_nccl_busbw_gbps", node="gpu-003", test="nccl_loopback") == 12.5
        # an unreadable time never makes a pair fresh
        assert math.isinf(value(s, "cluster_doctor_validation_staleness_seconds", node="gpu-002", test="dl_unit"))
        assert value(s, "cluster_doctor_skipped_values_total", kind="metric") >= before.get("metric", 0) + 1
        assert value(s, "cluster_doctor_skipped_values_total", kind="timestamp") >= before.get("timestamp", 0) + 1


def test_families_are_cached_for_the_ttl(small_db):
    calls = []

    def connector(_settings):
        calls.append(1)
        return small_db

    collector = metrics.ClusterDoctorCollector(connector, Settings, clock=lambda: seed.NOW, cache_ttl_s=60)
    registry = metrics.make_registry(collector)
    first, _ = metrics.render(registry)
    second, _ = metrics.render(registry)
    assert len(calls) == 2  # settings and connector are resolved per scrape (edits apply at once) ...
    strip = lambda body: [l for l in body.decode().splitlines() if "scrape_duration" not in l]  # noqa: E731
    assert strip(first) == strip(second)
    collector.cache_ttl_s = 0  # ... and with the cache off every scrape reads the database again
    assert value(samples(metrics.render(registry)[0].decode()), "cluster_doctor_up") == 1


def test_label_values_are_escaped():
    fam = GaugeMetricFamily("cluster_doctor_node_info", "x", labels=["node", "gpu_model"])
    fam.add_metric(["gpu-1", 'H100 "SXM"\\\nx'], 1.0)
    registry = metrics.make_registry(type("C", (), {"collect": lambda self: [fam]})())
    parsed = list(text_string_to_metric_families(metrics.render(registry)[0].decode()))
    assert parsed[0].samples[0].labels["gpu_model"] == 'H100 "SXM"\\\nx'


def test_actions_and_incomplete_passes_are_exposed_sparsely(small_db, db_dsn):
    """A pair's recommended action unless it is none, and the checks that could not run unless none
    did: an incomplete pass is told apart from a clean one."""
    s = samples(scrape(small_db)[0])
    actions = {(dict(l)["node"], dict(l)["test"]): dict(l)["action"]
               for n, l in s if n == "cluster_doctor_validation_action"}
    # the seed's fail names no action (unknown, never none); the error is the orchestrator's: retest
    assert actions == {("gpu-003", "nccl_loopback"): "unknown", ("gpu-004", "dl_unit"): "retest"}
    not_run = {(dict(l)["node"], dict(l)["test"]): v for (n, l), v in s.items()
               if n == "cluster_doctor_validation_checks_not_run"}
    assert not_run == {("gpu-010", "gpu_health"): 1.0}  # seed.NOT_RUN
    assert value(s, "cluster_doctor_validation_status", node="gpu-010", test="gpu_health", status="pass") == 1
    # a suite's own action reaches the scrape
    ResultStore(db_dsn).record([seed.attempt("gpu-001", "gpu_health", "fail", seed.NOW, checks=[
        {"name": "xid_events", "status": "fail", "code": "XID_79", "action": "reboot"}])])
    s = samples(scrape(db_dsn)[0])
    assert value(s, "cluster_doctor_validation_action", node="gpu-001", test="gpu_health", action="reboot") == 1


def test_what_reservations_cost_is_a_counter(small_db):
    """The idle GPU-hours reserved nodes stood waiting for their validation."""
    from cluster_doctor.store import database
    from cluster_doctor.store import reservations as rows

    assert value(samples(scrape(small_db)[0]), "cluster_doctor_reservation_idle_gpu_hours_total") == 0
    connect = database.params_connector(small_db)
    start = seed.NOW - dt.timedelta(hours=3)
    rows.opened(connect, "gpu-001", gpu_count=8, run_id="r1", at=start)
    rows.seen(connect, "gpu-001", busy=False, at=start + dt.timedelta(hours=1))
    rows.closed(connect, "gpu-001", reason="validated", at=start + dt.timedelta(hours=1, minutes=30), free=True)
    # idle since it was last seen busy (when reserved) to the taint's removal: 1.5 h x 8 GPUs
    assert value(samples(scrape(small_db)[0]), "cluster_doctor_reservation_idle_gpu_hours_total") == pytest.approx(12)


def test_failure_codes_are_exposed_for_failing_pairs_only(small_db, db_dsn):
    """The codes of the checks that failed, one series each; a pass's codes (none fail) and a failure
    without a code add none."""
    ResultStore(db_dsn).record([
        seed.attempt("gpu-001", "gpu_health", "fail", seed.NOW, checks=[
            {"name": "xid_events", "status": "fail", "code": "XID_79", "action": "reboot"},
            {"name": "ecc", "status": "fail", "code": "ECC_DBE"}, {"name": "ecc2", "status": "error", "code": "ECC_DBE"},
            {"name": "clocks", "status": "pass", "code": "CLOCKS_OK"}, {"name": "nvlink", "status": "fail"}]),
        seed.attempt("gpu-002", "gpu_health", "pass", seed.NOW, checks=[
            {"name": "xid_events", "status": "pass", "code": "XID_NONE"}])])
    s = samples(scrape(db_dsn)[0])
    codes = {(dict(l)["node"], dict(l)["test"], dict(l)["code"]): v for (n, l), v in s.items()
             if n == "cluster_doctor_validation_failure_code"}
    assert codes == {("gpu-001", "gpu_health", "ECC_DBE"): 1.0, ("gpu-001", "gpu_health", "XID_79"): 1.0}
