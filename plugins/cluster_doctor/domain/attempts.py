"""One validation attempt of one test on one node: the record every outcome becomes.

Validation happens here, before anything reaches the database or a pod spec, so a malformed record
is refused with a one-line message that names the offending field.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from cluster_doctor.domain import actions
from cluster_doctor.domain.nodes import validate_node_name
from cluster_doctor.domain.status import EXECUTED, Status

_TEST_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_MAX_TEXT = 10_000  # reasons and paths are one-liners; anything longer is a bug upstream
# The placeholder reason of a planned pair whose validate task never handed back an attempt; the
# orphan reaper replaces exactly such rows with what the pod says.
UNREPORTED = "the validation task did not report (never ran, killed or lost); no result"
# The code that starts the reason of an attempt whose result is in its pod but could not be read in
# time (the Kubernetes API unreachable, refusing or throttling until the task's deadline): recorded
# ``skipped`` — never against the node, the pair stays due — and the pod kept; the next run's orphan
# reaper reads the pod and records its result over this row (ResultStore.record_over_placeholder).
NOT_JUDGED = "NOT_JUDGED"
# How an orchestration failure's reason starts (the Kubernetes API, the scheduler, the results
# database): the node was not judged, so the attempt is never ``error`` (domain.status).
ORCHESTRATION = "orchestration error"


def not_judged(why: str) -> str:
    """The reason of a not-judged attempt: the code, then why and what happens next."""
    return f"{NOT_JUDGED}: {why}"


def is_not_judged(status: str, reason: str | None) -> bool:
    return status == Status.SKIPPED and (reason or "").startswith(f"{NOT_JUDGED}:")
# Column ranges of validation_history: integer columns are Postgres integer, numbers inside the jsonb
# columns must fit a bigint (readers cast them), so nothing the database would refuse gets this far.
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1


class InvalidAttempt(ValueError):
    """The attempt record is malformed; the message names the field."""


def parse_timestamp(value: Any, field: str) -> dt.datetime:
    """Accept an aware datetime, an ISO-8601 string or a Unix timestamp; return an aware UTC datetime."""
    if isinstance(value, dt.datetime):
        ts = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            ts = dt.datetime.fromtimestamp(value, tz=dt.UTC)
        except (OverflowError, ValueError, OSError):
            raise InvalidAttempt(f"{field}: not a Unix timestamp between the years 1 and 9999: "
                                 f"{_short(value)}") from None
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        try:
            ts = dt.datetime.fromisoformat(text)
        except ValueError:
            raise InvalidAttempt(f"{field}: not an ISO-8601 timestamp: {value!r}") from None
    else:
        raise InvalidAttempt(f"{field}: expected a timestamp, got {type(value).__name__}")
    if ts.tzinfo is None:
        raise InvalidAttempt(f"{field}: timestamp {value!r} has no time zone (use UTC, e.g. ...Z)")
    try:
        return ts.astimezone(dt.UTC)
    except OverflowError:
        raise InvalidAttempt(f"{field}: timestamp {value!r} is out of range in UTC") from None


def _short(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and not BIGINT_MIN <= value <= BIGINT_MAX:
        return "an integer out of range"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_text(value: str, field: str) -> str:
    """Text Postgres can store: no NUL, valid UTF-8 (no lone surrogates)."""
    if "\x00" in value:
        raise InvalidAttempt(f"{field}: contains a NUL byte")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidAttempt(f"{field}: not valid Unicode text (lone surrogate)") from None
    return value


def _json_safe(value: Any, field: str, depth: int = 0) -> Any:
    """Deep-copy into plain JSON types. Non-finite floats become null: Postgres jsonb rejects NaN,
    and the suite has already judged the check that produced it."""
    if depth > 20:
        raise InvalidAttempt(f"{field}: nested too deeply")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _check_text(value, field)
    if isinstance(value, int):
        if not BIGINT_MIN <= value <= BIGINT_MAX:
            raise InvalidAttempt(f"{field}: {_short(value)} (numbers must fit a 64-bit integer)")
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidAttempt(f"{field}: keys must be strings, got {key!r}")
            _check_text(key, f"{field} key")
            out[key] = _json_safe(item, f"{field}.{key}", depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [_json_safe(item, f"{field}[{i}]", depth + 1) for i, item in enumerate(value)]
    raise InvalidAttempt(f"{field}: {type(value).__name__} is not JSON-serializable")


def _optional_text(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidAttempt(f"{field}: expected text, got {type(value).__name__}")
    return _check_text(value, field)[:_MAX_TEXT]


def validate_test_name(name: Any) -> str:
    if not isinstance(name, str) or not _TEST_NAME.fullmatch(name):  # `$` also matches before "\n"
        raise InvalidAttempt(
            f"invalid test name {name!r}: lowercase letters, digits and '_', starting with a letter"
        )
    return name


@dataclasses.dataclass(frozen=True)
class Attempt:
    """A validated ``validation_history`` row (minus the database-assigned ``id``/``created_at``)."""

    node_name: str
    test_name: str
    status: str
    finished_at: dt.datetime
    started_at: dt.datetime | None = None
    duration_s: float | None = None
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    checks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    reason: str | None = None
    log_path: str | None = None
    pod_name: str | None = None
    gpu_model: str | None = None
    gpu_count: int | None = None
    suite_version: str | None = None
    dag_id: str = ""
    run_id: str = ""
    map_index: int = -1
    try_number: int = 1
    # domain.actions: the recommended action (None: unknown), and whether a check could not run
    # (executed attempts only; derived from the checks when not given)
    action: str | None = None
    incomplete: bool | None = None
    checks_not_run: int | None = None
    # a peer test (suite fabric_peer): the other node of the test; None for a node's own suites
    peer: str | None = None

    COLUMNS = (
        "node_name", "test_name", "status", "started_at", "finished_at", "duration_s", "metrics",
        "checks", "reason", "log_path", "pod_name", "gpu_model", "gpu_count", "suite_version", "dag_id",
        "run_id", "map_index", "try_number", "action", "incomplete", "checks_not_run", "peer",
    )
    # Derived from the other columns: never a reason to call two writes of one attempt different.
    DERIVED = ("action", "incomplete", "checks_not_run")

    def __post_init__(self) -> None:
        try:
            validate_node_name(self.node_name)
        except ValueError as exc:
            raise InvalidAttempt(str(exc)) from None
        validate_test_name(self.test_name)
        try:
            object.__setattr__(self, "status", Status.parse(self.status))
        except ValueError as exc:
            raise InvalidAttempt(str(exc)) from None
        object.__setattr__(self, "finished_at", parse_timestamp(self.finished_at, "finished_at"))
        if self.started_at is not None:
            object.__setattr__(self, "started_at", parse_timestamp(self.started_at, "started_at"))
        if self.duration_s is not None:
            if isinstance(self.duration_s, bool) or not isinstance(self.duration_s, (int, float)):
                raise InvalidAttempt(f"duration_s: expected a number, got {_short(self.duration_s)}")
            try:
                duration = float(self.duration_s)
            except OverflowError:
                duration = math.inf
            if not math.isfinite(duration) or duration < 0:
                raise InvalidAttempt(f"duration_s: must be a finite number >= 0, got {_short(self.duration_s)}")
            object.__setattr__(self, "duration_s", duration)
        if not isinstance(self.metrics, Mapping):
            raise InvalidAttempt(f"metrics must be a JSON object, got {type(self.metrics).__name__}")
        object.__setattr__(self, "metrics", _json_safe(self.metrics, "metrics"))
        if not isinstance(self.checks, (list, tuple)):
            raise InvalidAttempt(f"checks must be a JSON array, got {type(self.checks).__name__}")
        for i, check in enumerate(self.checks):
            if not isinstance(check, Mapping) or not isinstance(check.get("name"), str):
                raise InvalidAttempt(f"checks[{i}] must be an object with a 'name'")
        object.__setattr__(self, "checks", _json_safe(list(self.checks), "checks"))
        for field in ("reason", "log_path", "pod_name", "gpu_model", "suite_version"):
            object.__setattr__(self, field, _optional_text(getattr(self, field), field))
        for field in ("dag_id", "run_id"):
            value = getattr(self, field)
            if not isinstance(value, str):
                raise InvalidAttempt(f"{field}: expected text, got {type(value).__name__}")
            _check_text(value, field)
        if self.gpu_count is not None and (isinstance(self.gpu_count, bool) or not isinstance(self.gpu_count, int)
                                           or not 0 <= self.gpu_count <= INT_MAX):
            raise InvalidAttempt(f"gpu_count: expected an integer in [0, {INT_MAX}], got {_short(self.gpu_count)}")
        for field in ("map_index", "try_number"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or not INT_MIN <= value <= INT_MAX:
                raise InvalidAttempt(f"{field}: expected an integer in [{INT_MIN}, {INT_MAX}], got {_short(value)}")
        if self.try_number < 0:
            raise InvalidAttempt(f"try_number: must be >= 0, got {self.try_number}")
        if self.peer is not None:
            try:
                validate_node_name(self.peer)
            except ValueError as exc:
                raise InvalidAttempt(f"peer: {exc}") from None
            if self.peer == self.node_name:
                raise InvalidAttempt(f"peer: a node is not its own peer ({self.peer})")
        self._judge_completeness()

    def _judge_completeness(self) -> None:
        """Fill action / incomplete / checks_not_run where not given (domain.actions)."""
        if self.action is not None and actions.valid(self.action) is None:
            raise InvalidAttempt(f"action: {_short(self.action)} is not one of {', '.join(actions.ACTIONS)}")
        if self.action is None:
            object.__setattr__(self, "action", actions.for_attempt(self.status, checks=self.checks))
        if not self.status.executed:  # nothing was checked: neither complete nor incomplete
            object.__setattr__(self, "incomplete", None)
            object.__setattr__(self, "checks_not_run", None)
            return
        not_run = self.checks_not_run
        if not_run is None:
            not_run = actions.not_run_count(None, self.checks)
        elif isinstance(not_run, bool) or not isinstance(not_run, int) or not 0 <= not_run <= INT_MAX:
            raise InvalidAttempt(f"checks_not_run: expected an integer in [0, {INT_MAX}], got {_short(not_run)}")
        if self.incomplete is not None and not isinstance(self.incomplete, bool):
            raise InvalidAttempt(f"incomplete: expected true or false, got {_short(self.incomplete)}")
        object.__setattr__(self, "checks_not_run", not_run)
        # a not-run check makes it incomplete, whatever was claimed
        object.__setattr__(self, "incomplete", bool(self.incomplete) or not_run > 0)

    @property
    def executed(self) -> bool:
        return self.status.executed

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Attempt:
        if not isinstance(data, Mapping):
            raise InvalidAttempt(f"an attempt must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known - {"id", "created_at"})
        if unknown:
            raise InvalidAttempt(f"unknown attempt field(s): {', '.join(unknown)}")
        missing = [f for f in ("node_name", "test_name", "status", "finished_at") if data.get(f) is None]
        if missing:
            raise InvalidAttempt(f"missing attempt field(s): {', '.join(missing)}")
        values = {k: v for k, v in data.items() if k in known and v is not None}
        for key in ("metrics", "checks"):
            if key in data and data[key] is None:
                values.pop(key, None)
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form (XCom, CLI output)."""
        out = dataclasses.asdict(self)
        for key in ("started_at", "finished_at"):
            if out[key] is not None:
                out[key] = out[key].isoformat()
        return out

    def row(self) -> tuple:
        """Values in ``COLUMNS`` order, jsonb columns serialized, for a parametrized INSERT."""
        values = []
        for column in self.COLUMNS:
            value = getattr(self, column)
            if column in ("metrics", "checks"):
                value = json.dumps(value, allow_nan=False)
            values.append(value)
        return tuple(values)


