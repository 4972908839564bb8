"""Reading a validation pod's outcome: the suite's summary and the pod's final state.

Pure: takes the pod as the plain dict the API returns (``ApiClient().sanitize_for_serialization``)
and the last log lines, and says pass / fail / error / preempted with a one-line reason. Kept apart
from the operator so every way a pod can end is tested without a cluster.

This is also the one sanitising boundary between what a pod said and an ``Attempt``: whatever a pod
prints, ``classify`` returns an outcome whose every value ``Attempt`` accepts and Postgres stores,
and ``to_attempt`` turns it into the attempt without raising. The bounds (``REPORT_BOUNDS``):

* text: NUL, control and bidi-override characters removed, lone surrogates dropped, whitespace runs
  folded to one space; a reason keeps at most 2,000 characters (scheduler messages list every filter),
  other text 1,000, a metric or check string 200.
* numbers: finite, integers within Postgres bigint; ``duration_s`` within [0, 7 days]. Anything else
  becomes null (metrics, check values) or the pod's own timing (duration).
* timestamps: the container's start/finish must lie between the pod's creation (minus 5 min of clock
  skew) and now (plus 5 min). A finish in that allowance is kept as the pod reported it, not clamped to
  the reader's clock: reading the same pod again (a retried task, the orphan reaper) gives the same
  attempt, a duplicate, never a conflict; a pair's attempts all carry its kubelet's clock, so they stay in
  order. Further out of range: now / the pod's start time, so a clock far ahead cannot pin a pair.
* structure: metrics are a flat object of scalars, checks objects of scalars with a name.

Every adjusted value is noted in the reason and as a ``warn`` check named ``reported_values``; a
summary that breaks the contract is ``error`` with the problem, never ``skipped``; a non-zero exit
is never ``pass``. A number that is not finite or out of range (NaN, Infinity, 1e400, a duration past
7 days, an integer past bigint) means the suite's judgement rests on a value nobody can check: such
a result is never ``pass`` but ``error`` with the code ``RESULT_VALUE_INVALID`` (in the reason and on
an ``error`` check named ``reported_values``); a ``fail`` stays ``fail``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import json
import math
import unicodedata
from collections.abc import Mapping, Sequence
from importlib.resources.abc import Traversable
from typing import Any

from cluster_doctor.domain import actions, suites, timestamps
from cluster_doctor.domain.attempts import Attempt, InvalidAttempt
from cluster_doctor.domain.nodes import validate_node_name
from cluster_doctor.domain.status import EXECUTED, FAILING_CHECKS, CheckStatus, Status

RESULT_PREFIX = "CLUSTER_DOCTOR_RESULT "
EXIT_STATUS = {0: Status.PASS, 1: Status.FAIL, 2: Status.ERROR}
SEVERITY = {Status.PASS: 0, Status.ERROR: 1, Status.FAIL: 2}
SCHEMA_FILE = "result.schema.json"

MAX_REASON = 2000
MAX_TEXT = 1000
MAX_VALUE_TEXT = 200
MAX_NOTE = 160  # a compact check's message limit in the result schema
MAX_DURATION_S = 7 * 24 * 3600
CLOCK_SKEW = dt.timedelta(minutes=5)
# Without the pod's creation time, a container time older than this is not believed.
MAX_POD_AGE = dt.timedelta(days=7)
BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1
NOTE_CHECK = "reported_values"
REPORT_BOUNDS = {
    "reason_chars": MAX_REASON, "text_chars": MAX_TEXT, "value_chars": MAX_VALUE_TEXT,
    "duration_s": (0, MAX_DURATION_S), "integers": (BIGINT_MIN, BIGINT_MAX), "floats": "finite",
    "clock_skew_s": int(CLOCK_SKEW.total_seconds()),
}
_BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
# A result holding a number nobody can judge (not finite, out of range): never a pass.
VALUE_INVALID = "RESULT_VALUE_INVALID"


class Notes(list):
    """The adjustments made while sanitising; ``numbers``: those of numbers out of range or not finite."""

    def __init__(self) -> None:
        super().__init__()
        self.numbers: list[str] = []


@dataclasses.dataclass
class PodOutcome:
    status: Status | str  # pass | fail | error | preempted (timeout, skipped from the launchers)
    reason: str | None
    summary: dict[str, Any] | None = None
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    exit_code: int | None = None
    notes: list[str] = dataclasses.field(default_factory=list)


# ---------------------------------------------------------------------------- text and numbers
def clean_text(value: Any, limit: int = MAX_TEXT) -> str:
    """One line of printable text: controls, NUL, bidi overrides and lone surrogates removed."""
    if not isinstance(value, str):
        value = str(value)
    out = []
    for ch in value[: limit * 4]:  # bounded work for megabytes of garbage
        code = ord(ch)
        if ch in "\t\n\r\v\f":
            out.append(" ")
        elif code in _BIDI or unicodedata.category(ch) in ("Cc", "Cs"):
            continue
        else:
            out.append(ch)
    text = " ".join("".join(out).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _note(notes: list[str], text: str) -> None:
    notes.append(clean_text(text, MAX_NOTE))


def _bad_number(notes: list[str], text: str) -> None:
    _note(notes, text)
    if isinstance(notes, Notes):
        notes.numbers.append(notes[-1])


def _show(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and not BIGINT_MIN <= value <= BIGINT_MAX:
        return f"an integer of {len(str(abs(value))) if abs(value) < 10**4000 else 'over 4000'} digits"
    return clean_text(repr(value), 40)


def _number(value: Any, where: str, notes: list[str]) -> Any:
    """A JSON scalar Postgres and every reader can take; out-of-range numbers become None (noted)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if BIGINT_MIN <= value <= BIGINT_MAX:
            return value
        _bad_number(notes, f"{where}: {_show(value)} is outside the bigint range; recorded as null")
        return None
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        _bad_number(notes, f"{where}: {value!r} is not a finite number; recorded as null")
        return None
    return value


