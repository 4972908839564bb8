"""Content hash of the suites folder: the `suite_version` recorded with every result.

The Airflow side computes the same hash over the ConfigMap it builds from this folder, so the algorithm
is a contract (keep it byte-for-byte identical on both sides):

    sha256 over the files of the folder whose names end in .py, .yaml, .yml or .json (flat, no
    recursion), sorted by file name, feeding for each file  name.encode() + b"\\0" + content + b"\\0";
    suite_version = "sha256:" + the first 16 hex characters.

Inside a pod the folder is a ConfigMap mount: every key is a symlink into a hidden `..data/` directory.
`is_file()` follows the symlinks and hidden directories are skipped because only files are hashed.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable

HASHED_SUFFIXES = (".py", ".yaml", ".yml", ".json")


def digest(files: Iterable[tuple[str, bytes]]) -> str:
    """The suite_version of (name, content) pairs: the one hashing helper of both sides."""
    h = hashlib.sha256()
    for name, content in sorted(files):
        h.update(name.encode() + b"\0" + content + b"\0")
    return "sha256:" + h.hexdigest()[:16]


def content_hash(directory: str | os.PathLike) -> str:
    files = []
    with os.scandir(directory) as it:
        for entry in it:
            if entry.name.endswith(HASHED_SUFFIXES) and entry.is_file():
                with open(entry.path, "rb") as fh:
                    files.append((entry.name, fh.read()))
    return digest(files)


def suite_version() -> str:
    """CLUSTER_DOCTOR_SUITE_VERSION when the orchestrator set it, else the hash of this folder."""
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