def from_suite_result(result: Mapping[str, Any], **identity: Any) -> Attempt:
    """An Attempt from a suite's result JSON or its termination summary (include/suites contract).

    ``identity`` carries what the suite cannot know: dag_id, run_id, map_index, try_number, pod_name,
    and optionally node_name/test_name/gpu_model when the orchestrator knows better."""
    if not isinstance(result, Mapping):
        raise InvalidAttempt(f"a suite result must be a JSON object, got {type(result).__name__}")
    environment = result.get("environment") if isinstance(result.get("environment"), Mapping) else {}
    status = result.get("status")
    if status not in EXECUTED:
        raise InvalidAttempt(f"suite result status must be pass, fail or error, got {status!r}")
    log_path = result.get("log_path")
    if log_path is None and isinstance(result.get("result_path"), str):
        log_path = result["result_path"].removesuffix(".json") + ".log"
    fields = {
        "node_name": result.get("node"),
        "test_name": result.get("suite"),
        "status": status,
        "started_at": result.get("started_at"),
        "finished_at": result.get("finished_at"),
        "duration_s": result.get("duration_s"),
        "metrics": result.get("metrics") if result.get("metrics") is not None else {},
        "checks": result.get("checks") if result.get("checks") is not None else [],
        "reason": result.get("reason"),
        "log_path": log_path,
        "gpu_model": result.get("gpu_model") or environment.get("gpu_model"),
        "gpu_count": result.get("gpu_count") if result.get("gpu_count") is not None else environment.get("gpu_count"),
        "suite_version": result.get("suite_version"),
        "peer": result.get("peer"),
    }
    checks = fields["checks"] if isinstance(fields["checks"], list) else []
    fields["action"] = actions.for_attempt(status, result, checks)
    fields["incomplete"] = result.get("incomplete") is True or None
    fields["checks_not_run"] = actions.not_run_count(result, checks)
    fields.update({k: v for k, v in identity.items() if v is not None})
    return Attempt.from_dict({k: v for k, v in fields.items() if v is not None})
