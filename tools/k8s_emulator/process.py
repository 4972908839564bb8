"""EmulatorProcess: start the emulator as a subprocess, wait until it serves, write a kubeconfig, offer the
control API as methods, and make sure nothing it started outlives it (process group, pid files, atexit,
and the emulator itself exits when its parent dies)."""

from __future__ import annotations

import atexit
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

TOOLS_DIR = str(pathlib.Path(__file__).resolve().parents[1])


class EmulatorError(RuntimeError):
    def __init__(self, code: int, body):
        super().__init__(f"emulator control call failed ({code}): {body}")
        self.code, self.body = code, body


def default_executables(python: str = sys.executable) -> dict:
    v = sys.version_info
    return {"python": python, "python3": python, f"python{v.major}.{v.minor}": python}


def write_kubeconfig(path: str, url: str, namespace: str = "default"):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"apiVersion: v1\nkind: Config\nclusters:\n- name: emulator\n  cluster:\n    server: {url}\n"
                f"users:\n- name: emulator\n  user: {{}}\ncontexts:\n- name: emulator\n  context:\n    cluster: emulator\n"
                f"    user: emulator\n    namespace: {namespace}\ncurrent-context: emulator\npreferences: {{}}\n")
    os.replace(tmp, path)


class EmulatorProcess:
    """with EmulatorProcess() as emu:
        emu.add_gpu_node("gpu-1"); kubernetes.config.load_kube_config(emu.kubeconfig_path)

    executables: first-word rewrites for exec mode ({"python": sys.executable, ...} unless map_python=False);
    pvc_dirs: claimName -> host dir (such a claim exists Bound in every namespace); exec_env: extra env for pod processes; settings: any cluster Settings
    field (startup_delay, scheduler_interval, kubernetes_version, ...).
    """

    def __init__(self, *, state_dir: str | None = None, executables: dict | None = None, map_python: bool = True,
                 pvc_dirs: dict | None = None, exec_env: dict | None = None, settings: dict | None = None,
                 python: str = sys.executable, startup_timeout: float = 30.0, verbose: bool = False,
                 kubeconfig_path: str | None = None):
        self._own_state_dir = state_dir is None
        self.state_dir = os.path.abspath(state_dir or tempfile.mkdtemp(prefix="k8s-emulator-"))
        self.settings = dict(settings or {})
        self.settings.setdefault("executables", {}).update({**(default_executables() if map_python else {}),
                                                            **(executables or {})})
        self.settings.setdefault("pvc_dirs", {}).update({k: os.path.abspath(v) for k, v in (pvc_dirs or {}).items()})
        self.settings.setdefault("exec_env", {}).update(exec_env or {})
        self.python, self.startup_timeout, self.verbose = python, startup_timeout, verbose
        self.kubeconfig_path = kubeconfig_path or os.path.join(self.state_dir, "kubeconfig")
        self.log_path = os.path.join(self.state_dir, "emulator.log")
        self.proc: subprocess.Popen | None = None
        self.url, self.port = "", 0

    # ------------------------------------------------------------ lifecycle
    def start(self) -> EmulatorProcess:
        os.makedirs(self.state_dir, exist_ok=True)
        port_file = os.path.join(self.state_dir, "port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        cmd = [self.python, "-m", "k8s_emulator", "serve", "--port", "0", "--port-file", port_file, "--state-dir",
               self.state_dir, "--parent-pid", str(os.getpid()), "--settings-json", json.dumps(self.settings),
               *(["--verbose"] if self.verbose else [])]
        env = dict(os.environ)
        env["PYTHONPATH"] = TOOLS_DIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        with open(self.log_path, "ab") as log:
            # own session: stop() can signal the emulator's whole group without touching ours
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        atexit.register(self.stop)
        deadline = time.monotonic() + self.startup_timeout
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                code = self.proc.poll()
                self.stop()
                raise RuntimeError(f"k8s_emulator did not start (exit {code}):\n{self.log_tail()}")
            time.sleep(0.02)
        with open(port_file) as f:
            self.port = int(f.read())
        self.url = f"http://127.0.0.1:{self.port}"
        write_kubeconfig(self.kubeconfig_path, self.url)
        self._call("GET", "health")
        return self

    def stop(self):
        proc, self.proc = self.proc, None
        if proc is None:
            return
        atexit.unregister(self.stop)
        if proc.poll() is None:
            _killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        _killpg(proc.pid, signal.SIGKILL)  # anything left in the emulator's group
        proc.wait()
        self.reap_pod_processes()

    def reap_pod_processes(self) -> list[int]:
        """Kill the pod processes recorded in <state>/pids (their own sessions): covers a killed emulator."""
        piddir, killed = os.path.join(self.state_dir, "pids"), []
        for name in os.listdir(piddir) if os.path.isdir(piddir) else []:
            if name.isdigit():
                _killpg(int(name), signal.SIGKILL)
                killed.append(int(name))
            try:
                os.unlink(os.path.join(piddir, name))
            except OSError:
                pass
        return killed

    def cleanup(self):
        """stop(), and remove the state dir if this object created it."""
        self.stop()
        if self._own_state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, *exc):
        # an own temp state dir goes away on a clean exit; after an error it stays for the post-mortem
        self.cleanup() if exc_type is None else self.stop()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def log_tail(self, n: int = 4000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    # ------------------------------------------------------------ HTTP
    def _call(self, method: str, path: str, body=None, query: dict | None = None, timeout: float = 120):
        url = f"{self.url}/_emulator/{path}"
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = raw.decode("utf-8", "replace")
            raise EmulatorError(exc.code, payload) from None

    def api_client(self):
        """A kubernetes.client.ApiClient on this emulator (from the kubeconfig written at start)."""
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=self.kubeconfig_path, client_configuration=cfg)
        return client.ApiClient(cfg)

    def core_v1(self):
        from kubernetes import client

        return client.CoreV1Api(self.api_client())

    # ------------------------------------------------------------ control API
    def configure(self, **settings) -> dict:
        return self._call("POST", "settings", settings)

    def add_gpu_node(self, name: str, gpus: int = 8, *, product: str = "NVIDIA-H100-80GB-HBM3", ready=True,
                     unschedulable: bool = False, taints: list | None = None, labels: dict | None = None, **extra) -> dict:
        """extra: cpu, memory, rdma, pods, annotations. gpus=0 makes a CPU-only node; ready=None a node that
        has just registered (no Ready condition, not-ready:NoSchedule taint)."""
        return self._call("POST", "nodes", {"name": name, "gpus": gpus, "product": product, "ready": ready,
                                            "unschedulable": unschedulable, "taints": taints, "labels": labels, **extra})

    def patch_node(self, name: str, **changes) -> dict:
        """changes: ready (True/False/"Unknown"), unschedulable, labels (None deletes a key), taints, gpus,
        allocatable_gpus (the device plugin withdrew some), conditions ([{type, status, reason, message}], as
        node-problem-detector sets them), reboot (True: a new bootID and the kubelet's Rebooted event)."""
        return self._call("PATCH", f"nodes/{name}", changes)

    def node_event(self, name: str, reason: str, message: str = "", *, type_: str = "Warning",
                   component: str = "kernel-monitor") -> dict:
        """An event on the node as node-problem-detector records one (the same again counts up)."""
        return self._call("POST", f"nodes/{name}/events", {"reason": reason, "message": message, "type": type_,
                                                           "component": component})

    def set_node_ready(self, name: str, ready=True) -> dict:
        return self.patch_node(name, ready=ready)

    def cordon(self, name: str, unschedulable: bool = True) -> dict:
        return self.patch_node(name, unschedulable=unschedulable)

    def add_user_pod(self, node: str | None, *, gpus: int = 8, kind: str = "Job", phase: str = "Running",
                     run_seconds: float | None = None, **extra) -> dict:
        """extra: name, namespace, labels, priority_class, image, cpu, memory."""
        return self._call("POST", "pods", {"node": node, "gpus": gpus, "kind": kind, "phase": phase,
                                           "run_seconds": run_seconds, **extra})

    def set_script(self, node: str = "*", action: str = "exit", *, labels: dict | None = None, once: bool = False,
                   **params) -> dict:
        return self._call("POST", "scripts", {"node": node, "action": action, "labels": labels, "once": once, **params})

    def clear_scripts(self, node: str | None = None):
        return self._call("DELETE", "scripts", query={"node": node})

    def scripts(self) -> list[dict]:
        return self._call("GET", "scripts")["items"]

    def evict(self, namespace: str, name: str, *, mode: str = "kubelet", message: str | None = None):
        """mode kubelet: node-pressure eviction (pod Failed, reason Evicted, stays);
        mode api: the Eviction API (DisruptionTarget, then graceful deletion)."""
        return self._call("POST", f"pods/{namespace}/{name}/evict", {"mode": mode, "message": message})

    def preempt(self, namespace: str, name: str, preemptor_uid: str | None = None):
        return self._call("POST", f"pods/{namespace}/{name}/preempt", {"preemptor": preemptor_uid})

    def complete_pod(self, namespace: str, name: str, exit_code: int = 0, *, reason: str | None = None,
                     message: str | None = None):
        """A simulated pod's container ends with ``exit_code`` (reason Completed/Error unless given; ``message``:
        its termination message): the pod is Succeeded or Failed."""
        return self._call("POST", f"pods/{namespace}/{name}/complete", {"exit_code": exit_code, "reason": reason,
                                                                        "message": message})

    def pod_history(self, label_selector: str | None = None, namespace: str | None = None) -> list[dict]:
        """Every pod created through the API or the control API (not bulk-loaded ones), with deleted
        (tombstones), deleted_at, deletion_requested, node, phase, reason and labels."""
        return self._call("GET", "history", query={"labelSelector": label_selector, "namespace": namespace})["items"]

    def live_pods(self, label_selector: str | None = None) -> list[dict]:
        return [p for p in self.pod_history(label_selector) if not p["deleted"]]

    def inject_faults(self, path: str, sequence: list, *, method: str | None = None, retry_after: int = 1,
                      message: str | None = None) -> dict:
        """The next requests to ``path`` (e.g. /api/v1/nodes; ``method`` narrows) answer the items of
        ``sequence`` in turn: 429 (Retry-After ``retry_after``), 500, 503, 504, "reset" (connection reset
        before handling) or "reset-after" (handled, then reset); then normally again. See faults.py."""
        return self._call("POST", "faults", {"path": path, "sequence": list(sequence), "method": method,
                                             "retry_after": retry_after, "message": message})

    def storm(self, verbs: list[str], resource: str | None = None, *, seconds: float, retry_after: int = 1,
              namespace: str | None = None) -> dict:
        """For ``seconds`` from now, every request of ``verbs`` (get, list, create, delete, ...) on
        ``resource`` ("pods", "pods/log"; None: any) answers API Priority and Fairness's 429 with
        ``Retry-After``. ``clear_faults`` ends it. See faults.py."""
        return self._call("POST", "storms", {"verbs": list(verbs), "resource": resource, "namespace": namespace,
                                             "seconds": seconds, "retry_after": retry_after})

    def storms(self) -> list[dict]:
        """The storms with their ``hits`` and ``remaining_s``."""
        return self._call("GET", "storms")["items"]

    def restart_apiserver(self, down_s: float = 5, forbidden_s: float = 3, *, wait: bool = False) -> dict:
        """Restart the API server as a kube-apiserver process restarts: at once, open connections are
        reset and new ones refused for ``down_s`` (the control API too: it is the same server); then
        for ``forbidden_s`` every resource request is refused 403 while /readyz fails; then normal. The
        cluster behind it (store, scheduler, kubelet and its pods) runs on. ``wait``: return once it
        serves again."""
        answer = self._call("POST", "restart", {"down_s": down_s, "forbidden_s": forbidden_s})
        if wait:
            time.sleep(down_s)
            self.wait_serving()
        return answer

    def wait_serving(self, timeout: float = 30.0) -> None:
        """Wait until the server accepts connections again (after ``restart_apiserver``)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._call("GET", "health", timeout=2)
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def faults(self) -> list[dict]:
        """The injected fault rules with their ``hits`` and ``remaining``."""
        return self._call("GET", "faults")["items"]

    def clear_faults(self):
        """Every injected fault: sequences, storms, an authorizer still starting after a restart."""
        return self._call("DELETE", "faults")

    def counters(self) -> dict:
        return self._call("GET", "counters")

    def api_calls(self) -> int:
        return self.counters()["total"]

    def reset_counters(self) -> dict:
        return self._call("POST", "counters/reset")

    def reset(self):
        return self._call("POST", "reset")

    def bulk_generate(self, nodes: int = 5000, pods: int = 150000, **params) -> dict:
        """params: seed, gpus_per_node, busy_share, terminal_share, pending_share, cordoned_share,
        notready_share, daemonsets_per_node, node_prefix, namespaces."""
        return self._call("POST", "bulk", {"nodes": nodes, "pods": pods, **params}, timeout=600)

    def set_pvc_dir(self, claim: str, path: str) -> dict:
        """Map a claim to a host dir; the claim then exists Bound in every namespace that lacks it."""
        return self._call("POST", "pvcs", {"claim": claim, "path": os.path.abspath(path)})

    def pvc_dir(self, claim: str) -> str:
        info = self._call("GET", "pvcs")
        return info["claims"].get(claim) or os.path.join(info["default_root"], claim)

    def compact(self):
        """Expire every open continue token (like an etcd compaction)."""
        return self._call("POST", "compact")

    def processes(self) -> list[int]:
        return self._call("GET", "processes")["pids"]

    def wait_for(self, predicate, timeout: float = 10.0, interval: float = 0.05, message: str = "condition"):
        """Poll predicate() until it returns a truthy value; returns it."""
        deadline = time.monotonic() + timeout
        while not (value := predicate()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {message}")
            time.sleep(interval)
        return value


def _killpg(pid: int, sig: int):
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
