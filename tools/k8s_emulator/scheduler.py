"""Simulated kube-scheduler: the VolumeBinding pre-filter (missing or unbound PersistentVolumeClaims), the
filters (unschedulable, taints, node affinity/selector, resources incl. extended ones), binding,
FailedScheduling with the real message format, and priority preemption.

Unschedulable pods are retried only when the cluster changed (a node was written, a bound pod ended or went
away, a claim was bound) or after unschedulable_retry_seconds, like the real scheduler's unschedulable
queue; that keeps big clusters cheap.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

from .events import SCHEDULER
from .selectors import node_selector_term_matches
from .util import jcopy, new_uid, rfc3339

log = logging.getLogger("k8s_emulator.scheduler")

AFFINITY_MSG = "node(s) didn't match Pod's node affinity/selector"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def tolerates(tol: dict, taint: dict) -> bool:
    if tol.get("effect") and tol["effect"] != taint.get("effect"):
        return False
    op = tol.get("operator") or "Equal"
    if not tol.get("key"):
        return op == "Exists"
    return tol["key"] == taint.get("key") and (op == "Exists" or (tol.get("value") or "") == (taint.get("value") or ""))


def node_matches_affinity(spec: dict, node_name: str, labels: dict) -> bool:
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms"))
    return not terms or any(node_selector_term_matches(t, labels, node_name) for t in terms)


def pinned_nodes(spec: dict) -> set[str] | None:
    """Node names a pod is pinned to by kubernetes.io/hostname or metadata.name In [...] (a fast path)."""
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")) or []
    names: set[str] = set()
    for t in terms:
        found = [set(e.get("values") or []) for e in (t.get("matchExpressions") or []) + (t.get("matchFields") or [])
                 if e.get("key") in ("kubernetes.io/hostname", "metadata.name") and e.get("operator") == "In"]
        if not found:
            return None
        names |= found[-1]
    return names if terms else None


def fit_error(all_nodes: int, reasons: str) -> str:
    return f"0/{all_nodes} nodes are available: {reasons}."


def counted(reasons: Counter) -> str:
    return ", ".join(sorted(f"{n} {r}" for r, n in reasons.items() if n))


class Scheduler:
    def __init__(self, cluster):
        self.c, self.store, self.settings = cluster, cluster.store, cluster.settings
        self.wake, self._stop = threading.Event(), threading.Event()
        self.gen = 0  # bumped whenever the cluster changed in a way that may make a pending pod fit
        self.attempts: dict[str, tuple[int, float]] = {}  # pod uid -> (gen, when) of its last attempt
        self._dirty, self._next_retry = True, 0.0
        self.thread = threading.Thread(target=self._loop, daemon=True, name="scheduler")
        self.store.hooks.append(self._on_write)

    def start(self):
        self.thread.start()

    def stop(self):
        self._stop.set()
        self.wake.set()

    def poke(self, changed: bool = True):
        self.gen += changed
        self._dirty = True
        self.wake.set()

    def _on_write(self, plural, key, old, new):
        if plural in ("nodes", "persistentvolumeclaims"):
            self.poke()
        elif plural == "pods":
            if new is None:
                self.attempts.pop(old.info.uid, None)
            if old is None and not new.info.node:
                self.poke(changed=False)
            if old is not None and old.info.node and (new is None or (new.info.terminal and not old.info.terminal)):
                self.poke()

    def _loop(self):
        while not self._stop.is_set():
            self.wake.wait(self.settings.scheduler_interval)
            self.wake.clear()
            if self._stop.is_set():
                return
            try:
                self.tick()
            except Exception:
                log.exception("scheduler pass failed")
            time.sleep(0.01)  # coalesce bursts of wake-ups

    def tick(self):
        retry, now = self.settings.unschedulable_retry_seconds, time.monotonic()
        if not self._dirty and now < self._next_retry:
            return  # nothing changed and no retry due: an idle big cluster costs nothing
        self._dirty, next_retry = False, now + retry
        with self.store.lock:
            queue = []
            for key in self.store.keys_on_node(""):
                v = self.store.current("pods", key)
                info = v.info
                if info.phase != "Pending" or info.deleting or info.scheduler not in self.settings.served_schedulers:
                    continue
                last = self.attempts.get(info.uid)
                if last and last[0] == self.gen and now - last[1] < retry:
                    next_retry = min(next_retry, last[1] + retry)
                    continue
                queue.append((-info.priority, v.obj()["metadata"].get("creationTimestamp", ""), key, v))
            for _, _, key, v in sorted(queue, key=lambda x: x[:3]):
                self.attempts[v.info.uid] = (self.gen, now)
                self.schedule_one(key, v)
            self._next_retry = next_retry

    def usage(self, node: str, exclude: str = ""):
        used, pods = Counter(), []
        for k in self.store.keys_on_node(node):
            pv = self.store.current("pods", k)
            if pv is not None and not pv.info.terminal and k != exclude:
                pods.append((k, pv))
                used.update(pv.info.requests)
        return used, pods

    @staticmethod
    def lacking(alloc: dict, used: dict, count: int, req: dict) -> list[str]:
        out = ["Too many pods"] if "pods" in alloc and count + 1 > alloc["pods"] // 1000 else []
        return out + [f"Insufficient {r}" for r, q in sorted(req.items()) if q > 0 and used.get(r, 0) + q > alloc.get(r, 0)]

    def _filter(self, pod: dict, info, ni, scripted: bool) -> tuple[list[str], tuple | None]:
        """(reasons, usage) for one node: no reasons when the pod fits; usage when only resources lack."""
        tolerations = pod["spec"].get("tolerations") or []
        if scripted and (s := self.c.scripts.match(ni.name, pod["metadata"].get("labels") or {}, info.uid,
                                                    {"never_schedule"})):
            return [s.get("message") or "Insufficient nvidia.com/gpu"], None
        if ni.unschedulable and not any(tolerates(t, UNSCHEDULABLE_TAINT) for t in tolerations):
            return ["node(s) were unschedulable"], None
        for t in ni.taints:
            if t.get("effect") in ("NoSchedule", "NoExecute") and t.get("key") != UNSCHEDULABLE_TAINT["key"] \
                    and not any(tolerates(tol, t) for tol in tolerations):
                return [f"node(s) had untolerated taint {{{t.get('key')}: {t.get('value') or ''}}}"], None
        if not node_matches_affinity(pod["spec"], ni.name, ni.labels):
            return [AFFINITY_MSG], None
        usage = self.usage(ni.name)
        return self.lacking(ni.allocatable, usage[0], len(usage[1]), info.requests), usage

    def volume_error(self, pod: dict) -> str | None:
        """VolumeBinding's pre-filter: every claim must exist and be bound (claims of a WaitForFirstConsumer
        class included: the emulator has no provisioner to bind them)."""
        ns = pod["metadata"]["namespace"]
        for vol in pod["spec"].get("volumes") or []:
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            if claim is None:
                continue
            v = self.store.current("persistentvolumeclaims", f"{ns}/{claim}")
            if v is None:
                return f'persistentvolumeclaim "{claim}" not found'
            if (v.obj().get("status") or {}).get("phase") != "Bound":
                return "pod has unbound immediate PersistentVolumeClaims"
        return None

    def schedule_one(self, key: str, v):
        pod, info = v.obj(), v.info
        all_nodes = self.store.count("nodes")
        if (why := self.volume_error(pod)) is not None:
            # unresolvable on every node: preemption cannot help
            return self._unschedulable(key, f"{fit_error(all_nodes, why)} preemption: "
                                            f"{fit_error(all_nodes, f'{all_nodes} {NOT_HELPFUL}')}")
        pinned = pinned_nodes(pod["spec"])
        nodes = [nv for n in sorted(pinned) if (nv := self.store.current("nodes", n))] if pinned is not None else \
            [nv for _, nv in self.store.all_current("nodes")]
        reasons = Counter({AFFINITY_MSG: all_nodes - len(nodes)})
        scripted = any(s["action"] == "never_schedule" for s in self.c.scripts.list())
        feasible, resource_failed = [], []
        for nv in nodes:
            why, usage = self._filter(pod, info, nv.info, scripted)
            if not why:
                feasible.append((nv.info, usage[0]))
            reasons.update(why)
            if why and usage is not None:
                resource_failed.append((nv.info, usage))
        if feasible:  # the least allocated node, then the first by name
            ni, _ = max(feasible, key=lambda f: (sum((f[0].allocatable.get(r, 0) - f[1].get(r, 0) - q) / f[0].allocatable[r]
                                                     for r, q in info.requests.items() if f[0].allocatable.get(r)),
                                                 [-ord(ch) for ch in f[0].name]))
            return self.bind(key, ni.name)
        message = fit_error(all_nodes, counted(reasons)) if all_nodes else \
            "0/0 nodes are available: no nodes available to schedule pods."
        pmsg = self._preempt(key, info, resource_failed, all_nodes)
        self._unschedulable(key, message if pmsg is None else f"{message} preemption: {pmsg}")

    def _unschedulable(self, key: str, message: str):
        pod = jcopy(self.store.current("pods", key).obj())
        conds = pod.setdefault("status", {}).get("conditions") or []
        cur = next((c for c in conds if c.get("type") == "PodScheduled"), {})
        if cur.get("status") != "False" or cur.get("message") != message:
            since = cur.get("lastTransitionTime") if cur.get("status") == "False" else rfc3339()
            pod["status"]["conditions"] = [c for c in conds if c.get("type") != "PodScheduled"] + [
                {"type": "PodScheduled", "status": "False", "lastProbeTime": None, "lastTransitionTime": since,
                 "reason": "Unschedulable", "message": message}]
            self.store.put("pods", key, pod)
        self.c.events.emit(pod, "FailedScheduling", message, type_="Warning", component=SCHEDULER)

    def bind(self, key: str, node: str, *, event: bool = True):
        with self.store.lock:
            v = self.store.current("pods", key)
            pod = jcopy(v.obj())
            pod["spec"]["nodeName"] = node
            st = pod.setdefault("status", {})
            st.pop("nominatedNodeName", None)
            st["conditions"] = [c for c in st.get("conditions") or [] if c.get("type") != "PodScheduled"] + [
                {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": rfc3339()}]
            self.store.put("pods", key, pod)
            self.attempts.pop(v.info.uid, None)
            if event:
                m = pod["metadata"]
                self.c.events.emit(pod, "Scheduled", f"Successfully assigned {m['namespace']}/{m['name']} to {node}",
                                   component=SCHEDULER, action="Binding")
            self.c.kubelet.adopt(key, pod)

    def _preempt(self, key, info, resource_failed, all_nodes) -> str | None:
        if info.preempt_never:
            return "not eligible due to preemptionPolicy=Never."
        if info.nominated and any(pv.info.deleting for _, pv in self.usage(info.nominated)[1]):
            return None  # the victims on the nominated node are still terminating: wait for them
        best = None
        for ni, usage in resource_failed:
            victims = self._victims(ni, usage, info)
            if victims is not None:
                rank = (max((pv.info.priority for _, pv in victims), default=-(2**31)), len(victims), ni.name)
                best = min(best or (rank, ni, victims), (rank, ni, victims), key=lambda b: b[0])
        if best is None:
            n = len(resource_failed)
            return fit_error(all_nodes, counted(Counter({NO_VICTIMS: n, NOT_HELPFUL: all_nodes - n})))
        _, ni, victims = best
        pod = jcopy(self.store.current("pods", key).obj())
        pod["status"]["nominatedNodeName"] = ni.name
        self.store.put("pods", key, pod)
        for vkey, pv in victims:
            self.preempt_pod(vkey, pv.info.uid, preemptor=info.uid, node=ni.name)
        return None

    def _victims(self, ni, usage, info):
        """Lower-priority pods to remove so the pod fits, reprieving the most important ones that can stay."""
        used, pods = usage
        lower = [(k, pv) for k, pv in pods if pv.info.priority < info.priority and not pv.info.deleting]
        remaining, n = Counter(used), len(pods) - len(lower)
        for _, pv in lower:
            remaining.subtract(pv.info.requests)
        if self.lacking(ni.allocatable, remaining, n, info.requests):
            return None
        victims = []
        for k, pv in sorted(lower, key=lambda p: -p[1].info.priority):
            trial = remaining + Counter(pv.info.requests)
            if self.lacking(ni.allocatable, trial, n + 1, info.requests):
                victims.append((k, pv))
            else:
                remaining, n = trial, n + 1
        return victims

    def preempt_pod(self, key: str, uid: str, preemptor: str | None, node: str | None = None):
        """What the scheduler does to a victim: a Preempted event, a DisruptionTarget condition (Kubernetes
        1.26 and later), and a graceful delete."""
        with self.store.lock:
            v = self.store.current("pods", key)
            if v is None or v.info.uid != uid:
                return
            self.c.events.emit(v.obj(), "Preempted", f"Preempted by pod {preemptor or new_uid()} on node "
                               f"{node or v.info.node}", component=SCHEDULER, action="Preempting")
            self.c.api.disrupt(key, uid, "PreemptionByScheduler",
                               f"{v.info.scheduler}: preempting to accommodate a higher priority pod")
