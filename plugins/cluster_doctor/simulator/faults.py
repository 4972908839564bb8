"""Faults in the simulated fleet: when nodes break, which suites see it, the user jobs a broken
node crashes, and when each fault is detected — the ledger behind ``cluster-doctor simulate --faults``.

A fault breaks one node at a random time (a Poisson process per node, ``rate`` per 1,000 node-days) with a
kind (``FAULT_KINDS``): the suites that fail on it, whether user jobs on the node crash, and whether it
raises an Xid. A job on a broken node crashes with the crash probability: the one running at the fault at
once, a later one within its first half hour (NCCL init, the first steps). The signals see
two things: a crashed job (its pod failed with a GPU error), and an Xid the driver logs as soon as a user
job uses the broken GPU (the device plugin marks the GPU unhealthy, so allocatable drops below capacity;
DCGM's exporter and node-problem-detector report it too); either makes the node suspect minutes later.

A fault is detected when a suite that sees it fails on the node — from the moment a crash made the node
suspect if no user job started on it between then and that failure (the reservation's taint keeps them
off), else at the failure. A detected fault is repaired at once (it leaves the ledger). At the end, a
fault no suite saw yet counts from when it turned suspect if no job came since, else until the end (a
lower bound; ``faults_undetected`` says how many no suite saw). Pure Python, its
own random streams: the same faults whatever rule is compared.

Arrivals (the acceptance gate): a node that joins (``joins`` nodes replaced by new ones, each at
a random time), reboots (``reboots`` per node per 30 days: maintenance, a driver rollout one node at a time)
or comes back from its repair is broken on arrival with its own probability (``broken_on_join``,
``broken_on_reboot``, ``bad_repair``): a fault from that moment, ``Fault.arrival`` saying how it came. The
schedule and its broken draws are made up front (one stream), so the same nodes arrive broken whatever
rule is compared; a repair's draw comes from its own stream.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

CRASH_WITHIN_H = 0.5  # a job started on a broken node that crashes does so within this long
NEW, REBOOT, REPAIR = "new", "reboot", "repair"  # how a node arrives (joins, or returns to service)
ARRIVALS = (NEW, REBOOT, REPAIR)


@dataclasses.dataclass(frozen=True)
class FaultKind:
    """A kind of fault by what can see it: the suites that fail on a node with it, whether user jobs on the
    node crash, whether a user job on it makes the driver log an Xid (both signals); ``after_load``: idle
    suites that see it only once a user job ran on the node since the fault (a counter that grows under
    load); ``share``: of all faults, by default."""

    name: str
    share: float
    suites: tuple[str, ...]
    crashes: bool
    xid: bool
    what: str
    after_load: tuple[str, ...] = ()  # suites that see it once a user job loaded the node since the fault

    @property
    def seen_by(self) -> str:
        """The suites that see it, for people ('dl_unit; gpu_health after a user job')."""
        later = f"; {', '.join(self.after_load)} after a user job" if self.after_load else ""
        return ", ".join(self.suites) + later


# Shares from Meta's Llama 3 training run (The Llama 3 Herd of Models, 2024, Table 5: 419 unexpected
# interruptions of 16,384 H100 GPUs over 54 days), its node-hardware causes that a validation suite can
# see (310): host failures that take the node down (power supply, chassis, CPU, memory: 14) are
# Kubernetes' NotReady, not ours, and software, maintenance and unknown causes are not faults of a node.
FAULT_KINDS: tuple[FaultKind, ...] = (
    # Xid 79 (fallen off the bus), 74 (NVLink), 119/120 (GSP), SRAM ECC: fatal Xids the device plugin acts on
    FaultKind("gpu", 184 / 310, ("gpu_health", "dl_unit", "nccl_loopback", "nvbandwidth"), True, True,
              "a faulty GPU: fallen off the bus, NVLink, GSP, SRAM errors (Llama 3: 148 + 17 + 19)"),
    # Xid 48 (double-bit ECC), 63/64 (row remapping), 94/95 (contained/uncontained ECC)
    FaultKind("hbm", 72 / 310, ("gpu_health", "dl_unit"), True, True,
              "HBM: uncorrectable ECC, row-remap failure (Llama 3: 72)"),
    # no Xid: the job's NCCL errors (a crash) or a suite over the fabric tells
    FaultKind("network", 42 / 310, ("ib_health", "nccl_loopback", "fabric_peer"), True, False,
              "an HCA, its cable or switch port (Llama 3: 35 switch/cable + 7 NIC)"),
    FaultKind("silent", 6 / 310, ("dl_unit",), False, False,
              "silent data corruption: wrong results under load only, no crash, no Xid (Llama 3: 6)"),
    # clocks cut under load: dl_unit's GEMM rate sees it, and gpu_health's thermal-violation counter, which
    # NVML keeps across jobs, grown since its previous sample once a user job has loaded the GPU
    FaultKind("thermal", 6 / 310, ("dl_unit",), False, False,
              "a GPU's cooling (thermal interface, sensor): clocks cut under load, no crash, no Xid (Llama 3: 6)",
              after_load=("gpu_health",)),
)
KINDS = {k.name: k for k in FAULT_KINDS}
DEFAULT_SHARES = {k.name: round(k.share, 4) for k in FAULT_KINDS}


@dataclasses.dataclass
class Fault:
    """One broken node: since when, of which kind; ``jobs``: user jobs running at the fault or started on
    the node until it was detected; ``suspect_since``: marked suspect, no user job started since."""

    node: int
    at: float  # hours into the simulation
    kind: FaultKind
    jobs: int = 0
    suspect_since: float | None = None
    detected_at: float | None = None
    arrival: str | None = None  # broken on arrival: NEW, REBOOT or REPAIR (the acceptance gate)


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class Faults:
    """The faults of one simulation, injected in time order, and what the cluster and the validations
    report of them."""

    def __init__(self, *, nodes: int, hours: float, rate: float, shares: Mapping[str, float],
                 crash_probability: float, seed: int, bad_repair: float = 0.0, joins: int = 0,
                 reboots: float = 0.0, broken_on_join: float = 0.0, broken_on_reboot: float = 0.0):
        times, self._crash, self._repair = random.Random(seed), random.Random(seed + 1), random.Random(seed + 2)
        self.bad_repair = bad_repair
        per_hour = rate / 1000 / 24
        kinds = [KINDS[name] for name in shares]
        weights = [shares[name] for name in shares]
        self.crash_probability = crash_probability
        self._pending: list[tuple[float, int, str]] = []
        for node in range(nodes):
            at = times.expovariate(per_hour) if per_hour > 0 else math.inf
            while at < hours:
                self._pending.append((at, node, times.choices(kinds, weights)[0].name))
                at += times.expovariate(per_hour)
        heapq.heapify(self._pending)
        self.active: dict[int, Fault] = {}
        self.all: list[Fault] = []
        self.arrivals = dict.fromkeys(ARRIVALS, 0)
        self._arrivals = _schedule(random.Random(seed + 3), nodes=nodes, hours=hours, joins=joins,
                                   reboots=reboots, broken={NEW: broken_on_join, REBOOT: broken_on_reboot},
                                   kinds=kinds, weights=weights)

    def next_arrival_at(self) -> float:
        """When the next node joins or reboots (inf: none left)."""
        return self._arrivals[0][0] if self._arrivals else math.inf

    def arrive(self) -> tuple[int, float, str] | None:
        """The next node that joins or reboots, broken on arrival or not: (node, when, how); None when the
        node is broken already (it stays as it is: one fault at a time)."""
        at, node, how, broken = heapq.heappop(self._arrivals)
        if node in self.active:
            return None
        self.arrivals[how] += 1
        if broken is not None:
            fault = Fault(node=node, at=at, kind=KINDS[broken], arrival=how)
            self.active[node] = fault
            self.all.append(fault)
        return node, at, how

    def next_at(self) -> float:
        """When the next fault breaks a node (inf: none left)."""
        return self._pending[0][0] if self._pending else math.inf

    def inject(self) -> Fault | None:
        """The next fault, now active; None when its node is broken already (one fault at a time)."""
        at, node, kind = heapq.heappop(self._pending)
        if node in self.active:
            return None
        fault = Fault(node=node, at=at, kind=KINDS[kind])
        self.active[node] = fault
        self.all.append(fault)
        return fault

    def crashes(self, fault: Fault) -> bool:
        """Whether a user job on the broken node (running at the fault, or started since) crashes; it
        counts as a job on the broken node either way."""
        fault.jobs += 1
        return fault.kind.crashes and self._crash.random() < self.crash_probability

    def raises_xid(self, node: int) -> bool:
        """Whether a user job on ``node`` makes the driver log an Xid (a signal)."""
        fault = self.active.get(node)
        return fault is not None and fault.kind.xid

    def job_started(self, node: int, at: float, length: float) -> float | None:
        """A user job starts on ``node`` for ``length`` hours: on a broken node it counts, ends a suspect's
        quiet spell, and may crash — when (hours), or None."""
        fault = self.active.get(node)
        if fault is None:
            return None
        fault.suspect_since = None
        if not self.crashes(fault):
            return None
        return at + min(length, self._crash.random() * CRASH_WITHIN_H)

    def suspect(self, node: int, at: float) -> bool:
        """A signal made ``node`` suspect at ``at``: whether it is broken (it stays suspect until a user job
        starts on it or a validation clears it)."""
        fault = self.active.get(node)
        if fault is not None and fault.suspect_since is None:
            fault.suspect_since = at
        return fault is not None

    def sees(self, node: int, test: str) -> bool:
        """Whether ``test`` fails on ``node`` because of its fault."""
        fault = self.active.get(node)
        if fault is None:
            return False
        return test in fault.kind.suites or (test in fault.kind.after_load and fault.jobs > 0)

    def detected(self, node: int, at: float) -> None:
        """A suite saw the fault at ``at``: detected (since the node turned suspect, if no job came
        between), repaired."""
        fault = self.active.pop(node)
        fault.detected_at = fault.suspect_since if fault.suspect_since is not None else at

    def back_from_repair(self, node: int, at: float) -> Fault | None:
        """The node whose fault was detected comes back at ``at``; with the bad-repair probability still
        broken (the same kind: the part was not the cause, or the new one is bad) — that fault, or None."""
        self.arrivals[REPAIR] += 1
        if node in self.active or not self._repair.random() < self.bad_repair:
            return None
        kind = next(f.kind for f in reversed(self.all) if f.node == node)
        fault = Fault(node=node, at=at, kind=kind, arrival=REPAIR)
        self.active[node] = fault
        self.all.append(fault)
        return fault

    def cleared(self, node: int) -> None:
        """A validation of the suspect node passed: it is suspect no longer."""
        fault = self.active.get(node)
        if fault is not None:
            fault.suspect_since = None

    def figures(self, end: float) -> dict[str, Any]:
        """``time_to_detect_h`` (median, p90, max; a fault not yet seen by a suite counts from when it turned
        suspect with no user job since, else until ``end``) and ``jobs_on_broken_node`` (mean, p90) over
        every fault, with how many there were and how many no suite saw by the end."""
        arrived = {how: {"nodes": self.arrivals[how], "broken": sum(f.arrival == how for f in self.all),
                         "jobs_on_broken": sum(f.jobs for f in self.all if f.arrival == how)} for how in ARRIVALS}
        if not self.all:
            return {"faults": 0, "faults_undetected": 0, "time_to_detect_h": None, "jobs_on_broken_node": None,
                    "returned_broken": 0, "jobs_on_returned_broken": 0, "arrivals": arrived}
        waits = [(f.detected_at if f.detected_at is not None else f.suspect_since if f.suspect_since is not None
                  else end) - f.at for f in self.all]
        jobs = [float(f.jobs) for f in self.all]
        return {"faults": len(self.all), "faults_undetected": sum(f.detected_at is None for f in self.all),
                "time_to_detect_h": {"median": _quantile(waits, 0.5), "p90": _quantile(waits, 0.9),
                                     "max": max(waits)},
                "jobs_on_broken_node": {"mean": sum(jobs) / len(jobs), "p90": _quantile(jobs, 0.9)},
                "returned_broken": sum(f.arrival is not None for f in self.all),
                "jobs_on_returned_broken": sum(f.jobs for f in self.all if f.arrival is not None),
                "arrivals": arrived,
                "faults_by_kind": {k: sum(f.kind.name == k for f in self.all) for k in KINDS}}


def _schedule(rnd: random.Random, *, nodes: int, hours: float, joins: int, reboots: float,
              broken: Mapping[str, float], kinds: Sequence[FaultKind], weights: Sequence[float]) -> list:
    """The joins and reboots of a simulation, a heap of (when, node, how, the kind it arrives broken with or
    None): ``joins`` at random times and nodes, ``reboots`` per node per 30 days (a Poisson process)."""
    out = []

    def add(at: float, node: int, how: str) -> None:
        bad = rnd.random() < broken[how]
        out.append((at, node, how, rnd.choices(kinds, weights)[0].name if bad else None))

    for _ in range(joins):
        add(rnd.random() * hours, rnd.randrange(nodes), NEW)
    per_hour = reboots / 30 / 24
    for node in range(nodes if per_hour > 0 else 0):
        at = rnd.expovariate(per_hour)
        while at < hours:
            add(at, node, REBOOT)
            at += rnd.expovariate(per_hour)
    heapq.heapify(out)
    return out
