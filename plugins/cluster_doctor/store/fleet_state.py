"""The fleet's latest state held in the process and kept current: each read fetches only the pairs and
inventory nodes written since the previous read (migration 0008's change stamps) and reassesses only
the nodes those rows or the passing of time changed; ``domain.coverage`` stays the one definition.

Why: at 5,000 nodes a scrape or a page that reads and assesses every pair (20,000 rows) spends most of
its time decoding rows and tallying them in Python, while between two scrapes a few pairs change. The
copy is exact, not a cache with a lifetime: a sync runs in the reader's own REPEATABLE READ snapshot,
fetches every pair and node row a previous snapshot could not have seen (``changed_xid`` at or past
that snapshot's xmin), notices deleted rows by a count of the statements that deleted any (then it
reads everything again), and reassesses a node when one of its rows changed, its inventory row did, it joined or left the
counted fleet, or the freshest of its fresh pairs just went stale (a heap of those moments).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import heapq
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from cluster_doctor.domain import coverage, suites
from cluster_doctor.domain.numbers import finite, skip
from cluster_doctor.store import inventory

# The GPU model of a pair: its latest executed attempt's, else (never executed: timeouts only) the
# model discovery recorded with its last attempt, so never-validated nodes still filter by model.
MODEL_EXPR = """coalesce(l.gpu_model, (SELECT h.gpu_model FROM validation_history h
                                        WHERE h.node_name = l.node_name AND h.test_name = l.test_name
                                          AND h.finished_at = l.last_attempt_at AND h.gpu_model IS NOT NULL
                                        ORDER BY h.id DESC LIMIT 1))"""
# Every pair's latest state (the columns of validation_latest it needs); times as Unix seconds (a float
# decodes ~10x faster than a timestamptz and a time past year 9999 cannot fail the query). {figures}
# adds one text column per key metric; {where} limits it to what changed.
PAIRS_SQL = """
SELECT l.node_name, l.test_name, l.status, extract(epoch FROM l.finished_at)::float8,
       extract(epoch FROM l.last_attempt_at)::float8, {model}, extract(epoch FROM l.status_since)::float8,
       l.action, l.incomplete, l.checks_not_run, {codes}{figures}
  FROM validation_pair_state l {where}
"""
# The codes of the checks that failed in a failing pair's latest executed result (sorted, unique).
CODES_EXPR = """CASE WHEN l.status IN ('fail', 'error') THEN ARRAY(
    SELECT DISTINCT c->>'code' FROM json_array_elements(CASE WHEN json_typeof(l.checks) = 'array' THEN l.checks END) c
     WHERE json_typeof(c) = 'object' AND c->>'status' IN ('fail', 'error') AND c->>'code' IS NOT NULL
     ORDER BY 1) END"""
INVENTORY_SQL = """
SELECT node_name, extract(epoch FROM first_seen_at)::float8, extract(epoch FROM last_seen_at)::float8, gpu_model,
       gpu_count, eligibility, eligibility_detail, extract(epoch FROM eligibility_since)::float8,
       extract(epoch FROM gone_at)::float8
  FROM gpu_node_inventory {where}
"""
CHANGED = "WHERE changed_xid >= %(horizon)s::text::xid8"
# One row: the snapshot's xmin (every transaction it could not see has an id at least this), the
# database's oid (a dropped and re-created database of the same name is another one), and how many
# statements have deleted pairs or nodes (a deletion is read as: read everything again).
VERSION_SQL = """
SELECT pg_snapshot_xmin(pg_current_snapshot())::text, (SELECT oid FROM pg_database WHERE datname = current_database()),
       (SELECT array_agg(statements ORDER BY table_name) FROM cluster_doctor_deletions)
