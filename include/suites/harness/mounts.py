"""Which mount a path lives on (/proc/self/mountinfo, proc(5)) and whether that is the container's own
root filesystem: a results or scratch directory the suite created on the root filesystem is not the
volume it was meant to be on."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

MOUNTINFO = "/proc/self/mountinfo"
_OCTAL = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Mount:
    """One line of mountinfo: where it is mounted, which subtree of its filesystem (a subPath shows
    here), the filesystem type and source, and the device (major:minor)."""

    mount_point: str
    root: str
    fstype: str
    source: str
    device: str


def _unescape(field: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)  # the kernel writes ' ' as \040


def parse_mountinfo(text: str) -> list[Mount]:
    """`36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw` -> Mount, file order."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if not sep or len(f) < 5 or len(r) < 2:
            continue
        out.append(Mount(_unescape(f[4]), _unescape(f[3]), r[0], _unescape(r[1]), f[2]))
    return out


def mount_of(path: str, mountinfo: str = MOUNTINFO) -> Mount | None:
    """The mount `path` lives on: the longest mount point that contains it (the last one mounted
    there wins, as the kernel shows the top of a stack); None when mountinfo cannot be read."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as fh:
            mounts = parse_mountinfo(fh.read())
    except OSError:
        return None
    real = os.path.realpath(path)
    best = None
    for m in mounts:
        mp = m.mount_point.rstrip("/") or "/"
        if real == mp or mp == "/" or real.startswith(mp + "/"):
            if best is None or len(mp) >= len(best.mount_point.rstrip("/") or "/"):
                best = m
    return best


def same_device_as_root(path: str, root: str = "/") -> bool | None:
    """Whether `path` is on the filesystem of `root` (st_dev); None when either cannot be stat'ed."""
    try:
        return os.stat(path).st_dev == os.stat(root).st_dev
    except OSError:
        return None
