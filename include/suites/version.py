"""Content hash of the suites package: the `suite_version` recorded with every result.

The Airflow side computes the same hash over the ConfigMap it builds from this package
(cluster_doctor.kube.suite_code), so the algorithm is a contract (keep it byte-for-byte identical on
both sides, through `digest()`):

    sha256 over the files of the package whose names end in .py, .yaml, .yml or .json, in this
    folder and its subfolders (names starting with "." or "__pycache__" skipped), each named by its
    path relative to the package with "/" separators ("checkers/xid.py"), sorted by that path,
    feeding for each file  path.encode() + b"\\0" + content + b"\\0";
    suite_version = "sha256:" + the first 16 hex characters.

Inside a pod the package is a ConfigMap mount: every entry is a symlink into a hidden `..data/`
directory. Symlinks are followed, hidden entries skipped, so the mount hashes like the source tree.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable

HASHED_SUFFIXES = (".py", ".yaml", ".yml", ".json")


def digest(files: Iterable[tuple[str, bytes]]) -> str:
    """The suite_version of (relative path, content) pairs: the one hashing helper of both sides."""
    h = hashlib.sha256()
    for name, content in sorted(files):
        h.update(name.encode() + b"\0" + content + b"\0")
    return "sha256:" + h.hexdigest()[:16]


def package_files(directory: str | os.PathLike) -> dict[str, bytes]:
    """{relative path with "/": content} of the hashed files under directory (the shipped set)."""
    root = os.fspath(directory)
    out: dict[str, bytes] = {}
    for here, dirs, names in os.walk(root, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in names:
            path = os.path.join(here, name)
            if name.startswith(".") or not name.endswith(HASHED_SUFFIXES) or not os.path.isfile(path):
                continue
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            with open(path, "rb") as fh:
                out[rel] = fh.read()
    return out


def content_hash(directory: str | os.PathLike) -> str:
    return digest(package_files(directory).items())


def suite_version() -> str:
    """CLUSTER_DOCTOR_SUITE_VERSION when the orchestrator set it, else the hash of this package."""
    env = os.environ.get("CLUSTER_DOCTOR_SUITE_VERSION", "").strip()
    if env:
        return env
    try:
        return content_hash(os.path.dirname(os.path.abspath(__file__)))
    except OSError as exc:  # an unreadable mount must not crash the suite
        return f"unknown ({exc.__class__.__name__})"


if __name__ == "__main__":  # python -m cluster_doctor_suites.version [DIR]
    import sys

    print(content_hash(sys.argv[1]) if len(sys.argv) > 1 else suite_version())
