"""The daily summary: one markdown and one standalone HTML file per UTC day.

What it shows, for day D (UTC), from the results database only:

- **headline**: coverage, attempts and failures of the day, validation GPU-hours;
- **attempts of the day**: counts per test and status;
- **failures of the day**: every fail/error attempt finished during D with its failing checks (name,
  device, value, threshold) and whether it is new (previous executed result passed, or none);
- **slow nodes**: the nodes suspect or failing for speed (code SLOW) at the end of D, though they pass every
  floor: state, since, evidence, action, node page, and the GPU-hours they cost, estimated (``reports.daily_slow``);
- **coverage trend**: for each of the 14 days ending D, the share of fleet nodes whose every enabled
  test has an executed result (pass/fail/error) finished within [end of day − staleness, end of day);
- **per GPU model**: attempts per status, and the median / min of each suite's key metrics
  (``suites.CATALOG[...].key_metrics``) over the day's passes;
- **fleet as of the end of D**: counts per test and state (fresh pass, fail, error, stale, never),
  every failing pair in full (since when, reason), stale and never-validated pairs grouped per test as
  compressed node ranges.

Everything is "as of" the end of D (or now, for today), computed from ``validation_history``, so a
report regenerated later for a past day shows that day, not today's state.

Size at 5,000 nodes: failing pairs and failed attempts are listed one per row up to ``max_rows``
(then "+N more" and a pointer to ``validation_latest``); passing pairs are only counted; stale/never
pairs are hostlist-compressed per test, which stays short on a regularly named fleet. A report stays
in the hundreds of kilobytes whatever the fleet size.

The fleet (coverage denominator): the GPU node inventory (``store.inventory``) as of the end of D —
every node discovery had seen by then, attempted or not, a node that left counted for the grace period
(setting ``gone_node_grace_hours``): the nodes the fleet page, ``cluster-doctor status``, the metrics and
the run summary count. Each day of the trend counts the fleet as of that day's end, by the same rule, so
the trend's row of a day reads what that day's own report said; a day that ended before the fleet was
first seen shows "no data", never 0 %. Never-validated nodes are listed with why they were not validated
(their eligibility as discovery last saw it: busy, cordoned, not ready ...).

Validation GPU-hours: sum of duration × GPU count of the attempts finished during D (an attempt that
crosses midnight counts on the day it finished).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import pathlib
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import hostlist

from cluster_doctor.domain import actions, coverage, suites
from cluster_doctor.domain import transitions as life
from cluster_doctor.domain.coverage import STATE_TITLES, STATES, CoverageState
from cluster_doctor.domain.nodes import compress
from cluster_doctor.domain.numbers import finite, skip
from cluster_doctor.domain.peers import PeerVerdictValue
from cluster_doctor.domain.status import EXECUTED, FAILING, Status
from cluster_doctor.reports.ctrf import resolve_reports_dir
from cluster_doctor.reports.daily_slow import slow_blocks, slow_counts, slow_data, slow_line
from cluster_doctor.reports.templating import environment
from cluster_doctor.reports.text import age, md_escape, percent
from cluster_doctor.store import daily as daily_reads
from cluster_doctor.store import baselines, fail_slow, files, inventory, peers, suspects, transitions, trend

log = logging.getLogger(__name__)

TREND_DAYS = 14
# Where a failure links to, relative to the Airflow UI's root: the node page the plugin mounts
# (web.app.MOUNT_PREFIX) and the validation step's task instance (the DAG's validate task group).
NODE_PAGE = "cluster-doctor/nodes/{node}"
TASK_LOG = "dags/{dag_id}/runs/{run_id}/tasks/validate.{test}"
REPORT_PAGE = "cluster-doctor/reports/daily"
DEFAULT_MAX_ROWS = 500
MAX_CHECKS_PER_FAILURE = 20
CHECK_FIELDS = ("name", "status", "device", "value", "unit", "threshold", "message")


# ---------------------------------------------------------------------------- days
def parse_day(value: Any) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).date() if value.tzinfo else value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip()[:10])
        except ValueError:
            pass
    raise ValueError(f"day must be a date like 2026-01-31, got {value!r}")


def default_day(data_interval_end: dt.datetime | None, now: dt.datetime) -> dt.date:
    """The day a run reports on: the day its data interval closes (a scheduled @daily run at 00:00
    covers the day that just ended); for a manual run, yesterday."""
    end = data_interval_end or now
    return (end.astimezone(dt.UTC) - dt.timedelta(days=1)).date()


def report_day(default: dt.date, first_seen: dt.datetime | None, now: dt.datetime) -> dt.date:
    """The day a run given no day reports on: ``default`` (yesterday, for a run of today), unless that day
    ended before the fleet was first seen (a new install: that report would be empty) — then today so far.
    The scheduled run after midnight reports the whole day, in the same file."""
    today = now.astimezone(dt.UTC).date()
    if default < today and (first_seen is None or first_seen >= _start_of(default) + dt.timedelta(days=1)):
        return today
    return default


def _start_of(day: dt.date) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)


# ---------------------------------------------------------------------------- reading
def _node_key(name: str):
    return hostlist.numeric_sort_key(name), name


@dataclasses.dataclass(frozen=True)
class _Reads:
    """What one report reads, all from one snapshot of the results database (``store.daily``)."""

    counted: dict[str, Any]  # the inventory nodes the fleet counts, by name
    fleet: list[str]  # their names in natural order
    pairs: list[daily_reads.PairAsOf]
    trend: list[dict[str, Any]]
    day_counts: list[daily_reads.DayCount]
    failures: list[daily_reads.FailedAttempt]
    model_counts: list[daily_reads.ModelCount]
    model_metrics: list[daily_reads.ModelMetric]
    reservations: daily_reads.ReservationsOfDay
    peers: dict[str, Any] | None
    suspects: dict[str, Any]  # node -> domain.signals.Suspect at the report's end
    failing_since: dict[str, Any]  # node -> domain.signals.FailingSince of the nodes failing now
    # the day's transitions, and the repeat offenders at the report's end
    transitions: list[Any] = dataclasses.field(default_factory=list)
    offenders: dict[str, Any] = dataclasses.field(default_factory=dict)
    # the node pools without a baseline at the report's end: once each, with the action
    missing_baselines: list[Any] = dataclasses.field(default_factory=list)
    # the nodes slow at the report's end: node -> store.fail_slow.SlowNode
    slow: dict[str, Any] = dataclasses.field(default_factory=dict)


def _read(store: daily_reads.Connections, *, start: dt.datetime, as_of: dt.datetime, tests: Sequence[str],
          staleness: dt.timedelta, trend_ends: Sequence[dt.datetime], gone_grace_hours: float,
          key_pairs: Sequence[tuple[str, str]], peer_window_days: float | None,
          slow_window: dt.timedelta = fail_slow.SLOW_WINDOW,
          slow_spacing: dt.timedelta = fail_slow.SLOW_SPACING) -> _Reads:
    """Every section's rows, in one consistent, read-only snapshot."""
    window = {"start": start, "end": as_of}
    with daily_reads.snapshot(store) as cur:
        counted = {n.node_name: n for n in inventory.counted(
            cur, as_of=as_of, grace=dt.timedelta(hours=gone_grace_hours))}
        fleet = sorted(counted, key=_node_key)
        slow = fail_slow.slow_nodes(cur, now=as_of, window=slow_window, spacing=slow_spacing, nodes=fleet)
        return _Reads(
            counted=counted, fleet=fleet,
            pairs=daily_reads.fleet_as_of(cur, nodes=fleet, tests=tests, as_of=as_of),
            trend=trend.fleet_trend(cur, ends=trend_ends, tests=tests, staleness=staleness,
                                    grace=dt.timedelta(hours=gone_grace_hours)),
            day_counts=daily_reads.day_counts(cur, **window),
            failures=daily_reads.failed_attempts(cur, **window),
            model_counts=daily_reads.model_counts(cur, **window),
            model_metrics=daily_reads.model_metrics(cur, **window, key_pairs=key_pairs),
            reservations=daily_reads.reservations(cur, **window),
            peers=_peers(cur, as_of, peer_window_days) if peer_window_days else None,
            suspects=suspects.as_of(cur, as_of), failing_since=suspects.failing_since(cur, tests, fleet),
            transitions=transitions.in_window(cur, start, as_of),
            offenders=transitions.repeat_offenders(cur, as_of=as_of),
            missing_baselines=baselines.missing(cur, tests),
            slow=slow)


