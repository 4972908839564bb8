"""Thread-safe object store with etcd-like semantics: a global resourceVersion counter, keys kept sorted
("ns/name") so paginated lists are O(page), and snapshot-consistent continue tokens.

Consistency model (what the real apiserver gives): every page of a paginated list shows the objects as they
were at the resourceVersion of the first page. We keep old versions of objects written while a continue
token is outstanding ("dirty" keys) and of deleted ones ("ghost" keys); once no snapshot is active they are
collapsed. A token whose snapshot expired (snapshot_ttl, like etcd compaction) gets 410 Expired.
"""

from __future__ import annotations

import bisect
import json
import threading
import time
from collections import defaultdict

from .errors import bad_request, expired
from .resources import ResourceType
from .util import b64url, b64url_decode, dumps

EXPIRED_MSG = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
    "that were created, modified, or deleted between the time the first chunk was returned and now may show "
    "up in the list."
)


class Version:
    __slots__ = ("_obj", "_raw", "deleted", "fields", "info", "labels", "rv")

    def __init__(self, rv, obj=None, raw=None, labels=None, fields=None, info=None, deleted=False):
        self.rv, self._obj, self._raw = rv, obj, raw
        self.labels, self.fields, self.info, self.deleted = labels, fields, info, deleted

    def obj(self) -> dict:
        """The stored dict: shared, never mutate it (copy first)."""
        if self._obj is None:
            self._obj = json.loads(self._raw)
        return self._obj

    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = dumps(self._obj)
        return self._raw


class Table:
    def __init__(self, rtype: ResourceType):
        self.rtype = rtype
        self.keys: list[str] = []  # sorted; live keys plus ghosts
        self.entries: dict[str, list[Version]] = {}  # key -> versions, newest last
        self.dirty: set[str] = set()
        self.ghosts: set[str] = set()
        self.indexes = {name: defaultdict(set) for name in rtype.index_fns}
        self.field_index = rtype.field_index
        self.live = 0

    def current(self, key: str) -> Version | None:
        vs = self.entries.get(key)
        if not vs or vs[-1].deleted:
            return None
        return vs[-1]

    def _index(self, key: str, v: Version | None, add: bool):
        if v is None or v.deleted:
            return
        for name, fn in self.rtype.index_fns.items():
            val = fn(v.info, v.fields)
            if val is None:
                continue
            bucket = self.indexes[name][val]
            if add:
                bucket.add(key)
            else:
                bucket.discard(key)
                if not bucket:
                    del self.indexes[name][val]


def _visible(vs: list[Version], snap: int) -> Version | None:
    v = vs[-1]
    if v.rv <= snap:
        return None if v.deleted else v
    for v in reversed(vs[:-1]):
        if v.rv <= snap:
            return None if v.deleted else v
    return None


class ListResult:
    __slots__ = ("cont", "items", "remaining", "rv")

    def __init__(self, items, rv, cont, remaining):
        self.items, self.rv, self.cont, self.remaining = items, rv, cont, remaining


