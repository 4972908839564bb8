"""make bench-page: the fleet page at 5,000 and 10,000 nodes x 4 tests, and a node page with a year of
hourly history.

For each size, a database of a throwaway embedded PostgreSQL is seeded like bench-metrics (the fleet of
tests/support/fleet_seed.py plus 35 days of older history), and gpu-0001 gets a year of hourly attempts of
every test (35,040 rows, generate_series in SQL). ``/cluster-doctor/`` is requested through the real
FastAPI app (auth dependency overridden: Airflow's JWT check is not what is measured). The first request
fills the 30-day coverage samples cache, as the first visit after a restart would. Then, per size:

* uncached (the figure): a new attempt recorded and the clock 15 s later before every request, so no
  request reuses the previous one's snapshot (``fleet.PAGE_SNAPSHOT_CACHE_S``): each reads what changed
  (``store.fleet_state``), assesses, and renders its page of 100 nodes;
* the page as it comes: the following requests with nothing recorded in between (paging, filtering,
  several viewers, a reload reuse the snapshot);
* the node page of gpu-0001 (its latest state, its last 50 attempts, its plots over 90 days; the plots'
  fleet bands cached after the first visit, which is printed apart);
* the baseline: the naive query (bench-store's: the latest attempt and the latest judged one of every
  pair by DISTINCT ON over the whole history, streamed to the client), interleaved with the requests.

Then the server is stopped and deleted and the run checks that nothing of it is left (tools/leftovers.py).
The regression judgement is the ratios naive ÷ page (``page.speedup``) and naive ÷ node page
(``page.node_speedup``) of the same run: one more than 20 % below bench/figures.toml's says REGRESSION and the run
exits 1 (bench/figures.py); a slower host slows both sides alike. The absolute figures are printed with the
host's speed beside them (bench/host.py). Last line, values per size comma-separated: ``uncached_ms=<p50>
growth=<x> page_ms=<p50> node_ms=<p50> nodes=<sizes> naive_ms=<p50> speedup=<naive ÷ uncached>
node_speedup=<naive ÷ node> host_ms=<the host's calibration>``.
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
sys.path.insert(0, str(REPO))  # tests.support.fleet_seed builds the fleet
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tools"))

import bench_metrics
import bench_store
import figures
import host
import interrupts
from leftovers import Leftovers

NODE = "gpu-0001"
# A year of hourly attempts of every test on one node, copied from its latest ones (the health sweep
# adds such rows for every free node); older than them, so its latest state is unchanged.
YEAR_OF_HOURS = """
INSERT INTO validation_history (node_name, test_name, status, started_at, finished_at, duration_s, metrics,
                                checks, reason, log_path, pod_name, gpu_model, gpu_count, suite_version,
                                dag_id, run_id, map_index, try_number)
SELECT h.node_name, h.test_name, h.status, h.started_at - k * interval '1 hour', h.finished_at - k * interval '1 hour',
       h.duration_s, h.metrics, h.checks, h.reason, h.log_path, h.pod_name, h.gpu_model, h.gpu_count,
       h.suite_version, h.dag_id, 'hourly-' || k, h.map_index, h.try_number
  FROM validation_latest l JOIN validation_history h ON h.id = l.history_id, generate_series(1, 8760) AS k
 WHERE l.node_name = %s
