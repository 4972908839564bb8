"""make bench-metrics: one Prometheus scrape at 5,000 nodes x 4 tests, this code and the previous code.

Seeds a throwaway embedded PostgreSQL with the 5,000-node fleet of tests/ui/fleet_seed.py plus 35
days of older history (about 100,000 attempts, so the 30-day coverage samples read a realistic
window), then scrapes the standalone exporter's WSGI app in a fresh process per implementation:

* current: this checkout, with the family cache off (every scrape queries: Prometheus scrapes less
  often than the cache lives, so a miss is the honest figure); a second line gives the cached scrape;
* previous: ``plugins/cluster_doctor`` of git ref ``--previous`` (default: the last commit with the
  hand-written text writer, before the exposition went through prometheus_client's WSGI app),
  extracted with ``git archive`` and imported instead of this checkout (its migrations must match
  the seeded schema).

Each line reads ``scrape_ms=<p50> bytes=<n> gzip_bytes=<n> series=<n> nodes=<n>``; the last line is
the current implementation's.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.ui.fleet_seed builds the fleet
TESTS = ["gpu_health", "dl_unit", "nccl_loopback", "storage_fio"]
PREVIOUS = "ad0ef8e"  # the last commit with the hand-written text writer (FastGauge, _fast_text)

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


def worker(dsn: dict, runs: int, cache: bool) -> dict:
    """Runs inside the implementation's process: scrape the exporter app ``runs`` times."""
    import inspect

    from cluster_doctor.domain.config import Settings
    from cluster_doctor.reports import metrics

    from tests.ui import fleet_seed

    settings = Settings(tests=TESTS, staleness_days=7)
    kwargs = {"clock": lambda: fleet_seed.NOW}
    if "cache_ttl_s" in inspect.signature(metrics.ClusterDoctorCollector).parameters:
        kwargs["cache_ttl_s"] = 3600.0 if cache else 0.0
    registry = metrics.make_registry(metrics.ClusterDoctorCollector(lambda _s: dsn, lambda: settings, **kwargs))
    app = metrics.exporter_app(registry, token=lambda: None)

    def scrape(encoding: str) -> bytes:
        out = {}
        body = b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "HTTP_ACCEPT_ENCODING": encoding},
                            lambda status, headers, exc_info=None: out.update(status=status)))
        assert out["status"].startswith("200"), out
        return body

    plain = scrape("")
    text = plain.decode()
    if "\ncluster_doctor_up 1.0\n" not in "\n" + text:
        raise SystemExit("the scrape says the database is down")
    scrape("gzip")  # warm-up (connection, catalog caches)
    times, gz = [], b""
    for _ in range(runs):
        started = time.perf_counter()
        gz = scrape("gzip")
        times.append((time.perf_counter() - started) * 1000)
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    nodes = len({line.split('node="', 1)[1].split('"', 1)[0] for line in text.splitlines()
                 if line.startswith("cluster_doctor_node_info{")})
    return {"scrape_ms": statistics.median(times), "bytes": len(plain), "gzip_bytes": len(gz), "series": series,
            "nodes": nodes}


def run_worker(dsn: dict, runs: int, *, plugins: pathlib.Path | None, cache: bool = False) -> dict:
    env = dict(os.environ)
    # the previous code is imported instead of this checkout's (PYTHONPATH comes before the editable
    # install's path entry); the repository root gives both the tests.ui seed module
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (plugins, REPO) if p)
    out = subprocess.run([sys.executable, __file__, "--worker", json.dumps(dsn), "--runs", str(runs)]
                         + (["--cache"] if cache else []), env=env, capture_output=True, text=True, cwd=REPO)
    if out.returncode != 0:
        raise SystemExit(f"worker failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def line(r: dict) -> str:
    return (f"scrape_ms={r['scrape_ms']:.0f} bytes={r['bytes']} gzip_bytes={r['gzip_bytes']} "
            f"series={r['series']} nodes={r['nodes']}")


def previous_code(ref: str, into: pathlib.Path) -> pathlib.Path | None:
    archive = into / "previous.tar"
    with open(archive, "wb") as fh:
        done = subprocess.run(["git", "-C", str(REPO), "archive", ref, "plugins/cluster_doctor"], stdout=fh,
                              stderr=subprocess.PIPE, text=False)
    if done.returncode != 0:
        print(f"previous: not measured (git archive {ref}: {done.stderr.decode().strip()})")
        return None
    with tarfile.open(archive) as tar:
        tar.extractall(into / "previous", filter="data")
    return into / "previous" / "plugins"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--previous", default=PREVIOUS, help=f"git ref of the implementation to compare with "
                        f"(default {PREVIOUS}: the hand-written text writer)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--cache", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker), args.runs, args.cache)))
        return 0

    from cluster_doctor.store import database

    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="cd-bench-metrics-") as tmp:
        server = database.embedded_server(pathlib.Path(tmp) / "pg", cleanup_mode="delete")
        dsn = database.libpq_params(server.get_uri())
        started = time.perf_counter()
        seed(dsn, args.nodes)
        print(f"seeded {args.nodes} nodes x {len(TESTS)} tests with 6 attempts per pair in "
              f"{time.perf_counter() - started:.0f} s (load average {load:.1f} on {os.cpu_count()} CPUs)")
        previous = previous_code(args.previous, pathlib.Path(tmp))
        if previous is not None:
            print(f"previous ({args.previous}): {line(run_worker(dsn, args.runs, plugins=previous))}")
        print(f"current, cached families: {line(run_worker(dsn, args.runs, plugins=None, cache=True))}")
        print(line(run_worker(dsn, args.runs, plugins=None)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
