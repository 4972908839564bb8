"""Driver messages in the kernel log, judged fail-closed: every NVRM / NVSwitch line is a finding
unless driver_messages.yaml lists it as benign. Xid lines are handed to checkers/xid.py; this
checker judges the rest: the "fallen off the bus" report, NVSwitch SXids, the listed errors without
an Xid (GSP timeouts, RmInitAdapter failures, NVLink training failures, memory poison) and any other
driver line (DRIVER_ERROR_UNRECOGNISED)."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field

from .. import codes
from ..harness.checks import Check
from ..harness.text import ago_h, fmt, one_line
from .kernel_log import KernelMessage
from .log_evidence import History

CODES = ("GPU_FALLEN_OFF_BUS", "NVSWITCH_SXID", "GSP_TIMEOUT", "GPU_INIT_FAILED", "NVLINK_TRAINING_FAILED",
         "GPU_MEMORY_ERROR", "DRIVER_ERROR_UNRECOGNISED")
MESSAGES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "driver_messages.yaml")
CONTEXT_S = 1.0  # lines within this many seconds after a report are its detail

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})[^)]*\):?\s*(\d+),?\s*(.*)$")
_XID_LOOSE = re.compile(r"NVRM:.*\bXid\b\D{0,24}?(\d+)")
_SXID = re.compile(r"(nvidia-nvswitch\d*): SXid \((?:PCI:)?([0-9a-fA-F:.]+)\):?\s*(\d+),?\s*(.*)$")
_SCOPE = re.compile(r"NVRM:|\bSXid\b|nvidia-nvswitch\d*:|(?:^|\]\s|kernel:\s|>)\s*nvidia(?: [0-9a-fA-F]{4,8}:[0-9a-fA-F:.]+)?: ")
_FALLEN_START = re.compile(r"NVRM: The NVIDIA GPU [0-9a-fA-F]{4,8}:")
_FALLEN = re.compile(r"fallen off the bus", re.I)
# `nvidia` module lines a healthy node prints at load (leptonai/gpud pkg/pstore/testdata/.../dmesg.txt)
_MODULE_BENIGN = re.compile(r"nvidia: (loading out-of-tree module taints kernel|module license .* taints kernel|"
                            r"module verification failed)|nvidia [0-9a-fA-F:.]+: enabling device")


@dataclass
class DriverEvent:
    kind: str  # xid | sxid | fallen_off_bus | known | unrecognised
    message: KernelMessage
    pci: str | None
    xid: int | None = None
    rule: dict | None = None  # the driver_messages.yaml entry of a known error
    detail: list[str] = field(default_factory=list)  # the report's further lines
    index: int = -1  # the message's position in the log (what came after it: log_evidence.History)

    @property
    def text(self) -> str:
        return self.message.text


@functools.lru_cache(maxsize=1)
def catalog() -> dict:
    import yaml

    with open(MESSAGES_FILE, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    for entry in data["benign"] + data["errors"]:
        entry["re"] = re.compile(entry["pattern"])
    return data


def classify(messages: list[KernelMessage]) -> tuple[list[DriverEvent], int]:
    """(events, driver lines reviewed). Lines at notice/info/debug level are not errors."""
    data = catalog()
    events: list[DriverEvent] = []
    reviewed = 0
    skip = set()
    for i, m in enumerate(messages):
        if i in skip or (m.level is not None and m.level >= 5) or not _SCOPE.search(m.text):
            continue
        reviewed += 1
        ev = _event(m, messages, i, skip, data)
        if ev is not None:
            ev.index = i
            events.append(ev)
        elif _benign(m, data):
            continue
        elif events and _same_report(events[-1].message, m):
            events[-1].detail.append(m.text)
        else:
            events.append(DriverEvent("unrecognised", m, m.pci, index=i))
    return events, reviewed


def _event(m: KernelMessage, messages, i: int, skip: set, data: dict) -> DriverEvent | None:
    x = _XID.search(m.text)
    if x:
        return DriverEvent("xid", m, m.pci, xid=int(x.group(2)))
    s = _SXID.search(m.text)
    if s:
        return DriverEvent("sxid", m, _pci_of(s.group(2)), xid=int(s.group(3)))
    if _XID_LOOSE.search(m.text):  # an Xid line in a layout we do not know: still an Xid, number kept
        return DriverEvent("xid", m, m.pci, xid=int(_XID_LOOSE.search(m.text).group(1)))
    if _FALLEN_START.search(m.text) and not _FALLEN.search(m.text):
        # journalctl prints each line of the multi-line report as its own message
        follow = [j for j in range(i + 1, min(i + 3, len(messages)))]
        if any(_FALLEN.search(messages[j].text) for j in follow):
            for j in follow:
                skip.add(j)
                m.text += " / " + messages[j].text
    if "NVRM:" in m.text and _FALLEN.search(m.text):
        return DriverEvent("fallen_off_bus", m, m.pci)
    for rule in data["errors"]:
        if rule["re"].search(m.text):
            return DriverEvent("known", m, m.pci, rule=rule)
    return None


def _benign(m: KernelMessage, data: dict) -> bool:
    return bool(_MODULE_BENIGN.search(m.text)) or any(b["re"].search(m.text) for b in data["benign"])


def _same_report(first: KernelMessage, m: KernelMessage) -> bool:
    if first.uptime_s is not None and m.uptime_s is not None:
        return 0 <= m.uptime_s - first.uptime_s <= CONTEXT_S
    return first.stamp is not None and first.stamp == m.stamp


def _pci_of(text: str) -> str | None:
    m = re.search(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})", text)
    return f"{m.group(1)[-4:]}:{m.group(2)}:{m.group(3)}".lower() if m else None


def age_h(m: KernelMessage, uptime_now: float | None) -> float | None:
    if uptime_now is None or m.uptime_s is None:
        return None
    age = (uptime_now - m.uptime_s) / 3600
    return age if age >= 0 else None  # another boot / clock: unknown age, judged as recent


@dataclass(frozen=True)
class Finding:
    """One event judged: what the check will say about it."""

    name: str
    status: str
    code: str
    action: str
    label: str
    device: str
    age_h: float | None
    note: str = ""  # why an old event still fails, or the reset that cleared it


def past_window(ev: DriverEvent, until_reset: bool, history: History | None) -> tuple[str, str]:
    """(status, note) of a failing event older than the window. An event that breaks the GPU until
    it is reset (a GPU that fell off the bus, a failed init, a GSP timeout, a fatal NVLink error)
    stays a failure until the log shows a reset of that GPU after it (the kernel log is this boot's:
    no reboot since) and while its GPU is missing; any other old event is a warning."""
    if not until_reset:
        return "warn", ""
    if history is None:
        return "fail", "; no reset of the GPU since can be shown"
    if history.missing(ev.pci):
        return "fail", f"; its GPU ({ev.pci}) is not among the GPUs found: still broken"
    reset = history.reset_after(ev.index, ev.message.uptime_s, ev.pci)
    if reset:
        return "warn", f"; reset since: {reset}"
    return "fail", "; no GPU reset or driver reload since in this boot's log: still broken"


def judge(ev: DriverEvent, device: str, window_h: float, uptime_now: float | None,
          history: History | None = None) -> Finding:
    """A non-Xid driver event: fail when recent (or of unknown age); once older than the window a
    warning, unless it keeps the GPU broken until a reset (past_window)."""
    age = age_h(ev.message, uptime_now)
    until_reset = False
    if ev.kind == "fallen_off_bus":
        name, code, action, label = "gpu_fallen_off_bus", "GPU_FALLEN_OFF_BUS", "reboot", "GPU has fallen off the bus"
        until_reset = True
    elif ev.kind == "sxid":
        fatal = re.search(r"\bFatal\b", ev.text) and not re.search(r"Non-?fatal", ev.text, re.I)
        name, code = "nvswitch_sxid", "NVSWITCH_SXID"
        action = "reboot" if fatal else "check_fabric"
        label = f"NVSwitch SXid {ev.xid}"
    elif ev.kind == "known":
        name, code, action, label = "driver_log", ev.rule["code"], ev.rule["action"], ev.rule["id"].replace("_", " ")
        until_reset = bool(ev.rule.get("until_reset"))
    else:
        name, code, action, label = "driver_log", "DRIVER_ERROR_UNRECOGNISED", "drain_and_service", "unrecognised driver"
    if age is None or age <= window_h:
        return Finding(name, "fail", code, action, label, device, age)
    status, note = past_window(ev, until_reset, history)
    return Finding(name, status, code, action, label, device, age, note)


def to_checks(events: list[DriverEvent], device_of, window_h: float, uptime_now: float | None, source: str,
              reviewed: int, history: History | None = None) -> list[Check]:
    """One check per (check name, device, code) over the non-Xid events; the `driver_log` and
    `gpu_fallen_off_bus` checks pass only when the log was read and holds no such event (the caller
    turns those passes into not-runs when the log does not reach back to the boot)."""
    groups: dict[tuple, list[tuple[Finding, DriverEvent]]] = {}
    for ev in events:
        if ev.kind == "xid":
            continue
        f = judge(ev, device_of(ev.pci), window_h, uptime_now, history)
        groups.setdefault((f.name, f.device, f.code), []).append((f, ev))
    out = []
    # the most specific findings first: an unrecognised line never hides a named one in the reason
    order = sorted(groups.items(), key=lambda kv: (kv[0][2] == "DRIVER_ERROR_UNRECOGNISED", kv[0]))
    for (name, dev, code), items in order:
        worst = "fail" if any(f.status == "fail" for f, _ in items) else "warn"
        ages = [f.age_h for f, _ in items if f.age_h is not None]
        when = f", latest {ago_h(min(ages))}" if ages else ""
        when += next((f.note for f, _ in items if f.status == worst and f.note), "")
        first = items[0][1]
        out.append(Check(name, worst, len(items), "messages", f"none within {fmt(window_h)} h",
                         f"{len(items)} {items[-1][0].label} message(s) in the {source}{when}: "
                         f"{one_line(_strip(first.text), 220)}", dev if dev != "node" else None, code,
                         action=codes.most_severe(f.action for f, _ in items)))
    names = {k[0] for k in groups}
    if "driver_log" not in names:
        out.append(Check("driver_log", "pass", 0, "messages", "== 0",
                         f"{reviewed} driver line(s) in the {source}, none an error"))
    if "gpu_fallen_off_bus" not in names:
        out.append(Check("gpu_fallen_off_bus", "pass", 0, "events", "== 0",
                         f"no GPU reported fallen off the bus in the {source}"))
    return out


def _strip(text: str) -> str:
    i = text.find("NVRM:")
    return text[i:] if i >= 0 else text

