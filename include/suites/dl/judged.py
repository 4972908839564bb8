"""What a dl_unit judge returns, checks and metrics, and how a runner records it in the result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..harness.checks import Check
from ..harness.context import Context


@dataclass(frozen=True)
class Metric:
    key: str
    value: Any
    summary: bool = False  # a key figure of the summary, beside the full result


@dataclass
class Judged:
    checks: list[Check] = field(default_factory=list)
    metrics: list[Metric] = field(default_factory=list)

    def metric(self, key: str, value: Any, summary: bool = False) -> None:
        self.metrics.append(Metric(key, value, summary))


def record(ctx: Context, judged: Judged) -> None:
    for m in judged.metrics:
        ctx.metric(m.key, m.value, summary=m.summary)
    for c in judged.checks:
        ctx.record(c)
