
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


def test_the_layers_above_catch_what_the_driver_raises_through_the_stores_names(db_dsn):
    """The CLI reports a refused value (exit 2) and any other database error (exit 1) without importing
    psycopg: store.database's names are the driver's."""
    conn = database.connector(db_dsn)()
    try:
        with pytest.raises(database.DataError) as refused:
            conn.execute("SELECT 'not a number'::int")
        assert isinstance(refused.value, database.Error)
        conn.rollback()
        with pytest.raises(database.IntegrityError):
            conn.execute("INSERT INTO validation_history (node_name) VALUES (NULL)")
    finally:
        conn.close()
    assert isinstance(conn, database.Connection)
