"""cluster_doctor.store.fleet: the page's and the metrics' SQL, against a real PostgreSQL."""

from __future__ import annotations

import dataclasses
import datetime as dt

import hostlist
import psycopg
import pytest
from cluster_doctor.domain.nodes import InvalidNodeName, parse_node_range
from cluster_doctor.reports import summary as report
from cluster_doctor.store import database, fleet
from cluster_doctor.store.history import ResultStore, SchemaMissing

from tests.conftest import NO_SCHEMA, _fresh_database
from tests.support import fleet_seed as seed

WEEK = dt.timedelta(days=7)


@pytest.fixture(scope="module")
def small_db(pg_admin_dsn, template_db):
    """One seeded database shared by the read-only tests of this module (open_fleet is read-only)."""
    with _fresh_database(pg_admin_dsn, template_db) as dsn:
        yield dsn, seed.small_fleet(ResultStore(dsn))


@pytest.fixture
def small(small_db):
    return small_db[1]


@pytest.fixture
def fq(small_db):
    with fleet.open_fleet(small_db[0], tests=seed.TESTS, staleness=WEEK, now=seed.NOW) as queries:
        yield queries


def names(page: fleet.Page) -> list[str]:
    return [n["node_name"] for n in page.nodes]


def test_summary_counts_coverage_never_failing_and_gpu_hours(fq, small):
    s = fq.summary()
    assert s["gpu_nodes"] == len(small["nodes"]) == 8
    assert s["covered_nodes"] == len(small["covered"]) == 5
    assert s["coverage"] == pytest.approx(5 / 8)
    assert s["never_validated_nodes"] == 1  # gpu-006: timeouts only
    assert s["failing_nodes"] == 2  # gpu-003 fail, gpu-004 error
    assert s["gpu_hours_7d"] == pytest.approx(small["gpu_hours_7d"])
    # gpu-005: 4 stale, gpu-006: 4 never, gpu-010: 3 never executed = 11 pairs to refresh
    assert s["stale_pairs"] == 11


def test_summary_agrees_with_the_run_report_definition(fq, small_db):
    """The page, the metrics and the end-of-run summary must tell the same coverage story."""
    latest = ResultStore(small_db[0]).latest(tests=seed.TESTS)
    nodes = sorted({r["node_name"] for r in latest})
    expected = report.coverage(latest, nodes, seed.TESTS, seed.NOW, WEEK)
    s = fq.summary()
    assert (s["gpu_nodes"], s["covered_nodes"]) == (expected.gpu_nodes, expected.covered_nodes)
    assert s["never_validated_nodes"] == len(expected.never_validated)
    assert s["failing_nodes"] == len(expected.failing_nodes)


def test_gpu_hours_count_only_the_window_and_attempts_that_held_gpus(db_dsn, store):
    now = seed.NOW
    store.record([
        seed.attempt("gpu-001", "dl_unit", "pass", now - dt.timedelta(hours=2), duration_s=1800, gpu_count=8),
        seed.attempt("gpu-001", "nccl_loopback", "preempted", now - dt.timedelta(hours=3), duration_s=900,
                     gpu_count=4),
        # ran 8 days ago: outside the window
        seed.attempt("gpu-001", "storage_fio", "pass", now - dt.timedelta(days=8), duration_s=3600, gpu_count=8),
        # a timeout never started; a recorded duration must not count
        seed.attempt("gpu-002", "dl_unit", "timeout", now - dt.timedelta(hours=1), duration_s=1200, gpu_count=8),
        # unknown GPU count: counted as an attempt, contributes nothing, reported
        seed.attempt("gpu-002", "gpu_health", "pass", now - dt.timedelta(hours=1), duration_s=60, gpu_count=None),
    ])
    with fleet.open_fleet(db_dsn, tests=seed.TESTS, staleness=WEEK, now=now) as q:
        got = q.gpu_hours(days=7)
    assert got["gpu_hours"] == pytest.approx((1800 * 8 + 900 * 4) / 3600)
    assert got["attempts"] == 3
    assert got["without_gpu_count"] == 1


def test_only_enabled_tests_count(small_db):
    with fleet.open_fleet(small_db[0], tests=["gpu_health"], staleness=WEEK, now=seed.NOW) as q:
        s = q.summary()
        page = q.nodes_page()
    # gpu-010 only ever ran gpu_health: covered when that is the only enabled suite
    assert s["covered_nodes"] == 6 and s["failing_nodes"] == 0
    assert all(list(n["cells"]) == ["gpu_health"] for n in page.nodes)