# ---------------------------------------------------------------------------- building
def build(
    store: daily_reads.Connections,
    day: dt.date | str,
    *,
    tests: Sequence[str],
    staleness_days: float,
    now: dt.datetime | None = None,
    gone_grace_hours: float = 24.0,
    max_rows: int = DEFAULT_MAX_ROWS,
    peer_window_days: float | None = None,
    ui_base: str = "/",
    slow_window_hours: float = fail_slow.SLOW_WINDOW.total_seconds() / 3600,
    slow_spacing_hours: float = fail_slow.SLOW_SPACING.total_seconds() / 3600,
) -> dict[str, Any]:
    """Everything the daily report shows, as a JSON-able dict (the renderers read only this).
    ``peer_window_days``: how far back peer-test evidence counts (None: peer tests are off). ``ui_base``:
    the Airflow UI's root its links start with (``[api] base_url``; '/' on the same host)."""
    now = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    day = parse_day(day)
    start = _start_of(day)
    if start > now:
        raise ValueError(f"day {day} is in the future")
    as_of = min(start + dt.timedelta(days=1), now)
    staleness = dt.timedelta(days=staleness_days)
    tests = list(dict.fromkeys(tests))
    trend_days = [day - dt.timedelta(days=i) for i in range(TREND_DAYS - 1, -1, -1)]
    # every catalog suite, enabled or not: a result of the day is a real measurement either way
    key_pairs = [(s.name, m) for s in suites.CATALOG.values() for m in s.key_metrics]
    read = _read(store, start=start, as_of=as_of, tests=tests, staleness=staleness,
                 trend_ends=[min(_start_of(d) + dt.timedelta(days=1), as_of) for d in trend_days],
                 gone_grace_hours=gone_grace_hours, key_pairs=key_pairs, peer_window_days=peer_window_days,
                 slow_window=dt.timedelta(hours=slow_window_hours),
                 slow_spacing=dt.timedelta(hours=slow_spacing_hours))
    slow_failing = [n for n, s in read.slow.items() if s.failing and fail_slow.PROBE_TEST in tests]
    fleet_section = _fleet(read.pairs, read.fleet, tests, as_of, staleness, max_rows, slow_failing=slow_failing)
    fleet_section["never_why"] = _never_why(fleet_section.pop("never_nodes"), read.counted)
    coverage_trend = _trend(trend_days, read.trend)
    counts, per_test, gpu_hours = _day_figures(read.day_counts)
    failures = sorted(read.failures, key=lambda r: (_node_key(r.node_name), r.test_name, r.finished_at))
    last = coverage_trend[-1]
    return {
        "day": day.isoformat(),
        "as_of": as_of.isoformat(),
        "generated_at": now.isoformat(),
        "ui_base": _base(ui_base),
        "partial_day": as_of < start + dt.timedelta(days=1),
        "tests": tests,
        "staleness_days": staleness_days,
        "fleet_source": (f"the GPU node inventory (every node discovery has seen; one that left counts for "
                         f"{gone_grace_hours:g} h)"),
        "coverage": {"covered": last["covered"], "nodes": last["nodes"], "coverage": last["coverage"]},
        "day_counts": {"total": sum(counts.values()), **counts},
        "day_counts_per_test": dict(sorted(per_test.items())),
        "gpu_hours": gpu_hours,
        "failures": [_failure(r, ui_base) for r in failures[:max_rows]],
        "failures_total": len(failures),
        "failing_nodes_today": len({r.node_name for r in failures}),
        "newly_failing_today": sum(1 for r in failures if r.previous_status in (None, Status.PASS)),
        "coverage_trend": coverage_trend,
        "per_model": _per_model(read.model_counts, read.model_metrics, key_pairs),
        "fleet": fleet_section,
        "max_rows": max_rows,
        "reservations": _reservations(read.reservations, start, as_of, read.counted.values()),
        "peers": read.peers,
        "suspects": [{"node_name": n, "since": _iso(s.since), "line": s.describe()}
                     for n, s in sorted(read.suspects.items(), key=lambda i: _node_key(i[0])) if n in read.counted],
        "failing_since": {n: f.describe() for n, f in read.failing_since.items()},
        "transitions": _transitions(read.transitions, max_rows),
        "repeat_offenders": [{"node_name": n, "since": _iso(o.since), "line": o.describe()}
                             for n, o in sorted(read.offenders.items(), key=lambda i: _node_key(i[0]))],
        "missing_baselines": [{"gpu_model": m.gpu_model, "nodes": m.nodes, "tests": list(m.tests),
                               "example": m.example, "line": m.describe()} for m in read.missing_baselines],
        "slow_nodes": slow_data(read.slow, as_of=as_of, order=_node_key,
                                gpus=lambda n: getattr(read.counted.get(n), "gpu_count", None),
                                node_url=lambda n: _base(ui_base) + NODE_PAGE.format(node=_quote(n))),
    }


