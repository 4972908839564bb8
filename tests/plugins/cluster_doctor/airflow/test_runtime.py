"""cluster_doctor.airflow.runtime: the results database behind the Postgres provider's hook."""

import pytest
from cluster_doctor.airflow import runtime
from cluster_doctor.store import database


def test_a_missing_airflow_connection_is_one_line(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_NO_SUCH_CONN_FOR_TESTS", raising=False)
    with pytest.raises(database.DatabaseUnavailable, match="no_such_conn_for_tests") as err:
        runtime.hook_connector("no_such_conn_for_tests")
    assert "\n" not in str(err.value)


def test_an_airflow_connection_of_another_type_is_refused(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_WRONG_TYPE_FOR_TESTS", "mysql://u@h/d")
    with pytest.raises(database.InvalidDatabaseUrl, match="must be postgres"):
        runtime.hook_connector("wrong_type_for_tests")
