"""Wires the pieces into one emulated cluster: settings, store, API semantics, events, scripts, scheduler,
kubelet, the pod history (tombstones) and the API call counters."""

from __future__ import annotations

import copy
import os
import threading
from collections import Counter
from dataclasses import asdict, dataclass, field, fields

from . import fixtures
from .admission import SYSTEM_PRIORITY_CLASSES
from .api import Api
from .events import EventRecorder
from .faults import FaultBook
from .kubelet import Kubelet
from .resources import TYPES
from .scheduler import Scheduler
from .scripts import ScriptBook
from .store import Store
from .util import rfc3339


@dataclass
class Settings:
    kubernetes_version: str = "1.31"  # what /version reports; before 1.26 no DisruptionTarget conditions
    scheduler_interval: float = 0.1  # seconds between scheduler passes (it also wakes on changes)
    startup_delay: float = 0.2  # simulated image pull per (node, image) the first time
    served_schedulers: list = field(default_factory=lambda: ["default-scheduler", "volcano"])
    executables: dict = field(default_factory=dict)  # first word of a command -> host executable
    # claimName -> host dir: such a claim exists, Bound, in every namespace (other claims: <state>/pvc/<claim>)
    pvc_dirs: dict = field(default_factory=dict)
    exec_env: dict = field(default_factory=dict)  # extra env for exec-mode processes (e.g. PYTHONPATH)
    snapshot_ttl: float = 300.0  # continue tokens expire after this (etcd compaction)
    static_termination_seconds: float = 0.2  # how long a simulated pod takes to terminate
    unschedulable_retry_seconds: float = 30.0  # retry unschedulable pods even without cluster changes
    node_lifecycle_taints: bool = True  # not-ready/unreachable/unschedulable taints, as the controllers write
    restart_backoff_seconds: float = 1.0  # CrashLoopBackOff base (real: 10 s)
    unreachable_kubelets: list = field(default_factory=list)  # nodes ("*": all) whose pods/log answers 500
    forbidden: list = field(default_factory=list)  # "[verb ]<resource>[.<group>]" the RBAC authorizer refuses (403)
    rbac_rules: list | None = None  # PolicyRules of the client's roles: when set, nothing else is allowed (rbac.py)

    def update(self, values: dict):
        unknown = set(values) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown settings: {sorted(unknown)}; known: {sorted(f.name for f in fields(self))}")
        for k, v in values.items():
            setattr(self, k, v)


class Cluster:
    def __init__(self, settings: Settings, state_dir: str):
        self.settings, self.state_dir, self.url = settings, os.path.abspath(state_dir), ""
        os.makedirs(self.state_dir, exist_ok=True)
        self.store = Store(TYPES, snapshot_ttl=settings.snapshot_ttl)
        self.events = EventRecorder(self.store)
        self.scripts = ScriptBook()
        self.faults = FaultBook()
        self.api = Api(self)
        self.scheduler = Scheduler(self)
        self.kubelet = Kubelet(self)
        self.history: dict[str, dict] = {}
        self.counters: Counter = Counter()
        self.reads: Counter = Counter()  # "<plural> <source>" -> lists, "<plural> <source> objects" -> examined
        self._counter_lock = threading.Lock()
        self._initial = copy.deepcopy(asdict(settings))
        self.store.hooks.append(self._history_hook)
        self._create_defaults()

    def version(self) -> dict:
        major, minor = self.settings.kubernetes_version.split(".")[:2]
        return {"major": major, "minor": minor, "gitVersion": f"v{major}.{minor}.0+k8s-emulator",
                "gitCommit": "0" * 40, "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z",
                "goVersion": "go1.22.10", "compiler": "gc", "platform": "linux/amd64"}

    def version_at_least(self, major: int, minor: int) -> bool:
        return tuple(int(x) for x in self.settings.kubernetes_version.split(".")[:2]) >= (major, minor)

    def disruption_conditions(self) -> bool:
        """PodDisruptionConditions (DisruptionTarget) is on by default from Kubernetes 1.26."""
        return self.version_at_least(1, 26)

    def _create_defaults(self):
        """What every apiserver has from the start: the default namespaces and the system priority classes."""
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.api.create(TYPES["namespaces"], None, {"metadata": {"name": ns}})
        for name, value in SYSTEM_PRIORITY_CLASSES.items():
            self.api.create(TYPES["priorityclasses"], None, {"metadata": {"name": name}, "value": value})

    def provision_claims(self, namespaces: list[str] | None = None):
        """Every claim named in pvc_dirs exists Bound in each namespace (all when None), as if an admin had
        created it and a provisioner had bound it; one already there (a test's own) is left alone."""
        with self.store.lock:
            for ns in namespaces if namespaces is not None else [k for k, _ in self.store.all_current("namespaces")]:
                for claim in self.settings.pvc_dirs:
                    if self.store.current("persistentvolumeclaims", f"{ns}/{claim}") is None:
                        self.api.create(TYPES["persistentvolumeclaims"], ns,
                                        fixtures.bound_claim(claim, f"pvc-dir-{claim}"))

    def start(self):
        self.scheduler.start()

    def shutdown(self):
        self.scheduler.stop()
        self.kubelet.shutdown()
        self.kubelet.timers.clear(stop=True)

    def reset(self):
        """Back to an empty cluster and the start settings; kills every pod process."""
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
        self.faults.clear()
        self.kubelet.simulated.clear()
        self.kubelet.pulled.clear()
        self.settings.update(copy.deepcopy(self._initial))
        self.store.snapshot_ttl = self.settings.snapshot_ttl
        with self._counter_lock:
            self.counters.clear()
            self.reads.clear()
        self._create_defaults()

    def count(self, verb: str, resource: str):
        with self._counter_lock:
            self.counters[f"{verb} {resource}"] += 1

    def count_read(self, plural: str, source: str, examined: int):
        """Which store served a list (watch-cache or etcd) and how many objects it looked at."""
        with self._counter_lock:
            self.reads[f"{plural} {source}"] += 1
            self.reads[f"{plural} {source} objects"] += examined

    def counter_snapshot(self, reset: bool = False) -> dict:
        with self._counter_lock:
            by = dict(sorted(self.counters.items()))
            reads = dict(sorted(self.reads.items()))
            if reset:
                self.counters.clear()
                self.reads.clear()
        return {"total": sum(by.values()), "by_verb_resource": by, "list_reads": reads}

    def _history_hook(self, plural, key, old, new):
        if plural != "pods":
            return
        uid = (new or old).info.uid
        rec = self.history.get(uid)
        if rec is None and new is not None:
            meta = new.obj()["metadata"]
            rec = self.history[uid] = {"namespace": meta.get("namespace"), "name": meta.get("name"), "uid": uid,
                                       "created": meta.get("creationTimestamp"), "reason": "", "deleted": False,
                                       "deleted_at": None}
        if rec is None:
            return
        if new is not None:
            rec.update(node=new.info.node, phase=new.info.phase, labels=dict(new.labels),
                       reason=(new.obj().get("status") or {}).get("reason") or rec["reason"],
                       deletion_requested=rec.get("deletion_requested") or new.info.deleting)
        else:
            rec.update(deleted=True, deleted_at=rfc3339())

    def history_list(self, lsel=None, namespace: str | None = None) -> list[dict]:
        with self.store.lock:
            out = [dict(r) for r in self.history.values()]
        out = [r for r in out if (not namespace or r["namespace"] == namespace)
               and (lsel is None or lsel.matches(r["labels"]))]
        # in creation order: a creationTimestamp has whole seconds, and pods created in the same second (a
        # node's suites, one after another) must not come back in the order of their names
        return out
