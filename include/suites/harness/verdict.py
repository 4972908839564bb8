"""The verdict of a run (status, reason, code, action, incomplete) and the compact summary that goes
to the termination log (always < 4096 bytes)."""

from __future__ import annotations

import json
from typing import Any, Iterable

from .. import codes
from .checks import CHECK_STATUSES, Check
from .text import one_line

SUMMARY_PREFIX = "CLUSTER_DOCTOR_RESULT "
# kubelet keeps at most 4096 bytes of a termination message; stay clearly below it.
TERMINATION_LIMIT = 4096
SUMMARY_BUDGET = 4000

_ORDER = {"fail": 0, "error": 1, "warn": 2, "skip": 3, "pass": 4}


# a key check that is not run for this code was not judged for want of a floor: the suite proved nothing
UNJUDGED = ("BASELINE_MISSING",)


def unjudged_key(checks: list[Check], key: Iterable[str] = ()) -> list[Check]:
    """The suite's key checks (name patterns: those without which it proves nothing) that could not be
    judged for want of a baseline (no floor for the model, the link type, the profile)."""
    import fnmatch

    pats = tuple(key)
    return [c for c in checks if c.status == "skip" and c.code in UNJUDGED
            and any(fnmatch.fnmatchcase(c.name, p) for p in pats)]


def decide(checks: list[Check], suite_error: str | None, key: Iterable[str] = ()) -> tuple[str, str]:
    """Overall status and one-line reason.

    * a suite-level error (exception, SIGTERM, timeout, unusable output dir) -> error: the run is
      incomplete, even if some checks had already failed (the reason names them);
    * any failing check -> fail, reason = first failing check with device and number;
    * any check in error -> error; a key check (`key`) not judged for want of a baseline -> error
      (never `pass (incomplete)`: the suite proved nothing); nothing actually verified (no pass) ->
      error; else pass.
    """
    fails = [c for c in checks if c.status == "fail"]
    errors = [c for c in checks if c.status == "error"]
    if suite_error:
        reason = suite_error
        if fails:
            reason += f"; {len(fails)} check(s) had failed before, first: {fails[0].headline()}"
        return "error", one_line(reason)
    if fails:
        more = f" (+{len(fails) - 1} more failing checks)" if len(fails) > 1 else ""
        return "fail", one_line(fails[0].headline() + more)
    if errors:
        more = f" (+{len(errors) - 1} more checks in error)" if len(errors) > 1 else ""
        return "error", one_line(errors[0].headline() + more)
    unjudged = unjudged_key(checks, key)
    if unjudged:
        return "error", one_line("not judged, no baseline for a key check: " + "; ".join(
            c.headline() for c in unjudged[:3]) + (f"; +{len(unjudged) - 3} more" if len(unjudged) > 3 else ""), 400)
    passed = sum(c.status == "pass" for c in checks)
    if not passed:
        return "error", one_line(f"nothing could be verified: {len(checks)} check(s), none passed")
    warns = sum(c.status == "warn" for c in checks)
    skipped = [c for c in checks if c.status == "skip"]
    if skipped:
        # a pass that rests on checks that never ran must read differently from a clean pass
        return "pass", one_line(
            f"pass, {len(skipped)} check(s) could not run: "
            + "; ".join(c.headline() for c in skipped[:3])
            + (f"; +{len(skipped) - 3} more" if len(skipped) > 3 else "")
            + f" ({passed} passed" + (f", {warns} warning(s))" if warns else ")"),
            400,
        )
    return "pass", f"all {passed} checks passed" + (f", {warns} warning(s)" if warns else "")


def is_incomplete(checks: list[Check]) -> bool:
    """True when any check could not run: such a pass is not a clean pass."""
    return any(c.status == "skip" for c in checks)


def verdict_code(status: str, checks: list[Check], suite_code: str | None = None, key: Iterable[str] = ()) -> str | None:
    """The code the verdict rests on: the suite-level error's, else the first failing check's, else
    the first erroring check's, else the first unjudged key check's; None for a pass."""
    if status == "pass":
        return None
    if suite_code:
        return suite_code
    for want in ("fail", "error"):
        for c in checks:
            if c.status == want and c.code:
                return c.code
    unjudged = unjudged_key(checks, key) if status == "error" else []
    if unjudged:
        return unjudged[0].code
    return "SUITE_ERROR" if status == "error" else None