@pytest.mark.parametrize("status, expected", [
    ("failing", ["gpu-003", "gpu-004"]),
    ("fail", ["gpu-003"]),
    ("error", ["gpu-004"]),
    ("never", ["gpu-006"]),
    ("stale", ["gpu-005", "gpu-006", "gpu-010"]),
    ("healthy", ["gpu-001", "gpu-002", "gpu-011"]),
])
def test_status_filters(fq, status, expected):
    page = fq.nodes_page(fleet.FleetFilter(status=status))
    assert names(page) == expected and page.total == len(expected)


def test_a_fresh_pass_with_checks_not_run_is_incomplete_not_healthy(db_dsn, store):
    """A node whose every test passed, fresh, but one of them could not run some checks is
    not "healthy" on the fleet page: it is listed under "incomplete" until a complete pass."""
    seed.small_fleet(store)
    partial = seed.attempt("gpu-001", seed.TESTS[0], "pass", seed.NOW - dt.timedelta(minutes=5), try_number=2)
    store.record([dataclasses.replace(partial, incomplete=True, checks_not_run=3)])

    def filtered(status):
        with fleet.open_fleet(db_dsn, tests=seed.TESTS, staleness=WEEK, now=seed.NOW) as q:
            return names(q.nodes_page(fleet.FleetFilter(status=status)))

    assert filtered("healthy") == ["gpu-002", "gpu-011"]
    assert filtered("incomplete") == ["gpu-001", "gpu-010"]  # gpu-010's only pass has a check not run
    store.record([seed.attempt("gpu-001", seed.TESTS[0], "pass", seed.NOW - dt.timedelta(minutes=1), try_number=3)])
    assert filtered("healthy") == ["gpu-001", "gpu-002", "gpu-011"] and filtered("incomplete") == ["gpu-010"]


@pytest.mark.parametrize("expression, expected", [
    ("gpu-[001-003]", ["gpu-001", "gpu-002", "gpu-003"]),
    ("gpu-00?", ["gpu-001", "gpu-002", "gpu-003", "gpu-004", "gpu-005", "gpu-006"]),
    ("gpu-01*, gpu-001", ["gpu-001", "gpu-010", "gpu-011"]),
    ("gpu-[900-901]", []),  # valid range, unknown nodes
])
def test_node_range_filters(fq, expression, expected):
    assert names(fq.nodes_page(fleet.FleetFilter(node_range=parse_node_range(expression)))) == expected


def test_gpu_model_and_combined_filters(fq):
    assert names(fq.nodes_page(fleet.FleetFilter(gpu_model=seed.A100))) == ["gpu-002"]
    # gpu-006 never executed a suite: its model comes from the attempts discovery recorded
    assert "gpu-006" in names(fq.nodes_page(fleet.FleetFilter(gpu_model=seed.H100)))
    assert fq.gpu_models() == sorted([seed.A100, seed.H100])
    flt = fleet.FleetFilter(node_range=parse_node_range("gpu-[003-010]"), status="failing", gpu_model=seed.H100)
    assert names(fq.nodes_page(flt)) == ["gpu-003", "gpu-004"]
    # a model nobody has, passed as a parameter (quotes are data, not SQL)
    assert fq.nodes_page(fleet.FleetFilter(gpu_model="x' OR '1'='1")).total == 0


def test_unknown_status_filter_is_refused():
    with pytest.raises(fleet.InvalidFilter, match="unknown status filter"):
        fleet.FleetFilter(status="broken; DROP TABLE validation_history")


def test_cells_freshness_and_missing_pairs(fq):
    page = fq.nodes_page(fleet.FleetFilter(node_range=parse_node_range("gpu-003,gpu-005,gpu-006,gpu-010")))
    by = {n["node_name"]: n for n in page.nodes}
    nccl = by["gpu-003"]["cells"]["nccl_loopback"]
    assert nccl["status"] == "fail" and nccl["previous_status"] == "pass" and not nccl["stale"]
    assert nccl["age_s"] == pytest.approx(3600) and nccl["status_since"] == seed.NOW - dt.timedelta(hours=1)
    assert nccl["reason"] == seed.XSS_REASON
    assert all(c["stale"] for c in by["gpu-005"]["cells"].values())
    never = by["gpu-006"]["cells"]["dl_unit"]
    assert never["status"] is None and never["stale"] and never["age_s"] is None
    assert never["last_attempt_status"] == "timeout"
    assert by["gpu-010"]["cells"]["dl_unit"] is None  # never attempted at all
    assert by["gpu-010"]["cells"]["gpu_health"]["status"] == "pass"


