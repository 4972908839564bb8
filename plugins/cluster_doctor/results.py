"""Reading a validation pod's outcome: the suite's summary and the pod's final state.

Pure: takes the pod as the plain dict the API returns (``ApiClient().sanitize_for_serialization``)
and the last log lines, and says pass / fail / error / preempted with a one-line reason. Kept apart
from the operator so every way a pod can end is tested without a cluster.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from cluster_doctor import suites

RESULT_PREFIX = "CLUSTER_DOCTOR_RESULT "
EXIT_STATUS = {0: "pass", 1: "fail", 2: "error"}
SEVERITY = {"pass": 0, "error": 1, "fail": 2}
SCHEMA_FILE = "result.schema.json"


@dataclasses.dataclass
class PodOutcome:
    status: str  # pass | fail | error | preempted
    reason: str | None
    summary: dict[str, Any] | None = None
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    exit_code: int | None = None


def _ts(value: Any) -> dt.datetime | None:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if isinstance(value, str) and value:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return None


@functools.lru_cache(maxsize=1)
def _summary_validator():
    try:
        import jsonschema
    except ImportError:  # the schema check is extra safety, the parser below already refuses garbage
        return None
    path = suites.DEFAULT_SUITES_DIR / SCHEMA_FILE
    if not path.exists():
        return None
    schema = json.loads(path.read_text())
    if "$defs" in schema and "summary" in schema["$defs"]:
        schema = {**schema, "$ref": "#/$defs/summary"}
        schema.pop("oneOf", None)
        schema.pop("anyOf", None)
    return jsonschema.Draft202012Validator(schema)


def parse_summary(text: str | None) -> dict[str, Any] | None:
    """The suite's summary JSON from a termination message or log text, or None."""
    if not text:
        return None
    candidates = [text.strip()]
    candidates += [line[len(RESULT_PREFIX):] for line in reversed(text.splitlines()) if line.startswith(RESULT_PREFIX)]
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except (json.JSONDecodeError, ValueError):
            continue
        if isinstance(data, dict) and "status" in data and "suite" in data:
            return data
    return None


def validate_summary(summary: Mapping[str, Any]) -> str | None:
    """A one-line problem with the summary, or None when it honours the contract."""
    validator = _summary_validator()
    if validator is not None:
        errors = sorted(validator.iter_errors(summary), key=lambda e: list(e.path))
        if errors:
            where = "/".join(map(str, errors[0].path)) or "summary"
            return f"{where}: {errors[0].message}"[:300]
    if summary.get("status") not in SEVERITY:
        return f"status {summary.get('status')!r} is not pass, fail or error"
    for key in ("metrics",):
        if key in summary and not isinstance(summary[key], Mapping):
            return f"{key} is not an object"
    if "checks" in summary and not isinstance(summary["checks"], list):
        return "checks is not an array"
    return None


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def classify(
    pod: Mapping[str, Any] | None,
    *,
    node_name: str,
    test_name: str,
    log_tail: Sequence[str] = (),
    run_budget_s: int | None = None,
) -> PodOutcome:
    """How a validation pod that reached Running ended."""
    if pod is None:
        return PodOutcome("preempted", "the pod was deleted while running (scheduler preemption, eviction or a user)")
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            why = condition.get("reason") or "DisruptionTarget"
            message = condition.get("message") or ""
            return PodOutcome("preempted", f"{why}: {message}".strip(": ")[:300])
    if status.get("reason") == "Evicted":
        return PodOutcome("preempted", f"evicted: {status.get('message') or 'no message'}"[:300])
    terminated = None
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") == "base":
            terminated = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
    if status.get("reason") == "DeadlineExceeded" and terminated is None:
        budget = f" of {run_budget_s} s" if run_budget_s else ""
        return PodOutcome("error", f"the suite exceeded its run-time budget{budget} (activeDeadlineSeconds)")
    if terminated is None:
        return PodOutcome("error", f"the pod ended in phase {status.get('phase')!r} without a container result")

    exit_code = terminated.get("exitCode")
    started, finished = _ts(terminated.get("startedAt")), _ts(terminated.get("finishedAt"))
    message = terminated.get("message")
    summary = parse_summary(message) or parse_summary("\n".join(log_tail))

    def outcome(state: str, reason: str | None) -> PodOutcome:
        return PodOutcome(state, reason, summary, started, finished, exit_code)

    if terminated.get("reason") == "OOMKilled":
        return outcome("error", f"the container was OOMKilled (exit {exit_code}): raise the suite's memory")
    if status.get("reason") == "DeadlineExceeded":
        budget = f" of {run_budget_s} s" if run_budget_s else ""
        return outcome("error", f"the suite exceeded its run-time budget{budget} (activeDeadlineSeconds)")
    if (pod.get("metadata") or {}).get("deletionTimestamp") and exit_code in (137, 143):
        return outcome("preempted", f"the pod was deleted while running (exit {exit_code})")
    if summary is None:
        tail = _last_line(message) or _last_line("\n".join(log_tail))
        if exit_code == 0:
            return outcome("error", "the suite exited 0 without a result; never counted as a pass"
                           + (f"; last output: {tail}" if tail else ""))
        return outcome("error", f"the suite exited {exit_code} without a result" + (f": {tail}" if tail else ""))
    problem = validate_summary(summary)
    if problem:
        return outcome("error", f"malformed suite result ({problem})")
    if summary.get("node") != node_name:
        return outcome("error", f"the result names node {summary.get('node')!r}, expected {node_name!r}")
    if summary.get("suite") != test_name:
        return outcome("error", f"the result is for suite {summary.get('suite')!r}, expected {test_name!r}")
    reported = summary["status"]
    by_exit = EXIT_STATUS.get(exit_code)
    reason = summary.get("reason")
    if by_exit is None:
        return outcome("error", f"the suite was killed (exit {exit_code}) after reporting {reported}")
    if by_exit != reported:
        worse = max(by_exit, reported, key=SEVERITY.get)
        return outcome(worse, f"exit code {exit_code} ({by_exit}) disagrees with the reported {reported}"
                       + (f"; {reason}" if reason else ""))
    return outcome(reported, reason)


def failing_checks(summary: Mapping[str, Any] | None) -> list[str]:
    """One line per non-passing check, for the end of the task log."""
    lines = []
    for check in (summary or {}).get("checks") or []:
        if not isinstance(check, Mapping) or check.get("status") in ("pass", "skip"):
            continue
        device = f" [{check['device']}]" if check.get("device") not in (None, "") else ""
        unit = f" {check['unit']}" if check.get("unit") else ""
        value = f" value={check['value']}{unit}" if check.get("value") is not None else ""
        threshold = f" threshold={check['threshold']}" if check.get("threshold") is not None else ""
        message = f": {check['message']}" if check.get("message") else ""
        lines.append(f"{str(check.get('status', '?')).upper():5} {check.get('name')}{device}{value}{threshold}{message}")
    return lines


def schema_path() -> pathlib.Path:
    return suites.DEFAULT_SUITES_DIR / SCHEMA_FILE
