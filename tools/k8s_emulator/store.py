"""Thread-safe object store: a global resourceVersion counter, keys kept sorted ("ns/name") and paginated
lists that are consistent snapshots.

Consistency model (what the real apiserver gives): every page of a paginated list shows the objects as
they were when the first page was served. The first page of a list that does not fit records the matching
objects' serialized bytes (shared with the store, not copied); the continue token points into that record.
A record lives snapshot_ttl seconds, like etcd's compaction window; a token past it gets 410 Expired.
"""

from __future__ import annotations

import bisect
import json
import threading
import time

from .errors import ApiError, bad_request
from .util import b64url, b64url_decode, dumps

EXPIRED_MSG = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
    "that were created, modified, or deleted between the time the first chunk was returned and now may show "
    "up in the list.")
BAD_TOKEN = "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"


class Version:
    __slots__ = ("_obj", "_raw", "fields", "info", "labels", "rv")

    def __init__(self, rv, obj=None, raw=None, labels=None, fields=None, info=None):
        self.rv, self._obj, self._raw, self.labels, self.fields, self.info = rv, obj, raw, labels, fields, info

    def obj(self) -> dict:
        """The stored dict: shared, never mutate it (copy first)."""
        if self._obj is None:
            self._obj = json.loads(self._raw)
        return self._obj

    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = dumps(self._obj)
        return self._raw


class ListResult:
    def __init__(self, items, rv: int, cont: str | None, remaining: int | None, examined: int = 0,
                 streamed: bool = False):
        self.items, self.rv, self.cont, self.remaining = items, rv, cont, remaining
        self.examined = examined  # objects the read looked at to find the matching ones
        self.streamed = streamed  # items is a generator, filtered as the response is written


class Table:
    def __init__(self, rtype):
        self.rtype, self.keys, self.current = rtype, [], {}
        self.by_node: dict[str, set] = {}  # pods only: spec.nodeName -> keys

    def index(self, key: str, v: Version | None, add: bool):
        if v is not None and self.rtype.plural == "pods":
            bucket = self.by_node.setdefault(v.info.node, set())
            bucket.add(key) if add else bucket.discard(key)


