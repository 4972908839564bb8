"""Error counters of each fabric port: a first sample judged against absolute thresholds, every
later one by its growth since the previous ib_health run on the node, and a link flap failing for a
window of hours, not only in the run that saw it.

InfiniBand ports: /sys/class/infiniband/<dev>/ports/<n>/counters/ (the PMA PortCounters the kernel
reads, drivers/infiniband/core/sysfs.c, which also fixes each counter's width: symbol_error 16 bits,
link_downed 8, local_link_integrity_errors 4, ...; IBTA counters stop at their maximum, so a
saturated one can no longer show growth; "N/A (no PMA)" when the HCA answers no PMA query). RoCE
ports: the mlx5 physical-port statistics of `ethtool -S` (roce_counters.py). What a counter means
comes from baselines.yaml `ib_health.counters` (class flap, link_error or congestion, and the
threshold a first sample is judged against, with sources); counters not listed there are recorded
but not judged.

* No comparable previous sample (the first run, a reboot, another HCA or source): the values are
  all the errors since the counters were last cleared, judged against the thresholds (those of
  infiniband-diags' ibcheckerrs: a port with millions of CRC errors fails on its first run).
* A previous sample: a counter that grew is a finding (its class says how bad); a counter lower than
  last time was cleared (perfquery -R, a firmware reset) and what it shows now is all new: judged
  as growth from 0.
* A flap (link_downed / link_down_events_phy grew, or at its threshold on a first sample) is
  remembered with its time in the sample and fails every run for `flap_window_hours` (AzureHPC
  NHC's check_ib_link_flapping: no flap within 6 h), across reboots, for the same port GUID.

* A link-error failure (IB_LINK_ERRORS) is remembered the same way: the sample keeps, per port, when
  it was seen, what grew, the port GUID, the boot and the port's flap counters then, and every later
  run fails that port with IB_LINK_ERRORS for `link_error_window_hours` (24), whatever the counters
  do now. Without it the next run compares with the failed run's own sample: the retest of the
  drained, quiet node shows no growth and would pass a link that corrupts under load. It ends early
  only when the port was reset or replaced, as the counters show it: another port GUID (a new HCA),
  or, in the same boot, a new link-up since the failure (a flap counter above its value then: the
  link was taken down and retrained, e.g. the cable reseated or the port reset; the flap itself is
  judged by the flap window). A reboot, a counter clear (perfquery -R) or a quiet run is no repair.

The previous values travel with the result: every run stores its sample in the result's
environment (`ib_counters`: boot id, time, per port the port GUID, where the values came from and
the values, and the flaps still inside the window), and the next run reads it back from the shared
results volume (ib_health.py finds it).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
from dataclasses import dataclass, field

from ..harness.checks import Check
from ..harness.text import one_line, read_line

ERROR_WINDOW_H = 24.0  # ib_health.link_error_window_hours when baselines.yaml does not say
CODES = ("IB_LINK_FLAPPED", "IB_LINK_ERRORS", "IB_DISCARDS_GROWING", "IB_COUNTER_SATURATED", "IB_COUNTERS_UNAVAILABLE")
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


@dataclass(frozen=True)
class CounterRule:
    """How one counter is judged: its class, and the value a first sample must stay below."""

    name: str
    cls: str  # flap, link_error or congestion
    threshold: int | None


def rules(counters: dict) -> dict[str, CounterRule]:
    """baselines.yaml `ib_health.counters` as rules: {name: {class, threshold}}."""
    out = {}
    for name, spec in (counters or {}).items():
        spec = spec or {}
        cls = str(spec.get("class", ""))
        if cls not in CLASSES:
            raise ValueError(f"ib_health.counters.{name}: class {cls!r} is not one of {', '.join(CLASSES)}")
        t = spec.get("threshold")
        out[str(name)] = CounterRule(str(name), cls, int(t) if isinstance(t, int) and not isinstance(t, bool) else None)
    return out


@dataclass(frozen=True)
class Verdict:
    """An `ib_counters` check, the flap this port carries forward (None: none in the window) and how
    many errors and events this sample found (a flap carried from an earlier run adds none)."""

    check: Check
    flap: dict | None
    found: int = 0
    link_errors: dict | None = None  # the link-error failure this port carries forward (None: none)


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
    s = PortSample(f"{device}:{port}", "sysfs", read_line(os.path.join(base, "gids", "0")) or read_line(
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


def judge(now: PortSample, previous: dict | None, why_no_previous: str, rules: dict[str, CounterRule],
          window_h: float, at: _dt.datetime, error_window_h: float = ERROR_WINDOW_H,
          boot: str | None = None) -> Verdict:
    """One `ib_counters` check for the port, and its flap and link-error records for the next run."""
    flap = _flap_in_window(now, previous, window_h, at)
    carried, cleared = _errors_in_window(now, previous, error_window_h, at, rules, boot)
    if now.unavailable or not any(k in rules for k in now.values):
        why = now.unavailable or (f"none of the judged counters present ({now.source}: "
                                  f"{', '.join(sorted(now.values)[:5])})")
        if flap:  # the counters cannot be read now, but the flap seen earlier is still inside its window
            return Verdict(_flap_check(now.port, flap, window_h, f"; counters not readable now: {why}"), flap, 0, carried)
        if carried:
            return Verdict(_carried_check(now.port, carried, error_window_h, f"; counters not readable now: {why}"),
                           None, 0, carried)
        return Verdict(Check("ib_counters", "skip", device=now.port, code="IB_COUNTERS_UNAVAILABLE", message=why), None)
    base, why = _comparable(now, previous, why_no_previous)
    if base is None:
        found, note = _absolute(now, rules), f"since the counters were last cleared (first sample: {why})"
    else:
        found, note = _growth(now, base, rules), f"since {(previous or {}).get('taken_at') or 'the previous sample'}"
    first = base is None
    flaps = {k: d for k, d in found.items() if rules[k].cls == "flap"}
    if flaps:
        flap = {"at": _iso(at), "what": f"{_list(flaps, now, rules, first)} {note}", "guid": now.guid,
                "count": _total(flaps)}
    errors = {k: d for k, d in found.items() if rules[k].cls == "link_error"}
    record = _error_record(now, errors, note, first, at, rules, boot) if errors else carried
    if flap:
        rest = {k: d for k, d in found.items() if k not in flaps}
        tail = (f"; {_list(rest, now, rules, first)} {note}" if rest else "") + (f"; {cleared}" if cleared else "")
        return Verdict(_flap_check(now.port, flap, window_h, tail), flap, _total(found), record)
    check = _verdict(now, found, rules, note, first)
    if carried and not errors:
        check = _carried_check(now.port, carried, error_window_h, f"; now: {check.message}")
    elif cleared and check.status == "pass":
        check = dataclasses.replace(check, message=f"{check.message}; {cleared}")
    return Verdict(check, None, _total(found), record)


def _error_record(now: PortSample, errors: dict, note: str, first: bool, at: _dt.datetime,
                  rules: dict[str, CounterRule], boot: str | None) -> dict:
    """What the next runs need to keep failing the port and to see it reset: when, what grew, the
    port GUID, the boot, and the flap counters then (a later link-up raises them)."""
    return {"at": _iso(at), "what": f"{_list(errors, now, rules, first)} {note}", "guid": now.guid, "boot_id": boot,
            "count": _total(errors), "flap_values": {k: v for k, v in now.values.items() if rules.get(k) and
                                                     rules[k].cls == "flap"}}


def _errors_in_window(now: PortSample, previous: dict | None, window_h: float, at: _dt.datetime,
                      rules: dict[str, CounterRule], boot: str | None) -> tuple[dict | None, str]:
    """(the link-error failure the previous sample carried for this port, still inside its window and
    not ended by a reset or replacement of the port; why one ended, for the message)."""
    rec = ((previous or {}).get("link_errors") or {}).get(now.port)
    if not isinstance(rec, dict) or not rec.get("at"):
        return None, ""
    try:
        seen = _dt.datetime.fromisoformat(str(rec["at"]))
    except ValueError:
        return None, ""
    if not _dt.timedelta(0) <= at - seen < _dt.timedelta(hours=window_h):
        return None, ""
    if rec.get("guid") and now.guid and rec["guid"] != now.guid:
        return None, (f"the link errors of {rec['at']} are not carried: another HCA since (GUID {rec['guid']} -> "
                      f"{now.guid}), a replaced part starts clean")
    if boot and rec.get("boot_id") == boot:  # flap counters compare only within the boot they were read in
        for k, before in sorted((rec.get("flap_values") or {}).items()):
            if k in now.values and isinstance(before, int) and now.values[k] > before:
                return None, (f"the link errors of {rec['at']} are not carried: the port went down and came back "
                              f"since ({k} {before} -> {now.values[k]}: reset or reseated)")
    if not rec.get("guid") and now.guid:  # first read of the GUID: the HCA a later swap is told from
        rec = {**rec, "guid": now.guid}
    return rec, ""


def _carried_check(port: str, rec: dict, window_h: float, tail: str) -> Check:
    return Check("ib_counters", "fail", rec.get("count"), "errors", f"no link errors within {window_h:g} h", device=port,
                 code="IB_LINK_ERRORS", message=f"link errors seen at {rec.get('at')}: {rec.get('what')}; inside the "
                 f"{window_h:g} h link-error window and no reset or replacement of the port since (another port GUID, "
                 f"or a new link-up): still failing whatever the counters show now{tail}")


def _absolute(now: PortSample, rules: dict[str, CounterRule]) -> dict[str, tuple[int | None, int]]:
    """{counter: (0, value)} for the counters at or above their threshold."""
    return {k: (0, v) for k, v in now.values.items()
            if k in rules and rules[k].threshold is not None and v >= rules[k].threshold}


def _growth(now: PortSample, base: dict[str, int], rules: dict[str, CounterRule]) -> dict[str, tuple[int | None, int]]:
    """{counter: (before, now)} for the counters that grew; a counter lower than before was cleared
    and everything it shows is new: (None, now)."""
    out = {}
    for k, v in now.values.items():
        if k not in rules or k not in base:
            continue
        if v > base[k]:
            out[k] = (base[k], v)
        elif 0 < v < base[k]:
            out[k] = (None, v)
    return out


def _flap_in_window(now: PortSample, previous: dict | None, window_h: float, at: _dt.datetime) -> dict | None:
    """The flap the previous sample carried for this port, if it is still inside the window and the
    port is the same HCA (GUID)."""
    rec = ((previous or {}).get("flaps") or {}).get(now.port)
    if not isinstance(rec, dict) or not rec.get("at"):
        return None
    if rec.get("guid") and now.guid and rec["guid"] != now.guid:
        return None  # another HCA: a replaced part does not inherit the old one's flaps
    try:
        seen = _dt.datetime.fromisoformat(str(rec["at"]))
    except ValueError:
        return None
    return rec if _dt.timedelta(0) <= at - seen < _dt.timedelta(hours=window_h) else None


def _flap_check(port: str, flap: dict, window_h: float, tail: str) -> Check:
    return Check("ib_counters", "fail", flap.get("count"), "flaps", f"no flap within {window_h:g} h", device=port,
                 code="IB_LINK_FLAPPED", message=f"the link went down and came back: {flap.get('what')}, seen at "
                 f"{flap.get('at')}, inside the {window_h:g} h flap window (AzureHPC NHC check_ib_link_flapping){tail}")


def _iso(ts: _dt.datetime) -> str:
    return ts.isoformat(timespec="seconds").replace("+00:00", "Z")


def _comparable(now: PortSample, previous: dict | None, why_none: str) -> tuple[dict | None, str]:
    if previous is None or why_none:  # why_none: a previous sample that is no baseline (another boot)
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


def _verdict(now: PortSample, found: dict, rules: dict[str, CounterRule], note: str, first: bool) -> Check:
    """link_error findings fail, a saturated counter that cannot show growth is not run, congestion
    warns, else a pass that says what it covered."""
    bad = {k: d for k, d in found.items() if rules[k].cls == "link_error"}
    threshold = "< threshold" if first else "== 0 growth"
    if bad:
        return Check("ib_counters", "fail", _total(bad), "errors", threshold,
                     f"{_list(bad, now, rules, first)} {note} ({now.source})", now.port, CLASSES["link_error"][1])
    saturated = sorted(k for k, v in now.values.items() if k in rules and k in now.widths
                       and v >= (1 << now.widths[k]) - 1 and k not in found)
    if saturated and not first:
        return Check("ib_counters", "skip", len(saturated), "counters", device=now.port, code="IB_COUNTER_SATURATED",
                     message=f"{', '.join(f'{k}={now.values[k]}' for k in saturated)} at the maximum of the counter: "
                     f"growth cannot be seen until it is cleared" + (f"; {_list(found, now, rules)} {note}" if found else ""))
    if found:
        return Check("ib_counters", "warn", _total(found), "events", threshold,
                     f"{_list(found, now, rules, first)} {note} ({now.source})", now.port, CLASSES["congestion"][1])
    judged = len([k for k in now.values if k in rules])
    what = "at or above its threshold" if first else "grew"
    return Check("ib_counters", "pass", 0, "errors", threshold,
                 f"no error counter {what} {note} ({judged} judged, {now.source})"
                 + ("; growth is judged from the next run" if first else ""), now.port)


def _total(found: dict) -> int:
    return sum(b - (a or 0) for a, b in found.values())


def _list(found: dict, now: PortSample, rules: dict[str, CounterRule], first: bool = False) -> str:
    """`symbol_error +40 (0 -> 40)`, a cleared one `port_rcv_errors 3 new (cleared since)`, a first
    sample's `symbol_error=13115284 (threshold 10)` (a saturated one says it is at least that)."""
    out = []
    for k, (a, b) in sorted(found.items()):
        if first:
            top = k in now.widths and b >= (1 << now.widths[k]) - 1
            out.append(f"{k}={b} (threshold {rules[k].threshold}" + ("; the counter's maximum: at least that" if top
                                                                   else "") + ")")
        elif a is None:
            out.append(f"{k} {b} new (cleared since, now {b})")
        else:
            out.append(f"{k} +{b - a} ({a} -> {b})")
    return ", ".join(out)
