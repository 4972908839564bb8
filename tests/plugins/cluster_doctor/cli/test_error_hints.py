"""A command that cannot use its results database says which database it looked at and the likely cause:
never `run cluster-doctor db upgrade` for a database that is simply not the results one, or
for a server that is not running."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import psycopg
import pytest
from cluster_doctor.store import database, diagnosis, migrations
from cluster_doctor.store.history import ResultStore, SchemaMissing
from leftovers import processes_mentioning

ENV = {k: v for k, v in os.environ.items()
       if k not in ("PYTHONPATH", database.CONN_ENV, "AIRFLOW_HOME", "CLUSTER_DOCTOR_HOME")}


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "cluster_doctor", *args], capture_output=True, text=True,
                          env={**ENV, **(env or {})}, timeout=120)


@pytest.fixture(scope="module")
def stopped_stack():
    """A data directory as `make up` leaves it after `make down`: its results in database cluster_doctor,
    the server stopped. Outside pytest's basetemp (pgserver as root opens up the parents)."""
    home = pathlib.Path(tempfile.mkdtemp(prefix="cd-hints-"))
    pgdata = home / "pgdata"
    server = database.embedded_server(pgdata, cleanup_mode=None)
    try:
        params = database.libpq_params(server.get_uri())
        with psycopg.connect(**{**params, "dbname": "postgres"}, autocommit=True) as conn:
            conn.execute("CREATE DATABASE cluster_doctor")
        ResultStore(f"postgresql://postgres@/cluster_doctor?host={params['host']}").upgrade()
    finally:
        database.stop_embedded(server)
    yield home
    shutil.rmtree(home, ignore_errors=True)


def test_the_embedded_default_of_a_stack_directory_points_at_the_stacks_results_database(stopped_stack):
    # CLUSTER_DOCTOR_HOME=.stack cluster-doctor status, after make down
    out = cli("status", env={"CLUSTER_DOCTOR_HOME": str(stopped_stack)})
    assert out.returncode == 1
    [error] = [line for line in out.stderr.splitlines() if line.startswith("cluster-doctor: error: ")]
    pgdata = stopped_stack / "pgdata"
    assert f"no results schema in database 'postgres' at embedded PostgreSQL in {pgdata}" in error, error
    assert "database 'cluster_doctor' holds one (version" in error and "make up" in error
    assert f"--db-url 'postgresql://postgres@/cluster_doctor?host={pgdata}'" in error
    assert "db upgrade" not in error  # it would create a second, empty schema in the wrong database
    assert processes_mentioning(str(pgdata)) == []


def test_the_stacks_url_after_make_down_says_its_server_is_not_running(stopped_stack):
    pgdata = stopped_stack / "pgdata"
    out = cli("status", "--db-url", f"postgresql://postgres@/cluster_doctor?host={pgdata}")
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert f"at {pgdata}/cluster_doctor (from --db-url)" in out.stderr
    assert f"likely cause: no PostgreSQL server is running on the data directory {pgdata}" in out.stderr


def test_an_empty_database_and_an_old_schema_say_which_database_and_what_to_do(empty_db_dsn):
    with pytest.raises(SchemaMissing) as empty:
        ResultStore(empty_db_dsn).latest()
    assert f"no results schema in database {empty_db_dsn['dbname']!r}" in str(empty.value)
    assert "`cluster-doctor db upgrade` creates the schema" in str(empty.value)
    with psycopg.connect(**empty_db_dsn) as conn:
        migrations.upgrade(conn, migrations.available()[:2])
    with pytest.raises(SchemaMissing) as old:
        ResultStore(empty_db_dsn).latest()
    wanted = len(migrations.available())
    assert f"is version 2, this code needs {wanted}: run `cluster-doctor db upgrade`" in str(old.value)


@pytest.mark.parametrize("message, params, cause", [
    ('connection to server at "127.0.0.1", port 1 failed: Connection refused', {"host": "127.0.0.1", "port": "1"},
     "no PostgreSQL server listens on 127.0.0.1:1"),
    ('connection to server on socket "/nowhere/.s.PGSQL.5432" failed: No such file or directory',
     {"host": "/nowhere"}, "no PostgreSQL server has its socket in /nowhere"),
    ('FATAL: database "x" does not exist', {"host": "h", "dbname": "x"}, "the server runs, but has no database 'x'"),
    ('FATAL: password authentication failed for user "cd"', {"user": "cd"}, "the server refused user 'cd'"),
    ("timeout expired", {}, "the host did not answer in time"),
    ("SSL SYSCALL error: EOF detected", {}, None),
])
def test_a_failed_connection_names_its_likely_cause(message, params, cause):
    got = diagnosis.connect_cause(message, params)
    assert got == cause if cause is None else got.startswith(cause), got


def test_the_likely_cause_is_part_of_the_one_error_line():
    with pytest.raises(database.DatabaseUnavailable) as err:
        database.url_connector("postgresql://postgres@127.0.0.1:1/x")()
    assert str(err.value).endswith("; likely cause: no PostgreSQL server listens on 127.0.0.1:1")
    assert "\n" not in str(err.value)