class Store:
    def __init__(self, types: dict, snapshot_ttl: float = 300.0):
        self.lock = threading.RLock()
        self.rv = 1
        self.tables = {p: Table(t) for p, t in types.items()}
        self.snapshot_ttl = snapshot_ttl
        self.snapshots: dict[tuple, tuple[float, list]] = {}  # (list identity, rv) -> (expiry, [(key, raw)])
        self.hooks = []  # fn(plural, key, old: Version|None, new: Version|None), called under the lock

    def current(self, plural: str, key: str) -> Version | None:
        return self.tables[plural].current.get(key)

    def keys_on_node(self, node: str) -> list[str]:
        with self.lock:
            return sorted(self.tables["pods"].by_node.get(node, ()))

    def all_current(self, plural: str) -> list[tuple[str, Version]]:
        with self.lock:
            t = self.tables[plural]
            return [(k, t.current[k]) for k in t.keys]

    def count(self, plural: str) -> int:
        return len(self.tables[plural].keys)

    def put(self, plural: str, key: str, obj: dict) -> Version:
        """Store obj (the store takes ownership) as the new current version; stamps resourceVersion."""
        with self.lock:
            t = self.tables[plural]
            self.rv += 1
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
            v = Version(self.rv, obj=obj, labels=obj["metadata"].get("labels") or {}, fields=t.rtype.fields(obj),
                        info=t.rtype.info(obj))
            old = t.current.get(key)
            if old is None:
                bisect.insort(t.keys, key)
            t.index(key, old, False)
            t.index(key, v, True)
            t.current[key] = v
            for hook in self.hooks:
                hook(plural, key, old, v)
            return v

    def remove(self, plural: str, key: str) -> Version | None:
        with self.lock:
            t = self.tables[plural]
            old = t.current.pop(key, None)
            if old is None:
                return None
            self.rv += 1
            del t.keys[bisect.bisect_left(t.keys, key)]
            t.index(key, old, False)
            for hook in self.hooks:
                hook(plural, key, old, None)
            return old

    def reserve(self, n: int) -> int:
        """Reserve n resourceVersions for a bulk load; returns the first."""
        with self.lock:
            self.rv += n
            return self.rv - n + 1

    def bulk_load(self, plural: str, rows):
        """rows: (key, rv, raw_json_bytes, labels, fields, info). No hooks: seeds big clusters."""
        with self.lock:
            t = self.tables[plural]
            for key, rv, raw, labels, fields, info in rows:
                v = Version(rv, raw=raw, labels=labels, fields=fields, info=info)
                t.index(key, t.current.get(key), False)
                t.index(key, v, True)
                t.current[key] = v
            t.keys = sorted(t.current)

    def compact(self):
        """Forget every list snapshot (like an etcd compaction): open continue tokens become 410 Expired."""
        with self.lock:
            self.snapshots.clear()

    def list(self, plural: str, namespace: str | None, lsel, fsel, limit: int, cont: str | None,
             selectors: tuple = (), *, indexed: bool = True) -> ListResult:
        """``indexed`` False reads the way etcd does: every object of the kind (under the namespace
        prefix), each checked against the selectors; True uses the watch cache's spec.nodeName index."""
        with self.lock:
            now = time.monotonic()
            for k in [k for k, (exp, _) in self.snapshots.items() if exp < now]:
                del self.snapshots[k]
            ident = (plural, namespace, *selectors)
            if cont:
                rv, start = self._decode(cont)
                snap = self.snapshots.get((*ident, rv))
                if snap is None:
                    raise ApiError(410, "Expired", EXPIRED_MSG, metadata={"continue": self._encode(self.rv, start)})
                items, examined = snap[1], 0
            else:
                rv, start = self.rv, ""
                items, examined = self._matching(plural, namespace, lsel, fsel, indexed)
            i = bisect.bisect_left(items, (start,)) if start else 0
            page = items[i:i + limit] if limit else items[i:]
            more = bool(limit) and i + limit < len(items)
            token = None
            if more:
                token = self._encode(rv, page[-1][0] + "\x00")
                self.snapshots.setdefault((*ident, rv), (now + self.snapshot_ttl, items))
            remaining = len(items) - i - limit if more and lsel.empty and fsel.empty else None
            return ListResult([raw for _, raw in page], rv, token, remaining, examined)

    def stream(self, plural: str, namespace: str | None, lsel, fsel, *, indexed: bool = True) -> ListResult:
        """An unpaginated list whose items are filtered and yielded while the response is written: the
        objects are taken under the lock (a snapshot, as the watch cache's), matched outside it."""
        with self.lock:
            t = self.tables[plural]
            rv, keys = self.rv, self._keys(t, plural, namespace, fsel, indexed)
            versions = [t.current[k] for k in keys]
        fmatch = fsel.matcher(t.rtype.field_index)

        def items():
            for v in versions:
                if (lsel.empty or lsel.matches(v.labels)) and (fsel.empty or fmatch(v.fields)):
                    yield v.raw()

        return ListResult(items(), rv, None, None, len(versions), streamed=True)

    @staticmethod
    def _keys(t: Table, plural: str, namespace: str | None, fsel, indexed: bool) -> list[str]:
        prefix = f"{namespace}/" if namespace else ""
        node = fsel.equality("spec.nodeName") if plural == "pods" and indexed else None
        if node is not None:  # indexed: one node's pods without scanning every pod
            return sorted(k for k in t.by_node.get(node, ()) if k.startswith(prefix))
        lo = bisect.bisect_left(t.keys, prefix)
        return t.keys[lo:bisect.bisect_left(t.keys, namespace + "0")] if namespace else list(t.keys)

    def _matching(self, plural, namespace, lsel, fsel, indexed: bool = True) -> tuple[list[tuple[str, bytes]], int]:
        t = self.tables[plural]
        keys = self._keys(t, plural, namespace, fsel, indexed)
        fmatch, out = fsel.matcher(t.rtype.field_index), []
        for k in keys:
            v = t.current[k]
            if (lsel.empty or lsel.matches(v.labels)) and (fsel.empty or fmatch(v.fields)):
                out.append((k, v.raw()))
        return out, len(keys)

    @staticmethod
    def _encode(rv: int, start: str) -> str:
        return b64url(dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}))

    @staticmethod
    def _decode(token: str) -> tuple[int, str]:
        try:
            data = json.loads(b64url_decode(token))
        except Exception as exc:  # noqa: BLE001 - any garbage in the token is the client's error
            raise bad_request(f"continue key is not valid: {exc}") from None
        if not isinstance(data, dict) or data.get("v") != "meta.k8s.io/v1" or not isinstance(data.get("rv"), int) \
                or data["rv"] <= 0:
            raise bad_request(BAD_TOKEN)
        return data["rv"], str(data.get("start", ""))
