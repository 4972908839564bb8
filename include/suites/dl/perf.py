"""Judging a benchmark (pure): each device's rate against the model's floor and against the best
device of the node, the node total against the expected GPU count, and whether the data stayed right
for the whole sustained run."""

from __future__ import annotations

import statistics

from ..harness.checks import Check, at_least
from ..harness.text import fmt
from .bench import Verdicts
from .devices import Dev
from .judged import Judged


def summarise(rates: dict[str, list[float]], *, cpu: bool) -> dict[str, float]:
    """One rate per device from its chunks. GPU: the median chunk (sustained rate, robust to one slow
    chunk while clocks ramp); CPU mode: the best round (shared cores make every other statistic noise)."""
    pick = max if cpu else statistics.median
    return {k: pick(v) for k, v in rates.items()}


def sustained_checks(name: str, what: str, verdicts: Verdicts, devs: list[Dev]) -> list[Check]:
    """One check per device: did the benchmark's data stay right for the whole sustained run?"""
    out = []
    for d in devs:
        chunks, bad = verdicts.chunks[d.name], verdicts.bad[d.name]
        if bad:
            chunk, when, detail = verdicts.first_bad[d.name]
            out.append(Check(
                name, "fail", value=bad, unit="elements", threshold="== 0", device=d.name,
                message=f"{what} produced {bad} wrong element(s) under sustained load, first in chunk "
                f"{chunk} of {chunks} ({fmt(when)} s into the run): {detail}{d.where}",
                code="BENCH_RESULT_CORRUPT"))
        elif not chunks:
            out.append(Check(name, "error", device=d.name, message=f"{what}: no chunk was verified",
                             code="NO_MEASUREMENT"))
        else:
            out.append(Check(name, "pass", value=0, unit="elements", threshold="== 0", device=d.name,
                             message=f"{what} verified after each of {chunks} chunk(s)"))
    return out


def to_checks(
    metric: str,
    unit: str,
    per_dev: dict[str, float],
    expectation,
    override: float | None,
    rel_tol: float,
    devs: list[Dev],
    n_total: int,
) -> Judged:
    """`metric` per device against the floor (--min-... override, else the model's expectation, else
    none: relative check only) and against the node's best device -rel_tol; the node total against
    n_total (the EXPECTED GPU count) x the per-GPU floor."""
    out = Judged()
    if not per_dev:
        return out
    vals = list(per_dev.values())
    out.metric(f"{metric}_min", min(vals), summary=True)
    out.metric(f"{metric}_max", max(vals))
    out.metric(f"{metric}_mean", statistics.fmean(vals))
    where = {d.name: d.where for d in devs}
    if override is not None:
        floor, basis = override, "override"
    elif expectation is not None:
        floor, basis = expectation.floor, expectation.basis()
    else:
        floor, basis = None, "unknown model: relative check only"
    best = max(vals)
    for name, v in per_dev.items():
        out.metric(f"{metric}.{name.replace(':', '')}", v)
        out.checks.append(at_least(metric, v, floor, unit=unit, device=name,
                                   basis=basis + (where[name] if floor is not None and v < floor else "")))
        if len(per_dev) > 1:
            rf = best * (1 - rel_tol)
            out.checks.append(at_least(
                f"{metric}_vs_node_best", v, rf, unit=unit, device=name,
                basis=f"best device of this node {fmt(best)} -{rel_tol:.0%}" + (where[name] if v < rf else "")))
    # the node total against the EXPECTED GPU count: a node with a GPU missing cannot reach it
    if expectation is not None and override is None and n_total > 1:
        total = sum(vals)
        node_exp = expectation.scaled(n_total)  # per_gpu scaling: the node total is n x per-GPU
        node_floor = expectation.floor * n_total
        out.metric(f"{metric}_node_total", total, summary=False)
        out.checks.append(at_least(
            f"{metric}_node_total", total, node_floor, unit=unit,
            basis=f"{n_total} expected GPUs x {fmt(expectation.floor)} ({node_exp.metric} scaled per GPU; "
            f"{len(per_dev)} measured)"))
    return out
