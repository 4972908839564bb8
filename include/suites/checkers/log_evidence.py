"""What the kernel log proves about itself: that it reaches back to the boot (else "no Xid" proves
nothing: journald without kernel messages, a ring buffer that wrapped), and which GPU resets happened
after an event (the driver loaded again, or its recovery action back to None), so that a fatal event
stays fatal until a reset after it is shown."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..harness.text import fmt
from .kernel_log import KernelMessage

BOOT_WINDOW_S = 300.0  # default of gpu_health.kernel_log_boot_window_s (baselines.yaml)
# A load banner this soon after an event belongs to the same load (the 570 open module prints the
# "fallen off the bus" report while probing, then its banner: fixtures/kernel/dmesg_fallen_off_bus_570)
SAME_LOAD_S = 10.0
_LOAD = re.compile(r"NVRM: loading NVIDIA UNIX")
_XID154_NONE = re.compile(r"NVRM: Xid \((?:PCI:)?[0-9a-fA-F:]+\):?\s*154\b.*\bto 0x0+ \(None\)")


@dataclass(frozen=True)
class Coverage:
    """Whether the log reaches back to the boot (the driver's load banner, or a first record near
    boot), and why (for the not-run reason or the pass message)."""

    covered: bool
    why: str


def coverage(messages: list[KernelMessage], boot_window_s: float = BOOT_WINDOW_S) -> Coverage:
    if not messages:
        return Coverage(False, "the log holds no kernel message at all (journald without kernel messages, "
                               "ReadKMsg=no, or a dmesg that printed nothing): it does not show the boot")
    load = next((m for m in messages if _LOAD.search(m.text)), None)
    if load is not None:
        at = f" at {fmt(load.uptime_s)} s" if load.uptime_s is not None else ""
        return Coverage(True, f"the log holds the NVIDIA driver's load{at}")
    first = next((m.uptime_s for m in messages if m.uptime_s is not None), None)
    if first is not None and first <= boot_window_s:
        return Coverage(True, f"the log starts {fmt(first)} s after boot")
    start = f"starts {fmt(first)} s after boot" if first is not None else "carries no time since boot"
    return Coverage(False, f"the log {start} and holds no NVIDIA driver load line: it does not reach back to "
                           f"the boot (a ring buffer that wrapped, a journal that lost the start); "
                           f"a clean log would prove nothing")


@dataclass(frozen=True)
class Reset:
    index: int  # position in the message list
    uptime_s: float | None
    pci: str | None  # None: every GPU (the driver was loaded again)
    what: str


@dataclass
class History:
    """The resets the log shows and the GPUs found now: `reset_after` says whether an event at
    `index` on GPU `pci` was followed by a reset of that GPU (None: not shown)."""

    resets: list[Reset] = field(default_factory=list)
    present: set[str] | None = None  # bus ids ('0000:3b:00') of the GPUs found; None: not known

    def missing(self, pci: str | None) -> bool:
        """The event's GPU is not among the GPUs found (or the GPUs could not be listed)."""
        return pci is not None and (self.present is None or pci not in self.present)

    def reset_after(self, index: int, uptime_s: float | None, pci: str | None) -> str | None:
        if self.missing(pci):
            return None  # a GPU that is not there has not been brought back by anything
        for r in self.resets:
            if r.index <= index or (r.pci is not None and r.pci != pci):
                continue
            if r.pci is None:  # a load banner: only a later load, not the one the event happened in
                if uptime_s is None or r.uptime_s is None or r.uptime_s - uptime_s <= SAME_LOAD_S:
                    continue
            return r.what
        return None


def history(messages: list[KernelMessage], present: set[str] | None) -> History:
    out = History(present=present)
    for i, m in enumerate(messages):
        at = f" at {fmt(m.uptime_s)} s" if m.uptime_s is not None else ""
        if _LOAD.search(m.text):
            out.resets.append(Reset(i, m.uptime_s, None, f"the NVIDIA driver was loaded again{at}"))
        elif _XID154_NONE.search(m.text):
            out.resets.append(Reset(i, m.uptime_s, m.pci, f"the driver's recovery action returned to None{at} (Xid 154)"))
    return out
