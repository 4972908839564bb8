"""cluster_doctor.cli.connection: which results database a CLI command uses."""

import json

from cluster_doctor.cli import connection
from cluster_doctor.store import database


def test_cli_resolution_prefers_the_flag(monkeypatch):
    monkeypatch.setenv(database.CONN_ENV, "postgresql://b@h/e")
    connect, source = connection.resolve("postgresql://a@h/d")
    assert source == "--db-url" and str(connect) == "h/d"


def test_cli_resolution_reads_the_airflow_connection_from_the_environment(monkeypatch, db_dsn):
    """The env var goes through the provider's PostgresHook, so Airflow's JSON form works too."""
    monkeypatch.setenv(database.CONN_ENV, json.dumps({
        "conn_type": "postgres", "host": db_dsn["host"], "port": int(db_dsn.get("port", 5432)),
        "login": db_dsn.get("user", "postgres"), "schema": db_dsn["dbname"]}))
    connect, source = connection.resolve(None)
    assert source == database.CONN_ENV and "Airflow connection validation_db" in str(connect)
    with connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT current_database()")
        assert cur.fetchone()[0] == db_dsn["dbname"]


# ---------------------------------------------------------------------------- which database, said once
import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from leftovers import processes_mentioning

ENV = {k: v for k, v in os.environ.items()
       if k not in ("PYTHONPATH", database.CONN_ENV, "AIRFLOW_HOME", "CLUSTER_DOCTOR_HOME")}
LINE = "cluster-doctor: results database: "


def cli(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "cluster_doctor", *args], capture_output=True, text=True,
                          env={**ENV, **(env or {})}, timeout=timeout)


def said(stderr: str) -> list[str]:
    return [line.removeprefix(LINE) for line in stderr.splitlines() if line.startswith(LINE)]


def test_a_command_says_in_one_line_which_database_it_used_and_why(db_url, db_dsn):
    out = cli("db", "version", "--db-url", db_url)
    assert out.returncode == 0, out.stderr
    assert said(out.stderr) == [f"{db_dsn['host']}:{db_dsn.get('port', 5432)}/{db_dsn['dbname']} (from --db-url)"]
    out = cli("status", env={database.CONN_ENV: db_url})
    assert out.returncode == 0 and len(said(out.stderr)) == 1, out.stderr
    assert said(out.stderr)[0].endswith("(from $AIRFLOW_CONN_VALIDATION_DB)") and db_dsn["dbname"] in out.stderr


def test_a_database_that_cannot_be_reached_is_one_error_line_naming_it_and_its_source():
    out = cli("status", "--db-url", "postgresql://postgres@127.0.0.1:1/x")
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and said(out.stderr) == []
    assert "127.0.0.1:1/x (from --db-url)" in out.stderr


@pytest.fixture(scope="module")
def scratch_home():
    """A HOME of its own, outside pytest's basetemp: as root, pgserver runs postgres as another user
    and opens up the parent directories, which a pytest starting meanwhile closes again."""
    home = pathlib.Path(tempfile.mkdtemp(prefix="cd-cli-home-"))
    try:
        yield home
    finally:
        for line in processes_mentioning(str(home)):  # only when a test failed half-way
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split(":", 1)[0]), signal.SIGKILL)
        shutil.rmtree(home, ignore_errors=True)


def _server_gone(pgdata: pathlib.Path, timeout: float = 10) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := processes_mentioning(str(pgdata))) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_without_a_configured_database_the_embedded_one_runs_only_while_the_command_does(scratch_home):
    pgdata = scratch_home / ".cluster_doctor" / "pgdata"
    for args in (["db", "upgrade"], ["status"]):
        out = cli(*args, env={"HOME": str(scratch_home)})
        assert out.returncode == 0, out.stderr
        assert said(out.stderr) == [(f"embedded PostgreSQL in {pgdata} (no --db-url, $AIRFLOW_CONN_VALIDATION_DB "
                                     "or Airflow connection validation_db; it runs only while a command uses it)")]
        assert "Warning" not in out.stderr  # platformdirs' RuntimeDirWarning among them
        assert processes_mentioning(str(pgdata)) == [] and not (pgdata / "postmaster.pid").exists()
    assert "0 node-test pair(s)" in out.stdout


def test_sigterm_stops_the_embedded_server_of_a_long_running_command(scratch_home):
    pgdata = scratch_home / ".cluster_doctor" / "pgdata"
    exporter = subprocess.Popen([sys.executable, "-m", "cluster_doctor", "metrics", "--port", "0"],
                                env={**ENV, "HOME": str(scratch_home)}, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not processes_mentioning(str(pgdata)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert processes_mentioning(str(pgdata)), "the exporter never started its embedded server"
        time.sleep(1)  # into serve_forever
        exporter.send_signal(signal.SIGTERM)
        assert exporter.wait(30) == 128 + signal.SIGTERM
    finally:
        exporter.kill()
        exporter.wait()
    assert _server_gone(pgdata) == [], "SIGTERM left the embedded server running"


def test_a_server_left_by_a_killed_command_is_stopped_by_the_next_one(scratch_home):
    pgdata = scratch_home / ".cluster_doctor" / "pgdata"
    code = "from cluster_doctor.cli import connection; connection.resolve(None); print('up', flush=True); input()"
    victim = subprocess.Popen([sys.executable, "-c", code], env={**ENV, "HOME": str(scratch_home)},
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert victim.stdout.readline().strip() == "up"
    finally:
        victim.kill()  # SIGKILL: no exit handler, the server stays
        victim.wait()
    assert processes_mentioning(str(pgdata)), "expected the killed command's server to run on"
    out = cli("status", env={"HOME": str(scratch_home)})
    assert out.returncode == 0, out.stderr
    assert _server_gone(pgdata) == []
