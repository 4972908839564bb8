"""Peer tests: a test *between* two nodes, pure Python.

The suite ``fabric_peer`` runs on two free nodes of the same GPU model at once — a two-node NCCL
all-reduce forced onto the network and an ``ib_write_bw`` per rail — and each side records its own
row in ``validation_history`` with the other node in ``peer``. (In this code base a *pair* is a
node-test pair; two nodes tested together are *peers*, their test a *peer test*, a planned one a
``PeerMatch``.)

A failed peer test says that one of two nodes (or the links between them) is bad, not which. So a
failure is blamed on a node only by **triangulation**, the rule of ``triangulate``:

* The *outcome* of two peers is their latest peer test: failing when either side's row of it is
  ``fail`` or ``error`` (the rows of one test lie within ``SAME_TEST`` of each other), else passing.
* A node's *failures* are its failing outcomes newer than its latest passing one (a pass since then
  clears what came before: a repaired node starts over).
* A peer ``p`` of node ``n`` is *exonerated* when ``p`` has a passing outcome with a third node
  (neither ``n`` nor ``p``).
* ``n`` is **fail** (blamed) when at least two different peers of its failures are exonerated: two
  independent nodes that work elsewhere both failed with ``n``.
* ``n`` is **pass** when it has no failures (its latest outcome passed), or when every peer of its
  failures is itself blamed (the failure is theirs: ``n`` is exonerated).
* Otherwise ``n`` is **suspect**: it failed with someone, and that is not yet attributed. A suspect
  is retested at once with a node it has not been tested with (``match_peers``), a known-good one
  first. A model with only two nodes can never triangulate: its suspects stay suspect ("no third
  node of this model").

A node never peer-tested has no verdict. ``match_peers`` plans the run's peer tests: free nodes
grouped by GPU model (the ``gpu_product_label`` value), only nodes whose peer test is due (never
run, older than ``peer_cadence_days``, suspect, or blamed and past the failed-retest interval), each
paired preferably with a node under another leaf switch (``peer_topology_labels``), at most
``peer_max_per_run`` tests, the odd node out waiting for the next run.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

import hostlist
from pydantic import BaseModel, ConfigDict

from cluster_doctor.domain.status import EXECUTED, FAILING, Status

PEER_SUITE = "fabric_peer"
# Node labels naming a node's leaf switch, narrowest tier first, as the tools that write them name them
# (checked November 2026):
#   network.topology.nvidia.com/leaf  — NVIDIA Topograph's leaf switch tier (docs.nvidia.com/topograph,
#       "Node labels and annotations"; its Helm chart's topologyNodeLabels.leaf);
#   network.topology.nvidia.com/block — what Topograph 0.1 called that tier (docs/engines/k8s.md at v0.1.0);
#   topology.k8s.aws/network-node-layer-3 — EKS's bottom network layer for most instance types, "nodes
#       that share this value are physically closest" (docs.aws.amazon.com/eks, ml-workload-topology).
# Kubernetes' well-known topology.kubernetes.io/zone is no leaf (a zone spans many), so it is not
# among them; a deployment with its own labels (Kueue TAS levels, Run:ai network topologies) lists them.
PEER_TOPOLOGY_LABELS = (
    "network.topology.nvidia.com/leaf",
    "network.topology.nvidia.com/block",
    "topology.k8s.aws/network-node-layer-3",
)
# Both sides of one peer test record a row when their pod ends: rows of two peers this close are one test.
SAME_TEST = dt.timedelta(hours=1)


class PeerVerdictValue(enum.StrEnum):
    """What the peer tests say of a node (``PeerVerdict.verdict``; the rule is ``triangulate``'s)."""

    PASS = Status.PASS
    FAIL = Status.FAIL  # blamed
    SUSPECT = "suspect"  # failed with a peer, not yet attributed


class Settings(Protocol):
    """The settings ``match_peers`` reads (``cluster_doctor.domain.config.Settings`` has them; that module
    imports this one's constants, so this one names only what it needs)."""

    peer_tests: bool
    peer_cadence_days: float
    peer_max_per_run: int
    failed_retest_hours: float


# ---------------------------------------------------------------------------- records
@dataclasses.dataclass(frozen=True)
class PeerResult:
    """One row of a peer test: ``node``'s result of its test with ``peer``."""

    node: str
    peer: str
    status: str  # pass | fail | error (results that did not execute are ignored)
    finished_at: dt.datetime
    gpu_model: str | None = None


@dataclasses.dataclass(frozen=True)
class PeerVerdict:
    """What the peer tests say of one node (``triangulate``)."""

    node: str
    verdict: PeerVerdictValue
    peer: str | None  # the other node of its latest peer test
    finished_at: dt.datetime  # when its latest peer test finished
    reason: str
    failed_with: tuple[str, ...] = ()  # peers of its failures since its latest pass, oldest first
    passed_with: tuple[str, ...] = ()  # peers it has a passing outcome with
    failed_at: dt.datetime | None = None  # its oldest failure since its latest pass

    @property
    def suspect(self) -> bool:
        return self.verdict == PeerVerdictValue.SUSPECT

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["finished_at"] = self.finished_at.isoformat()
        out["failed_at"] = self.failed_at.isoformat() if self.failed_at else None
        out["failed_with"], out["passed_with"] = list(self.failed_with), list(self.passed_with)
        return out


@dataclasses.dataclass(frozen=True)
class PeerCandidate:
    """A free GPU node as ``match_peers`` sees it: its model and its topology labels' values (in the
    order of ``peer_topology_labels``; only those it carries)."""

    name: str
    gpu_model: str | None
    topology: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, name: str, gpu_model: str | None, labels: Mapping[str, str] | None,
           topology_labels: Sequence[str] = PEER_TOPOLOGY_LABELS) -> PeerCandidate:
        """From a node's labels: keeps the topology ones, in ``topology_labels`` order."""
        labels = labels or {}
        return cls(name, gpu_model, tuple((k, str(labels[k])) for k in topology_labels if labels.get(k)))

    def leaf(self, other: PeerCandidate) -> tuple[str, str, str] | None:
        """(label, this node's value, the other's) of the narrowest label both carry; None if none."""
        mine = dict(self.topology)
        for label, value in other.topology:
            if label in mine:
                return label, mine[label], value
        return None


