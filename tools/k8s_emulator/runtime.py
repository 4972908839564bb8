"""What runs "inside" a container: a local process (exec mode) or a simulation (scripted mode).

Exec mode maps the pod's filesystem view onto host directories: every volumeMount's mountPath and the
terminationMessagePath are rewritten to host paths wherever they appear in args, env values and workingDir
(as whole words: "/data/x", "--out=/data/x", "a:/data/x", inside "bash -c '...'"). The first word of the
command goes through the executable map ("python" -> the test's interpreter), and a shim directory with the
same names is put first on PATH so shell commands find them too.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import threading
import time

from .logs import LogBuffer
from .util import new_uid

TERM_MSG_MAX = 4096  # kubelet: at most 4096 bytes of the termination-message file
FALLBACK_LINES, FALLBACK_BYTES = 80, 2048  # FallbackToLogsOnError: last 80 lines / 2048 bytes


class PathMap:
    def __init__(self, mapping: dict[str, str]):
        self.mapping = {k.rstrip("/") or "/": v for k, v in mapping.items() if k}
        alts = sorted(self.mapping, key=len, reverse=True)
        self._re = (
            re.compile(
                r"(?<![\w.\-/])(" + "|".join(re.escape(a) for a in alts) + r")(?=/|$|[\s\"'`;:,)=|&>])"
            )
            if alts
            else None
        )

    def rewrite(self, text: str) -> str:
        if not self._re or not isinstance(text, str):
            return text
        return self._re.sub(lambda m: self.mapping[m.group(1)], text)


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


def expand(text: str, env: dict) -> str:
    """Kubernetes $(VAR) expansion in command/args/env ($$ escapes a literal $)."""

    def sub(m):
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _VAR.sub(sub, text) if isinstance(text, str) else text


def field_ref(pod: dict, path: str) -> str:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
        "status.podIPs": status.get("podIP"),
    }
    if path in simple:
        return simple[path] or ""
    m = re.match(r"metadata\.(labels|annotations)\['(.+)'\]$", path)
    if m:
        return (meta.get(m.group(1)) or {}).get(m.group(2), "")
    return ""


def materialize_configmap(cm: dict, vol: dict, target: str):
    """Write a ConfigMap volume's files (honouring items/mode) under target."""
    os.makedirs(target, exist_ok=True)
    data = dict(cm.get("data") or {})
    binary = {k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()}
    default_mode = vol.get("defaultMode", 0o644)
    items = vol.get("items")
    entries = (
        [(i["key"], i["path"], i.get("mode", default_mode)) for i in items]
        if items
        else [(k, k, default_mode) for k in list(data) + list(binary)]
    )
    for key, rel, mode in entries:
        if key not in data and key not in binary:
            continue
        path = os.path.join(target, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(binary[key] if key in binary else data[key].encode())
        os.chmod(path, mode)


class Container:
    """State of one container, shared by both modes. The owning PodRuntime reads it under its lock."""

    def __init__(self, spec: dict, init: bool, on_change):
        self.spec, self.init, self.on_change = spec, init, on_change
        self.name = spec["name"]
        self.image = spec.get("image", "")
        self.log = LogBuffer()
        self.state = "waiting"
        self.waiting_reason, self.waiting_message = "ContainerCreating", ""
        self.started_at = self.finished_at = None
        self.exit_code = None
        self.reason = self.message = ""
        self.restart_count = 0
        self.last_state: dict = {}
        self.container_id = ""
        self.oom = False
        self.done = threading.Event()
        self.killed_by_signal = False

    # interface
    def start(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def signal(self, sig: int):  # pragma: no cover - abstract
        raise NotImplementedError

    def _running(self):
        self.state, self.started_at = "running", time.time()
        self.container_id = "containerd://" + new_uid().replace("-", "") + new_uid().replace("-", "")[:32]
        self.on_change()

    def _terminated(self, code: int, reason: str | None = None, message: str = ""):
        self.exit_code = code
        self.reason = reason or ("Completed" if code == 0 else ("OOMKilled" if self.oom else "Error"))
        self.message = message
        self.finished_at = time.time()
        self.state = "terminated"
        self.log.close()
        self.done.set()
        self.on_change()

    def reset_for_restart(self):
        self.last_state = {"terminated": self.terminated_dict()}
        self.restart_count += 1
        self.log = LogBuffer()
        self.done = threading.Event()
        self.state, self.waiting_reason, self.waiting_message = (
            "waiting",
            "CrashLoopBackOff",
            f"back-off restarting failed container {self.name}",
        )
        self.exit_code = None

    def terminated_dict(self) -> dict:
        d = {"exitCode": self.exit_code, "reason": self.reason}
        if self.message:
            d["message"] = self.message
        d["startedAt"] = _ts(self.started_at)
        d["finishedAt"] = _ts(self.finished_at)
        if self.container_id:
            d["containerID"] = self.container_id
        return d


def _ts(t):
    from .util import rfc3339

    return rfc3339(t) if t else None


class SimContainer(Container):
    """Scripted container: prints its log, runs for run_seconds (None = forever), exits with exit_code."""

    def __init__(
        self,
        spec,
        init,
        on_change,
        *,
        exit_code=0,
        run_seconds=0.0,
        log="",
        termination_message="",
        oom=False,
    ):
        super().__init__(spec, init, on_change)
        self.sim_exit_code, self.run_seconds, self.sim_log = exit_code, run_seconds, log
        self.termination_message, self.oom = termination_message, oom
        self._sig = threading.Event()
        self._sig_code = None

    def start(self):
        self._running()
        threading.Thread(target=self._run, daemon=True, name=f"sim-{self.name}").start()

    def _run(self):
        lines = self.sim_log if isinstance(self.sim_log, list) else str(self.sim_log or "").splitlines()
        for line in lines:
            self.log.write_line(str(line).encode())
        self._sig.wait(self.run_seconds)
        if self._sig_code is not None:
            self._terminated(self._sig_code)
            return
        msg = self.termination_message or ""
        if (
            not msg
            and self.sim_exit_code != 0
            and self.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError"
        ):
            msg = self.log.tail_bytes(FALLBACK_LINES, FALLBACK_BYTES)
        self._terminated(self.sim_exit_code, "OOMKilled" if self.oom else None, msg[:TERM_MSG_MAX])

    def signal(self, sig: int):
        if self.state == "running" and self._sig_code is None:
            self._sig_code = 128 + int(sig)  # a well-behaved process dies on SIGTERM too
            self.killed_by_signal = True
            self._sig.set()


class ExecContainer(Container):
    """A real local process. Its process group is ours to signal; stdout+stderr become the container log."""

    def __init__(self, spec, init, on_change, *, argv, env, cwd, term_file, registry):
        super().__init__(spec, init, on_change)
        self.argv, self.env, self.cwd, self.term_file, self.registry = argv, env, cwd, term_file, registry
        self.proc: subprocess.Popen | None = None

    def start(self):
        if not self.argv:
            # No command: the image entrypoint is unknown to us; act like an entrypoint that exits 0.
            self._running()
            self.log.write_line(b"[k8s-emulator] no command/args: image entrypoint not emulated, exiting 0")
            self._terminated(0)
            return
        try:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            self.started_at = time.time()
            msg = (
                f"failed to create containerd task: failed to create shim task: OCI runtime create failed: "
                f'runc create failed: unable to start container process: exec: "{self.argv[0]}": '
                f"{exc.strerror or exc}: unknown"
            )
            self._terminated(128, "StartError", msg)
            return
        self.registry.add(self.proc.pid)
        self._running()
        threading.Thread(target=self._pump, daemon=True, name=f"exec-{self.name}").start()

    def _pump(self):
        proc = self.proc

        def reap_group():
            # When PID 1 of a container exits, the rest of the container goes with it; a leftover child
            # holding stdout open would otherwise keep the container "running" forever.
            proc.wait()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

        threading.Thread(target=reap_group, daemon=True, name=f"reap-{self.name}").start()
        for line in iter(proc.stdout.readline, b""):
            self.log.write_line(line)
        code = proc.wait()
        proc.stdout.close()
        self.registry.discard(proc.pid)
        if code < 0:
            code = 128 - code  # killed by signal N -> 128+N, as containerd reports it
        msg = ""
        try:
            with open(self.term_file, "rb") as f:
                msg = f.read(TERM_MSG_MAX).decode("utf-8", "replace")
        except OSError:
            pass
        if not msg and code != 0 and self.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            msg = self.log.tail_bytes(FALLBACK_LINES, FALLBACK_BYTES)
        self._terminated(code, None, msg)

    def signal(self, sig: int):
        if self.proc is not None and self.proc.poll() is None:
            self.killed_by_signal = True
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass


class ProcessRegistry:
    """Live pod processes, mirrored as files under <state>/pids so the parent can reap them even if we die."""

    def __init__(self, directory: str):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self._lock = threading.Lock()
        self.pids: set[int] = set()

    def add(self, pid: int):
        with self._lock:
            self.pids.add(pid)
        open(os.path.join(self.dir, str(pid)), "w").close()

    def discard(self, pid: int):
        with self._lock:
            self.pids.discard(pid)
        try:
            os.unlink(os.path.join(self.dir, str(pid)))
        except OSError:
            pass

    def kill_all(self, grace: float = 1.0):
        with self._lock:
            pids = list(self.pids)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.killpg(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            deadline = time.time() + grace
            while sig == signal.SIGTERM and time.time() < deadline and any(_alive(p) for p in pids):
                time.sleep(0.05)
        for pid in pids:
            self.discard(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (child of ours not yet reaped) counts as dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False
