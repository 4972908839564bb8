"""A missing baseline as a configuration finding: the suites judge a node against its GPU model's
baseline (floors, expected counts); a model without one leaves their key checks unjudged, and each
run says so (status `error`, code BASELINE_MISSING). That is one fact about a node pool (nodes of
one GPU model), not a fault of each node: shown once per pool, with its action."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

CODE = "BASELINE_MISSING"
ACTION = ("add the GPU model to baselines.yaml (fleet-calibrated floors and its expected counts, each with "
          "a source) or map the label to a known model with an alias, then retest the pool")


@dataclass(frozen=True)
class MissingBaseline:
    """The node pool (GPU model) whose latest results could not be judged for want of a baseline."""

    gpu_model: str | None
    nodes: int
    tests: tuple[str, ...]
    example: str  # one node of the pool, to open
    latest: dt.datetime | None

    def describe(self) -> str:
        model = self.gpu_model or "GPU model unknown"
        return (f"no baseline for {model}: {self.nodes} node(s), {', '.join(self.tests)} not judged "
                f"(e.g. {self.example}); action: {ACTION}")
