"""Agreement: the same deterministic computation on the same inputs must give bit-identical results
run twice on one device (determinism; on a single device any change is its fault) and on every device
of one model (cross-device agreement); a device that disagrees is a silent-data-corruption suspect
(the majority wins with >= 3 devices; with 2 that disagree both are named). The votes and checks are pure; `run` and `judge_outputs` measure how
far a suspect is off (on host copies, with torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..harness.checks import Check
from ..harness.context import Context
from ..harness.text import fmt
from .compare import bit_differences, digest, max_abs_diff
from .devices import Dev
from .judged import Judged, record


@dataclass
class DeviceOutputs:
    """One device's numerics outputs: the digests of two identical runs (what is judged), by output
    ("matmul_fp32.out", "matmul_fp32.grad1"), and host copies of the first run's tensors by case (to
    say by how much a suspect differs)."""

    device: str
    model: str | None
    where: str
    first: dict[str, str] = field(default_factory=dict)
    second: dict[str, str] = field(default_factory=dict)
    tensors: dict[str, list] = field(default_factory=dict)


def majority(groups: list[list[str]], total: int) -> list[str] | None:
    """The largest group (the first of equals) when it holds more than half of `total`, else None."""
    top = max(groups, key=len)
    return top if len(top) * 2 > total else None


# --------------------------------------------------------------------------------------------------
# Determinism: each device against itself
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Determinism:
    nondet: dict[str, set[str]]  # device -> outputs that changed between its two runs
    everywhere: set[str]  # outputs that changed on every device: the library's kernel, not a fault

    def own(self, device: str) -> set[str]:
        return self.nondet[device] - self.everywhere


def determinism(runs: list[DeviceOutputs]) -> Determinism:
    """What changed between two identical runs, per device. Only an output that changes on every one
    of two or more devices is put down to the library's kernel: with a single device nothing tells
    the library from the GPU, and bits that flip on one GPU are a finding."""
    nondet = {r.device: {k for k, v in r.first.items() if r.second.get(k) != v} for r in runs}
    all_keys = set().union(*(set(r.first) for r in runs)) if runs else set()
    everywhere = {k for k in all_keys if len(runs) >= 2 and all(k in nondet[r.device] for r in runs)}
    return Determinism(nondet, everywhere)


def determinism_checks(runs: list[DeviceOutputs], det: Determinism) -> Judged:
    out = Judged()
    if det.everywhere:
        out.checks.append(Check(
            "deterministic_kernels", "warn", value=len(det.everywhere),
            message="non-deterministic on every device, excluded from comparisons: "
            + ", ".join(sorted(det.everywhere)[:6])))
    for r in runs:
        own = det.own(r.device)
        out.checks.append(Check(
            "determinism", "fail" if own else "pass", value=len(own), unit="outputs", threshold="== 0",
            device=r.device,
            message=(f"results changed between two identical runs: {', '.join(sorted(own)[:5])}" if own
                     else f"{len(r.first) - len(det.nondet[r.device])} outputs identical in two runs")))
    out.metric("determinism_failures", sum(bool(det.own(r.device)) for r in runs))
    return out


# --------------------------------------------------------------------------------------------------
# Cross-device agreement of the numerics outputs
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Vote:
    names: list[str]  # the devices compared, in device order
    keys: list[str]  # the outputs compared: present everywhere, deterministic everywhere
    suspects: dict[str, list[str]]  # device -> the outputs on which it is not with the majority

    def compared_with(self, device: str) -> str:
        """The device a suspect's difference is measured against: the first one above suspicion."""
        return next((m for m in self.names if m not in self.suspects), next(m for m in self.names if m != device))


def not_comparable(runs: list[DeviceOutputs]) -> Check | None:
    """The skip when there is nothing to compare bit for bit: one device, or different models."""
    models = {r.model for r in runs}
    if len(runs) < 2:
        return Check("cross_device_agreement", "skip", message="single device: nothing to compare")
    if len(models) > 1:
        return Check("cross_device_agreement", "skip",
                     message=f"mixed models {sorted(map(str, models))}: "
                     "different kernels, bitwise comparison meaningless")
    return None


def vote(runs: list[DeviceOutputs], det: Determinism) -> Vote:
    """Per output, the devices outside the majority (all of them when there is none)."""
    names = [r.device for r in runs]
    all_keys = set().union(*(set(r.first) for r in runs)) if runs else set()
    # outputs missing on a device (its case raised, already reported) are not compared
    keys = sorted(k for k in all_keys
                  if all(k in r.first for r in runs) and not any(k in det.nondet[r.device] for r in runs))
    suspects: dict[str, list[str]] = {}
    for k in keys:
        groups: dict[str, list[str]] = {}
        for r in runs:
            groups.setdefault(r.first[k], []).append(r.device)
        if len(groups) == 1:
            continue
        top = majority(list(groups.values()), len(names))
        for members in groups.values():
            if members is top:
                continue
            for n in members:
                suspects.setdefault(n, []).append(k)
    return Vote(names, keys, suspects)


