"""Files where results and reports live, local or in an object store: one atomic-write helper.

A location is either a ``pathlib.Path`` (a local disk or a volume every worker mounts: written with
fsync, so a crash never leaves a partial file behind a complete name) or any pathlib-like object of
fsspec's family (Airflow's ``ObjectStoragePath`` for ``s3://``, ``gs://``, ``file://`` URLs, resolved
in ``cluster_doctor.airflow.storage``; this layer never imports Airflow). Both are written the same
way: the whole content to a temporary sibling whose name starts with a dot (never listed as a
result), then renamed over the target, so a reader sees the old content or the whole new one.
On an object store the rename is a server-side copy, itself all-or-nothing, then a delete.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
import uuid
from typing import Any, Protocol


class Location(Protocol):
    """What this package needs of a path: pathlib's and ObjectStoragePath's common ground."""

    name: str

    def __truediv__(self, other: str) -> Any: ...
    def exists(self) -> bool: ...
    def iterdir(self) -> Any: ...
    def read_bytes(self) -> bytes: ...
    def write_bytes(self, data: bytes) -> Any: ...
    def unlink(self, missing_ok: bool = False) -> None: ...
    def rename(self, target: Any) -> Any: ...
    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None: ...


def as_location(value: str | os.PathLike | Location) -> pathlib.Path | Location:
    """A str or os.PathLike is a local path; anything else is taken as the pathlib-like object it is."""
    if isinstance(value, (str, os.PathLike)) and not hasattr(value, "protocol"):
        return pathlib.Path(value).expanduser()
    return value


def is_local(path: Any) -> bool:
    return isinstance(path, pathlib.Path)


def describe(path: Any) -> str:
    """How a message names the location: the path, or the URL (credentials never appear in it)."""
    return str(path)


def fsync_dir(path: pathlib.Path) -> None:
    """Make a rename or removal in ``path`` durable; not every filesystem allows it."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(path: Any, data: str | bytes, mode: int = 0o644) -> Any:
    """Write ``path`` so that readers see the old file or the whole new one, never a partial file.

    ``mode`` applies to local files (object stores have their own access control)."""
    path = as_location(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if is_local(path):
        return _write_local(path, payload, mode)
    parent = path.parent
    with contextlib.suppress(OSError, NotImplementedError):  # object stores have no directories to make
        parent.mkdir(parents=True, exist_ok=True)
    tmp = parent / f".{path.name}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        tmp.write_bytes(payload)
        tmp.rename(path)
    except BaseException:
        with contextlib.suppress(Exception):
            tmp.unlink(missing_ok=True)
        raise
    return path


def _write_local(path: pathlib.Path, payload: bytes, mode: int) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)  # mkstemp creates 0600; reports are meant to be read by others (web server, SREs)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)
    return path
