"""Reading big Kubernetes lists small: only the fields Cluster Doctor uses, decoded as the bytes arrive.

A list served from the apiserver's watch cache (``resourceVersion=0``, no limit) is one HTTP response
holding every object: at 150,000 pods, well over 100 MB of JSON. ``stream_list`` reads it in chunks
and decodes a batch of whole items at a time with msgspec, into TypedDicts of the needed fields only
(the rest of each object is skipped without being built). The caller folds each item into its own
aggregates and drops it, so at most one chunk of JSON and one batch of small dicts is alive at once,
whatever the size of the list.

How a batch is cut: every item of one list starts with the same bytes (``{"metadata":`` from a real
apiserver, whose list items carry no kind/apiVersion; ``{"kind":"Pod",`` from the emulator), so the
last ``},`` followed by those bytes in the buffer is a candidate boundary between two items. msgspec decodes ``[`` + everything before it +
``]``, which is valid JSON only when the cut really falls between items: a false candidate (the same
bytes nested inside an item) is refused by the decoder and an earlier one is tried, so no boundary is
ever trusted without the decoder's check. Whatever the server's formatting, the answer is the same;
only the batch size depends on it.

A list read for a few of its items (``keep``: the pods that name the GPU resource, at 150,000 pods about
one in seven) splits each batch into its items as raw JSON first (msgspec, nothing built), finds the
needle in the batch's bytes once and decodes only the items it falls in; the rest are counted
(``seen``), never built nor looped over in Python. The item an occurrence falls in is found from the
items' lengths when the batch is compact JSON (what an apiserver writes: checked by its length), else
by searching each item. Such a read decodes ahead in a thread of its own, whatever the caller does
meanwhile (discovery judges the node list): the server's answer keeps flowing instead of waiting in a
full socket, and what waits for the caller is small (the kept items, copied out of their chunk).

Paged consistent lists (``limit``/``continue``) are small per page and decoded whole (``paginate``).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import operator
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

import msgspec

PAGE_SIZE = 500
CHUNK_BYTES = 1 << 20  # read size: big enough that a decode call amortizes, small next to the list
_CANDIDATES_TRIED = 4  # false boundaries tried per chunk before reading more


# ---------------------------------------------------------------------------- the fields we read
class Meta(TypedDict, total=False):
    name: str
    namespace: str
    labels: dict[str, str]


class Taint(TypedDict, total=False):
    key: str
    value: str
    effect: str


class Condition(TypedDict, total=False):
    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str


class NodeSpec(TypedDict, total=False):
    unschedulable: bool
    taints: list[Taint]


class NodeStatus(TypedDict, total=False):
    allocatable: dict[str, Any]
    conditions: list[Condition]


class Node(TypedDict, total=False):
    metadata: Meta
    spec: NodeSpec
    status: NodeStatus


class Resources(TypedDict, total=False):
    requests: dict[str, Any]
    limits: dict[str, Any]


class Container(TypedDict, total=False):
    resources: Resources
    restartPolicy: str


class PodSpec(TypedDict, total=False):
    nodeName: str
    containers: list[Container]
    initContainers: list[Container]


class PodStatus(TypedDict, total=False):
    phase: str
    nominatedNodeName: str


class Pod(TypedDict, total=False):
    """A pod as discovery and the guards read it (``pod_dict``)."""

    metadata: Meta
    spec: PodSpec
    status: PodStatus


# A pod as a list is decoded: what every pod is tested on (its node, phase, nomination) as plain fields;
# its labels and containers kept as raw JSON, decoded only for the pods whose GPUs matter (those bound to
# a GPU node still free). At 150,000 pods that is a fifth of the decoding time of building them all.
# gc=False: these hold only strings and bytes (no cycles), so the collector need not track them; 75,000
# tracked objects per list would run it over and over while decoding (a third of the time).
_NULL = msgspec.Raw(b"null")


class _PodSpec(msgspec.Struct, gc=False):
    nodeName: str = ""  # noqa: N815 - the API's field names
    containers: msgspec.Raw = _NULL
    initContainers: msgspec.Raw = _NULL  # noqa: N815


class LazyPod(msgspec.Struct, gc=False):
    """Only the node is decoded at once; the metadata, the containers and the status when asked for."""

    metadata: msgspec.Raw = _NULL
    spec: _PodSpec | None = None
    status: msgspec.Raw = _NULL

    @property
    def node_name(self) -> str:
        return self.spec.nodeName if self.spec else ""

    @property
    def nominated_node(self) -> str:
        return _decode_part(_STATUS, self.status, "status").get("nominatedNodeName") or ""

    @property
    def meta(self) -> Meta:
        return _decode_part(_META, self.metadata, "metadata")


def _decode_part(decoder: msgspec.json.Decoder, raw: msgspec.Raw, what: str) -> Any:
    try:
        return decoder.decode(raw) or {}
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ValueError(f"unexpected pod {what} from the Kubernetes API: {exc}") from None


def mentions(pod: LazyPod, resource: str) -> bool:
    """Whether the pod's containers (or init containers) name ``resource`` at all, as a JSON string.
    False means the pod cannot request or limit it, and its containers need not be decoded: a resource
    name is a qualified name, whose characters the apiserver's JSON never escapes. True may be a name
    that only appears elsewhere (an argument): decode the pod to know (``pod_dict``)."""
    if pod.spec is None:
        return False
    needle = b'"' + resource.encode() + b'"'
    return needle in bytes(pod.spec.containers) or needle in bytes(pod.spec.initContainers)


_META = msgspec.json.Decoder(Meta | None)
_STATUS = msgspec.json.Decoder(PodStatus | None)
_CONTAINERS = msgspec.json.Decoder(list[Container] | None)


def pod_dict(pod: LazyPod) -> Pod:
    """The pod with its metadata, containers and status decoded (``Pod``'s shape). ValueError names a
    field of an unexpected type."""
    meta = pod.meta
    spec = pod.spec or _PodSpec()
    where = f"{meta.get('namespace')}/{meta.get('name')}"
    try:
        out: dict[str, Any] = {
            "metadata": {"name": meta.get("name", ""), "namespace": meta.get("namespace", ""),
                         "labels": meta.get("labels") or {}},
            "spec": {"nodeName": spec.nodeName, "containers": _CONTAINERS.decode(spec.containers) or []},
            "status": _STATUS.decode(pod.status) or {}}
        init = _CONTAINERS.decode(spec.initContainers)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ValueError(f"unexpected pod {where} from the Kubernetes API: {exc}") from None
    if init:
        out["spec"]["initContainers"] = init
    return out  # type: ignore[return-value]


# Nodes the same way: what judges every GPU node is decoded when it is needed; of the labels and the
# allocatable resources only the one key asked for (``value_of``), every other key skipped unbuilt.
class _NodeMeta(msgspec.Struct, gc=False):
    name: str = ""
    labels: msgspec.Raw = _NULL


class _NodeSpec(msgspec.Struct, gc=False):
    unschedulable: bool = False
    taints: msgspec.Raw = _NULL


class _NodeInfo(msgspec.Struct, gc=False):
    bootID: str = ""


class _NodeStatus(msgspec.Struct, gc=False):
    allocatable: msgspec.Raw = _NULL
    capacity: msgspec.Raw = _NULL
    conditions: msgspec.Raw = _NULL
    nodeInfo: _NodeInfo | None = None


class LazyNode(msgspec.Struct, gc=False):
    metadata: _NodeMeta | None = None
    spec: _NodeSpec | None = None
    status: _NodeStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name if self.metadata else ""

    def label(self, key: str) -> Any:
        return value_of(self.metadata.labels, key) if self.metadata else None

    def allocatable(self, resource: str) -> Any:
        return value_of(self.status.allocatable, resource) if self.status else None

    def capacity(self, resource: str) -> Any:
        return value_of(self.status.capacity, resource) if self.status else None

    @property
    def boot_id(self) -> str:
        """status.nodeInfo.bootID: a new one means the node rebooted (the signals compare it)."""
        return self.status.nodeInfo.bootID if self.status and self.status.nodeInfo else ""


@functools.lru_cache(maxsize=32)
def _one_key(key: str) -> msgspec.json.Decoder:
    """A decoder of one key of a JSON object, every other key skipped (a label, an allocatable resource)."""
    struct = msgspec.defstruct("OneKey", [("value", str | int | float | None, None)], rename={"value": key},
                               gc=False)
    return msgspec.json.Decoder(struct | None)


def value_of(raw: msgspec.Raw, key: str) -> Any:
    """``raw``'s value at ``key`` (a JSON object's), or None. ValueError for a value that is not a scalar."""
    try:
        found = _one_key(key).decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ValueError(f"unexpected {key!r} from the Kubernetes API: {exc}") from None
    return found.value if found is not None else None


_TAINTS = msgspec.json.Decoder(list[Taint] | None)
_CONDITIONS = msgspec.json.Decoder(list[Condition] | None)


def node_dict(node: LazyNode) -> Node:
    """The node's name, cordon, taints and conditions as ``Node``'s shape (what judges it)."""
    spec, status = node.spec or _NodeSpec(), node.status or _NodeStatus()
    try:
        return {"metadata": {"name": node.name},  # type: ignore[return-value]
                "spec": {"unschedulable": spec.unschedulable, "taints": _TAINTS.decode(spec.taints) or []},
                "status": {"conditions": _CONDITIONS.decode(status.conditions) or []}}
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ValueError(f"unexpected node {node.name} from the Kubernetes API: {exc}") from None


KINDS: dict[str, type] = {"nodes": LazyNode, "pods": LazyPod}


class _List(msgspec.Struct):
    items: Any = None
    metadata: dict[str, Any] | None = None


def _list_decoder(item: type) -> msgspec.json.Decoder:
    return msgspec.json.Decoder(msgspec.defstruct(f"{item.__name__}List", [
        ("items", list[item] | None, None), ("metadata", dict[str, Any] | None, None)]))


_WHOLE = {kind: _list_decoder(item) for kind, item in KINDS.items()}
_ITEMS = {kind: msgspec.json.Decoder(list[item]) for kind, item in KINDS.items()}
_HEAD = msgspec.json.Decoder(_List)
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])


class Batch(list):
    """Items of one batch of a list read with ``keep``: the items kept; ``seen``: how many it held."""

    __slots__ = ("seen",)


def seen(batch: list[Any]) -> int:
    """How many items a batch of a list held (a ``keep`` read hands back only some of them)."""
    return batch.seen if isinstance(batch, Batch) else len(batch)


def quoted(name: str) -> bytes:
    """``name`` as a JSON string: what ``keep`` looks for (a resource name: never escaped by the server)."""
    return b'"' + name.encode() + b'"'


def _containing(raws: list[msgspec.Raw], data: bytes | bytearray, needle: bytes,
                end: int | None = None) -> list[msgspec.Raw]:
    """The items of ``data[:end]`` (``[`` + ``raws`` joined by ``,`` + ``]``) in which ``needle`` occurs."""
    end = len(data) if end is None else end
    at = data.find(needle, 0, end)
    if at < 0:
        return []
    if sum(map(len, raws)) + len(raws) + 1 != end:  # not compact: search each item
        return [raw for raw in raws if needle in memoryview(raw).tobytes()]
    # the last byte of item i: the "[", i commas and the lengths of items 0..i, less one
    lasts = list(map(operator.add, itertools.accumulate(map(len, raws)), range(len(raws))))
    kept = []
    while at >= 0:
        i = bisect.bisect_left(lasts, at)
        kept.append(raws[i])
        at = data.find(needle, lasts[i] + 1, end)  # on from the next item
    return kept


class ListRefused(RuntimeError):
    """The server would not serve an unpaginated list from its cache."""


class Counter(list):
    """[api_calls] plus the decode time, shared by every list of one discovery (lists may run in
    threads side by side: ``add`` under a lock)."""

    def __init__(self) -> None:
        super().__init__([0])
        self.decode_seconds = 0.0
        self._lock = threading.Lock()

    def add(self, calls: int = 0, decode_seconds: float = 0.0) -> None:
        with self._lock:
            self[0] += calls
            self.decode_seconds += decode_seconds


def _count(counter: list[int], calls: int = 0, decode_seconds: float = 0.0) -> None:
    if isinstance(counter, Counter):
        counter.add(calls, decode_seconds)
    else:
        counter[0] += calls


def _unexpected(kind: str, exc: Exception) -> ValueError:
    return ValueError(f"unexpected {kind} list from the Kubernetes API: {exc}")


def decode(kind: str | None, data: bytes, counter: list[int]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A whole list response: (items, list metadata); ``kind`` None keeps whole objects."""
    start = time.perf_counter()
    if kind is None:
        decoded = msgspec.json.decode(data, type=_List)
        items = decoded.items or []
    else:
        try:
            decoded = _WHOLE[kind].decode(data)
        except msgspec.ValidationError as exc:
            raise _unexpected(kind, exc) from None
        items = decoded.items or []
    _count(counter, decode_seconds=time.perf_counter() - start)
    return items, decoded.metadata or {}


