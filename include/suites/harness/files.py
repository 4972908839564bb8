"""Files the suites write: atomically (temp file + rename), the kubelet's termination log, and the
node name made safe for a path."""

from __future__ import annotations

import os
import tempfile

DEFAULT_TERMINATION_LOG = "/dev/termination-log"


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


_FILE_MODE = 0o666 & ~_umask()  # mkstemp creates 0600; results must stay readable like normal files


def atomic_write(path: str, data: bytes) -> None:
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, _FILE_MODE)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_termination_log(path: str, text: str) -> str | None:
    """Returns an error string instead of raising: a lost termination log must not change the verdict."""
    if not path:
        return None
    if path == DEFAULT_TERMINATION_LOG and not os.path.exists(path):
        return None  # not in a Kubernetes container (kubelet creates the file): nothing to do
    data = text.encode()
    try:
        if os.path.exists(path):
            # kubelet bind-mounts this file: rename over it is impossible, write in place
            with open(path, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        else:
            parent = os.path.dirname(os.path.abspath(path))
            os.makedirs(parent, exist_ok=True)
            atomic_write(path, data)
    except OSError as exc:
        return f"cannot write termination log {path}: {exc.strerror or exc}"
    return None


def safe_name(s: str) -> str:
    out = "".join(ch if ch.isalnum() or ch in "-_.@" else "_" for ch in s)
    return out.strip(".") or "unknown"

