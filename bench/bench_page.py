"""make bench-page: the fleet page's first page at 5,000 nodes x 4 tests.

Seeds a throwaway embedded PostgreSQL like bench-metrics (the 5,000-node fleet of
tests/ui/fleet_seed.py plus 35 days of older history), then requests ``/cluster-doctor/`` through
the real FastAPI app (auth dependency overridden: Airflow's JWT check is not what is measured).
The first request fills the 30-day coverage samples cache, as the first visit after a restart
would. Then two medians:

* uncached: the fleet snapshot read and assessed again on every request, as after a new attempt was
  recorded (``fleet.PAGE_SNAPSHOT_CACHE_S``'s cache emptied before each request);
* the figure: the following requests as they come, where the snapshot of the previous request is
  reused while no attempt was recorded (paging, filtering, several viewers, a reload).

Also the node page of one node (its plots' fleet bands cached after the first visit). Then the
server is stopped and deleted and the run checks that nothing of it is left (tools/leftovers.py).
Last line, the figure against its same-run baseline (the uncached page):
``page_ms=<p50> uncached_ms=<p50> speedup=<x> nodes=<n>``.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time
import warnings

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.ui.fleet_seed builds the fleet
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tools"))

from leftovers import Leftovers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()

    import bench_metrics
    from cluster_doctor.store import database

    leftovers = Leftovers()
    with leftovers.tempdir("cd-bench-page-") as tmp:
        server = database.embedded_server(tmp / "pg", cleanup_mode="delete")
        try:
            dsn = database.libpq_params(server.get_uri())
            bench_metrics.seed(dsn, args.nodes)
            figure = measure(dsn, args)
        finally:
            server.cleanup()  # before the directory goes: a server in a removed directory runs on
    return leftovers.finish(figure)


def measure(dsn: dict, args: argparse.Namespace) -> str:
    """The page requests through the real app; prints the context lines, returns the figure line."""
    import bench_metrics
    from cluster_doctor.domain.config import Settings
    from cluster_doctor.store import fleet
    from cluster_doctor.web import app as webapp
    from fastapi import FastAPI

    with warnings.catch_warnings():  # starlette's notice about its httpx test client: not this benchmark's
        warnings.filterwarnings("ignore", message=".*starlette.testclient")
        from fastapi.testclient import TestClient

    from tests.ui import fleet_seed

    load = os.getloadavg()[0]
    settings = Settings(tests=bench_metrics.TESTS, staleness_days=7)
    sub = webapp.create_app(connector_provider=lambda _s: dsn, settings_provider=lambda: settings,
                            clock=lambda: fleet_seed.NOW)
    sub.dependency_overrides[webapp.require_ui_access] = lambda: "bench"
    root = FastAPI()
    root.mount(webapp.MOUNT_PREFIX, sub)
    client = TestClient(root)
    started = time.perf_counter()
    first = client.get("/cluster-doctor/")
    first_ms = (time.perf_counter() - started) * 1000
    assert first.status_code == 200 and 'data-node="gpu-0001"' in first.text, first.status_code

    def median_ms(path: str, before=lambda: None) -> tuple[float, int]:
        times = []
        for _ in range(args.runs):
            before()
            started = time.perf_counter()
            r = client.get(path)
            times.append((time.perf_counter() - started) * 1000)
            assert r.status_code == 200, (path, r.status_code)
        return statistics.median(times), len(r.content)

    uncached, _ = median_ms("/cluster-doctor/", before=fleet._SNAPSHOT_CACHE.clear)
    started = time.perf_counter()
    assert client.get("/cluster-doctor/nodes/gpu-0001").status_code == 200
    node_first_ms = (time.perf_counter() - started) * 1000
    node_ms, node_size = median_ms("/cluster-doctor/nodes/gpu-0001")
    page_ms, size = median_ms("/cluster-doctor/")
    print(f"first request (fills the 30-day coverage cache): {first_ms:.0f} ms; page size {size} bytes")
    print(f"uncached (a new attempt before every request): page_ms={uncached:.0f}")
    print(f"node page with plots: node_ms={node_ms:.0f} ({node_size} bytes); first visit (computes the fleet "
          f"bands of its GPU model): {node_first_ms:.0f} ms")
    print(f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after, on {os.cpu_count()} CPUs")
    return f"page_ms={page_ms:.0f} uncached_ms={uncached:.0f} speedup={uncached / page_ms:.1f} nodes={args.nodes}"


if __name__ == "__main__":
    sys.exit(main())
