"""Which node-test pairs to validate now (seeds 000 and 001), pure Python.

A pair of a free node and an enabled test is due when
  * it has never executed (no pass/fail/error result), or
  * its last executed result is older than the staleness threshold (default 7 days), or
  * its last executed result failed or errored longer ago than the failed-retest interval
    (default 6 h; tells a flaky check from a bad node), or
  * its last executed result is older than an explicit ``stale_before`` (re-validation, backfill).
Only pass/fail/error make a pair fresh: a timeout, preemption or skip leaves it due.

Order: never-executed pairs first, then the oldest executed result first. Ties break on the node's
most recent executed result of any enabled test (a node never validated at all goes before a node
that only misses one suite, so fleet coverage grows fastest), then on the oldest last attempt of any
status (a node whose pod just timed out goes after untried ones), then the node name (natural order),
then the test's position in the enabled list: deterministic.
At most one pair per node per run (two suites on one node would fight for its GPUs), and at most
``max_pairs`` pairs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence

import hostlist

from cluster_doctor.domain.status import EXECUTED

NEVER = "never executed"
STALE = "stale"
RETEST = "retest after failure"
OLDER_THAN_STALE_BEFORE = "older than stale_before"

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclasses.dataclass(frozen=True)
class PairState:
    """What the store knows of one (node, test) pair: a row of ``validation_latest``."""

    status: str | None = None  # last executed status (pass|fail|error) or None
    finished_at: dt.datetime | None = None  # when that executed attempt finished
    last_attempt_at: dt.datetime | None = None  # last attempt of any status
    last_attempt_status: str | None = None

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in EXECUTED:
            raise ValueError(f"PairState.status must be an executed status, got {self.status!r}")
        if (self.status is None) != (self.finished_at is None):
            raise ValueError("PairState.status and finished_at go together")


@dataclasses.dataclass(frozen=True)
class Policy:
    staleness: dt.timedelta = dt.timedelta(days=7)
    failed_retest: dt.timedelta = dt.timedelta(hours=6)  # zero disables
    max_pairs: int = 16
    stale_before: dt.datetime | None = None

    def __post_init__(self) -> None:
        if self.staleness <= dt.timedelta(0):
            raise ValueError("staleness must be positive")
        if self.failed_retest < dt.timedelta(0):
            raise ValueError("failed_retest must be >= 0")
        if self.max_pairs < 0:
            raise ValueError("max_pairs must be >= 0")
        if self.stale_before is not None and self.stale_before.tzinfo is None:
            raise ValueError("stale_before must be time-zone aware")


@dataclasses.dataclass(frozen=True)
class PlannedPair:
    node_name: str
    test_name: str
    why: str  # one of NEVER, STALE, RETEST, OLDER_THAN_STALE_BEFORE
    last_status: str | None
    last_finished_at: dt.datetime | None
    last_attempt_at: dt.datetime | None = None
    last_attempt_status: str | None = None

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        for key in ("last_finished_at", "last_attempt_at"):
            if out[key] is not None:
                out[key] = out[key].isoformat()
        return out


def why_due(state: PairState | None, now: dt.datetime, policy: Policy) -> str | None:
    """The reason the pair is due now, or None when it is fresh."""
    if state is None or state.status is None:
        return NEVER
    finished = state.finished_at
    if policy.stale_before is not None and finished < policy.stale_before:
        return OLDER_THAN_STALE_BEFORE
    if now - finished >= policy.staleness:
        return STALE
    if state.status != "pass" and policy.failed_retest > dt.timedelta(0) and now - finished >= policy.failed_retest:
        return RETEST
    return None


def plan(
    free_nodes: Iterable[str],
    tests: Sequence[str],
    latest: Mapping[tuple[str, str], PairState],
    *,
    now: dt.datetime,
    policy: Policy = Policy(),
) -> list[PlannedPair]:
    """The ordered list of pairs to validate in this run."""
    if now.tzinfo is None:
        raise ValueError("now must be time-zone aware")
    test_rank = {t: i for i, t in enumerate(dict.fromkeys(tests))}
    candidates = []
    for node in dict.fromkeys(free_nodes):  # de-duplicate, keep order
        node_key = hostlist.numeric_sort_key(node)
        executed = [s.finished_at for t in test_rank if (s := latest.get((node, t))) and s.finished_at]
        node_validated_at = max(executed) if executed else _EPOCH
        for test, rank in test_rank.items():
            state = latest.get((node, test))
            why = why_due(state, now, policy)
            if why is None:
                continue
            executed_at = state.finished_at if state and state.finished_at else None
            attempted_at = state.last_attempt_at if state and state.last_attempt_at else None
            key = (
                0 if executed_at is None else 1,
                executed_at or _EPOCH,
                node_validated_at,
                attempted_at or _EPOCH,  # never attempted sorts first among equals
                0 if attempted_at is None else 1,
                node_key,
                node,
                rank,
            )
            candidates.append((key, PlannedPair(
                node_name=node,
                test_name=test,
                why=why,
                last_status=state.status if state else None,
                last_finished_at=executed_at,
                last_attempt_at=attempted_at,
                last_attempt_status=state.last_attempt_status if state else None,
            )))
    candidates.sort(key=lambda item: item[0])
    chosen: list[PlannedPair] = []
    busy: set[str] = set()
    for _, pair in candidates:
        if len(chosen) >= policy.max_pairs:
            break
        if pair.node_name in busy:
            continue
        busy.add(pair.node_name)
        chosen.append(pair)
    return chosen
