"""Event recorder: core/v1 Events deduplicated like client-go's EventCorrelator (same object, reason, message
and source -> count++ and lastTimestamp moves). The scheduler reports through events.k8s.io like the real
one, which core/v1 readers see as eventTime/series with null first/lastTimestamp."""

from __future__ import annotations

import socket
import time

from .util import new_uid, rfc3339, rfc3339_micro

HOST = socket.gethostname()


class EventRecorder:
    def __init__(self, store):
        self.store = store
        self._dedup: dict[tuple, str] = {}  # correlation key -> event store key

    def emit(
        self,
        obj: dict,
        reason: str,
        message: str,
        *,
        type_: str = "Normal",
        component: str = "kubelet",
        host: str | None = None,
        field_path: str | None = None,
        action: str | None = None,
    ):
        meta = obj.get("metadata") or {}
        kind = obj.get("kind") or "Pod"
        ns = meta.get("namespace") or "default"
        key = (ns, meta.get("uid"), reason, message, component, host, field_path, type_)
        now = time.time()
        with self.store.lock:
            existing_key = self._dedup.get(key)
            cur = self.store.current("events", existing_key) if existing_key else None
            if cur is not None:
                ev = dict(cur.obj())
                ev["metadata"] = dict(ev["metadata"])
                if ev.get("series") is not None or ev.get("eventTime") and not ev.get("lastTimestamp"):
                    series = dict(ev.get("series") or {"count": 1})
                    series["count"] = series.get("count", 1) + 1
                    series["lastObservedTime"] = rfc3339_micro(now)
                    ev["series"] = series
                else:
                    ev["count"] = int(ev.get("count") or 1) + 1
                    ev["lastTimestamp"] = rfc3339(now)
                self.store.put("events", existing_key, ev)
                return ev
            name = f"{meta.get('name', 'unknown')}.{time.time_ns():x}"
            io = {
                "kind": kind,
                "namespace": meta.get("namespace") or "",
                "name": meta.get("name", ""),
                "uid": meta.get("uid", ""),
                "apiVersion": obj.get("apiVersion") or "v1",
                "resourceVersion": meta.get("resourceVersion", ""),
            }
            if not meta.get("namespace"):
                io.pop("namespace")
            if field_path:
                io["fieldPath"] = field_path
            ev = {
                "kind": "Event",
                "apiVersion": "v1",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "uid": new_uid(),
                    "creationTimestamp": rfc3339(now),
                },
                "involvedObject": io,
                "reason": reason,
                "message": message,
                "type": type_,
            }
            if component == "default-scheduler":
                # events.k8s.io/v1 event as seen through core/v1
                ev.update(
                    {
                        "source": {},
                        "firstTimestamp": None,
                        "lastTimestamp": None,
                        "eventTime": rfc3339_micro(now),
                        "action": action or "Scheduling",
                        "reportingComponent": component,
                        "reportingInstance": f"{component}-{HOST}",
                    }
                )
            else:
                src = {"component": component}
                if host:
                    src["host"] = host
                ev.update(
                    {
                        "source": src,
                        "firstTimestamp": rfc3339(now),
                        "lastTimestamp": rfc3339(now),
                        "count": 1,
                        "eventTime": None,
                        "reportingComponent": component,
                        "reportingInstance": host or "",
                    }
                )
            skey = f"{ns}/{name}"
            self.store.put("events", skey, ev)
            self._dedup[key] = skey
            return ev

    def reset(self):
        self._dedup.clear()
