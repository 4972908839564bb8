"""make bench-metrics: the Prometheus scrape at 5,000 and 10,000 nodes x 4 tests, against the library's
encoder measured in the same run.

For each size, a database of a throwaway embedded PostgreSQL is seeded with the fleet of
tests/support/fleet_seed.py plus 35 days of older history (six attempts per pair, so the 30-day coverage
samples and the 7-day GPU-hours read a realistic window), then, alternating in one process on the same
data:

* the scrape (the figure): the standalone exporter's WSGI app with the family cache off, one new
  attempt recorded and the clock 15 s later before every scrape, as between two Prometheus scrapes:
  every scrape reads the database (what changed: ``store.fleet_state``) and writes its exposition
  (``reports.exposition``), gzipped;
* the baseline: the same collector's families through prometheus_client's own WSGI app (its encoder,
  gzip level 9), what every scrape cost before the collector's own encoder, but for the threefold assessment; its text is
  checked to be the scrape's, byte for byte.

Also, per size: the cold scrape (a fresh process: every pair read and assessed, every line written), the
cached one (within the cache's lifetime) and the load average. Then the server is stopped and deleted and
the run checks that nothing of it is left (tools/leftovers.py). The regression judgement is the ratio
baseline ÷ scrape of the same run (``metrics.speedup``): more than 20 % below bench/figures.toml's says REGRESSION
and the run exits 1 (bench/figures.py); a slower host slows both alike. The absolute figures are printed
with the host's speed beside them (bench/host.py). The last line reads ``scrape_ms=<p50 per size>
growth=<x> cold_ms=<p50 per size> bytes=<n> gzip_bytes=<n> series=<n> nodes=<sizes> baseline_ms=<p50 per
size> ratio=<baseline ÷ scrape per size> host_ms=<the host's calibration per size>``, values per size
comma-separated.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import pathlib
import statistics
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support.fleet_seed builds the fleet
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tools"))
TESTS = ["gpu_health", "dl_unit", "nccl_loopback", "storage_fio"]

import figures
import host
import interrupts
from leftovers import Leftovers

OLDER_HISTORY = """
INSERT INTO validation_history (node_name, test_name, status, started_at, finished_at, duration_s, metrics,
                                checks, reason, log_path, pod_name, gpu_model, gpu_count, suite_version,
                                dag_id, run_id, map_index, try_number)
SELECT node_name, test_name, status, started_at - k * interval '7 days', finished_at - k * interval '7 days',
       duration_s, metrics, checks, reason, log_path, pod_name, gpu_model, gpu_count, suite_version, dag_id,
       run_id || '-' || k, map_index, try_number
  FROM validation_history, generate_series(1, 5) AS k
"""
SCRAPE_EVERY = dt.timedelta(seconds=15)


def seed(dsn: dict, nodes: int) -> None:
    import psycopg
    from cluster_doctor.store.history import ResultStore

    from tests.support import fleet_seed

    ResultStore(dsn).upgrade()
    fleet_seed.bulk_fleet(dsn, nodes)
    with psycopg.connect(**dsn) as conn, conn.cursor() as cur:
        cur.execute("SET session_replication_role = replica")  # older rows never change the latest state
        cur.execute(OLDER_HISTORY)
        cur.execute("SET session_replication_role = DEFAULT")
        cur.execute("ANALYZE")


def create_database(server_dsn: dict, name: str) -> dict:
    import psycopg

    with psycopg.connect(**{**server_dsn, "dbname": "postgres"}, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return {**server_dsn, "dbname": name}


def _get(app, encoding: str = "gzip") -> bytes:
    out = {}
    body = b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "HTTP_ACCEPT_ENCODING": encoding,
                         "QUERY_STRING": ""}, lambda status, headers, exc_info=None: out.update(status=status)))
    assert out["status"].startswith("200"), out
    return body


class Fleet:
    """One seeded database: the scrape's apps over it, a clock that moves, attempts to record."""

    def __init__(self, dsn: dict, nodes: int):
        from cluster_doctor.domain.config import Settings
        from cluster_doctor.store.history import ResultStore

        from tests.support import fleet_seed

        self.dsn, self.nodes, self.seed = dsn, nodes, fleet_seed
        self.settings = Settings(tests=TESTS, staleness_days=7)
        self.now = fleet_seed.NOW
        self.store = ResultStore(dsn)
        self.recorded = 0

    def collector(self, cache_ttl_s: float):
        from cluster_doctor.reports import metrics

        return metrics.ClusterDoctorCollector(lambda _s: self.dsn, lambda: self.settings, clock=lambda: self.now,
                                              cache_ttl_s=cache_ttl_s)

    def exporter(self, cache_ttl_s: float = 0.0):
        from cluster_doctor.reports import metrics

        return metrics.exporter_app(metrics.make_registry(self.collector(cache_ttl_s)), token=lambda: None)

    def library(self):
        """prometheus_client's own app over a plain registry of the same collector."""
        from prometheus_client import CollectorRegistry, make_wsgi_app

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector(0.0))
        return make_wsgi_app(registry)

    def tick(self) -> None:
        """What happens between two scrapes: the clock moves, an attempt is recorded (a node's pass)."""
        self.recorded += 1
        self.now += SCRAPE_EVERY
        node = f"gpu-{(self.recorded * 7919) % self.nodes + 1:04d}"
        attempt = self.seed.attempt(node, "gpu_health", "pass", self.now - dt.timedelta(seconds=5))
        written = self.store.record([dataclasses.replace(attempt, run_id=f"bench__{self.now.isoformat()}")])
        assert written.inserted == 1, written


