"""Event recorder. The kubelet records core/v1 Events the client-go way: the same object, reason, message
and source again -> count + 1 and lastTimestamp moves. The scheduler records through events.k8s.io like
the real one; read through core/v1 such an event has eventTime, reportingComponent/Instance and action set,
and count, firstTimestamp and lastTimestamp null. Each scheduling attempt writes its own event object."""

from __future__ import annotations

import socket
import time

from .util import jcopy, new_uid, rfc3339, rfc3339_micro

HOST = socket.gethostname()
SCHEDULER = "default-scheduler"


class EventRecorder:
    def __init__(self, store):
        self.store = store
        self._dedup: dict[tuple, str] = {}  # kubelet correlation key -> event store key

    def emit(self, obj: dict, reason: str, message: str, *, type_: str = "Normal", component: str = "kubelet",
             host: str | None = None, field_path: str | None = None, action: str = "Scheduling") -> dict:
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        key = (ns, meta.get("uid"), reason, message, component, host, field_path, type_)
        now = time.time()
        with self.store.lock:
            cur = self.store.current("events", self._dedup.get(key, ""))
            if cur is not None and component != SCHEDULER:
                ev = jcopy(cur.obj())
                ev.update(count=int(ev.get("count") or 1) + 1, lastTimestamp=rfc3339(now))
                self.store.put("events", self._dedup[key], ev)
                return ev
            name = f"{meta.get('name', 'unknown')}.{time.time_ns():x}"
            io = {"kind": obj.get("kind") or "Pod", "namespace": meta.get("namespace"), "name": meta.get("name", ""),
                  "uid": meta.get("uid", ""), "apiVersion": obj.get("apiVersion") or "v1",
                  "resourceVersion": meta.get("resourceVersion", ""), "fieldPath": field_path}
            ev = {"kind": "Event", "apiVersion": "v1",
                  "metadata": {"name": name, "namespace": ns, "uid": new_uid(), "creationTimestamp": rfc3339(now)},
                  "involvedObject": {k: v for k, v in io.items() if v is not None},
                  "reason": reason, "message": message, "type": type_}
            if component == SCHEDULER:
                ev.update(source={}, firstTimestamp=None, lastTimestamp=None, count=None,
                          eventTime=rfc3339_micro(now), action=action, reportingComponent=component,
                          reportingInstance=f"{component}-{HOST}")
            else:
                ev.update(source={"component": component, **({"host": host} if host else {})},
                          firstTimestamp=rfc3339(now), lastTimestamp=rfc3339(now), count=1, eventTime=None,
                          reportingComponent=component, reportingInstance=host or "")
            skey = f"{ns}/{name}"
            self.store.put("events", skey, ev)
            self._dedup[key] = skey
            return ev

    def reset(self):
        self._dedup.clear()
