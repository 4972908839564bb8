"""``cluster-doctor simulate``: the real planner and policies over a simulated cluster, to size the pool.

The command's options (``add_parser``, turned into a ``SimConfig`` by ``_config``) and its printing
(``render``, the slots search's lines); the simulation itself is ``cluster_doctor.simulator.simulate``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from typing import Any

from cluster_doctor.simulator import faults as sim_faults
from cluster_doctor.simulator import simulate as sim
from cluster_doctor.simulator import slow as sim_slow

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([dhm]?)\s*$")


def parse_duration_hours(text: str, what: str) -> float:
    """'7d', '36h', '90m' or a number of days."""
    match = _DURATION.match(str(text))
    if not match:
        raise sim.InvalidSimulation(f"{what}: expected a duration like 7d, 36h or 90m, got {text!r}")
    value = float(match.group(1))
    hours = value * {"d": 24, "": 24, "h": 1, "m": 1 / 60}[match.group(2)]
    if hours <= 0:
        raise sim.InvalidSimulation(f"{what}: must be > 0, got {text!r}")
    return hours


def _shares(text: str, what: str) -> dict[str, float]:
    out = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value) if sep else 1.0
        except ValueError:
            raise sim.InvalidSimulation(f"{what}: {item!r} is not name=number") from None
        if not name.strip():
            raise sim.InvalidSimulation(f"{what}: empty name in {text!r}")
    return out


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("simulate", help="size the pool: the real planner and policies over a simulated cluster",
                       description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--days", type=float, default=28.0, help="simulated period (default 28)")
    p.add_argument("--slots", type=int, default=None,
                   help="pool slots (concurrent validation pods; default 2, with --goal 24)")
    p.add_argument("--occupancy", type=float, default=0.85, help="share of time nodes are busy with user jobs")
    p.add_argument("--no-gap", action="store_true",
                   help="a queue-backed cluster: a new job starts the moment one ends (no idle gaps at all)")
    p.add_argument("--job-hours", type=float, default=4.0, help="median user job length (log-normal)")
    p.add_argument("--job-sigma", type=float, default=0.8, help="log-normal shape of job lengths")
    p.add_argument("--max-job-hours", type=float, default=24.0, help="job time limit of the cluster")
    p.add_argument("--suite-minutes", default=",".join(f"{k}={v:g}" for k, v in sim.DEFAULT_SUITE_MINUTES.items()),
                   help="suite=minutes,... (the enabled suites and how long each runs)")
    p.add_argument("--target-staleness", default=None,
                   help="the promise, e.g. 7d (default 7d): the figures count pair-hours within it; given, "
                        "the command searches the fewest slots keeping every pair within it, without and "
                        "with reservation")
    p.add_argument("--staleness", default=None,
                   help="the prioritizer's threshold Z (default: the target less the longest job and 12 h, so "
                        "one full-length job fits before the target)")
    p.add_argument("--reserve", action="store_true",
                   help="reserve overdue busy nodes (the DAG's opt-in setting reservation)")
    p.add_argument("--no-reserve", action="store_true",
                   help="with --target-staleness: search bundling alone, never reservation")
    p.add_argument("--reserve-lead", type=float, default=None,
                   help="hours before the target a busy node is reserved (default: the longest job + 6)")
    p.add_argument("--max-reserved-share", type=float, default=0.01,
                   help="with --target-staleness: the idle share of the fleet's GPU-hours reservation may cost "
                        "(default 0.01); the search adds slots until it fits")
    p.add_argument("--no-bundle", action="store_true", help="one suite per node per run (the former planner)")
    p.add_argument("--bundle-ahead", type=float, default=48.0, help="hours: pairs due this soon join a bundle")
    p.add_argument("--failure-rate", type=float, default=0.01)
    p.add_argument("--max-pairs", type=int, default=None, help="per run (default: what the slots run in a run)")
    p.add_argument("--gpu-models", default="NVIDIA-H100-80GB-HBM3=1", help="model=share,...")
    p.add_argument("--start", choices=("steady", "fresh"), default="steady")
    p.add_argument("--peer-tests", action="store_true",
                   help="plan peer tests too (setting peer_tests): two free nodes and two slots each")
    p.add_argument("--peer-cadence", default="7d", help="a node's peer test is due after this long (default 7d)")
    p.add_argument("--peer-max-per-run", type=int, default=4, help="peer tests per run at most (default 4)")
    p.add_argument("--peer-minutes", type=float, default=10.0, help="how long one peer test runs (default 10)")
    p.add_argument("--sweep-interval", type=float, default=1.0,
                   help="hours: the health sweep runs gpu_health on free nodes with no due suite whose last check "
                        "is older (setting sweep_interval_hours, default 1)")
    p.add_argument("--no-sweep", action="store_true", help="no health sweep: free nodes with nothing due stay idle")
    p.add_argument("--faults", type=float, default=0.0,
                   help="inject faults: this many per 1,000 node-days (Meta's research clusters: 6.5); adds the "
                        "time to detect and the user jobs on broken nodes")
    p.add_argument("--fault-kinds", default=",".join(f"{k}={v:g}" for k, v in sim_faults.DEFAULT_SHARES.items()),
                   help="kind=share,... of " + "; ".join(f"{k.name}: {k.what}, seen by {k.seen_by}"
                                                          for k in sim_faults.FAULT_KINDS))
    p.add_argument("--crash-probability", type=float, default=0.7,
                   help="a user job on a broken node crashes with this probability, the running one included "
                        "(default 0.7)")
    p.add_argument("--no-signals", action="store_true",
                   help="no signals: a crashed job does not make its node suspect, only a validation finds it")
    p.add_argument("--joins", type=int, default=0,
                   help="nodes replaced by new ones over the period, each at a random time (no history)")
    p.add_argument("--reboots", type=float, default=0.0,
                   help="reboots per node per 30 days (maintenance one node at a time; its job drained first)")
    p.add_argument("--broken-on-join", type=float, default=0.05,
                   help="a new node is broken on arrival with this probability (default 0.05, an assumption)")
    p.add_argument("--broken-on-reboot", type=float, default=0.01,
                   help="a rebooted node comes back broken with this probability (default 0.01, an assumption)")
    p.add_argument("--bad-repair", type=float, default=0.0,
                   help="with --faults: a node back from its repair is still broken with this probability "
                        "(default 0; the README compares at 0.1). Nodes that joined or returned broken: "
                        "returned_broken, jobs_on_returned_broken and arrivals in --format json")
    p.add_argument("--acceptance", action="store_true",
                   help="the acceptance gate (setting acceptance): a node that joined, rebooted or came back from "
                        "repair is tainted at the first read and runs its whole bundle before user jobs land on it")
    _add_slow_options(p)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--format", choices=("table", "json"), default="table")
    return p


def _add_slow_options(p: argparse.ArgumentParser) -> None:
    """Fail-slow: slow faults, the speed model, today's rule or the new one, and the goal table."""
    p.add_argument("--slow-faults", type=float, default=None,
                   help="inject fail-slow faults: this many per 1,000 node-days (an assumption; default 0, with "
                        "--goal 3); adds their time to detect, slow job-node-hours and false stragglers")
    p.add_argument("--slow-kinds", default=",".join(f"{k}={v:g}" for k, v in sim_slow.DEFAULT_SHARES.items()),
                   help=("kind=share,... of " + "; ".join(f"{k.name}: {k.what}, seen by {k.seen_by}"
                                                           for k in sim_slow.SLOW_KINDS)).replace("%", "%%"))
    p.add_argument("--speed", action="store_true",
                   help="model speed (spread, transients, the probe) even without slow faults: a healthy fleet's "
                        "false stragglers")
    p.add_argument("--no-probe", action="store_true",
                   help="today's rule for slow nodes: no speed probe in the sweep, no passive speed signals; only "
                        "dl_unit's and nccl_loopback's fleet verdicts at their staleness")
    p.add_argument("--transient-rate", type=float, default=0.2,
                   help="transient slowness episodes (congestion, a noisy neighbour) per node-day (default 0.2)")
    p.add_argument("--spread", type=float, default=0.02, help="natural node-to-node speed spread, sigma (0.02)")
    p.add_argument("--confirm-spacing", type=float, default=sim.SimConfig.confirm_spacing_hours, metavar="HOURS",
                   help="a suspect's confirming probe waits this long after its last probe, and two sightings "
                        "fail a node only this far apart (setting slow_confirm_spacing_hours, default %(default)g)")
    p.add_argument("--goal", action="store_true",
                   help="the fail-slow goal table: today's rule beside the new one over --seeds (the issue's "
                        "settings: 24 slots, reservation, --faults 6.5, --slow-faults 3 unless given)")
    p.add_argument("--seeds", default=",".join(map(str, sim.GOAL_SEEDS)), help="with --goal (default 7,1,2,3,4)")


