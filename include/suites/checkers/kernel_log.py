"""The kernel log as the GPU checkers read it: where it comes from (the node's journal mounted into
the pod, else dmesg) and how its lines become messages (time stamp, kernel level, continuation lines
of multi-line reports joined).

The journal is read as `journalctl -o json` (one record per line: PRIORITY, MESSAGE,
_SOURCE_MONOTONIC_TIMESTAMP in µs since boot) and written back in `dmesg -r`'s form, so its lines
keep their kernel level: the short formats drop it, and the info lines the NVIDIA drivers print
(nvswitch probing, MSI) would then read as driver errors."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass

from ..harness.checks import SuiteError
from ..harness.text import one_line

_LEVEL = re.compile(r"^\s*<(\d+)>")
_SYSLOG_PREFIX = r"(?:[A-Z][a-z]{2} +\d+ [\d:]+ (?:\S+ )?kernel: )?"
_UPTIME = re.compile(r"^\s*(?:<\d+>)?" + _SYSLOG_PREFIX + r"\s*\[\s*(\d+\.\d+)\]")
_CTIME = re.compile(r"^\s*\[([A-Z][a-z]{2} [A-Z][a-z]{2} +\d+ [\d:]+ \d{4})\]")  # dmesg --ctime / -T
_SYSLOG = re.compile(r"^([A-Z][a-z]{2} +\d+ [\d:]+) (?:\S+ )?kernel:")  # journalctl -o short, syslog
_PCI = re.compile(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})")


@dataclass
class KernelMessage:
    text: str  # the message, continuation lines joined with " / "
    uptime_s: float | None  # seconds since boot, when the line carries them
    stamp: str | None  # the time stamp as printed (uptime, ctime or syslog time)
    level: int | None  # kernel log level 0..7 when known (raw dmesg `<N>`), else None

    @property
    def pci(self) -> str | None:
        """The first PCI bus id the message names, as the kernel log writes it ('0000:3b:00')."""
        m = _PCI.search(self.text)
        return f"{m.group(1)[-4:]}:{m.group(2)}:{m.group(3)}".lower() if m else None


def split(text: str) -> list[KernelMessage]:
    """Messages of a dmesg (plain, raw `-r`, --ctime) or journalctl (short, short-monotonic) text.
    A line that starts with white space and no time stamp continues the previous message (how
    dmesg prints the driver's multi-line reports)."""
    out: list[KernelMessage] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        stamped = _UPTIME.match(line) or _CTIME.match(line) or _SYSLOG.match(line) or _LEVEL.match(line)
        if out and not stamped and line[:1].isspace():
            out[-1].text += " / " + line.strip()
            continue
        lv = _LEVEL.match(line)
        up = _UPTIME.match(line)
        stamp = up or _CTIME.match(line) or _SYSLOG.match(line)
        out.append(KernelMessage(
            text=line.strip(),
            uptime_s=float(up.group(1)) if up else None,
            stamp=stamp.group(1) if stamp else None,
            level=int(lv.group(1)) & 7 if lv else None,
        ))
    return out


def short_pci(bus_id: str | None) -> str | None:
    """'00000000:3B:00.0' -> '0000:3b:00' (the form the kernel log uses)."""
    m = _PCI.search(bus_id or "")
    return f"{m.group(1)[-4:]}:{m.group(2)}:{m.group(3)}".lower() if m else None


def uptime_seconds() -> float | None:
    try:
        with open("/proc/uptime") as fh:
            return float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read(ctx) -> tuple[str | None, str]:
    """The kernel log: the node's journal when --journal-dir points at it (mounted read-only into
    the pod, needs no capability), else `dmesg -r` (raw: each line keeps its kernel level; needs
    CAP_SYSLOG where kernel.dmesg_restrict=1). Returns (text, what) or (None, why it could not be read)."""
    why: list[str] = []
    a = ctx.args
    if a.journal_dir:
        text = _journal(ctx, a, why)
        if text is not None:
            return text, f"node journal ({a.journal_dir})"
    dmesg = shutil.which(a.dmesg)
    if not dmesg:
        why.append(f"{a.dmesg} not installed")
        return None, "; ".join(why)
    try:
        rc, out, err = ctx.run_tool([dmesg, "-r"], timeout=30)
        if rc != 0 and re.search(r"invalid option|unrecognized option", err or "", re.I):
            rc, out, err = ctx.run_tool([dmesg], timeout=30)  # a dmesg without -r: no levels
    except SuiteError as exc:
        why.append(str(exc))
        return None, "; ".join(why)
    if rc != 0:
        why.append(
            f"dmesg: {one_line(err or out or f'exit code {rc}', 120)} (needs CAP_SYSLOG or "
            f"kernel.dmesg_restrict=0, or mount the node's journal and pass --journal-dir)"
        )
        return None, "; ".join(why)
    return out, "kernel log (dmesg)"


def _journal(ctx, a, why: list[str]) -> str | None:
    journalctl = shutil.which(a.journalctl)
    if not journalctl:
        why.append(f"{a.journalctl} not installed")
        return None
    if not os.path.isdir(a.journal_dir):
        why.append(f"journal directory {a.journal_dir} does not exist")
        return None
    try:
        rc, out, err = ctx.run_tool(
            [journalctl, "-k", "-b", "-D", a.journal_dir, "-o", "json", "--no-pager", "-q"], timeout=60
        )
    except SuiteError as exc:
        why.append(str(exc))
        return None
    if rc == 0:
        return from_journal_json(out)
    why.append(f"journalctl: {one_line(err or out, 120)}")
    return None


def from_journal_json(text: str) -> str:
    """`journalctl -o json` records as `dmesg -r` lines: `<PRIORITY>[seconds since boot] MESSAGE`,
    each further line of a multi-line MESSAGE indented (a continuation, as dmesg prints it). A line
    that is not a JSON record is kept as it is (its level unknown: judged like any unlevelled line)."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            out.append(line)
            continue
        if not isinstance(rec, dict):
            out.append(line)
            continue
        msg = _journal_text(rec.get("MESSAGE"))
        prio = str(rec.get("PRIORITY", ""))
        level = f"<{prio}>" if prio.isdigit() else ""
        us = next((str(rec[k]) for k in ("_SOURCE_MONOTONIC_TIMESTAMP", "__MONOTONIC_TIMESTAMP")
                   if str(rec.get(k, "")).isdigit()), None)
        stamp = f"[{int(us) / 1e6:12.6f}] " if us is not None else ""
        first, *rest = msg.split("\n") or [""]
        out.append(f"{level}{stamp}{first}")
        out += [f"    {x}" for x in rest if x.strip()]
    return "\n".join(out) + ("\n" if out else "")


def _journal_text(value) -> str:
    """MESSAGE as journalctl's JSON writes it: a string, an array of bytes (not valid UTF-8), or null."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b < 256 for b in value):
        return bytes(value).decode("utf-8", "replace")
    return ""