def cross_device_checks(runs: list[DeviceOutputs], v: Vote, diffs: dict[str, float]) -> Judged:
    """One check per device; a suspect's message names the outputs and `diffs` (its max abs diff on
    the first of them, NaN when unknown)."""
    out = Judged()
    out.metric("sdc_suspects", len(v.suspects), summary=True)
    for r in runs:
        n, bad = r.device, v.suspects.get(r.device)
        if not bad:
            out.checks.append(Check(
                "cross_device_agreement", "pass", device=n, value=0, unit="outputs", threshold="== 0",
                message=f"bit-identical to the other {len(v.names) - 1} device(s) on {len(v.keys)} outputs"))
            continue
        diff = diffs.get(n, float("nan"))
        alone = len(v.suspects) < len(v.names) and len(v.names) >= 3
        out.checks.append(Check(
            "cross_device_agreement", "fail", device=n, value=len(bad), unit="outputs", threshold="== 0",
            message=f"silent-data-corruption suspect{r.where}: differs from "
            f"{'the majority' if alone else 'the other device(s)'} on {len(bad)} output(s) "
            f"({', '.join(bad[:4])}{'...' if len(bad) > 4 else ''}"
            + (f"; max abs diff {fmt(diff)})" if diff == diff else ")")))
    return out


def run(ctx: Context, runs: list[DeviceOutputs]) -> None:
    """Each device against itself (two identical runs), then the devices against each other."""
    det = determinism(runs)
    record(ctx, determinism_checks(runs, det))
    skip = not_comparable(runs)
    if skip is not None:
        ctx.record(skip)
        return
    v = vote(runs, det)
    by = {r.device: r for r in runs}
    diffs = {n: _output_diff(by[n], by[v.compared_with(n)], bad[0]) for n, bad in v.suspects.items()}
    record(ctx, cross_device_checks(runs, v, diffs))


def _output_diff(a: DeviceOutputs, b: DeviceOutputs, key: str) -> float:
    """Max abs difference of one output ("matmul_fp32.grad1") between two devices; NaN when unknown."""
    case, _, part = key.partition(".")
    idx = 0 if part == "out" else int(part[4:])
    try:
        return max_abs_diff(a.tensors[case][idx], b.tensors[case][idx])
    except (KeyError, IndexError, RuntimeError):
        return float("nan")


# --------------------------------------------------------------------------------------------------
# Agreement of one benchmark output (the GEMM's first result)
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OutputVote:
    names: list[str]  # the devices with a result, in device order
    groups: list[list[str]]  # devices by identical result
    majority: list[str] | None
    not_applicable: str | None  # why nothing is compared (one device, mixed models)

    @property
    def reference(self) -> str:
        return (self.majority or self.names)[0]

    def odd_ones(self) -> dict[str, str]:
        """The devices that disagree, each with the device it is compared against."""
        if self.not_applicable or len(self.groups) == 1:
            return {}
        ref = self.reference
        return {n: ref if ref != n else next(m for m in self.names if m != n)
                for n in self.names if self.majority is None or n not in self.majority}


def output_vote(digests: dict[str, str], kinds: set) -> OutputVote:
    """digests: device -> digest of its result, in device order; kinds: the (model, SMs) among them."""
    names = list(digests)
    if len(names) < 2 or len(kinds) > 1:
        why = ("single device: nothing to compare" if len(names) < 2
               else f"mixed models {sorted(map(str, kinds))}: different kernels, no bitwise comparison")
        return OutputVote(names, [], None, why)
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(digests[n], []).append(n)
    return OutputVote(names, list(groups.values()), majority(list(groups.values()), len(names)), None)


def output_checks(name: str, what: str, v: OutputVote, differences: dict[str, tuple[int, str]]) -> list[Check]:
    """One check per device: pass with the majority, else a suspect with the bits that differ."""
    if v.not_applicable:
        return [Check(name, "skip", device=n, code="AGREEMENT_NOT_APPLICABLE", message=v.not_applicable)
                for n in v.names]
    odd = v.odd_ones()
    out = []
    for n in v.names:
        if n not in odd:
            out.append(Check(name, "pass", value=0, unit="elements", threshold="== 0", device=n,
                             message=f"{what}: bit-identical to the other {len(v.names) - 1} device(s)"))
            continue
        diff, detail = differences[n]
        out.append(Check(name, "fail", value=diff, unit="elements", threshold="== 0", device=n, code="SDC_SUSPECT",
                         message=f"silent-data-corruption suspect: {what} differs from "
                         f"{'the majority' if v.majority else odd[n]} in {diff} element(s) with the same inputs; "
                         f"{detail}"))
    return out


def judge_outputs(ctx: Context, torch: Any, name: str, what: str, results: dict, devs: list[Dev]) -> None:
    """The same computation on the same inputs on every device of one model: bit-identical outputs,
    else the odd ones out are silent-data-corruption suspects."""
    have = [d for d in devs if d.name in results]
    v = output_vote({d.name: digest(torch, results[d.name]) for d in have},
                    {(d.info.get("name"), d.info.get("sms")) for d in have})
    differences = {n: bit_differences(torch, results[n].to("cpu"), results[other].to("cpu"))
                   for n, other in v.odd_ones().items()}
    for c in output_checks(name, what, v, differences):
        ctx.record(c)