def _config(args: argparse.Namespace) -> tuple[sim.SimConfig, float | None]:
    """The simulation, and the target to search slots for (None: one simulation)."""
    target_h = parse_duration_hours(args.target_staleness or "7d", "--target-staleness")
    z_h = (parse_duration_hours(args.staleness, "--staleness") if args.staleness
           else max(target_h / 2, target_h - args.max_job_hours - 12))
    reservation_values = {"lead_hours": args.reserve_lead} if args.reserve_lead is not None else {}
    goal = getattr(args, "goal", False)
    slots = args.slots if args.slots is not None else (24 if goal else 2)
    faults = args.faults if args.faults or not goal else 6.5
    slow = args.slow_faults if args.slow_faults is not None else (3.0 if goal else 0.0)
    cfg = sim.SimConfig(nodes=args.nodes, days=args.days, slots=slots, occupancy=args.occupancy,
                    job_hours=args.job_hours, job_sigma=args.job_sigma, max_job_hours=args.max_job_hours,
                    suite_minutes=_shares(args.suite_minutes, "--suite-minutes"), staleness_days=z_h / 24,
                    target_days=target_h / 24, failure_rate=args.failure_rate, max_pairs=args.max_pairs,
                    gpu_models=_shares(args.gpu_models, "--gpu-models"), start=args.start, seed=args.seed,
                    bundle=not args.no_bundle, bundle_ahead_hours=args.bundle_ahead, no_gap=args.no_gap,
                    reserve=args.reserve or goal, reservation=reservation_values, peer_tests=args.peer_tests,
                    peer_cadence_days=parse_duration_hours(args.peer_cadence, "--peer-cadence") / 24,
                    peer_max_per_run=args.peer_max_per_run, peer_minutes=args.peer_minutes,
                    sweep_interval_hours=0.0 if args.no_sweep else args.sweep_interval, faults=faults,
                    fault_kinds=_shares(args.fault_kinds, "--fault-kinds"), crash_probability=args.crash_probability,
                    signals=not args.no_signals, bad_repair=args.bad_repair, acceptance=args.acceptance,
                    joins=args.joins, reboots=args.reboots, broken_on_join=args.broken_on_join,
                    broken_on_reboot=args.broken_on_reboot, slow_faults=slow,
                    slow_kinds=_shares(args.slow_kinds, "--slow-kinds"), speed=args.speed, probe=not args.no_probe,
                    transient_rate=args.transient_rate, speed_spread=args.spread,
                    confirm_spacing_hours=args.confirm_spacing)
    if args.target_staleness and z_h >= target_h:
        raise sim.InvalidSimulation(
            f"--staleness ({z_h / 24:g}d) must be below --target-staleness ({target_h / 24:g}d): a pair only "
            "becomes due at the threshold, so its worst staleness is the threshold plus the wait for a free node")
    return cfg, (target_h if args.target_staleness else None)


