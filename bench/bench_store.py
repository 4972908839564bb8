"""make bench-store: validation_latest at 10 and 30 million history rows, against the naive query, and
one retention pass, in one run.

Builds a year of history over 20,000 node-test pairs (5,000 nodes x 4 suites, realistic status mix and
payloads; generate_series in SQL, a million rows per statement) in a throwaway embedded PostgreSQL: 10
million attempts first (~500 per pair), then 20 million more (a year of hourly health sweeps is ~1,500
per pair). At the first size it copies them into an unindexed table and times
  * ``SELECT * FROM validation_latest`` (the product's view), and
  * the same semantics computed naively (DISTINCT ON over the unindexed copy; dropped afterwards: it
    doubles the disk the run needs),
each fetched completely by the client; at the second size the view alone. Then one retention pass
(store.retention, the daily run's) deletes the oldest month, timed, and the view is checked unchanged by
it. Then, for 10,000 nodes (40,000 pairs), the first size again in a database of its own, the view alone
(it reads one row per pair, whatever the history). Then it stops and deletes the server and checks that
nothing of the run is left (tools/leftovers.py:
processes, its temporary directory, ports) and says so. The regression judgement is the ratio naive ÷ view
at the first size (``store.speedup``, the two measured alternately in this run): more than 20 % below bench/figures.toml's says
REGRESSION and the run exits 1 (bench/figures.py); a slower host slows both alike. The absolute figures are
printed with the host's speed beside them (bench/host.py). The last line reads ``latest_view_ms=<p50 per
size> naive_ms=<p50> speedup=<x> rows=<sizes> prune_s=<s> pruned=<n> nodes=<fleet sizes>
view_by_nodes_ms=<p50 at the first size per fleet size> host_ms=<the host's calibration>``, values
comma-separated. Exit status 1 also when the view disagrees with the naive query or the retention changed
it. Disk: about 27 GB at its peak (30 M rows and their indexes, then 10 M more).
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import os
import pathlib
import statistics
import sys
import time

import psycopg
from cluster_doctor.store import database
from cluster_doctor.store.history import ResultStore

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import figures
import host
import interrupts
from leftovers import Leftovers

TESTS = ["gpu_health", "dl_unit", "nccl_loopback", "storage_fio"]

GENERATE = """
INSERT INTO validation_history (node_name, test_name, status, started_at, finished_at, duration_s, metrics,
                                checks, reason, log_path, pod_name, gpu_model, suite_version, dag_id, run_id,
                                map_index, try_number)
SELECT node, test, status,
       finished - make_interval(secs => dur), finished, dur,
       CASE WHEN status IN ('pass', 'fail', 'error')
            THEN jsonb_build_object('gemm_bf16_tflops_min', round((650 + 80 * r2)::numeric, 1),
                                    'hbm_gbps_min', round((2900 + 300 * r2)::numeric, 1),
                                    'gpu_count', 8)
            ELSE '{{}}'::jsonb END,
       CASE WHEN status = 'fail'
            THEN jsonb_build_array(jsonb_build_object('name', 'gemm_bf16_tflops', 'status', 'fail',
                 'device', 'cuda:' || (k % 8), 'value', 512.3, 'threshold', 657.0, 'unit', 'TFLOPS'))
            ELSE '[]'::jsonb END,
       CASE status WHEN 'fail' THEN 'gemm_bf16_tflops on cuda:' || (k % 8) || ': 512.3 < 657.0 TFLOPS'
                   WHEN 'error' THEN 'CUDA error: out of memory'
                   WHEN 'timeout' THEN 'pod Pending for more than 1200 s'
                   WHEN 'preempted' THEN 'a user pod claimed the node'
                   WHEN 'skipped' THEN 'node no longer free at submit time' END,
       '/data/continuous_validation/' || test || '/' || node || '/' || test || '_' || node || '_'
           || extract(epoch FROM finished)::bigint || '.log',
       'cv-' || node || '-' || k, 'NVIDIA-H100-80GB-HBM3', 'sha256:0123456789abcdef',
       'continuous_validation', 'scheduled__' || k, p % 16, 1
  FROM generate_series({start}, {stop}) AS g(i),
       LATERAL (SELECT i % {pairs} AS p, i / {pairs} AS k, random() AS r, random() AS r2) AS x,
       LATERAL (SELECT 'gpu-' || lpad((p % {nodes})::text, 5, '0') AS node,
                       (ARRAY['gpu_health', 'dl_unit', 'nccl_loopback', 'storage_fio'])[1 + p / {nodes}] AS test,
                       CASE WHEN r < 0.85 THEN 'pass' WHEN r < 0.89 THEN 'fail' WHEN r < 0.91 THEN 'error'
                            WHEN r < 0.96 THEN 'timeout' WHEN r < 0.98 THEN 'preempted' ELSE 'skipped' END
                           AS status,
                       now() - interval '365 days' + make_interval(secs => k * {spacing} + p % 3600) AS finished,
                       (60 + 240 * r2)::double precision AS dur) AS y