def _transitions(found: Sequence[Any], max_rows: int) -> dict[str, Any]:
    """The day's transitions: how many of each kind, and each one, oldest first."""
    counts = {kind: sum(t.kind == kind for t in found) for kind in life.KINDS}
    return {"counts": counts, "total": len(found),
            "lines": [f"{t.node_name} {t.line()}" for t in found[:max_rows]]}


def _rounded(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None else None


def _trend(days: Sequence[dt.date], samples: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The trend table's rows: one per day, the coverage at its end."""
    return [{"day": d.isoformat(), "as_of": t["as_of"].isoformat(), "covered": t["covered_nodes"],
             "nodes": t["nodes"], "coverage": _rounded(t["coverage"], 4),
             "pair_coverage": _rounded(t["pair_coverage"], 4)}
            for d, t in zip(days, samples, strict=True)]


def _day_figures(rows: Sequence[daily_reads.DayCount]) -> tuple[dict[str, int], dict[str, dict[str, int]],
                                                               dict[str, Any]]:
    """Attempts of the day per status, per test and status, and the GPU-hours they held."""
    counts = {s: 0 for s in Status}
    per_test: dict[str, dict[str, int]] = {}
    gpu_hours = {"total": 0.0, "executed": 0.0, "not_executed": 0.0, "attempts_without_gpu_count": 0}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + r.attempts
        per_test.setdefault(r.test_name, {s: 0 for s in Status})[r.status] = r.attempts
        gpu_hours["total"] += r.gpu_hours
        gpu_hours["executed" if r.status in EXECUTED else "not_executed"] += r.gpu_hours
        gpu_hours["attempts_without_gpu_count"] += r.without_gpu_count
    return counts, per_test, {k: round(v, 3) if isinstance(v, float) else v for k, v in gpu_hours.items()}


def _peers(cur, as_of: dt.datetime, window_days: float) -> dict[str, Any]:
    """Peer tests as of the report's end: nodes by verdict, the suspect and blamed ones
    named with their latest peer."""
    rows = [r for r in peers.peer_results(cur, since=as_of - dt.timedelta(days=window_days)) if r.finished_at < as_of]
    found = peers.triangulate(rows, model_sizes=peers.model_sizes(cur))
    named = {k: [f"{n} (with {v.peer})" for n, v in sorted(found.items(), key=lambda kv: _node_key(kv[0]))
                 if v.verdict == k] for k in (PeerVerdictValue.SUSPECT, PeerVerdictValue.FAIL)}
    return {"nodes": len(found), "pass": sum(v.verdict == PeerVerdictValue.PASS for v in found.values()),
            "suspect": named["suspect"], "fail": named["fail"]}


def peer_line(p: Mapping[str, Any], limit: int = 10) -> str:
    def listed(names: Sequence[str]) -> str:
        more = f", … {len(names) - limit} more" if len(names) > limit else ""
        return f": {', '.join(names[:limit])}{more}" if names else ""

    return (f"Peer tests: {p['nodes']} node(s) peer-tested, {p['pass']} passed, {len(p['fail'])} blamed"
            f"{listed(p['fail'])}; {len(p['suspect'])} suspect (failed, not yet blamed on either side)"
            f"{listed(p['suspect'])}")


def _reservations(found: daily_reads.ReservationsOfDay, start: dt.datetime, end: dt.datetime,
                  nodes: Iterable[Any]) -> dict[str, Any] | None:
    """Reservations of overdue nodes of the day (setting reservation): taints applied and
    removed, and the idle GPU-hours they cost, also as a share of the fleet's GPU-hours of the day. None
    when nothing was reserved that day and nothing is reserved now (the feature is off or idle)."""
    if not found.applied and not found.open_now and not found.released:
        return None
    idle = round(found.idle_gpu_hours, 3)
    hours = (end - start).total_seconds() / 3600
    fleet_gpu_hours = sum(int(getattr(n, "gpu_count", 0) or 0) for n in nodes) * hours
    return {"applied": found.applied, "released": dict(found.released), "open_now": found.open_now,
            "idle_gpu_hours": idle,
            "idle_share": round(idle / fleet_gpu_hours, 5) if fleet_gpu_hours else None}


def reservation_line(r: Mapping[str, Any]) -> str:
    released = ", ".join(f"{n} {why}" for why, n in sorted(r["released"].items())) or "none"
    share = f" ({r['idle_share']:.2%} of all GPU-hours of the day)" if r["idle_share"] is not None else ""
    return (f"Reservations of overdue nodes: {r['applied']} taint(s) applied, {sum(r['released'].values())} "
            f"removed ({released}), {r['open_now']} reserved now; idle while reserved {_num(r['idle_gpu_hours'])} "
            f"GPU-hours{share}")


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _base(ui_base: str | None) -> str:
    return (ui_base or "/").rstrip("/") + "/"


def _quote(value: Any) -> str:
    return urllib.parse.quote(str(value), safe="")


def failure_links(r: Any, ui_base: str = "/") -> dict[str, str | None]:
    """A failed attempt's node page and task log in the Airflow UI (no log link for a row recorded by
    hand or imported: no task instance)."""
    base = _base(ui_base)
    log_url = None
    if r.dag_id and r.run_id:
        log_url = base + TASK_LOG.format(dag_id=_quote(r.dag_id), run_id=_quote(r.run_id), test=_quote(r.test_name))
        if r.map_index is not None and r.map_index >= 0:
            log_url += f"/mapped/{int(r.map_index)}"
        if r.try_number:
            log_url += f"?try_number={int(r.try_number)}"
    return {"node_url": base + NODE_PAGE.format(node=_quote(r.node_name)), "log_url": log_url}


def _failure(r: daily_reads.FailedAttempt, ui_base: str = "/") -> dict[str, Any]:
    checks = [c for c in (r.failing_checks or []) if isinstance(c, Mapping)]
    return {
        "action": actions.shown(r.action), **failure_links(r, ui_base),
        "node_name": r.node_name, "test_name": r.test_name, "status": r.status,
        "started_at": _iso(r.started_at), "finished_at": _iso(r.finished_at),
        "duration_s": r.duration_s, "reason": r.reason, "gpu_model": r.gpu_model,
        "log_path": r.log_path,
        "dag_id": r.dag_id, "run_id": r.run_id, "map_index": r.map_index,
        "try_number": r.try_number,
        "previous_status": r.previous_status, "previous_finished_at": _iso(r.previous_finished_at),
        "new": r.previous_status in (None, Status.PASS),
        "checks": [{k: c.get(k) for k in CHECK_FIELDS} for c in checks[:MAX_CHECKS_PER_FAILURE]],
        "checks_total": len(checks),
    }


def _fleet(pairs: Sequence[daily_reads.PairAsOf], nodes: Sequence[str], tests: Sequence[str],
           as_of: dt.datetime, staleness: dt.timedelta, max_rows: int,
           slow_failing: Sequence[str] = ()) -> dict[str, Any]:
    """The fleet as of the end of the day; ``slow_failing``: the nodes failing by speed (code SLOW) then,
    failing nodes as on the fleet page though their pairs pass."""
    assessed = coverage.assess([p.as_row() for p in pairs], tests=tests, now=as_of, staleness=staleness,
                               nodes=nodes).with_slow_failing(slow_failing)
    counts = {s: 0 for s in STATES}
    per_test = {t: {s: 0 for s in STATES} for t in tests}
    failing: list[dict[str, Any]] = []
    incomplete: list[str] = []  # passing pairs some of whose checks could not run: not a clean pass
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for p in assessed.pairs:
        state = p["state"]
        counts[state] += 1
        if p.get("status") == Status.PASS and p.get("incomplete"):
            incomplete.append(p["node_name"])
        per_test[p["test_name"]][state] += 1
        if state in FAILING:
            failing.append(p)
        elif state in (CoverageState.STALE, CoverageState.NEVER):
            grouped.setdefault((p["test_name"], state), []).append(p)
    # longest-failing first: the pairs nobody has looked at for days
    far = dt.datetime.max.replace(tzinfo=dt.UTC)
    failing.sort(key=lambda p: (p.get("status_since") or p.get("finished_at") or far, _node_key(p["node_name"]),
                                p["test_name"]))
    rows = [{
        "node_name": p["node_name"], "test_name": p["test_name"], "status": p["status"],
        "finished_at": _iso(p.get("finished_at")), "age": age(p.get("finished_at"), as_of),
        "status_since": _iso(p.get("status_since")), "since_age": age(p.get("status_since"), as_of),
        "previous_status": p.get("previous_status"), "reason": p.get("reason"), "gpu_model": p.get("gpu_model"),
        "stale": p["stale"],
        "last_attempt_status": p.get("last_attempt_status"), "last_attempt_at": _iso(p.get("last_attempt_at")),
        "last_attempt_reason": p.get("last_attempt_reason"),
    } for p in failing[:max_rows]]
    groups = []
    for test in tests:
        for state in (CoverageState.NEVER, CoverageState.STALE):
            members = grouped.get((test, state))
            if not members:
                continue
            oldest = min((m["finished_at"] for m in members if m.get("finished_at")), default=None)
            groups.append({"test_name": test, "state": state, "count": len(members),
                           "oldest": _iso(oldest), "oldest_age": age(oldest, as_of) if oldest else None,
                           "nodes": compress(sorted((m["node_name"] for m in members), key=_node_key))})
    summary = assessed.summary()
    return {
        "nodes": summary["gpu_nodes"], "pairs": summary["pairs"], "counts": counts, "per_test": per_test,
        "covered_nodes": summary["covered_nodes"], "failing": rows, "failing_total": len(failing),
        "failing_nodes": len(summary["failing_nodes"]),
        "stale_groups": groups, "never_nodes": summary["never_validated"],
        "incomplete_passes": len(incomplete),
        "incomplete_nodes": compress(sorted(set(incomplete), key=_node_key)),
    }


def _never_why(never: Sequence[str], counted: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Never-validated nodes grouped by why, as discovery last saw them: free (due, not reached yet),
    busy, cordoned, not ready ... or gone; each group with its node ranges and since when."""
    groups: dict[str, list[Any]] = {}
    for name in never:
        node = counted.get(name)
        groups.setdefault(node.state if node is not None else inventory.UNKNOWN, []).append(node or name)
    out = []
    for state, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        known = [m for m in members if not isinstance(m, str)]
        oldest = min((m.since for m in known), default=None)
        details = sorted({m.eligibility_detail for m in known if m.eligibility_detail and m.gone_at is None})
        out.append({"state": state, "count": len(members), "since": _iso(oldest),
                    "nodes": compress(sorted((m if isinstance(m, str) else m.node_name for m in members),
                                             key=_node_key)),
                    "example": details[0] if details else None})
    return out


def _per_model(model_counts: Sequence[daily_reads.ModelCount], metrics: Sequence[daily_reads.ModelMetric],
               key_pairs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    order = {pair: i for i, pair in enumerate(key_pairs)}
    by_model: dict[str, dict[str, Any]] = {}
    for c in model_counts:
        by_model[c.gpu_model] = {"gpu_model": c.gpu_model or "unknown", "nodes": c.nodes,
                                 "attempts": c.attempts, "pass": c.passed, "fail": c.failed,
                                 "error": c.errored, "metrics": []}
    for m in metrics:
        for _ in range(m.skipped):
            skip("metric")
    for m in sorted((m for m in metrics if m.n),
                    key=lambda m: (m.gpu_model, order.get((m.test_name, m.metric), 0))):
        entry = by_model.setdefault(m.gpu_model, {
            "gpu_model": m.gpu_model or "unknown", "nodes": 0, "attempts": 0, "pass": 0, "fail": 0,
            "error": 0, "metrics": []})
        entry["metrics"].append({"test_name": m.test_name, "metric": m.metric, "n": m.n,
                                 "median": float(m.median), "min": float(m.minimum)})
    return [by_model[k] for k in sorted(by_model, key=lambda m: (m == "", m))]


# ---------------------------------------------------------------------------- rendering
# Both formats render one list of blocks built once from the data, so they can never disagree.
# Blocks: ("h1"|"h2"|"h3", text) · ("p", text, css class) · ("list", [text]) · ("cards", [(value, label)])
# · ("table", headers, rows, numeric column indexes) · ("box", [blocks]) for a framed group
# · ("only", "markdown"|"html", [blocks]) for what suits one format (headline list vs. cards).
# Table cells are plain values, Cell(text, css class) for a coloured status, or Bar(fraction).
@dataclasses.dataclass(frozen=True)
class Cell:
    text: str
    css: str = ""


@dataclasses.dataclass(frozen=True)
class Bar:
    fraction: float


def _num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) and abs(value) >= 10 ** 15:
        value = finite(value, "check_value")  # a stored huge integer: shown as a float, or not at all
        if value is None:
            return "out of range"
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"


def _pct(value: float | None) -> str:
    return percent(value, missing="-")


NO_DATA = "no data"  # a day before the fleet was first seen: nothing was there to cover


def _coverage_text(nodes: int, value: float | None) -> str:
    return NO_DATA if not nodes else _pct(value)


def _hm(iso: str | None) -> str:
    return iso[11:16] if iso else "-"


def _when(iso: str | None) -> str:
    return f"{iso[:10]} {iso[11:16]}" if iso else "-"


def _check_value(c: Mapping[str, Any]) -> str:
    if c.get("value") is None:
        return "-"
    return f"{_num(c['value'])}{(' ' + str(c['unit'])) if c.get('unit') else ''}"


def _later_attempt(r: Mapping[str, Any]) -> str:
    """A non-executed attempt after the failing result (timeout, preempted, skipped) tells why the pair
    has not been retested yet."""
    if r.get("last_attempt_status") and r.get("last_attempt_at") != r.get("finished_at"):
        text = f"{r['last_attempt_status']} {_when(r['last_attempt_at'])}"
        return text + (f": {r['last_attempt_reason']}" if r.get("last_attempt_reason") else "")
    return "-"


def headline(data: Mapping[str, Any]) -> list[str]:
    cov, counts, fleet = data["coverage"], data["day_counts"], data["fleet"]
    per_status = ", ".join(f"{s} {counts[s]}" for s in Status if counts.get(s))
    never_nodes = sum(g["count"] for g in fleet["never_why"])
    return [
        f"Coverage: {cov['covered']}/{cov['nodes']} GPU node(s) fully validated within "
        f"{data['staleness_days']:g} d ({_coverage_text(cov['nodes'], cov['coverage'])}); never validated: "
        f"{never_nodes} GPU node(s)",
        f"Attempts of the day: {counts['total']}" + (f" ({per_status})" if per_status else ""),
        f"Failures of the day: {data['failures_total']} attempt(s) on {data['failing_nodes_today']} node(s), "
        f"{data['newly_failing_today']} newly failing",
        f"Failing GPU nodes at the end of the day: {fleet.get('failing_nodes', 0)} (a fail or error on any test, "
        f"or slow: code SLOW)",
        f"Node-test pairs in the fleet: {fleet['pairs']}; failing: {fleet['failing_total']}; "
        f"stale: {fleet['counts']['stale']}; never validated: {fleet['counts']['never']} node-test pair(s)",
        slow_line(data.get("slow_nodes") or []),
        *([f"Passes with checks not run (incomplete, not a clean pass): {fleet['incomplete_passes']} pair(s) on "
           f"{fleet['incomplete_nodes']}"] if fleet.get("incomplete_passes") else []),
        f"Validation GPU-hours: {_num(data['gpu_hours']['total'])}",
        *([f"Results waiting: {data['spool']['line']}"] if (data.get("spool") or {}).get("line") else []),
    ]


def _failure_blocks(f: Mapping[str, Any]) -> list[tuple]:
    new = "new" if f["new"] else f"repeat: the previous result was {f['previous_status']}"
    meta = [f"GPU model {f['gpu_model'] or 'unknown'}",
            f"run {f['dag_id']} {f['run_id']} map {f['map_index']}"]
    if f.get("since"):  # the node's first failing evidence after its last pass
        meta.insert(0, f["since"])
    if f["log_path"]:
        meta.append(f"log {f['log_path']}")
    title = (f"{f['node_name']} · {f['test_name']} — {f['status'].upper()} at {_hm(f['finished_at'])} UTC "
             f"({new})")
    links = [("node page", f["node_url"], "")]
    if f.get("log_url"):
        links.append(("task log", f["log_url"], "_top"))  # the Airflow UI itself, not inside the plugin's frame
    blocks: list[tuple] = [
        ("h3", title),
        ("p", f"Action: {f.get('action') or actions.UNKNOWN}", "action"),
        ("p", f"Reason: {f['reason'] or '(none recorded)'}", ""),
        ("links", links),
        ("p", " · ".join(meta), "meta"),
    ]
    if f["checks"]:
        blocks.append(("table", ["check", "status", "device", "value", "threshold", "message"], [
            [c["name"], Cell(c["status"], c["status"]), c["device"] or "-", _check_value(c),
             c["threshold"] or "-", c["message"] or ""] for c in f["checks"]], [3]))
        if f["checks_total"] > len(f["checks"]):
            blocks.append(("p", f"… and {f['checks_total'] - len(f['checks'])} more failing check(s)", ""))
    return [("box", blocks)]


def blocks(data: Mapping[str, Any]) -> list[tuple]:
    """The report as blocks, section after section (both formats render these)."""
    return [*_head_blocks(data), *baseline_blocks(data), *_attempts_blocks(data), *_failures_blocks(data),
            *_trend_blocks(data),
            *_model_blocks(data), *_fleet_blocks(data),
            ("p", f"Generated {_when(data['generated_at'])} UTC by Cluster Doctor.", "meta")]


def _head_blocks(data: Mapping[str, Any]) -> list[tuple]:
    """Title, what the report covers, the headline (cards in HTML, a list in markdown)."""
    fleet, counts, gh = data["fleet"], data["day_counts"], data["gpu_hours"]
    cov = data["coverage"]
    out: list[tuple] = [
        ("h1", f"Cluster Doctor daily summary — {data['day']} (UTC)"),
        ("p", f"As of {_when(data['as_of'])} UTC" + (" (day in progress)" if data["partial_day"] else "")
         + f" · staleness threshold {data['staleness_days']:g} d · tests: {', '.join(data['tests'])}"
         f" · fleet: {fleet['nodes']} GPU node(s) from {data['fleet_source']}", "meta"),
        ("only", "html", [("cards", [
            (_coverage_text(cov["nodes"], cov["coverage"]), f"coverage ({cov['covered']}/{cov['nodes']} GPU nodes)"),
            (sum(g["count"] for g in fleet["never_why"]), "GPU nodes never validated"),
            (counts["total"], "attempts of the day"),
            (data["failures_total"], f"failed attempts ({data['newly_failing_today']} new)"),
            (fleet.get("failing_nodes", 0), "failing GPU nodes (fail, error or SLOW)"),
            (fleet["failing_total"], "failing node-test pairs in the fleet"),
            (slow_counts(data.get("slow_nodes") or []), "slow nodes: failing (code SLOW) / suspect"),
            (fleet["counts"]["stale"] + fleet["counts"]["never"], "node-test pairs stale or never validated"),
            (_num(gh["total"]), "validation GPU-hours")])]),
        ("only", "markdown", [("h2", "Headline"), ("list", headline(data))]),
    ]
    spooled = data.get("spool") or {}
    if spooled.get("line"):  # results the database has not taken yet: not in any figure below
        out.append(("only", "html", [("p", f"Results waiting: {spooled['line']}", "")]))
    return out


def _attempts_blocks(data: Mapping[str, Any]) -> list[tuple]:
    counts, gh = data["day_counts"], data["gpu_hours"]
    out: list[tuple] = [("h2", "Attempts of the day")]
    if counts["total"]:
        rows = [[t, *(c[s] for s in Status), sum(c.values())]
                for t, c in data["day_counts_per_test"].items()]
        rows.append([Cell("all", "total"), *(counts[s] for s in Status), counts["total"]])
        out.append(("table", ["test", *Status, "total"], rows, range(1, len(Status) + 2)))
        out.append(("p", f"Validation GPU-hours: {_num(gh['total'])} ({_num(gh['executed'])} in executed "
                         f"suites, {_num(gh['not_executed'])} in attempts that did not judge)"
                         + (f"; {gh['attempts_without_gpu_count']} attempt(s) had no GPU count"
                            if gh["attempts_without_gpu_count"] else ""), ""))
    else:
        out.append(("p", "No attempt finished on this day.", ""))
    if data.get("reservations"):
        out.append(("p", reservation_line(data["reservations"]), ""))
    if data.get("peers"):
        out.append(("p", peer_line(data["peers"]), ""))
    return out


def _failures_blocks(data: Mapping[str, Any]) -> list[tuple]:
    out: list[tuple] = [("h2", "Suspect nodes"), *suspect_blocks(data), *slow_blocks(data.get("slow_nodes") or []),
                        *transition_blocks(data),
                        ("h2", "Failures of the day")]
    if not data["failures"]:
        out.append(("p", "No node failed a check and no suite errored on this day.", ""))
    since = data.get("failing_since") or {}
    for f in data["failures"]:
        out += _failure_blocks({**f, "since": since.get(f["node_name"])})
    if data["failures_total"] > len(data["failures"]):
        out.append(("p", f"… and {data['failures_total'] - len(data['failures'])} more failed attempt(s) on "
                         "this day (query validation_history).", ""))
    return out


def baseline_blocks(data: Mapping[str, Any]) -> list[tuple]:
    """The node pools without a baseline: one line each, with its action (never one error per node)."""
    found = data.get("missing_baselines") or []
    if not found:
        return []
    return [("h2", "Configuration: no baseline"),
            ("p", f"{len(found)} node pool(s) whose results could not be judged: their GPU model has no baseline.", ""),
            ("list", [m["line"] for m in found])]


def transition_blocks(data: Mapping[str, Any]) -> list[tuple]:
    """The repeat offenders at the report's end (action replace), and the day's transitions."""
    offenders = data.get("repeat_offenders") or []
    out: list[tuple] = [("h2", "Repeat offenders")]
    if offenders:
        out += [("p", f"{len(offenders)} GPU node(s) to replace: quarantined again soon after a release, or too "
                      "often; kept out until a person releases them.", ""),
                ("list", [f"{o['node_name']} {o['line']}" for o in offenders])]
    else:
        out.append(("p", "No repeat offender at the end of the day.", ""))
    moved = data.get("transitions") or {"counts": {}, "total": 0, "lines": []}
    out.append(("h2", "Node transitions"))
    out.append(("p", ", ".join(f"{life.SHOWN[k]} {moved['counts'].get(k, 0)}" for k in life.KINDS)
                + f" ({moved['total']} in all)", ""))
    if moved["lines"]:
        out.append(("list", list(moved["lines"])))
    return out


def suspect_blocks(data: Mapping[str, Any]) -> list[tuple]:
    """The nodes a signal made suspect and no bundle answered yet at the report's end, each "suspect since T:
    evidence" (a signal never fails a node: its validation does)."""
    found = data.get("suspects") or []
    if not found:
        return [("p", "No GPU node was suspect at the end of the day (no signal left unanswered).", "")]
    return [("p", f"{len(found)} GPU node(s) suspect: a signal said they may be broken; their bundle runs first.",
             ""), ("list", [f"{s['node_name']} {s['line']}" for s in found])]


def _trend_blocks(data: Mapping[str, Any]) -> list[tuple]:
    return [("h2", f"Coverage trend (last {len(data['coverage_trend'])} days)"),
            ("table", ["day", "covered nodes", "fleet", "coverage", ""], [
                [t["day"], t["covered"] if t["nodes"] else "-", t["nodes"] if t["nodes"] else "-",
                 _coverage_text(t["nodes"], t["coverage"]), Bar(t["coverage"] or 0.0) if t["nodes"] else ""]
                for t in data["coverage_trend"]], [1, 2, 3]),
            *([("p", f"{NO_DATA}: the day ended before discovery first saw a GPU node of the fleet.", "meta")]
              if any(not t["nodes"] for t in data["coverage_trend"]) else [])]


def _model_blocks(data: Mapping[str, Any]) -> list[tuple]:
    out: list[tuple] = [
        ("h2", "Per GPU model"),
        ("p", "Executed attempts of the day; key metrics over the day's passes (min is the worst "
              "node: every key metric is higher-is-better).", "meta")]
    if not data["per_model"]:
        return [*out, ("p", "No executed attempt on this day.", "")]
    out.append(("table", ["GPU model", "nodes", "attempts", "pass", "fail", "error"], [
        [m["gpu_model"], m["nodes"], m["attempts"], m["pass"], m["fail"], m["error"]]
        for m in data["per_model"]], [1, 2, 3, 4, 5]))
    metric_rows = [[m["gpu_model"], x["test_name"], x["metric"], x["n"], _num(x["median"]),
                    _num(x["min"])] for m in data["per_model"] for x in m["metrics"]]
    if metric_rows:
        out.append(("table", ["GPU model", "test", "metric", "passes", "median", "min"], metric_rows,
                    [3, 4, 5]))
    return out


# Shown to the reader, never run here: where the pairs past max_rows are (the README's query).
MORE_FAILING_PAIRS_QUERY = "SELECT * FROM validation_latest WHERE status IN ('fail', 'error')"


def _fleet_blocks(data: Mapping[str, Any]) -> list[tuple]:
    """The fleet as of the end of the day: per test and state, then the failing, never-validated and
    stale pairs."""
    fleet = data["fleet"]
    out: list[tuple] = [
        ("h2", f"Fleet as of {_when(data['as_of'])} UTC"),
        ("table", ["test", *(STATE_TITLES[s] for s in STATES)],
         [[t, *(c[s] for s in STATES)] for t, c in fleet["per_test"].items()]
         + [[Cell("all pairs", "total"), *(fleet["counts"][s] for s in STATES)]],
         range(1, len(STATES) + 1)),
        ("h3", f"Failing pairs ({fleet['failing_total']})")]
    if fleet["failing"]:
        out.append(("table", ["node", "test", "status", "since", "last result", "previous", "later attempt",
                              "reason"], [
            [r["node_name"], r["test_name"], Cell(r["status"], r["status"]),
             f"{_when(r['status_since'])} ({r['since_age']})",
             f"{r['age']} ago" + (" (stale)" if r["stale"] else ""), r["previous_status"] or "none",
             _later_attempt(r), r["reason"] or ""] for r in fleet["failing"]], []))
        if fleet["failing_total"] > len(fleet["failing"]):
            out.append(("p", f"… and {fleet['failing_total'] - len(fleet['failing'])} more failing pair(s) "
                             f"({MORE_FAILING_PAIRS_QUERY}).", ""))
    else:
        out.append(("p", "None.", ""))
    return out + _never_blocks(fleet) + _stale_blocks(fleet)


def _never_blocks(fleet: Mapping[str, Any]) -> list[tuple]:
    out: list[tuple] = [
        ("h3", f"Never-validated nodes, and why ({sum(g['count'] for g in fleet['never_why'])})")]
    if not fleet["never_why"]:
        return [*out, ("p", "None: every node has executed at least one enabled test.", "")]
    return [*out,
            ("p", "As the last discovery saw them: free nodes are due and wait for a run; the others "
                  "could not be validated.", "meta"),
            ("table", ["now", "nodes", "since", "for example", "node names"], [
                [Cell(g["state"], "state"), g["count"], _when(g["since"]), g["example"] or "-",
                 Cell(g["nodes"], "nodes")] for g in fleet["never_why"]], [1])]


def _stale_blocks(fleet: Mapping[str, Any]) -> list[tuple]:
    out: list[tuple] = [("h3", "Stale and never-validated node-test pairs")]
    if not fleet["stale_groups"]:
        return [*out, ("p", "None: every pair has an executed result within the staleness threshold.", "")]
    return [*out, ("table", ["test", "state", "pairs", "oldest result", "nodes"], [
        [g["test_name"], Cell(STATE_TITLES[g["state"]], g["state"]), g["count"], g["oldest_age"] or "-",
         Cell(g["nodes"], "nodes")] for g in fleet["stale_groups"]], [2])]


# ---------------------------------------------------------------------------- markdown
def _md(value: Any) -> str:
    """Inline markdown text, through the one escaping function of every markdown output."""
    if isinstance(value, Bar):
        return "█" * round(value.fraction * 20)
    if isinstance(value, Cell):
        value = value.text
    return md_escape(value)


def _md_blocks(items: Sequence[tuple]) -> list[str]:
    lines: list[str] = []
    for block in items:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            lines += ["#" * int(kind[1]) + " " + _md(block[1]), ""]
        elif kind == "p":
            lines += [_md(block[1]), ""]
        elif kind == "list":
            lines += [f"- {_md(item)}" for item in block[1]] + [""]
        elif kind == "links":  # the address as text: markdown links are neutralised like any content
            lines += [" · ".join(f"{_md(label)}: {_md(href)}" for label, href, _ in block[1]), ""]
        elif kind == "table":
            headers, rows = block[1], block[2]
            lines.append("| " + " | ".join(_md(h) for h in headers) + " |")
            lines.append("|" + "---|" * len(headers))
            lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in rows]
            lines.append("")
        elif kind == "box" or (kind == "only" and block[1] == "markdown"):
            lines += _md_blocks(block[-1])
    return lines


def render_markdown(data: Mapping[str, Any]) -> str:
    return "\n".join(_md_blocks(blocks(data))).rstrip("\n") + "\n"


# ---------------------------------------------------------------------------- HTML
def render_html(data: Mapping[str, Any]) -> str:
    """A standalone page from the fleet page's base template: inline CSS, no script, no external
    resource; every text is escaped by the shared autoescaping environment."""
    return environment().get_template("daily.html").render(
        data=data, blocks=blocks(data), is_bar=lambda v: isinstance(v, Bar), is_cell=lambda v: isinstance(v, Cell),
        bar_width=lambda v: f"{max(0.0, min(1.0, float(v.fraction))) * 100:.1f}", standalone=True)


# ---------------------------------------------------------------------------- writing
def write(data: Mapping[str, Any], reports_dir: str | pathlib.Path | files.Location) -> dict[str, str]:
    """``<reports_dir>/daily/<YYYY-MM-DD>.md`` and ``.html``, each written atomically (a path or an
    object store location)."""
    day = parse_day(data["day"]).isoformat()  # re-parsed: the file name never comes from free text
    folder = files.as_location(reports_dir) / "daily"
    md = files.write_atomic(folder / f"{day}.md", render_markdown(data))
    page = files.write_atomic(folder / f"{day}.html", render_html(data))
    return {"markdown": files.describe(md), "html": files.describe(page)}


def for_settings(store: daily_reads.Connections, settings: Any, *, day: dt.date | str | None = None,
                 data_interval_end: dt.datetime | None = None, now: dt.datetime | None = None,
                 ui_base: str = "/") -> dict[str, Any]:
    """``build`` with what the settings say (tests, staleness, grace, peer tests), for ``day`` or, given
    none, the day ``report_day`` picks: what the DAG's task writes and the UI's report page shows."""
    now = now or dt.datetime.now(dt.UTC)
    if day:
        day = parse_day(day)
    else:
        with daily_reads.snapshot(store) as cur:
            day = report_day(default_day(data_interval_end, now), trend.first_seen(cur), now)
    return build(store, day, tests=list(settings.tests), staleness_days=settings.staleness_days, now=now,
                 gone_grace_hours=settings.gone_node_grace_hours, ui_base=ui_base,
                 slow_window_hours=settings.slow_signal_window_hours,
                 slow_spacing_hours=settings.slow_confirm_spacing_hours,
                 peer_window_days=(peers.EVIDENCE_CADENCES * settings.peer_cadence_days
                                   if getattr(settings, "peer_tests", False) else None))


def run(
    store: daily_reads.Connections,
    settings: Any,
    *,
    day: dt.date | str | None = None,
    data_interval_end: dt.datetime | None = None,
    now: dt.datetime | None = None,
    reports_dir: Any = None,
    spool: Any = None,
    ui_base: str = "/",
) -> dict[str, Any]:
    """What the daily DAG's task does: build, write both files to ``reports_dir`` (a location; default:
    the setting's path), log the headline; returns the paths and the headline numbers (the task's
    XCom, kept small). ``spool``: the attempt spool's ``SpoolStatus``, shown when attempts wait;
    ``ui_base``: the Airflow UI's root, where the failures' links point."""
    now = now or dt.datetime.now(dt.UTC)
    data = for_settings(store, settings, day=day, data_interval_end=data_interval_end, now=now, ui_base=ui_base)
    if spool is not None:
        data["spool"] = spool_data(spool, now)
    paths = write(data, reports_dir if reports_dir is not None else resolve_reports_dir(settings.reports_dir))
    log.info("daily summary for %s written to %s and %s\n%s", data["day"], paths["markdown"], paths["html"],
             "\n".join(headline(data)))
    return {"day": data["day"], **paths, "coverage": data["coverage"], "day_counts": data["day_counts"],
            "failures": data["failures_total"], "failing_pairs": data["fleet"]["failing_total"],
            "gpu_hours": data["gpu_hours"]["total"], "spooled": (data.get("spool") or {}).get("waiting", 0)}


def spool_data(status: Any, now: dt.datetime) -> dict[str, Any]:
    """The report's view of a ``SpoolStatus`` (JSON-able, like everything ``build`` returns)."""
    age_s = status.age_s(now)
    return {"location": status.location, "waiting": status.waiting, "rejected": status.rejected,
            "oldest_age": age(status.oldest_at, now) if status.oldest_at else None,
            "oldest_age_s": age_s, "error": status.error, "line": status.describe(now)}
