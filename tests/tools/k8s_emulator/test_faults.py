"""Injected faults answer as the real apiserver does: Status bodies, Retry-After, connection resets."""

from __future__ import annotations

import json
import time

import pytest
import urllib3
from k8s_emulator.process import EmulatorError
from kubernetes import client, config


def _err(fn, *args, **kwargs) -> client.ApiException:
    with pytest.raises(client.ApiException) as exc:
        fn(*args, **kwargs)
    return exc.value


def _no_retries(emu) -> client.CoreV1Api:
    """A client whose urllib3 layer retries nothing (by default it re-sends a GET answered 429 or 503
    with Retry-After, after sleeping that long, and the caller never sees the 429)."""
    cfg = client.Configuration()
    config.load_kube_config(config_file=emu.kubeconfig_path, client_configuration=cfg)
    cfg.retries = False
    return client.CoreV1Api(client.ApiClient(cfg))


def test_429_carries_retry_after_and_the_watch_cache_status(emu):
    v1 = _no_retries(emu)
    emu.inject_faults("/api/v1/nodes", [429], retry_after=3)
    exc = _err(v1.list_node, resource_version="0")
    assert exc.status == 429 and exc.headers["Retry-After"] == "3"
    assert json.loads(exc.body) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "storage is (re)initializing", "reason": "TooManyRequests",
        "details": {"retryAfterSeconds": 3}, "code": 429}
    assert v1.list_node().items == []  # the sequence is spent: served normally again
    emu.inject_faults("/api/v1/nodes", [429], retry_after=0)  # NewTooManyRequests(msg, 0): no header
    exc = _err(v1.list_node)
    assert "Retry-After" not in exc.headers and json.loads(exc.body)["details"] == {}


def test_the_default_client_resends_a_get_after_retry_after(emu, v1):
    emu.inject_faults("/api/v1/nodes", [429], retry_after=1)
    started = time.monotonic()
    assert v1.list_node().items == []
    assert time.monotonic() - started >= 1.0 and emu.faults()[0]["hits"] == 1


def test_500_503_504_bodies_in_sequence_then_served(emu, v1):
    emu.inject_faults("/api/v1/pods", [500, 503, 504], method="GET")
    first, second, third = (_err(v1.list_pod_for_all_namespaces) for _ in range(3))
    body = json.loads(first.body)
    assert first.status == 500 and body["reason"] == "InternalError"
    assert body["message"] == "Internal error occurred: etcdserver: request timed out"
    assert body["details"] == {"causes": [{"message": "etcdserver: request timed out"}]}
    assert "Retry-After" not in first.headers
    assert second.status == 503 and json.loads(second.body)["reason"] == "ServiceUnavailable"
    assert third.status == 504 and json.loads(third.body)["message"].startswith(
        "Timeout: request did not complete within requested timeout")
    v1.list_pod_for_all_namespaces()
    assert emu.faults()[0]["hits"] == 3 and emu.faults()[0]["remaining"] == 0


def test_method_narrows_and_other_paths_are_untouched(emu, v1):
    emu.inject_faults("/api/v1/namespaces/default/configmaps", [503], method="POST")
    v1.list_namespaced_config_map("default")  # a GET of the same path is not faulted
    v1.list_node()
    assert _err(v1.create_namespaced_config_map, "default", {"metadata": {"name": "a"}}).status == 503
    v1.create_namespaced_config_map("default", {"metadata": {"name": "a"}})


def test_reset_before_and_after_handling(emu, v1):
    # POST is not idempotent: urllib3 does not re-send it, the reset reaches the caller
    emu.inject_faults("/api/v1/namespaces/default/configmaps", ["reset"], method="POST")
    with pytest.raises(urllib3.exceptions.ProtocolError):
        v1.create_namespaced_config_map("default", {"metadata": {"name": "before"}})
    assert _err(v1.read_namespaced_config_map, "before", "default").status == 404  # nothing happened
    emu.inject_faults("/api/v1/namespaces/default/configmaps", ["reset-after"], method="POST")
    with pytest.raises(urllib3.exceptions.ProtocolError):
        v1.create_namespaced_config_map("default", {"metadata": {"name": "after"}})
    assert v1.read_namespaced_config_map("after", "default").metadata.name == "after"  # it took effect


def test_bad_fault_rules_are_refused_with_one_line(emu):
    for rule, text in ((("nodes", [429]), "path starting with /"), (("/api/v1/nodes", []), "non-empty sequence"),
                       (("/api/v1/nodes", [418]), "unsupported fault 418")):
        with pytest.raises(EmulatorError) as exc:
            emu.inject_faults(*rule)
        assert exc.value.code == 400 and text in exc.value.body["message"]