def test_paging_follows_natural_node_order(db_dsn, store):
    nodes = ["gpu-10", "gpu-9", "gpu-2", "gpu-1", "gpu-100", "rack2-gpu1", "rack10-gpu1", "a-1", "gpu-010x"]
    store.record([seed.attempt(n, "gpu_health", "pass", seed.NOW - dt.timedelta(hours=1)) for n in nodes])
    expected = hostlist.numerically_sorted(nodes)
    with fleet.open_fleet(db_dsn, tests=seed.TESTS, staleness=WEEK, now=seed.NOW) as q:
        pages = [q.nodes_page(page=p, per_page=4) for p in (1, 2, 3)]
        past_the_end = q.nodes_page(page=99, per_page=4)
    assert [n for p in pages for n in names(p)] == expected
    assert [p.pages for p in pages] == [3, 3, 3] and pages[0].total == len(nodes)
    assert past_the_end.page == 3 and names(past_the_end) == expected[8:]


def test_node_detail_and_history(fq):
    node = fq.node("gpu-003")
    assert node["gpu_model"] == seed.H100
    assert [c["test_name"] for c in node["cells"]] == seed.TESTS
    nccl = next(c for c in node["cells"] if c["test_name"] == "nccl_loopback")
    assert nccl["map_index"] == 7 and nccl["metrics"] == {"nccl_busbw_gbps": 12.5}
    assert nccl["checks"][0]["status"] == "fail"

    history = fq.history("gpu-003")
    assert [h["finished_at"] for h in history] == sorted((h["finished_at"] for h in history), reverse=True)
    assert history[0]["status"] == "fail" and history[0]["map_index"] == 7 and "checks" not in history[0]
    assert len(fq.history("gpu-003", limit=2)) == 2
    assert {h["test_name"] for h in fq.history("gpu-003", "nccl_loopback")} == {"nccl_loopback"}
    assert fq.node("gpu-999") is None


def test_node_names_are_validated_before_any_query(fq):
    for bad in ("gpu-003'; DROP TABLE validation_history; --", "GPU-003", ""):
        with pytest.raises(InvalidNodeName):
            fq.node(bad)
        with pytest.raises(InvalidNodeName):
            fq.history(bad)


def test_pairs_cover_every_known_node_and_enabled_test(fq):
    pairs = {(p["node_name"], p["test_name"]): p for p in fq.pairs()}
    assert len(pairs) == 8 * 4
    missing = pairs[("gpu-010", "dl_unit")]
    assert missing["status"] is None and missing["age_s"] is None and missing["gpu_model"] == seed.H100
    assert pairs[("gpu-003", "nccl_loopback")]["metrics"] == {"nccl_busbw_gbps": 12.5}
    assert pairs[("gpu-002", "dl_unit")]["gpu_model"] == seed.A100


def test_open_fleet_is_read_only(fq):
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        with fq.conn.cursor() as cur:
            cur.execute("DELETE FROM validation_history")


def test_open_fleet_reports_missing_schema_and_unreachable_database(empty_db_dsn, small_db):
    with pytest.raises(SchemaMissing, match=NO_SCHEMA.format(empty_db_dsn["dbname"])):
        with fleet.open_fleet(empty_db_dsn, tests=seed.TESTS, staleness=WEEK):
            pass
    with pytest.raises(database.DatabaseUnavailable, match="cannot connect"):
        with fleet.open_fleet({**small_db[0], "host": "127.0.0.1", "port": 1}, tests=seed.TESTS, staleness=WEEK):
            pass


# ---------------------------------------------------------------------------- the fleet page's snapshot
def test_page_snapshot_is_reused_until_an_attempt_is_recorded(db_dsn, store):
    seed.small_fleet(store)

    def summary(now=seed.NOW, cache_s=60.0):
        with fleet.open_fleet(db_dsn, tests=seed.TESTS, staleness=WEEK, now=now, snapshot_cache_s=cache_s) as q:
            return q.summary(), q.nodes_page(fleet.FleetFilter(status="never"))

    first, _ = summary()
    again, page = summary()
    assert again is first  # the same snapshot: no 20,000-row read for the next page or viewer
    assert names(page) == ["gpu-006"]  # a page's cells are still read from the database
    store.record([seed.attempt("gpu-006", t, "pass", seed.NOW - dt.timedelta(minutes=2)) for t in seed.TESTS])
    fresh, page = summary()  # a new attempt makes the next request read the fleet again
    assert fresh is not first and fresh["never_validated_nodes"] == 0 and names(page) == []
    assert summary()[0] is fresh
    assert summary(now=seed.NOW + dt.timedelta(minutes=5))[0] is not fresh  # the clock moved past the cache
    assert summary(cache_s=0)[0] is not summary(cache_s=0)[0]  # off by default: every request reads


