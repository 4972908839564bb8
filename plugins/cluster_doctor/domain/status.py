"""The outcome of one validation attempt: one type for the whole product.

The database CHECK on ``validation_history.status`` is the contract; this enum names the same six
values. ``executed`` statuses mean the suite ran on the node and judged it; the others mean it did
not (the pod never ran to a verdict), so they never count as a validation.
"""

from __future__ import annotations

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


EXECUTED = (Status.PASS, Status.FAIL, Status.ERROR)
NOT_EXECUTED = (Status.TIMEOUT, Status.PREEMPTED, Status.SKIPPED)
FAILING = (Status.FAIL, Status.ERROR)
