"""What runs "inside" a container: a local process (exec mode) or a simulation (scripted mode), and the
container log buffer behind GET .../pods/NAME/log.

Exec mode maps the pod's filesystem view onto host directories: every volumeMount's mountPath and the
terminationMessagePath are rewritten to host paths wherever they appear in args, env values and workingDir
(as whole words: "/data/x", "--out=/data/x", "a:/data/x", inside "bash -c '...'"). The first word of the
command goes through the executable map ("python" -> the test's interpreter), and a shim directory with the
same names comes first on PATH so that shell commands find them too.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import threading
import time

from .util import new_uid, rfc3339, rfc3339_nano

TERM_MSG_MAX = 4096  # the kubelet reads at most 4096 bytes of the termination-message file
FALLBACK_LINES, FALLBACK_BYTES = 80, 2048  # FallbackToLogsOnError: the last 80 lines / 2048 bytes


class LogBuffer:
    """Timestamped lines, follow-able until the container ends (like the kubelet's CRI log files)."""

    def __init__(self):
        self._lines: list[tuple[float, bytes]] = []
        self._cond = threading.Condition()
        self.closed, self.size = False, 0

    def write_line(self, data: bytes):
        if data:
            data = data if data.endswith(b"\n") else data + b"\n"
            with self._cond:
                self._lines.append((time.time(), data))
                self.size += len(data)
                self._cond.notify_all()

    def close(self):
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def tail_bytes(self, max_lines: int, max_bytes: int) -> str:
        with self._cond:
            data = b"".join(d for _, d in self._lines[-max_lines:])
        return data[-max_bytes:].decode("utf-8", "replace")

    def _start(self, since, tail) -> int:
        start = next((i for i, (ts, _) in enumerate(self._lines) if ts >= since), len(self._lines)) if since else 0
        return max(start, len(self._lines) - tail) if tail is not None else start

    @staticmethod
    def _fmt(batch, timestamps: bool) -> bytes:
        return b"".join((rfc3339_nano(ts).encode() + b" " + d) if timestamps else d for ts, d in batch)

    def read(self, *, since=None, tail=None, timestamps=False, limit_bytes=None) -> bytes:
        with self._cond:
            out = self._fmt(self._lines[self._start(since, tail):], timestamps)
        return out[:limit_bytes] if limit_bytes else out

    def follow(self, *, since=None, tail=None, timestamps=False):
        """Yield lines as they come; ends when the buffer is closed (the container terminated)."""
        with self._cond:
            i = self._start(since, tail)
        while True:
            with self._cond:
                while i >= len(self._lines) and not self.closed:
                    self._cond.wait(0.5)
                batch, done = self._lines[i:], self.closed
                i += len(batch)
            if batch:
                yield self._fmt(batch, timestamps)
            if done and i >= len(self._lines):
                return


class PathMap:
    def __init__(self, mapping: dict[str, str]):
        self.mapping = {k.rstrip("/") or "/": v for k, v in mapping.items() if k}
        alts = "|".join(re.escape(a) for a in sorted(self.mapping, key=len, reverse=True))
        self._re = re.compile(r"(?<![\w.\-/])(" + alts + r")(?=/|$|[\s\"'`;:,)=|&>])") if alts else None

    def rewrite(self, text):
        if not self._re or not isinstance(text, str):
            return text
        return self._re.sub(lambda m: self.mapping[m.group(1)], text)


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


def expand(text, env: dict):
    """Kubernetes $(VAR) expansion in command, args and env ($$ escapes a literal $)."""
    if not isinstance(text, str):
        return text
    return _VAR.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def field_ref(pod: dict, path: str) -> str:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    simple = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
              "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
              "spec.serviceAccountName": spec.get("serviceAccountName"), "status.podIP": status.get("podIP"),
              "status.hostIP": status.get("hostIP")}
    if path in simple:
        return simple[path] or ""
    m = re.match(r"metadata\.(labels|annotations)\['(.+)'\]$", path)
    return (meta.get(m.group(1)) or {}).get(m.group(2), "") if m else ""