# ---------------------------------------------------------------------------- node page plots
@pytest.fixture(scope="module")
def plots_db(pg_admin_dsn, template_db):
    with _fresh_database(pg_admin_dsn, template_db) as dsn:
        store = ResultStore(dsn)
        yield dsn, seed.small_fleet(store)["attempts"] + seed.plot_history(store)


def test_metric_series_of_a_node(plots_db):
    with fleet.open_fleet(plots_db[0], tests=seed.TESTS, staleness=WEEK, now=seed.NOW) as q:
        series = q.metric_series("gpu-003", seed.TESTS)
        few = q.metric_series("gpu-003", ["nccl_loopback"], per_test=3)
        recent = q.metric_series("gpu-003", ["dl_unit"], days=15)
        health = q.metric_series("gpu-003", ["gpu_health"])  # its speed probe's figures; its counts are not plotted
        assert set(health) == {("gpu_health", "probe_gemm_tflops_min"), ("gpu_health", "probe_hbm_gbps_min")}
        with pytest.raises(InvalidNodeName):
            q.metric_series("gpu-003'; --", seed.TESTS)
    # the judged metrics of each suite (of gpu_health: its speed probe's, not the counts it judges exactly)
    assert set(series) == {("gpu_health", "probe_gemm_tflops_min"), ("gpu_health", "probe_hbm_gbps_min"),
                           ("dl_unit", "gemm_bf16_tflops_min"), ("dl_unit", "mem_bw_gbps_min"),
                           ("nccl_loopback", "nccl_busbw_gbps"), ("storage_fio", "fio_seq_read_mibps"),
                           ("storage_fio", "fio_seq_write_mibps"), ("storage_fio", "fio_rand_read_iops"),
                           ("storage_fio", "fio_rand_write_iops")}
    expected = sorted((a.finished_at, a.status, a.metrics["nccl_busbw_gbps"]) for a in plots_db[1]
                      if (a.node_name, a.test_name) == ("gpu-003", "nccl_loopback"))
    nccl = series[("nccl_loopback", "nccl_busbw_gbps")]
    assert [(p["at"], p["status"], p["value"]) for p in nccl] == expected  # oldest first
    assert nccl[-1] == {"at": seed.NOW - dt.timedelta(hours=1), "status": "fail", "value": 12.5}
    assert [p["at"] for p in few[("nccl_loopback", "nccl_busbw_gbps")]] == [at for at, _, _ in expected[-3:]]
    gemm = recent[("dl_unit", "gemm_bf16_tflops_min")]
    assert [p["status"] for p in gemm] == ["pass", "pass", "pass"]  # 14 and 11 days ago, then 5 days ago
    assert min(p["at"] for p in gemm) >= seed.NOW - dt.timedelta(days=15)


def test_fleet_bands_are_the_straggler_baseline_with_p10_and_p90(plots_db):
    import statistics

    from cluster_doctor.domain.fleet_verdicts import BaselinePolicy

    policy = BaselinePolicy(min_fleet_nodes=3)
    with fleet.open_fleet(plots_db[0], tests=seed.TESTS, staleness=WEEK, now=seed.NOW) as q:
        bands = q.fleet_bands(seed.H100, seed.TESTS, policy)
        a100 = q.fleet_bands(seed.A100, seed.TESTS, policy)
        strict = q.fleet_bands(seed.H100, seed.TESTS, BaselinePolicy(min_fleet_nodes=10))
    # by hand: per H100 node the median of its latest 3 values of the last 14 days, then over nodes
    since = seed.NOW - dt.timedelta(days=14)
    per_node: dict[str, list] = {}
    for a in sorted(plots_db[1], key=lambda a: a.finished_at, reverse=True):
        if a.test_name == "nccl_loopback" and a.gpu_model == seed.H100 and a.status in ("pass", "fail") \
                and a.finished_at >= since:
            per_node.setdefault(a.node_name, []).append(a.metrics["nccl_busbw_gbps"])
    values = sorted(statistics.median(v[:3]) for v in per_node.values())
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    band = bands[("nccl_loopback", "nccl_busbw_gbps")]
    assert band["nodes"] == len(values) == 5 and band["gpu_model"] == seed.H100 and band["since"] == since
    assert (band["p10"], band["median"], band["p90"]) == pytest.approx((deciles[0], statistics.median(values),
                                                                        deciles[8]))
    assert band["p10"] < band["median"] < band["p90"]
    assert ("gpu_health", "gpus_visible") not in bands and len(bands) == 9  # the probe's two figures among them
    assert a100 == {} and strict == {}  # one A100 node, five H100 nodes: below the minimum, no band


