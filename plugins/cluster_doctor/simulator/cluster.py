"""The simulated fleet's user occupancy for ``cluster-doctor simulate``: user jobs coming and going on every
node, the reservation's taints, and — with faults (``simulator.faults``) — the jobs a broken node crashes and the
suspects their crashes make.

Each node alternates busy (a log-normal job, cut at the job limit) and idle (an exponential gap sized for
the occupancy, or none with ``no_gap``: a queue-backed cluster) periods; a reserved (tainted) node whose
job ends stays idle until it is released. Events — period ends, faults, suspect marks — are taken in time
order. With signals, a crashed job, or an Xid a user job raises on a broken GPU, makes its node suspect
``signal_h`` later (the fast path reads the cluster every few minutes) and, within
``taint_limit`` tainted nodes, tainted at once, busy or free, so no new user job lands before its
validation (as the DAG's fast path does). Pure Python.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from typing import Protocol

from cluster_doctor.simulator.faults import Faults
from cluster_doctor.simulator.slow import Slow


class Occupancy(Protocol):
    """What the occupancy reads of the simulation's settings (``simulate.SimConfig``)."""

    nodes: int
    occupancy: float
    job_hours: float
    job_sigma: float
    max_job_hours: float
    no_gap: bool


class Cluster:
    """User occupancy of every node; ``free``: the nodes without a user job now; ``suspects``: nodes a
    signal made suspect, since when, until a validation is done with them."""

    def __init__(self, cfg: Occupancy, rnd: random.Random, *, faults: Faults | None = None,
                 signal_h: float | None = None, taint_limit: int = 0, slow: Slow | None = None,
                 slow_signal: Callable[[int, float], None] | None = None):
        self.rnd, self.cfg = rnd, cfg
        # fail-slow (simulator.slow): user jobs it paces, and a passive speed signal's read (the simulation's)
        self.slow, self.slow_signal = slow, slow_signal
        self.faults, self.signal_h, self.taint_limit = faults, signal_h, taint_limit
        self.mu = math.log(cfg.job_hours)
        # the mean of the capped log-normal, estimated once from a fixed sample
        probe = random.Random(0)
        mean_job = sum(min(probe.lognormvariate(self.mu, cfg.job_sigma), cfg.max_job_hours)
                       for _ in range(20000)) / 20000
        self.mean_gap = 0.0 if cfg.no_gap else (
            mean_job * (1 - cfg.occupancy) / cfg.occupancy if cfg.occupancy > 0 else math.inf)
        self.busy = [False] * cfg.nodes
        self.until = [0.0] * cfg.nodes  # hours: when the current period ends (inf: not before a release)
        self.version = [0] * cfg.nodes  # events of an older version are stale (a release re-plans the node)
        self.reserved: set[int] = set()
        self.free_since: dict[int, float] = {}  # reserved nodes whose job ended: idle since
        self.events: list[tuple[float, int, int]] = []
        self.crashing: set[int] = set()  # busy nodes whose job ends in a crash
        self.signals: list[tuple[float, int]] = []  # (when a crash makes the node suspect, node)
        self.suspects: dict[int, float] = {}
        self.fresh: set[int] = set()  # suspects with evidence no fast-path run took yet
        self.tainted: list[tuple[int, float]] = []  # suspects tainted since the simulation last looked
        self.arrived: list[tuple[int, float, str]] = []  # nodes that joined or returned since it last looked
        for n in range(cfg.nodes):
            busy = cfg.no_gap or rnd.random() < cfg.occupancy
            self.busy[n] = busy
            # a random point inside the current period (length-biased sampling is ignored: close enough)
            length = self._job() if busy else self._gap()
            self._set(n, rnd.random() * length)
        self.free = {n for n in range(cfg.nodes) if not self.busy[n]}

    def _job(self) -> float:
        return min(self.rnd.lognormvariate(self.mu, self.cfg.job_sigma), self.cfg.max_job_hours)

    def _gap(self) -> float:
        if self.mean_gap == math.inf:
            return math.inf
        return self.rnd.expovariate(1 / self.mean_gap) if self.mean_gap > 0 else 0.0

    def _set(self, n: int, until: float) -> None:
        self.version[n] += 1
        self.until[n] = until
        if until != math.inf:
            heapq.heappush(self.events, (until, n, self.version[n]))

    def _start_job(self, n: int, at: float) -> None:
        """A user job lands on ``n`` at ``at``: busy until it ends, or crashes on a broken node."""
        self.busy[n] = True
        self.free.discard(n)
        length = self._job()
        crash = self.faults.job_started(n, at, length) if self.faults is not None else None
        if crash is not None:
            self.crashing.add(n)
        self._set(n, at + length if crash is None else crash)
        if self.slow is not None:
            self.slow.job_started(n, at)
        if crash is None and self.faults is not None and self.faults.raises_xid(n):
            self._signal(n, at)

    def advance(self, hour: float) -> None:
        """Every event up to ``hour``, in time order: period ends, faults, joins and reboots, suspect marks."""
        while True:
            event = self.events[0][0] if self.events else math.inf
            fault = self.faults.next_at() if self.faults is not None else math.inf
            arrival = self.faults.next_arrival_at() if self.faults is not None else math.inf
            signal = self.signals[0][0] if self.signals else math.inf
            slow = self.slow.next_at() if self.slow is not None else math.inf
            at = min(event, fault, arrival, signal, slow)
            if at > hour:
                return
            if at == slow:
                what, n, when = self.slow.pop()
                if what == "signal" and self.slow_signal is not None:
                    self.slow_signal(n, when)
            elif at == event:
                self._period_end(*heapq.heappop(self.events))
            elif at == fault:
                self._fault()
            elif at == arrival:
                self._arrive()
            else:
                self._suspect(*heapq.heappop(self.signals))

    def _arrive(self) -> None:
        """A node joins (a new one in its place) or reboots: its user job ends (drained first), it comes back
        free, maybe broken (``Faults.arrive``), and the DAG reads the change at its next read (``arrived``).
        The next user job lands when the queue sends one: at once on a queue-backed cluster, before any read."""
        got = self.faults.arrive()
        if got is None:
            return
        n, at, how = got
        self.crashing.discard(n)
        if self.busy[n]:
            self._job_ended(n, at)
            self.busy[n] = False
            self.free.add(n)
            if n in self.reserved:  # our taint stays through a reboot: no job until it is validated
                self.free_since[n] = at
                self._set(n, math.inf)
            elif (gap := self._gap()) > 0:
                self._set(n, at + gap)
            else:
                self._start_job(n, at)
        self.arrived.append((n, at, how))

    def _period_end(self, at: float, n: int, version: int) -> None:
        if version != self.version[n]:
            return
        if self.busy[n]:
            self._job_ended(n, at)
        if self.busy[n] and n in self.crashing:  # the job died on a broken node: a signal
            self.crashing.discard(n)
            self._signal(n, at)
        if self.busy[n] and n in self.reserved:  # the job ended; the taint keeps new ones off
            self.busy[n] = False
            self.free.add(n)
            self.free_since[n] = at
            self._set(n, math.inf)
        elif self.busy[n]:
            gap = self._gap()
            if gap > 0:
                self.busy[n] = False
                self.free.add(n)
                self._set(n, at + gap)
            else:  # queue-backed: the next job starts at once
                self._start_job(n, at)
        else:
            self._start_job(n, at)

    def _job_ended(self, n: int, at: float) -> None:
        if self.slow is not None:
            self.slow.job_ended(n, at)

    def _fault(self) -> None:
        """A node breaks: the job running on it counts, and may crash at once."""
        fault = self.faults.inject()
        if fault is None or not self.busy[fault.node]:
            return
        if self.faults.crashes(fault):
            self.crashing.add(fault.node)
            self._set(fault.node, fault.at)
        elif fault.kind.xid:  # the job runs on, the driver logs the error
            self._signal(fault.node, fault.at)

    def _signal(self, n: int, at: float) -> None:
        """Something the cluster shows at ``at`` says ``n`` is broken: suspect ``signal_h`` later."""
        if self.signal_h is not None:
            heapq.heappush(self.signals, (at + self.signal_h, n))

    def _suspect(self, at: float, n: int) -> None:
        """A signal read: the broken node turns suspect (new evidence for the fast path) and is tainted at
        once within the limit, busy or free (``taint_suspect``)."""
        if not self.faults.suspect(n, at):
            return  # repaired meanwhile
        self.suspects.setdefault(n, at)
        self.fresh.add(n)
        self.taint_suspect(n, at)

    def taint_suspect(self, n: int, at: float) -> None:
        """Each fast-path read taints the suspects not tainted yet, within the limit: no new user job lands
        on it — a busy one once its running job ends, a free one from now (its next job, which had not
        started, does not; it stays idle until its validation is done, the idle time counted as a
        reservation's)."""
        if n in self.reserved or len(self.reserved) >= self.taint_limit:
            return
        self._taint(n, at)
        self.tainted.append((n, at))
        if self.faults is not None:
            self.faults.suspect(n, at)

    def mark_suspect(self, n: int, at: float) -> None:
        """A change the signals read (a node new, rebooted, back from repair: ``signal_node_changes``) makes
        ``n`` suspect at ``at``, broken or not; it is tainted within the limit, busy or free."""
        self.suspects.setdefault(n, at)
        self.fresh.add(n)
        if self.faults is not None:
            self.faults.suspect(n, at)
        self.taint_suspect(n, at)

    def gate(self, n: int, at: float) -> None:
        """The acceptance gate: a node that joined or returned is tainted and suspect at ``at``,
        busy or free, so no new user job lands before its whole bundle ran (released as a reservation is,
        when it is done)."""
        self.suspects.setdefault(n, at)
        self.fresh.add(n)
        if self.faults is not None:
            self.faults.suspect(n, at)
        self._taint(n, at)

    def _taint(self, n: int, at: float) -> None:
        """Our taint on ``n`` from ``at``: a free node's next user job does not start (idle from ``at`` until
        released); a busy one's running job goes on."""
        self.reserved.add(n)
        if not self.busy[n]:
            self.free_since.setdefault(n, at)
            self._set(n, math.inf)

    def release(self, n: int, at: float, idle_until: float | None = None) -> float:
        """Remove the taint at ``at`` (hours); the idle hours the reservation cost: from the job's end to
        ``idle_until`` (our first pod on the node: its time is validation's, counted once) or to ``at``."""
        self.reserved.discard(n)
        since = self.free_since.pop(n, at)
        idle = max(0.0, min(at, idle_until if idle_until is not None else at) - since)
        if not self.busy[n]:
            gap = self._gap()
            if gap > 0:
                self._set(n, at + gap)
            else:
                self._start_job(n, at)
        return idle