def materialize_configmap(cm: dict, vol: dict, target: str):
    """Write a ConfigMap volume's files (honouring items and modes) under target."""
    data = {k: v.encode() for k, v in (cm.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
    mode = vol.get("defaultMode", 0o644)
    items = vol.get("items") or [{"key": k, "path": k} for k in data]
    for item in items:
        if item["key"] in data:
            path = os.path.join(target, item["path"])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data[item["key"]])
            os.chmod(path, item.get("mode", mode))


class Container:
    """State of one container, shared by both modes. The owning PodRuntime reads it under its lock."""

    def __init__(self, spec: dict, init: bool, on_change):
        self.spec, self.init, self.on_change = spec, init, on_change
        self.name, self.image = spec["name"], spec.get("image", "")
        self.log = LogBuffer()
        self.state, self.waiting_reason, self.waiting_message = "waiting", "ContainerCreating", ""
        self.started_at = self.finished_at = self.exit_code = None
        self.reason = self.message = self.container_id = ""
        self.oom, self.config_error = False, None
        self.done = threading.Event()

    def _running(self):
        self.state, self.started_at = "running", time.time()
        self.container_id = "containerd://" + (new_uid() + new_uid()).replace("-", "")[:64]
        self.on_change()

    def _terminated(self, code: int, reason: str | None = None, message: str = ""):
        self.exit_code, self.message, self.finished_at = code, message, time.time()
        self.reason = reason or ("Completed" if code == 0 else ("OOMKilled" if self.oom else "Error"))
        self.state = "terminated"
        self.log.close()
        self.done.set()
        self.on_change()

    def _fallback(self, msg: str, code: int) -> str:
        if not msg and code != 0 and self.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            return self.log.tail_bytes(FALLBACK_LINES, FALLBACK_BYTES)
        return msg

    def terminated_dict(self) -> dict:
        return {"exitCode": self.exit_code, "reason": self.reason, **({"message": self.message} if self.message else {}),
                "startedAt": rfc3339(self.started_at) if self.started_at else None,
                "finishedAt": rfc3339(self.finished_at) if self.finished_at else None,
                **({"containerID": self.container_id} if self.container_id else {})}


class SimContainer(Container):
    """A scripted container: prints its log, runs for run_seconds (None = forever), exits with exit_code."""

    def __init__(self, spec, init, on_change, *, exit_code=0, run_seconds=0.0, log="", termination_message="",
                 oom=False):
        super().__init__(spec, init, on_change)
        self.sim_exit_code, self.run_seconds, self.sim_log = exit_code, run_seconds, log
        self.termination_message, self.oom = termination_message, oom
        self._sig, self._sig_code = threading.Event(), None

    def start(self):
        self._running()
        threading.Thread(target=self._run, daemon=True, name=f"sim-{self.name}").start()

    def _run(self):
        for line in self.sim_log if isinstance(self.sim_log, list) else str(self.sim_log or "").splitlines():
            self.log.write_line(str(line).encode())
        self._sig.wait(self.run_seconds)
        if self._sig_code is not None:
            return self._terminated(self._sig_code)
        msg = self._fallback(self.termination_message or "", self.sim_exit_code)
        self._terminated(self.sim_exit_code, "OOMKilled" if self.oom else None, msg[:TERM_MSG_MAX])

    def signal(self, sig: int):
        if self.state == "running" and self._sig_code is None:
            self._sig_code = 128 + int(sig)  # a well-behaved process dies on SIGTERM too
            self._sig.set()


class ExecContainer(Container):
    """A real local process in its own session; stdout and stderr become the container log."""

    def __init__(self, spec, init, on_change, *, argv, env, cwd, term_file, registry):
        super().__init__(spec, init, on_change)
        self.argv, self.env, self.cwd, self.term_file, self.registry = argv, env, cwd, term_file, registry
        self.proc: subprocess.Popen | None = None

    def start(self):
        if not self.argv:  # the image's entrypoint is unknown here: act like one that exits 0
            self._running()
            self.log.write_line(b"[k8s-emulator] no command/args: image entrypoint not emulated, exiting 0")
            return self._terminated(0)
        try:
            self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            self.started_at = time.time()
            return self._terminated(128, "StartError", (
                "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc "
                f'create failed: unable to start container process: exec: "{self.argv[0]}": {exc.strerror or exc}: '
                "unknown"))
        self.registry.add(self.proc.pid)
        self._running()
        threading.Thread(target=self._pump, daemon=True, name=f"exec-{self.name}").start()

    def _pump(self):
        proc = self.proc

        def reap_group():
            # When PID 1 of a container exits, the rest of the container goes with it; a leftover child
            # holding stdout open would otherwise keep the container "running" forever.
            proc.wait()
            _killpg(proc.pid, signal.SIGKILL)

        threading.Thread(target=reap_group, daemon=True, name=f"reap-{self.name}").start()
        for line in iter(proc.stdout.readline, b""):
            self.log.write_line(line)
        code = proc.wait()
        proc.stdout.close()
        self.registry.discard(proc.pid)
        code = 128 - code if code < 0 else code  # killed by signal N -> 128+N, as containerd reports it
        try:
            with open(self.term_file, "rb") as f:
                msg = f.read(TERM_MSG_MAX).decode("utf-8", "replace")
        except OSError:
            msg = ""
        self._terminated(code, None, self._fallback(msg, code))

    def signal(self, sig: int):
        if self.proc is not None and self.proc.poll() is None:
            _killpg(self.proc.pid, sig)


def _killpg(pid: int, sig: int):
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class ProcessRegistry:
    """Live pod processes, mirrored as files under <state>/pids so the parent can reap them if we die."""

    def __init__(self, directory: str):
        self.dir, self.pids, self._lock = directory, set(), threading.Lock()
        os.makedirs(directory, exist_ok=True)

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
        for pid in pids:
            _killpg(pid, signal.SIGTERM)
        deadline = time.time() + grace
        while time.time() < deadline and any(alive(p) for p in pids):
            time.sleep(0.05)
        for pid in pids:
            _killpg(pid, signal.SIGKILL)
            self.discard(pid)


def alive(pid: int) -> bool:
    """True for a live process; a zombie (exited, not yet reaped) counts as dead."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False
