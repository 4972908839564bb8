"""kube.listing: list responses decoded as they arrive, a batch of whole items at a time, with the same
answer whatever the chunking, the item layout or nested look-alikes of the item boundary."""

from __future__ import annotations

import io
import json

import pytest
from cluster_doctor.kube import listing


class Body:
    """A urllib3-like response: read(n) hands out at most ``chunk`` bytes; close/release recorded."""

    def __init__(self, data: bytes, chunk: int):
        self.data_io, self.chunk = io.BytesIO(data), chunk
        self.closed, self.released = False, 0

    def read(self, n: int) -> bytes:
        return self.data_io.read(min(n, self.chunk))

    def release_conn(self) -> None:
        self.released += 1

    def close(self) -> None:
        self.closed = True


def pod(i: int, *, lookalikes: bool = False, layout: str = "apiserver") -> dict:
    p = {"metadata": {"name": f"p{i}", "namespace": "ns", "annotations": {"x": '},{"metadata":'}},
         "spec": {"nodeName": f"n{i % 7}", "containers": [
             {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}, {"name": "d"}]},
         "status": {"phase": "Running"}}
    if lookalikes:  # the boundary's bytes nested inside an item: the decoder must refuse those cuts
        p["spec"]["volumes"] = [{"name": "a"}, {"metadata": {"x": 1}}, {"metadata": {"y": [{"metadata": {}}]}}]
    if layout == "emulator":  # the emulator's items carry kind/apiVersion first
        p = {"kind": "Pod", "apiVersion": "v1", **p}
    elif layout == "odd":  # a first key whose value is an object, then others: still cut correctly
        p = {"status": p.pop("status"), **p}
    return p


LAYOUTS = ["apiserver", "emulator", "odd"]


def body(items: list, **extra) -> bytes:
    return json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5", **extra},
                       "items": items}, separators=(",", ":")).encode()


