"""cluster_doctor.kube.retry: every Kubernetes API call retried on 429/5xx/lost connections, bounded,
against the emulator answering injected faults, with the real kubernetes client."""

from __future__ import annotations

import json
import logging
import time

import pytest
from cluster_doctor.domain import suites
from cluster_doctor.domain.config import Settings
from cluster_doctor.kube import api_errors, discovery, retry, suite_code
from kubernetes import client
from kubernetes.client.exceptions import ApiException

NS = "cluster-doctor"
FAST = retry.RetryPolicy(attempts=5, initial_s=0.05, max_wait_s=0.2, total_s=10.0)
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"


@pytest.fixture
def emu(validation_cluster):
    return validation_cluster


@pytest.fixture(autouse=True)
def fresh_health():
    """"The apiserver was unreachable just now" is per process: never carried from one test to the next."""
    retry.HEALTH.reset()
    yield
    retry.HEALTH.reset()


class Sleeps(list):
    """The waits a retrying client planned, as (when, seconds), each slept for real: a retry's bounds are
    read from what it planned, which no load on the machine changes."""

    def __call__(self, seconds: float) -> None:
        self.append((time.monotonic(), seconds))
        time.sleep(seconds)

    @property
    def total(self) -> float:
        return sum(s for _, s in self)


def core_v1(emu, policy=FAST, sleep=time.sleep) -> retry.Retrying:
    return retry.core_v1(emu.api_client(), policy, sleep)


def retries_logged(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == retry.__name__ and r.levelno == logging.WARNING]


def test_discovery_survives_429_500_500_then_success(emu, caplog):
    emu.add_gpu_node("gpu-001")
    emu.add_gpu_node("gpu-002")
    emu.inject_faults("/api/v1/nodes", [429, 500, 500], method="GET", retry_after=1)
    caplog.set_level(logging.WARNING)
    found = discovery.discover(core_v1(emu), Settings())
    assert [n.name for n in found.free] == ["gpu-001", "gpu-002"]
    assert found.read_mode == "watch-cache"  # retried, not refused: no fall-back to paged lists
    assert emu.faults()[0]["hits"] == 3
    logged = retries_logged(caplog)
    assert len(logged) == 3 and all("\n" not in line and "list_node" in line for line in logged)
    assert "429 Too Many Requests: storage is (re)initializing" in logged[0]
    assert "500 Internal Server Error: Internal error occurred: etcdserver: request timed out" in logged[1]


def test_retry_after_is_honoured(emu):
    emu.inject_faults("/api/v1/nodes", [429], method="GET", retry_after=1)
    slept = Sleeps()
    core_v1(emu, sleep=slept).list_node()
    assert [s for _, s in slept] >= [1.0], f"retried after {slept}, the server asked for 1 s"  # backoff: 0.05 s


def test_a_retry_after_beyond_the_time_bound_gives_up_at_once(emu):
    emu.inject_faults("/api/v1/nodes", [429], method="GET", retry_after=30)
    slept = Sleeps()
    with pytest.raises(retry.GaveUp) as exc:
        core_v1(emu, retry.RetryPolicy(attempts=5, initial_s=0.05, total_s=5.0), slept).list_node()
    assert slept == [] and exc.value.status == 429 and emu.faults()[0]["hits"] == 1  # no wait, no second try
    assert "gave up after 1 attempt(s)" in str(exc.value)


def test_a_persistent_500_gives_up_after_the_bound_with_one_clear_error(emu, caplog):
    emu.add_gpu_node("gpu-001")
    emu.inject_faults("/api/v1/nodes", [500] * 100, method="GET")
    policy = retry.RetryPolicy(attempts=4, initial_s=0.05, max_wait_s=0.2, total_s=5.0)
    with pytest.raises(retry.GaveUp) as exc:
        core_v1(emu, policy).list_node()
    assert emu.faults()[0]["hits"] == 4  # the attempt bound
    message = str(exc.value)
    assert "\n" not in message and exc.value.status == 500 and isinstance(exc.value, ApiException)
    assert message.startswith("Kubernetes API 500 Internal Server Error: Internal error occurred: etcdserver")
    assert "list_node: gave up after 4 attempt(s) in" in message
    # the time bound: many attempts allowed, 0.6 s in all; it stops on time, never planning past it
    slept, hits = Sleeps(), emu.faults()[0]["hits"]
    with pytest.raises(retry.GaveUp) as exc:
        core_v1(emu, retry.RetryPolicy(attempts=100, initial_s=0.1, max_wait_s=0.1, total_s=0.6), slept).list_node()
    tries = emu.faults()[0]["hits"] - hits
    assert 1 <= tries < 100 and len(slept) == tries - 1 and slept.total <= 0.6
    assert f"gave up after {tries} attempt(s)" in str(exc.value)
    # discovery: the cached read gives up, the paged read too; one line for the run's log
    caplog.set_level(logging.WARNING)
    with pytest.raises(retry.GaveUp) as exc:
        discovery.discover(core_v1(emu, policy), Settings())
    assert "\n" not in str(exc.value) and "gave up after 4 attempt(s)" in str(exc.value)


