"""Xid events (kernel log and the live NVML event stream) judged against NVIDIA's Xid catalog
(xid_catalog.yaml: each Xid with NVIDIA's recovery action). Fail closed: an Xid the catalog does not
know is a finding with its number; a failing Xid older than the window is still reported, as a
warning, unless it keeps its GPU broken until a reset that the log does not show (every Xid whose
NVIDIA action is a GPU reset or a reboot). A line caused by an earlier Xid is judged as that Xid."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from dataclasses import dataclass

from .. import codes
from ..harness.checks import Check
from ..harness.text import ago_h, fmt, one_line
from . import recovery
from .driver_log import DriverEvent, age_h, past_window
from .log_evidence import History

CODES = ("XID_CRITICAL", "XID_MEMORY_ERROR", "XID_NVLINK_ERROR", "XID_GSP_ERROR", "GPU_FALLEN_OFF_BUS",
         "GPU_RECOVERY_ACTION", "XID_APPLICATION", "XID_INFORMATIONAL", "XID_HISTORICAL", "XID_UNKNOWN")
CATALOG_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "xid_catalog.yaml")
CATEGORY_CODES = {
    "memory": "XID_MEMORY_ERROR",
    "nvlink": "XID_NVLINK_ERROR",
    "gsp": "XID_GSP_ERROR",
    "bus": "GPU_FALLEN_OFF_BUS",
    "recovery": "GPU_RECOVERY_ACTION",
    "application": "XID_APPLICATION",
    "informational": "XID_INFORMATIONAL",
    "hardware": "XID_CRITICAL",
    "unused": "XID_CRITICAL",
}
# NVIDIA's immediate action -> (status, our action); see the rules at the top of xid_catalog.yaml
IMMEDIATE = {
    "RESET_GPU": ("fail", "reset_gpu"),
    "WORKFLOW_XID_48": ("fail", "reset_gpu"),
    "WORKFLOW_NVLINK_ERR": ("fail", "reset_gpu"),
    "RESTART_BM": ("fail", "reboot"),
    "RESTART_VM": ("fail", "reboot"),
    "RESTART_APP": ("warn", "none"),
    "CHECK_APP/CUDA": ("warn", "none"),
    "CHECK_UVM": ("warn", "none"),
    "WORKFLOW_XID_13": ("warn", "none"),
    "WORKFLOW_XID_31": ("warn", "none"),
    "WORKFLOW_XID_45": ("warn", "none"),
    "IGNORE": ("warn", "none"),
}
_TO_ACTION = re.compile(r"to 0x[0-9a-fA-F]+ \(([^)]+)\)")
# R590 drivers print the follow-up of an earlier fault as "45, ... Ch 00000001 caused by previous Xid 149"
# (fixtures/kernel/journal_xid45_after_xid149_590.48.01.txt): the earlier Xid is what broke the GPU
_CAUSED_BY = re.compile(r"\bcaused by (?:a )?(?:previous|earlier) Xid\s*(\d+)", re.I)
# the actions a GPU is only healthy again after: NVIDIA's RESET_GPU / RESTART_BM / RESTART_VM and the
# workflows that end in a reset (xid_catalog.yaml); such an Xid fails until the log shows the reset
RESET_ACTIONS = ("reset_gpu", "reboot")


@functools.lru_cache(maxsize=1)
def catalog() -> dict[int, dict]:
    import yaml

    with open(CATALOG_FILE, encoding="utf-8") as fh:
        return {int(k): v for k, v in (yaml.safe_load(fh)["xids"] or {}).items()}


@dataclass(frozen=True)
class XidVerdict:
    xid: int
    status: str  # fail | warn
    code: str
    action: str
    # "Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS, driver hint: RESTART_BM)": NVIDIA's catalog's
    # immediate action, marked as the driver's so it never reads as a second action beside ours
    label: str
    until_reset: bool = False  # a failure that keeps the GPU broken until it is reset (xid_catalog.yaml)


def judge(xid: int, text: str, critical: set[int]) -> XidVerdict:
    """One Xid, from NVIDIA's catalog and what the line itself says (the severity of Xid 144-150,
    the recovery action of Xid 154); the AzureHPC NHC hardware list (`critical`) always fails."""
    entry = catalog().get(xid)
    if entry is None:
        return XidVerdict(xid, "fail", "XID_UNKNOWN", "drain_and_service", f"Xid {xid} (not in NVIDIA's catalog)")
    imm = entry.get("nvidia_immediate") or ""
    code = CATEGORY_CODES.get(entry.get("category"), "XID_CRITICAL")
    if "status" in entry:
        status, action = entry["status"], entry["action"]
    elif imm == "WORKFLOW_NVLINK5_ERR":
        nonfatal = re.search(r"\bNon-?fatal\b", text, re.I)
        status, action = ("warn", "none") if nonfatal else ("fail", "reset_gpu")
    elif imm == "XID_154":
        m = _TO_ACTION.search(text)
        action = recovery.action_for(m.group(1)) if m else "drain_and_service"
        status = "warn" if action == "none" else "fail"
    else:
        status, action = IMMEDIATE.get(imm, ("fail", "drain_and_service"))
    # from the documented action, before the NHC list raises an application Xid to a failure
    until_reset = status == "fail" and bool(entry.get("until_reset", action in RESET_ACTIONS))
    if xid in critical and status != "fail":
        status, action = "fail", action if action in ("reset_gpu", "reboot", "drain_and_service") else "reset_gpu"
        code = "XID_CRITICAL" if code in ("XID_APPLICATION", "XID_INFORMATIONAL") else code
    return XidVerdict(xid, status, code, action, f"Xid {xid} ({entry.get('mnemonic')}, driver hint: {imm or 'none given'})",
                      until_reset)


def judge_event(ev: DriverEvent, earlier: list[DriverEvent], critical: set[int]) -> XidVerdict:
    """An Xid line as the driver means it: one that says it was caused by an earlier Xid is judged as
    that Xid (with the earlier line's own text when the log still holds it on the same GPU, else fail
    closed on the number alone), named "Xid 45 caused by Xid 149 (...)"."""
    m = _CAUSED_BY.search(ev.text)
    if not m or int(m.group(1)) == ev.xid:
        return judge(ev.xid, ev.text, critical)
    cause = int(m.group(1))
    prior = next((e for e in reversed(earlier) if e.xid == cause and e.pci == ev.pci and not _CAUSED_BY.search(e.text)), None)
    v = judge(cause, prior.text if prior else "", critical)
    seen = "" if prior else ", the earlier line no longer in the log"
    return dataclasses.replace(v, label=f"Xid {ev.xid} caused by {v.label}{seen}")


def to_checks(events: list[DriverEvent], device_of, critical: set[int], window_h: float, uptime_now: float | None,
              source: str, history: History | None = None) -> list[Check]:
    """One `xid` check per (device, code); a pass when the source holds no Xid at all. A failing Xid
    older than the window is a warning (XID_HISTORICAL) unless it keeps its GPU broken until a reset
    and no reset after it is shown (driver_log.past_window)."""
    groups: dict[tuple[str, str], list] = {}
    seen: list[DriverEvent] = []
    for ev in events:
        if ev.kind != "xid":
            continue
        v = judge_event(ev, seen, critical)
        seen.append(ev)
        age = age_h(ev.message, uptime_now)
        status, code, note = v.status, v.code, ""
        if status == "fail" and age is not None and age > window_h:
            status, note = past_window(ev, v.until_reset, history)
            code = code if status == "fail" else "XID_HISTORICAL"
        groups.setdefault((device_of(ev.pci), code), []).append((status, v, age, ev, note))
    if not groups:
        return [Check("xid", "pass", 0, "events", "== 0", f"no Xid events in the {source}")]
    out = []
    for (dev, code), items in sorted(groups.items()):
        worst = "fail" if any(s == "fail" for s, *_ in items) else "warn"
        desc = []
        for _, v, age, ev, note in items[-4:]:
            when = f", {ago_h(age)}{note}" if age is not None else ""
            desc.append(f"{v.label}{when}: {one_line(_after_number(ev.text), 70)}")
        shown = max((v for _, v, *_ in items), key=lambda v: v.status == "fail")
        out.append(Check("xid", worst, shown.xid, "xid", f"no failing Xid within {fmt(window_h)} h",
                         f"{len(items)} Xid event(s) in the {source}; " + "; ".join(desc),
                         dev if dev != "node" else None, code,
                         action=codes.most_severe(v.action for _, v, *_ in items)))
    return out


def live_events(raw: list[dict]) -> list[DriverEvent]:
    """The NVML event stream's Xids as events (no time stamp: they are happening now)."""
    from .kernel_log import KernelMessage

    return [DriverEvent("xid", KernelMessage(f"live NVML event: Xid {e['xid']}", None, None, None), e.get("pci"),
                        xid=int(e["xid"])) for e in raw]


def _after_number(text: str) -> str:
    m = re.search(r"\):?\s*\d+,?\s*(.*)$", text)
    return m.group(1) if m else text

