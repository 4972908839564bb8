"""Discovery's read path: one watch-cache list per stream (resourceVersion=0, no limit) decoded by
msgspec, identical results to the paged consistent lists, and the fallback to paging when the
server refuses — through the real kubernetes client against the Kubernetes API emulator."""

from __future__ import annotations

import gc
import logging

import pytest
from cluster_doctor.domain.config import Settings
from cluster_doctor.kube import discovery, listing
from k8s_emulator import EmulatorProcess
from kubernetes.client.exceptions import ApiException


@pytest.fixture(scope="module")
def fleet(emulator):
    emulator.bulk_generate(nodes=300, pods=6000, seed=3)
    # a few hand-made cases on top: a pending pod nominated to a node, a cordoned node
    emulator.add_gpu_node("extra-001")
    emulator.add_gpu_node("extra-002", unschedulable=True)
    return emulator


def _same(a: discovery.Discovery, b: discovery.Discovery) -> None:
    assert [n.to_dict() for n in a.free] == [n.to_dict() for n in b.free]
    assert [n.to_dict() for n in a.ineligible] == [n.to_dict() for n in b.ineligible]
    assert (a.nodes_seen, a.pods_seen) == (b.nodes_seen, b.pods_seen)


def test_watch_cache_read_is_two_calls_and_exactly_the_paged_answer(fleet):
    core = fleet.core_v1()
    fleet.reset_counters()
    fast = discovery.discover(core, Settings())
    assert fleet.api_calls() == 2 == fast.api_calls  # the nodes, every non-terminal pod
    assert fast.read_mode == "watch-cache" and fast.decode_seconds > 0
    paged = discovery.discover(core, Settings(), watch_cache=False)
    assert paged.read_mode == "paged" and paged.api_calls > 2
    _same(fast, paged)
    assert fast.free and fast.ineligible
    reasons = {n.reason for n in fast.ineligible}
    assert {discovery.BUSY, discovery.CORDONED} <= reasons
    assert "extra-001" in {n.name for n in fast.free}


class _Refusing:
    """core_v1 whose pod lists refuse resourceVersion=0 the way a server may: an HTTP error, or paging
    the answer anyway."""

    def __init__(self, core, how):
        self.core, self.how, self.refused = core, how, 0

    def __getattr__(self, name):
        return getattr(self.core, name)

    def list_pod_for_all_namespaces(self, **kwargs):
        if kwargs.get("resource_version") == "0":
            self.refused += 1
            if self.how == "pages":
                return self.core.list_pod_for_all_namespaces(**kwargs, limit=50)
            raise ApiException(status=self.how, reason="refused")
        return self.core.list_pod_for_all_namespaces(**kwargs)


@pytest.mark.parametrize("how", [410, 429, 500, 504, "pages"])
def test_falls_back_to_paging_when_the_server_refuses(fleet, how, caplog):
    core = fleet.core_v1()
    expected = discovery.discover(core, Settings(), watch_cache=False)
    refusing = _Refusing(core, how)
    with caplog.at_level(logging.WARNING, logger="cluster_doctor.kube.discovery"):
        found = discovery.discover(refusing, Settings())
    assert found.read_mode == "paged"
    assert refusing.refused == 1  # asked once, then paged
    assert "refused a resourceVersion=0 list" in caplog.text
    _same(found, expected)


def test_permission_errors_are_not_hidden_by_the_fallback(fleet):
    with pytest.raises(ApiException) as info:
        discovery.discover(_Refusing(fleet.core_v1(), 403), Settings())
    assert info.value.status == 403


@pytest.mark.parametrize("body, message", [
    (b'{"items": {"a": 1}}', "unexpected pods list"),
    (b'{"items": [{"spec": {"nodeName": 3}}]}', "unexpected pods list"),
    (b'{"items": [{"metadata": {"name": "p", "namespace": "n"}, "spec": {"containers": "x"}}]}', "unexpected pod n/p"),
])
def test_unexpected_shapes_fail_with_a_clear_message(body, message):
    with pytest.raises(ValueError, match=message):
        items, _ = listing.decode("pods", body, [0])
        [listing.pod_dict(p) for p in items]