def number_problems(value: Any, where: str = "", depth: int = 0) -> list[str]:
    """Every number in a parsed JSON value that nobody can judge (not finite, past bigint, a
    duration_s outside [0, 7 days]), each named by where it is: ``metrics.busbw_gbps: NaN ...``."""
    out: list[str] = []
    if depth > 20:
        return out
    if isinstance(value, Mapping):
        for key, item in list(value.items())[:10_000]:
            path = f"{where}.{key}" if where else str(key)
            if key == "duration_s" and not where and item is not None:
                number = _duration(item, notes := Notes())
                out += [f"{VALUE_INVALID}: {n}" for n in notes.numbers] if number is None else []
            else:
                out += number_problems(item, path, depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value[:10_000]):
            out += number_problems(item, f"{where}[{i}]", depth + 1)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        notes = Notes()
        _number(value, where, notes)
        out += [f"{VALUE_INVALID}: {n}" for n in notes.numbers]
    return out


def _scalar(value: Any, where: str, notes: list[str]) -> Any:
    if isinstance(value, str):
        return clean_text(value, MAX_VALUE_TEXT)
    if value is None or isinstance(value, (bool, int, float)):
        return _number(value, where, notes)
    _note(notes, f"{where}: a {type(value).__name__} where a scalar belongs; recorded as null")
    return None


def _optional(value: Any, limit: int = MAX_TEXT) -> str | None:
    return None if value is None else clean_text(value, limit) or None


def _duration(value: Any, notes: list[str]) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if math.isfinite(number) and 0 <= number <= MAX_DURATION_S:
            return number
    _bad_number(notes, f"duration_s: {_show(value)} is not within [0, {MAX_DURATION_S}] s; the pod's timing is used")
    return None