"""

NAIVE = """
SELECT a.node_name, a.test_name, e.status, e.started_at, e.finished_at, e.duration_s, e.metrics, e.checks,
       e.reason, e.log_path, e.pod_name, e.gpu_model, e.suite_version, e.dag_id, e.run_id, e.id AS history_id,
       a.finished_at AS last_attempt_at, a.status AS last_attempt_status, a.reason AS last_attempt_reason,
       a.id AS last_attempt_id
  FROM (SELECT DISTINCT ON (node_name, test_name) * FROM naive_history
         ORDER BY node_name, test_name, finished_at DESC, id DESC) a
  LEFT JOIN (SELECT DISTINCT ON (node_name, test_name) * FROM naive_history
              WHERE status IN ('pass', 'fail', 'error')
              ORDER BY node_name, test_name, finished_at DESC, id DESC) e USING (node_name, test_name)
"""


def timed_query(dsn: dict, sql: str, repeats: int) -> float:
    """p50 ms to execute the query and stream every row to the client (COPY ... TO STDOUT), the same
    for both queries; Python-side decoding of the rows is the client's business and is left out."""
    times = []
    conn = psycopg.connect(**dsn)
    try:
        for _ in range(repeats):
            sink = io.BytesIO()
            with conn.cursor() as cur:
                start = time.perf_counter()
                with cur.copy(f"COPY ({sql}) TO STDOUT") as copy:
                    for block in copy:
                        sink.write(block)
                times.append((time.perf_counter() - start) * 1000)
            conn.rollback()
    finally:
        conn.close()
    return statistics.median(times)


def fetch(dsn: dict, sql: str) -> list:
    with psycopg.connect(**dsn) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="10000000,30000000", help="history sizes, comma-separated, ascending")
    parser.add_argument("--nodes", default="5000,10000",
                        help="fleet sizes, comma-separated: every row size at the first; at the others the view "
                             "at the first row size (a database of its own)")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--naive-repeats", type=int, default=3)
    args = parser.parse_args()
    args.sizes = [int(n) for n in args.rows.split(",")]
    fleets = [int(n) for n in args.nodes.split(",")]
    args.nodes = fleets[0]
    leftovers = Leftovers()
    with leftovers.tempdir("cd-bench-store-") as tmp:
        with interrupts.embedded_postgres(tmp / "pg") as server:
            dsn = database.libpq_params(server.get_uri())
            result = measure(dsn, args)
            if result is not None:  # the view at the first row size, per fleet size
                by_nodes = {fleets[0]: result[1][args.sizes[0]]}
                by_nodes.update({nodes: view_at(dsn, args, nodes) for nodes in fleets[1:]})
    if result is None:
        return leftovers.finish("latest_view_ms=nan naive_ms=nan speedup=nan rows=0 prune_s=nan pruned=0", ok=False)
    figure, measured, speedup = result
    host_ms = host.calibration_ms()
    print(host.line(host_ms), flush=True)
    worse = figures.ratio_regressions({("store.speedup", figures.size_label(min(measured), "rows")): speedup})
    for line in worse:
        print(line, flush=True)
    return leftovers.finish(f"{figure} nodes={','.join(map(str, by_nodes))} "
                            f"view_by_nodes_ms={','.join(f'{ms:.1f}' for ms in by_nodes.values())} "
                            f"host_ms={host_ms:.1f}", ok=not worse)


