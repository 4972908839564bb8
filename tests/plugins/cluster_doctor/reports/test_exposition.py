"""The scrape's own exposition (reports.exposition, pair_families.PairText) writes the bytes
prometheus_client's encoders write for the collector's families, in every format, filtered or not, and
keeps writing them as the fleet changes between scrapes."""

from __future__ import annotations

import datetime as dt
import gzip
import math
import random

import pytest
from cluster_doctor.domain.config import Settings
from cluster_doctor.reports import exposition, metrics
from cluster_doctor.store import fleet_state
from cluster_doctor.store.history import ResultStore
from prometheus_client.utils import floatToGoString

from tests.support import fleet_seed as seed

FORMATS = [None, "text/plain; version=0.0.4", "text/plain; version=1.0.0; escaping=underscores",
           "application/openmetrics-text; version=1.0.0", "application/openmetrics-text; version=0.0.1",
           "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3"]


def collector(dsn: dict, now: dt.datetime = seed.NOW) -> metrics.ClusterDoctorCollector:
    return metrics.ClusterDoctorCollector(lambda s: dsn, Settings, clock=lambda: now, cache_ttl_s=0)


def library(c: metrics.ClusterDoctorCollector, accept: str | None, names=None) -> tuple[bytes, str]:
    """The library's encoder over the collector's families (every scrape's encoder before ours)."""
    registry = metrics.make_registry(type("Families", (), {"collect": c.collect, "describe": c.describe})())
    return metrics.render(registry, accept, names)


def without_duration(body: bytes) -> list[str]:
    return [line for line in body.decode().splitlines() if not line.startswith("cluster_doctor_scrape_duration")]


@pytest.fixture
def fleet_db(db_dsn):
    """The small fleet plus 60 bulk nodes: fails, stale and never-run pairs, actions, a check not run."""
    store = ResultStore(db_dsn)
    seed.small_fleet(store)
    seed.bulk_fleet(db_dsn, 60)
    fleet_state.forget()
    return db_dsn, store


def test_go_is_the_librarys_float_format():
    rng = random.Random(32)
    values = [0.0, -0.0, 1.0, 8, 999999.9999, 1e6, 1234567.0, 1.7e9, 1e16, 1e-7, -5.5, -1e7, 12.5, 2 ** 53,
              math.inf, -math.inf, math.nan, *(rng.uniform(-1e10, 1e10) for _ in range(2000)),
              *(rng.expovariate(1e-5) for _ in range(2000))]
    assert [exposition.go(v) for v in values] == [floatToGoString(v) for v in values]


@pytest.mark.parametrize("accept", FORMATS)
def test_the_scrape_writes_what_the_library_writes_for_the_same_families(fleet_db, accept):
    dsn, _ = fleet_db
    c = collector(dsn)
    for _ in range(2):  # the first scrape renders every node, the second reuses their text
        body, content_type = metrics.render(metrics.make_registry(c), accept)
        expected, expected_type = library(c, accept)
        assert content_type == expected_type
        assert without_duration(body) == without_duration(expected)
    assert b"cluster_doctor_validation_action{" in body and b"cluster_doctor_validation_checks_not_run{" in body
    assert b'status="never"' in body and b"cluster_doctor_nccl_busbw_gbps{" in body


@pytest.mark.parametrize("names", [["cluster_doctor_up", "cluster_doctor_node_info"],
                                   ["cluster_doctor_validation_staleness_seconds", "cluster_doctor_skipped_values_total"],
                                   ["cluster_doctor_skipped_values"], ["nothing_of_ours"]])
@pytest.mark.parametrize("accept", [None, "application/openmetrics-text; version=1.0.0"])
def test_the_name_filter_keeps_what_the_librarys_restricted_registry_keeps(fleet_db, names, accept):
    c = collector(fleet_db[0])
    body, _ = metrics.render(metrics.make_registry(c), accept, names)
    assert without_duration(body) == without_duration(library(c, accept, names)[0])


def test_the_kept_text_follows_the_fleet_between_scrapes(fleet_db):
    """New results, a node that leaves, time passing: each scrape writes what a fresh collector would."""
    from cluster_doctor.store import inventory

    dsn, store = fleet_db
    kept = metrics.make_registry(collector(dsn))
    metrics.render(kept)
    store.record([seed.attempt("gpu-0007", "dl_unit", "fail", seed.NOW - dt.timedelta(minutes=1),
                               checks=[seed.NOT_RUN, {"name": "gemm", "status": "fail", "action": "reset_gpu"}]),
                  seed.attempt("gpu-006", "gpu_health", "pass", seed.NOW - dt.timedelta(minutes=2), gpu_model="X \"1\"")])
    body, _ = metrics.render(kept)
    fleet_state.forget()
    assert without_duration(body) == without_duration(library(collector(dsn), None)[0])
    seen = [inventory.SeenNode(f"gpu-{i:04d}", 8, seed.H100, "free") for i in range(1, 60)]
    inventory.record_discovery(store.connect, seen, seen_at=seed.NOW - dt.timedelta(minutes=1), complete=True)
    for later, counted in ((seed.NOW + dt.timedelta(hours=20), True), (seed.NOW + dt.timedelta(days=2), False)):
        kept.collector.clock = lambda later=later: later
        body, _ = metrics.render(kept)
        assert (b'node="gpu-0060"' in body) is counted  # gone: counted for the grace period (24 h), then not
        fleet_state.forget()
        assert without_duration(body) == without_duration(library(collector(dsn, later), None)[0])


def test_the_exporter_app_gzips_the_same_text(fleet_db):
    c = collector(fleet_db[0])
    app = metrics.metrics_app(metrics.make_registry(c))
    status, headers, body = metrics.wsgi_get(app, accept_encoding="gzip",
                                             query="name[]=cluster_doctor_validation_status")
    assert status == 200 and dict(headers)["Content-Encoding"] == "gzip"
    assert gzip.decompress(body) == library(c, None, ["cluster_doctor_validation_status"])[0]
    status, headers, _ = metrics.wsgi_get(app, accept="application/openmetrics-text; version=1.0.0")
    assert dict(headers)["Content-Type"].startswith("application/openmetrics-text")
