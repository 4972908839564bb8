"""The daily report's "Slow nodes" section: the nodes suspect or failing for speed at the report's end (fail-slow:
``store.fail_slow.SlowNode``), each with its state, since when, its evidence (the flagged probe verdicts, the speed
signals), the action of code SLOW, a link to its node page, and what it costs, estimated (``domain.slow_cost``).

A slow node passes every floor, so no failure of the day and no failing pair names it: this section is where the
report does. The state is what the node's last two probes and the signals of the window say at the report's end;
evidence newer than that end (a past day's report built later) is left out, with the node.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cluster_doctor.domain import actions, slow_cost

def slow_data(found: Mapping[str, Any], *, as_of: dt.datetime, gpus: Callable[[str], int | None],
              node_url: Callable[[str], str], order: Callable[[str], Any]) -> list[dict[str, Any]]:
    """The section's rows (JSON-able): failing nodes first, then suspects, each in ``order``. ``gpus``: a node's GPU
    count (None: unknown); ``node_url``: its node page, as the failures of the day link it."""
    rows = []
    for name, s in found.items():
        if s.since is not None and s.since > as_of:
            continue
        cost = slow_cost.estimate(s.probes, since=s.since, now=as_of, gpus=gpus(name))
        rows.append({
            "node_name": name, "state": s.state.value, "failing": s.failing,
            "since": s.since.isoformat() if s.since else None, "probes": list(s.probes), "signals": list(s.signals),
            "line": s.describe(), "action": actions.shown(actions.SLOW_ACTION) if s.failing else None,
            "cost": cost.describe(), "cost_gpu_hours": round(cost.gpu_hours, 3) if cost.gpu_hours is not None else None,
            "slowdown": round(cost.slowdown, 4) if cost.slowdown is not None else None,
            "node_url": node_url(name),
        })
    return sorted(rows, key=lambda r: (not r["failing"], order(r["node_name"])))


def slow_counts(rows: Sequence[Mapping[str, Any]]) -> str:
    """The headline card's value: 'failing / suspect'."""
    failing = sum(bool(r["failing"]) for r in rows)
    return f"{failing} / {len(rows) - failing}"


def slow_line(rows: Sequence[Mapping[str, Any]], limit: int = 10) -> str:
    """The headline's line: how many failing and suspect, the first ``limit`` named."""
    failing = sum(bool(r["failing"]) for r in rows)
    named = ", ".join(r["node_name"] for r in rows[:limit]) + (", …" if len(rows) > limit else "")
    return (f"Slow nodes (they pass every floor): {failing} failing (code SLOW), {len(rows) - failing} suspect"
            + (f": {named}" if rows else ""))


def slow_blocks(rows: Sequence[Mapping[str, Any]]) -> list[tuple]:
    """The section as report blocks (``reports.daily``'s block kinds): a line of counts, then a box per node."""
    out: list[tuple] = [("h2", "Slow nodes")]
    if not rows:
        return [*out, ("p", "No GPU node was slow at the end of the day (no flagged speed probe, no speed signal "
                            "in the window).", "")]
    failing = sum(r["failing"] for r in rows)
    out.append(("p", f"{len(rows)} GPU node(s) slow: {failing} failing (code SLOW), {len(rows) - failing} suspect. "
                     "They pass every floor yet run under the fleet of their GPU model, so no failure below names "
                     "them. The cost is an estimate: GPUs × hours since the evidence × how far the flagged figure "
                     "is under the fleet median, as if the node ran jobs all that time.", "meta"))
    for r in rows:
        since = f"{r['since'][:10]} {r['since'][11:16]} UTC" if r["since"] else "-"
        what = "failing (code SLOW)" if r["failing"] else "suspect (one sighting: the next sweep probes it again)"
        evidence = [f"probe {p}" for p in r["probes"]] + [f"signal {s}" for s in r["signals"]]
        out.append(("box", [
            ("h3", f"{r['node_name']} — slow, {what}, since {since}"),
            ("p", f"Action: {r['action'] or 'retest (the next sweep probes it)'}", "action"),
            ("list", evidence or ["(no evidence line recorded)"]),
            ("p", f"Cost (estimate): {r['cost']}", ""),
            ("links", [("node page", r["node_url"], "")]),
        ]))
    return out
