"""Simulated kubelet: one PodRuntime thread per bound pod walks the real lifecycle (sandbox, image pull,
init containers, containers, termination) and writes the pod status the way the kubelet does.

Pods created already running by the control API ("static" pods: user workloads that only need to exist)
have no runtime; their completion, eviction and deletion are done by timers here. Either way a deleted pod
disappears only once the kubelet of a Ready node has confirmed it: on a NotReady node it stays Terminating.
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

from .resources import TERMINAL_PHASES
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
from .util import jcopy, rfc3339

log = logging.getLogger("k8s_emulator.kubelet")

KUBELET_ACTIONS = ACTIONS - {"never_schedule"}
DEADLINE_MSG = "Pod was active on the node longer than the specified deadline"
EVICT_MSG = ("The node was low on resource: memory. Threshold quantity: 100Mi, available: 51200Ki. Container {c} "
             "was using 1894332Ki, request is 0, has larger consumption of memory. ")
SCRIPT_DEFAULTS = {"exit": (0, 0.0, ""), "crash": (139, 0.2, "Segmentation fault (core dumped)"), "oom": (137, 0.2, "")}


class Timers:
    """One thread running delayed callbacks (static pod deletions and completions)."""

    def __init__(self):
        self._heap, self._seq, self._cv, self._stopped = [], itertools.count(), threading.Condition(), False
        threading.Thread(target=self._loop, daemon=True, name="timers").start()

    def call_later(self, delay: float, fn):
        with self._cv:
            heapq.heappush(self._heap, (time.monotonic() + max(0.0, delay), next(self._seq), fn))
            self._cv.notify()

    def clear(self, stop: bool = False):
        with self._cv:
            self._heap.clear()
            self._stopped = stop
            self._cv.notify()

    def _loop(self):
        while True:
            with self._cv:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cv.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                if self._stopped:
                    return
                fn = heapq.heappop(self._heap)[2]
            try:
                fn()
            except Exception:
                log.exception("timer callback failed")


def normalize_image(image: str) -> str:
    first = image.split("/")[0]
    if "/" not in image:
        image = "docker.io/library/" + image
    elif "." not in first and ":" not in first and first != "localhost":
        image = "docker.io/" + image
    return image if "@" in image or ":" in image.rsplit("/", 1)[-1] else image + ":latest"


def _ip(node: str, fmt: str) -> str:
    h = int(hashlib.md5(node.encode()).hexdigest()[:4], 16)
    return fmt.format(h >> 8, h & 255 or 1, (h >> 8) % 200 + 20)


class PodRuntime:
    def __init__(self, kubelet: Kubelet, key: str, pod: dict):
        self.k, self.key = kubelet, key
        meta, spec = pod["metadata"], pod["spec"]
        self.uid, self.name, self.namespace, self.node = meta["uid"], meta["name"], meta["namespace"], spec["nodeName"]
        self.grace_default = int(spec.get("terminationGracePeriodSeconds", 30))
        self.deadline_s = spec.get("activeDeadlineSeconds")
        self.cv = threading.Condition()
        self.stop = None  # None | ("terminate", grace) | ("kill",) | ("evict", msg) | ("deadline",)
        self.delete_requested = self.gone = self.sandbox_ready = False
        self.phase, self.pod_reason, self.pod_message = "Pending", None, None
        self.start_time = self.pod_ip = self.host_ip = self.script = None
        self.inits, self.apps, self._transitions = [], [], {}
        self.pod_dir = os.path.join(kubelet.state_dir, "pods", f"{self.namespace}_{self.name}_{self.uid[:8]}")
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"pod-{self.name}")

    def request(self, stop):
        with self.cv:  # a kill wins over anything; a shorter grace wins over a longer one
            if self.stop is None or stop[0] == "kill" or (stop[0] == self.stop[0] == "terminate" and stop[1] < self.stop[1]):
                self.stop = stop
            self.gone |= stop[0] == "kill"
            self.delete_requested |= stop[0] == "terminate"  # even while an eviction or deadline is underway
            self.cv.notify_all()

    def changed(self):
        with self.cv:
            self.cv.notify_all()

    def _wait(self, timeout: float | None, until=None) -> bool:
        """Wait up to timeout (None = forever) for a stop request or until(); True if a stop is pending."""
        end = None if timeout is None else time.monotonic() + timeout
        with self.cv:
            while self.stop is None and not (until and until()):
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    break
                deadline = None if self.deadline_s is None or self.start_time is None else \
                    self.start_time + float(self.deadline_s) - time.time()
                if deadline is not None and deadline <= 0:
                    self.stop = ("deadline",)
                    break
                self.cv.wait(max(min(x for x in (left, deadline, 1.0) if x is not None), 0.001))
            return self.stop is not None

    def _wait_plain(self, seconds: float):
        with self.cv:
            self.cv.wait_for(lambda: self.stop and self.stop[0] == "kill", timeout=seconds)

    def event(self, reason, message, type_="Normal", c=None):
        v = self.k.store.current("pods", self.key)
        if v is not None and v.info.uid == self.uid:
            fp = f"spec.{'initContainers' if c.init else 'containers'}{{{c.name}}}" if c else None
            self.k.events.emit(v.obj(), reason, message, type_=type_, host=self.node, field_path=fp)

    # ------------------------------------------------------------ status
    def _cond(self, type_, status, reason=None, message=None):
        prev = self._transitions.get(type_)
        self._transitions[type_] = (status, prev[1] if prev and prev[0] == status else rfc3339())
        return {"type": type_, "status": status, "lastProbeTime": None, "lastTransitionTime": self._transitions[type_][1],
                **({"reason": reason} if reason else {}), **({"message": message} if message else {})}

    def _cstatus(self, c) -> dict:
        if c.state == "waiting":
            state = {"waiting": {"reason": c.waiting_reason,
                                 **({"message": c.waiting_message} if c.waiting_message else {})}}
        else:
            state = {"running": {"startedAt": rfc3339(c.started_at)}} if c.state == "running" else \
                {"terminated": c.terminated_dict()}
        image = normalize_image(c.image)
        digest = hashlib.sha256(c.image.encode()).hexdigest()
        return {"name": c.name, "state": state, "lastState": {}, "ready": c.state == "running" and not c.init,
                "restartCount": 0, "image": image,
                "imageID": f"{image.rsplit(':', 1)[0]}@sha256:{digest}" if c.started_at else "",
                **({"containerID": c.container_id} if c.container_id else {}), "started": c.state == "running"}

    def compose_status(self, current: dict) -> dict:
        kept = {c["type"]: c for c in current.get("conditions") or []
                if c.get("type") in ("PodScheduled", "DisruptionTarget")}
        pending_init = [c.name for c in self.inits if not (c.state == "terminated" and c.exit_code == 0)]
        unready = [c.name for c in self.apps if c.state != "running"]
        completed = self.phase in TERMINAL_PHASES
        conds = [self._cond("PodReadyToStartContainers", "True" if self.sandbox_ready and not completed else "False"),
                 self._cond("Initialized", "False", "ContainersNotInitialized",
                            f"containers with incomplete status: [{' '.join(pending_init)}]") if pending_init else
                 self._cond("Initialized", "True")]
        for t in ("Ready", "ContainersReady"):
            conds.append(self._cond(t, "False", "PodCompleted") if completed else self._cond(
                t, "False", "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]") if unready
                else self._cond(t, "True"))
        st = {"phase": self.phase, "conditions": [kept[t] for t in ("DisruptionTarget",) if t in kept] + conds +
              [kept[t] for t in ("PodScheduled",) if t in kept]}
        if self.pod_reason:
            st["reason"], st["message"] = self.pod_reason, self.pod_message
        if self.host_ip:
            st["hostIP"], st["hostIPs"] = self.host_ip, [{"ip": self.host_ip}]
        if self.pod_ip and self.sandbox_ready:  # the IP shows once the sandbox exists
            st["podIP"], st["podIPs"] = self.pod_ip, [{"ip": self.pod_ip}]
        if self.start_time:
            st["startTime"] = rfc3339(self.start_time)
        if self.inits:
            st["initContainerStatuses"] = [self._cstatus(c) for c in self.inits]
        st["containerStatuses"] = [self._cstatus(c) for c in self.apps]
        st["qosClass"] = current.get("qosClass", "BestEffort")
        return st

    def push(self):
        with self.k.store.lock:
            v = self.k.store.current("pods", self.key)
            if self.gone or v is None or v.info.uid != self.uid:
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
            if self.gone:  # keep the runtime (logs stay readable) until the object is gone
                self.k.forget(self.uid)

    def _lifecycle(self):
        while not self.k.node_ready(self.node):  # nothing happens before the node's kubelet is up
            if self._wait(0.5):
                return self._finish()
        v = self.k.store.current("pods", self.key)
        if v is None or v.info.uid != self.uid:
            return
        pod = v.obj()
        self.script = self.k.simulated.get(self.uid) or self.k.scripts.match(
            self.node, pod["metadata"].get("labels") or {}, self.uid, KUBELET_ACTIONS)
        action = (self.script or {}).get("action", "exec")
        self.start_time, self.host_ip = time.time(), self.k.host_ip(self.node)
        self.pod_ip = self.k.allocate_ip(self.node, loopback=action == "exec")
        self._build_containers(pod)
        self.push()
        if action == "never_start":
            self._wait(None)
            return self._finish()
        if not self._simulate and self.stop is None and not self._prepare_volumes(pod):
            return self._finish()
        self.sandbox_ready = True
        self.push()
        for c in self.inits:  # one after the other; a failed init container fails the pod (no restarts here)
            if not self._pull(c):
                return self._finish()
            self._start(c)
            self.push()
            if self._wait(None, until=c.done.is_set) or c.exit_code != 0:
                return self._finish()
            self.push()
        for c in self.apps:
            if not self._pull(c):
                return self._finish()
            self._start(c)
        # Running once every container was created (one in CreateContainerConfigError keeps the pod Pending)
        self.phase = "Running" if all(c.state != "waiting" for c in self.apps) else "Pending"
        self.push()
        ended = lambda: sum(c.state == "terminated" for c in self.apps)  # noqa: E731
        while self.stop is None and not all(c.state == "terminated" for c in self.apps):
            seen = ended()
            self._wait(3600, until=lambda: ended() != seen)
            self.push()  # a container ended while others may still run
        self._finish()

    def _build_containers(self, pod):
        spec, s = pod["spec"], self.script or {}
        action = s.get("action", "exec")
        self._simulate = action != "exec"
        for init, specs in ((True, spec.get("initContainers") or []), (False, spec.get("containers") or [])):
            for i, cs in enumerate(specs):
                if not self._simulate:
                    c = self.k.exec_container(self, pod, cs, init)
                elif init:
                    c = SimContainer(cs, init, self.changed, run_seconds=0)
                elif i > 0 or action in ("never_start", "run"):
                    # side containers of a scripted pod live as long as its scripted main container
                    run = s.get("run_seconds", None if action == "run" else 0.2)
                    c = SimContainer(cs, init, self.changed, run_seconds=None if run is None else float(run),
                                     log=s.get("log", "") if i == 0 else "")
                else:
                    code, run, text = SCRIPT_DEFAULTS[action]
                    c = SimContainer(cs, init, self.changed, exit_code=int(s.get("exit_code", code)),
                                     run_seconds=float(s.get("run_seconds", run)), log=s.get("log", text),
                                     termination_message=s.get("termination_message", ""), oom=action == "oom")
                if not init and spec.get("initContainers"):
                    c.waiting_reason = "PodInitializing"
                (self.inits if init else self.apps).append(c)

    def _pull(self, c) -> bool:
        policy, pulled = c.spec.get("imagePullPolicy", "IfNotPresent"), self.k.pulled.setdefault(self.node, set())
        if policy == "Never" or (policy == "IfNotPresent" and c.image in pulled):
            self.event("Pulled", f'Container image "{c.image}" already present on machine', c=c)
            return True
        self.event("Pulling", f'Pulling image "{c.image}"', c=c)
        t0 = time.monotonic()
        if self._wait(self.k.settings.startup_delay):
            return False
        took = time.monotonic() - t0
        pulled.add(c.image)
        self.event("Pulled", f'Successfully pulled image "{c.image}" in {took:.3f}s ({took:.3f}s including '
                             "waiting). Image size: 52428800 bytes.", c=c)
        return True

    def _start(self, c):
        if c.config_error:
            c.waiting_reason, c.waiting_message = "CreateContainerConfigError", c.config_error
            return self.event("Failed", f"Error: {c.config_error}", "Warning", c)
        self.event("Created", f"Created container: {c.name}", c=c)
        c.start()
        if c.reason == "StartError":
            self.event("Failed", f"Error: {c.message}", "Warning", c)
        else:
            self.event("Started", f"Started container {c.name}", c=c)

    def _prepare_volumes(self, pod) -> bool:
        while (missing := self.k.missing_configmap(pod)) is not None:
            self.event("FailedMount", f'MountVolume.SetUp failed for volume "{missing[0]}" : configmap '
                                      f'"{missing[1]}" not found', "Warning")
            if self._wait(1.0):
                return False
            v = self.k.store.current("pods", self.key)
            if v is None or v.info.uid != self.uid:
                return False
            self.inits, self.apps = [], []
            self._build_containers(v.obj())  # again: the ConfigMap may exist now
        return True

    def _kill_all(self, grace: float):
        running = [c for c in self.inits + self.apps if c.state == "running"]
        for c in running:
            if not self.gone:
                self.event("Killing", f"Stopping container {c.name}", c=c)
            c.signal(signal.SIGTERM if grace > 0 else signal.SIGKILL)
        end = time.monotonic() + grace
        with self.cv:
            while time.monotonic() < end and any(c.state == "running" for c in running):
                self.cv.wait(max(min(0.1, end - time.monotonic()), 0.001))
        for c in running:
            if c.state == "running":
                c.signal(signal.SIGKILL)
        for c in running:
            c.done.wait(5)

    def _finish(self):
        kind = (self.stop or (None,))[0]
        if kind == "kill":
            return self._kill_all(0)
        if kind == "terminate":
            if not any(c.state == "running" for c in self.inits + self.apps):  # only the sandbox to tear down
                self._wait_plain(min(float(self.stop[1]), self.k.settings.static_termination_seconds))
            self._kill_all(float(self.stop[1]))
        elif kind == "evict":
            self.pod_reason, self.pod_message = "Evicted", self.stop[1]
            with self.k.store.lock:
                if (v := self.k.store.current("pods", self.key)) is not None and v.info.uid == self.uid:
                    self.k.cluster.api.add_condition(self.key, v, "DisruptionTarget", "TerminationByKubelet", self.stop[1])
            self.event("Evicted", self.stop[1], "Warning")
            self._kill_all(0)
        elif kind == "deadline":
            self.pod_reason, self.pod_message = "DeadlineExceeded", DEADLINE_MSG
            self.event("DeadlineExceeded", DEADLINE_MSG, "Warning")
            self._kill_all(min(self.grace_default, 2))
        ok = bool(self.apps) and all(c.state == "terminated" and c.exit_code == 0 for c in self.apps)
        self.phase = "Succeeded" if ok and kind in (None, "terminate") else "Failed"
        self.push()
        if kind == "terminate" or self.delete_requested:
            self.k.confirm_deletion(self.key, self.uid)


class Kubelet:
    def __init__(self, cluster):
        self.cluster, self.store, self.events = cluster, cluster.store, cluster.events
        self.scripts, self.settings, self.state_dir = cluster.scripts, cluster.settings, cluster.state_dir
        self.lock = threading.Lock()
        self.runtimes: dict[str, PodRuntime] = {}
        self.timers = Timers()
        self.registry = ProcessRegistry(os.path.join(self.state_dir, "pids"))
        self.pulled: dict[str, set] = {}
        self.simulated: dict[str, dict] = {}  # uid -> script for control-API user pods
        self._ips: dict[str, int] = {}
        self.shim_dir = os.path.join(self.state_dir, "bin")
        self.write_shims()

    def write_shims(self):
        os.makedirs(self.shim_dir, exist_ok=True)
        for name, target in self.settings.executables.items():
            if "/" not in name:
                path = os.path.join(self.shim_dir, name)
                with open(path, "w") as f:
                    f.write(f'#!/bin/sh\nexec "{target}" "$@"\n')
                os.chmod(path, 0o755)

    def node_ready(self, node: str) -> bool:
        v = self.store.current("nodes", node)
        return v is not None and v.info.ready == "True"

    def host_ip(self, node: str) -> str:
        v = self.store.current("nodes", node)
        ips = [a.get("address") for a in (v.obj().get("status") or {}).get("addresses") or [] if
               a.get("type") == "InternalIP"] if v else []
        return ips[0] if ips else _ip(node, "10.0.{0}.{1}")

    def allocate_ip(self, node: str, *, loopback: bool = False) -> str:
        """The pod's IP, from the node's pod CIDR (10.x.y.0/24). A pod run as a local process (exec mode)
        shares the host's network: it gets a loopback address (127.x.y.n) instead, which reaches whatever
        it listens on at 0.0.0.0, so one pod can connect to another by its status.podIP, as on a cluster."""
        with self.lock:
            n = self._ips[node] = self._ips.get(node, 1) % 250 + 1
        return _ip(node, "127.{2}.{1}." if loopback else "10.{2}.{1}.") + str(n + 1)

    def missing_configmap(self, pod) -> tuple[str, str] | None:
        ns = pod["metadata"]["namespace"]
        return next(((vol["name"], cm.get("name")) for vol in pod["spec"].get("volumes") or []
                     if (cm := vol.get("configMap")) and not cm.get("optional")
                     and self.store.current("configmaps", f"{ns}/{cm.get('name')}") is None), None)

    def pvc_dir(self, claim: str) -> str:
        path = self.settings.pvc_dirs.get(claim) or os.path.join(self.state_dir, "pvc", claim)
        os.makedirs(path, exist_ok=True)
        return path

    def exec_container(self, rt: PodRuntime, pod: dict, cs: dict, init: bool) -> ExecContainer:
        ns = pod["metadata"]["namespace"]
        vols = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        mapping, parents = {}, {}
        for m in cs.get("volumeMounts") or []:
            host = self._volume_dir(rt, pod, vols.get(m.get("name"), {}))
            if m.get("subPath"):
                volume_root, sub = host, m["subPath"].strip("/")
                host = os.path.join(host, m["subPath"])
                os.makedirs(host, exist_ok=True)
                # A container sees the parent directories of its mount points. When the subPath sits
                # at the same relative place as in the volume (<dir>/<sub> mounted at <root>/<sub>),
                # paths through that parent resolve: map the parent to the volume root.
                mount = m["mountPath"].rstrip("/")
                if sub and mount.endswith("/" + sub) and len(mount) > len(sub) + 1:
                    parents.setdefault(mount[: -len(sub) - 1], volume_root)
            mapping[m["mountPath"]] = host
        for parent, root in parents.items():
            mapping.setdefault(parent, root)
        os.makedirs(rt.pod_dir, exist_ok=True)
        term_file = os.path.join(rt.pod_dir, f"{cs['name']}.termination-log")
        open(term_file, "w").close()
        mapping[cs.get("terminationMessagePath") or "/dev/termination-log"] = term_file
        paths = PathMap(mapping)
        cm = lambda name: self.store.current("configmaps", f"{ns}/{name}")  # noqa: E731
        env, error = {}, None
        for src in cs.get("envFrom") or []:
            ref = src.get("configMapRef") or src.get("secretRef") or {}
            v = cm(ref.get("name")) if "configMapRef" in src else None
            if v is None and not ref.get("optional"):
                error = f'{"configmap" if "configMapRef" in src else "secret"} "{ref.get("name")}" not found'
            env.update({src.get("prefix", "") + k: val for k, val in ((v.obj().get("data") or {}) if v else {}).items()})
        runtime_pod = {**pod, "status": {**(pod.get("status") or {}), "podIP": rt.pod_ip or "", "hostIP": rt.host_ip or ""}}
        for e in cs.get("env") or []:
            vf = e.get("valueFrom")
            if vf is None:
                env[e["name"]] = expand(e.get("value", ""), env)
            elif "fieldRef" in vf:
                env[e["name"]] = field_ref(runtime_pod, vf["fieldRef"].get("fieldPath", ""))
            elif "configMapKeyRef" in vf:
                ref = vf["configMapKeyRef"]
                v = cm(ref.get("name"))
                data = (v.obj().get("data") or {}) if v else {}
                if ref.get("key") in data:
                    env[e["name"]] = data[ref["key"]]
                elif not ref.get("optional"):
                    error = f'configmap "{ref.get("name")}" not found' if v is None else \
                        f"couldn't find key {ref.get('key')} in ConfigMap {ns}/{ref.get('name')}"
            elif "secretKeyRef" in vf and not vf["secretKeyRef"].get("optional"):
                error = f'secret "{vf["secretKeyRef"].get("name")}" not found'
        env = {k: paths.rewrite(v) for k, v in env.items()}
        # an exec script's own environment (a node's own tools on PATH, e.g. one that reports a fault):
        # host paths already, never rewritten as the container's mount paths are (/tmp may be one)
        if (rt.script or {}).get("action") == "exec":
            env.update((rt.script or {}).get("env") or {})
        argv = [paths.rewrite(expand(a, env)) for a in (cs.get("command") or []) + (cs.get("args") or [])]
        if argv:
            exe = self.settings.executables
            argv[0] = exe.get(argv[0]) or exe.get(os.path.basename(argv[0])) or argv[0]
        # the host's, not the container's: where the host's Python keeps compiled modules (make .venv fills it;
        # without it a fresh clone's first pods compile torch again) and how the host reads time and text
        proc_env = {k: os.environ[k] for k in ("HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "PYTHONPYCACHEPREFIX")
                    if k in os.environ}
        proc_env.update({**self.settings.exec_env, "HOSTNAME": pod["metadata"]["name"], **env})
        proc_env["PATH"] = self.shim_dir + os.pathsep + (env.get("PATH") or self.settings.exec_env.get("PATH")
                                                         or os.environ.get("PATH", "/usr/bin:/bin"))
        wd = cs.get("workingDir")
        cwd = paths.rewrite(wd) if wd else None
        if not cwd or cwd == wd:
            cwd = os.path.join(rt.pod_dir, "rootfs", (wd or "").lstrip("/"))
        os.makedirs(cwd, exist_ok=True)
        c = ExecContainer(cs, init, rt.changed, argv=argv, env=proc_env, cwd=cwd, term_file=term_file,
                          registry=self.registry)
        c.config_error = error
        return c

    def _volume_dir(self, rt: PodRuntime, pod: dict, vol: dict) -> str:
        if "persistentVolumeClaim" in vol:
            return self.pvc_dir(vol["persistentVolumeClaim"].get("claimName", vol.get("name")))
        if "hostPath" in vol:
            path = os.path.join(self.state_dir, "nodes", rt.node, "hostpath", vol["hostPath"].get("path", "").lstrip("/"))
        else:
            path = os.path.join(rt.pod_dir, "volumes", vol.get("name", "unknown"))
        os.makedirs(path, exist_ok=True)
        if "configMap" in vol:
            v = self.store.current("configmaps", f"{pod['metadata']['namespace']}/{vol['configMap'].get('name')}")
            if v is not None:
                materialize_configmap(v.obj(), vol["configMap"], path)
        return path

    # ------------------------------------------------------------ lifecycle entry points
    def adopt(self, key: str, pod: dict):
        with self.lock:
            if pod["metadata"]["uid"] in self.runtimes:
                return
            rt = self.runtimes[pod["metadata"]["uid"]] = PodRuntime(self, key, pod)
        rt.thread.start()

    def forget(self, uid: str):
        with self.lock:
            self.runtimes.pop(uid, None)

    def container(self, uid: str, name: str):
        with self.lock:
            rt = self.runtimes.get(uid)
        return next((c for c in rt.inits + rt.apps if c.name == name), None) if rt else None

    def terminate(self, key: str, uid: str, grace: float):
        """Graceful deletion requested through the API (deletionTimestamp is already set)."""
        with self.lock:
            rt = self.runtimes.get(uid)
        if rt is not None and rt.thread.is_alive():
            rt.request(("terminate", grace))
        else:
            self.timers.call_later(min(grace, self.settings.static_termination_seconds),
                                   lambda: self.confirm_deletion(key, uid))

    def confirm_deletion(self, key: str, uid: str):
        """The kubelet's final delete (grace period 0). A kubelet on a node that is not Ready cannot send
        it: the pod stays Terminating until the node is back."""
        with self.store.lock:
            v = self.store.current("pods", key)
            if v is not None and v.info.uid == uid:
                if not self.node_ready(v.info.node):
                    return self.timers.call_later(0.5, lambda: self.confirm_deletion(key, uid))
                self.store.remove("pods", key)
        with self.lock:
            rt = self.runtimes.get(uid)
            if rt is not None:
                rt.gone = True
                if not rt.thread.is_alive():
                    self.runtimes.pop(uid, None)

    def kill(self, uid: str):
        """The object is already gone (immediate deletion): stop everything now, no status writes."""
        with self.lock:
            rt = self.runtimes.pop(uid, None)
        if rt is not None:
            rt.request(("kill",))

    def evict(self, key: str, uid: str, message: str | None = None):
        with self.lock:
            rt = self.runtimes.get(uid)
        if rt is not None and rt.thread.is_alive():
            return rt.request(("evict", message or EVICT_MSG.format(c=rt.apps[0].name if rt.apps else "main")))
        self.finish_static_pod(key, uid, 137, message or EVICT_MSG.format(c="main"))

    def complete_later(self, key: str, uid: str, seconds: float):
        self.timers.call_later(seconds, lambda: self.finish_static_pod(key, uid, 0))

    def finish_static_pod(self, key: str, uid: str, exit_code: int, evicted: str | None = None, *,
                          reason: str | None = None, message: str | None = None):
        """A static (runtime-less) pod ends: Succeeded/Failed, or Failed/Evicted by node pressure. ``reason`` and
        ``message``: its container's termination reason (default Completed / Error) and message (what the
        container wrote to its termination-log)."""
        with self.store.lock:
            v = self.store.current("pods", key)
            if v is None or v.info.uid != uid or v.info.terminal:
                return
            if evicted:
                v = self.cluster.api.add_condition(key, v, "DisruptionTarget", "TerminationByKubelet", evicted)
            pod, now = jcopy(v.obj()), rfc3339()
            st = pod.setdefault("status", {})
            st["phase"] = "Succeeded" if exit_code == 0 else "Failed"
            if evicted:
                st["reason"], st["message"] = "Evicted", evicted
            for cs in st.get("containerStatuses") or []:
                started = ((cs.get("state") or {}).get("running") or {}).get("startedAt") or now
                cs["state"] = {"terminated": {"exitCode": exit_code,
                                              "reason": reason or ("Completed" if exit_code == 0 else "Error"),
                                              **({"message": message} if message else {}),
                                              "startedAt": started, "finishedAt": now,
                                              **({"containerID": cs["containerID"]} if cs.get("containerID") else {})}}
                cs["ready"] = cs["started"] = False
            st["conditions"] = [c for c in st.get("conditions") or [] if c.get("type") not in ("Ready", "ContainersReady")]
            st["conditions"] += [{"type": t, "status": "False", "lastProbeTime": None, "lastTransitionTime": now,
                                  "reason": "PodCompleted"} for t in ("Ready", "ContainersReady")]
            self.store.put("pods", key, pod)
            if evicted:
                self.events.emit(pod, "Evicted", evicted, type_="Warning", host=v.info.node)

    def shutdown(self):
        with self.lock:
            rts = list(self.runtimes.values())
            self.runtimes.clear()
        for rt in rts:
            rt.request(("kill",))
        self.registry.kill_all(grace=1.0)
        self.timers.clear()
