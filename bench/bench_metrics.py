"""make bench-metrics: one Prometheus scrape at 5,000 nodes x 4 tests, against a baseline measured in
the same run.

Seeds a throwaway embedded PostgreSQL with the 5,000-node fleet of tests/ui/fleet_seed.py plus 35
days of older history (about 100,000 attempts, so the 30-day coverage samples read a realistic
window), then, alternating in one process on the same data:

* the scrape: the standalone exporter's WSGI app (prometheus_client's encoder and gzip), with the
  family cache off (every scrape queries: Prometheus scrapes less often than the cache lives, so a
  miss is the honest figure); a separate line gives the cached scrape;
* the baseline: the same collector's families written by a minimal hand-written text writer (the
  kind of writer the library's exposition replaced) and gzipped — the floor of what the exposition
  can cost, so the ratio is what the library's encoder adds; its text parses to the same samples.

Then the server is stopped and deleted and the run checks that nothing of it is left
(tools/leftovers.py). The last line reads ``scrape_ms=<p50> bytes=<n> gzip_bytes=<n> series=<n>
nodes=<n> baseline_ms=<p50> ratio=<x>``.
"""

from __future__ import annotations

import argparse
import gzip
import os
import pathlib
import statistics
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.ui.fleet_seed builds the fleet
sys.path.insert(0, str(REPO / "tools"))
TESTS = ["gpu_health", "dl_unit", "nccl_loopback", "storage_fio"]

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


def seed(dsn: dict, nodes: int) -> None:
    import psycopg
    from cluster_doctor.store.history import ResultStore

    from tests.ui import fleet_seed

    ResultStore(dsn).upgrade()
    fleet_seed.bulk_fleet(dsn, nodes)
    with psycopg.connect(**dsn) as conn, conn.cursor() as cur:
        cur.execute("SET session_replication_role = replica")  # older rows never change the latest state
        cur.execute(OLDER_HISTORY)
        cur.execute("SET session_replication_role = DEFAULT")
        cur.execute("ANALYZE")


def _escape(value: str, quotes: bool = True) -> str:
    value = value.replace("\\", "\\\\").replace("\n", "\\n")
    return value.replace('"', '\\"') if quotes else value


def hand_written_text(families) -> bytes:
    """The Prometheus text format written by hand: HELP, TYPE and one line per sample (gauges and
    counters only, as the collector yields), escaped as the format requires."""
    out = []
    for family in families:
        name = family.name + ("_total" if family.type == "counter" else "")
        out.append(f"# HELP {name} {_escape(family.documentation, quotes=False)}\n# TYPE {name} {family.type}\n")
        for sample in family.samples:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(sample.labels.items()))
            out.append(f"{sample.name}{{{labels}}} {sample.value!r}\n" if labels else f"{sample.name} {sample.value!r}\n")
    return "".join(out).encode()


def samples(text: bytes) -> set:
    """Every sample of a Prometheus text body, as (name, sorted labels, value)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items())), s.value)
            for f in text_string_to_metric_families(text.decode()) for s in f.samples
            if s.name != "cluster_doctor_scrape_duration_seconds"}  # a timing: differs by nature


def measure(dsn: dict, runs: int) -> str:
    """Alternating scrapes and baselines over the same database; prints the context lines and returns
    the figure line."""
    from cluster_doctor.domain.config import Settings
    from cluster_doctor.reports import metrics

    from tests.ui import fleet_seed

    settings = Settings(tests=TESTS, staleness_days=7)

    def collector(cache_ttl_s: float) -> metrics.ClusterDoctorCollector:
        return metrics.ClusterDoctorCollector(lambda _s: dsn, lambda: settings, clock=lambda: fleet_seed.NOW,
                                              cache_ttl_s=cache_ttl_s)

    uncached = collector(0.0)
    apps = {"uncached": metrics.exporter_app(metrics.make_registry(uncached), token=lambda: None),
            "cached": metrics.exporter_app(metrics.make_registry(collector(3600.0)), token=lambda: None)}

    def scrape(which: str, encoding: str) -> bytes:
        out = {}
        body = b"".join(apps[which]({"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "HTTP_ACCEPT_ENCODING": encoding},
                                    lambda status, headers, exc_info=None: out.update(status=status)))
        assert out["status"].startswith("200"), out
        return body

    def baseline() -> bytes:
        return gzip.compress(hand_written_text(list(uncached.collect())))

    plain = scrape("uncached", "")
    if b"\ncluster_doctor_up 1.0\n" not in b"\n" + plain:
        raise SystemExit("the scrape says the database is down")
    if samples(plain) != samples(gzip.decompress(baseline())):
        raise SystemExit("the hand-written baseline does not write the same samples: the comparison means nothing")
    scrape("cached", "gzip")  # fills the cache
    times: dict[str, list[float]] = {"scrape": [], "baseline": [], "cached": []}
    gz = b""
    for _ in range(runs):  # alternating, so a change of load hits both alike
        started = time.perf_counter()
        gz = scrape("uncached", "gzip")
        times["scrape"].append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        base = baseline()
        times["baseline"].append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        scrape("cached", "gzip")
        times["cached"].append((time.perf_counter() - started) * 1000)
    p50 = {k: statistics.median(v) for k, v in times.items()}
    text = plain.decode()
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    nodes = len({line.split('node="', 1)[1].split('"', 1)[0] for line in text.splitlines()
                 if line.startswith("cluster_doctor_node_info{")})
    print(f"baseline (same families, hand-written text writer + gzip): baseline_ms={p50['baseline']:.0f} "
          f"gzip_bytes={len(base)}; same samples as the scrape")
    print(f"cached families (a scrape within the cache's lifetime): scrape_ms={p50['cached']:.0f}")
    return (f"scrape_ms={p50['scrape']:.0f} bytes={len(plain)} gzip_bytes={len(gz)} series={series} nodes={nodes} "
            f"baseline_ms={p50['baseline']:.0f} ratio={p50['scrape'] / p50['baseline']:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    from cluster_doctor.store import database

    load = os.getloadavg()[0]
    leftovers = Leftovers()
    with leftovers.tempdir("cd-bench-metrics-") as tmp:
        server = database.embedded_server(tmp / "pg", cleanup_mode="delete")
        try:
            dsn = database.libpq_params(server.get_uri())
            started = time.perf_counter()
            seed(dsn, args.nodes)
            print(f"seeded {args.nodes} nodes x {len(TESTS)} tests with 6 attempts per pair in "
                  f"{time.perf_counter() - started:.0f} s (load average {load:.1f} on {os.cpu_count()} CPUs)")
            figure = measure(dsn, args.runs)
        finally:
            server.cleanup()  # before the directory goes: a server in a removed directory runs on
    return leftovers.finish(figure)


if __name__ == "__main__":
    sys.exit(main())