def same_text(scrape_app, library_app) -> bytes:
    """The scrape's plain text, checked to be the library's byte for byte (but the scrape's duration)."""
    plain = _get(scrape_app, "")
    if [line for line in plain.splitlines() if b"scrape_duration" not in line] != \
            [line for line in _get(library_app, "").splitlines() if b"scrape_duration" not in line]:
        raise SystemExit("the library's encoder does not write the scrape's text: the comparison means nothing")
    return plain


def timed(fn) -> tuple[float, bytes]:
    started = time.perf_counter()
    body = fn()
    return (time.perf_counter() - started) * 1000, body


def measure(dsn: dict, nodes: int, runs: int) -> dict:
    """One size's figures (p50 ms, sizes); prints its context line."""
    from cluster_doctor.store import fleet_state

    f = Fleet(dsn, nodes)
    cold = []
    for _ in range(3):  # a fresh process: nothing kept, every pair read and every line written
        fleet_state.forget()
        cold.append(timed(lambda: _get(f.exporter()))[0])
    scrape_app, library_app, cached_app = f.exporter(), f.library(), f.exporter(3600.0)
    plain = same_text(scrape_app, library_app)
    if b"\ncluster_doctor_up 1.0\n" not in b"\n" + plain:
        raise SystemExit("the scrape says the database is down")
    _get(cached_app)
    times: dict[str, list[float]] = {"scrape": [], "baseline": [], "cached": []}
    gz = b""
    for _ in range(runs):  # alternating, so a change of load hits both alike
        f.tick()
        ms, gz = timed(lambda: _get(scrape_app))
        times["scrape"].append(ms)
        f.tick()
        times["baseline"].append(timed(lambda: _get(library_app))[0])
        times["cached"].append(timed(lambda: _get(cached_app))[0])
    same_text(scrape_app, library_app)  # still, after the changes
    p50 = {k: statistics.median(v) for k, v in times.items()}
    p50["cold"] = statistics.median(cold)
    text = plain.decode()
    out = {**p50, "bytes": len(plain), "gzip_bytes": len(gz), "nodes": nodes, "ratio": p50["baseline"] / p50["scrape"],
           "series": sum(1 for line in text.splitlines() if line and not line.startswith("#"))}
    print(f"{nodes} nodes: scrape_ms={p50['scrape']:.0f} (a new attempt and 15 s before each) "
          f"cold_ms={p50['cold']:.0f} (first scrape of a process) cached_ms={p50['cached']:.0f} "
          f"baseline_ms={p50['baseline']:.0f} (prometheus_client's app, same text) "
          f"ratio={out['ratio']:.1f} (baseline ÷ scrape: the judged figure) series={out['series']} "
          f"bytes={len(plain)} gzip_bytes={len(gz)}; load average {os.getloadavg()[0]:.2f}", flush=True)
    return out


def figure_line(results: list[dict]) -> str:
    def each(key: str, fmt: str = ".0f") -> str:
        return ",".join(format(r[key], fmt) for r in results)

    first, last = results[0], results[-1]
    growth = last["scrape"] / first["scrape"] if len(results) > 1 else 1.0
    return (f"scrape_ms={each('scrape')} growth={growth:.2f} cold_ms={each('cold')} bytes={first['bytes']} "
            f"gzip_bytes={first['gzip_bytes']} series={first['series']} nodes={each('nodes')} "
            f"baseline_ms={each('baseline')} ratio={each('ratio', '.1f')} host_ms={each('host_ms', '.1f')}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="5000,10000", help="fleet sizes, comma-separated")
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    sizes = [int(n) for n in args.nodes.split(",")]

    from cluster_doctor.store import database

    leftovers = Leftovers()
    results = []
    with leftovers.tempdir("cd-bench-metrics-") as tmp:
        with interrupts.embedded_postgres(tmp / "pg") as server:
            server_dsn = database.libpq_params(server.get_uri())
            for nodes in sizes:
                dsn = create_database(server_dsn, f"bench_{nodes}")
                started = time.perf_counter()
                load = os.getloadavg()[0]
                seed(dsn, nodes)
                print(f"seeded {nodes} nodes x {len(TESTS)} tests with 6 attempts per pair in "
                      f"{time.perf_counter() - started:.0f} s (load average {load:.1f} on {os.cpu_count()} CPUs)",
                      flush=True)
                result = measure(dsn, nodes, args.runs)
                result["host_ms"] = host.calibration_ms()
                print(host.line(result["host_ms"]), flush=True)
                results.append(result)
    worse = figures.ratio_regressions({("metrics.speedup", figures.size_label(r["nodes"], "nodes")): r["ratio"]
                                       for r in results})
    for line in worse:
        print(line, flush=True)
    return leftovers.finish(figure_line(results), ok=not worse)


if __name__ == "__main__":
    sys.exit(interrupts.run(main))