def view_at(server_dsn: dict, args: argparse.Namespace, nodes: int) -> float:
    """validation_latest's p50 with ``nodes`` nodes x 4 suites at the first row size, in a database of its
    own (dropped afterwards: its disk)."""
    name = f"bench_{nodes}_nodes"
    with psycopg.connect(**server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = {**server_dsn, "dbname": name}
    try:
        ResultStore(dsn).upgrade()
        with psycopg.connect(**dsn, autocommit=True) as conn:
            loaded = load(conn.cursor(), argparse.Namespace(**{**vars(args), "nodes": nodes}), start=0,
                          stop=args.sizes[0])
        ms = timed_query(dsn, "SELECT * FROM validation_latest", args.repeats)
        print(f"{nodes:,} nodes, {loaded:,} history rows: latest_view_ms={ms:.1f} (p50, streamed; "
              f"{nodes * len(TESTS):,} pairs); load average {os.getloadavg()[0]:.2f}", flush=True)
        return ms
    finally:
        with psycopg.connect(**server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def measure(dsn: dict, args: argparse.Namespace) -> tuple[str, dict[int, float], float] | None:
    """Load, record incrementally, time the view at each size (and the naive query at the first), then
    a retention pass: the figure line, {size asked for: view p50} and naive ÷ view at the first size, or
    None when an answer is wrong."""
    ResultStore(dsn).upgrade()
    view_ms: dict[int, float] = {}
    naive_ms = speedup = 0.0
    loaded = 0
    for size in args.sizes:
        with psycopg.connect(**dsn, autocommit=True) as conn:
            loaded = load(conn.cursor(), args, start=loaded, stop=size)
        if not naive_ms:
            record_incrementally(dsn, args)
            loaded = fetch(dsn, "SELECT count(*) FROM validation_history")[0][0]
            compared = compare_naive(dsn, args)
            if compared is None:
                return None
            naive_ms, speedup = compared
        view_ms[size] = timed_query(dsn, "SELECT * FROM validation_latest", args.repeats)
        started = time.perf_counter()
        fetch(dsn, "SELECT * FROM validation_latest")
        print(f"{loaded:,} history rows: latest_view_ms={view_ms[size]:.1f} (p50, streamed); fetched and decoded "
              f"into Python objects by psycopg in {(time.perf_counter() - started) * 1000:.0f} ms; load average "
              f"{os.getloadavg()[0]:.2f}", flush=True)
    pruned = prune_a_month(dsn)
    if pruned is None:
        return None
    first = view_ms[min(view_ms)]
    figure = (f"latest_view_ms={','.join(f'{v:.1f}' for v in view_ms.values())} naive_ms={naive_ms:.1f} "
              f"speedup={speedup:.1f} rows={','.join(str(r) for r in view_ms)} "
              f"prune_s={pruned[0]:.1f} pruned={pruned[1]}")
    return figure, view_ms, speedup


def compare_naive(dsn: dict, args: argparse.Namespace) -> tuple[float, float] | None:
    """The naive query's p50 over the unindexed copy and its ratio to the view's, the two alternating (a
    change of load hits both alike), after checking it answers what the view answers; the copy is dropped
    afterwards. None when they differ."""
    with psycopg.connect(**dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE naive_history AS SELECT * FROM validation_history")
        conn.execute("VACUUM ANALYZE naive_history")
    naive, view = [], []
    for _ in range(args.naive_repeats):
        naive.append(timed_query(dsn, NAIVE, 1))
        view.append(timed_query(dsn, "SELECT * FROM validation_latest", 1))
    naive_ms = statistics.median(naive)
    # Same answer, or the comparison means nothing.
    core = "SELECT node_name, test_name, status, finished_at, last_attempt_status, last_attempt_at FROM ({}) q"
    view_rows = fetch(dsn, core.format("SELECT * FROM validation_latest"))
    same = sorted(view_rows) == sorted(fetch(dsn, core.format(NAIVE)))
    with psycopg.connect(**dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE naive_history")
    if not same:
        print("ERROR: validation_latest differs from the naive query", file=sys.stderr)
        return None
    print(f"naive query (DISTINCT ON over an unindexed copy): naive_ms={naive_ms:.1f}; the view's {len(view_rows):,} "
          f"pairs identical to its answer", flush=True)
    return naive_ms, naive_ms / statistics.median(view)


def prune_a_month(dsn: dict) -> tuple[float, int] | None:
    """One retention pass deleting the history's oldest month (store.retention, as the daily run does);
    (seconds, attempts deleted), or None when it changed the latest state."""
    from cluster_doctor.domain.config import Settings
    from cluster_doctor.store import retention

    latest = "SELECT * FROM validation_latest ORDER BY node_name, test_name"
    before = fetch(dsn, latest)
    settings = Settings(history_retention_days=334)  # the generated history spans 365 days
    started = time.perf_counter()
    done = retention.prune(dsn, settings, now=dt.datetime.now(dt.UTC))
    seconds = time.perf_counter() - started
    if fetch(dsn, latest) != before:
        print("ERROR: the retention pass changed validation_latest", file=sys.stderr)
        return None
    print(f"retention: {done.describe()}; validation_latest unchanged", flush=True)
    return seconds, done.deleted


def load(cur: psycopg.Cursor, args: argparse.Namespace, *, start: int, stop: int) -> int:
    """History rows ``start`` .. ``stop`` - 1, loaded the way an import would (the per-row state trigger
    off, then one rebuild of the latest state); the number of history rows."""
    pairs = args.nodes * len(TESTS)
    spacing = int(365 * 86400 / max(1, args.sizes[-1] // pairs))  # the last size spans the year
    cur.execute("ALTER SYSTEM SET max_wal_size = '16GB'")
    cur.execute("ALTER SYSTEM SET checkpoint_timeout = '1h'")
    cur.execute("SELECT pg_reload_conf()")
    cur.execute("SET synchronous_commit = off")
    cur.execute("SET maintenance_work_mem = '1GB'")
    cur.execute("SET work_mem = '256MB'")
    t0 = time.perf_counter()
    cur.execute("ALTER TABLE validation_history DISABLE TRIGGER validation_history_state_insert")
    chunk = 1_000_000
    for first in range(start, stop, chunk):
        last = min(stop, first + chunk) - 1
        cur.execute(GENERATE.format(start=first, stop=last, pairs=pairs, nodes=args.nodes, spacing=spacing))
        print(f"  loaded {last + 1:,} rows ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    cur.execute("ALTER TABLE validation_history ENABLE TRIGGER validation_history_state_insert")
    t1 = time.perf_counter()
    cur.execute("SELECT cluster_doctor_rebuild_pair_state()")
    pair_rows = cur.fetchone()[0]
    print(f"history loaded to {stop:,} rows in {t1 - t0:.0f} s; validation_latest rebuilt in "
          f"{time.perf_counter() - t1:.1f} s ({pair_rows:,} pairs)", flush=True)
    for table in ("validation_history", "validation_pair_state"):
        cur.execute(f"VACUUM ANALYZE {table}")
    cur.execute("SELECT count(*) FROM validation_history")
    return cur.fetchone()[0]


def record_incrementally(dsn: dict, args: argparse.Namespace) -> None:
    """Attempts recorded one run at a time through the trigger keep the view exact; how fast."""
    store = ResultStore(dsn)
    batch = [{"node_name": f"gpu-{i % args.nodes:05d}", "test_name": TESTS[i % len(TESTS)], "status": "pass",
              "finished_at": dt.datetime.now(dt.UTC), "metrics": {"gemm_bf16_tflops_min": 700.0},
              "dag_id": "bench", "run_id": f"bench__{i // 16}", "map_index": i % 16} for i in range(2000)]
    t2 = time.perf_counter()
    for start in range(0, len(batch), 16):  # one record() per run of 16 pairs, as the DAG does
        store.record(batch[start:start + 16])
    per_attempt_ms = (time.perf_counter() - t2) * 1000 / len(batch)
    print(f"record(): {per_attempt_ms:.2f} ms per attempt through the trigger (batches of 16)", flush=True)


if __name__ == "__main__":
    sys.exit(interrupts.run(main))
