"""Check: one line of a result (name, status, value, threshold, message, device, code, action), and
SuiteError, the exception that turns a run into `error` with a code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import codes
from .text import fmt

CHECK_STATUSES = ("pass", "fail", "warn", "error", "skip")
MAX_DEVICE_IN_HEADLINE = 80  # characters of a check's device in the reason (a reason keeps 300 in all)


class SuiteError(Exception):
    """The suite cannot judge the node (tool missing, garbage output, ...): status `error`.

    `code` (codes.yaml) says why in machine-readable form; SUITE_ERROR when not given."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.output = ""  # what a tool printed before it was stopped (run_tool on timeout)


@dataclass
class Check:
    name: str
    status: str
    value: Any = None
    unit: str | None = None
    threshold: str | None = None
    message: str = ""
    device: str | None = None
    code: str | None = None  # stable machine-readable code of a non-pass check (codes.yaml)
    # recommended action (codes.ACTIONS); the code's own unless the finding knows better (an Xid's
    # recovery action from NVIDIA's catalog, the action the driver requests)
    action: str | None = None

    def __post_init__(self) -> None:
        if self.status not in CHECK_STATUSES:
            raise ValueError(f"bad check status {self.status!r}")
        if self.status == "pass":
            self.code = self.action = None
        else:
            if not self.code:
                self.code = codes.resolve(self.name, self.status)
            self.action = self.action or codes.action(self.code)
            if self.action not in codes.ACTIONS:
                raise ValueError(f"bad action {self.action!r} for {self.name}")
        if isinstance(self.value, float) and (
            self.value != self.value or self.value in (float("inf"), float("-inf"))
        ):
            # JSON has no NaN/inf: keep the fact in the message, the value as a string.
            self.value = str(self.value)
        elif isinstance(self.value, float):
            self.value = float(f"{self.value:.6g}")

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "status": self.status,
            "value": self.value,
            "unit": self.unit,
            "threshold": self.threshold,
            "message": self.message,
            "device": self.device,
            "code": self.code,
            "action": self.action,
        }

    def headline(self) -> str:
        """``name[device]: message``; a long device (a path) keeps its ends, so the message that says what
        is wrong still fits a one-line reason."""
        device = self.device or ""
        if len(device) > MAX_DEVICE_IN_HEADLINE:
            keep = (MAX_DEVICE_IN_HEADLINE - 3) // 2
            device = f"{device[:keep]}...{device[-keep:]}"
        where = f"[{device}]" if device else ""
        msg = self.message or f"value {fmt(self.value)}{' ' + self.unit if self.unit else ''}" + (
            f" vs {self.threshold}" if self.threshold else ""
        )
        return f"{self.name}{where}: {msg}"


def at_least(name: str, value: float | None, minimum: float | None, *, unit: str, device: str | None = None,
             basis: str = "", fail_status: str = "fail", code: str | None = None) -> Check:
    """The check of a value against a floor (see `bounded`)."""
    return bounded(name, value, minimum, ">=", unit=unit, device=device, basis=basis, fail_status=fail_status,
                   code=code)


def at_most(name: str, value: float | None, maximum: float | None, *, unit: str, device: str | None = None,
            basis: str = "", fail_status: str = "fail", code: str | None = None) -> Check:
    """The check of a value against a ceiling (see `bounded`)."""
    return bounded(name, value, maximum, "<=", unit=unit, device=device, basis=basis, fail_status=fail_status,
                   code=code)


def bounded(name: str, value: float | None, limit: float | None, ok_rel: str, *, unit: str,
            device: str | None = None, basis: str = "", fail_status: str = "fail", code: str | None = None) -> Check:
    """One check of value against a floor (ok_rel ">=") or a ceiling ("<="), the message carrying the
    number and the bound; `code` names the fault when the bound is missed (default: by check name,
    codes.yaml). No measurement is an error, no bound a skip: never a silent pass."""
    bad_rel = "<" if ok_rel == ">=" else ">"
    note = f" ({basis})" if basis else ""
    if value is None:
        return Check(name, "error", unit=unit, device=device, message="no measurement", code="NO_MEASUREMENT")
    if limit is None:
        return Check(name, "skip", value=value, unit=unit, device=device,
                     message=f"{fmt(value)} {unit}; no threshold{note}", code="BASELINE_MISSING")
    ok = value >= limit if ok_rel == ">=" else value <= limit
    rel = ok_rel if ok else bad_rel
    return Check(
        name,
        "pass" if ok else fail_status,
        value=value,
        unit=unit,
        threshold=f"{ok_rel} {fmt(limit)}",
        device=device,
        message=f"{fmt(value)} {unit} {rel} {fmt(limit)} {unit}{note}",
        code=None if ok else code,
    )

