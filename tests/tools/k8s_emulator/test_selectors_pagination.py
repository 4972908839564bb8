"""Label/field selectors and limit/continue pagination through the real kubernetes client."""

from __future__ import annotations

import json

import pytest
from k8s_emulator.errors import ApiError
from k8s_emulator.selectors import parse_field_selector, parse_label_selector
from kubernetes import client


@pytest.mark.parametrize(
    "sel,expected",
    [
        ("", {"a", "b", "c", "d"}),
        ("tier=gpu", {"a", "b"}),
        ("tier==gpu", {"a", "b"}),
        ("tier!=gpu", {"c", "d"}),  # != also matches objects without the label
        ("tier in (gpu,cpu)", {"a", "b", "c"}),
        ("tier notin (gpu)", {"c", "d"}),
        ("zone", {"a", "c"}),
        ("!zone", {"b", "d"}),
        ("tier=gpu,zone", {"a"}),
        ("tier in (gpu), !zone", {"b"}),
        ("rank>1", {"b"}),
        ("rank<2", {"a"}),
    ],
)
def test_label_selector_grammar(sel, expected):
    objs = {
        "a": {"tier": "gpu", "zone": "z1", "rank": "1"},
        "b": {"tier": "gpu", "rank": "5"},
        "c": {"tier": "cpu", "zone": "z2"},
        "d": {},
    }
    s = parse_label_selector(sel)
    assert {k for k, labels in objs.items() if s.matches(labels)} == expected


@pytest.mark.parametrize("bad", ["a in b", "a in ()", "=x", "a,,b", "a b", "a=b=c", "x>y"])
def test_bad_label_selectors_are_400(bad):
    with pytest.raises(ApiError) as exc:
        parse_label_selector(bad)
    assert exc.value.code == 400 and "unable to parse requirement" in exc.value.message


def test_field_selector_escaping_and_unsupported():
    fs = parse_field_selector(r"metadata.name=a\,b,spec.nodeName!=", {"metadata.name": 0, "spec.nodeName": 1})
    assert fs.terms == [("metadata.name", "=", "a,b"), ("spec.nodeName", "!=", "")]
    with pytest.raises(ApiError) as exc:
        parse_field_selector("spec.foo=bar", {"metadata.name": 0})
    assert exc.value.code == 400 and exc.value.message == "field label not supported: spec.foo"


def _names(lst):
    return sorted(i.metadata.name for i in lst.items)


def test_node_selectors(emu, v1):
    emu.add_gpu_node("gpu-a", labels={"pool": "train"})
    emu.add_gpu_node("gpu-b", unschedulable=True, labels={"pool": "train"})
    emu.add_gpu_node("gpu-c", product="NVIDIA-A100-SXM4-80GB")
    emu.add_gpu_node("cpu-a", gpus=0)
    assert _names(v1.list_node(label_selector="nvidia.com/gpu.present=true")) == ["gpu-a", "gpu-b", "gpu-c"]
    assert _names(v1.list_node(label_selector="nvidia.com/gpu.product in (NVIDIA-A100-SXM4-80GB)")) == [
        "gpu-c"
    ]
    assert _names(v1.list_node(label_selector="pool,nvidia.com/gpu.present")) == ["gpu-a", "gpu-b"]
    assert _names(v1.list_node(label_selector="!nvidia.com/gpu.present")) == ["cpu-a"]
    assert _names(v1.list_node(field_selector="spec.unschedulable=false")) == ["cpu-a", "gpu-a", "gpu-c"]
    assert _names(v1.list_node(field_selector="spec.unschedulable=true")) == ["gpu-b"]
    assert _names(v1.list_node(field_selector="metadata.name=gpu-c")) == ["gpu-c"]
    assert _names(
        v1.list_node(field_selector="metadata.name!=gpu-c,spec.unschedulable!=true", label_selector="pool")
    ) == ["gpu-a"]