def _h(hours: float) -> str:
    if math.isinf(hours):
        return "never"
    return f"{hours / 24:.1f}d" if hours >= 48 else f"{hours:.0f}h"


def render(result: sim.SimResult) -> str:
    cfg = result.config
    mode = "no gaps between jobs (queue-backed)" if cfg.no_gap else f"occupancy {cfg.occupancy:.0%}"
    lines = [f"simulated {cfg.nodes:,} nodes x {len(cfg.tests)} suites for {cfg.days:g} days: {cfg.slots} slot(s), "
             f"{cfg.pairs_per_run()} pairs/run max, {mode} (jobs median {cfg.job_hours:g} h, "
             f"at most {cfg.max_job_hours:g} h), threshold Z {cfg.staleness_days:g}d, target {cfg.target_days:g}d, "
             f"{'bundles' if cfg.bundle else 'one suite per node per run'}, "
             f"{'reservation on' if cfg.reserve else 'no reservation'}, failure rate {cfg.failure_rate:.1%}, "
             f"start {cfg.start}",
             "coverage (pairs validated within Z), by day:"]
    step = max(1, len(result.coverage) // 14)
    lines.append("  " + "  ".join(f"d{day:g} {share:.1%}" for day, share in result.coverage[::step]))
    lines.append(f"staleness per pair at the end: p50 {_h(result.final_p50_h)}, p95 {_h(result.final_p95_h)}, "
                 f"max {_h(result.final_max_h)}; worst over the period {_h(result.worst_staleness_h)}; "
                 f"pair-hours within the target: {result.within_target_share:.4%}")
    lines.append(f"attempts: {result.executed:,} executed ({result.failed:,} failed), {result.preempted:,} preempted "
                 f"by user jobs, {result.skipped:,} skipped (queue limit, run window, the node taken before the pod "
                 f"started, or its health check failed: {result.health_gated:,}); never validated at the end: "
                 f"{result.never_validated:,}")
    if cfg.reserve:
        released = ", ".join(f"{n} {why}" for why, n in sorted(result.reservations_released.items())) or "none"
        suspects = f" and {result.suspect_taints:,} suspect node(s) tainted" if result.suspect_taints else ""
        lines.append(f"reservations: {result.reservations:,} applied{suspects} (released: {released}), at most "
                     f"{result.max_reserved_at_once} at once; idle while reserved {result.reserved_gpu_hours:,.0f} "
                     f"GPU-hours = {result.reserved_share:.3%} of the fleet's; breaker open in "
                     f"{result.breaker_open_runs} run(s)")
    if cfg.peer_tests:
        lines.append(peer_line(result))
    lines += fault_lines(result)
    lines.append(f"took {result.wall_seconds:.2f} s ({result.plan_seconds:.2f} s planning)")
    return "\n".join(lines)


def fault_lines(result: sim.SimResult) -> list[str]:
    """The health sweep, what validation costs and, with faults, how fast they are found."""
    cfg = result.config
    sweep = (f"health sweep every {cfg.sweep_interval_hours:g} h: {result.swept:,} pairs executed"
             if cfg.sweep_interval_hours else "no health sweep")
    lines = [f"{sweep}; validation {result.validation_gpu_hours:,.0f} GPU-hours + reserved idle "
             f"{result.reserved_gpu_hours:,.0f} = {result.validation_share:.3%} of the fleet's GPU-hours"]
    if result.time_to_detect_h is not None and result.jobs_on_broken_node is not None:
        ttd, jobs = result.time_to_detect_h, result.jobs_on_broken_node
        kinds = ", ".join(f"{n} {k}" for k, n in (result.faults_by_kind or {}).items())
        lines.append(
            f"faults: {result.faults} at {cfg.faults:g} per 1,000 node-days ({kinds}), "
            f"signals {'on' if cfg.signals else 'off'}: time to detect median {ttd['median']:.1f} h, p90 "
            f"{ttd['p90']:.1f} h, max {ttd['max']:.1f} h ({result.faults_undetected} seen by no suite by the end); "
            f"user jobs on a broken node mean {jobs['mean']:.2f}, p90 {jobs['p90']:g}")
    if result.slow is not None:
        lines.append(slow_line(result))
    if result.arrivals and any(a["nodes"] for a in result.arrivals.values()):
        came = ", ".join(f"{a['nodes']:,} {how} ({a['broken']} broken, {a['jobs_on_broken']} user job(s) started on "
                         "them)" for how, a in result.arrivals.items())
        gate = f"acceptance gate: {result.gated:,} gated" if cfg.acceptance else "no acceptance gate"
        lines.append(f"nodes that joined or returned: {came}; {gate}")
    return lines


def slow_line(result: sim.SimResult) -> str:
    """Fail-slow: what the rule found, what the degraded nodes cost, what it flagged wrongly."""
    cfg, slow = result.config, result.slow or {}
    rule = ("the speed probe in the sweep and passive speed signals" if cfg.probe
            else "today's rule: dl_unit/nccl_loopback fleet verdicts at their staleness")
    ttd = slow.get("slow_time_to_detect_h")
    found = (f"time to detect median {ttd['median']:.1f} h, p90 {ttd['p90']:.1f} h" if ttd else "nothing to detect")
    return (f"fail-slow ({rule}): {slow.get('slow_faults', 0)} slow fault(s) at {cfg.slow_faults:g} per 1,000 "
            f"node-days, {found} ({slow.get('slow_undetected', 0)} never found); slow job-node-hours "
            f"{slow.get('slow_job_node_hours', 0.0):,.0f} of {slow.get('user_job_node_hours', 0.0):,.0f}; "
            f"{slow.get('probes', 0):,} probes ({slow.get('probes_flagged', 0)} flagged); false stragglers "
            f"{slow.get('false_stragglers', 0)} ({slow.get('false_stragglers_per_1000_node_days', 0.0):.2f} per "
            f"1,000 node-days), false suspects {slow.get('false_suspects', 0)}")


GOAL_ROWS = (  # (figure, key, format, goal)
    ("fail-slow time to detect, median", "slow_median_h", "{:.2f} h", "<= 2 h"),
    ("fail-slow time to detect, p90", "slow_p90_h", "{:.1f} h", "<= 12 h"),
    ("slow job-node-hours", "slow_job_node_hours", "{:,.0f}", ">= 80 % fewer"),
    ("false stragglers per 1,000 node-days (healthy fleet)", "false_stragglers_per_1000_node_days", "{:.2f}", "<= 1"),
    ("crash/Xid faults: time to detect, median", "crash_median_h", "{:.2f} h", "<= 0.08 h"),
    ("crash/Xid faults: time to detect, p90", "crash_p90_h", "{:.1f} h", "<= 1.9 h"),
    ("crash/Xid faults: jobs on a broken node", "jobs_on_broken_node", "{:.2f}", "<= 1.47"),
    ("validation share of GPU-hours", "validation_share", "{:.2%}", "<= 1 %"),
)


def render_goal(found: dict[str, Any], cfg: sim.SimConfig) -> str:
    """The issue's table: each figure at the first seed and, in brackets, the mean over the seeds."""
    seeds = found["seeds"]
    today, new = found["rules"]["today"], found["rules"]["new"]
    lines = [f"fail-slow goal: {cfg.nodes:,} nodes, occupancy {cfg.occupancy:.0%}, {cfg.days:g} days, {cfg.slots} "
             f"slots, reservation, crash faults {cfg.faults:g} and slow faults {cfg.slow_faults:g} per 1,000 "
             f"node-days; seed {seeds[0]} (mean over seeds {', '.join(map(str, seeds))})",
             "| figure | today | new | goal |", "|---|---|---|---|"]
    for label, key, fmt, target in GOAL_ROWS:
        cells = []
        for rule in (today, new):
            first, mean = rule["per_seed"][0][key], rule["mean"][key]
            cells.append(f"{fmt.format(first)} ({fmt.format(mean)})")
        if key == "slow_job_node_hours":
            first = 1 - new["per_seed"][0][key] / today["per_seed"][0][key] if today["per_seed"][0][key] else 0.0
            cells[1] += f", {first:.0%} ({found['slow_job_node_hours_fewer']:.0%}) fewer"
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {target} |")
    slow_faults = ", ".join(str(r["slow_faults"]) for r in new["per_seed"])
    wall = sum(r["wall_seconds"] for rule in (today, new) for r in rule["per_seed"])
    lines.append(f"slow faults per seed: {slow_faults}; {wall:.0f} s of simulation")
    return "\n".join(lines)


def peer_line(result: sim.SimResult) -> str:
    cfg = result.config
    return (f"peer tests (cadence {cfg.peer_cadence_days:g}d, at most {cfg.peer_max_per_run}/run, "
            f"{cfg.peer_minutes:g} min on two nodes and two slots each): {result.peer_executed:,} executed, "
            f"{result.peer_preempted:,} preempted, {result.peer_skipped:,} skipped; peer staleness per node: worst "
            f"over the period {_h(result.peer_worst_staleness_h or 0.0)}, max at the end "
            f"{_h(result.peer_final_max_h or 0.0)}; never peer-tested at the end: {result.peer_never:,}")


def _search_lines(name: str, found: sim.Search) -> list[str]:
    lines = [f"{name}: with a slot per node, worst staleness {_h(found.floor.worst_staleness_h)}"]
    for n, res in sorted(found.tried.items()):
        stopped = res.worst_staleness_h > max(found.target_h, found.floor.worst_staleness_h + 1)
        lines.append(f"  slots={n}: worst staleness {_h(res.worst_staleness_h)}{'+ (stopped early)' if stopped else ''}"
                     f", {res.wall_seconds:.1f} s")
    return lines


def cmd(args: argparse.Namespace, out=None) -> int:
    """One simulation, or with ``--target-staleness`` the slots search: bundling alone first, then (unless
    it already reaches the target) with reservation. Exits 0 when the target is reachable either way."""
    out = out or sys.stdout
    try:
        cfg, target_h = _config(args)
    except sim.InvalidSimulation as exc:
        print(f"cluster-doctor: error: {exc}", file=sys.stderr)
        return 2
    if args.goal:
        try:
            seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
        except ValueError:
            print(f"cluster-doctor: error: --seeds: expected integers, got {args.seeds!r}", file=sys.stderr)
            return 2
        found = sim.goal(cfg, seeds or list(sim.GOAL_SEEDS))
        print(json.dumps(found, indent=2) if args.format == "json" else render_goal(found, cfg), file=out)
        return 0
    if target_h is None:
        result = sim.run(cfg)
        print(json.dumps(result.to_dict(), indent=2) if args.format == "json" else render(result), file=out)
        return 0
    searches: dict[str, sim.Search] = {}
    if not cfg.reserve:  # bundling alone; out of reach, reservation is tried instead of more slots
        searches["without_reservation"] = sim.search(cfg, target_h, reach_floor=args.no_reserve)
    if cfg.reserve or (searches["without_reservation"].slots is None and not args.no_reserve):
        searches["with_reservation"] = sim.search(dataclasses.replace(cfg, reserve=True), target_h,
                                                  args.max_reserved_share)
    reached = {k: v for k, v in searches.items() if v.slots is not None}
    answer = next(iter(reached.values()), None)
    if args.format == "json":
        print(json.dumps({"target_staleness_h": target_h, "staleness_threshold_h": cfg.staleness_days * 24,
                          "reachable": answer is not None, **{k: v.to_dict() for k, v in searches.items()}},
                         indent=2), file=out)
        return 0 if answer is not None else 1
    for name, found in searches.items():
        print("\n".join(_search_lines(name.replace("_", " "), found)), file=out)
    shown = answer or next(iter(searches.values()))
    if shown.best is not None:
        print(render(shown.best), file=out)
    tail = f"target_staleness={_h(target_h)} nodes={cfg.nodes}"
    if answer is None:
        print(f"no number of slots keeps the worst staleness within {_h(target_h)}"
              f"{'' if cfg.reserve else ' without reservation'}, nor with reservation within "
              f"{args.max_reserved_share:.1%} of the fleet's GPU-hours (worst {_h(shown.floor.worst_staleness_h)}, "
              f"idle {shown.floor.reserved_share:.2%} with a slot per node): user jobs keep some nodes busy longer "
              "than the lead. Lower --staleness, raise --reserve-lead or --max-reserved-share, or accept the bound.",
              file=out)
        print(f"min_slots=none {tail}", file=out)
        return 1
    best = answer.best
    if answer is searches.get("with_reservation"):
        if "without_reservation" in searches:
            print(f"bundling alone does not reach {_h(target_h)} (worst "
                  f"{_h(searches['without_reservation'].floor.worst_staleness_h)} with a slot per node); "
                  "with reservation it does:", file=out)
        print(f"settings: staleness_days={cfg.staleness_days:g}, pool slots {answer.slots}, reservation "
              f"{{\"enabled\": true, \"target_days\": {target_h / 24:g}, \"lead_hours\": "
              f"{cfg.reservation_policy().lead_hours:g}}}; it costs {best.reserved_gpu_hours:,.0f} idle GPU-hours, "
              f"{best.reserved_share:.2%} of the fleet's", file=out)
        print(f"min_slots={answer.slots} {tail} reserve=yes reserved_share={best.reserved_share:.4f}", file=out)
    else:
        print(f"min_slots={answer.slots} {tail} reserve=no", file=out)
    return 0
