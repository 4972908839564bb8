import multiprocessing

import psycopg
import pytest
from cluster_doctor.store import migrations
from cluster_doctor.store.history import ResultStore

HISTORY_CONTRACT = {
    "id", "node_name", "test_name", "status", "started_at", "finished_at", "duration_s", "metrics", "checks",
    "reason", "log_path", "pod_name", "gpu_model", "suite_version", "dag_id", "run_id", "map_index",
    "try_number", "created_at",
}
LATEST_CONTRACT = {
    "node_name", "test_name", "status", "started_at", "finished_at", "metrics", "checks", "last_attempt_at",
    "last_attempt_status",
}


def columns(dsn, table):
    with psycopg.connect(**dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s", (table,))
        return dict(cur.fetchall())


def schema_snapshot(dsn):
    with psycopg.connect(**dsn) as conn, conn.cursor() as cur:
        cur.execute("""SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                       WHERE n.nspname = 'public' ORDER BY 1""")
        objects = cur.fetchall()
        cur.execute("SELECT version, checksum, applied_at FROM cluster_doctor_schema_migrations ORDER BY 1")
        return objects, cur.fetchall()


def test_upgrade_twice_changes_nothing_the_second_time(empty_db_dsn):
    store = ResultStore(empty_db_dsn)
    first = store.upgrade()
    every = [m.version for m in migrations.available()]
    assert first.applied == every and first.current == every[-1]
    before = schema_snapshot(empty_db_dsn)
    second = store.upgrade()
    assert second.applied == [] and "nothing changed" in second.describe()
    assert schema_snapshot(empty_db_dsn) == before
    cols = columns(empty_db_dsn, "validation_history")
    assert HISTORY_CONTRACT <= set(cols)
    assert cols["started_at"] == cols["finished_at"] == "timestamp with time zone"
    assert cols["metrics"] == cols["checks"] == "jsonb"
    assert LATEST_CONTRACT <= set(columns(empty_db_dsn, "validation_latest"))
    claims = columns(empty_db_dsn, "validation_claims")
    assert set(claims) == {"node_name", "test_name", "dag_id", "run_id", "claimed_at", "expires_at"}
    assert claims["expires_at"] == "timestamp with time zone"


def test_a_node_has_at_most_one_claim_row(db_dsn):
    with psycopg.connect(**db_dsn) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO validation_claims VALUES ('gpu-1', 'dl_unit', 'd', 'r1', now(), now())")
        with pytest.raises(psycopg.errors.UniqueViolation):
            cur.execute("INSERT INTO validation_claims VALUES ('gpu-1', 'gpu_health', 'd', 'r2', now(), now())")
    with psycopg.connect(**db_dsn) as conn, conn.cursor() as cur, pytest.raises(psycopg.errors.CheckViolation):
        cur.execute("INSERT INTO validation_claims VALUES ('gpu-2', 'dl_unit', 'd', 'r1', now(), now() - interval '1 s')")


def _upgrade_in_process(dsn, queue):
    try:
        queue.put(ResultStore(dsn).upgrade().applied)
    except Exception as exc:  # report, don't hang the parent
        queue.put(repr(exc))


def test_concurrent_upgrades_serialize(empty_db_dsn):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_upgrade_in_process, args=(empty_db_dsn, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    every = [m.version for m in migrations.available()]
    assert sorted(map(str, results)) == sorted([str(every), "[]", "[]", "[]"]), results
    with psycopg.connect(**empty_db_dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM cluster_doctor_schema_migrations")
        assert cur.fetchone()[0] == len(every)


def test_an_edited_migration_is_refused(empty_db_dsn):
    ResultStore(empty_db_dsn).upgrade()
    edited = [migrations.Migration(m.version, m.name, m.sql + "\n-- edited") for m in migrations.available()]
    conn = psycopg.connect(**empty_db_dsn)
    with pytest.raises(migrations.MigrationError, match="modified after it was applied"):
        migrations.upgrade(conn, edited)
    conn.close()


def test_a_newer_schema_is_not_downgraded(empty_db_dsn):
    ResultStore(empty_db_dsn).upgrade()
    with psycopg.connect(**empty_db_dsn) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO cluster_doctor_schema_migrations VALUES (99, 'future', 'x')")
    conn = psycopg.connect(**empty_db_dsn)
    with pytest.raises(migrations.MigrationError, match="does not know"):
        migrations.upgrade(conn)
    conn.close()


def test_a_failing_migration_leaves_nothing_behind(empty_db_dsn):
    every = migrations.available()
    broken = [*every, migrations.Migration(len(every) + 1, "broken", "CREATE TABLE t2 (x int); SELECT 1/0;")]
    conn = psycopg.connect(**empty_db_dsn)
    with pytest.raises(psycopg.errors.DivisionByZero):
        migrations.upgrade(conn, broken)
    conn.close()
    assert ResultStore(empty_db_dsn).schema_version() == 0
    assert columns(empty_db_dsn, "validation_history") == {}


def test_migration_files_only_add():
    for m in migrations.available():
        sql = m.sql.upper()
        assert "DROP TABLE" not in sql and "DROP COLUMN" not in sql, m.name
