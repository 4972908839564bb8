"""``cluster-doctor`` run as a user runs it: a process of its own, from the installed distribution."""

from __future__ import annotations

import os
import subprocess
import sys

# No PYTHONPATH: the CLI must work from the installed (editable) distribution alone.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
ENV.pop("AIRFLOW_CONN_VALIDATION_DB", None)


def cli(*args, stdin=None, env=None):
    return subprocess.run([sys.executable, "-m", "cluster_doctor", *args], capture_output=True, text=True,
                          input=stdin, env={**ENV, **(env or {})}, timeout=120)
