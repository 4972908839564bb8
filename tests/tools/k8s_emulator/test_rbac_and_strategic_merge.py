"""Strategic merge of node conditions by `type` and RBAC by PolicyRules, as a real apiserver does them
(sources in tools/k8s_emulator/README.md), through the real kubernetes client and kubectl."""

from __future__ import annotations

import json
import subprocess

import pytest
from kubernetes import client

from tests.conftest import kubectl

MINE = {"type": "ClusterDoctorHealthy", "status": "True", "reason": "AllSuitesPassed", "message": "ok"}


def _conditions(v1, node="gpu-1") -> dict:
    return {c.type: c for c in v1.read_node_status(node).status.conditions}


def test_a_new_condition_type_is_appended_and_the_kubelets_stay(emu, v1):
    emu.add_gpu_node("gpu-1")
    before = _conditions(v1)
    v1.patch_node_status("gpu-1", {"status": {"conditions": [MINE]}})
    after = _conditions(v1)
    assert list(after) == [*before, "ClusterDoctorHealthy"]  # existing ones keep their order, new one last
    assert all(after[t].status == before[t].status for t in before)


def test_the_same_type_is_merged_and_a_delete_directive_removes_it(emu, v1):
    emu.add_gpu_node("gpu-1")
    v1.patch_node_status("gpu-1", {"status": {"conditions": [{**MINE, "lastTransitionTime": "2026-03-10T12:00:00Z"}]}})
    # what kubectl sends adds a $setElementOrder directive; it orders, it is not stored
    v1.patch_node_status("gpu-1", {"status": {"$setElementOrder/conditions": [{"type": "ClusterDoctorHealthy"}],
                                              "conditions": [{"type": "ClusterDoctorHealthy", "status": "False",
                                                              "reason": "NVBW_D2D_LOW"}]}})
    c = _conditions(v1)["ClusterDoctorHealthy"]
    assert (c.status, c.reason, c.message) == ("False", "NVBW_D2D_LOW", "ok")  # fields not sent are kept
    assert c.last_transition_time.isoformat().startswith("2026-03-10T12:00")
    v1.patch_node_status("gpu-1", {"status": {"conditions": [{"type": "ClusterDoctorHealthy", "$patch": "delete"}]}})
    assert "ClusterDoctorHealthy" not in _conditions(v1) and "Ready" in _conditions(v1)
    with pytest.raises(client.ApiException) as exc:
        v1.patch_node_status("gpu-1", {"status": {"conditions": [{"status": "True"}]}})
    assert exc.value.status == 400 and "does not contain declared merge key: type" in exc.value.body


def test_rbac_rules_allow_only_what_they_list(emu, v1):
    emu.add_gpu_node("gpu-1")
    emu.configure(rbac_rules=[{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
                              {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}])
    assert v1.list_node().items and v1.read_node("gpu-1")
    v1.patch_node_status("gpu-1", {"status": {"conditions": [MINE]}})
    for call in (lambda: v1.patch_node("gpu-1", {"metadata": {"labels": {"a": "b"}}}),
                 lambda: v1.list_pod_for_all_namespaces()):
        with pytest.raises(client.ApiException) as exc:
            call()
        assert exc.value.status == 403
    with pytest.raises(client.ApiException) as exc:
        v1.patch_node("gpu-1", {"metadata": {"labels": {"a": "b"}}})
    assert json.loads(exc.value.body)["message"] == ('nodes "gpu-1" is forbidden: User "system:anonymous" cannot patch '
                                                     'resource "nodes" in API group "" at the cluster scope')


def _kubectl(emu, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([kubectl(), "--kubeconfig", emu.kubeconfig_path, *args], capture_output=True, text=True,
                          timeout=60)


def test_kubectl_auth_can_i_reads_the_rules(emu):
    emu.configure(rbac_rules=[{"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}])
    listed = _kubectl(emu, "auth", "can-i", "--list")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()[1:] if line.strip()]
    assert ["nodes/status", "[]", "[]", "[patch]"] in rows
    assert not [r for r in rows if r[0] == "nodes"]
    # the single-permission question, as `kubectl auth can-i patch nodes --subresource=status` asks it
    # (kubectl sends that one as protobuf, which the emulator does not decode: the client's JSON here)
    auth = client.AuthorizationV1Api(emu.core_v1().api_client)
    ask = lambda **attrs: auth.create_self_subject_access_review(  # noqa: E731
        {"spec": {"resourceAttributes": {"verb": "patch", "resource": "nodes", **attrs}}}).status.allowed
    assert ask(subresource="status") is True and ask() is False
