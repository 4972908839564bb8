"""make bench-store: validation_latest on a big history vs the naive query, in one run.

Builds ~10 million attempts over 20,000 node-test pairs (5,000 nodes x 4 suites, ~500 attempts each,
a year of history with realistic status mix and payloads) in a throwaway embedded PostgreSQL, copies
them into an unindexed table, then times
  * ``SELECT * FROM validation_latest`` (the product's view), and
  * the same semantics computed naively (DISTINCT ON over the unindexed copy),
each fetched completely by the client. Then it stops and deletes the server and checks that
nothing of the run is left (tools/leftovers.py: processes, its temporary directory, ports) and says
so; the last line reads exactly ``latest_view_ms=<p50> naive_ms=<p50> speedup=<x> rows=<n>``.
Exit status 1 when the view disagrees with the naive query or something was left behind.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import pathlib
import statistics
import sys
import time

import psycopg
from cluster_doctor.store import database
from cluster_doctor.store.history import ResultStore

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools"))
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
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--naive-repeats", type=int, default=3)
    args = parser.parse_args()
    leftovers = Leftovers()
    with leftovers.tempdir("cd-bench-store-") as tmp:
        server = database.embedded_server(tmp / "pg", cleanup_mode="delete")
        try:
            figure = measure(database.libpq_params(server.get_uri()), args)
        finally:
            server.cleanup()  # before the directory goes: a server in a removed directory runs on
    return leftovers.finish(figure or "latest_view_ms=nan naive_ms=nan speedup=nan rows=0", ok=figure is not None)


def measure(dsn: dict, args: argparse.Namespace) -> str | None:
    """Load, record incrementally, time both queries, compare their answers: the figure line, or
    None when the answers differ."""
    ResultStore(dsn).upgrade()
    with psycopg.connect(**dsn, autocommit=True) as conn:
        history_rows = load(conn.cursor(), args)
    record_incrementally(dsn, args)
    with psycopg.connect(**dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO naive_history SELECT * FROM validation_history WHERE dag_id = 'bench'")
        conn.execute("VACUUM ANALYZE naive_history")
    view_ms = timed_query(dsn, "SELECT * FROM validation_latest", args.repeats)
    naive_ms = timed_query(dsn, NAIVE, args.naive_repeats)
    # Same answer, or the comparison means nothing.
    core = "SELECT node_name, test_name, status, finished_at, last_attempt_status, last_attempt_at FROM ({}) q"
    view_rows = fetch(dsn, core.format("SELECT * FROM validation_latest"))
    if sorted(view_rows) != sorted(fetch(dsn, core.format(NAIVE))):
        print("ERROR: validation_latest differs from the naive query", file=sys.stderr)
        return None
    started = time.perf_counter()
    fetch(dsn, "SELECT * FROM validation_latest")
    decoded_ms = (time.perf_counter() - started) * 1000
    print(f"view: {len(view_rows):,} pairs, identical to the naive result; fetched and decoded into "
          f"Python objects by psycopg in {decoded_ms:.0f} ms", flush=True)
    return (f"latest_view_ms={view_ms:.1f} naive_ms={naive_ms:.1f} speedup={naive_ms / view_ms:.1f} "
            f"rows={history_rows}")


def load(cur: psycopg.Cursor, args: argparse.Namespace) -> int:
    """The history, loaded the way an import would (triggers off, then one rebuild of the latest
    state), and its unindexed copy; the number of history rows."""
    pairs = args.nodes * len(TESTS)
    spacing = int(365 * 86400 / max(1, args.rows // pairs))
    cur.execute("ALTER SYSTEM SET max_wal_size = '16GB'")
    cur.execute("ALTER SYSTEM SET checkpoint_timeout = '1h'")
    cur.execute("SELECT pg_reload_conf()")
    cur.execute("SET synchronous_commit = off")
    cur.execute("SET maintenance_work_mem = '1GB'")
    cur.execute("SET work_mem = '256MB'")
    t0 = time.perf_counter()
    cur.execute("ALTER TABLE validation_history DISABLE TRIGGER validation_history_state_insert")
    chunk = 1_000_000
    for start in range(0, args.rows, chunk):
        stop = min(args.rows, start + chunk) - 1
        cur.execute(GENERATE.format(start=start, stop=stop, pairs=pairs, nodes=args.nodes, spacing=spacing))
        print(f"  loaded {stop + 1:,} rows ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    cur.execute("ALTER TABLE validation_history ENABLE TRIGGER validation_history_state_insert")
    t1 = time.perf_counter()
    cur.execute("SELECT cluster_doctor_rebuild_pair_state()")
    pair_rows = cur.fetchone()[0]
    print(f"history loaded in {t1 - t0:.0f} s; validation_latest rebuilt in {time.perf_counter() - t1:.1f} s "
          f"({pair_rows:,} pairs)", flush=True)
    cur.execute("CREATE TABLE naive_history AS SELECT * FROM validation_history")
    for table in ("validation_history", "validation_pair_state", "naive_history"):
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
    sys.exit(main())
