"""The scrape's per-pair families (status, since, staleness, node info, action, checks not run, one per
key figure): which samples each pair of the fleet assessment has, as prometheus_client families or as
exposition text kept per node between scrapes (``PairText``).

At 5,000 nodes x 4 tests these are 90,000 of the scrape's samples. ``PairText`` renders a node's lines
again only when the fleet assessment holds a new coverage object for it (``store.fleet_state``
reassesses a node when one of its rows, its inventory row or its freshness changed); every scrape
writes only the staleness values anew (they move with the clock) and joins the kept text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from prometheus_client.metrics_core import GaugeMetricFamily

from cluster_doctor.domain import actions, suites
from cluster_doctor.domain.coverage import CoverageState
from cluster_doctor.domain.status import EXECUTED, FAILING
from cluster_doctor.reports.exposition import Chunk, Series, go

PREFIX = "cluster_doctor"
# Values of the status label of cluster_doctor_validation_status: the latest executed status, or never.
STATES = (*EXECUTED, CoverageState.NEVER)
_RESERVED = {"up", "scrape_duration_seconds", "staleness_threshold_seconds", "node_info", "skipped_values",
             "skipped_values_total"}
# Positions of the fixed families in PairLayout.families(); the key figures follow.
STATUS, SINCE, STALENESS, INFO, ACTION, NOT_RUN, CODE = range(7)


def key_metric_name(key: str) -> str:
    """Prometheus family name of a suite key figure: cluster_doctor_<key>, sanitized."""
    name = re.sub(r"[^a-zA-Z0-9_]", "_", key).strip("_").lower() or "metric"
    if name in _RESERVED or name.startswith(("fleet_", "validation_")) or name[0].isdigit():
        name = f"suite_{name}"  # never shadow a fixed family
    return f"{PREFIX}_{name}"


def key_tests(tests: Iterable[str]) -> dict[str, list[str]]:
    """Key figure -> the tests that report it (one family per key figure of the suite catalog)."""
    out: dict[str, list[str]] = {}
    for test in tests:
        suite = suites.CATALOG.get(test)
        for key in (suite.key_metrics if suite else ()):
            out.setdefault(key, []).append(test)
    return out


PAIR_LABELS = ("node", "test")
# Label names of the fixed families, in order (status, since, staleness, info, action, not run, code).
FIXED_LABELS = (("node", "test", "status"), PAIR_LABELS, PAIR_LABELS, ("node", "gpu_model"), ("node", "test", "action"),
                PAIR_LABELS, ("node", "test", "code"))


def _fixed_families() -> list[GaugeMetricFamily]:
    labels = list(PAIR_LABELS)
    return [
        GaugeMetricFamily(
            f"{PREFIX}_validation_status",
            "Always 1; the status label is the pair's latest executed status (pass, fail, error), or never "
            "when the suite has not executed on the node yet.", labels=[*labels, "status"]),
        GaugeMetricFamily(
            f"{PREFIX}_validation_status_since_timestamp_seconds",
            "Unix time the pair's current executed status started (first attempt of the streak); only for "
            "pairs whose status is fail or error.", labels=labels),
        GaugeMetricFamily(
            f"{PREFIX}_validation_staleness_seconds",
            "Seconds since the latest executed attempt of the pair finished; +Inf when never executed.", labels=labels),
        GaugeMetricFamily(f"{PREFIX}_node_info", "Always 1; the node's GPU model (for joins).",
                          labels=["node", "gpu_model"]),
        # Sparse on purpose (a series only where there is something to do or something was not checked):
        # at 5,000 nodes a series per pair each would add 40,000 series for mostly "none" and 0.
        GaugeMetricFamily(
            f"{PREFIX}_validation_action",
            "Always 1; the recommended action of the pair's latest executed result (retest, check_storage, "
            "check_fabric, reset_gpu, reboot, drain_and_service, or unknown when not recorded); only for pairs "
            "whose action is not none.", labels=[*labels, "action"]),
        GaugeMetricFamily(
            f"{PREFIX}_validation_checks_not_run",
            "Checks that could not run in the pair's latest executed result (its pass is incomplete, not a "
            "clean pass); only for pairs where some did not run.", labels=labels),
        GaugeMetricFamily(
            f"{PREFIX}_validation_failure_code",
            "Always 1; a stable code (FAULTS.md) of a check that failed in the pair's latest executed result; only "
            "for pairs whose status is fail or error, one series per code.", labels=[*labels, "code"]),
    ]


class PairLayout:
    """The per-pair families of a set of enabled tests, and the samples of one pair."""

    def __init__(self, tests: Sequence[str]):
        self.tests = tuple(tests)
        self.key_tests = key_tests(tests)
        self.figure_at = {key: CODE + 1 + i for i, key in enumerate(self.key_tests)}

    def families(self) -> list[GaugeMetricFamily]:
        """New, empty families in the scrape's order."""
        figures = [GaugeMetricFamily(
            key_metric_name(key),
            f"Key figure {key} of the node's latest executed {'/'.join(ts)} result (join cluster_doctor_node_info "
            "on node for the GPU model).", labels=list(PAIR_LABELS)) for key, ts in self.key_tests.items()]
        return [*_fixed_families(), *figures]

    def labels(self) -> list[tuple[str, ...]]:
        """Each family's label names, in families() order."""
        return [*FIXED_LABELS, *[PAIR_LABELS] * len(self.key_tests)]

    def samples(self, pair: Mapping[str, Any]) -> list[tuple[int, list[str], float]]:
        """(family position, label values, value) of one pair's samples, its staleness and the node's
        info apart."""
        node, test = pair["node_name"], pair["test_name"]
        state = pair["status"] if pair["status"] in STATES else CoverageState.NEVER
        # Only the current state is exposed (not a 0/1 row per state): a quarter of the series at
        # 5,000 nodes, and `== 1` / `count by (status)` alerting works the same.
        out = [(STATUS, [node, test, state], 1.0)]
        if state in FAILING and pair.get("since_ts") is not None:
            out.append((SINCE, [node, test], pair["since_ts"]))
        if state in FAILING:
            out += [(CODE, [node, test, code], 1.0) for code in pair.get("codes") or ()]
        if state == CoverageState.NEVER:
            return out
        token = actions.shown(pair.get("action"))
        if token != "none":
            out.append((ACTION, [node, test, token], 1.0))
        count = pair.get("checks_not_run") or 0
        if count > 0 or pair.get("incomplete"):
            out.append((NOT_RUN, [node, test], float(count)))
        for key, value in (pair.get("metrics") or {}).items():
            at = self.figure_at.get(key)
            if at is not None and test in self.key_tests[key]:
                out.append((at, [node, test], value))
        return out


