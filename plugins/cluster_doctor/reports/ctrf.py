"""The per-run CTRF report: one Common Test Report Format (https://ctrf.io) JSON file per DAG run.

CTRF is what NVIDIA's AICR validator emits, so the same CI gates, GitHub/Jenkins/Slack reporters and
dashboards read ours. One CTRF test = one node-test attempt of the run, named ``<node> · <test>``.

Status mapping (``rawStatus`` always keeps ours):

=========== ========= =====================================================================
ours        CTRF      why
=========== ========= =====================================================================
pass        passed
fail        failed    the node failed a check: a hardware/stack problem on that node
error       other     the suite ran but could not judge (crash, OOM, garbage output). Not
                      ``failed``: it is not proof the node is bad. AICR maps the same case
                      (crash, OOM, deadline) to ``other`` and treats failed *and* other as
                      blocking (its ``IsFailingStatus``): a gate must fail closed on "could
                      not judge". Our DagRun verdict fails on it too.
timeout     skipped   the suite never ran (pod Pending too long / preempted by a user job /
preempted   skipped   node busy or decision too old at submit time): nothing was learned
skipped     skipped   about the node, the pair stays due. AICR's exit code 2 is skipped too.
=========== ========= =====================================================================

A CI gate therefore fails when ``summary.failed + summary.other > 0`` (also exposed as
``results.environment.healthy`` and ``results.summary.extra.blocking``); skipped never blocks.

A pass in which checks could not run stays ``passed`` (nothing failed, a gate does not block on it)
but never reads as a clean one: its message starts ``pass (incomplete: N checks not run)``, it is
tagged ``incomplete``, its trace lists the checks that did not run, its ``extra`` carries
``incomplete`` / ``checks_not_run``, and ``summary.extra.incomplete_passes`` counts them.

Each test's ``extra.recommended_action`` is the attempt's action token (``none``, ``retest``,
``check_storage``, ``check_fabric``, ``reset_gpu``, ``reboot``, ``drain_and_service``; ``unknown`` when
not recorded), each failing check's ``recommended_action`` its own (an Xid's from NVIDIA's catalog) or
its code's, with the human ``advice`` of codes.yaml beside it.

The file lands in ``<reports_dir>/<dag_id>/<run_id, made path-safe>/ctrf.json``, written atomically
(``cluster_doctor.store.files.write_atomic``); ``reports_dir`` is a path or an object store location.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import hashlib
import json
import logging
import os
import pathlib
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from cluster_doctor import __version__
from cluster_doctor.domain import actions
from cluster_doctor.domain.attempts import parse_timestamp
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.nodes import compress
from cluster_doctor.domain.payloads import RunSummary
from cluster_doctor.domain.status import EXECUTED, FAILING, FAILING_CHECKS, CheckStatus, Status
from cluster_doctor.store import files
from cluster_doctor.store.files import write_atomic

log = logging.getLogger(__name__)

TOOL_NAME = "cluster-doctor"
# The spec version of the vendored official schema (tests/plugins/cluster_doctor/fixtures/ctrf/).
SPEC_VERSION = "0.0.0"
STATUS_MAP = {
    Status.PASS: "passed",
    Status.FAIL: "failed",
    Status.ERROR: "other",
    Status.TIMEOUT: "skipped",
    Status.PREEMPTED: "skipped",
    Status.SKIPPED: "skipped",
}
CTRF_STATUSES = ("passed", "failed", "skipped", "pending", "other")
BLOCKING = ("failed", "other")
MAX_TRACE_CHECKS = 50  # a suite with 8 GPUs x dozens of checks: enough to see the pattern, bounded


# ---------------------------------------------------------------------------- shared file helpers
def resolve_reports_dir(configured: str | os.PathLike | None,
                        env: Mapping[str, str] | None = None) -> pathlib.Path:
    """The ``reports_dir`` setting; empty means ``$AIRFLOW_HOME/cluster_doctor_reports`` (Airflow's own
    default home, ~/airflow, when AIRFLOW_HOME is unset)."""
    if configured:
        return pathlib.Path(configured).expanduser()
    env = os.environ if env is None else env
    home = env.get("AIRFLOW_HOME") or os.path.join(os.path.expanduser("~"), "airflow")
    return pathlib.Path(home) / "cluster_doctor_reports"


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_component(value: str) -> str:
    """One path component from untrusted text (a run_id such as ``manual__2026-01-01T00:00:00+00:00``).

    Only [A-Za-z0-9._-] survive, never '.'/'..' or a leading dot; when anything had to change, a short
    hash of the original keeps two different ids from landing in the same folder."""
    text = str(value)
    cleaned = _UNSAFE.sub("_", text).lstrip(".")[:120]
    if cleaned == text and cleaned:
        return cleaned
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{cleaned}-{digest}" if cleaned else digest


# ---------------------------------------------------------------------------- building the report
def _ms(value: Any) -> int | None:
    if value is None or value == "":
        return None
    return int(parse_timestamp(value, "timestamp").timestamp() * 1000)


@functools.lru_cache(maxsize=1)
def _codes() -> dict[str, tuple[str | None, str]]:
    """{code: (recommended action token, advice in words)} from the suites' codes.yaml; {} when it
    cannot be read (the report then carries the codes without actions rather than not being written)."""
    try:
        import yaml

        from cluster_doctor.domain import suites

        data = yaml.safe_load((suites.DEFAULT_SUITES_DIR / "codes.yaml").read_text(encoding="utf-8")) or {}
        return {str(code): (actions.valid(spec.get("recommended_action")), str(spec.get("action") or ""))
                for code, spec in (data.get("codes") or {}).items() if isinstance(spec, Mapping)}
    except Exception:  # noqa: BLE001 - a missing or broken codes file must not cost the report
        log.warning("codes.yaml not readable: CTRF checks carry codes without recommended actions")
        return {}


def recommended_action(code: str | None) -> str | None:
    """The action token codes.yaml gives ``code``."""
    return _codes().get(code, (None, ""))[0] if code else None


def advice(code: str | None) -> str | None:
    """What a person does about ``code``, in words (codes.yaml's ``action``)."""
    return (_codes().get(code, (None, ""))[1] or None) if code else None


def _with_action(check: Mapping[str, Any]) -> dict[str, Any]:
    """The check with its action token (the finding's own, else its code's) and the code's advice."""
    out = dict(check)
    action = actions.valid(check.get("action")) or recommended_action(check.get("code"))
    if action:
        out["recommended_action"] = action
    words = advice(check.get("code"))
    if words:
        out["advice"] = words
    return out


def _check_line(check: Mapping[str, Any]) -> str:
    where = f" [{check['device']}]" if check.get("device") else ""
    value = check.get("value")
    text = f"{check.get('status', '?').upper()} {check['name']}{where}"
    if value is not None:
        text += f": {value}{(' ' + check['unit']) if check.get('unit') else ''}"
    if check.get("threshold"):
        text += f" (needs {check['threshold']})"
    if check.get("message"):
        text += f" — {check['message']}"
    if check.get("code"):
        action = check.get("recommended_action") or recommended_action(check["code"])
        text += f" [{check['code']}" + (f": {action}]" if action else "]")
    return " ".join(text.split())


def _labels(attempt: Mapping[str, Any]) -> dict[str, Any]:
    labels = {"node": attempt["node_name"], "test": attempt["test_name"], "status": attempt["status"],
              "recommended_action": actions.shown(attempt.get("action"))}
    if attempt.get("gpu_model"):
        labels["gpu_model"] = attempt["gpu_model"]
    if isinstance(attempt.get("gpu_count"), int):
        labels["gpu_count"] = attempt["gpu_count"]
    return labels


def ctrf_test(attempt: Mapping[str, Any], *, newly_failing: bool = False) -> dict[str, Any]:
    """The CTRF test entry of one attempt (a dict as ``tasks.record`` returns them)."""
    status = attempt["status"]
    start, stop = _ms(attempt.get("started_at")), _ms(attempt.get("finished_at"))
    checks = _Checks.of(attempt)
    incomplete, count = _completeness(attempt, checks.not_run)
    test: dict[str, Any] = {
        "name": f"{attempt['node_name']} · {attempt['test_name']}",
        "status": STATUS_MAP[status],
        "rawStatus": status,
        "duration": _duration(attempt.get("duration_s"), start, stop),
        "suite": [attempt["test_name"]],
        "labels": _labels(attempt),
    }
    if start is not None:
        test["start"] = start
    if stop is not None:
        test["stop"] = stop
    if attempt.get("reason"):
        test["message"] = attempt["reason"]
    partial = status == Status.PASS and incomplete
    if partial:  # never a clean pass: the status text leads the message
        shown = actions.status_text(status, incomplete, count)
        test["message"] = f"{shown}: {attempt['reason']}" if attempt.get("reason") else shown
    shown_checks = checks.failing or (checks.not_run if partial else [])
    if shown_checks:
        test["trace"] = _trace(shown_checks)
    tags = (["newly-failing"] if newly_failing else []) + (["incomplete"] if partial else [])
    if tags:
        test["tags"] = tags
    if attempt.get("log_path"):
        test["attachments"] = _attachments(attempt["log_path"])
    test["extra"] = _extra(attempt, checks, newly_failing=newly_failing, incomplete=incomplete,
                           not_run_count=count)
    return test


def _duration(duration_s: Any, start: int | None, stop: int | None) -> int:
    """Milliseconds: as recorded, else from start and stop."""
    if isinstance(duration_s, (int, float)) and not isinstance(duration_s, bool):
        return int(round(duration_s * 1000))
    if start is not None and stop is not None:
        return max(0, stop - start)
    return 0  # never started (timeout, skipped): CTRF requires a duration


def _trace(checks: Sequence[Mapping[str, Any]]) -> str:
    lines = [_check_line(c) for c in checks[:MAX_TRACE_CHECKS]]
    if len(checks) > MAX_TRACE_CHECKS:
        lines.append(f"... and {len(checks) - MAX_TRACE_CHECKS} more check(s)")
    return "\n".join(lines)


def _attachments(log_path: str) -> list[dict[str, str]]:
    out = [{"name": "log", "contentType": "text/plain", "path": log_path}]
    if log_path.endswith(".log"):  # the suites write the result JSON next to the log
        out.append({"name": "result", "contentType": "application/json",
                    "path": log_path[: -len(".log")] + ".json"})
    return out


@dataclasses.dataclass(frozen=True)
class _Checks:
    """An attempt's named checks, and its failing, warning and not-run ones with their actions."""

    named: list[Mapping[str, Any]]
    failing: list[dict[str, Any]]
    warnings: list[dict[str, Any]]
    not_run: list[dict[str, Any]]

    @classmethod
    def of(cls, attempt: Mapping[str, Any]) -> _Checks:
        named = [c for c in attempt.get("checks") or [] if isinstance(c, Mapping) and c.get("name")]
        return cls(named, failing=[_with_action(c) for c in named if c.get("status") in FAILING_CHECKS],
                   warnings=[_with_action(c) for c in named if c.get("status") == CheckStatus.WARN],
                   not_run=[_with_action(c) for c in named if c.get("status") == CheckStatus.SKIP])


def _extra(attempt: Mapping[str, Any], checks: _Checks, *, newly_failing: bool,
           incomplete: bool | None, not_run_count: int | None) -> dict[str, Any]:
    """The test's ``extra``: the attempt in our terms, its checks, codes and actions, where it ran."""
    status = attempt["status"]
    failing, warnings, not_run = checks.failing, checks.warnings, checks.not_run
    codes = list(dict.fromkeys(c["code"] for c in failing + warnings if c.get("code")))
    return {
        "node_name": attempt["node_name"],
        "test_name": attempt["test_name"],
        "status": status,
        "executed": status in EXECUTED,
        "newly_failing": newly_failing,
        "gpu_model": attempt.get("gpu_model"),
        "gpu_count": attempt.get("gpu_count"),
        "metrics": dict(attempt.get("metrics") or {}),
        "failing_checks": failing[:MAX_TRACE_CHECKS],
        "failing_checks_total": len(failing),
        # stable fault codes (the suites' codes.yaml) and what to do about them, for automation
        "code": next((c["code"] for c in failing if c.get("code")), None),
        "codes": codes,
        # the attempt's action (domain.actions); per code its token and, in words, the advice
        "recommended_action": actions.shown(attempt.get("action")),
        "recommended_actions": {code: recommended_action(code) for code in codes if recommended_action(code)},
        "advice": {code: advice(code) for code in codes if advice(code)},
        "incomplete": incomplete,
        "checks_not_run": not_run_count,
        "not_run_checks": not_run[:MAX_TRACE_CHECKS],
        "warnings": warnings[:MAX_TRACE_CHECKS],
        "checks_total": len(checks.named),
        "log_path": attempt.get("log_path"),
        "pod_name": attempt.get("pod_name"),
        "suite_version": attempt.get("suite_version"),
        "started_at": _iso(attempt.get("started_at")),
        "finished_at": _iso(attempt.get("finished_at")),
        "airflow": {"dag_id": attempt.get("dag_id"), "run_id": attempt.get("run_id"),
                    "map_index": attempt.get("map_index"), "try_number": attempt.get("try_number")},
    }


def _completeness(attempt: Mapping[str, Any], not_run: Sequence[Mapping[str, Any]]) -> tuple[bool | None, int | None]:
    """(incomplete, checks not run) of an executed attempt: as recorded, else from its skip checks."""
    if attempt["status"] not in (Status.PASS, Status.FAIL, Status.ERROR):
        return None, None
    count = attempt.get("checks_not_run")
    count = count if isinstance(count, int) and not isinstance(count, bool) else len(not_run)
    return bool(attempt.get("incomplete")) or count > 0, count


def _iso(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return parse_timestamp(value, "timestamp").isoformat()


def _node_list(names: Sequence[str]) -> dict[str, Any]:
    # hostlist-compressed: 5,000 names become a few dozen characters on a regularly named fleet
    return {"count": len(names), "nodes": compress(names)}


def build_report(
    attempts: Sequence[Mapping[str, Any]],
    summary: RunSummary | None = None,
    *,
    dag_id: str,
    run_id: str,
    now: dt.datetime | None = None,
    settings: Settings | None = None,
) -> dict[str, Any]:
    """The CTRF document of one run: its attempts (as ``Attempt.to_dict`` writes them), plus the run
    summary (``report.run_summary``) for the environment (free / planned / not-eligible nodes, coverage)."""
    now = now or dt.datetime.now(dt.UTC)
    summary = summary or RunSummary()
    newly = {(n.node_name, n.test_name) for n in summary.newly_failing}
    ordered = sorted(attempts, key=lambda a: (a["node_name"], a["test_name"], a.get("try_number") or 0))
    tests = [ctrf_test(a, newly_failing=(a["node_name"], a["test_name"]) in newly
                       and a["status"] in FAILING) for a in ordered]
    counts = {s: 0 for s in CTRF_STATUSES}
    raw_counts: dict[str, int] = {}
    for test in tests:
        counts[test["status"]] += 1
        raw_counts[test["rawStatus"]] = raw_counts.get(test["rawStatus"], 0) + 1
    now_ms = int(now.timestamp() * 1000)
    starts = [t["start"] for t in tests if "start" in t] + [t["stop"] for t in tests if "stop" in t]
    run_start = _ms(summary.run_started_at)
    start = run_start if run_start is not None else min(starts, default=now_ms)
    stop = max([now_ms, start, *(t["stop"] for t in tests if "stop" in t)])
    blocking = counts["failed"] + counts["other"]
    results: dict[str, Any] = {
        "tool": {"name": TOOL_NAME, "version": __version__},
        "summary": {
            "tests": len(tests), **counts,
            "suites": len({t["suite"][0] for t in tests}),
            "start": start, "stop": stop, "duration": stop - start,
            "extra": {"blocking": blocking, "statuses": raw_counts,
                      "incomplete_passes": sum(1 for t in tests if "incomplete" in t.get("tags", ())),
                      "gate": "fail when failed + other > 0 (other = the suite could not judge the node)"},
        },
        "tests": tests,
        # a run that could not create its pods (an unusable volume) is not healthy, even with no failure
        "environment": _environment(summary, dag_id, run_id, settings,
                                    healthy=blocking == 0 and not summary.blocked),
    }
    extra: dict[str, Any] = {}
    if "not_eligible" in summary.model_fields_set:
        extra["not_eligible"] = {reason: _node_list(list(names)) for reason, names in summary.not_eligible.items()}
    if summary.newly_failing:
        extra["newly_failing"] = [n.model_dump(mode="json") for n in summary.newly_failing]
    if summary.blocked:
        extra["blocked"] = summary.blocked.model_dump(mode="json")
    if extra:
        results["extra"] = extra
    return {
        "reportFormat": "CTRF",
        "specVersion": SPEC_VERSION,
        "reportId": str(uuid.uuid4()),
        "runId": run_id,
        "timestamp": now.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
        "generatedBy": f"{TOOL_NAME} {__version__}",
        "results": results,
    }


def _environment(summary: RunSummary, dag_id: str, run_id: str, settings: Settings | None,
                 *, healthy: bool) -> dict[str, Any]:
    env: dict[str, Any] = {
        "reportName": f"{dag_id} {run_id}",
        "appName": TOOL_NAME,
        "appVersion": __version__,
        "buildName": dag_id,
        "buildId": run_id,
        "healthy": healthy,
    }
    extra: dict[str, Any] = {"dag_id": dag_id, "run_id": run_id}
    if settings:
        env["testEnvironment"] = settings.kubernetes_conn_id
        extra["namespace"] = settings.namespace
        extra["staleness_days"] = settings.staleness_days
    # what the summary says (a summary built from part of a run leaves the rest out)
    told = summary.model_dump(mode="json", include=summary.model_fields_set)
    for key in ("run_started_at", "dry_run", "gpu_nodes", "free_nodes", "planned", "params"):
        if key in told:
            extra[key] = told[key]
    cov = summary.coverage
    if cov:
        extra["coverage"] = {
            "gpu_nodes": cov.gpu_nodes, "covered_nodes": cov.covered_nodes, "coverage": cov.coverage,
            "never_validated": _node_list(cov.never_validated),
            "failing_nodes": _node_list(cov.failing_nodes),
        }
    env["extra"] = extra
    return env


# ---------------------------------------------------------------------------- writing
def report_path(reports_dir: str | os.PathLike | files.Location, dag_id: str, run_id: str) -> Any:
    return files.as_location(reports_dir) / safe_component(dag_id) / safe_component(run_id) / "ctrf.json"


def write_ctrf(report: Mapping[str, Any], reports_dir: str | os.PathLike | files.Location, dag_id: str,
               run_id: str) -> Any:
    """``<reports_dir>/<dag_id>/<safe run_id>/ctrf.json``, atomically (a rerun replaces it whole)."""
    text = json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False, default=str) + "\n"
    return write_atomic(report_path(reports_dir, dag_id, run_id), text)


def write_run_report(
    attempts: Sequence[Mapping[str, Any]],
    summary: RunSummary,
    *,
    settings: Settings,
    dag_id: str,
    run_id: str,
    now: dt.datetime | None = None,
    reports_dir: Any = None,
) -> str | None:
    """Build and write the run's CTRF file to ``reports_dir`` (a location; default: the setting's
    path); the path or URL, or None when it could not be written.

    Never raises on I/O: a full or read-only reports volume, or an object store that refuses, must not
    hide the run's verdict."""
    report = build_report(attempts, summary, dag_id=dag_id, run_id=run_id, now=now, settings=settings)
    try:
        path = write_ctrf(report, reports_dir if reports_dir is not None else resolve_reports_dir(settings.reports_dir),
                          dag_id, run_id)
    except Exception as exc:  # noqa: BLE001 - OSError locally; fsspec backends raise their own types
        log.error("CTRF report not written: %s", exc)
        return None
    s = report["results"]["summary"]
    log.info("CTRF report: %s (%d test(s): %d passed, %d failed, %d other, %d skipped)",
             path, s["tests"], s["passed"], s["failed"], s["other"], s["skipped"])
    return files.describe(path)