def sanitize_summary(summary: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A copy of a parsed summary holding only values an Attempt accepts, and what was adjusted
    (a ``Notes``: its ``numbers`` are the values that make the result unjudgeable)."""
    notes = Notes()
    out: dict[str, Any] = {}
    for key, value in summary.items():
        if not isinstance(key, str) or key in ("metrics", "checks", "duration_s"):
            continue
        if key == "reason":
            out[key] = clean_text(value, MAX_REASON) if value is not None else None
        elif key in ("check_counts",):
            out[key] = value if isinstance(value, Mapping) else None
        elif isinstance(value, str):
            out[key] = clean_text(value, MAX_TEXT)
        else:
            out[key] = _scalar(value, key, notes) if not isinstance(value, (Mapping, list)) else value
    out["duration_s"] = _duration(summary.get("duration_s"), notes)
    metrics = summary.get("metrics")
    out["metrics"] = {}
    if isinstance(metrics, Mapping):
        for key, value in list(metrics.items())[:1000]:
            name = clean_text(key, MAX_VALUE_TEXT)
            if not name or name in out["metrics"]:
                _note(notes, f"metrics: key {_show(key)} is empty or repeated once cleaned; dropped")
                continue
            out["metrics"][name] = _scalar(value, f"metrics.{name}", notes)
    elif metrics is not None:
        _note(notes, f"metrics: a {type(metrics).__name__}, not an object; dropped")
    checks = summary.get("checks")
    out["checks"] = []
    if isinstance(checks, list):
        for i, check in enumerate(checks[:1000]):
            if not isinstance(check, Mapping) or not isinstance(check.get("name"), str):
                _note(notes, f"checks[{i}]: not an object with a name; dropped")
                continue
            clean = {}
            for key, value in check.items():
                field = clean_text(key, MAX_VALUE_TEXT)
                if field:
                    clean[field] = _scalar(value, f"checks[{i}].{field}", notes)
            clean["name"] = clean_text(check["name"], MAX_VALUE_TEXT) or f"check_{i}"
            out["checks"].append(clean)
    elif checks is not None:
        _note(notes, f"checks: a {type(checks).__name__}, not an array; dropped")
    for key in ("log_path", "result_path", "gpu_model", "suite_version"):
        if key in out and not isinstance(out[key], str):
            out[key] = None
    return out, notes


# ---------------------------------------------------------------------------- parsing
@functools.lru_cache(maxsize=1)
def _summary_validator():
    try:
        import jsonschema
    except ImportError:  # the schema check is extra safety, the parser below already refuses garbage
        return None
    path = suites.DEFAULT_SUITES_DIR / SCHEMA_FILE  # package data: the one file the domain reads
    if not path.is_file():
        return None
    schema = json.loads(path.read_text())
    if "$defs" in schema and "summary" in schema["$defs"]:
        schema = {**schema, "$ref": "#/$defs/summary"}
        schema.pop("oneOf", None)
        schema.pop("anyOf", None)
    return jsonschema.Draft202012Validator(schema)


def parse_summary(text: str | None) -> dict[str, Any] | None:
    """The suite's summary JSON from a termination message or log text, or None."""
    if not text or not isinstance(text, str):
        return None
    candidates = [text.strip()]
    candidates += [line[len(RESULT_PREFIX):] for line in reversed(text.splitlines()) if line.startswith(RESULT_PREFIX)]
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except (ValueError, RecursionError):  # garbage, or nesting deeper than the parser goes
            continue
        if isinstance(data, dict) and "status" in data and "suite" in data:
            return data
    return None


def validate_summary(summary: Mapping[str, Any]) -> str | None:
    """A one-line problem with the summary, or None when it honours the contract."""
    validator = _summary_validator()
    if validator is not None:
        try:
            errors = sorted(validator.iter_errors(summary), key=lambda e: [str(p) for p in e.path])
        except RecursionError:
            return "nested too deeply"
        if errors:
            where = "/".join(map(str, errors[0].path)) or "summary"
            return clean_text(f"{where}: {errors[0].message}", 300)
    if summary.get("status") not in SEVERITY:
        return clean_text(f"status {summary.get('status')!r} is not pass, fail or error", 300)
    for key in ("metrics",):
        if key in summary and not isinstance(summary[key], Mapping):
            return f"{key} is not an object"
    if "checks" in summary and not isinstance(summary["checks"], list):
        return "checks is not an array"
    return _status_problem(summary)


def _status_problem(summary: Mapping[str, Any]) -> str | None:
    """A status that disagrees with the summary's own check_counts or checks (a pass with failing
    checks, a fail without one), or checks the counts do not count; None when they agree. The suite's
    rule (harness/verdict.decide): a pass has a passing check and no failing or erroring one; a fail
    has a failing check. `checks` may be cut (truncated), so it may list fewer than the counts."""
    counts = summary.get("check_counts")
    status = summary["status"]
    listed = [c.get("status") for c in summary.get("checks") or [] if isinstance(c, Mapping)]
    if not isinstance(counts, Mapping):
        counts = {}
    n = {s: counts.get(s) if isinstance(counts.get(s), int) and not isinstance(counts.get(s), bool) else None
         for s in CheckStatus}
    for s in CheckStatus:
        shown = listed.count(s)
        if n[s] is not None and shown > n[s]:
            return f"checks lists {shown} {s} check(s), check_counts.{s} says {n[s]}"
    bad = [s for s in FAILING_CHECKS if (n[s] or 0) > 0 or s in listed]
    if status == Status.PASS and bad:
        return (f"status pass disagrees with its checks: check_counts.{bad[0]} "
                f"{max(n[bad[0]] or 0, listed.count(bad[0]))}")
    if status == Status.PASS and n[CheckStatus.PASS] == 0:
        return "status pass with no passing check (check_counts.pass 0): nothing was verified"
    if status == Status.FAIL and not (n[CheckStatus.FAIL] or CheckStatus.FAIL in listed):
        return "status fail without a failing check (check_counts.fail 0)"
    return None


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text if isinstance(text, str) else "").splitlines() if line.strip()]
    return clean_text(lines[-1], 200) if lines else ""


