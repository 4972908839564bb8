"""Simulated kubelet: one PodRuntime thread per bound pod walks the real lifecycle (sandbox, image pull,
init containers, containers, restarts, termination) and writes the pod status the way the kubelet does.

Pods created pre-bound by fixtures/bulk loads ("static" pods: user workloads we only need to exist) have no
runtime; their deletion and eviction are completed by timers here.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import logging
import os
import signal
import threading
import time

from .resources import TERMINAL_PHASES, pod_requests
from .runtime import (
    ExecContainer,
    PathMap,
    ProcessRegistry,
    SimContainer,
    expand,
    field_ref,
    materialize_configmap,
)
from .scripts import ACTIONS
from .util import jcopy, quantity_milli, rfc3339

log = logging.getLogger("k8s_emulator.kubelet")

KUBELET_ACTIONS = ACTIONS - {"never_schedule"}
DEADLINE_MSG = "Pod was active on the node longer than the specified deadline"
EVICT_MSG = (
    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 51200Ki. "
    "Container {c} was using 1894332Ki, request is 0, has larger consumption of memory. "
)


class Timers:
    """One thread running delayed callbacks (static pod deletions, completions)."""

    def __init__(self):
        self._heap, self._seq, self._cv = [], itertools.count(), threading.Condition()
        self._stopped = False
        threading.Thread(target=self._loop, daemon=True, name="timers").start()

    def call_later(self, delay: float, fn):
        with self._cv:
            heapq.heappush(self._heap, (time.monotonic() + max(0.0, delay), next(self._seq), fn))
            self._cv.notify()

    def clear(self):
        with self._cv:
            self._heap.clear()

    def stop(self):
        with self._cv:
            self._stopped = True
            self._cv.notify()

    def _loop(self):
        while True:
            with self._cv:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cv.wait(None if not self._heap else self._heap[0][0] - time.monotonic())
                if self._stopped:
                    return
                _, _, fn = heapq.heappop(self._heap)
            try:
                fn()
            except Exception:
                log.exception("timer callback failed")


def normalize_image(image: str) -> str:
    name = image
    first = name.split("/")[0]
    if "/" not in name:
        name = "docker.io/library/" + name
    elif "." not in first and ":" not in first and first != "localhost":
        name = "docker.io/" + name
    if "@" not in name and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name


def image_id(image: str) -> str:
    repo = normalize_image(image).split("@")[0].rsplit(":", 1)[0]
    return f"{repo}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


class PodRuntime:
    def __init__(self, kubelet: Kubelet, key: str, pod: dict, prebound: bool):
        self.k, self.key, self.prebound = kubelet, key, prebound
        meta, spec = pod["metadata"], pod["spec"]
        self.uid, self.name, self.namespace = meta["uid"], meta["name"], meta["namespace"]
        self.node = spec["nodeName"]
        self.restart_policy = spec.get("restartPolicy", "Always")
        self.grace_default = int(spec.get("terminationGracePeriodSeconds", 30))
        self.deadline_s = spec.get("activeDeadlineSeconds")
        self.cv = threading.Condition()
        self.stop = None  # None | ("terminate", grace) | ("kill",) | ("evict", msg) | ("deadline",)
        self.delete_requested = False
        self.gone = False
        self.phase, self.pod_reason, self.pod_message = "Pending", None, None
        self.start_time = self.pod_ip = self.host_ip = None
        self.sandbox_ready = False
        self.inits, self.apps = [], []
        self.extra_conditions: list[dict] = []
        self._transitions: dict[str, tuple] = {}
        self.pod_dir = os.path.join(kubelet.state_dir, "pods", f"{self.namespace}_{self.name}_{self.uid[:8]}")
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"pod-{self.name}")

    # ------------------------------------------------------------ control from outside
    def request(self, stop):
        with self.cv:
            # a kill wins over anything; a shorter grace wins over a longer one
            if (
                self.stop is None
                or stop[0] == "kill"
                or (stop[0] == "terminate" and self.stop[0] == "terminate" and stop[1] < self.stop[1])
            ):
                self.stop = stop
            if stop[0] == "kill":
                self.gone = True
            if stop[0] == "terminate":
                self.delete_requested = True  # even if another stop (deadline, eviction) is already underway
            self.cv.notify_all()

    def changed(self):
        with self.cv:
            self.cv.notify_all()

    def containers(self):
        return self.inits + self.apps

    # ------------------------------------------------------------ helpers
    def _wait(self, timeout: float | None, until=None) -> bool:
        """Wait up to timeout (None = forever) for a stop request or until(); True if a stop is pending."""
        end = None if timeout is None else time.monotonic() + timeout
        with self.cv:
            while self.stop is None and not (until and until()):
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    break
                dl = self._deadline_left()
                wait = min(x for x in (left, dl, 1.0) if x is not None)
                self.cv.wait(max(wait, 0.001))
                if self.stop is None and self._deadline_left() is not None and self._deadline_left() <= 0:
                    self.stop = ("deadline",)
            return self.stop is not None

    def _deadline_left(self):
        if self.deadline_s is None or self.start_time is None:
            return None
        return self.start_time + float(self.deadline_s) - time.time()

    def _pod(self) -> dict | None:
        v = self.k.store.current("pods", self.key)
        if v is None or v.info.uid != self.uid:
            self.gone = True
            return None
        return v.obj()

    def event(self, reason, message, type_="Normal", field_path=None):
        pod = self._pod()
        if pod is not None:
            self.k.events.emit(
                pod, reason, message, type_=type_, component="kubelet", host=self.node, field_path=field_path
            )

    # ------------------------------------------------------------ status
    def _cond(self, type_, status, reason=None, message=None):
        prev = self._transitions.get(type_)
        ts = prev[1] if prev and prev[0] == status else rfc3339()
        self._transitions[type_] = (status, ts)
        c = {"type": type_, "status": status, "lastProbeTime": None, "lastTransitionTime": ts}
        if reason:
            c["reason"] = reason
        if message:
            c["message"] = message
        return c

    def _cstatus(self, c, init: bool) -> dict:
        if c.state == "waiting":
            state = {
                "waiting": {
                    "reason": c.waiting_reason,
                    **({"message": c.waiting_message} if c.waiting_message else {}),
                }
            }
        elif c.state == "running":
            state = {"running": {"startedAt": rfc3339(c.started_at)}}
        else:
            state = {"terminated": c.terminated_dict()}
        d = {
            "name": c.name,
            "state": state,
            "lastState": c.last_state,
            "ready": c.state == "running" and not init,
            "restartCount": c.restart_count,
            "image": normalize_image(c.image),
            "imageID": image_id(c.image) if c.started_at else "",
        }
        if c.container_id:
            d["containerID"] = c.container_id
        d["started"] = c.state == "running"
        return d

    def compose_status(self, current: dict) -> dict:
        st = {"phase": self.phase}
        keep = [
            c
            for c in current.get("conditions") or []
            if c.get("type") in ("PodScheduled", "DisruptionTarget")
        ]
        inits_done = all(c.state == "terminated" and c.exit_code == 0 for c in self.inits)
        pending_init = [c.name for c in self.inits if not (c.state == "terminated" and c.exit_code == 0)]
        unready = [c.name for c in self.apps if c.state != "running"]
        completed = self.phase in TERMINAL_PHASES
        conds = [
            self._cond(
                "PodReadyToStartContainers", "True" if self.sandbox_ready and not completed else "False"
            ),
            self._cond(
                "Initialized",
                "True" if inits_done else "False",
                None if inits_done else "ContainersNotInitialized",
                None if inits_done else f"containers with incomplete status: [{' '.join(pending_init)}]",
            ),
        ]
        if completed:
            ready = [self._cond(t, "False", "PodCompleted") for t in ("Ready", "ContainersReady")]
        elif unready:
            msg = f"containers with unready status: [{' '.join(unready)}]"
            ready = [self._cond(t, "False", "ContainersNotReady", msg) for t in ("Ready", "ContainersReady")]
        else:
            ready = [self._cond(t, "True") for t in ("Ready", "ContainersReady")]
        by_type = {c["type"]: c for c in keep}
        st["conditions"] = [
            *([by_type["DisruptionTarget"]] if "DisruptionTarget" in by_type else []),
            *conds,
            *ready,
            *([by_type["PodScheduled"]] if "PodScheduled" in by_type else []),
        ]
        if self.pod_reason:
            st["reason"], st["message"] = self.pod_reason, self.pod_message
        if self.host_ip:
            st["hostIP"], st["hostIPs"] = self.host_ip, [{"ip": self.host_ip}]
        if self.pod_ip and self.sandbox_ready:  # the IP shows once the sandbox exists
            st["podIP"], st["podIPs"] = self.pod_ip, [{"ip": self.pod_ip}]
        if self.start_time:
            st["startTime"] = rfc3339(self.start_time)
        if self.inits:
            st["initContainerStatuses"] = [self._cstatus(c, True) for c in self.inits]
        st["containerStatuses"] = [self._cstatus(c, False) for c in self.apps]
        st["qosClass"] = current.get("qosClass", "BestEffort")
        return st

    def push(self):
        if self.gone:
            return
        with self.k.store.lock:
            v = self.k.store.current("pods", self.key)
            if v is None or v.info.uid != self.uid:
                self.gone = True
                return
            pod = jcopy(v.obj())
            pod["status"] = self.compose_status(pod.get("status") or {})
            self.k.store.put("pods", self.key, pod)

    # ------------------------------------------------------------ lifecycle
    def _run(self):
        try:
            self._lifecycle()
        except Exception:
            log.exception("pod runtime %s/%s crashed", self.namespace, self.name)
            self._kill_all(0)
        finally:
            self.k._finished(self)

    def _lifecycle(self):
        # The node's kubelet must be up (node exists and Ready) before anything happens to the pod.
        while not self.k.node_ready(self.node):
            if self._wait(0.5):
                return self._finish()
        pod = self._pod()
        if pod is None:
            return
        if self.prebound and self._reject_if_no_room(pod):
            return
        script = self.k.simulated.get(self.uid) or self.k.scripts.match(
            self.node, pod["metadata"].get("labels") or {}, self.uid, KUBELET_ACTIONS
        )
        action = script["action"] if script else "exec"
        self.start_time, self.host_ip = time.time(), self.k.host_ip(self.node)
        self.pod_ip = self.k.allocate_ip(self.node)  # reserved now: env fieldRefs to status.podIP need it
        self._build_containers(pod, script)
        self.push()
        if action == "never_start":
            self._wait(None)
            return self._finish()
        if action == "image_pull_backoff":
            return self._image_pull_backoff(script)
        if (
            self.stop is None
            and action in ("exec", "evict_after", "preempt_after")
            and not self._prepare_volumes(pod)
        ):
            return self._finish()
        self.sandbox_ready = True
        self.push()
        for c in self.inits:
            if not self._pull(c) or not self._run_init(c):
                return self._finish()
            self.push()
        for c in self.apps:
            if not self._pull(c):
                return self._finish()
            self._start(c)
        # Running once every container was created (one stuck in CreateContainerConfigError keeps it Pending)
        self.phase = "Running" if all(c.state != "waiting" for c in self.apps) else "Pending"
        self.push()
        timers = self._script_timers(script)
        seen = self._terminated_count()
        while True:
            now = time.monotonic()
            for when, what in list(timers):
                if now >= when:
                    timers.remove((when, what))
                    if what == "evict":
                        self.request(("evict", EVICT_MSG.format(c=self.apps[0].name)))
                    else:
                        self.k.preempt(self.key, self.uid)
            if self._restart_due():
                self.push()
            if self.stop is not None or self._all_done():
                break
            if self._terminated_count() != seen:
                seen = self._terminated_count()
                self.push()  # a container ended while others still run
            nxt = min([w for w, _ in timers] + [self._next_restart() or now + 3600]) - now
            self._wait(max(nxt, 0.001), until=lambda seen=seen: self._terminated_count() != seen)
        self._finish()

    def _terminated_count(self) -> int:
        return sum(c.state == "terminated" for c in self.apps)

    # containers ------------------------------------------------------------
    def _build_containers(self, pod, script):
        spec = pod["spec"]
        action = script["action"] if script else "exec"
        simulate = action not in ("exec",) and not (
            action in ("evict_after", "preempt_after") and script.get("exec")
        )
        self._simulate, self._script = simulate, script
        for init, specs in ((True, spec.get("initContainers") or []), (False, spec.get("containers") or [])):
            for i, cs in enumerate(specs):
                c = self._make_container(pod, cs, init, first=(not init and i == 0))
                c.waiting_reason = (
                    "PodInitializing" if (not init and spec.get("initContainers")) else "ContainerCreating"
                )
                (self.inits if init else self.apps).append(c)

    def _make_container(self, pod, cs, init, first):
        s = self._script or {}
        if self._simulate:
            action = s.get("action")
            if init:
                return SimContainer(cs, init, self.changed, run_seconds=0)
            if not first or action in ("never_start", "image_pull_backoff"):
                # side containers of a scripted pod live as long as the scripted main container
                main_run = s.get(
                    "run_seconds", None if action in ("run", "evict_after", "preempt_after") else 0.2
                )
                return SimContainer(
                    cs, init, self.changed, run_seconds=None if main_run is None else float(main_run)
                )
            if action in ("run", "evict_after", "preempt_after"):
                return SimContainer(
                    cs, init, self.changed, run_seconds=s.get("run_seconds"), log=s.get("log", "")
                )
            defaults = {
                "exit": (0, 0.0, ""),
                "crash": (139, 0.2, "Segmentation fault (core dumped)"),
                "oom": (137, 0.2, ""),
            }[action]
            return SimContainer(
                cs,
                init,
                self.changed,
                exit_code=int(s.get("exit_code", defaults[0])),
                run_seconds=float(s.get("run_seconds", defaults[1])),
                log=s.get("log", defaults[2]),
                termination_message=s.get("termination_message", ""),
                oom=action == "oom",
            )
        return self.k.exec_container(self, pod, cs, init)

    def _pull(self, c) -> bool:
        fp = f"spec.{'initContainers' if c.init else 'containers'}{{{c.name}}}"
        policy = c.spec.get("imagePullPolicy", "IfNotPresent")
        delay = self.k.settings.startup_delay
        if policy == "Never" or (policy == "IfNotPresent" and c.image in self.k.pulled.get(self.node, set())):
            self.event("Pulled", f'Container image "{c.image}" already present on machine', field_path=fp)
        else:
            self.event("Pulling", f'Pulling image "{c.image}"', field_path=fp)
            t0 = time.monotonic()
            if self._wait(delay):
                return False
            took = time.monotonic() - t0
            self.k.pulled.setdefault(self.node, set()).add(c.image)
            self.event(
                "Pulled",
                f'Successfully pulled image "{c.image}" in {took:.3f}s ({took:.3f}s including '
                f"waiting). Image size: 52428800 bytes.",
                field_path=fp,
            )
        return True

    def _start(self, c):
        fp = f"spec.{'initContainers' if c.init else 'containers'}{{{c.name}}}"
        if getattr(c, "config_error", None):
            c.waiting_reason, c.waiting_message = "CreateContainerConfigError", c.config_error
            self.event("Failed", f"Error: {c.config_error}", "Warning", fp)
            return
        self.event("Created", f"Created container: {c.name}", field_path=fp)
        c.start()
        if c.reason == "StartError":
            self.event("Failed", f"Error: {c.message}", "Warning", fp)
        else:
            self.event("Started", f"Started container {c.name}", field_path=fp)

    def _run_init(self, c) -> bool:
        while True:
            self._start(c)
            self.push()
            if self._wait(None, until=c.done.is_set):
                return False
            if c.exit_code == 0:
                return True
            if self.restart_policy == "Never":
                self.phase = "Failed"
                return False
            self.event(
                "BackOff",
                f"Back-off restarting failed container {c.name} in pod {self.name}_{self.namespace}"
                f"({self.uid})",
                "Warning",
            )
            c.reset_for_restart()
            self.push()
            if self._wait(self._backoff(c)):
                return False

    def _backoff(self, c) -> float:
        return min(self.k.settings.restart_backoff_seconds * (2 ** max(c.restart_count - 1, 0)), 300.0)

    def _restart_due(self) -> bool:
        changed = False
        for c in self.apps:
            if c.state == "terminated" and self._should_restart(c):
                c.restart_at = time.monotonic() + self._backoff_next(c)
                self.event(
                    "BackOff",
                    f"Back-off restarting failed container {c.name} in pod "
                    f"{self.name}_{self.namespace}({self.uid})",
                    "Warning",
                )
                c.reset_for_restart()
                changed = True
            elif c.state == "waiting" and getattr(c, "restart_at", None) and time.monotonic() >= c.restart_at:
                c.restart_at = None
                self._start(c)
                changed = True
        return changed

    def _backoff_next(self, c) -> float:
        return min(self.k.settings.restart_backoff_seconds * (2**c.restart_count), 300.0)

    def _next_restart(self):
        due = [c.restart_at for c in self.apps if getattr(c, "restart_at", None)]
        return min(due) if due else None

    def _should_restart(self, c) -> bool:
        if self.stop is not None:
            return False
        return self.restart_policy == "Always" or (self.restart_policy == "OnFailure" and c.exit_code != 0)

    def _all_done(self) -> bool:
        return all(c.state == "terminated" for c in self.apps)

    def _script_timers(self, script):
        if not script:
            return []
        now = time.monotonic()
        if script["action"] == "evict_after":
            return [(now + float(script.get("seconds", 1)), "evict")]
        if script["action"] == "preempt_after":
            return [(now + float(script.get("seconds", 1)), "preempt")]
        return []

    # special lifecycles ------------------------------------------------------
    def _image_pull_backoff(self, script):
        c = self.apps[0]
        fp = f"spec.containers{{{c.name}}}"
        self.sandbox_ready = True
        self.event("Pulling", f'Pulling image "{c.image}"', field_path=fp)
        if self._wait(self.k.settings.startup_delay):
            return self._finish()
        err = script.get("message") or (
            f'failed to pull and unpack image "{normalize_image(c.image)}": failed to '
            f'resolve reference "{normalize_image(c.image)}": '
            f"{normalize_image(c.image)}: not found"
        )
        msg = f"rpc error: code = NotFound desc = {err}"
        self.event("Failed", f'Failed to pull image "{c.image}": {msg}', "Warning", fp)
        self.event("Failed", "Error: ErrImagePull", "Warning", fp)
        c.waiting_reason, c.waiting_message = "ErrImagePull", msg
        self.push()
        if self._wait(self.k.settings.startup_delay):
            return self._finish()
        self.event("BackOff", f'Back-off pulling image "{c.image}"', "Normal", fp)
        self.event("Failed", "Error: ImagePullBackOff", "Warning", fp)
        c.waiting_reason = "ImagePullBackOff"
        c.waiting_message = f'Back-off pulling image "{c.image}": ErrImagePull: {msg}'
        self.push()
        self._wait(None)
        return self._finish()

    def _reject_if_no_room(self, pod) -> bool:
        """Kubelet admission for pods bound without the scheduler (spec.nodeName set at creation)."""
        lacking = self.k.lacking_resource(self.node, self.key, pod_requests(pod["spec"]))
        if not lacking:
            return False
        res, requested, used, capacity = lacking
        self.phase, self.pod_reason = "Failed", f"OutOf{res}"
        self.pod_message = (
            f"Pod was rejected: Node didn't have enough resource: {res}, requested: {requested}, "
            f"used: {used}, capacity: {capacity}"
        )
        self.start_time = time.time()
        self.event(self.pod_reason, self.pod_message, "Warning")
        for cs in pod["spec"].get("containers") or []:
            c = SimContainer(cs, False, self.changed)
            c.waiting_reason = "ContainerCreating"
            self.apps.append(c)
        self.push()
        return True

    def _prepare_volumes(self, pod) -> bool:
        while True:
            missing = self.k.missing_configmap(pod)
            if missing is None:
                return True
            vol, cm = missing
            self.event(
                "FailedMount",
                f'MountVolume.SetUp failed for volume "{vol}" : configmap "{cm}" not found',
                "Warning",
            )
            if self._wait(1.0):
                return False
            # rebuild exec containers: the ConfigMap may exist now
            fresh = self._pod()
            if fresh is None:
                return False
            self.inits, self.apps = [], []
            self._build_containers(fresh, self._script)

    # termination -------------------------------------------------------------
    def _kill_all(self, grace: float):
        running = [c for c in self.containers() if c.state == "running"]
        if not running:
            return
        for c in running:
            if not self.gone:
                fp = f"spec.{'initContainers' if c.init else 'containers'}{{{c.name}}}"
                self.event("Killing", f"Stopping container {c.name}", field_path=fp)
            c.signal(signal.SIGTERM if grace > 0 else signal.SIGKILL)
        end = time.monotonic() + grace
        with self.cv:
            while time.monotonic() < end and any(c.state == "running" for c in running):
                self.cv.wait(min(0.1, end - time.monotonic()) if end > time.monotonic() else 0.001)
        for c in running:
            if c.state == "running":
                c.signal(signal.SIGKILL)
        for c in running:
            c.done.wait(5)

    def _finish(self):
        stop = self.stop
        kind = stop[0] if stop else None
        if kind == "kill":
            self._kill_all(0)
            return
        if kind == "terminate":
            self._kill_all(float(stop[1]))
        elif kind == "evict":
            self.pod_reason, self.pod_message = "Evicted", stop[1]
            self._add_disruption("TerminationByKubelet", stop[1])
            self.event("Evicted", stop[1], "Warning")
            self._kill_all(0)
        elif kind == "deadline":
            self.pod_reason, self.pod_message = "DeadlineExceeded", DEADLINE_MSG
            self.event("DeadlineExceeded", DEADLINE_MSG, "Warning")
            self._kill_all(min(self.grace_default, 2))
        ok = bool(self.apps) and all(c.state == "terminated" and c.exit_code == 0 for c in self.apps)
        self.phase = "Succeeded" if ok and kind in (None, "terminate") else "Failed"
        self.push()
        if kind == "terminate" or self.delete_requested:
            self.k.remove_pod(self.key, self.uid)

    def _add_disruption(self, reason, message):
        with self.k.store.lock:
            v = self.k.store.current("pods", self.key)
            if v is None or v.info.uid != self.uid:
                return
            pod = jcopy(v.obj())
            conds = [c for c in pod["status"].get("conditions") or [] if c.get("type") != "DisruptionTarget"]
            conds.insert(
                0,
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": rfc3339(),
                    "reason": reason,
                    "message": message,
                },
            )
            pod["status"]["conditions"] = conds
            self.k.store.put("pods", self.key, pod)


class Kubelet:
    def __init__(self, cluster):
        self.cluster = cluster
        self.store, self.events, self.scripts, self.settings = (
            cluster.store,
            cluster.events,
            cluster.scripts,
            cluster.settings,
        )
        self.state_dir = cluster.state_dir
        self.lock = threading.Lock()
        self.runtimes: dict[str, PodRuntime] = {}
        self.timers = Timers()
        self.registry = ProcessRegistry(os.path.join(self.state_dir, "pids"))
        self.pulled: dict[str, set] = {}
        self.simulated: dict[str, dict] = {}  # uid -> script for control-API user pods
        self._ips: dict[str, int] = {}
        self.shim_dir = os.path.join(self.state_dir, "bin")
        self.write_shims()

    # ------------------------------------------------------------ executables
    def write_shims(self):
        os.makedirs(self.shim_dir, exist_ok=True)
        for name, target in (self.settings.executables or {}).items():
            if "/" in name:
                continue
            path = os.path.join(self.shim_dir, name)
            with open(path, "w") as f:
                f.write(f'#!/bin/sh\nexec "{target}" "$@"\n')
            os.chmod(path, 0o755)

    # ------------------------------------------------------------ node facts
    def node_ready(self, node: str) -> bool:
        v = self.store.current("nodes", node)
        return v is not None and v.info.ready == "True"

    def host_ip(self, node: str) -> str:
        v = self.store.current("nodes", node)
        for a in ((v.obj().get("status") or {}).get("addresses") or []) if v else []:
            if a.get("type") == "InternalIP":
                return a.get("address")
        h = int(hashlib.md5(node.encode()).hexdigest()[:4], 16)
        return f"10.0.{h >> 8}.{h & 255 or 1}"

    def allocate_ip(self, node: str) -> str:
        with self.lock:
            n = self._ips.get(node, 1) % 250 + 1
            self._ips[node] = n
        h = int(hashlib.md5(node.encode()).hexdigest()[:4], 16)
        return f"10.{(h >> 8) % 200 + 20}.{h & 255}.{n + 1}"

    def lacking_resource(self, node: str, own_key: str, req: dict):
        with self.store.lock:
            nv = self.store.current("nodes", node)
            if nv is None:
                return None
            used: dict = {}
            for k in self.store.keys_by_index("pods", "node", node):
                if k == own_key:
                    continue
                pv = self.store.current("pods", k)
                if pv is not None and not pv.info.terminal:
                    for r, q in pv.info.requests.items():
                        used[r] = used.get(r, 0) + q
            for r, q in sorted(req.items()):
                cap = nv.info.allocatable.get(r, 0)
                if used.get(r, 0) + q > cap:
                    return r, _q(q), _q(used.get(r, 0)), _q(cap)
        return None

    def missing_configmap(self, pod) -> tuple[str, str] | None:
        ns = pod["metadata"]["namespace"]
        for vol in pod["spec"].get("volumes") or []:
            cm = vol.get("configMap")
            if (
                cm
                and not cm.get("optional")
                and self.store.current("configmaps", f"{ns}/{cm.get('name')}") is None
            ):
                return vol["name"], cm.get("name")
        return None

    def pvc_dir(self, claim: str) -> str:
        path = (self.settings.pvc_dirs or {}).get(claim) or os.path.join(self.state_dir, "pvc", claim)
        os.makedirs(path, exist_ok=True)
        return path

    # ------------------------------------------------------------ exec container construction
    def exec_container(self, rt: PodRuntime, pod: dict, cs: dict, init: bool) -> ExecContainer:
        ns = pod["metadata"]["namespace"]
        os.makedirs(rt.pod_dir, exist_ok=True)
        vols = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        mapping = {}
        for m in cs.get("volumeMounts") or []:
            vol = vols.get(m.get("name"), {})
            host = self._volume_dir(rt, pod, vol)
            if m.get("subPath"):
                host = os.path.join(host, m["subPath"])
                os.makedirs(host, exist_ok=True)
            mapping[m["mountPath"]] = host
        term_file = os.path.join(rt.pod_dir, f"{cs['name']}.termination-log")
        open(term_file, "w").close()
        mapping[cs.get("terminationMessagePath") or "/dev/termination-log"] = term_file
        paths = PathMap(mapping)

        env_list, config_error = {}, None
        for src in cs.get("envFrom") or []:
            ref = src.get("configMapRef")
            if ref:
                v = self.store.current("configmaps", f"{ns}/{ref.get('name')}")
                if v is None and not ref.get("optional"):
                    config_error = f'configmap "{ref.get("name")}" not found'
                for k, val in ((v.obj().get("data") or {}) if v else {}).items():
                    env_list[src.get("prefix", "") + k] = val
            elif src.get("secretRef") and not src["secretRef"].get("optional"):
                config_error = f'secret "{src["secretRef"].get("name")}" not found'
        for e in cs.get("env") or []:
            if "value" in e or "valueFrom" not in e:
                env_list[e["name"]] = expand(e.get("value", ""), env_list)
                continue
            vf = e["valueFrom"]
            if "fieldRef" in vf:
                env_list[e["name"]] = field_ref(
                    self._with_runtime_fields(pod, rt), vf["fieldRef"].get("fieldPath", "")
                )
            elif "resourceFieldRef" in vf:
                env_list[e["name"]] = self._resource_field(pod, cs, vf["resourceFieldRef"])
            elif "configMapKeyRef" in vf:
                ref = vf["configMapKeyRef"]
                v = self.store.current("configmaps", f"{ns}/{ref.get('name')}")
                data = (v.obj().get("data") or {}) if v else {}
                if ref.get("key") in data:
                    env_list[e["name"]] = data[ref["key"]]
                elif not ref.get("optional"):
                    config_error = (
                        f'configmap "{ref.get("name")}" not found'
                        if v is None
                        else f"couldn't find key {ref.get('key')} in ConfigMap {ns}/{ref.get('name')}"
                    )
            elif "secretKeyRef" in vf and not vf["secretKeyRef"].get("optional"):
                config_error = f'secret "{vf["secretKeyRef"].get("name")}" not found'
        env_list = {k: paths.rewrite(v) for k, v in env_list.items()}

        argv = [
            paths.rewrite(expand(a, env_list)) for a in (cs.get("command") or []) + (cs.get("args") or [])
        ]
        if argv:
            exe = self.settings.executables or {}
            first = argv[0]
            argv[0] = exe.get(first) or exe.get(os.path.basename(first)) or first

        env = {k: os.environ[k] for k in ("HOME", "LANG", "LC_ALL", "TMPDIR", "TZ") if k in os.environ}
        env.update(self.settings.exec_env or {})
        env["HOSTNAME"] = pod["metadata"]["name"]
        env.update(env_list)
        env["PATH"] = (
            self.shim_dir
            + os.pathsep
            + (
                env_list.get("PATH")
                or (self.settings.exec_env or {}).get("PATH")
                or os.environ.get("PATH", "/usr/bin:/bin")
            )
        )
        wd = cs.get("workingDir")
        cwd = paths.rewrite(wd) if wd else None
        if not cwd or cwd == wd:
            cwd = os.path.join(rt.pod_dir, "rootfs", (wd or "").lstrip("/"))
        os.makedirs(cwd, exist_ok=True)
        c = ExecContainer(
            cs, init, rt.changed, argv=argv, env=env, cwd=cwd, term_file=term_file, registry=self.registry
        )
        c.config_error = config_error
        return c

    @staticmethod
    def _with_runtime_fields(pod: dict, rt: PodRuntime) -> dict:
        p = dict(pod)
        p["status"] = dict(pod.get("status") or {}, podIP=rt.pod_ip or "", hostIP=rt.host_ip or "")
        return p

    @staticmethod
    def _resource_field(pod, cs, ref) -> str:
        res = ref.get("resource", "")
        kind, _, name = res.partition(".")
        q = ((cs.get("resources") or {}).get(kind) or {}).get(name)
        if q is None:
            return "0"
        divisor = quantity_milli(ref.get("divisor", "1"))
        return str(-(-quantity_milli(q) // divisor))

    def _volume_dir(self, rt: PodRuntime, pod: dict, vol: dict) -> str:
        name = vol.get("name", "unknown")
        if "persistentVolumeClaim" in vol:
            return self.pvc_dir(vol["persistentVolumeClaim"].get("claimName", name))
        if "hostPath" in vol:
            path = os.path.join(
                self.state_dir, "nodes", rt.node, "hostpath", vol["hostPath"].get("path", "").lstrip("/")
            )
            os.makedirs(path, exist_ok=True)
            return path
        path = os.path.join(rt.pod_dir, "volumes", name)
        os.makedirs(path, exist_ok=True)
        if "configMap" in vol:
            v = self.store.current(
                "configmaps", f"{pod['metadata']['namespace']}/{vol['configMap'].get('name')}"
            )
            if v is not None:
                materialize_configmap(v.obj(), vol["configMap"], path)
        return path

    # ------------------------------------------------------------ lifecycle entry points
    def adopt(self, key: str, pod: dict, prebound: bool = False):
        uid = pod["metadata"]["uid"]
        with self.lock:
            if uid in self.runtimes:
                return
            rt = PodRuntime(self, key, pod, prebound)
            self.runtimes[uid] = rt
        rt.thread.start()

    def _finished(self, rt: PodRuntime):
        # keep the runtime (logs stay readable) until the object is gone
        if rt.gone:
            with self.lock:
                self.runtimes.pop(rt.uid, None)

    def runtime(self, uid: str) -> PodRuntime | None:
        with self.lock:
            return self.runtimes.get(uid)

    def log_buffer(self, uid: str, container: str):
        rt = self.runtime(uid)
        if rt is None:
            return None
        for c in rt.containers():
            if c.name == container:
                return c
        return None

    def terminate(self, key: str, uid: str, grace: float):
        """Graceful deletion requested through the API (deletionTimestamp is already set)."""
        rt = self.runtime(uid)
        if rt is not None and rt.thread.is_alive():
            rt.request(("terminate", grace))
        else:
            delay = min(grace, self.settings.static_termination_seconds)
            self.timers.call_later(delay, lambda: self.remove_pod(key, uid))

    def kill(self, uid: str):
        """The object is already gone (immediate deletion): stop everything now, no status writes."""
        with self.lock:
            rt = self.runtimes.pop(uid, None)
        if rt is not None:
            rt.request(("kill",))

    def evict(self, key: str, uid: str, message: str | None = None):
        rt = self.runtime(uid)
        if rt is not None and rt.thread.is_alive():
            rt.request(("evict", message or EVICT_MSG.format(c=rt.apps[0].name if rt.apps else "main")))
            return
        self.cluster.api.finish_static_pod(
            key,
            uid,
            phase="Failed",
            reason="Evicted",
            message=message or EVICT_MSG.format(c="main"),
            evicted=True,
        )

    def complete_later(self, key: str, uid: str, seconds: float, exit_code: int = 0):
        self.timers.call_later(
            seconds,
            lambda: self.cluster.api.finish_static_pod(
                key, uid, phase="Succeeded" if exit_code == 0 else "Failed", exit_code=exit_code
            ),
        )

    def preempt(self, key: str, uid: str):
        self.cluster.scheduler.preempt_pod(key, uid, preemptor=None)

    def remove_pod(self, key: str, uid: str):
        with self.store.lock:
            v = self.store.current("pods", key)
            if v is not None and v.info.uid == uid:
                self.store.remove("pods", key)
        with self.lock:
            rt = self.runtimes.get(uid)
            if rt is not None:
                rt.gone = True
                if not rt.thread.is_alive():
                    self.runtimes.pop(uid, None)

    def shutdown(self):
        with self.lock:
            rts = list(self.runtimes.values())
            self.runtimes.clear()
        for rt in rts:
            rt.request(("kill",))
        self.registry.kill_all(grace=1.0)
        self.timers.clear()

    def live_processes(self) -> list[int]:
        return sorted(self.registry.pids)


def _q(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"
