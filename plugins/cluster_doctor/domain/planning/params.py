"""Run parameters: validate the trigger form / backfill conf (``parse_params``) into ``RunParams``.

Pure Python; the DAG's first task calls it so that a bad value fails the run before any pod exists,
with a message naming the value.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from cluster_doctor.domain import suites
from cluster_doctor.domain.attempts import InvalidAttempt, parse_timestamp
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.nodes import NodeRange, parse_node_range
from cluster_doctor.domain.payloads import Params


class InvalidParams(ValueError):
    pass


# Far above any cluster's node count (one pair per node per run), far below what breaks arithmetic.
MAX_PAIRS = 1_000_000
MAX_NODE_RANGE = 4096  # characters, as the DAG's Param says
MAX_TESTS = 64


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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

    @classmethod
    def of(cls, params: Params) -> RunParams:
        """The params as the discover task's XCom carries them."""
        return cls(parse_node_range(params.node_range), list(params.tests), params.stale_before, params.max_pairs,
                   params.dry_run)

    def to_params(self) -> Params:
        """These params as the discover task's XCom carries them."""
        return Params(node_range=self.node_range.expression, tests=list(self.tests), stale_before=self.stale_before,
                      max_pairs=self.max_pairs, dry_run=self.dry_run)


def parse_params(params: Mapping[str, Any] | None, settings: Settings, *, now: dt.datetime) -> RunParams:
    """The run's params (the trigger form, a backfill's conf), each checked for type and range: a bad
    one raises ``InvalidParams`` naming it, in one line, before anything is planned."""
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise InvalidParams(f"params: expected an object of run params, got {type(params).__name__}")
    raw_range = params.get("node_range")
    if raw_range not in (None, "") and not isinstance(raw_range, str):
        raise InvalidParams(f"param node_range: expected a hostlist or glob expression (text), got {_shown(raw_range)}")
    if isinstance(raw_range, str) and len(raw_range) > MAX_NODE_RANGE:
        raise InvalidParams(f"param node_range: longer than {MAX_NODE_RANGE} characters")
    try:
        node_range = parse_node_range(raw_range or "")
    except ValueError as exc:
        raise InvalidParams(f"param node_range: {exc}") from None
    tests = _tests(params.get("tests"), settings)
    stale_before = None
    if params.get("stale_before") not in (None, ""):
        if not isinstance(params["stale_before"], str):
            raise InvalidParams(f"param stale_before: expected an ISO 8601 date-time, got {_shown(params['stale_before'])}")
        try:
            stale_before = parse_timestamp(params["stale_before"], "stale_before")
        except InvalidAttempt as exc:
            raise InvalidParams(f"param {exc}") from None
        if stale_before > now + dt.timedelta(minutes=5):
            raise InvalidParams(f"param stale_before: {_shown(params['stale_before'])} is in the future")
    max_pairs = params.get("max_pairs")
    if max_pairs in (None, ""):
        max_pairs = settings.max_pairs_per_run
    if isinstance(max_pairs, bool) or not isinstance(max_pairs, int) or not 0 <= max_pairs <= MAX_PAIRS:
        raise InvalidParams(f"param max_pairs: expected an integer from 0 to {MAX_PAIRS}, got {_shown(max_pairs)}")
    dry_run = params.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise InvalidParams(f"param dry_run: expected true or false, got {_shown(dry_run)}")
    return RunParams(node_range, list(dict.fromkeys(tests)), stale_before, max_pairs, dry_run)


def _tests(raw: Any, settings: Settings) -> list[str]:
    if raw in (None, "", []):
        return list(settings.tests)
    if isinstance(raw, str):
        tests = [t.strip() for t in raw.split(",") if t.strip()]
    elif isinstance(raw, (list, tuple)) and all(isinstance(t, str) for t in raw):
        tests = list(raw)
    else:
        raise InvalidParams(f"param tests: expected a list of suite names, got {_shown(raw)}")
    if len(tests) > MAX_TESTS:
        raise InvalidParams(f"param tests: more than {MAX_TESTS} names")
    unknown = [t for t in tests if t not in suites.CATALOG]
    if unknown:
        raise InvalidParams(f"param tests: unknown suite(s) {', '.join(_shown(t) for t in unknown[:5])} "
                            f"(known: {', '.join(suites.CATALOG)})")
    between = [t for t in tests if t in suites.PEER_SUITES]
    if between:
        raise InvalidParams(f"param tests: {', '.join(between)} runs between two nodes, planned by peer_tests / "
                            "peer_cadence_days, not as one of a node's suites")
    return tests