@pytest.mark.parametrize("lookalikes", [False, True])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n", [0, 1, 40])
@pytest.mark.parametrize("chunk", [1, 13, 700, 1 << 20])
def test_every_item_in_order_whatever_the_chunks(monkeypatch, lookalikes, layout, n, chunk):
    monkeypatch.setattr(listing, "CHUNK_BYTES", chunk)
    response = Body(body([pod(i, lookalikes=lookalikes, layout=layout) for i in range(n)]), chunk)
    counter = listing.Counter()
    meta, items = listing.stream_list(response, "pods", counter)
    got = [listing.pod_dict(p) for p in items]
    assert meta == {"resourceVersion": "5"}
    assert [p["metadata"]["name"] for p in got] == [f"p{i}" for i in range(n)]
    assert got[:1] == [] or got[0]["spec"]["containers"][0] == {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
    assert not response.closed and counter.decode_seconds >= 0


@pytest.mark.parametrize("layout", LAYOUTS)
def test_never_holds_the_whole_list(monkeypatch, layout):
    monkeypatch.setattr(listing, "CHUNK_BYTES", 4096)
    data = body([pod(i, layout=layout) for i in range(3000)])
    stream = listing._ItemStream(Body(data, 4096), "pods", [0])
    stream.read_head()
    peak = 0
    for _ in stream.batches():
        peak = max(peak, len(stream.buf))
    assert len(data) > 500_000 and peak < 3 * 4096


@pytest.mark.parametrize("data, meta, names", [
    (b'{"kind":"PodList","metadata":{"resourceVersion":"1"},"items":null}', {"resourceVersion": "1"}, []),
    # metadata after the items: not known before them (a real apiserver writes it first)
    (b'{"items":[{"metadata":{"name":"a"}}],"metadata":{"resourceVersion":"2"}}', {}, ["a"]),
    (b'{ "metadata" : {"continue": "t"},\n "items" : [ {"metadata": {"name": "b"}} ] }\n', {"continue": "t"}, ["b"]),
])
def test_other_layouts_read_the_same(data, meta, names):
    got_meta, items = listing.stream_list(Body(data, 5), "pods", [0])
    assert [p.meta["name"] for p in items] == names
    assert got_meta == meta


@pytest.mark.parametrize("data", [
    body([pod(1)])[:-30],  # cut off mid-item
    body([pod(1)])[:-1],  # the closing brace missing
    b'{"items":[{"spec":{"nodeName":["x"]}}]}',  # a field of the wrong type
])
def test_broken_bodies_fail_with_one_clear_line(data):
    _, items = listing.stream_list(Body(data, 16), "pods", [0])
    with pytest.raises(ValueError, match="unexpected pods list from the Kubernetes API") as info:
        list(items)
    assert "\n" not in str(info.value)


def test_an_abandoned_stream_closes_its_connection():
    response = Body(body([pod(i) for i in range(200)]), 512)
    _, items = listing.stream_list(response, "pods", [0])
    next(iter(items))
    items.close()
    assert response.closed and response.released == 1


@pytest.mark.parametrize("prefetch", [0, 3])
def test_a_stream_given_up_before_its_items_closes_its_connection(prefetch):
    response = Body(body([pod(i) for i in range(200)]), 512)
    _, items = listing.stream_list(response, "pods", [0], prefetch=prefetch)
    items.close()
    assert response.closed and response.released == 1


def test_read_ahead_gives_the_same_items_and_hands_over_a_broken_connection(monkeypatch):
    monkeypatch.setattr(listing, "CHUNK_BYTES", 700)
    data = body([pod(i) for i in range(300)])
    _, items = listing.stream_list(Body(data, 700), "pods", [0], prefetch=2)
    assert [p.meta["name"] for p in items] == [f"p{i}" for i in range(300)]

    class Cut(Body):
        def read(self, n):
            if self.data_io.tell() > len(data) // 2:
                raise ConnectionResetError(104, "Connection reset by peer")
            return super().read(n)

    _, items = listing.stream_list(Cut(data, 700), "pods", [0], prefetch=2)
    with pytest.raises(ConnectionResetError):
        list(items)


def test_a_paged_answer_to_an_unlimited_read_is_refused_before_any_item():
    response = Body(body([pod(1)], **{"continue": "abc"}), 64)
    with pytest.raises(listing.ListRefused, match="paged"):
        listing.list_cached(lambda **kw: response, [0], kind="pods")
    assert response.closed


def test_a_pod_that_never_names_the_resource_is_not_decoded_further():
    raw = json.dumps({"items": [
        {"metadata": {"name": "cpu"}, "spec": {"containers": [{"resources": {"limits": {"cpu": "2"}}}]}},
        {"metadata": {"name": "gpu"}, "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}]}},
        {"metadata": {"name": "init"}, "spec": {"initContainers": [{"resources": {"requests": {"nvidia.com/gpu": 1}}}]}},
        {"metadata": {"name": "arg"}, "spec": {"containers": [{"args": ["nvidia.com/gpu"]}]}},
        {"metadata": {"name": "bare"}}]}).encode()
    items, _ = listing.decode("pods", raw, [0])
    assert [p.meta["name"] for p in items if listing.mentions(p, "nvidia.com/gpu")] == ["gpu", "init", "arg"]


@pytest.mark.parametrize("compact", [True, False])
@pytest.mark.parametrize("chunk", [1, 13, 700, 1 << 20])
def test_a_keep_read_decodes_only_the_items_the_needle_occurs_in_and_counts_them_all(monkeypatch, compact, chunk):
    """The items the needle occurs in, in order, each once (however often it occurs in them, whether in
    the first item, the last or several in a row), and every item counted, compact JSON or not."""
    monkeypatch.setattr(listing, "CHUNK_BYTES", chunk)
    pods = [pod(i, lookalikes=i % 5 == 0) for i in range(60)]
    for i, p in enumerate(pods):
        if i % 3:  # only every third pod names the GPU resource, some twice
            p["spec"]["containers"] = [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]
        elif i % 2:
            p["spec"]["containers"][1]["resources"] = {"requests": {"nvidia.com/gpu": "1"}}
    pods[-1]["metadata"]["labels"] = {"uses": "nvidia.com/gpu"}  # a mention that is no request: kept too
    data = body(pods) if compact else json.dumps({"metadata": {"resourceVersion": "5"}, "items": pods}, indent=1).encode()
    counter = listing.Counter()
    _, items = listing.stream_list(Body(data, chunk), "pods", counter, batches=True, keep=listing.quoted("nvidia.com/gpu"))
    batches = list(items)
    kept = [p.meta["name"] for batch in batches for p in batch]
    assert kept == [f"p{i}" for i in range(60) if i % 3 == 0] + ["p59"]
    assert sum(listing.seen(b) for b in batches) == 60
    assert all(listing.mentions(p, "nvidia.com/gpu") for batch in batches for p in batch if p.meta["name"] != "p59")


def test_a_keep_read_of_a_list_without_the_needle_counts_every_item_and_keeps_none():
    data = body([pod(i) for i in range(30)]).replace(b"nvidia.com/gpu", b"example.com/fpga")
    _, items = listing.stream_list(Body(data, 500), "pods", listing.Counter(), batches=True,
                                   keep=listing.quoted("nvidia.com/gpu"))
    batches = list(items)
    assert [p for b in batches for p in b] == [] and sum(listing.seen(b) for b in batches) == 30


def test_a_keep_read_decodes_ahead_while_its_caller_is_busy_and_stops_when_abandoned(monkeypatch):
    """The whole body is read and decoded before the caller asks for the first item (discovery reads the
    node list meanwhile); abandoned half-way, the decoding thread ends and the connection is closed."""
    import time

    monkeypatch.setattr(listing, "CHUNK_BYTES", 300)
    data = body([pod(i) for i in range(200)])
    response = Body(data, 300)
    _, items = listing.stream_list(response, "pods", listing.Counter(), batches=True,
                                   keep=listing.quoted("nvidia.com/gpu"))
    deadline = time.monotonic() + 10
    while response.data_io.tell() < len(data) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert response.data_io.tell() == len(data)  # read to its end without a single item asked for
    assert sum(listing.seen(b) for b in items) == 200 and not response.closed  # whole: the connection is reusable

    class Slow(Body):
        def read(self, n):
            time.sleep(0.01)
            return super().read(n)

    slow = Slow(data, 300)
    _, items = listing.stream_list(slow, "pods", listing.Counter(), batches=True, keep=listing.quoted("nvidia.com/gpu"))
    next(iter(items))
    items.close()
    assert slow.closed and not items.ahead.is_alive() and slow.data_io.tell() < len(data)