def test_pod_field_selectors(emu, v1):
    emu.add_gpu_node("gpu-1")
    emu.add_gpu_node("gpu-2")
    emu.add_user_pod("gpu-1", name="busy-1", gpus=8)
    emu.add_user_pod("gpu-2", name="done-2", gpus=4)
    emu.complete_pod("default", "done-2")
    emu.set_script("*", "never_schedule")
    emu.add_user_pod(None, name="waiting", gpus=8, phase="Pending", namespace="kube-system")
    all_pods = v1.list_pod_for_all_namespaces()
    assert _names(all_pods) == ["busy-1", "done-2", "waiting"]
    assert _names(v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-1")) == ["busy-1"]
    assert _names(v1.list_pod_for_all_namespaces(field_selector="spec.nodeName!=")) == ["busy-1", "done-2"]
    assert _names(v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=")) == ["waiting"]
    live = "status.phase!=Succeeded,status.phase!=Failed"
    assert _names(v1.list_pod_for_all_namespaces(field_selector=live)) == ["busy-1", "waiting"]
    assert _names(v1.list_pod_for_all_namespaces(field_selector=live + ",spec.nodeName!=")) == ["busy-1"]
    assert _names(v1.list_pod_for_all_namespaces(field_selector="status.phase=Succeeded")) == ["done-2"]
    assert _names(v1.list_namespaced_pod("kube-system")) == ["waiting"]
    assert _names(v1.list_pod_for_all_namespaces(field_selector="metadata.namespace=default")) == [
        "busy-1",
        "done-2",
    ]
    assert _names(v1.list_namespaced_pod("default", field_selector="metadata.name=busy-1")) == ["busy-1"]
    with pytest.raises(client.ApiException) as exc:
        v1.list_pod_for_all_namespaces(field_selector="spec.containers=x")
    assert exc.value.status == 400
    assert json.loads(exc.value.body)["message"] == "field label not supported: spec.containers"
    with pytest.raises(client.ApiException) as exc:
        v1.list_pod_for_all_namespaces(label_selector="a in b")
    assert exc.value.status == 400 and json.loads(exc.value.body)["reason"] == "BadRequest"


def _create_cms(v1, n, ns="default"):
    for i in range(n):
        v1.create_namespaced_config_map(
            ns, {"metadata": {"name": f"cm-{i:03d}", "labels": {"odd": str(i % 2)}}, "data": {"i": str(i)}}
        )


def test_pagination_continue_and_remaining(emu, v1):
    _create_cms(v1, 23)
    seen, cont, remaining = [], None, []
    while True:
        page = v1.list_namespaced_config_map("default", limit=5, _continue=cont)
        seen += [c.metadata.name for c in page.items]
        remaining.append(page.metadata.remaining_item_count)
        cont = page.metadata._continue
        if not cont:
            break
    assert seen == [f"cm-{i:03d}" for i in range(23)]
    assert remaining == [18, 13, 8, 3, None]
    assert page.kind == "ConfigMapList" and page.api_version == "v1"
    # with a selector: no remainingItemCount (as the real apiserver), pages still complete
    seen, cont = [], None
    while True:
        page = v1.list_namespaced_config_map("default", limit=4, label_selector="odd=1", _continue=cont)
        assert page.metadata.remaining_item_count is None
        seen += [c.metadata.name for c in page.items]
        cont = page.metadata._continue
        if not cont:
            break
    assert seen == [f"cm-{i:03d}" for i in range(1, 23, 2)]


def test_pagination_is_a_consistent_snapshot_under_mutation(emu, v1):
    _create_cms(v1, 12)
    first = v1.list_namespaced_config_map("default", limit=4)
    snapshot_rv = first.metadata.resource_version
    v1.delete_namespaced_config_map("cm-010", "default")  # not yet listed: still shown
    v1.create_namespaced_config_map("default", {"metadata": {"name": "cm-005a"}})  # created later: not shown
    v1.patch_namespaced_config_map("cm-007", "default", {"data": {"i": "changed"}})  # old version shown
    rest, cont = [], first.metadata._continue
    while cont:
        page = v1.list_namespaced_config_map("default", limit=4, _continue=cont)
        assert page.metadata.resource_version == snapshot_rv
        rest += page.items
        cont = page.metadata._continue
    names = [c.metadata.name for c in first.items] + [c.metadata.name for c in rest]
    assert names == [f"cm-{i:03d}" for i in range(12)]
    assert next(c for c in rest if c.metadata.name == "cm-007").data == {"i": "7"}
    # a fresh list sees the present
    now = _names(v1.list_namespaced_config_map("default"))
    assert "cm-005a" in now and "cm-010" not in now
    assert v1.read_namespaced_config_map("cm-007", "default").data == {"i": "changed"}


def test_all_namespaces_list_is_ordered_by_namespace_then_name(emu, v1):
    v1.create_namespace({"metadata": {"name": "team-b"}})
    v1.create_namespace({"metadata": {"name": "team-a"}})
    for ns in ("team-b", "team-a", "default"):
        for n in ("z", "a"):
            v1.create_namespaced_config_map(ns, {"metadata": {"name": n}})
    items = v1.list_config_map_for_all_namespaces(limit=2)
    got = [(c.metadata.namespace, c.metadata.name) for c in items.items]
    cont = items.metadata._continue
    while cont:
        items = v1.list_config_map_for_all_namespaces(limit=2, _continue=cont)
        got += [(c.metadata.namespace, c.metadata.name) for c in items.items]
        cont = items.metadata._continue
    assert got == sorted(got) and len(got) == 6
