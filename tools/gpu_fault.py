"""The GPU fault `make demo` and `make up` give a simulated node: its kernel log holds an Xid 94 (an
uncorrectable ECC error the driver contained), which the real gpu_health suite reads and judges in that
node's pods — the result the operator records is the suite's own, with its code and recommended action.

How: an emulator ``exec`` script for the node's gpu_health pods (the pod runs its real command) that
puts a ``dmesg`` of the node first on ``PATH``. That ``dmesg`` prints the Xid 94 line of the suites'
kernel-log fixture (``dmesg_xids_derived.txt``: the line quoted in leptonai/gpud pull request #1174,
see its SOURCES.md), stamped one minute before the moment it is read, as a fault that just happened.
The suites run in CPU mode there: no GPU state, so the kernel log is where the fault shows.
"""

from __future__ import annotations

import os
import pathlib
import shlex

REPO = pathlib.Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "include" / "suites" / "fixtures" / "kernel" / "dmesg_xids_derived.txt"
XID = 94
SUITE_LABEL = {"cluster-doctor.io/test": "gpu_health"}  # only gpu_health pods read the kernel log
WHAT = f"Xid {XID}, an uncorrectable ECC error, in its kernel log"
AGE_S = 60  # how long before the read the driver logged it


def xid_message() -> str:
    """The fixture's Xid 94 message, without its time stamp."""
    line = next(ln for ln in FIXTURE.read_text().splitlines() if f"): {XID}," in ln)
    return line.split("] ", 1)[1]


def install(directory: pathlib.Path) -> dict[str, str]:
    """Write the node's ``dmesg`` under ``directory/bin``; returns the environment its pods get."""
    bindir = directory / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    dmesg = bindir / "dmesg"
    # like the kernel's "[uptime] message"; the arguments (-r) change nothing here
    dmesg.write_text("#!/bin/sh\n"
                     f"awk -v msg={shlex.quote(xid_message())} '{{ printf \"[%12.6f] %s\\n\", $1 - {AGE_S}, msg }}' "
                     "/proc/uptime\n")
    dmesg.chmod(0o755)
    return {"PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}


def inject(emu, node: str, directory: pathlib.Path, *, once: bool) -> None:
    """The node's gpu_health pods run for real with the faulty kernel log: every one, or the next (once)."""
    emu.set_script(node, "exec", labels=SUITE_LABEL, once=once, env=install(directory))