_OBJECTS = {kind: msgspec.json.Decoder(item) for kind, item in KINDS.items()}


def decode_object(kind: str, data: bytes) -> dict[str, Any]:
    """One object (a GET's answer), only the fields we read."""
    try:
        return _OBJECTS[kind].decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ValueError(f"unexpected {kind[:-1]} from the Kubernetes API: {exc}") from None


# ---------------------------------------------------------------------------- streaming
def _chunks(response: Any, prefetch: int = 0) -> Iterator[bytes]:
    """The body in chunks; ``prefetch`` > 0: read ahead by a thread, at most that many chunks waiting,
    so the socket is drained (and the server keeps writing) while the caller decodes."""
    read_already = getattr(response, "_body", None)  # urllib3 keeps a body someone read through .data
    if read_already or not hasattr(response, "read") or not hasattr(response, "release_conn"):
        yield response.data  # read already, or not a urllib3 response (a test double): all there
        return
    if prefetch <= 0:
        while chunk := response.read(CHUNK_BYTES):
            yield chunk
        return
    ahead = _ReadAhead(response, prefetch)
    try:
        yield from ahead
    finally:
        ahead.stop()


class _ReadAhead(threading.Thread):
    """Reads a response's body in chunks into a bounded queue; iterating it yields them in order and
    raises what the reading raised (a connection lost mid-body)."""

    _END = object()

    def __init__(self, response: Any, depth: int):
        super().__init__(name="cluster-doctor-list-read-ahead", daemon=True)
        self.response, self.queue = response, queue.Queue(maxsize=depth)
        self.stopped = threading.Event()
        self.start()

    def run(self) -> None:
        try:
            while not self.stopped.is_set():
                chunk = self.response.read(CHUNK_BYTES)
                self._put(chunk or self._END)
                if not chunk:
                    return
        except BaseException as exc:  # handed to the reader, who raises it
            self._put(exc)

    def _put(self, item: Any) -> None:
        while not self.stopped.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def __iter__(self) -> Iterator[bytes]:
        while True:
            item = self.queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def stop(self) -> None:
        """The reader is done (or gave up): no more reading; the caller closes the response."""
        self.stopped.set()