class Store:
    def __init__(self, types: dict[str, ResourceType], snapshot_ttl: float = 300.0):
        self.lock = threading.RLock()
        self.rv = 1
        self.tables = {p: Table(t) for p, t in types.items()}
        self.snapshot_ttl = snapshot_ttl
        self.snapshots: dict[int, float] = {}  # rv -> monotonic expiry
        self.hooks = []  # fn(plural, key, old: Version|None, new: Version|None), called under the lock

    # ------------------------------------------------------------ snapshots
    def _active_snapshots(self) -> bool:
        if self.snapshots:
            now = time.monotonic()
            for rv in [rv for rv, exp in self.snapshots.items() if exp < now]:
                del self.snapshots[rv]
        return bool(self.snapshots)

    def compact(self):
        """Forget every snapshot (like an etcd compaction): outstanding continue tokens become 410 Expired."""
        with self.lock:
            self.snapshots.clear()
            self.maintain()

    def maintain(self):
        """Collapse history kept for snapshots once none is active. Cheap when there is nothing to do."""
        with self.lock:
            if self._active_snapshots():
                return
            for t in self.tables.values():
                if not t.dirty and not t.ghosts:
                    continue
                for key in t.dirty:
                    vs = t.entries.get(key)
                    if vs and len(vs) > 1:
                        del vs[:-1]
                for key in t.ghosts:
                    vs = t.entries.get(key)
                    if vs and vs[-1].deleted:
                        del t.entries[key]
                        i = bisect.bisect_left(t.keys, key)
                        if i < len(t.keys) and t.keys[i] == key:
                            del t.keys[i]
                t.dirty.clear()
                t.ghosts.clear()

    # ------------------------------------------------------------ reads
    def current(self, plural: str, key: str) -> Version | None:
        with self.lock:
            return self.tables[plural].current(key)

    def keys_by_index(self, plural: str, index: str, value) -> list[str]:
        with self.lock:
            return sorted(self.tables[plural].indexes[index].get(value, ()))

    def all_current(self, plural: str) -> list[tuple[str, Version]]:
        with self.lock:
            t = self.tables[plural]
            out = []
            for k in t.keys:
                v = t.current(k)
                if v is not None:
                    out.append((k, v))
            return out

    def count(self, plural: str) -> int:
        with self.lock:
            return self.tables[plural].live

    # ------------------------------------------------------------ writes
    def put(self, plural: str, key: str, obj: dict) -> Version:
        """Store obj (the store takes ownership) as the new current version; stamps resourceVersion."""
        with self.lock:
            t = self.tables[plural]
            self.rv += 1
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
            rt = t.rtype
            v = Version(
                self.rv,
                obj=obj,
                labels=(obj["metadata"].get("labels") or {}),
                fields=rt.fields(obj),
                info=rt.info(obj),
            )
            self._install(t, plural, key, v)
            return v

    def _install(self, t: Table, plural: str, key: str, v: Version):
        vs = t.entries.get(key)
        old = vs[-1] if vs and not vs[-1].deleted else None
        keep_history = self._active_snapshots()
        if vs is None:
            t.entries[key] = [v]
            bisect.insort(t.keys, key)
        elif keep_history:
            vs.append(v)
        else:
            vs[:] = [v]
        if keep_history:
            t.dirty.add(key)
            if v.deleted:
                t.ghosts.add(key)
        if v.deleted and not keep_history:
            del t.entries[key]
            i = bisect.bisect_left(t.keys, key)
            if i < len(t.keys) and t.keys[i] == key:
                del t.keys[i]
        t._index(key, old, False)
        t._index(key, v, True)
        t.live += (0 if v.deleted else 1) - (1 if old is not None else 0)
        for hook in self.hooks:
            hook(plural, key, old, None if v.deleted else v)

    def remove(self, plural: str, key: str) -> Version | None:
        with self.lock:
            t = self.tables[plural]
            old = t.current(key)
            if old is None:
                return None
            self.rv += 1
            self._install(t, plural, key, Version(self.rv, deleted=True))
            return old

    def reserve(self, n: int) -> int:
        """Reserve n resourceVersions for a bulk load; returns the first."""
        with self.lock:
            first = self.rv + 1
            self.rv += n
            return first

    def bulk_load(self, plural: str, rows):
        """rows: (key, rv, raw_json_bytes, labels, fields, info). No hooks, no history: seeds big clusters."""
        with self.lock:
            t = self.tables[plural]
            new_keys = []
            entries, indexes = t.entries, t.indexes
            fns = list(t.rtype.index_fns.items())
            for key, rv, raw, labels, fields, info in rows:
                v = Version(rv, raw=raw, labels=labels, fields=fields, info=info)
                vs = entries.get(key)
                if vs is None:
                    new_keys.append(key)
                    t.live += 1
                    for name, fn in fns:
                        val = fn(info, fields)
                        if val is not None:
                            indexes[name][val].add(key)
                else:  # replacing an existing object (rare): keep indexes exact
                    old = vs[-1] if not vs[-1].deleted else None
                    t._index(key, old, False)
                    t._index(key, v, True)
                    t.live += 0 if old is not None else 1
                entries[key] = [v]
            if new_keys:
                t.keys.extend(new_keys)
                t.keys.sort()

    # ------------------------------------------------------------ list
    def list(
        self, plural: str, namespace: str | None, lsel, fsel, limit: int | None, cont: str | None
    ) -> ListResult:
        with self.lock:
            t = self.tables[plural]
            prefix = f"{namespace}/" if namespace else ""
            if cont:
                snap, start = self._decode_continue(cont)
                self._active_snapshots()  # drops expired snapshots
                if snap != self.rv and snap not in self.snapshots:
                    raise expired(
                        EXPIRED_MSG,
                        self._encode_continue(self.rv, start),
                    )
                start = max(start, prefix)
            else:
                snap, start = self.rv, prefix
            keys = t.keys
            hi = (
                bisect.bisect_left(keys, namespace + "0") if namespace else len(keys)
            )  # '0' sorts right after '/'
            filtered = not lsel.empty or not fsel.empty
            fidx = t.field_index

            # Fast path: equality on an indexed field (pods by spec.nodeName), valid at the current version.
            candidates = None
            if snap == self.rv and not fsel.empty:
                for name, fn_field in (("node", "spec.nodeName"),):
                    if name in t.indexes:
                        val = fsel.equality(fn_field)
                        if val is not None:
                            candidates = sorted(
                                k
                                for k in t.indexes[name].get(val, ())
                                if start <= k and (not namespace or k.startswith(prefix))
                            )
                            break

            items, last_key, more = [], None, False
            seq = candidates if candidates is not None else keys
            i = bisect.bisect_left(seq, start)
            end = len(seq) if candidates is not None else hi
            entries = t.entries
            while i < end:
                key = seq[i]
                i += 1
                v = _visible(entries[key], snap)
                if v is None:
                    continue
                if filtered and not (lsel.matches(v.labels) and fsel.matches(v.fields, fidx)):
                    continue
                items.append(v.raw())
                if limit and len(items) >= limit:
                    last_key = key
                    break
            remaining = None
            if last_key is not None and i < end:
                if filtered:
                    more = True  # like etcd paging with selectors: more keys to scan, maybe no more matches
                else:
                    remaining = (end - i) - self._invisible_in_range(t, seq[i], seq[end - 1], snap)
                    more = remaining > 0
                    if not more:
                        remaining = None
            token = None
            if more:
                token = self._encode_continue(snap, last_key + "\x00")
                self.snapshots.setdefault(snap, time.monotonic() + self.snapshot_ttl)
            return ListResult(items, snap, token, remaining)

    @staticmethod
    def _invisible_in_range(t: Table, lo: str, hi: str, snap: int) -> int:
        n = 0
        for key in t.dirty:
            if lo <= key <= hi and _visible(t.entries[key], snap) is None:
                n += 1
        return n

    @staticmethod
    def _encode_continue(rv: int, start: str) -> str:
        return b64url(dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}))

    @staticmethod
    def _decode_continue(token: str) -> tuple[int, str]:
        try:
            data = json.loads(b64url_decode(token))
            if data.get("v") != "meta.k8s.io/v1":
                raise ValueError(
                    "continue key is not valid: incorrect encoded start resourceVersion (version "
                    "meta.k8s.io/v1)"
                )
            rv, start = int(data["rv"]), str(data["start"])
            if rv <= 0:
                raise ValueError(
                    "continue key is not valid: incorrect encoded start resourceVersion (version "
                    "meta.k8s.io/v1)"
                )
            return rv, start
        except ValueError as exc:
            raise bad_request(
                str(exc) if str(exc).startswith("continue key") else f"continue key is not valid: {exc}"
            ) from None
        except Exception as exc:  # noqa: BLE001 - any garbage in the token is the client's error
            raise bad_request(f"continue key is not valid: {exc}") from None