"""
UNCOUNTED_SQL = f"SELECT node_name FROM {inventory.TABLE} WHERE NOT ({inventory.COUNTED_WHERE})"
MAX_FLEETS = 4  # copies kept per process (one per database and settings; tests make many)

# Unix seconds of 0001-01-01 and 9999-12-31: the times Python (and so every page) can show.
MIN_TS, MAX_TS = -62135596800.0, 253402300799.0
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def ts(seconds: float | None) -> float | None:
    """A stored time as Unix seconds, or None (counted) when it is outside what can be shown."""
    if seconds is None or MIN_TS <= seconds <= MAX_TS:
        return seconds
    skip("timestamp")
    return None


def when(seconds: float | None) -> dt.datetime | None:
    """Unix seconds as an aware UTC datetime; None (counted) outside what Python can hold."""
    seconds = ts(seconds)
    return None if seconds is None else _EPOCH + dt.timedelta(seconds=seconds)


@dataclasses.dataclass(frozen=True)
class FleetKey:
    """What a copy depends on besides the data: the database and the settings that shape the assessment."""

    dsn: str
    tests: tuple[str, ...]
    staleness: dt.timedelta
    gone_grace: dt.timedelta


@dataclasses.dataclass(frozen=True)
class _Assessed:
    """One node's assessment: its coverage, its pairs (enabled tests, in order) and the moment its first
    fresh pair goes stale (Unix seconds; inf when none is fresh)."""

    coverage: coverage.NodeCoverage
    pairs: list[dict[str, Any]]
    stale_at: float


class LiveAssessment(coverage.Assessment):
    """A coverage.Assessment over the kept pairs whose ages only are made new per moment, and only when
    asked for: ``pairs`` copies every pair with its age at ``now`` on first use; ``summary()`` and
    ``pairs_and_ages()`` (the scrape's path) need no copy, so a read of 20,000 pairs allocates no dict
    per pair (which would also wake Python's garbage collector over everything kept)."""

    def __init__(self, *, tests: list[str], now: dt.datetime, staleness: dt.timedelta,
                 nodes: dict[str, coverage.NodeCoverage], kept: list[dict[str, Any]]):
        self._kept = kept  # every pair's state, freshness and state current; age_s as of its node's assessment
        self._summary: dict[str, Any] | None = None
        super().__init__(tests=tests, now=now, staleness=staleness, nodes=nodes, pairs=None)

    @property
    def pairs(self) -> list[dict[str, Any]]:
        if self._pairs is None:
            ages = self.ages()
            self._pairs = [p if a is None else {**p, "age_s": a} for p, a in zip(self._kept, ages, strict=True)]
        return self._pairs

    @pairs.setter
    def pairs(self, value: list[dict[str, Any]] | None) -> None:
        self._pairs = value

    def ages(self) -> list[float | None]:
        """Every pair's age at ``now``, in pair order (None: never executed, or its time unreadable)."""
        now_ts = self.now.timestamp()
        return [None if p["age_s"] is None else max(0.0, now_ts - p["finished_ts"]) for p in self._kept]

    def pairs_and_ages(self) -> tuple[list[dict[str, Any]], list[float | None]]:
        """The pairs as kept (every field but age_s current) and their ages at ``now``."""
        return self._kept, self.ages()

    def pairs_as_kept(self) -> list[dict[str, Any]]:
        """The pairs without a copy: every field current but age_s (for readers that do not read it)."""
        return self._kept

    def _nodes_changed(self) -> None:
        self._summary = None

    def summary(self) -> dict[str, Any]:
        """Assessment.summary() of the kept pairs (computed once): their states and freshness are
        current; only the worst staleness moves with the clock: the oldest pair's age now."""
        if self._summary is None:
            summary = coverage.Assessment(self.tests, self.now, self.staleness, self.nodes, self._kept).summary()
            if summary["worst_staleness_s"] not in (None, math.inf):  # every pair executed, at a readable time
                summary["worst_staleness_s"] = max(0.0, self.now.timestamp() - min(p["finished_ts"] for p in self._kept))
            self._summary = summary
        return dict(self._summary)


def figure_keys(tests: Iterable[str]) -> list[str]:
    """The key metrics of the enabled suites (catalog order, unique)."""
    keys: dict[str, None] = {}
    for test in tests:
        suite = suites.CATALOG.get(test)
        keys.update(dict.fromkeys(suite.key_metrics if suite else ()))
    return list(keys)


class LiveFleet:
    """The copy of one database's fleet for one set of settings; sync() under its lock."""

    def __init__(self, key: FleetKey, natural_key: Any):
        self.key = key
        self.tests = list(key.tests)
        self.natural_key = natural_key
        self.keys = figure_keys(self.tests)
        self.wanted = {t: set(suites.CATALOG[t].key_metrics) if t in suites.CATALOG else set() for t in self.tests}
        self.lock = threading.Lock()
        self.version: tuple | None = None  # the database's oid, its deletion counts
        self.horizon: str | None = None
        self.rows: dict[str, dict[str, dict[str, Any]]] = {}  # node -> test -> row (every test recorded)
        self.inventory: dict[str, inventory.InventoryNode] = {}
        self.counted: set[str] = set()
        self.uncounted: set[str] = set()
        self.order: list[str] = []
        self.assessed: dict[str, _Assessed] = {}
        self.nodes: dict[str, coverage.NodeCoverage] = {}  # every counted node's coverage, in fleet order
        self.flat: list[dict[str, Any]] = []  # their pairs, in the same order (ages as assessed)
        self.slot: dict[str, int] = {}  # node -> its place in that order
        self.stale_heap: list[tuple[float, str]] = []
        self.assessed_ts: float | None = None
        self.built: LiveAssessment | None = None
        self.built_ts: float | None = None
        self.fetched_pairs = 0  # rows read by the last sync (tests and benchmarks look)

    # ------------------------------------------------------------------ reading what changed
    def _pairs_sql(self, where: str) -> tuple[str, dict[str, Any]]:
        figures = "".join(f", l.metrics->>%(k{i})s" for i in range(len(self.keys)))
        params: dict[str, Any] = {f"k{i}": k for i, k in enumerate(self.keys)}
        return PAIRS_SQL.format(model=MODEL_EXPR, codes=CODES_EXPR, figures=figures, where=where), params

    def _row(self, raw: Sequence[Any]) -> dict[str, Any]:
        node, test, status, finished_ts, last_ts, model, since_ts, action, incomplete, not_run, codes, *texts = raw
        # range checks inline: this runs once per pair on a full read (20,000 at 5,000 nodes)
        if finished_ts is not None and not MIN_TS <= finished_ts <= MAX_TS:
            finished_ts = ts(finished_ts)
        if last_ts is not None and not MIN_TS <= last_ts <= MAX_TS:
            last_ts = ts(last_ts)
        wanted = self.wanted.get(test, ())
        return {"node_name": node, "test_name": test, "status": status, "finished_ts": finished_ts,
                "last_attempt_at": last_ts, "gpu_model": model, "incomplete": incomplete, "since_ts": ts(since_ts),
                "action": action, "checks_not_run": not_run, "codes": tuple(codes or ()),
                "metrics": {k: v for k, text in zip(self.keys, texts, strict=True)
                            if k in wanted and text is not None and (v := finite(text)) is not None}}

    def _read_pairs(self, cur: Any, changed_only: bool) -> set[str]:
        sql, params = self._pairs_sql(CHANGED if changed_only else "")
        cur.execute(sql, {**params, "horizon": self.horizon})
        raw = cur.fetchall()
        self.fetched_pairs = len(raw)
        if not changed_only:
            self.rows = {}
        touched = set()
        for r in raw:
            self.rows.setdefault(r[0], {})[r[1]] = self._row(r)
            touched.add(r[0])
        return touched

    def _read_inventory(self, cur: Any, changed_only: bool) -> set[str]:
        """Read the inventory (what changed, or all of it); the nodes whose shown fields changed."""
        cur.execute(INVENTORY_SQL.format(where=CHANGED if changed_only else ""), {"horizon": self.horizon})
        read = {r[0]: inventory.InventoryNode(r[0], when(r[1]), when(r[2]), r[3], r[4], r[5], r[6], when(r[7]),
                                              when(r[8])) for r in cur.fetchall()}
        names = read.keys() if changed_only else read.keys() | self.inventory.keys()
        touched = {n for n in names if _shown(read.get(n)) != _shown(self.inventory.get(n))}
        if changed_only and read:
            self.inventory = {**self.inventory, **read}  # a new dict: a reader's counted() stays its snapshot's
        elif not changed_only:
            self.inventory = read
        return touched

    def _sync_rows(self, cur: Any) -> set[str] | None:
        """Bring the copy up to this snapshot; the nodes whose rows changed, or None: every node."""
        cur.execute(VERSION_SQL)
        xmin, oid, deletions = cur.fetchone()
        full = self.horizon is None or (oid, deletions) != self.version
        touched: set[str] = set()
        if full:
            self._read_pairs(cur, False)
            self._read_inventory(cur, False)
        else:
            touched = self._read_pairs(cur, True) | self._read_inventory(cur, True)
        self.version, self.horizon = (oid, deletions), xmin
        return None if full else touched

    def _sync_fleet(self, cur: Any, now: dt.datetime, touched: set[str] | None) -> set[str] | None:
        """The nodes counted now (inventory.COUNTED_WHERE, asked of the database: it decides). Returns
        the nodes that joined, or None when the counted fleet is unchanged."""
        cur.execute(UNCOUNTED_SQL, {"as_of": now, "grace": self.key.gone_grace})
        uncounted = {r[0] for r in cur.fetchall()}
        if touched is not None and uncounted == self.uncounted and all(n in self.counted for n in touched
                                                                         if n in self.inventory):
            return None  # no node joined or left
        self.uncounted = uncounted
        counted = {n for n in self.inventory if n not in uncounted}
        if counted == self.counted:
            return None
        joined = counted - self.counted
        self.order = sorted(counted, key=self.natural_key)
        for gone in self.assessed.keys() - counted:
            del self.assessed[gone]
        self.counted = counted
        return joined

    # ------------------------------------------------------------------ assessing
    def _due(self, now_ts: float) -> set[str]:
        """Nodes whose first fresh pair has gone stale by ``now_ts`` (stale heap entries skipped)."""
        due = set()
        heap = self.stale_heap
        while heap and heap[0][0] <= now_ts:
            at, name = heapq.heappop(heap)
            held = self.assessed.get(name)
            if held is not None and held.stale_at == at:
                due.add(name)
        return due

    def _assess(self, names: Iterable[str], now: dt.datetime) -> list[str]:
        """(Re)assess ``names`` (counted nodes) at ``now`` with domain.coverage, in one call; returns
        them in fleet order."""
        if not isinstance(names, list):
            wanted = set(names)
            names = [n for n in self.order if n in wanted]
        order = names
        if not order:
            return order
        rows = [row for n in order for row in self.rows.get(n, {}).values()]
        result = coverage.assess(rows, tests=self.tests, now=now, staleness=self.key.staleness, nodes=order)
        width = len(self.tests)
        staleness_s = self.key.staleness.total_seconds()
        fresh_after = now.timestamp() - staleness_s
        for i, name in enumerate(order):
            node = result.nodes[name]
            inv = self.inventory[name]
            node.eligibility, node.eligibility_detail = inv.eligibility, inv.eligibility_detail
            node.eligibility_since, node.gone_at = inv.eligibility_since, inv.gone_at
            node.gpu_model = node.gpu_model or inv.gpu_model  # never attempted: the model discovery saw
            pairs = result.pairs[i * width:(i + 1) * width]
            fresh = [p["finished_ts"] for p in pairs if p["fresh"] and p["finished_ts"] >= fresh_after]
            stale_at = min(fresh) + staleness_s if fresh else math.inf
            self.assessed[name] = _Assessed(node, pairs, stale_at)
            if stale_at != math.inf:
                heapq.heappush(self.stale_heap, (stale_at, name))
        return order

    def _lay_out(self, changed: list[str] | None) -> None:
        """Keep every node's coverage and pairs in fleet order: all of them (``changed`` None: the fleet
        changed), or the parts of the ``changed`` nodes."""
        width = len(self.tests)
        if changed is None:
            self.nodes = {n: self.assessed[n].coverage for n in self.order}
            self.flat = [p for n in self.order for p in self.assessed[n].pairs]
            self.slot = {n: i for i, n in enumerate(self.order)}
            return
        for name in changed:
            held = self.assessed[name]
            self.nodes[name] = held.coverage  # same key: keeps its place
            i = self.slot[name]
            self.flat[i * width:(i + 1) * width] = held.pairs

    def sync(self, cur: Any, now: dt.datetime) -> LiveAssessment:
        """The fleet's assessment at ``now`` as of the cursor's snapshot (the caller holds the lock)."""
        touched = self._sync_rows(cur)
        joined = self._sync_fleet(cur, now, touched)
        now_ts = now.timestamp()
        if touched is None or self.assessed_ts is None or now_ts < self.assessed_ts:
            self.assessed, self.stale_heap = {}, []  # everything (or time went back: pairs may be fresh again)
            self._assess(list(self.order), now)
            self._lay_out(None)
            self.built = None
        else:
            dirty = (touched & self.counted) | (joined or set()) | self._due(now_ts)
            if dirty or joined is not None:
                changed = self._assess(dirty, now)
                self._lay_out(None if joined is not None else changed)
                self.built = None
        if len(self.stale_heap) > 4 * len(self.assessed) + 64:  # superseded entries pile up: compact
            self.stale_heap = [(a.stale_at, n) for n, a in self.assessed.items() if a.stale_at != math.inf]
            heapq.heapify(self.stale_heap)
        self.assessed_ts = now_ts
        return self._build(now)

    def _build(self, now: dt.datetime) -> LiveAssessment:
        """The Assessment at ``now`` (the previous one while nothing changed, not even the clock)."""
        now_ts = now.timestamp()
        if self.built is None or self.built_ts != now_ts:
            self.built = LiveAssessment(tests=list(self.tests), now=now, staleness=self.key.staleness,
                                        nodes=dict(self.nodes), kept=list(self.flat))
            self.built_ts = now_ts
        return self.built


def _shown(node: inventory.InventoryNode | None) -> tuple | None:
    """What of an inventory row the assessment shows (not when it was last seen: every run moves it)."""
    if node is None:
        return None
    return node.gpu_model, node.eligibility, node.eligibility_detail, node.eligibility_since, node.gone_at


_FLEETS: collections.OrderedDict[FleetKey, LiveFleet] = collections.OrderedDict()
_FLEETS_LOCK = threading.Lock()


def live(key: FleetKey, natural_key: Any) -> LiveFleet:
    """The process's copy for ``key`` (the newest MAX_FLEETS kept)."""
    with _FLEETS_LOCK:
        fleet = _FLEETS.get(key)
        if fleet is None:
            fleet = _FLEETS[key] = LiveFleet(key, natural_key)
            while len(_FLEETS) > MAX_FLEETS:
                _FLEETS.popitem(last=False)
        _FLEETS.move_to_end(key)
        return fleet


def assessment(conn: Any, key: FleetKey, now: dt.datetime,
               natural_key: Any) -> tuple[LiveAssessment, Callable[[], dict[str, inventory.InventoryNode]]]:
    """The fleet's assessment at ``now`` in ``conn``'s snapshot, and a function giving the counted
    inventory of that snapshot (built when asked: few callers want it)."""
    fleet = live(key, natural_key)
    with fleet.lock, conn.cursor() as cur:
        try:
            assessed = fleet.sync(cur, now)
        except BaseException:
            fleet.horizon = None  # half-applied: read everything next time
            fleet.built = None
            raise
        nodes, order = fleet.inventory, fleet.order  # both replaced, never changed, by later syncs
    return assessed, lambda: {n: nodes[n] for n in order}


def forget() -> None:
    """Drop every copy (the next read is a full one): benchmarks measure a cold read this way."""
    with _FLEETS_LOCK:
        _FLEETS.clear()