def _signature(first_item: bytes) -> bytes | None:
    """The bytes every item of this list starts with: its first key, and that key's value when it is a
    short string (``{"metadata":`` from a real apiserver, ``{"kind":"Pod",`` from the emulator)."""
    found = _SIGNATURE.match(first_item)
    return found.group(0) if found else None


_SIGNATURE = re.compile(rb'\{"[^"\\]{1,64}":(?:"[^"\\]{0,40}",)?')


class _ItemStream:
    """The items of one list response, decoded a batch at a time as the body arrives."""

    def __init__(self, response: Any, kind: str, counter: list[int], prefetch: int = 0, keep: bytes | None = None):
        self.response, self.kind, self.counter, self.keep = response, kind, counter, keep
        self.chunks = _chunks(response, prefetch)
        self.buf = bytearray()
        self.metadata: dict[str, Any] = {}
        self.whole: list[dict[str, Any]] | None = None  # the body had no "items" key we could find early
        self.done = False

    def _decode(self, decoder: msgspec.json.Decoder, data: bytes | bytearray) -> Any:
        start = time.perf_counter()
        try:
            return decoder.decode(data)
        finally:
            _count(self.counter, decode_seconds=time.perf_counter() - start)

    def read_head(self) -> dict[str, Any]:
        """Read up to the items array; the list's metadata (continue, resourceVersion)."""
        while True:
            at = self.buf.find(b'"items":')
            rest = self.buf[at + len(b'"items":'):].lstrip() if at >= 0 else b""
            if rest.startswith(b"["):
                try:
                    self.metadata = self._decode(_HEAD, bytes(self.buf[:at]) + b'"items":null}').metadata or {}
                except (msgspec.DecodeError, msgspec.ValidationError):
                    pass  # not the top-level key, or the metadata is not an object: decode it whole below
                else:
                    self.buf = bytearray(b"[") + rest[1:]
                    return self.metadata
            chunk = None if rest else next(self.chunks, None)
            if chunk is None:  # no items array at the top (null, or another layout): the body whole
                self._read_whole()
                return self.metadata
            self.buf += chunk

    def _read_whole(self) -> None:
        for chunk in self.chunks:
            self.buf += chunk
        try:
            decoded = self._decode(_WHOLE[self.kind], self.buf)
        except msgspec.ValidationError as exc:
            raise _unexpected(self.kind, exc) from None
        except msgspec.DecodeError as exc:
            raise _unexpected(self.kind, exc) from None
        self.whole, self.metadata, self.buf = decoded.items or [], decoded.metadata or {}, bytearray()
        self.done = True

    def batches(self) -> Iterator[list[Any]]:
        """The items a chunk completes, as one list per chunk (one generator step per chunk, not per item)."""
        if self.whole is not None:
            whole, self.whole = self.whole, None
            yield whole
            return
        signature: bytes | None = None
        for chunk in self.chunks:
            self.buf += chunk
            if signature is None:
                signature = _signature(bytes(self.buf[1:1 + 128]))
                if signature is None and len(self.buf) > 256:
                    signature = b""  # an unknown item format: decode it whole at the end
            if signature:
                batch = self._batch(b"}," + signature)
                if batch or seen(batch):  # a keep read's batch may keep none of the items it counts
                    yield batch
        yield self._last()

    def _batch(self, boundary: bytes) -> list[Any]:
        end = len(self.buf)
        for _ in range(_CANDIDATES_TRIED):
            cut = self.buf.rfind(boundary, 1, end)
            if cut < 0:
                return []
            try:
                batch = self._kept_in_place(cut) if self.keep is not None else self._items(self.buf[:cut + 1] + b"]")
            except msgspec.ValidationError as exc:
                raise _unexpected(self.kind, exc) from None
            except msgspec.DecodeError:
                end = cut  # that "}," closed something nested: try an earlier candidate
                continue
            del self.buf[1:cut + 2]  # keep "[", drop the items and the comma after them
            return batch
        return []

    def _kept_in_place(self, cut: int) -> list[Any]:
        """A keep read's batch of the items before ``cut`` (a ``},`` candidate), decoded where they lie in
        the buffer: the comma after them closes the array while they are split (no copy of the chunk;
        what is kept is copied out, so nothing refers to the buffer afterwards and it can shrink)."""
        self.buf[cut + 1] = 0x5D  # "]"
        try:
            raws = self._decode(_RAWS, memoryview(self.buf)[:cut + 2])  # the items' boundaries, checked
            return self._keep(raws, self.buf, cut + 2)
        finally:
            self.buf[cut + 1] = 0x2C  # ","

    def _keep(self, raws: list[msgspec.Raw], data: bytes | bytearray, end: int) -> Batch:
        """Of ``raws``, the items of ``data[:end]``, those the needle occurs in, decoded, as a Batch."""
        kept = _containing(raws, data, self.keep, end)
        batch = Batch(self._decode(_ITEMS[self.kind], b"[" + b",".join(kept) + b"]") if kept else ())
        batch.seen = len(raws)
        return batch

    def _last(self) -> list[Any]:
        close = self.buf.rfind(b"]")
        tail = bytes(self.buf[close + 1:].strip()) if close >= 0 else b""
        if tail.startswith(b",") and tail.endswith(b"}"):  # keys after the items (metadata last)
            try:
                self.metadata = self._decode(_HEAD, b"{" + tail[1:]).metadata or self.metadata
            except (msgspec.DecodeError, msgspec.ValidationError):
                tail = b""
            else:
                tail = b"}"
        if tail != b"}":
            raise _unexpected(self.kind, ValueError("the items array or the object around it is not closed"))
        try:
            batch = self._items(self.buf[:close + 1])
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise _unexpected(self.kind, exc) from None
        self.buf = bytearray()
        self.done = True
        return batch

    def _items(self, data: bytes | bytearray) -> list[Any]:
        """The items of a JSON array of them: all, or (``keep``) those the needle occurs in, as a Batch."""
        if self.keep is None:
            return self._decode(_ITEMS[self.kind], data)
        # the items' boundaries, checked as JSON, nothing built
        return self._keep(self._decode(_RAWS, data), data, len(data))