class PeerMatch(BaseModel):
    """One planned peer test: ``server`` and ``client`` of the two-node test (the launcher starts the
    server's pod first), their GPU model, and why they were paired (one line)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    server: str
    client: str
    model: str
    reason: str

    @property
    def nodes(self) -> tuple[str, str]:
        return self.server, self.client


# ---------------------------------------------------------------------------- triangulation
@dataclasses.dataclass(frozen=True)
class _Outcome:
    at: dt.datetime
    failing: bool


def outcomes(history: Iterable[PeerResult]) -> dict[frozenset[str], _Outcome]:
    """The latest outcome of every two nodes tested together: failing when a row of that test (either
    side's, within ``SAME_TEST`` of the newest) failed or errored."""
    rows: dict[frozenset[str], list[PeerResult]] = {}
    for r in history:
        if r.status in EXECUTED and r.peer and r.node != r.peer:
            rows.setdefault(frozenset((r.node, r.peer)), []).append(r)
    out = {}
    for key, found in rows.items():
        newest = max(r.finished_at for r in found)
        same = [r for r in found if r.finished_at >= newest - SAME_TEST]
        out[key] = _Outcome(newest, any(r.status in FAILING for r in same))
    return out


def _names(nodes: Iterable[str]) -> str:
    nodes = list(nodes)
    return ", ".join(nodes[:-1]) + f" and {nodes[-1]}" if len(nodes) > 1 else "".join(nodes)


def triangulate(history: Iterable[PeerResult], *,
                model_sizes: Mapping[str, int] | None = None) -> dict[str, PeerVerdict]:
    """Every peer-tested node's verdict (pass, fail, suspect), by the rule in this module's docstring.

    ``history``: the peer-test rows to judge by (the store hands those of a recent window). ``model_sizes``:
    GPU nodes per model, to say that a suspect of a model with fewer than three nodes can never be
    triangulated. Long: the rule's three passes (outcomes, blame, the rest) read best in one place."""
    history = list(history)
    model = {r.node: r.gpu_model for r in history if r.gpu_model}
    by_node: dict[str, list[tuple[dt.datetime, str, bool]]] = {}
    for key, outcome in outcomes(history).items():
        a, b = sorted(key)
        by_node.setdefault(a, []).append((outcome.at, b, outcome.failing))
        by_node.setdefault(b, []).append((outcome.at, a, outcome.failing))
    passed = {n: {p for _, p, failing in found if not failing} for n, found in by_node.items()}
    failures: dict[str, list[tuple[dt.datetime, str]]] = {}
    for n, found in by_node.items():
        last_pass = max((at for at, _, failing in found if not failing), default=None)
        failures[n] = sorted((at, p) for at, p, failing in found
                             if failing and (last_pass is None or at > last_pass))

    def exonerated(p: str, n: str) -> bool:  # p passed with a third node
        return any(q != n for q in passed.get(p, ()))

    blamed = {n for n, failed in failures.items() if len({p for _, p in failed if exonerated(p, n)}) >= 2}
    verdicts = {}
    for n, found in by_node.items():
        at, peer, _ = max(found)
        failed = failures[n]
        failed_with = tuple(dict.fromkeys(p for _, p in failed))
        common = {"node": n, "peer": peer, "finished_at": at, "failed_with": failed_with,
                  "passed_with": tuple(sorted(passed[n], key=hostlist.numeric_sort_key)),
                  "failed_at": failed[0][0] if failed else None}
        if not failed:
            verdicts[n] = PeerVerdict(verdict=PeerVerdictValue.PASS, reason=f"passed with {peer}", **common)
        elif n in blamed:
            witnesses = [p for p in failed_with if exonerated(p, n)]
            verdicts[n] = PeerVerdict(verdict=PeerVerdictValue.FAIL, reason=(
                f"failed with {_names(failed_with)}; {_names(witnesses)} passed with other nodes"), **common)
        elif all(p in blamed for p in failed_with):
            verdicts[n] = PeerVerdict(verdict=PeerVerdictValue.PASS, reason=(
                f"failed only with {_names(failed_with)}, blamed by triangulation"), **common)
        else:
            size = (model_sizes or {}).get(model.get(n) or "")
            if size is not None and size < 3:
                why = f"no third node of this model ({size} node{'s' if size != 1 else ''}): cannot triangulate"
            else:
                open_ = [p for p in failed_with if p not in blamed and not exonerated(p, n)]
                why = (f"waiting for {_names(open_)} to be tested with a third node, and {n} with another"
                       if open_ else f"waiting for {n} to be tested with another node")
            verdicts[n] = PeerVerdict(verdict=PeerVerdictValue.SUSPECT,
                                      reason=f"failed with {_names(failed_with)}; {why}", **common)
    return verdicts


# ---------------------------------------------------------------------------- planning
NEVER = "never peer-tested"
STALE = "peer test stale"
TRIANGULATE = "suspect"
RETEST = "blamed, retest"
_URGENCY = {TRIANGULATE: 0, NEVER: 1, STALE: 2, RETEST: 3}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def why_due(verdict: PeerVerdict | None, now: dt.datetime, settings: Settings) -> str | None:
    """Why a node's peer test is due now (None: it is not): never run, a suspect (at once), blamed and
    past ``failed_retest_hours`` (0: the cadence), or older than ``peer_cadence_days``."""
    if verdict is None:
        return NEVER
    if verdict.verdict == PeerVerdictValue.SUSPECT:
        return TRIANGULATE
    age = now - verdict.finished_at
    if verdict.verdict == PeerVerdictValue.FAIL:
        retest = dt.timedelta(hours=settings.failed_retest_hours) or dt.timedelta(days=settings.peer_cadence_days)
        return RETEST if age >= retest else None
    return STALE if age >= dt.timedelta(days=settings.peer_cadence_days) else None


def _leaf_text(a: PeerCandidate, b: PeerCandidate) -> str:
    leaf = a.leaf(b)
    if leaf is None:
        return ""
    label, mine, theirs = leaf
    return f"; across {label.rsplit('/', 1)[-1]} {mine} / {theirs}" if mine != theirs else f"; same {label} {mine}"


def match_peers(
    free_nodes: Iterable[PeerCandidate],
    latest_peer_results: Iterable[PeerResult],
    settings: Settings,
    now: dt.datetime,
) -> list[PeerMatch]:
    """The peer tests of this run, most urgent first: suspects (with a node they were not tested with,
    a known-good one first), then never-tested nodes, then the stalest, then blamed nodes due a retest.

    ``free_nodes``: the free GPU nodes (``PeerCandidate.of`` from their labels); ``latest_peer_results``:
    the recent peer-test rows (what ``triangulate`` judges by). Nodes are paired within their GPU model
    (nodes without one never), preferably under different leaves (``peer_topology_labels``), a due node
    with another due one before a fresh one; a node is in at most one test; at most
    ``peer_max_per_run`` tests; none when ``peer_tests`` is off. Long: the greedy matching is one loop
    over a model's nodes with its ranking beside it."""
    if now.tzinfo is None:
        raise ValueError("now must be time-zone aware")
    if not settings.peer_tests:
        return []
    results = list(latest_peer_results)
    verdicts = triangulate(results)
    tested: dict[str, set[str]] = {}
    for r in results:
        tested.setdefault(r.node, set()).add(r.peer)
        tested.setdefault(r.peer, set()).add(r.node)
    by_model: dict[str, list[PeerCandidate]] = {}
    for c in {c.name: c for c in free_nodes}.values():
        if c.gpu_model:
            by_model.setdefault(c.gpu_model, []).append(c)
    # partners: known-good first, blamed last
    rank = {PeerVerdictValue.PASS: 0, None: 1, PeerVerdictValue.SUSPECT: 2, PeerVerdictValue.FAIL: 3}
    planned: list[tuple[tuple, PeerMatch]] = []
    for model, nodes in sorted(by_model.items()):
        due = {c.name: why for c in nodes if (why := why_due(verdicts.get(c.name), now, settings))}

        def urgency(c: PeerCandidate) -> tuple:
            v = verdicts.get(c.name)
            when = (v.failed_at if v and v.suspect else v.finished_at) if v else _EPOCH
            return _URGENCY[due[c.name]], when or _EPOCH, hostlist.numeric_sort_key(c.name), c.name

        used: set[str] = set()
        for first in sorted((c for c in nodes if c.name in due), key=urgency):
            if first.name in used:
                continue
            suspect = due[first.name] == TRIANGULATE
            options = []
            for c in nodes:
                if c.name in used or c.name == first.name:
                    continue
                v = verdicts.get(c.name)
                if suspect and (c.name in tested.get(first.name, ()) or (v and v.verdict == PeerVerdictValue.FAIL)):
                    continue  # a suspect learns only from a node it has not failed or passed with
                if not suspect and c.name not in due and not (v and v.verdict == PeerVerdictValue.PASS):
                    continue  # a fresh node serves only as a known-good partner
                if not suspect and v and v.suspect and first.name in tested.get(c.name, ()):
                    continue  # nothing new for that suspect
                leaf = first.leaf(c)
                blamed = bool(v and v.verdict == PeerVerdictValue.FAIL)
                options.append(((rank[v.verdict if v else None] if suspect else
                                 2 if blamed else 0 if c.name in due else 1,
                                 0 if leaf is None or leaf[1] != leaf[2] else 1,
                                 1 if c.name in tested.get(first.name, ()) else 0,
                                 hostlist.numeric_sort_key(c.name), c.name), c))
            if not options:
                continue  # the odd node out (or a suspect with no untested partner) waits
            partner = min(options, key=lambda o: o[0])[1]
            used |= {first.name, partner.name}
            v = verdicts.get(first.name)
            why = (f"{first.name} suspect (failed with {_names(v.failed_with)}), triangulating with "
                   f"{partner.name} ({verdicts[partner.name].verdict if partner.name in verdicts else 'never tested'})"
                   if suspect and v else
                   f"{first.name}: {due[first.name]}; {partner.name}: {due.get(partner.name, 'known-good partner')}")
            planned.append((urgency(first), PeerMatch(server=first.name, client=partner.name, model=model,
                                                      reason=why + _leaf_text(first, partner))))
    planned.sort(key=lambda item: item[0])
    return [m for _, m in planned[:settings.peer_max_per_run]]
