"""Simulated kube-scheduler: filters (unschedulable, taints, node affinity/selector, resources incl. extended
ones), binding, FailedScheduling with the real message format, and priority preemption.

Unschedulable pods are retried only when the cluster changed (a node was written, a bound pod ended or went
away) or after retry_seconds, like the real scheduler's unschedulable queue; that keeps big clusters cheap.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

from .resources import TERMINAL_PHASES
from .selectors import node_selector_term_matches
from .util import jcopy, new_uid, rfc3339

log = logging.getLogger("k8s_emulator.scheduler")

AFFINITY_MSG = "node(s) didn't match Pod's node affinity/selector"
UNSCHEDULABLE_MSG = "node(s) were unschedulable"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"


def tolerates(tol: dict, taint: dict) -> bool:
    if tol.get("effect") and tol["effect"] != taint.get("effect"):
        return False
    op = tol.get("operator") or "Equal"
    if not tol.get("key"):
        return op == "Exists"
    if tol["key"] != taint.get("key"):
        return False
    return op == "Exists" or (tol.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(tolerations: list, taints: list, effects=("NoSchedule", "NoExecute")) -> dict | None:
    for t in taints:
        if t.get("effect") in effects and not any(tolerates(tol, t) for tol in tolerations):
            return t
    return None


def node_matches_affinity(spec: dict, node_name: str, labels: dict) -> bool:
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    req = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = req.get("nodeSelectorTerms")
    if terms:
        return any(node_selector_term_matches(t, labels, node_name) for t in terms)
    return True


def hostname_candidates(spec: dict) -> set[str] | None:
    """Node names the pod is pinned to by a kubernetes.io/hostname In [...] term (fast path), else None."""
    req = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = req.get("nodeSelectorTerms") or []
    if not terms:
        return None
    names: set[str] = set()
    for t in terms:
        found = None
        for e in t.get("matchExpressions") or []:
            if e.get("key") == "kubernetes.io/hostname" and e.get("operator") == "In":
                found = set(e.get("values") or [])
        for f in t.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("operator") == "In":
                found = set(f.get("values") or [])
        if found is None:
            return None  # one term is not name-pinned: no shortcut
        names |= found
    return names


class Scheduler:
    def __init__(self, cluster):
        self.c = cluster
        self.store, self.events, self.scripts, self.settings = (
            cluster.store,
            cluster.events,
            cluster.scripts,
            cluster.settings,
        )
        self.wake = threading.Event()
        self._stop = threading.Event()
        self.gen = 0  # bumped whenever the cluster changed in a way that may make a pending pod fit
        self.attempts: dict[str, tuple[int, float]] = {}
        self._dirty = True  # something changed since the last pass
        self._next_retry = 0.0  # when an unschedulable pod is due for a retry anyway
        self.thread = threading.Thread(target=self._loop, daemon=True, name="scheduler")
        self.store.hooks.append(self._on_write)

    # ------------------------------------------------------------ loop
    def start(self):
        self.thread.start()

    def stop(self):
        self._stop.set()
        self.wake.set()

    def poke(self):
        self.gen += 1
        self._dirty = True
        self.wake.set()

    def _on_write(self, plural, key, old, new):
        if plural == "nodes":
            self.gen += 1
            self._dirty = True
            self.wake.set()
        elif plural == "pods":
            if new is None and old is not None:
                self.attempts.pop(old.info.uid, None)
            if new is not None and not new.info.node and old is None:
                self._dirty = True
                self.wake.set()
            if (
                old is not None
                and old.info.node
                and (new is None or (new.info.terminal and not old.info.terminal))
            ):
                self.gen += 1
                self._dirty = True
                self.wake.set()

    def _loop(self):
        last_maint = 0.0
        while not self._stop.is_set():
            self.wake.wait(self.settings.scheduler_interval)
            self.wake.clear()
            if self._stop.is_set():
                return
            try:
                self.tick()
                if time.monotonic() - last_maint > 1.0:
                    self.store.maintain()
                    last_maint = time.monotonic()
            except Exception:
                log.exception("scheduler tick failed")
            time.sleep(0.01)  # coalesce bursts of wake-ups

    def tick(self):
        served = set(self.settings.served_schedulers)
        retry = self.settings.unschedulable_retry_seconds
        now = time.monotonic()
        if not self._dirty and now < self._next_retry:
            return  # nothing changed and no retry due: an idle big cluster costs nothing
        self._dirty = False
        next_retry = now + retry
        with self.store.lock:
            queue = []
            for key in self.store.keys_by_index("pods", "node", ""):
                v = self.store.current("pods", key)
                info = v.info
                if info.phase != "Pending" or info.deleting or info.scheduler not in served:
                    continue
                last = self.attempts.get(info.uid)
                if last and last[0] == self.gen and now - last[1] < retry:
                    next_retry = min(next_retry, last[1] + retry)
                    continue
                queue.append((-info.priority, v.obj()["metadata"].get("creationTimestamp", ""), key, v))
            queue.sort(key=lambda x: x[:3])
            for _, _, key, v in queue:
                self.attempts[v.info.uid] = (self.gen, now)
                self.schedule_one(key, v)
            self._next_retry = next_retry

    # ------------------------------------------------------------ one pod
    def _usage(self, node: str):
        used, count, pods = {}, 0, []
        for k in self.store.keys_by_index("pods", "node", node):
            pv = self.store.current("pods", k)
            if pv is None or pv.info.phase in TERMINAL_PHASES:
                continue
            count += 1
            pods.append((k, pv))
            for r, q in pv.info.requests.items():
                used[r] = used.get(r, 0) + q
        return used, count, pods

    @staticmethod
    def _lacking(alloc: dict, used: dict, count: int, req: dict) -> list[str]:
        out = []
        if "pods" in alloc and count + 1 > alloc["pods"] // 1000:
            out.append("Too many pods")
        for r, q in sorted(req.items()):
            if q > 0 and used.get(r, 0) + q > alloc.get(r, 0):
                out.append(f"Insufficient {r}")
        return out

    def _filter(self, pod: dict, info, nv, check_scripts: bool) -> tuple[list[str], bool, tuple | None]:
        """(reasons, only_resources, usage) for one node; reasons empty when the pod fits."""
        spec, ni = pod["spec"], nv.info
        tolerations = spec.get("tolerations") or []
        if check_scripts:
            s = self.scripts.match(ni.name, pod["metadata"].get("labels") or {}, info.uid, {"never_schedule"})
            if s is not None:
                return [s.get("message") or "Insufficient nvidia.com/gpu"], False, None
        if ni.unschedulable and not any(
            tolerates(t, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
            for t in tolerations
        ):
            return [UNSCHEDULABLE_MSG], False, None
        taint = untolerated_taint(
            tolerations, [t for t in ni.taints if t.get("key") != "node.kubernetes.io/unschedulable"]
        )
        if taint is not None:
            return (
                [f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"],
                False,
                None,
            )
        if not node_matches_affinity(spec, ni.name, ni.labels):
            return [AFFINITY_MSG], False, None
        usage = self._usage(ni.name)
        lacking = self._lacking(ni.allocatable, usage[0], usage[1], info.requests)
        return lacking, True, usage

    def schedule_one(self, key: str, v):
        pod, info = v.obj(), v.info
        spec = pod["spec"]
        all_nodes = self.store.count("nodes")
        pinned = hostname_candidates(spec)
        if pinned is not None:
            nodes = [nv for n in sorted(pinned) if (nv := self.store.current("nodes", n)) is not None]
        else:
            nodes = [nv for _, nv in self.store.all_current("nodes")]
        reasons: Counter = Counter()
        reasons_skipped = all_nodes - len(nodes)
        if reasons_skipped:
            reasons[AFFINITY_MSG] += reasons_skipped
        check_scripts = any(s["action"] == "never_schedule" for s in self.scripts.list())
        feasible, resource_failed = [], []
        for nv in nodes:
            why, only_res, usage = self._filter(pod, info, nv, check_scripts)
            if not why:
                feasible.append((nv, usage))
            else:
                for r in why:
                    reasons[r] += 1
                if only_res:
                    resource_failed.append((nv, usage))
        if feasible:
            nv, _ = max(
                feasible,
                key=lambda f: (
                    self._free_score(f[0].info.allocatable, f[1][0], info.requests),
                    [-ord(ch) for ch in f[0].info.name],
                ),
            )
            self.bind(key, nv.info.name)
            return
        fit_msg = (
            f"0/{all_nodes} nodes are available: "
            + ", ".join(sorted(f"{n} {r}" for r, n in reasons.items()))
            + "."
        )
        if all_nodes == 0:
            fit_msg = "0/0 nodes are available: no nodes available to schedule pods."
        pmsg = self._preempt(key, pod, info, resource_failed, all_nodes)
        message = fit_msg if pmsg is None else f"{fit_msg} preemption: {pmsg}"
        self._unschedulable(key, info.uid, message)

    @staticmethod
    def _free_score(alloc: dict, used: dict, req: dict) -> float:
        score = 0.0
        for r, q in req.items():
            cap = alloc.get(r, 0)
            if cap:
                score += (cap - used.get(r, 0) - q) / cap
        return score

    def _unschedulable(self, key: str, uid: str, message: str):
        v = self.store.current("pods", key)
        pod = jcopy(v.obj())
        st = pod.setdefault("status", {})
        conds = st.get("conditions") or []
        cur = next((c for c in conds if c.get("type") == "PodScheduled"), None)
        if cur is None or cur.get("status") != "False" or cur.get("message") != message:
            new = {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": cur.get("lastTransitionTime")
                if cur and cur.get("status") == "False"
                else rfc3339(),
                "reason": "Unschedulable",
                "message": message,
            }
            st["conditions"] = [c for c in conds if c.get("type") != "PodScheduled"] + [new]
            self.store.put("pods", key, pod)
        self.events.emit(pod, "FailedScheduling", message, type_="Warning", component="default-scheduler")

    def bind(self, key: str, node: str, *, event: bool = True):
        with self.store.lock:
            v = self.store.current("pods", key)
            pod = jcopy(v.obj())
            pod["spec"]["nodeName"] = node
            st = pod.setdefault("status", {})
            st.pop("nominatedNodeName", None)
            st["conditions"] = [c for c in st.get("conditions") or [] if c.get("type") != "PodScheduled"] + [
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": rfc3339(),
                }
            ]
            self.store.put("pods", key, pod)
            self.attempts.pop(v.info.uid, None)
            if event:
                m = pod["metadata"]
                self.events.emit(
                    pod,
                    "Scheduled",
                    f"Successfully assigned {m['namespace']}/{m['name']} to {node}",
                    component="default-scheduler",
                    action="Binding",
                )
            self.c.kubelet.adopt(key, pod)

    # ------------------------------------------------------------ preemption
    def _preempt(self, key, pod, info, resource_failed, all_nodes) -> str | None:
        if info.preempt_never:
            return "not eligible due to preemptionPolicy=Never."
        if info.nominated:
            # victims are still terminating on the nominated node: wait for them, don't pick more
            used = self._usage(info.nominated)
            if any(pv.info.deleting for _, pv in used[2]):
                return None
        best = None
        for nv, usage in resource_failed:
            victims = self._victims(nv, usage, info)
            if victims is None:
                continue
            rank = (
                max((pv.info.priority for _, pv in victims), default=-(2**31)),
                len(victims),
                nv.info.name,
            )
            if best is None or rank < best[0]:
                best = (rank, nv, victims)
        if best is None:
            counts = Counter(
                {NO_VICTIMS: len(resource_failed), NOT_HELPFUL: all_nodes - len(resource_failed)}
            )
            return (
                f"0/{all_nodes} nodes are available: "
                + ", ".join(sorted(f"{n} {r}" for r, n in counts.items() if n))
                + "."
            )
        _, nv, victims = best
        node = nv.info.name
        cur = jcopy(self.store.current("pods", key).obj())
        cur.setdefault("status", {})["nominatedNodeName"] = node
        self.store.put("pods", key, cur)
        for vkey, pv in victims:
            self.preempt_pod(vkey, pv.info.uid, preemptor=info.uid, node=node)
        return None

    def _victims(self, nv, usage, info):
        used, count, pods = usage
        lower = [(k, pv) for k, pv in pods if pv.info.priority < info.priority and not pv.info.deleting]
        remaining = dict(used)
        for _, pv in lower:
            for r, q in pv.info.requests.items():
                remaining[r] -= q
        n = count - len(lower)
        if self._lacking(nv.info.allocatable, remaining, n, info.requests):
            return None
        victims = []
        for k, pv in sorted(lower, key=lambda p: -p[1].info.priority):  # reprieve the most important first
            trial = dict(remaining)
            for r, q in pv.info.requests.items():
                trial[r] = trial.get(r, 0) + q
            if not self._lacking(nv.info.allocatable, trial, n + 1, info.requests):
                remaining, n = trial, n + 1
            else:
                victims.append((k, pv))
        return victims

    def preempt_pod(self, key: str, uid: str, preemptor: str | None, node: str | None = None):
        """Victim handling as the real scheduler does it: DisruptionTarget condition, Preempted event,
        graceful delete."""
        with self.store.lock:
            v = self.store.current("pods", key)
            if v is None or v.info.uid != uid:
                return
            node = node or v.info.node
            scheduler = v.info.scheduler
            pod = v.obj()
            self.events.emit(
                pod,
                "Preempted",
                f"Preempted by pod {preemptor or new_uid()} on node {node}",
                component="default-scheduler",
                action="Preempting",
            )
            self.c.api.disrupt(
                key,
                uid,
                "PreemptionByScheduler",
                f"{scheduler}: preempting to accommodate a higher priority pod",
            )