def _pod_timing(pod: Mapping[str, Any], terminated: Mapping[str, Any], now: dt.datetime,
                notes: list[str]) -> tuple[dt.datetime | None, dt.datetime]:
    """The container's start and finish, bounded by the pod's creation and now (see the module doc)."""
    created = timestamps.parse(_get(pod, "metadata", "creationTimestamp"))
    try:
        lower = (created - CLOCK_SKEW) if created else now - MAX_POD_AGE
    except OverflowError:  # a creation time at the start of the calendar
        lower = dt.datetime.min.replace(tzinfo=dt.UTC)
    upper = now + CLOCK_SKEW

    finished = timestamps.parse(terminated.get("finishedAt"))
    if finished is None:
        if terminated.get("finishedAt") not in (None, ""):
            _note(notes, f"finishedAt {_show(terminated.get('finishedAt'))} is unreadable; the observation time is used")
        finished = now
    elif not lower <= finished <= upper:
        _note(notes, f"finishedAt {finished.isoformat()} is outside the pod's lifetime (clock skew?); "
                     "the observation time is used")
        finished = now

    started = None
    for source, raw in (("startedAt", terminated.get("startedAt")), ("startTime", _get(pod, "status", "startTime"))):
        candidate = timestamps.parse(raw)
        if candidate is None:
            continue
        if lower <= candidate <= finished + CLOCK_SKEW:
            started = min(candidate, finished)
            break
        _note(notes, f"{source} {candidate.isoformat()} is outside the pod's lifetime (clock skew?); not used")
    return started, finished


