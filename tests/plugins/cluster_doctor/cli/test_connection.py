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
