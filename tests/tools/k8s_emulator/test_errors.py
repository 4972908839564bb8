"""Error responses are metav1.Status bodies with the real codes/reasons, as ApiException sees them."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.support.emu_helpers import pod


def _err(fn, *args, **kwargs) -> tuple[int, dict]:
    with pytest.raises(client.ApiException) as exc:
        fn(*args, **kwargs)
    body = json.loads(exc.value.body)
    assert body["kind"] == "Status" and body["status"] == "Failure" and body["code"] == exc.value.status
    return exc.value.status, body


def test_not_found(emu, v1):
    code, body = _err(v1.read_namespaced_pod, "nope", "default")
    assert code == 404 and body["reason"] == "NotFound"
    assert body["message"] == 'pods "nope" not found' and body["details"] == {"name": "nope", "kind": "pods"}
    code, body = _err(v1.read_node, "nope")
    assert code == 404 and body["message"] == 'nodes "nope" not found'
    code, body = _err(v1.create_namespaced_config_map, "missing-ns", {"metadata": {"name": "x"}})
    assert code == 404 and body["message"] == 'namespaces "missing-ns" not found'
    sched = client.SchedulingV1Api(v1.api_client)
    code, body = _err(sched.read_priority_class, "nope")
    assert body["message"] == 'priorityclasses.scheduling.k8s.io "nope" not found'
    assert body["details"]["group"] == "scheduling.k8s.io"


def test_already_exists_and_conflict(emu, v1):
    v1.create_namespaced_config_map("default", {"metadata": {"name": "c"}, "data": {"a": "1"}})
    code, body = _err(v1.create_namespaced_config_map, "default", {"metadata": {"name": "c"}})
    assert (
        code == 409
        and body["reason"] == "AlreadyExists"
        and body["message"] == 'configmaps "c" already exists'
    )
    cm = v1.read_namespaced_config_map("c", "default")
    v1.patch_namespaced_config_map("c", "default", {"data": {"a": "2"}})
    cm.data = {"a": "3"}
    code, body = _err(v1.replace_namespaced_config_map, "c", "default", cm)  # stale resourceVersion
    assert code == 409 and body["reason"] == "Conflict" and "the object has been modified" in body["message"]


def test_invalid(emu, v1):
    code, body = _err(v1.create_namespaced_pod, "default", pod("Bad_Name", command=["true"]))
    assert code == 422 and body["reason"] == "Invalid"
    assert body["message"].startswith(
        'Pod "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain'
    )
    assert body["details"]["causes"][0] == {
        "reason": "FieldValueInvalid",
        "field": "metadata.name",
        "message": body["details"]["causes"][0]["message"],
    }
    no_containers = {"metadata": {"name": "x"}, "spec": {"containers": []}}
    code, body = _err(v1.create_namespaced_pod, "default", no_containers)
    assert code == 422 and body["message"] == 'Pod "x" is invalid: spec.containers: Required value'
    bad_gpu = pod("y", command=["true"])
    bad_gpu["spec"]["containers"][0]["resources"] = {
        "requests": {"nvidia.com/gpu": "2"},
        "limits": {"nvidia.com/gpu": "4"},
    }
    code, body = _err(v1.create_namespaced_pod, "default", bad_gpu)
    assert code == 422 and "must be equal to nvidia.com/gpu limit of 4" in body["message"]
    code, body = _err(
        v1.create_namespaced_pod,
        "default",
        {"metadata": {"name": "z"}, "spec": {"containers": [{"name": "a", "image": "i"}, {"name": "a"}]}},
    )
    assert code == 422 and body["message"].startswith('Pod "z" is invalid: [')  # several causes
    assert {c["field"] for c in body["details"]["causes"]} == {
        "spec.containers[1].name",
        "spec.containers[1].image",
    }


def test_pod_spec_is_immutable_but_labels_patch(emu, v1):
    emu.set_script("*", "never_schedule")
    v1.create_namespaced_pod("default", pod("p", command=["true"]))
    p = v1.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"checked": "True"}}})
    assert p.metadata.labels == {"checked": "True"}
    code, body = _err(v1.patch_namespaced_pod, "p", "default", {"spec": {"restartPolicy": "Always"}})
    assert code == 422 and "pod updates may not change fields" in body["message"]


def test_bad_requests(emu, v1):
    code, body = _err(v1.list_node, label_selector="a in b")
    assert code == 400 and body["reason"] == "BadRequest"
    code, body = _err(v1.list_node, limit=1, _continue="not-a-token")
    assert code == 400 and body["message"].startswith("continue key is not valid")
    code, body = _err(
        v1.create_namespaced_config_map, "default", {"metadata": {"name": "x", "namespace": "other"}}
    )
    assert code == 400 and "does not match the namespace" in body["message"]


def test_expired_continue_token_is_410(emu, v1):
    for i in range(5):
        v1.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
    page = v1.list_namespaced_config_map("default", limit=2)
    v1.create_namespaced_config_map("default", {"metadata": {"name": "late"}})
    emu.compact()  # like etcd compaction past the snapshot
    code, body = _err(v1.list_namespaced_config_map, "default", limit=2, _continue=page.metadata._continue)
    assert code == 410 and body["reason"] == "Expired"
    assert "continue parameter is too old" in body["message"] and body["metadata"]["continue"]


def test_unknown_priority_class_is_forbidden(emu, v1):
    spec = pod("p", command=["true"], priorityClassName="nope")
    code, body = _err(v1.create_namespaced_pod, "default", spec)
    assert code == 403 and body["reason"] == "Forbidden"
    assert body["message"] == 'pods "p" is forbidden: no PriorityClass with name nope was found'


def test_immutable_configmap(emu, v1):
    v1.create_namespaced_config_map(
        "default", {"metadata": {"name": "frozen"}, "data": {"a": "1"}, "immutable": True}
    )
    code, body = _err(v1.patch_namespaced_config_map, "frozen", "default", {"data": {"a": "2"}})
    assert code == 422 and "data: Forbidden: field is immutable when `immutable` is set" in body["message"]
    v1.patch_namespaced_config_map(
        "frozen", "default", {"metadata": {"labels": {"ok": "yes"}}}
    )  # metadata is fine
    v1.delete_namespaced_config_map("frozen", "default")


def test_watch_is_refused_loudly(emu, v1):
    code, body = _err(v1.list_namespaced_pod, "default", watch=True)
    assert code == 501 and "watch" in body["message"]


def test_delete_returns_status_for_configmaps_and_object_for_pods(emu, v1):
    v1.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    st = v1.delete_namespaced_config_map("c", "default")
    assert st.status == "Success" and st.details.name == "c"
    emu.set_script("*", "never_schedule")
    v1.create_namespaced_pod("default", pod("p", command=["true"]))
    deleted = v1.delete_namespaced_pod("p", "default")
    assert deleted.metadata.name == "p" and deleted.metadata.deletion_timestamp is not None
    code, _ = _err(v1.delete_namespaced_pod, "p", "default")
    assert code == 404