def _get(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def _exit_code(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31:
        return value
    return None


def _with_notes(outcome: PodOutcome, numbers: Sequence[str] = ()) -> PodOutcome:
    """Fold the notes into the reason and, when there is a summary, into checks: ``warn`` for an
    adjusted value, ``error`` with the code VALUE_INVALID for a number nobody can judge."""
    if outcome.notes:
        joined = "; ".join(outcome.notes)
        suffix = f" [reported values adjusted: {joined}]"
        outcome.reason = clean_text((outcome.reason or "") + suffix, MAX_REASON)
        if outcome.summary is not None:
            outcome.summary["checks"] = [
                *outcome.summary.get("checks", []),
                *({"name": NOTE_CHECK, "status": CheckStatus.ERROR, "code": VALUE_INVALID, "message": note}
                  if note in numbers else {"name": NOTE_CHECK, "status": CheckStatus.WARN, "message": note}
                  for note in outcome.notes),
            ]
    elif outcome.reason is not None:
        outcome.reason = clean_text(outcome.reason, MAX_REASON) or None
    return outcome


def _disruption(status: Mapping[str, Any]) -> PodOutcome | None:
    """``preempted`` when the pod's status says it was disrupted (a DisruptionTarget condition:
    preemption, eviction, a drain) or evicted, else None."""
    for condition in status.get("conditions") or []:
        if not isinstance(condition, Mapping):
            continue
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            why = clean_text(condition.get("reason") or "DisruptionTarget", MAX_TEXT)
            message = clean_text(condition.get("message") or "", MAX_REASON)
            return PodOutcome(Status.PREEMPTED, clean_text(f"{why}: {message}".strip(": "), MAX_REASON))
    if status.get("reason") == "Evicted":
        return PodOutcome(Status.PREEMPTED, clean_text(f"evicted: {status.get('message') or 'no message'}", MAX_REASON))
    return None


def _base_terminated(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The suite's container's terminated state (the last one, when it restarted), or None."""
    terminated = None
    for cs in status.get("containerStatuses") or []:
        if isinstance(cs, Mapping) and cs.get("name") == "base":
            terminated = _get(cs, "state", "terminated") or _get(cs, "lastState", "terminated")
    return terminated if isinstance(terminated, Mapping) else None


def classify(
    pod: Mapping[str, Any] | None,
    *,
    node_name: str,
    test_name: str,
    now: dt.datetime,
    log_tail: Sequence[str] = (),
    run_budget_s: int | None = None,
) -> PodOutcome:
    """How a validation pod that reached Running ended, observed at ``now`` (the caller's clock: this
    layer reads none). Never raises on anything the pod reported."""
    now = now.astimezone(dt.UTC)
    if not isinstance(pod, Mapping):
        return PodOutcome(Status.PREEMPTED,
                          "the pod was deleted while running (scheduler preemption, eviction or a user)")
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    disrupted = _disruption(status)
    if disrupted is not None:
        return disrupted
    terminated = _base_terminated(status)
    if status.get("reason") == "DeadlineExceeded" and terminated is None:
        budget = f" of {run_budget_s} s" if run_budget_s else ""
        return PodOutcome(Status.ERROR, f"the suite exceeded its run-time budget{budget} (activeDeadlineSeconds)")
    if terminated is None:
        return PodOutcome(Status.ERROR, clean_text(
            f"the pod ended in phase {status.get('phase')!r} without a container result", MAX_REASON))

    notes: list[str] = []
    exit_code = _exit_code(terminated.get("exitCode"))
    shown_exit = exit_code if exit_code is not None else _show(terminated.get("exitCode"))
    started, finished = _pod_timing(pod, terminated, now, notes)
    message = terminated.get("message") if isinstance(terminated.get("message"), str) else None
    tail = "\n".join(line for line in log_tail if isinstance(line, str))
    raw = parse_summary(message) or parse_summary(tail)
    summary = None
    numbers: list[str] = []
    if raw is not None:
        summary, summary_notes = sanitize_summary(raw)
        notes += summary_notes
        numbers = list(getattr(summary_notes, "numbers", []))

    def outcome(state: str, reason: str | None) -> PodOutcome:
        if numbers and state in (Status.PASS, Status.ERROR):  # judged on a value nobody can check: never a pass
            said = f"; the suite said: {reason}" if state == Status.PASS and reason else f"; {reason}" if reason else ""
            state, reason = Status.ERROR, (f"{VALUE_INVALID}: the result holds {len(numbers)} number(s) that are not "
                                             f"finite or out of range ({numbers[0]}){said}")
        return _with_notes(PodOutcome(state, reason, summary, started, finished, exit_code, notes), numbers)

    if terminated.get("reason") == "OOMKilled":
        return outcome(Status.ERROR, f"the container was OOMKilled (exit {shown_exit}): raise the suite's memory")
    if status.get("reason") == "DeadlineExceeded":
        budget = f" of {run_budget_s} s" if run_budget_s else ""
        return outcome(Status.ERROR, f"the suite exceeded its run-time budget{budget} (activeDeadlineSeconds)")
    if _get(pod, "metadata", "deletionTimestamp") and exit_code in (137, 143):
        return outcome(Status.PREEMPTED, f"the pod was deleted while running (exit {exit_code})")
    if raw is None:
        last = _last_line(message) or _last_line(tail)
        if exit_code == 0:
            return outcome(Status.ERROR, "the suite exited 0 without a result; never counted as a pass"
                           + (f"; last output: {last}" if last else ""))
        return outcome(Status.ERROR, f"the suite exited {shown_exit} without a result" + (f": {last}" if last else ""))
    problem = validate_summary(raw)
    if problem:
        return outcome(Status.ERROR, f"malformed suite result ({problem})")
    if raw.get("node") != node_name:
        return outcome(Status.ERROR, f"the result names node {_show(raw.get('node'))}, expected {node_name!r}")
    if raw.get("suite") != test_name:
        return outcome(Status.ERROR, f"the result is for suite {_show(raw.get('suite'))}, expected {test_name!r}")
    reported = raw["status"]
    by_exit = EXIT_STATUS.get(exit_code) if exit_code is not None else None
    reason = summary.get("reason")
    if by_exit is None:
        return outcome(Status.ERROR, f"the suite was killed (exit {shown_exit}) after reporting {reported}")
    if by_exit != reported:
        worse = max(by_exit, reported, key=SEVERITY.get)
        return outcome(worse, f"exit code {exit_code} ({by_exit}) disagrees with the reported {reported}"
                       + (f"; {reason}" if reason else ""))
    return outcome(reported, reason)


def to_attempt(
    outcome: PodOutcome,
    *,
    node_name: str,
    test_name: str,
    now: dt.datetime,
    gpu_count: int | None = None,
    gpu_model: str | None = None,
    suite_version: str | None = None,
    pod_name: str | None = None,
    dag_id: str = "",
    run_id: str = "",
    map_index: int = -1,
    try_number: int = 1,
    peer: str | None = None,
) -> Attempt:
    """The attempt of one try. Never raises for anything in ``outcome``: should a value still be
    refused, the attempt is kept with the outcome's status (``error`` where the suite ran) and why.
    Only an invalid node or test name (the caller's own identity) raises ``InvalidAttempt``. ``now``: when
    the outcome was observed, the finish of an attempt that has none of its own."""
    now = now.astimezone(dt.UTC)
    summary = outcome.summary or {}
    finished = outcome.finished_at if isinstance(outcome.finished_at, dt.datetime) else now
    began = outcome.started_at if isinstance(outcome.started_at, dt.datetime) else None
    duration = summary.get("duration_s")
    if duration is None and began is not None:
        duration = max(0.0, (finished - began).total_seconds())
    executed = outcome.status in EXECUTED
    checks = summary.get("checks") or [] if executed else []
    # the suite's action and count of not-run checks, when the verdict is the suite's own (domain.actions)
    judged = dict(action=actions.for_attempt(outcome.status, summary, checks),
                  incomplete=(summary.get("incomplete") is True) if executed else None,
                  checks_not_run=actions.not_run_count(summary, checks) if executed else None)
    identity = dict(node_name=node_name, test_name=test_name, gpu_count=gpu_count, dag_id=dag_id,
                    run_id=run_id, map_index=map_index, try_number=try_number,
                    pod_name=_optional(pod_name),
                    # a peer test's other node: the orchestrator's, else the suite's report
                    peer=_optional(peer) or _optional(summary.get("peer")))
    try:
        return Attempt(
            status=outcome.status,
            started_at=began,
            finished_at=finished,
            duration_s=duration,
            metrics=summary.get("metrics") or {} if executed else {},
            checks=checks,
            reason=_optional(outcome.reason, MAX_REASON),
            log_path=_optional(summary.get("log_path")),
            gpu_model=_optional(summary.get("gpu_model")) or _optional(gpu_model),
            suite_version=_optional(summary.get("suite_version")) or _optional(suite_version),
            **judged,
            **identity,
        )
    except InvalidAttempt as exc:
        if not isinstance(node_name, str) or not isinstance(test_name, str):
            raise
        status = Status.ERROR if executed else outcome.status
        reason = clean_text(f"the pod's report could not be recorded as given ({exc}); "
                            f"it said: {outcome.status}: {outcome.reason or ''}", MAX_REASON)
        safe = {k: identity[k] for k in ("node_name", "test_name")}
        if isinstance(peer, str) and peer and peer != node_name:
            with contextlib.suppress(ValueError):
                safe["peer"] = validate_node_name(peer)
        for key in ("dag_id", "run_id"):
            if isinstance(identity[key], str):
                safe[key] = clean_text(identity[key], MAX_TEXT)
        for key in ("gpu_count", "map_index", "try_number"):
            value = identity[key]
            if isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31:
                safe[key] = value
        return Attempt(status=status if status in set(Status) else Status.ERROR, finished_at=now, reason=reason,
                       **safe)


def attempt_from_pod(
    pod: Mapping[str, Any] | None,
    *,
    node_name: str,
    test_name: str,
    now: dt.datetime,
    log_tail: Sequence[str] = (),
    run_budget_s: int | None = None,
    **identity: Any,
) -> Attempt:
    """``classify`` then ``to_attempt``: the whole boundary from a finished pod to its attempt."""
    outcome = classify(pod, node_name=node_name, test_name=test_name, log_tail=log_tail,
                       run_budget_s=run_budget_s, now=now)
    return to_attempt(outcome, node_name=node_name, test_name=test_name, now=now, **identity)


def failing_checks(summary: Mapping[str, Any] | None) -> list[str]:
    """One line per non-passing check, for the end of the task log."""
    lines = []
    for check in (summary or {}).get("checks") or []:
        if not isinstance(check, Mapping) or check.get("status") in (CheckStatus.PASS, CheckStatus.SKIP):
            continue
        device = f" [{check['device']}]" if check.get("device") not in (None, "") else ""
        unit = f" {check['unit']}" if check.get("unit") else ""
        value = f" value={check['value']}{unit}" if check.get("value") is not None else ""
        threshold = f" threshold={check['threshold']}" if check.get("threshold") is not None else ""
        message = f": {check['message']}" if check.get("message") else ""
        lines.append(f"{str(check.get('status', '?')).upper():5} {check.get('name')}{device}{value}{threshold}{message}")
    return lines


VERDICT_WIDTH = 100  # a task log line a person reads without scrolling sideways
VERDICT_CHECKS = 5  # failing checks in the block; the rest are counted, all are in the results DB


def _wrapped(label: str, text: str, width: int = VERDICT_WIDTH) -> list[str]:
    """``label`` then ``text`` folded at word boundaries, continuation lines under the text."""
    import textwrap

    indent = " " * len(label)
    return textwrap.wrap(text, width=width, initial_indent=label, subsequent_indent=indent,
                         break_long_words=True, break_on_hyphens=False) or [label.rstrip()]


def verdict_block(attempt: Attempt, summary: Mapping[str, Any] | None) -> list[str]:
    """The verdict of a failing (or erroring) attempt as the short block its task log shows first:
    node, suite, status, code, reason, action, then the failing checks, each folded to fit the width."""
    not_bad = (CheckStatus.PASS, CheckStatus.SKIP, CheckStatus.WARN)  # an unknown status is shown too
    bad = [c for c in (summary or {}).get("checks") or []
           if isinstance(c, Mapping) and c.get("status") not in not_bad]
    code = (summary or {}).get("code") or next((c.get("code") for c in bad if c.get("code")), None)
    reason = clean_text(attempt.reason or "(none recorded)")
    lines = [f"Verdict: {str(attempt.status).upper()} on {attempt.node_name}",
             f"  node    {attempt.node_name}", f"  suite   {attempt.test_name}", f"  status  {attempt.status}",
             f"  code    {code or '-'}", *_wrapped("  reason  ", reason),
             f"  action  {actions.shown(attempt.action)}"]
    if bad:
        lines.append(f"  failing checks ({len(bad)}):")
    for check in bad[:VERDICT_CHECKS]:
        device = f" [{check['device']}]" if check.get("device") not in (None, "") else ""
        unit = f" {check['unit']}" if check.get("unit") else ""
        value = f" value={check['value']}{unit}" if check.get("value") is not None else ""
        threshold = f" threshold={check['threshold']}" if check.get("threshold") is not None else ""
        lines += _wrapped(f"    {str(check.get('status', '?')).upper()} ",
                          f"{check.get('name')}{device}{value}{threshold}")
        if check.get("message") and clean_text(check["message"]) not in reason:  # said once
            lines += _wrapped("         ", clean_text(check["message"]))
    if len(bad) > VERDICT_CHECKS:
        lines.append(f"    … and {len(bad) - VERDICT_CHECKS} more (the node page lists them all)")
    return lines


def schema_path() -> Traversable:
    return suites.DEFAULT_SUITES_DIR / SCHEMA_FILE
