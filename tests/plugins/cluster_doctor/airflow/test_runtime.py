"""cluster_doctor.airflow.runtime: the results database behind the Postgres provider's hook."""

import datetime as dt

import pytest
from cluster_doctor.airflow import runtime
from cluster_doctor.store import database

from tests.support.retries import FakeTime, api_server_timed_out


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


def test_reach_waits_for_a_service_that_is_not_up_yet_and_says_so_at_each_wait(caplog, capsys):
    import logging
    import re

    answers = [api_server_timed_out(), ConnectionRefusedError(111, "Connection refused"), "the DAG"]

    def call():
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    fake = FakeTime()
    caplog.set_level(logging.WARNING, logger=runtime.__name__)
    assert runtime.reach(call, deadline=60, clock=fake.clock, sleep=fake.sleep) == "the DAG"
    assert fake.sleeps == [1.0, 2.0]
    # one line per wait: in pytest's records, or on stdout where Airflow's logging (when an earlier import set
    # it up) writes them
    said = [r.getMessage() for r in caplog.records] or capsys.readouterr().out.splitlines()
    assert [m.group(1) for line in said if (m := re.search(r"(the [\w ()]+?) is not answering yet", line))] == [
        "the Airflow API server (execution API)", "the Kubernetes API"]


def test_reach_gives_up_at_the_deadline_in_one_line_naming_the_service():
    fake = FakeTime()

    def call():
        raise database.DatabaseUnavailable("cannot connect to 127.0.0.1:5432/cluster_doctor: Connection refused")

    with pytest.raises(runtime.Unreachable) as err:
        runtime.reach(call, deadline=20, clock=fake.clock, sleep=fake.sleep)
    assert fake.sleeps == [1.0, 2.0, 4.0, 8.0, 5.0]  # backing off, the last wait cut to the deadline
    assert str(err.value) == ("the results DB did not answer within 20 s (6 tries): cannot connect to "
                              "127.0.0.1:5432/cluster_doctor: Connection refused")


@pytest.mark.parametrize("error", ["forbidden", "not found", "a bug"])
def test_reach_raises_what_is_not_a_service_starting_at_once(error):
    from airflow.sdk.exceptions import AirflowRuntimeError, ErrorType
    from airflow.sdk.execution_time.comms import ErrorResponse
    from kubernetes.client.exceptions import ApiException

    exc = {"forbidden": ApiException(status=403, reason="Forbidden"),
           "not found": AirflowRuntimeError(ErrorResponse(error=ErrorType.API_SERVER_ERROR, detail={
               "status_code": 404, "message": "Not Found", "detail": {"detail": "DAG not found"}})),
           "a bug": KeyError("is_paused")}[error]
    fake = FakeTime()

    def call():
        raise exc

    with pytest.raises(type(exc)):
        runtime.reach(call, deadline=60, clock=fake.clock, sleep=fake.sleep)
    assert fake.sleeps == []


# ---------------------------------------------------------------------------- a task's handle on its run
class PushedXComs:
    """A task instance's XCom reads: what the tasks further up pushed, by task id; each read counted."""

    dag_id = "continuous_validation"

    def __init__(self, **pushed):
        self.pushed, self.reads = pushed, []

    def xcom_pull(self, task_ids, key="return_value"):
        self.reads.append(task_ids)
        return self.pushed.get(task_ids)


def discover_xcom(conn_id):
    from cluster_doctor.domain.config import Settings

    return {"settings": Settings(validation_db_conn_id=conn_id).to_dict(),
            "started_at": dt.datetime.now(dt.UTC).isoformat(),
            "params": {"node_range": "", "tests": ["gpu_health"], "stale_before": None, "max_pairs": 16,
                       "dry_run": False},
            "free": [{"name": "gpu-001", "gpu_count": 8, "gpu_model": "NVIDIA H200"}], "ineligible": []}


def test_a_tasks_run_reads_discover_once_and_opens_the_store_only_when_asked(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_NO_DB_FOR_TASK_RUN_TESTS", raising=False)
    ti = PushedXComs(discover=discover_xcom("no_db_for_task_run_tests"))
    run = runtime.TaskRun({"ti": ti, "run_id": "r1"})

    assert [n.name for n in run.found.free] == ["gpu-001"]
    assert run.settings.validation_db_conn_id == "no_db_for_task_run_tests"
    assert (run.dag_id, run.run_id, ti.reads) == ("continuous_validation", "r1", ["discover"])
    # the connection is looked up when the store is first used, not before
    with pytest.raises(database.DatabaseUnavailable, match="no_db_for_task_run_tests"):
        run.store


def test_a_task_given_discovers_result_or_its_settings_pulls_nothing_for_them():
    from cluster_doctor.domain.config import Settings

    ti = PushedXComs()
    assert runtime.TaskRun({"ti": ti}, discovered_xcom=discover_xcom("db_a")).settings.validation_db_conn_id == "db_a"
    assert runtime.TaskRun({"ti": ti}, Settings(validation_db_conn_id="db_b")).settings.validation_db_conn_id == "db_b"
    assert ti.reads == []


def test_a_task_after_a_failed_discovery_or_plan_skips_itself_saying_so():
    from airflow.sdk.exceptions import AirflowSkipException

    with pytest.raises(AirflowSkipException, match="^discovery or planning failed: nothing to record$"):
        runtime.TaskRun({"ti": PushedXComs(discover=discover_xcom("db"))}).planned_or_skip("nothing to record")
    with pytest.raises(AirflowSkipException, match="^no settings$"):
        runtime.TaskRun({"ti": PushedXComs()}).found_or_skip("no settings")
    assert runtime.TaskRun({"ti": PushedXComs()}).discovered is None
