"""Error counters of each fabric port, judged by their growth since the previous ib_health run on
the node: a counter that grew is a finding, a constant old value is not.

InfiniBand ports: /sys/class/infiniband/<dev>/ports/<n>/counters/ (the PMA PortCounters the kernel
reads, drivers/infiniband/core/sysfs.c, which also fixes each counter's width: symbol_error 16 bits,
link_downed 8, local_link_integrity_errors 4, ...; IBTA counters stop at their maximum, so a
saturated one can no longer show growth; "N/A (no PMA)" when the HCA answers no PMA query). RoCE
ports: the mlx5 physical-port statistics of `ethtool -S` (roce_counters.py). What a growing counter
means comes from baselines.yaml `ib_health.counters` (class flap, link_error or congestion, with
sources); counters not listed there are recorded but not judged.

The previous values travel with the result: every run stores its sample in the result's
environment (`ib_counters`: boot id, time, and per port the port GUID, where the values came from
and the values), and the next run reads it back (ib_health.py finds it). A previous sample of
another boot, of another HCA (port GUID) or of another source is no baseline: recorded, judged next
time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..harness.checks import Check
from ..harness.text import one_line

CODES = ("IB_LINK_FLAPPED", "IB_LINK_ERRORS", "IB_DISCARDS_GROWING", "IB_COUNTER_SATURATED", "IB_COUNTERS_NO_BASELINE",
         "IB_COUNTERS_UNAVAILABLE")
# PortCounters widths in bits (drivers/infiniband/core/sysfs.c, PORT_PMA_ATTR); the 64-bit data and
# packet counters of PortCountersExtended are not error counters
WIDTH = {
    "symbol_error": 16, "link_error_recovery": 8, "link_downed": 8, "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16, "port_rcv_switch_relay_errors": 16, "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8, "port_rcv_constraint_errors": 8, "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4, "VL15_dropped": 16,
}
# the class of a growing counter -> (status, code), most severe first
CLASSES = {"flap": ("fail", "IB_LINK_FLAPPED"), "link_error": ("fail", "IB_LINK_ERRORS"),
           "congestion": ("warn", "IB_DISCARDS_GROWING")}


@dataclass
class PortSample:
    """One port's counters as read now: where from (`sysfs` or `ethtool`), the port's GUID (a new
    HCA is a new baseline), the values, and what could not be read."""

    port: str
    source: str
    guid: str | None = None
    values: dict[str, int] = field(default_factory=dict)
    widths: dict[str, int] = field(default_factory=dict)  # bits, where the counter saturates
    unavailable: str = ""  # why nothing could be read

    def to_json(self) -> dict:
        return {"source": self.source, "guid": self.guid, "values": dict(sorted(self.values.items()))}


def read_sysfs(root: str, device: str, port: int, names) -> PortSample:
    base = os.path.join(root, device, "ports", str(port))
    s = PortSample(f"{device}:{port}", "sysfs", _guid(os.path.join(base, "gids", "0")) or _guid(
        os.path.join(root, device, "node_guid")))
    bad = []
    for name in names:
        try:
            with open(os.path.join(base, "counters", name), encoding="utf-8", errors="replace") as fh:
                text = fh.read().strip()
        except OSError:
            continue  # this HCA does not have the counter
        if text.isdigit():
            s.values[name] = int(text)
            if name in WIDTH:
                s.widths[name] = WIDTH[name]
        else:
            bad.append(f"{name}={one_line(text, 40)}")
    if not s.values:
        s.unavailable = ("counters unreadable: " + ", ".join(bad[:3])) if bad else f"no counters under {base}/counters"
    return s


def _guid(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def judge(now: PortSample, previous: dict | None, why_no_previous: str, policy: dict[str, dict]) -> Check:
    """One `ib_counters` check for the port: the most severe class of the counters that grew since
    the previous sample; not run (with why) when there is no comparable previous sample or a counter
    that matters is saturated; a pass names the window it covers."""
    if now.unavailable:
        return Check("ib_counters", "skip", device=now.port, code="IB_COUNTERS_UNAVAILABLE", message=now.unavailable)
    judged = {k: v for k, v in now.values.items() if k in policy}
    if not judged:
        return Check("ib_counters", "skip", device=now.port, code="IB_COUNTERS_UNAVAILABLE",
                     message=f"none of the judged counters present ({now.source}: {', '.join(sorted(now.values)[:5])})")
    base, why = _comparable(now, previous, why_no_previous)
    if base is None:
        return Check("ib_counters", "skip", len(judged), "counters", device=now.port, code="IB_COUNTERS_NO_BASELINE",
                     message=f"{why}: {len(judged)} counter(s) recorded ({now.source}), growth is judged from the next run")
    grown, reset = {}, []
    for k, v in judged.items():
        if k in base and v > base[k]:
            grown[k] = (base[k], v)
        elif k in base and v < base[k]:
            reset.append(k)  # cleared (perfquery -R) or wrapped: a new baseline for it, not a finding
    return _verdict(now, grown, reset, policy, previous.get("taken_at") if previous else None)


def _comparable(now: PortSample, previous: dict | None, why_none: str) -> tuple[dict | None, str]:
    if previous is None:
        return None, why_none or "no previous ib_health result on this node"
    prev = (previous.get("ports") or {}).get(now.port)
    if not isinstance(prev, dict):
        return None, f"port not in the previous sample of {previous.get('taken_at', '?')}"
    if prev.get("source") != now.source:
        return None, f"previous sample read from {prev.get('source')}, now {now.source}"
    if prev.get("guid") and now.guid and prev["guid"] != now.guid:
        return None, f"another HCA than in the previous sample (GUID {prev['guid']} -> {now.guid})"
    values = prev.get("values")
    if not isinstance(values, dict):
        return None, "previous sample has no values"
    return {k: int(v) for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool)}, ""


def _verdict(now: PortSample, grown: dict, reset: list, policy: dict, since: str | None) -> Check:
    window = f"since {since}" if since else "since the previous sample"
    saturated = sorted(k for k, v in now.values.items() if k in policy and k in now.widths
                       and v >= (1 << now.widths[k]) - 1 and k not in grown)
    for cls, (status, code) in CLASSES.items():
        hits = {k: d for k, d in grown.items() if (policy.get(k) or {}).get("class") == cls}
        if hits and status == "fail":
            return Check("ib_counters", status, sum(b - a for a, b in hits.values()), "errors", "== 0 growth",
                         f"{_list(grown)} {window} ({now.source})", now.port, code)
    if saturated:
        return Check("ib_counters", "skip", len(saturated), "counters", device=now.port, code="IB_COUNTER_SATURATED",
                     message=f"{', '.join(f'{k}={now.values[k]}' for k in saturated)} at the maximum of the counter: "
                     f"growth cannot be seen until it is cleared" + (f"; {_list(grown)} {window}" if grown else ""))
    if grown:
        code = CLASSES["congestion"][1]
        return Check("ib_counters", "warn", sum(b - a for a, b in grown.values()), "events", "== 0 growth",
                     f"{_list(grown)} {window} ({now.source})", now.port, code)
    note = f"; reset since: {', '.join(reset)}" if reset else ""
    return Check("ib_counters", "pass", 0, "errors", "== 0 growth",
                 f"no error counter grew {window} ({len([k for k in now.values if k in policy])} judged, "
                 f"{now.source}){note}", now.port)


def _list(grown: dict) -> str:
    return ", ".join(f"{k} +{b - a} ({a} -> {b})" for k, (a, b) in sorted(grown.items(), key=lambda kv: kv[0]))
