"""Wires the pieces into one emulated cluster: settings, store, API semantics, events, scripts, scheduler,
kubelet, the pod history (tombstones) and the API call counters."""

from __future__ import annotations

import copy
import os
import threading
from collections import Counter
from dataclasses import asdict, dataclass, field, fields

from .admission import SYSTEM_PRIORITY_CLASSES
from .api import Api
from .events import EventRecorder
from .kubelet import Kubelet
from .resources import TYPES
from .scheduler import Scheduler
from .scripts import ScriptBook
from .store import Store
from .util import rfc3339

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass
class Settings:
    scheduler_interval: float = 0.1  # seconds between scheduler passes (it also wakes on changes)
    startup_delay: float = 0.2  # simulated image pull per (node, image) the first time
    served_schedulers: list = field(default_factory=lambda: ["default-scheduler", "volcano"])
    executables: dict = field(default_factory=dict)  # first word of a command -> host executable
    pvc_dirs: dict = field(default_factory=dict)  # claimName -> host dir (default <state>/pvc/<claim>)
    exec_env: dict = field(default_factory=dict)  # extra env for exec-mode processes (e.g. PYTHONPATH)
    snapshot_ttl: float = 300.0  # continue tokens expire after this (etcd compaction)
    static_termination_seconds: float = 0.2  # how long a simulated pod takes to terminate
    unschedulable_retry_seconds: float = 30.0  # re-try unschedulable pods even without cluster changes
    node_lifecycle_taints: bool = (
        True  # write not-ready/unreachable/unschedulable taints like the controllers
    )
    auto_create_namespaces: bool = False  # real apiservers answer 404 for a missing namespace
    restart_backoff_seconds: float = 1.0  # CrashLoopBackOff base (real: 10 s)
    namespaces: list = field(default_factory=lambda: list(DEFAULT_NAMESPACES))

    def update(self, values: dict):
        names = {f.name for f in fields(self)}
        unknown = set(values) - names
        if unknown:
            raise ValueError(f"unknown settings: {sorted(unknown)}; known: {sorted(names)}")
        for k, v in values.items():
            setattr(self, k, v)

    def as_dict(self) -> dict:
        return asdict(self)


class Cluster:
    def __init__(self, settings: Settings, state_dir: str):
        self.settings = settings
        self.state_dir = os.path.abspath(state_dir)
        os.makedirs(self.state_dir, exist_ok=True)
        self.url = ""
        self.store = Store(TYPES, snapshot_ttl=settings.snapshot_ttl)
        self.events = EventRecorder(self.store)
        self.scripts = ScriptBook()
        self.api = Api(self)
        self.kubelet = Kubelet(self)
        self.scheduler = Scheduler(self)
        self.history: dict[str, dict] = {}
        self.counters: Counter = Counter()
        self._counter_lock = threading.Lock()
        self.store.hooks.append(self._history_hook)
        self._create_namespaces()

    def _create_namespaces(self):
        """What every apiserver has from the start: the default namespaces and the system priority classes."""
        for ns in self.settings.namespaces:
            if self.store.current("namespaces", ns) is None:
                self.api.create(TYPES["namespaces"], None, {"metadata": {"name": ns}}, {})
        for name, value in SYSTEM_PRIORITY_CLASSES.items():
            if self.store.current("priorityclasses", name) is None:
                self.api.create(
                    TYPES["priorityclasses"],
                    None,
                    {
                        "metadata": {"name": name},
                        "value": value,
                        "description": "Used for system critical pods that must not be moved from their "
                        "current node."
                        if name == "system-node-critical"
                        else "Used for system critical pods that must run in the "
                        "cluster, but can be moved to another node if necessary.",
                    },
                    {},
                )

    def start(self):
        self._initial_settings = copy.deepcopy(self.settings.as_dict())
        self.scheduler.start()

    def shutdown(self):
        self.scheduler.stop()
        self.kubelet.shutdown()
        self.kubelet.timers.stop()

    def reset(self):
        """Back to an empty cluster (default namespaces only); kills every pod process."""
        self.kubelet.shutdown()
        with self.store.lock:
            for plural in self.store.tables:
                for key, _ in self.store.all_current(plural):
                    self.store.remove(plural, key)
            self.store.compact()
            self.events.reset()
            self.history.clear()
            self.scheduler.attempts.clear()
        self.scripts.clear()
        self.kubelet.simulated.clear()
        self.kubelet.pulled.clear()
        if getattr(self, "_initial_settings", None):
            self.settings.update(copy.deepcopy(self._initial_settings))
            self.store.snapshot_ttl = self.settings.snapshot_ttl
        with self._counter_lock:
            self.counters.clear()
        self._create_namespaces()

    # ------------------------------------------------------------ counters
    def count(self, verb: str, resource: str):
        with self._counter_lock:
            self.counters[f"{verb} {resource}"] += 1

    def counter_snapshot(self) -> dict:
        with self._counter_lock:
            by = dict(sorted(self.counters.items()))
        return {"total": sum(by.values()), "by_verb_resource": by}

    # ------------------------------------------------------------ history
    def _history_hook(self, plural, key, old, new):
        if plural != "pods":
            return
        v = new or old
        uid = v.info.uid
        rec = self.history.get(uid)
        if rec is None:
            if new is None:
                return
            meta = new.obj()["metadata"]
            rec = {
                "namespace": meta.get("namespace"),
                "name": meta.get("name"),
                "uid": uid,
                "created": meta.get("creationTimestamp"),
                "node": "",
                "phase": "Pending",
                "reason": "",
                "labels": {},
                "deletion_requested": False,
                "deleted": False,
                "deleted_at": None,
            }
            self.history[uid] = rec
        if new is not None:
            status = new.obj().get("status") or {}
            rec.update(
                node=new.info.node,
                phase=new.info.phase,
                labels=dict(new.labels),
                reason=status.get("reason") or rec["reason"],
            )
            if new.info.deleting:
                rec["deletion_requested"] = True
        else:
            rec.update(deleted=True, deleted_at=rfc3339())

    def history_list(self, lsel=None, namespace: str | None = None) -> list[dict]:
        with self.store.lock:
            out = [dict(r) for r in self.history.values()]
        if namespace:
            out = [r for r in out if r["namespace"] == namespace]
        if lsel is not None:
            out = [r for r in out if lsel.matches(r["labels"])]
        return sorted(out, key=lambda r: (r["created"] or "", r["namespace"], r["name"]))
