"""What one task of continuous_validation hands the next through XCom: typed, versioned payloads.

Each payload has one way out, ``to_xcom()`` (plain JSON), and one way in, ``from_xcom()``. Its
``version`` names the shape that wrote it: a run started before an upgrade hands the tasks the new
code runs (record, summarize) payloads of the old shape, so ``from_xcom`` upgrades what it reads and
refuses, in one line, a shape newer than it knows. Version 0 is the version-less dicts (and bare
lists) written before payloads were typed; version 1 has the same keys plus ``version``.

The chain: ``Discovered`` (discover) → ``Latest`` (load_latest) → ``Plan`` (prioritize) →
``Bundle`` per node (ship_suites → the mapped validate task group, ``RunConfig`` inside; ``Validation``
is one step's arguments) →
``Recorded`` (record) → ``RunSummary`` (summarize → verdict); ``OrphanReport`` (reap_orphans);
``PeerTests`` (peers.plan → the mapped ``PeerTest`` per peer test).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, ClassVar, NamedTuple, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
)

from cluster_doctor.domain.attempts import Attempt, parse_timestamp
from cluster_doctor.domain.config import Settings, describe_errors
from cluster_doctor.domain.nodes import compress, expand, natural
from cluster_doctor.domain.peers import PeerMatch

CURRENT = 1


class InvalidPayload(ValueError):
    """An XCom value that is not the payload its reader expects; the message names the field."""


# ---------------------------------------------------------------------------- field types
def _timestamp(value: Any) -> dt.datetime:
    return parse_timestamp(value, "timestamp")  # aware UTC, or a ValueError naming what is wrong


def _attempt(value: Any) -> Attempt:
    return value if isinstance(value, Attempt) else Attempt.from_dict(value)


def _known_settings(value: Any) -> Any:
    # A setting an upgrade removed is dropped (one it added takes its default): a run started
    # before the upgrade still plans, records and summarizes with the settings it began with.
    if isinstance(value, Mapping):
        return {k: v for k, v in value.items() if k in Settings.model_fields}
    return value


# ISO-8601 with its offset on the wire (as before payloads were typed), an aware UTC datetime in code
Timestamp = Annotated[dt.datetime, PlainValidator(_timestamp), PlainSerializer(dt.datetime.isoformat, when_used="json")]
AttemptRecord = Annotated[Attempt, PlainValidator(_attempt), PlainSerializer(Attempt.to_dict, when_used="json")]
RunSettings = Annotated[Settings, BeforeValidator(_known_settings)]


class Part(BaseModel):
    """A piece of a payload: immutable, no unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Payload(Part):
    """A versioned XCom value: ``to_xcom()`` out, ``from_xcom()`` in."""

    VERSION: ClassVar[int] = CURRENT
    version: int = CURRENT

    def to_xcom(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_xcom(cls, data: Any) -> Self:
        if isinstance(data, cls):
            return data
        version = data.get("version", 0) if isinstance(data, Mapping) else 0
        if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= cls.VERSION:
            raise InvalidPayload(f"{cls.__name__}: version {version!r} is not one this Cluster Doctor reads "
                                 f"(0 to {cls.VERSION}): was it written by a newer release?")
        data = cls._upgrade(data, version)
        if not isinstance(data, Mapping):
            raise InvalidPayload(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
        try:
            return cls.model_validate({**data, "version": cls.VERSION})
        except ValidationError as exc:
            raise InvalidPayload(f"{cls.__name__}: {describe_errors(exc, noun='field')}") from None

    @classmethod
    def _upgrade(cls, data: Any, version: int) -> Any:
        """``data`` of ``version`` in this version's shape. Version 0 had the same keys."""
        return data


# ---------------------------------------------------------------------------- discover
class Params(Part):
    """The run's params as ``discover`` validated them (``planning.params.parse_params``)."""

    node_range: str = ""
    tests: list[str]
    stale_before: Timestamp | None = None
    max_pairs: int = Field(ge=0)
    dry_run: bool = False


class GpuNode(Part):
    name: str
    gpu_count: int
    gpu_model: str | None = None
    node_gpus: int | None = None  # the GPUs the node has (capacity / GFD label): what its suites expect


class IneligibleNode(Part):
    name: str
    reason: str
    detail: str = ""
    gpu_count: int = 0
    gpu_model: str | None = None


class ClaimCheck(Part):
    """One PVC the pods mount, as ``kube.volumes`` found it."""

    namespace: str
    name: str
    usable: bool
    detail: str
    certain: bool = True
    code: str | None = None


class Volumes(Part):
    claims: list[ClaimCheck] = Field(default_factory=list)
    blocked_tests: list[str] = Field(default_factory=list)
    problem: str | None = None
    codes: list[str] = Field(default_factory=list)


class NodeGroup(Part):
    """GPU nodes alike (same GPU count and model) as one hostlist expression (``gpu-[0001-0480]``):
    thousands of regularly named nodes take a few bytes of XCom."""

    nodes: str
    gpu_count: int = Field(ge=0)
    gpu_model: str | None = None
    node_gpus: int | None = None


def _grouped(nodes: Iterable[tuple]) -> list[NodeGroup]:
    """(name, GPU count, model[, the GPUs the node has]) per node, grouped by everything but the name."""
    by_kind: dict[tuple[int, str | None, int | None], list[str]] = {}
    for name, count, model, *has in nodes:
        by_kind.setdefault((count, model, has[0] if has else None), []).append(name)
    order = sorted(by_kind.items(), key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2] or 0))
    return [NodeGroup(nodes=compress(names), gpu_count=count, gpu_model=model, node_gpus=has)
            for (count, model, has), names in order]