def test_reset_clears_faults(emu, v1):
    emu.inject_faults("/api/v1/nodes", [500, 500])
    emu.reset()
    assert emu.faults() == [] and v1.list_node().items == []


def test_cut_sends_half_the_body_then_resets(emu, v1):
    for i in range(40):
        emu.add_gpu_node(f"gpu-{i:03d}")
    emu.inject_faults("/api/v1/nodes", ["cut"], method="GET")
    response = v1.list_node(_preload_content=False)  # status and headers arrive: the cut is mid-body
    assert response.status == 200
    length = int(response.headers["Content-Length"])
    got = b""
    with pytest.raises(urllib3.exceptions.ProtocolError):
        while chunk := response.read(4096):
            got += chunk
    assert 0 < len(got) < length
    assert len(v1.list_node().items) == 40  # then served normally


# ---------------------------------------------------------------------------- time-bound faults
def test_a_429_storm_is_apfs_plain_text_answer_on_the_chosen_verbs_only(emu):
    v1 = _no_retries(emu)
    emu.add_gpu_node("gpu-001")
    emu.storm(["get", "delete"], "nodes", seconds=30, retry_after=2)
    exc = _err(v1.read_node, "gpu-001")
    assert exc.status == 429 and exc.headers["Retry-After"] == "2"
    assert exc.body == "Too many requests, please try again later.\n"  # http.Error, not a Status
    assert exc.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert [n.metadata.name for n in v1.list_node().items] == ["gpu-001"]  # list: another verb
    assert _err(v1.delete_node, "gpu-001").status == 429
    assert v1.list_namespaced_pod("default").items == []  # another resource
    (storm,) = emu.storms()
    assert storm["hits"] == 2 and 0 < storm["remaining_s"] <= 30
    emu.clear_faults()
    assert emu.storms() == [] and v1.read_node("gpu-001").metadata.name == "gpu-001"


def test_a_storm_ends_on_its_own(emu):
    v1 = _no_retries(emu)
    emu.storm(["list"], "nodes", seconds=0.5)
    assert _err(v1.list_node).status == 429
    time.sleep(0.6)
    assert v1.list_node().items == []


def test_bad_storms_are_refused_with_one_line(emu):
    for rule, text in (((["watch", "fly"],), "verbs"), ((["get"],), "seconds > 0")):
        with pytest.raises(EmulatorError) as exc:
            emu._call("POST", "storms", {"verbs": rule[0], **({"seconds": 1} if text == "verbs" else {})})
        assert exc.value.code == 400 and text in exc.value.body["message"]


def test_an_apiserver_restart_refuses_then_forbids_then_serves_while_the_cluster_runs_on(emu):
    """As a kube-apiserver process restarting: connections reset and refused while down; back, every
    request refused 403 and /readyz failing until its authorizer is ready; the kubelet ran on meanwhile."""
    v1 = _no_retries(emu)
    emu.add_gpu_node("gpu-001")
    pod = emu.add_user_pod("gpu-001", name="job-0", run_seconds=1.0)
    v1.list_node()  # a pooled keep-alive connection: reset by the restart
    started = time.monotonic()
    emu.restart_apiserver(down_s=1.5, forbidden_s=1.5)
    time.sleep(0.3)
    with pytest.raises(urllib3.exceptions.HTTPError) as down:
        v1.list_node()
    assert "Connection refused" in str(down.value) or "Connection reset" in str(down.value), down.value
    emu.wait_serving()
    assert time.monotonic() - started >= 1.4
    forbidden = _err(v1.read_namespaced_pod, pod["metadata"]["name"], "default")
    assert forbidden.status == 403 and "cannot get resource \"pods\"" in json.loads(forbidden.body)["message"]
    ready = _err(v1.api_client.call_api, "/readyz", "GET", _preload_content=False)
    assert ready.status == 500 and "[-]poststarthook/rbac/bootstrap-roles failed" in ready.body
    assert v1.api_client.call_api("/livez", "GET", _preload_content=False, _return_http_data_only=True).status == 200
    time.sleep(1.6)
    assert v1.read_namespaced_pod(pod["metadata"]["name"], "default").status.phase == "Succeeded"  # ran on
    assert v1.api_client.call_api("/readyz", "GET", _preload_content=False, _return_http_data_only=True).status == 200
