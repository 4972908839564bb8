"""Commands a test starts that start servers of their own (``make up``, ``make demo``): run so that an
interruption of the test run (Ctrl-C, SIGTERM from a CI timeout) or a timeout stops them as a user's Ctrl-C
does, and they stop what they started. ``subprocess.run`` would SIGKILL the command instead, and the servers
its children had started would outlive the test run."""

from __future__ import annotations

import signal
import subprocess

GRACE_S = 180  # how long a stopped command may take to stop what it started (make up: PostgreSQL, Airflow)


def run_stoppable(argv: list[str], *, timeout: float, grace: float = GRACE_S, **popen) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, capture_output=True, text=True, timeout=timeout)``, but on a timeout or an
    interruption the command gets SIGTERM and ``grace`` seconds to clean up (then SIGKILL) before the
    exception goes on."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