def stream_list(response: Any, kind: str, counter: list[int], *, batches: bool = False,
                prefetch: int = 0, refuse_pages: bool = False,
                keep: bytes | None = None) -> tuple[dict[str, Any], Iterator[Any]]:
    """The list metadata of a list response, then its items (``batches``: lists of items, one per chunk
    read) as a generator that reads the body as it goes. The connection goes back to the pool when the
    body is read to its end, and is closed when the items are abandoned half-way (a partly read body
    cannot be reused). ``prefetch``: chunks a thread may read ahead (0: none). ``refuse_pages``: raise
    ListRefused, before any item, when the answer is a page (it has a continue token). ``keep``: decode
    only the items these bytes occur in (``batches`` then are Batch: ``seen`` counts them all)."""
    stream = _ItemStream(response, kind, counter, 0 if keep is not None else prefetch, keep)
    try:
        meta = stream.read_head()
        if refuse_pages and meta.get("continue"):
            raise ListRefused("the server paged an unlimited resourceVersion=0 list")
    except BaseException:
        stream.chunks.close()
        _discard(response)
        raise

    return meta, _Items(stream, response, batches, ahead=keep is not None)


class _DecodeAhead(threading.Thread):
    """Reads and decodes a keep read's batches ahead of its caller, in order, into a queue (unbounded:
    a kept batch holds a few kept items, not its chunk); iterating it yields them and raises what the
    reading raised (a connection lost mid-body)."""

    _END = object()

    def __init__(self, stream: _ItemStream):
        super().__init__(name="cluster-doctor-list-decode-ahead", daemon=True)
        self.stream, self.queue, self.stopped = stream, queue.Queue(), threading.Event()
        self.start()

    def run(self) -> None:
        try:
            for batch in self.stream.batches():
                if self.stopped.is_set():
                    return
                self.queue.put(batch)
            self.queue.put(self._END)
        except BaseException as exc:  # handed to the reader, who raises it
            self.queue.put(exc)

    def __iter__(self) -> Iterator[list[Any]]:
        while True:
            item = self.queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item