def staleness(pair: Mapping[str, Any]) -> float:
    return math.inf if pair["age_s"] is None else pair["age_s"]


def node_models(pairs: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Each node's GPU model for node_info: the first pair's that has one, else empty."""
    models: dict[str, str] = {}
    for pair in pairs:
        node = pair["node_name"]
        if not models.get(node):
            models[node] = pair.get("gpu_model") or ""
    return models


def add_pairs(families: list[GaugeMetricFamily], layout: PairLayout, pairs: Sequence[Mapping[str, Any]]) -> None:
    """Every pair's samples into ``families`` (layout.families()), as library samples."""
    for pair in pairs:
        for at, labels, value in layout.samples(pair):
            families[at].add_metric(labels, value)
        families[STALENESS].add_metric([pair["node_name"], pair["test_name"]], staleness(pair))
    for node, model in node_models(pairs).items():
        families[INFO].add_metric([node, model], 1.0)


class PairText:
    """The per-pair families as exposition text (bytes), a node's lines kept while its coverage object is
    the same one (the fleet assessment replaces it when anything the node shows changed), a family's
    text joined again only when a node's lines in it changed."""

    def __init__(self, layout: PairLayout):
        self.layout = layout
        self.heads = layout.families()
        self.series = [Series(f.name, labels) for f, labels in zip(self.heads, layout.labels(), strict=True)]
        self.order: list[str] = []
        self.held: dict[str, tuple[Any, list[bytes], list[str]]] = {}  # node -> (coverage, lines, staleness starts)
        self.parts: list[list[bytes]] = [[] for _ in self.heads]  # per family, per node in order
        self.bodies: list[bytes | None] = [None] * len(self.heads)  # per family, None: to join again
        self.prefixes: list[str] = []  # staleness line starts, per pair in order

    def _render(self, pairs: Sequence[Mapping[str, Any]]) -> tuple[list[bytes], list[str]]:
        lines: list[list[str]] = [[] for _ in self.heads]
        for pair in pairs:
            for at, labels, value in self.layout.samples(pair):
                lines[at].append(self.series[at].line(labels, value))
        for node, model in node_models(pairs).items():
            lines[INFO].append(self.series[INFO].line([node, model], 1.0))
        prefixes = [self.series[STALENESS].prefix([p["node_name"], p["test_name"]]) for p in pairs]
        return ["".join(family).encode() for family in lines], prefixes

    def _relay(self, order: list[str], n_pairs: int) -> None:
        """The fleet changed: lay the parts out again for ``order``."""
        self.order = order
        self.parts = [[b""] * len(order) for _ in self.heads]
        self.bodies = [None] * len(self.heads)
        self.prefixes = [""] * n_pairs
        kept = set(order)
        self.held = {n: h for n, h in self.held.items() if n in kept}

    def _place(self, i: int, lines: list[bytes], prefixes: list[str], width: int) -> None:
        for at, text in enumerate(lines):
            if self.parts[at][i] != text:
                self.parts[at][i] = text
                self.bodies[at] = None
        self.prefixes[i * width:(i + 1) * width] = prefixes

    def chunks(self, assessment: Any) -> list[Chunk]:
        """The per-pair families of ``assessment`` (a coverage.Assessment: each node's pairs together,
        one per enabled test, in node order) as chunks of text."""
        order = list(assessment.nodes)
        width = len(self.layout.tests)
        if hasattr(assessment, "pairs_and_ages"):  # store.fleet_state's: no copy of every pair per scrape
            pairs, ages = assessment.pairs_and_ages()
        else:
            pairs = assessment.pairs
            ages = [p["age_s"] for p in pairs]
        if len(pairs) != len(order) * width:
            raise ValueError("an assessment holds one pair per node and enabled test")
        relaid = order != self.order
        if relaid:
            self._relay(order, len(pairs))
        for i, name in enumerate(order):
            node = assessment.nodes[name]
            held = self.held.get(name)
            if held is None or held[0] is not node:
                lines, prefixes = self._render(pairs[i * width:(i + 1) * width])
                held = self.held[name] = (node, lines, prefixes)
            elif not relaid:
                continue
            self._place(i, held[1], held[2], width)
        # the only values that move with the clock; go()'s common case inline (a call per pair costs 10 ms)
        texts = [repr(a) if a is not None and a < 1e6 else go(math.inf if a is None else a) for a in ages]
        self.bodies[STALENESS] = ("\n".join(map(str.__add__, self.prefixes, texts)) + "\n").encode() if texts else b""
        for at, body in enumerate(self.bodies):
            if body is None:
                self.bodies[at] = b"".join(self.parts[at])
        return [Chunk(head, self.bodies[at], self.series[at].sample_name) for at, head in enumerate(self.heads)]
