import json

import pytest

from cluster_doctor.store import database


def test_urls_are_parsed_by_libpq():
    params = database.libpq_params("postgresql://u%40x:p%2Fw@db.example:6543/results?sslmode=require")
    assert params == {"host": "db.example", "port": "6543", "user": "u@x", "password": "p/w",
                      "dbname": "results", "sslmode": "require"}


def test_socket_urls_from_the_embedded_server():
    params = database.libpq_params("postgresql://postgres:@/postgres?host=/tmp/pg")
    assert params["host"] == "/tmp/pg" and params["dbname"] == "postgres" and params["user"] == "postgres"


@pytest.mark.parametrize("url, message", [
    ("mysql://h/d", "postgresql://"),
    ("h/d", "got scheme 'none'"),
    ("postgresql://h/d?not_a_libpq_option=1", "invalid"),
])
def test_bad_urls_are_one_line_errors(url, message):
    with pytest.raises(database.InvalidDatabaseUrl, match=message) as err:
        database.libpq_params(url)
    assert "\n" not in str(err.value)


def test_describe_never_shows_the_password():
    connect = database.connector("postgresql://u:secret@h:1/d")
    assert str(connect) == "h:1/d" and "secret" not in repr(connect)


def test_unreachable_database_is_one_line_naming_host_and_port():
    connect = database.connector({"host": "127.0.0.1", "port": 1, "dbname": "x", "user": "u"})
    with pytest.raises(database.DatabaseUnavailable) as err:
        connect()
    message = str(err.value)
    assert "127.0.0.1:1" in message and "\n" not in message and "refused" in message.lower()


def test_a_connector_opens_real_connections_with_client_side_binding(db_dsn):
    connect = database.connector(db_dsn)
    with connect(autocommit=True) as conn, conn.cursor() as cur:
        # an untyped parameter only works with client-side binding
        cur.execute("SELECT %s IS NULL, current_setting('application_name')", (None,))
        assert cur.fetchone() == (True, "cluster-doctor")
        assert conn.autocommit


def test_cli_resolution_prefers_the_flag(monkeypatch):
    monkeypatch.setenv(database.CONN_ENV, "postgresql://b@h/e")
    connect, source = database.resolve_cli_connector("postgresql://a@h/d")
    assert source == "--db-url" and str(connect) == "h/d"


def test_cli_resolution_reads_the_airflow_connection_from_the_environment(monkeypatch, db_dsn):
    """The env var goes through the provider's PostgresHook, so Airflow's JSON form works too."""
    monkeypatch.setenv(database.CONN_ENV, json.dumps({
        "conn_type": "postgres", "host": db_dsn["host"], "port": int(db_dsn.get("port", 5432)),
        "login": db_dsn.get("user", "postgres"), "schema": db_dsn["dbname"]}))
    connect, source = database.resolve_cli_connector(None)
    assert source == database.CONN_ENV and "Airflow connection validation_db" in str(connect)
    with connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT current_database()")
        assert cur.fetchone()[0] == db_dsn["dbname"]


def test_a_missing_airflow_connection_is_one_line(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_NO_SUCH_CONN_FOR_TESTS", raising=False)
    with pytest.raises(database.DatabaseUnavailable, match="no_such_conn_for_tests") as err:
        database.hook_connector("no_such_conn_for_tests")
    assert "\n" not in str(err.value)


def test_an_airflow_connection_of_another_type_is_refused(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_WRONG_TYPE_FOR_TESTS", "mysql://u@h/d")
    with pytest.raises(database.InvalidDatabaseUrl, match="must be postgres"):
        database.hook_connector("wrong_type_for_tests")
