"""Executable shell scripts standing in for the real tools a suite runs (nvidia-smi, dmesg, dcgmi, fio …)."""

from __future__ import annotations

import stat
from pathlib import Path


def shell_tool(bindir: Path, name: str, body: str) -> str:
    """``bindir/name``, a shell script running ``body``, made executable; its path."""
    bindir.mkdir(exist_ok=True)
    p = bindir / name
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(p)
