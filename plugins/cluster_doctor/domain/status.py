"""The outcome of one validation attempt: one type for the whole product.

The database CHECK on ``validation_history.status`` is the contract; this enum names the same six
values. ``executed`` statuses mean the suite ran on the node and judged it; the others mean it did
not (the pod never ran to a verdict), so they never count as a validation.

Only node evidence makes an executed status: ``error`` is the suite's own "could not judge" (a crash,
an OOM, garbage output, its deadline), read from the pod. A failure of the orchestration around it —
the Kubernetes API unreachable or refusing, the scheduler, the results database — says nothing about
the node and is never ``error``: it is ``skipped`` (the pair stays due) with a reason that says so
(``domain.attempts``: ``NOT_JUDGED: ...`` when the result is still in a kept pod and the next run
records it, ``orchestration error: ...`` otherwise). Every view that counts failing nodes (the run
summary, the daily report, the fleet page, the metrics, node conditions, quarantine) counts executed
statuses only, so none of them ever counts a control-plane blink against a node.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum


class Status(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    TIMEOUT = "timeout"
    PREEMPTED = "preempted"
    SKIPPED = "skipped"

    @property
    def executed(self) -> bool:
        """The suite ran on the node and gave a verdict (pass/fail) or could not judge it (error)."""
        return self in EXECUTED

    @property
    def failing(self) -> bool:
        """The node needs attention: a check failed or the suite could not judge the node."""
        return self in FAILING

    @classmethod
    def parse(cls, value: object) -> Status:
        """A Status from its value, with a one-line error naming the known values."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"unknown status {value!r} (expected one of {', '.join(cls)})") from None


class CheckStatus(enum.StrEnum):
    """The status of one check inside a suite's summary (``checks[].status``, the keys of
    ``check_counts``): the attempt's own pass/fail/error, plus ``warn`` (noted, not failing) and
    ``skip`` (the check could not run on this node)."""

    PASS = Status.PASS
    FAIL = Status.FAIL
    WARN = "warn"
    ERROR = Status.ERROR
    SKIP = "skip"


EXECUTED = (Status.PASS, Status.FAIL, Status.ERROR)
NOT_EXECUTED = (Status.TIMEOUT, Status.PREEMPTED, Status.SKIPPED)
FAILING = (Status.FAIL, Status.ERROR)
FAILING_CHECKS = (CheckStatus.FAIL, CheckStatus.ERROR)  # a check that failed or could not judge


@dataclasses.dataclass(frozen=True)
class PairState:
    """What the store knows of one (node, test) pair: a row of ``validation_latest``, what the planner
    (``planning.due``), reservation and the acceptance gate read."""

    status: str | None = None  # last executed status (pass|fail|error) or None
    finished_at: dt.datetime | None = None  # when that executed attempt finished
    last_attempt_at: dt.datetime | None = None  # last attempt of any status
    last_attempt_status: str | None = None

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in EXECUTED:
            raise ValueError(f"PairState.status must be an executed status, got {self.status!r}")
        if (self.status is None) != (self.finished_at is None):
            raise ValueError("PairState.status and finished_at go together")