"""
# The baseline: bench-store's naive query over the history itself
NAIVE = bench_store.NAIVE.replace("naive_history", "validation_history")


def seed(dsn: dict, nodes: int) -> None:
    import psycopg

    bench_metrics.seed(dsn, nodes)
    with psycopg.connect(**dsn) as conn, conn.cursor() as cur:
        cur.execute("SET session_replication_role = replica")  # older rows never change the latest state
        cur.execute(YEAR_OF_HOURS, (NODE,))
        cur.execute("SET session_replication_role = DEFAULT")
        cur.execute("ANALYZE validation_history")


def client_for(fleet: bench_metrics.Fleet):
    from cluster_doctor.web import app as webapp
    from fastapi import FastAPI

    with warnings.catch_warnings():  # starlette's notice about its httpx test client: not this benchmark's
        warnings.filterwarnings("ignore", message=".*starlette.testclient")
        warnings.filterwarnings("ignore", message=".*httpx")
        from fastapi.testclient import TestClient

    sub = webapp.create_app(connector_provider=lambda _s: fleet.dsn, settings_provider=lambda: fleet.settings,
                            clock=lambda: fleet.now)
    sub.dependency_overrides[webapp.require_ui_access] = lambda: "bench"
    root = FastAPI()
    root.mount(webapp.MOUNT_PREFIX, sub)
    return TestClient(root)


def measure(dsn: dict, nodes: int, runs: int) -> dict:
    """One size's figures (p50 ms); prints its context lines."""
    fleet = bench_metrics.Fleet(dsn, nodes)
    client = client_for(fleet)

    def get(path: str) -> tuple[float, int]:
        started = time.perf_counter()
        r = client.get(path)
        ms = (time.perf_counter() - started) * 1000
        assert r.status_code == 200, (path, r.status_code)
        return ms, len(r.content)

    first_ms, _ = get("/cluster-doctor/")
    assert f'data-node="{NODE}"'.encode() in client.get("/cluster-doctor/").content
    node_first_ms, _ = get(f"/cluster-doctor/nodes/{NODE}")
    times: dict[str, list[float]] = {"uncached": [], "page": [], "node": [], "naive": []}
    for _ in range(runs):  # interleaved, so a change of load hits them alike
        fleet.tick()
        times["uncached"].append(get("/cluster-doctor/")[0])
        ms, size = get("/cluster-doctor/")
        times["page"].append(ms)
        ms, node_size = get(f"/cluster-doctor/nodes/{NODE}")
        times["node"].append(ms)
        times["naive"].append(bench_store.timed_query(dsn, NAIVE, 1))
    p50 = {k: statistics.median(v) for k, v in times.items()}
    p50["speedup"], p50["node_speedup"] = p50["naive"] / p50["uncached"], p50["naive"] / p50["node"]
    print(f"{nodes} nodes: uncached_ms={p50['uncached']:.0f} (a new attempt and 15 s before each) "
          f"page_ms={p50['page']:.0f} (nothing new since the previous request) node_ms={p50['node']:.0f} "
          f"({NODE}, a year of hourly history, {node_size} bytes; first visit {node_first_ms:.0f} ms: its model's "
          f"fleet bands); first request {first_ms:.0f} ms (fills the 30-day coverage cache); page size {size} bytes; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    print(f"{nodes} nodes: naive_ms={p50['naive']:.0f} (the naive query, same run) speedup={p50['speedup']:.2f} "
          f"(naive ÷ uncached) node_speedup={p50['node_speedup']:.2f} (naive ÷ node page): the judged figures",
          flush=True)
    return {**p50, "nodes": nodes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="5000,10000", help="fleet sizes, comma-separated")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    sizes = [int(n) for n in args.nodes.split(",")]

    from cluster_doctor.store import database

    leftovers = Leftovers()
    results = []
    with leftovers.tempdir("cd-bench-page-") as tmp:
        with interrupts.embedded_postgres(tmp / "pg") as server:
            server_dsn = database.libpq_params(server.get_uri())
            for nodes in sizes:
                dsn = bench_metrics.create_database(server_dsn, f"bench_{nodes}")
                started, load = time.perf_counter(), os.getloadavg()[0]
                seed(dsn, nodes)
                print(f"seeded {nodes} nodes x {len(bench_metrics.TESTS)} tests (and a year of hours of {NODE}) in "
                      f"{time.perf_counter() - started:.0f} s (load average {load:.1f} on {os.cpu_count()} CPUs)",
                      flush=True)
                result = measure(dsn, nodes, args.runs)
                result["host_ms"] = host.calibration_ms()
                print(host.line(result["host_ms"]), flush=True)
                results.append(result)
    worse = figures.ratio_regressions({(key, figures.size_label(r["nodes"], "nodes")): r[field]
                                       for r in results for key, field in (("page.speedup", "speedup"),
                                                                           ("page.node_speedup", "node_speedup"))})
    for line in worse:
        print(line, flush=True)

    def each(key: str, fmt: str = ".0f") -> str:
        return ",".join(format(r[key], fmt) for r in results)

    growth = results[-1]["uncached"] / results[0]["uncached"] if len(results) > 1 else 1.0
    return leftovers.finish(f"uncached_ms={each('uncached')} growth={growth:.2f} page_ms={each('page')} "
                            f"node_ms={each('node')} nodes={each('nodes')} naive_ms={each('naive')} "
                            f"speedup={each('speedup', '.2f')} node_speedup={each('node_speedup', '.2f')} "
                            f"host_ms={each('host_ms', '.1f')}", ok=not worse)


if __name__ == "__main__":
    sys.exit(interrupts.run(main))
