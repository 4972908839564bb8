"""Running external tools (fio, nvidia-smi, dcgmi, all_reduce_perf) in their own session, so that
SIGTERM or a timeout takes the whole process group down; stopping child processes."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any, Callable

from .checks import SuiteError
from .text import fmt


def _terminate(proc: Any, sig: int) -> None:
    try:
        if isinstance(proc, subprocess.Popen):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, sig)  # tools run in their own session
                except (ProcessLookupError, PermissionError):
                    proc.send_signal(sig)
        elif hasattr(proc, "is_alive"):  # multiprocessing.Process
            if proc.is_alive():
                os.kill(proc.pid, sig)
    except (ProcessLookupError, OSError, ValueError):
        pass


def _wait_dead(proc: Any, timeout: float) -> bool:
    try:
        if isinstance(proc, subprocess.Popen):
            proc.wait(timeout=timeout)
            return True
        if hasattr(proc, "join"):
            proc.join(timeout)
            return not proc.is_alive()
    except (subprocess.TimeoutExpired, OSError, ValueError, AssertionError):
        return False
    return True



def run_tool(
    argv: list[str],
    *,
    timeout: float,
    env: dict | None = None,
    cwd: str | None = None,
    register: Callable[[Any], None] = lambda p: None,
    unregister: Callable[[Any], None] = lambda p: None,
) -> tuple[int, str, str]:
    """Run a tool in its own session (so SIGTERM can take its whole process group down).

    Raises FileNotFoundError when the binary is missing; returns rc, stdout, stderr (rc negative:
    killed by that signal); on timeout the group is killed and SuiteError raised, carrying what the
    tool printed until then in `.output` (a hung tool may already have said why, e.g. NCCL falling
    back to sockets)."""
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    register(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _terminate(proc, signal.SIGTERM)
        if not _wait_dead(proc, 3):
            _terminate(proc, signal.SIGKILL)
        out, err = proc.communicate()
        exc = SuiteError(f"{os.path.basename(argv[0])} did not finish within {fmt(timeout)} s")
        exc.output = (out or "") + "\n" + (err or "")
        raise exc from None
    finally:
        unregister(proc)
    return proc.returncode, out, err