class Discovered(Payload):
    """discover → every later task: the run's settings (read once), params, and the GPU nodes found —
    the free ones grouped as hostlists, the others as hostlists per reason. The per-node detail (why
    busy, since when) is in the inventory (``store.inventory``), written at ``inventory_at``; the
    payload stays a few KB at 5,000 nodes. Version 2 replaced the lists ``free`` and ``ineligible``
    (one object per node) with ``free_groups`` and ``not_eligible`` (read back as those lists)."""

    VERSION: ClassVar[int] = 2
    version: int = 2
    settings: RunSettings
    params: Params
    started_at: Timestamp
    free_groups: list[NodeGroup] = Field(default_factory=list)
    not_eligible: dict[str, str] = Field(default_factory=dict)  # reason -> hostlist
    inventory_at: Timestamp | None = None  # None: the inventory could not be written this run
    api_calls: int = 0
    nodes_seen: int = 0
    pods_seen: int = 0
    decode_seconds: float = 0.0
    read_mode: str = "watch-cache"
    volumes: Volumes = Field(default_factory=Volumes)
    # deployment problems that do not stop the run (e.g. a per-host spool under a remote executor):
    # the run summary and the verdict repeat them
    warnings: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, *, free: Iterable[tuple], ineligible: Iterable[tuple[str, str]], **fields: Any) -> Discovered:
        """From per-node facts: ``free`` (name, GPU count, model[, the GPUs the node has]),
        ``ineligible`` (name, reason)."""
        by_reason: dict[str, list[str]] = {}
        for name, reason in ineligible:
            by_reason.setdefault(reason, []).append(name)
        return cls(free_groups=_grouped(free), not_eligible={r: compress(n) for r, n in sorted(by_reason.items())},
                   **fields)

    @property
    def free(self) -> list[GpuNode]:
        """The free GPU nodes, in natural order."""
        nodes = [GpuNode(name=name, gpu_count=g.gpu_count, gpu_model=g.gpu_model, node_gpus=g.node_gpus)
                 for g in self.free_groups for name in expand(g.nodes)]
        return sorted(nodes, key=lambda n: natural(n.name))

    @property
    def ineligible(self) -> list[IneligibleNode]:
        """The other GPU nodes with their reason, in natural order (the detail is the inventory's)."""
        nodes = [IneligibleNode(name=name, reason=reason)
                 for reason, names in self.not_eligible.items() for name in expand(names)]
        return sorted(nodes, key=lambda n: natural(n.name))

    @property
    def gpu_nodes(self) -> list[str]:
        """Every GPU node of the range, free or not."""
        return [n.name for n in self.free] + [n.name for n in self.ineligible]

    @classmethod
    def _upgrade(cls, data: Any, version: int) -> Any:
        """Versions 0 and 1 listed every node as an object (``free``, ``ineligible``)."""
        if version >= 2 or not isinstance(data, Mapping):
            return data
        data = dict(data)
        free, ineligible = data.pop("free", None) or [], data.pop("ineligible", None) or []
        if not all(isinstance(n, Mapping) for n in [*free, *ineligible]):
            raise InvalidPayload("Discovered: free and ineligible must list objects")
        try:
            data["free_groups"] = [g.model_dump() for g in _grouped(
                (n["name"], int(n.get("gpu_count") or 0), n.get("gpu_model")) for n in free)]
            by_reason: dict[str, list[str]] = {}
            for n in ineligible:
                by_reason.setdefault(str(n["reason"]), []).append(n["name"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidPayload(f"Discovered: a node of version {version} lacks a name or count ({exc})") from None
        data["not_eligible"] = {r: compress(names) for r, names in sorted(by_reason.items())}
        return data


# ---------------------------------------------------------------------------- load_latest
class PairRow(NamedTuple):
    """The latest state of one (node, test) pair; a JSON array on the wire (thousands per run)."""

    node_name: str
    test_name: str
    status: str | None
    finished_at: Timestamp | None
    last_attempt_at: Timestamp | None
    last_attempt_status: str | None


class Latest(Payload):
    """load_latest → prioritize."""

    rows: list[PairRow] = Field(default_factory=list)

    @classmethod
    def _upgrade(cls, data: Any, version: int) -> Any:
        return {"rows": data} if version == 0 and isinstance(data, list) else data  # was the bare list


# ---------------------------------------------------------------------------- prioritize
class PlannedPair(Part):
    node_name: str
    test_name: str
    why: str
    last_status: str | None = None
    last_finished_at: Timestamp | None = None
    last_attempt_at: Timestamp | None = None
    last_attempt_status: str | None = None
    gpu_count: int
    gpu_model: str | None = None
    node_gpus: int | None = None
    probe_seconds: float | None = None  # gpu_health: its speed probe runs this long (None: not this run)


class HeldPair(Part):
    """A pair deferred because another live run holds its node (``store.claims``)."""

    node_name: str
    test_name: str
    dag_id: str
    run_id: str
    held_for: str
    expires_at: Timestamp


class Plan(Payload):
    """prioritize → ship_suites, record, summarize. ``pairs``: node by node (a node's bundle together, in
    the order its steps run). Version 2 added ``reserved`` and ``why_empty`` (version 1 reads as none)."""

    VERSION: ClassVar[int] = 2
    version: int = 2
    planned_at: Timestamp
    dry_run: bool = False
    pairs: list[PlannedPair] = Field(default_factory=list)
    held_by_other_runs: list[HeldPair] = Field(default_factory=list)
    reserved: list[str] = Field(default_factory=list)  # planned nodes that carry our reservation taint
    why_empty: str | None = None  # one line when nothing was planned: all fresh, all claimed, none free

    @property
    def creates_pods(self) -> bool:
        return not self.dry_run and bool(self.pairs)

    def nodes(self) -> list[str]:
        """The planned nodes, in plan order."""
        return list(dict.fromkeys(p.node_name for p in self.pairs))


# ---------------------------------------------------------------------------- ship_suites → validate
class RunConfig(Payload):
    """What every validation pod of the run shares: the settings and the shipped suite code."""

    settings: RunSettings
    configmap: str
    suite_version: str
    suite_files: list[str] | None = None


class Validation(Part):
    """One mapped validate task's kwargs (``expand_kwargs``): each key an argument of
    ``NodeValidationPodOperator``, ``node_name`` and ``test_name`` also its map_index_template. No
    version of its own: the operator takes no such argument; its ``run_config`` carries one."""

    node_name: str
    test_name: str
    gpu_count: int = Field(ge=0)
    gpu_model: str | None = None
    node_gpus: int | None = Field(default=None, ge=0)  # the GPUs the node has (the suites' bar)
    planned_at: Timestamp
    why: str | None = None
    run_config: RunConfig
    probe_seconds: float | None = None  # gpu_health's speed probe, when this run probes the node

    def to_xcom(self) -> dict[str, Any]:
        # the operator's keyword arguments: node_gpus and probe_seconds only when set (the kwargs of earlier
        # releases)
        unset = {k for k in ("node_gpus", "probe_seconds") if getattr(self, k) is None}
        return self.model_dump(mode="json", exclude=unset or None)

    @classmethod
    def from_xcom(cls, data: Mapping[str, Any]) -> Validation:
        if isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise InvalidPayload(f"Validation: expected a JSON object, got {type(data).__name__}")
        run_config = RunConfig.from_xcom(data.get("run_config"))
        try:
            return cls.model_validate({**data, "run_config": run_config})
        except ValidationError as exc:
            raise InvalidPayload(f"Validation: {describe_errors(exc, noun='field')}") from None


class BundleStep(Part):
    test_name: str
    why: str | None = None
    probe_seconds: float | None = None  # gpu_health's speed probe, when this run probes the node


class Bundle(Payload):
    """ship_suites → one instance of the mapped ``validate`` task group: a node's suites for this run, run
    one after another (``steps``, health first), each by its own validate step; ``reserved``: the node
    carries our reservation taint, which the group's last task removes."""

    node_name: str
    gpu_count: int = Field(ge=0)
    gpu_model: str | None = None
    node_gpus: int | None = None
    planned_at: Timestamp
    reserved: bool = False
    steps: list[BundleStep] = Field(min_length=1)
    run_config: RunConfig

    @property
    def tests(self) -> list[str]:
        return [s.test_name for s in self.steps]

    def step(self, test: str) -> BundleStep | None:
        return next((s for s in self.steps if s.test_name == test), None)

    def validation(self, test: str) -> Validation:
        """The step's operator arguments, as a single pair's."""
        step = self.step(test)
        return Validation(node_name=self.node_name, test_name=test, gpu_count=self.gpu_count,
                          gpu_model=self.gpu_model, node_gpus=self.node_gpus, planned_at=self.planned_at,
                          why=step.why if step else None, run_config=self.run_config,
                          probe_seconds=step.probe_seconds if step else None)


# ---------------------------------------------------------------------------- peers.plan → peers.test
class PeerTest(Payload):
    """peers.plan → one mapped ``peers.test`` instance: a match, its nodes' GPUs, and the run's shipped
    suite code. Version 0: the same keys without ``version`` (written before it was versioned)."""

    match: PeerMatch
    # node -> (gpu_count, gpu_model[, the GPUs the node has])
    gpus: dict[str, tuple[int, str | None] | tuple[int, str | None, int | None]]
    planned_at: Timestamp
    run_config: RunConfig
    label: str = ""  # the grid's label: "server ↔ client"


class PeerTests(Part):
    """What peers.plan hands on: the tests to run (possibly none) and why none, for the log and the
    record. On the wire a list, one ``PeerTest`` per item (what ``peers.test`` expands over); each item
    carries its own version."""

    tests: list[PeerTest] = Field(default_factory=list)
    why_empty: str | None = None

    def nodes(self) -> list[str]:
        return [n for t in self.tests for n in t.match.nodes]

    def to_xcom(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return [t.to_xcom() for t in self.tests]

    @classmethod
    def from_xcom(cls, data: Any) -> PeerTests:
        if data is not None and not isinstance(data, list):
            raise InvalidPayload(f"PeerTests: expected a list of peer tests, got {type(data).__name__}")
        return cls(tests=[PeerTest.from_xcom(item) for item in data or []])


# ---------------------------------------------------------------------------- record
class Recorded(Payload):
    """record → summarize (and the opt-in quarantine): every attempt of the run, as stored."""

    attempts: list[AttemptRecord] = Field(default_factory=list)

    @classmethod
    def _upgrade(cls, data: Any, version: int) -> Any:
        return {"attempts": data} if version == 0 and isinstance(data, list) else data  # was the bare list


# ---------------------------------------------------------------------------- summarize → verdict
class AttemptLine(Part):
    node_name: str
    test_name: str
    status: str | None = None
    reason: str | None = None
    peer: str | None = None  # a peer test's other node


class DeferredPair(Part):
    node_name: str
    test_name: str
    run_id: str | None = None


class Blocked(Part):
    """Tests none of whose pods were created: a volume they mount is unusable."""

    tests: list[str]
    reason: str | None = None
    codes: list[str] = Field(default_factory=list)


class Coverage(Part):
    gpu_nodes: int = 0
    covered_nodes: int = 0
    coverage: float | None = None
    never_validated: list[str] = Field(default_factory=list)
    failing_nodes: list[str] = Field(default_factory=list)
    pair_coverage: float | None = None


class SpoolState(Part):
    """The attempt spool when the run was summarized: attempts the results database has not taken."""

    location: str
    waiting: int = 0
    rejected: int = 0
    oldest_at: Timestamp | None = None
    error: str | None = None
    line: str | None = None  # the one-line description, when something waits or is wrong


class RunSummary(Payload):
    """summarize → verdict; also the run's summary in the CTRF report and ``tools/dag_runner``. Version 2
    added ``why_empty`` (the plan's), ``waited`` (what the run waited for before it started) and
    ``reservation_breaker`` (why no node was reserved)."""

    VERSION: ClassVar[int] = 2
    version: int = 2
    run_started_at: Timestamp | None = None
    params: Params | None = None
    dry_run: bool = False
    gpu_nodes: int = 0
    free_nodes: int = 0
    planned: int = 0
    deferred: list[DeferredPair] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)
    attempts: list[AttemptLine] = Field(default_factory=list)
    newly_failing: list[AttemptLine] = Field(default_factory=list)
    not_eligible: dict[str, list[str]] = Field(default_factory=dict)
    not_eligible_detail: list[IneligibleNode] = Field(default_factory=list)
    blocked: Blocked | None = None
    coverage: Coverage | None = None
    ctrf_path: str | None = None
    warnings: list[str] = Field(default_factory=list)
    spool: SpoolState | None = None
    why_empty: str | None = None
    waited: str | None = None
    reservation_breaker: str | None = None


# ---------------------------------------------------------------------------- reap_orphans
class OrphanReport(Payload):
    """What reap_orphans did with the validation pods no live task owns. Filled in as it goes."""

    model_config = ConfigDict(frozen=False, extra="forbid", validate_assignment=True)

    examined: int = 0
    recorded: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    kept: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    freed_nodes: list[str] = Field(default_factory=list)

    def describe(self) -> str:
        head = (f"orphaned validation pods: {self.examined} examined, {len(self.recorded)} recorded, "
                f"{len(self.deleted)} deleted, {len(self.kept)} left alone, {len(self.errors)} error(s)")
        lines = [head]
        lines += [f"  recorded {r}" for r in self.recorded]
        lines += [f"  deleted {d}" for d in self.deleted]
        lines += [f"  left alone {k}" for k in self.kept]
        lines += [f"  ERROR {e}" for e in self.errors]
        if self.freed_nodes:
            lines.append(f"  nodes freed for the next run: {', '.join(self.freed_nodes)}")
        return "\n".join(lines)