def verdict_action(status: str, checks: list[Check], suite_code: str | None = None) -> str:
    """The most severe recommended action the verdict calls for (codes.ACTIONS order): none for a
    pass; the suite-level error's; else over the failing (or, for an error, erroring) checks."""
    if status == "pass":
        return "none"
    if suite_code:
        return codes.action(suite_code)
    want = ("fail",) if status == "fail" else ("fail", "error")
    found = codes.most_severe(c.action for c in checks if c.status in want)
    if not found and status == "error" and any(c.status == "skip" and c.code in UNJUDGED for c in checks):
        return codes.action(UNJUDGED[0])
    return found or "retest"


def counts(checks: Iterable[Check]) -> dict[str, int]:
    out = {s: 0 for s in CHECK_STATUSES}
    for c in checks:
        out[c.status] += 1
    return out


def _compact(c: Check) -> dict:
    d: dict[str, Any] = {"name": c.name, "status": c.status}
    if c.device is not None:
        d["device"] = c.device
    if c.value is not None:
        d["value"] = c.value if not isinstance(c.value, str) else one_line(c.value, 60)
    if c.unit:
        d["unit"] = c.unit
    if c.threshold:
        d["threshold"] = c.threshold
    if c.status != "pass" and c.message:
        d["message"] = one_line(c.message, 160)
    if c.code:
        d["code"] = c.code
    if c.action:
        d["action"] = c.action
    return d


def _size(obj: dict) -> int:
    return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=True).encode())


def build_summary(
    result: dict,
    checks: list[Check],
    key_metrics: list[str],
    log_path: str | None,
    result_path: str | None,
    budget: int = SUMMARY_BUDGET,
) -> dict:
    """The termination message: key figures and the non-pass checks first, always < budget bytes.

    Truncation is deterministic: checks are ordered fail, error, warn, skip, pass (then by position)
    and cut from the end; then metrics, then long strings. `truncated` says something was cut."""
    # Long: the deterministic truncation steps of the 4 KiB summary, in order.
    ordered = sorted(enumerate(checks), key=lambda ic: (_ORDER[ic[1].status], ic[0]))
    compact = [_compact(c) for _, c in ordered]
    metrics = {k: result["metrics"][k] for k in key_metrics if k in result["metrics"]}
    env = result.get("environment", {})
    summary = {
        "schema_version": result["schema_version"],
        "suite": result["suite"],
        "node": result["node"],
        "status": result["status"],
        "reason": result["reason"],
        "started_at": result["started_at"],
        "finished_at": result["finished_at"],
        "duration_s": result["duration_s"],
        "suite_version": result["suite_version"],
        "gpu_model": env.get("gpu_model"),
        "gpu_count": env.get("gpu_count"),
        "metrics": metrics,
        "checks": compact,
        "check_counts": counts(checks),
        "incomplete": bool(result.get("incomplete")),
        "code": result.get("code"),
        "action": result.get("action"),
        "truncated": False,
        "log_path": log_path,
        "result_path": result_path,
    }
    if summary["action"] is None:  # a result built without one (older callers): leave the key out
        del summary["action"]
    if result.get("peer"):  # peer tests: the other node of the pair
        summary["peer"] = result["peer"]
    if _size(summary) <= budget:
        return summary
    summary["truncated"] = True
    summary["checks_omitted"] = 0
    # largest prefix of the ordered checks that fits (binary search: sizes grow with the prefix)
    lo, hi = 0, len(compact)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        summary["checks"] = compact[:mid]
        summary["checks_omitted"] = len(compact) - mid
        if _size(summary) <= budget:
            lo = mid
        else:
            hi = mid - 1
    summary["checks"] = compact[:lo]
    summary["checks_omitted"] = len(compact) - lo
    if _size(summary) <= budget:
        return summary
    # still too big without checks: shrink metrics, then strings
    for k in sorted(summary["metrics"], reverse=True):
        if _size(summary) <= budget:
            break
        del summary["metrics"][k]
    for key, limit in (
        ("reason", 400),
        ("log_path", 300),
        ("result_path", 300),
        ("gpu_model", 80),
        ("node", 120),
        ("suite_version", 64),
        ("reason", 120),
    ):
        if _size(summary) <= budget:
            break
        if isinstance(summary.get(key), str):
            summary[key] = one_line(summary[key], limit)
    return summary


def summary_line(summary: dict) -> str:
    return SUMMARY_PREFIX + json.dumps(summary, separators=(",", ":"), ensure_ascii=True)

