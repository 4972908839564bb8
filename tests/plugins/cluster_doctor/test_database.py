import pytest

from cluster_doctor import database


def test_url_to_dsn():
    dsn = database.dsn_from_url("postgresql://u%40x:p%2Fw@db.example:6543/results?sslmode=require&foo=1")
    assert dsn == {"host": "db.example", "port": 6543, "user": "u@x", "password": "p/w", "dbname": "results",
                   "sslmode": "require"}


def test_socket_urls_from_the_embedded_server():
    dsn = database.dsn_from_url("postgresql://postgres:@/postgres?host=/tmp/pg")
    assert dsn == {"host": "/tmp/pg", "user": "postgres", "dbname": "postgres"}


def test_airflow_conn_env_forms():
    assert database.dsn_from_conn_env("postgres://a:b@h:5432/d")["dbname"] == "d"
    dsn = database.dsn_from_conn_env(
        '{"conn_type": "postgres", "host": "h", "port": 5433, "login": "cd", "password": "s", '
        '"schema": "results", "extra": {"sslmode": "verify-full", "cursor": "realdictcursor"}}')
    assert dsn == {"host": "h", "port": 5433, "user": "cd", "password": "s", "dbname": "results",
                   "sslmode": "verify-full"}


@pytest.mark.parametrize("url, message", [
    ("mysql://h/d", "postgresql://"),
    ("postgresql://h:notaport/d", "invalid port"),
])
def test_bad_urls(url, message):
    with pytest.raises(database.InvalidDatabaseUrl, match=message):
        database.dsn_from_url(url)


def test_describe_never_shows_the_password():
    text = database.describe(database.dsn_from_url("postgresql://u:secret@h:1/d"))
    assert text == "h:1/d" and "secret" not in text


def test_unreachable_database_is_one_line_naming_host_and_port():
    with pytest.raises(database.DatabaseUnavailable) as err:
        database.connect({"host": "127.0.0.1", "port": 1, "dbname": "x", "user": "u"})
    message = str(err.value)
    assert "127.0.0.1:1" in message and "\n" not in message and "refused" in message.lower()


def test_cli_resolution_order():
    dsn, source = database.resolve_cli_dsn("postgresql://a@h/d", env={"AIRFLOW_CONN_VALIDATION_DB": "postgresql://b@h/e"})
    assert source == "--db-url" and dsn["user"] == "a"
    dsn, source = database.resolve_cli_dsn(None, env={"AIRFLOW_CONN_VALIDATION_DB": "postgresql://b@h/e"})
    assert source == "AIRFLOW_CONN_VALIDATION_DB" and dsn["user"] == "b"


def test_socket_host_in_an_airflow_connection_uri_extra():
    dsn = database.dsn_from_airflow_connection(host=None, port=None, login="postgres", password=None,
                                               schema="demo", extra={"host": "/tmp/pg"})
    assert dsn == {"host": "/tmp/pg", "user": "postgres", "dbname": "demo"}
