"""Where a list is served from (etcd or the watch cache), as a real apiserver's cacher decides it, and
what each read looks at: the watch cache's spec.nodeName index for pods; etcd reads every pod."""

from __future__ import annotations

import json

import pytest


def _reads(emu, call) -> dict:
    emu.reset_counters()
    call()
    return emu.counters()["list_reads"]


@pytest.fixture
def big(emu):
    emu.bulk_generate(nodes=40, pods=800, seed=4)
    return emu


@pytest.mark.parametrize("version, kwargs, source", [
    ("1.30", {}, "etcd"),  # a consistent read before ConsistentListFromCache
    ("1.31", {}, "watch-cache"),  # from 1.31 the cache serves consistent reads
    ("1.30", {"resource_version": "0"}, "watch-cache"),
    ("1.31", {"limit": 50}, "etcd"),  # a page without resourceVersion=0: etcd
    ("1.31", {"resource_version": "0", "limit": 50}, "watch-cache"),
    ("1.31", {"resource_version": "1", "resource_version_match": "Exact"}, "etcd"),
    ("1.31", {"resource_version": "1", "resource_version_match": "NotOlderThan"}, "watch-cache"),
])
def test_the_cachers_choice(big, v1, version, kwargs, source):
    big.configure(kubernetes_version=version)
    node = v1.list_node(limit=1).items[0].metadata.name
    reads = _reads(big, lambda: v1.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}", **kwargs))
    assert reads[f"pods {source}"] == 1 and len([k for k in reads if not k.endswith("objects")]) == 1
    examined = reads[f"pods {source} objects"]
    if source == "etcd":
        assert examined == 800  # every pod of the cluster, filtered after reading
    else:
        assert examined < 100  # that node's pods, from the index


def test_a_continued_list_reads_etcd(big, v1):
    first = v1.list_pod_for_all_namespaces(limit=100, resource_version="0")
    assert first.metadata._continue  # the emulator pages an rv=0 list (a difference: see its README)
    reads = _reads(big, lambda: v1.list_pod_for_all_namespaces(limit=100, _continue=first.metadata._continue))
    assert reads == {"pods etcd": 1, "pods etcd objects": 0}  # served from the first page's snapshot


def test_from_1_33_a_list_is_streamed_item_by_item_with_the_same_answer(big, v1):
    """StreamingCollectionEncodingToJSON (beta, on from 1.33): the items are written as they are encoded
    (chunked), never the whole list at once; the answer is the one 1.32 gives whole."""
    big.configure(kubernetes_version="1.32")
    whole = v1.list_pod_for_all_namespaces(field_selector="spec.nodeName!=", _preload_content=False)
    assert whole.headers.get("Content-Length") and "Transfer-Encoding" not in whole.headers
    big.configure(kubernetes_version="1.33")
    streamed = v1.list_pod_for_all_namespaces(field_selector="spec.nodeName!=", _preload_content=False)
    assert streamed.headers.get("Transfer-Encoding") == "chunked" and not streamed.headers.get("Content-Length")
    one, two = json.loads(whole.data), json.loads(streamed.data)
    assert one["items"] == two["items"] and len(two["items"]) > 500
    paged = v1.list_pod_for_all_namespaces(limit=100)  # pages are still whole answers
    assert len(paged.items) == 100 and paged.metadata._continue