class _Items:
    """What ``stream_list`` hands back: iterate it for the items (or batches); ``close()`` it to give up
    early, before or while iterating (the read-ahead or decode-ahead stops, the connection is closed)."""

    def __init__(self, stream: _ItemStream, response: Any, batches: bool, ahead: bool = False):
        self.stream, self.response, self.batches = stream, response, batches
        self.ahead = _DecodeAhead(stream) if ahead else None

    def __iter__(self) -> Iterator[Any]:
        try:
            for batch in self.ahead if self.ahead is not None else self.stream.batches():
                if self.batches:
                    yield batch
                else:
                    yield from batch
        finally:
            self.close()

    def close(self) -> None:
        if self.ahead is not None:
            self.ahead.stopped.set()
            if self.ahead.is_alive():  # still reading: the lost connection ends it
                _discard(self.response)
                self.ahead.join(10)
        if not self.stream.done:
            self.stream.done = True
            with contextlib.suppress(ValueError):  # a generator its thread left running: abandoned with it
                self.stream.chunks.close()  # stops a read-ahead thread before the connection goes
            _discard(self.response)


def _discard(response: Any) -> None:
    close = getattr(response, "close", None)
    if close is not None:
        close()
        response.release_conn()


# ---------------------------------------------------------------------------- the two read modes
def paginate(list_call: Callable[..., Any], counter: list[int], *, kind: str | None = None,
             **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Items of a paginated, consistent list call (``kind`` "nodes"/"pods": decode only what we read;
    None: whole objects). Each page is small (PAGE_SIZE items) and decoded whole."""
    for page in pages(list_call, counter, kind=kind, **kwargs):
        yield from page


def pages(list_call: Callable[..., Any], counter: list[int], *, kind: str | None = None,
          keep: bytes | None = None, **kwargs: Any) -> Iterator[list[Any]]:
    """``paginate``, a list of items per page (``keep`` is for streamed lists: a page is small, every
    item of it comes back)."""
    token = None
    while True:
        params = dict(kwargs, limit=PAGE_SIZE, _preload_content=False)
        if token:
            params["_continue"] = token
        response = list_call(**params)
        _count(counter, calls=1)
        items, meta = decode(kind, response.data, counter)
        yield items
        token = meta.get("continue")
        if not token:
            return


def list_cached(list_call: Callable[..., Any], counter: list[int], *, kind: str, batches: bool = False,
                prefetch: int = 0, keep: bytes | None = None, **kwargs: Any) -> Iterator[Any]:
    """Every item (``batches``: lists of items) of one list call served from the apiserver's watch cache
    (resourceVersion=0, no limit), streamed; ``keep``: only the items these bytes occur in (see
    ``stream_list``). Raises ListRefused, before any item, when the server answers with an error or
    pages the answer anyway."""
    from kubernetes.client.exceptions import ApiException

    from cluster_doctor.kube import retry

    try:
        with retry.streamed():  # a retrying client must leave the body to us
            response = list_call(**kwargs, resource_version="0", _preload_content=False)
    except ApiException as exc:
        if exc.status in (401, 403):
            raise  # a permission problem is not solved by paging
        raise ListRefused(f"HTTP {exc.status} {exc.reason}") from None
    _count(counter, calls=1)
    _, items = stream_list(response, kind, counter, batches=batches, prefetch=prefetch, refuse_pages=True,
                           keep=keep)
    return items
