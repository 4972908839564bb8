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


def test_core_v1_is_the_providers_client_with_every_call_retried(monkeypatch, caplog):
    """runtime.core_v1: the provider's hook (its client class, timeouts and kubeconfig), our retries on
    top, and urllib3's own 429 sleep off so the retry bound holds and the retry is logged."""
    import json
    import logging

    from cluster_doctor.kube import retry
    from k8s_emulator import EmulatorProcess

    with EmulatorProcess() as emu:
        monkeypatch.setenv("AIRFLOW_CONN_K8S_FOR_RUNTIME_TESTS", json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": emu.kubeconfig_path}}))
        api = runtime.core_v1("k8s_for_runtime_tests")
        assert isinstance(api, retry.Retrying) and type(api.api_client).__name__ == "_TimeoutK8sApiClient"
        emu.add_gpu_node("gpu-001")
        emu.inject_faults("/api/v1/nodes", [429, 503], method="GET", retry_after=1)
        caplog.set_level(logging.WARNING, logger=retry.__name__)
        assert [n.metadata.name for n in api.list_node().items] == ["gpu-001"]
        assert emu.faults()[0]["hits"] == 2
        assert len([r for r in caplog.records if r.name == retry.__name__]) == 2  # ours, not urllib3's
