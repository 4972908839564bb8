"""When a (node, test) pair is due and why (pure Python).

A pair of a free node and an enabled test is due when
  * it has never executed (no pass/fail/error result), or
  * its last executed result is older than the staleness threshold (default 7 days), or
  * its last executed result failed or errored longer ago than the failed-retest interval
    (default 6 h; tells a flaky check from a bad node), or
  * its last executed result is older than an explicit ``stale_before`` (re-validation, backfill).
Only pass/fail/error make a pair fresh: a timeout, preemption or skip leaves it due. Pairs due within
``bundle_ahead`` ride along with a due one (``AHEAD``), a signal's suspect node runs every suite
(``SUSPECT``), and the health sweep re-runs a free node's short health suites when their last pass is
older than ``sweep_interval`` (``sweep_due``, ``SWEEP``). ``policy`` makes the one ``Policy`` the DAG,
``cluster-doctor plan`` and the simulator plan with; ``plan`` orders the due pairs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING, Protocol

from cluster_doctor.domain.status import PairState, Status

if TYPE_CHECKING:  # the annotation only: params reaches the settings, which reach this module's readers
    from cluster_doctor.domain.planning.params import RunParams

NEVER = "never executed"
STALE = "stale"
RETEST = "retest after failure"
OLDER_THAN_STALE_BEFORE = "older than stale_before"
AHEAD = "due soon, bundled"
SUSPECT = "suspect"  # a signal says the node may be broken: its whole bundle, first
SWEEP = "health sweep"  # a free node's short health suites, its last check older than the sweep interval
# Runs are hourly and a sweep ends minutes into its run: a check younger than the interval by at most
# this much is due all the same, so a 1 h interval sweeps a free node in every run, not every other one.
SWEEP_SLACK = dt.timedelta(minutes=30)


@dataclasses.dataclass(frozen=True)
class Policy:
    staleness: dt.timedelta = dt.timedelta(days=7)
    failed_retest: dt.timedelta = dt.timedelta(hours=6)  # zero disables
    max_pairs: int = 16
    stale_before: dt.datetime | None = None
    bundle: bool = True  # every due suite of a chosen node in one run (False: one pair per node)
    bundle_ahead: dt.timedelta = dt.timedelta(hours=48)  # pairs due within this long join a bundle
    sweep_interval: dt.timedelta = dt.timedelta(hours=1)  # a free node's health check this old is swept (0: off)

    def __post_init__(self) -> None:
        if self.bundle_ahead < dt.timedelta(0):
            raise ValueError("bundle_ahead must be >= 0")
        if self.sweep_interval < dt.timedelta(0):
            raise ValueError("sweep_interval must be >= 0")
        if self.staleness <= dt.timedelta(0):
            raise ValueError("staleness must be positive")
        if self.failed_retest < dt.timedelta(0):
            raise ValueError("failed_retest must be >= 0")
        if self.max_pairs < 0:
            raise ValueError("max_pairs must be >= 0")
        if self.stale_before is not None and self.stale_before.tzinfo is None:
            raise ValueError("stale_before must be time-zone aware")

    def why_due(self, state: PairState | None, now: dt.datetime) -> str | None:
        """The reason the pair is due now by this policy (``why_due``), or None when it is fresh."""
        return why_due(state, now, self)


def why_due(state: PairState | None, now: dt.datetime, policy: Policy) -> str | None:
    """The reason the pair is due now, or None when it is fresh."""
    if state is None or state.status is None:
        return NEVER
    finished = state.finished_at
    if policy.stale_before is not None and finished < policy.stale_before:
        return OLDER_THAN_STALE_BEFORE
    if now - finished >= policy.staleness:
        return STALE
    if state.status != Status.PASS and policy.failed_retest > dt.timedelta(0) and now - finished >= policy.failed_retest:
        return RETEST
    return None


def sweep_due(state: PairState | None, now: dt.datetime, policy: Policy) -> bool:
    """Whether a health suite's last check is old enough to sweep: it passed (a failed or errored one is
    the retest rule's), at least ``sweep_interval`` less ``SWEEP_SLACK`` ago. Off with a zero interval."""
    if policy.sweep_interval <= dt.timedelta(0) or state is None or state.status != Status.PASS:
        return False
    return now - state.finished_at >= max(policy.sweep_interval - SWEEP_SLACK, dt.timedelta(0))


class DueSettings(Protocol):
    """What a due rule reads of the settings: ``Settings``, or the simulator's ``SimConfig``."""

    @property
    def staleness_days(self) -> float: ...

    @property
    def failed_retest_hours(self) -> float: ...

    @property
    def bundle_ahead_hours(self) -> float: ...

    @property
    def sweep_interval_hours(self) -> float: ...


def policy(settings: DueSettings, params: RunParams, *, bundle: bool = True) -> Policy:
    """The one place a ``Policy`` is made: the DAG's prioritize and reserve tasks, ``cluster-doctor
    plan`` and the simulator all plan with it. ``bundle=False``: one suite per node per run (the simulator's
    ``--no-bundle``)."""
    return Policy(
        staleness=dt.timedelta(days=settings.staleness_days),
        failed_retest=dt.timedelta(hours=settings.failed_retest_hours),
        max_pairs=params.max_pairs,
        stale_before=params.stale_before,
        bundle=bundle,
        bundle_ahead=dt.timedelta(hours=settings.bundle_ahead_hours),
        sweep_interval=dt.timedelta(hours=settings.sweep_interval_hours),
    )
