"""Reading big Kubernetes lists small: only the fields Cluster Doctor uses, decoded as the bytes arrive.

A list served from the apiserver's watch cache (``resourceVersion=0``, no limit) is one HTTP response
holding every object: at 150,000 pods, well over 100 MB of JSON. ``stream_list`` reads it in chunks
and decodes a batch of whole items at a time with msgspec, into TypedDicts of the needed fields only
(the rest of each object is skipped without being built). The caller folds each item into its own
aggregates and drops it, so at most one chunk of JSON and one batch of small dicts is alive at once,
whatever the size of the list.

How a batch is cut: every item of one list starts with the same bytes (``{"metadata":`` from a real
apiserver, whose list items carry no kind/apiVersion), so the last ``},`` followed by those bytes in
the buffer is a candidate boundary between two items. msgspec decodes ``[`` + everything before it +
``]``, which is valid JSON only when the cut really falls between items: a false candidate (the same
bytes nested inside an item) is refused by the decoder and an earlier one is tried, so no boundary is
ever trusted without the decoder's check. Whatever the server's formatting, the answer is the same;
only the batch size depends on it.

Paged consistent lists (``limit``/``continue``) are small per page and decoded whole (``paginate``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

import msgspec

PAGE_SIZE = 500
CHUNK_BYTES = 1 << 20  # read size: big enough that a decode call amortizes, small next to the list
_SIGNATURE_KEYS = (b'"metadata":', b'"apiVersion":')  # what list items start with (real, emulator)
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
    metadata: Meta
    spec: PodSpec
    status: PodStatus


KINDS: dict[str, type] = {"nodes": Node, "pods": Pod}


class _List(msgspec.Struct):
    items: Any = None
    metadata: dict[str, Any] | None = None


def _list_decoder(item: type) -> msgspec.json.Decoder:
    return msgspec.json.Decoder(msgspec.defstruct(f"{item.__name__}List", [
        ("items", list[item] | None, None), ("metadata", dict[str, Any] | None, None)]))


_WHOLE = {kind: _list_decoder(item) for kind, item in KINDS.items()}
_ITEMS = {kind: msgspec.json.Decoder(list[item]) for kind, item in KINDS.items()}
_HEAD = msgspec.json.Decoder(_List)


class ListRefused(RuntimeError):
    """The server would not serve an unpaginated list from its cache."""


class Counter(list):
    """[api_calls] plus the decode time, shared by every list of one discovery."""

    def __init__(self) -> None:
        super().__init__([0])
        self.decode_seconds = 0.0


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
    if isinstance(counter, Counter):
        counter.decode_seconds += time.perf_counter() - start
    return items, decoded.metadata or {}


_OBJECTS = {kind: msgspec.json.Decoder(item) for kind, item in KINDS.items()}


def decode_object(kind: str, data: bytes) -> dict[str, Any]:
    """One object (a GET's answer), only the fields we read."""
    try:
        return _OBJECTS[kind].decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ValueError(f"unexpected {kind[:-1]} from the Kubernetes API: {exc}") from None


# ---------------------------------------------------------------------------- streaming
def _chunks(response: Any) -> Iterator[bytes]:
    read_already = getattr(response, "_body", None)  # urllib3 keeps a body someone read through .data
    if read_already or not hasattr(response, "read") or not hasattr(response, "release_conn"):
        yield response.data  # read already, or not a urllib3 response (a test double): all there
        return
    while chunk := response.read(CHUNK_BYTES):
        yield chunk


def _signature(first_item: bytes) -> bytes | None:
    """The bytes every item of this list starts with, up to and including its first key."""
    for key in _SIGNATURE_KEYS:
        if first_item.startswith(b"{" + key):
            return b"{" + key
    return None


class _ItemStream:
    """The items of one list response, decoded a batch at a time as the body arrives."""

    def __init__(self, response: Any, kind: str, counter: list[int]):
        self.response, self.kind, self.counter = response, kind, counter
        self.chunks = _chunks(response)
        self.buf = bytearray()
        self.metadata: dict[str, Any] = {}
        self.whole: list[dict[str, Any]] | None = None  # the body had no "items" key we could find early
        self.done = False

    def _decode(self, decoder: msgspec.json.Decoder, data: bytes | bytearray) -> Any:
        start = time.perf_counter()
        try:
            return decoder.decode(data)
        finally:
            if isinstance(self.counter, Counter):
                self.counter.decode_seconds += time.perf_counter() - start

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

    def items(self) -> Iterator[dict[str, Any]]:
        if self.whole is not None:
            yield from self.whole
            self.whole = None
            return
        signature: bytes | None = None
        for chunk in self.chunks:
            self.buf += chunk
            if signature is None:
                signature = _signature(bytes(self.buf[1:1 + 32]))
                if signature is None and len(self.buf) > 64:
                    signature = b""  # an unknown item format: decode it whole at the end
            if signature:
                yield from self._batch(b"}," + signature)
        yield from self._last()

    def _batch(self, boundary: bytes) -> Iterator[dict[str, Any]]:
        end = len(self.buf)
        for _ in range(_CANDIDATES_TRIED):
            cut = self.buf.rfind(boundary, 1, end)
            if cut < 0:
                return
            try:
                batch = self._decode(_ITEMS[self.kind], self.buf[:cut + 1] + b"]")
            except msgspec.ValidationError as exc:
                raise _unexpected(self.kind, exc) from None
            except msgspec.DecodeError:
                end = cut  # that "}," closed something nested: try an earlier candidate
                continue
            del self.buf[1:cut + 2]  # keep "[", drop the items and the comma after them
            yield from batch
            return

    def _last(self) -> Iterator[dict[str, Any]]:
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
            batch = self._decode(_ITEMS[self.kind], self.buf[:close + 1])
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise _unexpected(self.kind, exc) from None
        self.buf = bytearray()
        self.done = True
        yield from batch


def stream_list(response: Any, kind: str, counter: list[int]) -> tuple[dict[str, Any], Iterator[dict[str, Any]]]:
    """The list metadata of a list response, then its items as a generator that reads the body as it
    goes. The connection goes back to the pool when the body is read to its end, and is closed when
    the items are abandoned half-way (a partly read body cannot be reused)."""
    stream = _ItemStream(response, kind, counter)
    try:
        meta = stream.read_head()
    except BaseException:
        _discard(response)
        raise

    def items() -> Iterator[dict[str, Any]]:
        try:
            yield from stream.items()
        finally:
            if not stream.done:
                _discard(response)

    return meta, items()


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
    token = None
    while True:
        params = dict(kwargs, limit=PAGE_SIZE, _preload_content=False)
        if token:
            params["_continue"] = token
        response = list_call(**params)
        counter[0] += 1
        items, meta = decode(kind, response.data, counter)
        yield from items
        token = meta.get("continue")
        if not token:
            return


def list_cached(list_call: Callable[..., Any], counter: list[int], *, kind: str,
                **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Every item of one list call served from the apiserver's watch cache (resourceVersion=0, no
    limit), streamed. Raises ListRefused, before any item, when the server answers with an error or
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
    counter[0] += 1
    meta, items = stream_list(response, kind, counter)
    if meta.get("continue"):
        _discard(response)
        raise ListRefused("the server paged an unlimited resourceVersion=0 list")
    return items