def test_only_the_needed_fields_are_decoded():
    raw = (b'{"kind":"PodList","metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"p","namespace":"ns",'
           b'"managedFields":[{"manager":"kubelet"}],"annotations":{"big":"xxxxxxxx"}},"spec":{"nodeName":"gpu-1",'
           b'"volumes":[{"name":"v"}],"containers":[{"name":"c","image":"i","env":[{"name":"A","value":"1"}],'
           b'"resources":{"limits":{"nvidia.com/gpu":"8"}}}]},"status":{"phase":"Running","podIP":"10.0.0.1"}}]}')
    items, _ = listing.decode("pods", raw, [0])
    pod = listing.pod_dict(items[0])  # labels and containers are decoded on demand
    assert pod == {"metadata": {"name": "p", "namespace": "ns", "labels": {}},
                   "spec": {"nodeName": "gpu-1", "containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
                   "status": {"phase": "Running"}}
    assert discovery.pod_request(pod, "nvidia.com/gpu") == 8


def test_a_list_cut_off_mid_answer_starts_discovery_over(fleet, caplog):
    """A streamed list is not read inside the client's retry (that would hold it whole): a connection
    lost mid-body reaches discovery, which starts over and gets the same answer."""
    from cluster_doctor.kube import retry

    core = retry.core_v1(fleet.api_client())
    expected = discovery.discover(core, Settings())
    fleet.inject_faults("/api/v1/pods", ["cut"], method="GET")
    with caplog.at_level(logging.WARNING, logger="cluster_doctor.kube.discovery"):
        found = discovery.discover(core, Settings())
    assert "cut off mid-answer" in caplog.text and "starts over (try 2 of 3)" in caplog.text
    assert found.read_mode == "watch-cache"
    _same(found, expected)


def test_a_list_the_server_streams_reads_the_same(fleet):
    """From Kubernetes 1.33 the apiserver writes a list item by item (chunked): the streamed decoding
    gives exactly what the paged consistent lists give."""
    core = fleet.core_v1()
    expected = discovery.discover(core, Settings(), watch_cache=False)
    fleet.configure(kubernetes_version="1.33")
    try:
        _same(discovery.discover(core, Settings()), expected)
    finally:
        fleet.configure(kubernetes_version="1.31")


class _Watching:
    """core_v1 that notes whether Python's garbage collector is on while each list is asked for."""

    def __init__(self, core, fail: bool = False):
        self.core, self.fail, self.collector_on = core, fail, []

    def __getattr__(self, name):
        return getattr(self.core, name)

    def list_node(self, **kwargs):
        self.collector_on.append(gc.isenabled())
        if self.fail:
            raise ApiException(status=403, reason="forbidden")
        return self.core.list_node(**kwargs)


def test_the_collector_is_paused_while_discovering_and_given_back_as_it_was(fleet):
    """Discovery keeps tens of thousands of small objects until it returns; the collector, which would
    run over and over (and over the whole process) meanwhile, is paused, and is on again afterwards,
    whether discovery returned or raised; off before, it stays off."""
    watching = _Watching(fleet.core_v1())
    found = discovery.discover(watching, Settings())
    assert watching.collector_on == [False] and gc.isenabled()
    _same(found, discovery.discover(fleet.core_v1(), Settings(), watch_cache=False))
    with pytest.raises(ApiException):
        discovery.discover(_Watching(fleet.core_v1(), fail=True), Settings())
    assert gc.isenabled()
    gc.disable()
    try:
        discovery.discover(fleet.core_v1(), Settings())
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_free_and_not_eligible_nodes_come_in_numeric_order():
    """gpu-2 before gpu-10, as a person reads them (the API lists them sorted as strings)."""
    with EmulatorProcess() as emu:
        for i in (10, 2, 1, 33, 4):
            emu.add_gpu_node(f"gpu-{i}", unschedulable=i in (33, 4))
        found = discovery.discover(emu.core_v1(), Settings())
    assert [n.name for n in found.free] == ["gpu-1", "gpu-2", "gpu-10"]
    assert [n.name for n in found.ineligible] == ["gpu-4", "gpu-33"]
