"""Run parameters: validate the trigger form / backfill conf and turn them into settings and a policy.

Pure Python; the DAG's first task calls it so that a bad value fails the run before any pod exists,
with a message naming the value.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from cluster_doctor.domain import priority, suites
from cluster_doctor.domain.attempts import InvalidAttempt, parse_timestamp
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.nodes import NodeRange, parse_node_range


class InvalidParams(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class RunParams:
    node_range: NodeRange
    tests: list[str]
    stale_before: dt.datetime | None
    max_pairs: int
    dry_run: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "node_range": self.node_range.expression,
            "tests": list(self.tests),
            "stale_before": self.stale_before.isoformat() if self.stale_before else None,
            "max_pairs": self.max_pairs,
            "dry_run": self.dry_run,
        }


def parse_params(params: Mapping[str, Any], settings: Settings, *, now: dt.datetime) -> RunParams:
    try:
        node_range = parse_node_range(params.get("node_range") or "")
    except ValueError as exc:
        raise InvalidParams(f"param node_range: {exc}") from None
    raw_tests = params.get("tests")
    if raw_tests in (None, "", []):
        tests = list(settings.tests)
    elif isinstance(raw_tests, str):
        tests = [t.strip() for t in raw_tests.split(",") if t.strip()]
    elif isinstance(raw_tests, (list, tuple)):
        tests = [str(t) for t in raw_tests]
    else:
        raise InvalidParams(f"param tests: expected a list of suite names, got {raw_tests!r}")
    unknown = [t for t in tests if t not in suites.CATALOG]
    if unknown:
        raise InvalidParams(f"param tests: unknown suite(s) {', '.join(map(repr, unknown))} "
                            f"(known: {', '.join(suites.CATALOG)})")
    stale_before = None
    if params.get("stale_before") not in (None, ""):
        try:
            stale_before = parse_timestamp(params["stale_before"], "stale_before")
        except InvalidAttempt as exc:
            raise InvalidParams(f"param {exc}") from None
        if stale_before > now + dt.timedelta(minutes=5):
            raise InvalidParams(f"param stale_before: {params['stale_before']!r} is in the future")
    max_pairs = params.get("max_pairs")
    if max_pairs in (None, ""):
        max_pairs = settings.max_pairs_per_run
    if isinstance(max_pairs, bool) or not isinstance(max_pairs, int) or max_pairs < 0:
        raise InvalidParams(f"param max_pairs: expected an integer >= 0, got {max_pairs!r}")
    dry_run = params.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise InvalidParams(f"param dry_run: expected true or false, got {dry_run!r}")
    return RunParams(node_range, list(dict.fromkeys(tests)), stale_before, max_pairs, dry_run)


def policy(settings: Settings, params: RunParams) -> priority.Policy:
    return priority.Policy(
        staleness=dt.timedelta(days=settings.staleness_days),
        failed_retest=dt.timedelta(hours=settings.failed_retest_hours),
        max_pairs=params.max_pairs,
        stale_before=params.stale_before,
    )
