"""What a command leaves behind once it is done: processes, servers, listening ports, directories.

The benchmarks check themselves with ``Leftovers`` at their end (``make bench-…`` prints the verdict
just before its figure line and exits 1 when something is left); the tests of ``make demo``, the
README's commands and the CLI use ``processes_mentioning`` for servers that are not our children
(pg_ctl daemonizes PostgreSQL, so it is found by its data directory on its command line).
"""

from __future__ import annotations

import contextlib
import pathlib
import shutil
import tempfile
from collections.abc import Iterator

import psutil


def processes_mentioning(text: str, *, environment: bool = False) -> list[str]:
    """``pid: command line`` of every live process whose command line (or, with ``environment``,
    environment: HOME, AIRFLOW_HOME and the like, which every child inherits) contains ``text`` — a
    data directory, a state directory; this process excepted."""
    found = []
    me = psutil.Process().pid
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.pid == me or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(proc.info["cmdline"] or [])
            if text in cmdline or (environment and any(text in v for v in proc.environ().values())):
                found.append(f"{proc.pid}: {cmdline[:200]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
            continue
    return found


def live_children() -> list[str]:
    """``pid: command line`` of this process's descendants that still run (zombies are reaped ones
    whose parent has not waited yet: they hold nothing)."""
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{child.pid}: {' '.join(child.cmdline())[:200]}")
        except psutil.NoSuchProcess:
            continue
    return out


def listening_ports(pid: int | None = None) -> list[int]:
    """TCP ports this process (or ``pid``) listens on."""
    try:
        conns = psutil.Process(pid).net_connections(kind="inet")
    except psutil.NoSuchProcess:
        return []
    return sorted({c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN})


def port_listening(port: int, host: str = "127.0.0.1") -> bool:
    """Whether anything on this machine accepts connections on ``host:port``."""
    import socket

    with contextlib.closing(socket.socket()) as sock:
        sock.settimeout(1)
        return sock.connect_ex((host, port)) == 0


class Leftovers:
    """Everything one benchmark run creates, checked when it is done.

    ``tempdir()`` gives the run's scratch directories (removed on exit; embedded servers live in
    them); ``port()`` records a port a server of the run listened on. ``check()`` lists what is
    still there: a live child process, a process whose command line names one of the directories
    (a daemonized PostgreSQL), a directory, a recorded port still answering, a port this process
    still listens on. Children and listening ports that were there before the run began (a test
    process's own servers) are not the run's leftovers."""

    def __init__(self) -> None:
        self.dirs: list[pathlib.Path] = []
        self.ports: list[int] = []
        self._children_before = set(live_children())
        self._listening_before = set(listening_ports())

    @contextlib.contextmanager
    def tempdir(self, prefix: str) -> Iterator[pathlib.Path]:
        path = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
        self.dirs.append(path)
        try:
            yield path
        finally:
            import interrupts

            with interrupts.held():  # removed in full even when the run is interrupted meanwhile
                shutil.rmtree(path, ignore_errors=True)

    def port(self, port: int) -> None:
        self.ports.append(port)

    def check(self) -> list[str]:
        left = [f"child process {p}" for p in live_children() if p not in self._children_before]
        for path in self.dirs:
            left += [f"process {p} (uses {path})" for p in processes_mentioning(str(path))]
            if path.exists():
                left.append(f"directory {path}")
        left += [f"port {port} still answers" for port in self.ports if port_listening(port)]
        left += [f"this process still listens on port {port}" for port in listening_ports()
                 if port not in self._listening_before]
        return left

    def verdict(self) -> tuple[bool, str]:
        """(clean?, one line saying so or naming what is left)."""
        left = self.check()
        if left:
            return False, f"cleanup: LEFT BEHIND {len(left)}: " + "; ".join(left[:10])
        what = [f"{len(self.dirs)} temporary director{'y' if len(self.dirs) == 1 else 'ies'} and the servers in them"]
        if self.ports:
            what.append(f"port{'s' if len(self.ports) > 1 else ''} {', '.join(map(str, self.ports))}")
        return True, f"cleanup: nothing left behind (checked: child processes, {', '.join(what)}, listening sockets)"

    def finish(self, figure: str, ok: bool = True) -> int:
        """Print the cleanup verdict, then the benchmark's figure line last; the exit status (1 when
        something was left behind or ``ok`` is false)."""
        clean, line = self.verdict()
        print(line, flush=True)
        print(figure, flush=True)
        return 0 if clean and ok else 1