@pytest.mark.parametrize("call", ["read_node", "read_namespaced_config_map"])
def test_a_4xx_other_than_429_is_not_retried(emu, caplog, call):
    caplog.set_level(logging.WARNING)
    emu.reset_counters()
    api = core_v1(emu)
    with pytest.raises(ApiException) as exc:
        getattr(api, call)(*(["nope"] if call == "read_node" else ["nope", NS]))
    assert exc.value.status == 404 and not isinstance(exc.value, retry.GaveUp)
    assert emu.counters()["total"] == 1 and retries_logged(caplog) == []


def test_forbidden_is_not_retried(emu, caplog):
    emu.configure(forbidden=["list nodes"])
    emu.inject_faults("/api/v1/nodes", [503], method="GET")  # then 403 for good
    with pytest.raises(ApiException) as exc:
        core_v1(emu).list_node()
    assert exc.value.status == 403 and emu.faults()[0]["hits"] == 1


def _ship(api) -> tuple[bool, str]:
    files = suite_code.shipped_files(suites.DEFAULT_SUITES_DIR)
    version = suite_code.content_hash(suites.DEFAULT_SUITES_DIR)
    name = suite_code.configmap_name(Settings(), version)
    return suite_code.ensure_configmap(api, NS, name, files, version), name


def test_a_create_whose_answer_was_lost_is_read_back_not_refused(emu, caplog):
    """The first POST created the ConfigMap but its answer was lost (connection reset): the retry's
    409 AlreadyExists means it exists, so the create succeeds."""
    caplog.set_level(logging.WARNING)
    emu.inject_faults(CONFIGMAPS, ["reset-after"], method="POST")
    created, name = _ship(core_v1(emu))
    assert created is True and emu.faults()[0]["hits"] == 1
    assert emu.core_v1().read_namespaced_config_map(name, NS).immutable is True
    assert any("already exists after a retried create" in line for line in retries_logged(caplog))
    # without a lost answer a 409 stays a 409: someone else created it
    assert _ship(core_v1(emu))[0] is False


def test_a_create_reset_before_handling_is_sent_again(emu):
    emu.inject_faults(CONFIGMAPS, ["reset", 503], method="POST")
    created, name = _ship(core_v1(emu))
    assert created is True and emu.faults()[0]["hits"] == 2


def test_a_create_refused_with_429_then_409_is_a_conflict(emu):
    """A 429 is refused before anything happens: a 409 after it is somebody else's object."""
    _ship(emu.core_v1())
    emu.inject_faults(CONFIGMAPS, [429], method="POST", retry_after=0)
    assert _ship(core_v1(emu))[0] is False


def test_connection_resets_beyond_urllib3s_own_resends(emu, caplog):
    caplog.set_level(logging.WARNING)
    emu.inject_faults("/api/v1/nodes", ["reset"] * 5, method="GET")  # urllib3 re-sends a GET 3 times itself
    assert core_v1(emu).list_node().items == []
    assert emu.faults()[0]["hits"] == 5
    logged = retries_logged(caplog)
    assert len(logged) == 1 and "Max retries exceeded" in logged[0]


def test_other_api_groups_are_retried_like_core_v1(emu):
    api = core_v1(emu)
    storage = retry.sibling(api, client.StorageV1Api)
    assert isinstance(storage, retry.Retrying) and storage.retry_policy == FAST
    emu.inject_faults("/apis/storage.k8s.io/v1/storageclasses/fast", [503], method="GET")
    with pytest.raises(ApiException) as exc:
        storage.read_storage_class("fast")
    assert exc.value.status == 404 and emu.faults()[0]["hits"] == 1  # the 503 retried, then the real answer
    raw = emu.core_v1()
    assert not isinstance(retry.sibling(raw, client.StorageV1Api), retry.Retrying)
    assert retry.wrap(api) is api


def test_classification_and_retry_after_parsing():
    def api_exc(status, headers=None, body=None):
        exc = ApiException(status=status, reason="x")
        exc.headers, exc.body = headers, body
        return exc

    assert retry.transient(api_exc(429)) and retry.transient(api_exc(503)) and retry.transient(api_exc(504))
    assert not retry.transient(api_exc(501)) and not retry.transient(api_exc(409)) and not retry.transient(api_exc(0))
    assert retry.retry_after(api_exc(429, {"Retry-After": "3"})) == 3
    assert retry.retry_after(api_exc(429, None, json.dumps({"details": {"retryAfterSeconds": 2}}))) == 2
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 60))
    assert 55 <= retry.retry_after(api_exc(503, {"Retry-After": date})) <= 61
    assert retry.retry_after(api_exc(429, {"Retry-After": "soon"}, b"not json")) == 0
    with pytest.raises(ValueError):
        retry.RetryPolicy(attempts=0)