def test_fleet_bands_read_numbers_only(db_dsn, store):
    """A metric stored as text, a boolean or a number no float holds is no measurement (as for verdicts)."""
    from cluster_doctor.domain.fleet_verdicts import BaselinePolicy

    when = seed.NOW - dt.timedelta(hours=2)
    good = [seed.attempt(f"gpu-00{i}", "nccl_loopback", "pass", when, metrics={"nccl_busbw_gbps": v})
            for i, v in ((1, 470.0), (2, 480), (3, 490.5))]
    odd = [seed.attempt(f"gpu-00{i}", "nccl_loopback", "pass", when, metrics={"nccl_busbw_gbps": v})
           for i, v in ((4, "475"), (5, True), (6, None))]
    store.record(good + odd)
    with psycopg.connect(**db_dsn) as conn:  # a JSON number past float range, as a suite could write it
        conn.execute("UPDATE validation_history SET metrics = '{\"nccl_busbw_gbps\": 1e400}'::jsonb "
                     "WHERE node_name = 'gpu-006'")
    with fleet.open_fleet(db_dsn, tests=seed.TESTS, staleness=WEEK, now=seed.NOW) as q:
        band = q.fleet_bands(seed.H100, ["nccl_loopback"], BaselinePolicy(min_fleet_nodes=3))
    assert band[("nccl_loopback", "nccl_busbw_gbps")]["nodes"] == 3
    assert band[("nccl_loopback", "nccl_busbw_gbps")]["median"] == 480.0


def test_metric_series_reads_numbers_only(db_dsn, store):
    when = seed.NOW - dt.timedelta(hours=4)
    store.record([seed.attempt("gpu-001", "nccl_loopback", "pass", when + dt.timedelta(hours=h), map_index=h,
                               metrics={"nccl_busbw_gbps": v}) for h, v in enumerate((470.5, "475", True, 1e308))])
    with fleet.open_fleet(db_dsn, tests=seed.TESTS, staleness=WEEK, now=seed.NOW) as q:
        points = q.metric_series("gpu-001", ["nccl_loopback"])[("nccl_loopback", "nccl_busbw_gbps")]
    assert [p["value"] for p in points] == [470.5, None, None, 1e308]  # every attempt kept: a status to mark


def test_history_is_the_nodes_newest_attempts_across_its_tests(db_dsn, store):
    """Newest per test from the per-pair index, then the newest of those: the same rows, in the same order,
    as ordering every attempt of the node (ties on the time broken by id)."""
    rows = [seed.attempt("gpu-001", test, status, seed.NOW - dt.timedelta(minutes=7 * i + j), map_index=i)
            for i in range(40) for j, (test, status) in enumerate([("gpu_health", "pass"), ("dl_unit", "timeout"),
                                                                   ("nccl_loopback", "fail")])]
    rows += [seed.attempt("gpu-001", "storage_fio", "pass", seed.NOW - dt.timedelta(minutes=70), map_index=99),
             seed.attempt("gpu-002", "gpu_health", "pass", seed.NOW, map_index=0)]
    store.record(rows)
    with fleet.open_fleet(db_dsn, tests=seed.TESTS, staleness=WEEK, now=seed.NOW) as q:
        with q.conn.cursor() as cur:
            cur.execute("SELECT id FROM validation_history WHERE node_name = 'gpu-001' "
                        "ORDER BY finished_at DESC, id DESC")
            every = [r[0] for r in cur.fetchall()]
            cur.execute("SELECT id FROM validation_history WHERE node_name = 'gpu-001' AND test_name = 'dl_unit' "
                        "ORDER BY finished_at DESC, id DESC")
            dl_unit = [r[0] for r in cur.fetchall()]
        for limit in (1, 10, 50, 200):
            assert [r["id"] for r in q.history("gpu-001", limit=limit)] == every[:limit]
        assert [r["id"] for r in q.history("gpu-001", "dl_unit", limit=25)] == dl_unit[:25]
        assert q.history("gpu-404") == []