def test_with_policy_rebinds_a_retrying_api_and_leaves_a_plain_one():
    plain = object()
    assert retry.with_policy(plain, retry.BEST_EFFORT_POLICY) is plain
    wrapped = retry.wrap(type("Api", (), {"read": lambda self: 1})())
    short = retry.with_policy(wrapped, retry.BEST_EFFORT_POLICY)
    assert short.retry_policy == retry.BEST_EFFORT_POLICY and wrapped.retry_policy == retry.DEFAULT_POLICY
    assert short.read() == 1


# ---------------------------------------------------------------------------- a control plane that blinks
PATIENT = retry.RetryPolicy(attempts=40, initial_s=0.2, max_wait_s=0.5, total_s=30.0)


def test_a_403_right_after_the_apiserver_was_unreachable_is_retried(emu, caplog):
    """A restarted kube-apiserver refuses connections, then answers 403 until its authorizer is ready:
    the 403 is the apiserver starting, not a refusal."""
    caplog.set_level(logging.WARNING)
    emu.add_gpu_node("gpu-001")
    emu.restart_apiserver(down_s=1, forbidden_s=1.5)
    time.sleep(0.3)

    assert core_v1(emu, PATIENT).read_node("gpu-001").metadata.name == "gpu-001"

    logged = retries_logged(caplog)
    assert any("Connection refused" in line for line in logged), logged
    assert any("403 Forbidden" in line and "coming back" in line for line in logged), logged


def test_a_403_while_readyz_fails_is_retried_though_the_outage_went_unseen(emu):
    emu.add_gpu_node("gpu-001")
    emu.restart_apiserver(down_s=0.3, forbidden_s=2, wait=True)  # this client never met the refusals
    assert not retry.HEALTH.recovering()
    started = time.monotonic()
    assert core_v1(emu, PATIENT).read_node("gpu-001").metadata.name == "gpu-001"
    assert time.monotonic() - started >= 1.0  # it waited for /readyz to pass


def test_a_403_from_a_healthy_apiserver_is_final_and_names_the_permission(emu):
    emu.add_gpu_node("gpu-001")
    emu.configure(forbidden=["get nodes"])
    with pytest.raises(ApiException) as exc:
        core_v1(emu, PATIENT).read_node("gpu-001")
    assert exc.value.status == 403 and not isinstance(exc.value, retry.GaveUp)
    described = api_errors.describe(exc.value)
    assert "missing permission: get nodes (cluster-wide)" in described and "\n" not in described
    assert api_errors.permission(exc.value) == "get nodes (cluster-wide)"


def test_a_storm_of_plain_text_429s_is_waited_out_after_each_retry_after(emu):
    """API Priority and Fairness's 429: text, not a Status, with Retry-After."""
    emu.add_gpu_node("gpu-001")
    emu.storm(["get"], "nodes", seconds=2.5, retry_after=1)
    started = time.monotonic()
    assert core_v1(emu, PATIENT).read_node("gpu-001").metadata.name == "gpu-001"
    assert time.monotonic() - started >= 2.0 and emu.storms()[0]["hits"] >= 2


def test_a_call_on_our_own_pod_retries_until_the_tasks_deadline_then_is_out_of_time(emu):
    from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import _should_retry_api

    emu.add_gpu_node("gpu-001")
    emu.storm(["get"], "nodes", seconds=60, retry_after=1)
    deadline = time.monotonic() + 2.5
    slept = Sleeps()
    api = retry.own_pod(emu.core_v1(), lambda: deadline, slept)
    with pytest.raises(retry.OutOfTime) as exc:
        api.read_node("gpu-001")
    assert slept and all(when + span < deadline for when, span in slept)  # it waited, never past the deadline
    assert exc.value.status is None and exc.value.last_status == 429
    assert "the task's time for the API ran out" in str(exc.value)
    assert not _should_retry_api(exc.value)  # the provider does not start over
    hits = emu.storms()[0]["hits"]
    assert hits >= 2
    slept.clear()
    deadline = time.monotonic() - 1  # past it, whatever time the first call's tries took
    with pytest.raises(retry.OutOfTime):  # past the deadline: one try, no wait
        api.read_node("gpu-001")
    assert slept == [] and emu.storms()[0]["hits"] == hits + 1


def test_our_pods_log_behind_an_unreachable_kubelet_is_not_retried(emu):
    emu.add_gpu_node("gpu-001")
    pod = emu.add_user_pod("gpu-001", name="job-0")
    emu.configure(unreachable_kubelets=["gpu-001"])
    slept = Sleeps()
    api = retry.own_pod(emu.core_v1(), lambda: time.monotonic() + 60, slept)
    with pytest.raises(ApiException) as exc:
        api.read_namespaced_pod_log(pod["metadata"]["name"], "default", _preload_content=False)
    assert exc.value.status == 500 and slept == []  # not retried: no wait
