"""The inventory of GPU nodes: every node discovery has seen, with its current eligibility and why.

One row per node in ``gpu_node_inventory`` (migration 0005): first and last seen, GPU model and count,
``eligibility`` — ``free`` or discovery's reason (busy, cordoned, not ready, tainted, validation
running, reserved) with its detail and since when — and ``gone_at`` once a discovery of the whole
cluster no longer saw it. The discover task writes it every run (``record_discovery``); every view
of the fleet (the page, the daily report, ``cluster-doctor status``, the metrics, the run summary)
takes its nodes from here (``counted``), so they count the same nodes: those present, and those gone
for less than the grace period (setting ``gone_node_grace_hours``) — a node that left shows as gone,
then stops counting.

A node an attempt names is in the inventory too (a trigger adds it, eligibility ``unknown``, when it
is missing: attempts recorded by hand or before the inventory existed).

Parametrized SQL only; node names are validated before they reach a query.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cluster_doctor.domain.nodes import validate_node_name
from cluster_doctor.domain.signals import NodeChange

TABLE = "gpu_node_inventory"
FREE, UNKNOWN, GONE = "free", "unknown", "gone"
MAX_DETAIL = 1000  # a busy node's detail names one pod; a taint list stays far below this

# One statement for the whole discovery (5,000 rows at the Kubernetes limit). A row is only moved
# forward in time: a slow discovery that finishes after a newer one never overwrites what the newer
# one saw (a row only attempts made, eligibility unknown, takes any discovery). The eligibility's
# start moves only when the eligibility changes (or the node came back).
UPSERT_SQL = f"""
INSERT INTO {TABLE} AS inv (node_name, first_seen_at, last_seen_at, gpu_model, gpu_count, eligibility,
                            eligibility_detail, eligibility_since, gone_at, boot_id, quarantined)
SELECT n.node_name, %(seen_at)s, %(seen_at)s, n.gpu_model, n.gpu_count, n.eligibility, n.detail, %(seen_at)s, NULL,
       n.boot_id, n.quarantined
  FROM unnest(%(names)s::text[], %(models)s::text[], %(counts)s::int[], %(eligibility)s::text[],
              %(details)s::text[], %(boot_ids)s::text[], %(quarantined)s::boolean[])
       AS n(node_name, gpu_model, gpu_count, eligibility, detail, boot_id, quarantined)
ON CONFLICT (node_name) DO UPDATE SET
    first_seen_at = least(inv.first_seen_at, EXCLUDED.first_seen_at),
    last_seen_at = EXCLUDED.last_seen_at,
    gpu_model = coalesce(EXCLUDED.gpu_model, inv.gpu_model),
    gpu_count = EXCLUDED.gpu_count,
    eligibility_since = CASE WHEN inv.eligibility IS DISTINCT FROM EXCLUDED.eligibility
                               OR inv.gone_at IS NOT NULL THEN EXCLUDED.eligibility_since
                             ELSE inv.eligibility_since END,
    eligibility = EXCLUDED.eligibility,
    eligibility_detail = EXCLUDED.eligibility_detail,
    gone_at = NULL,
    boot_id = coalesce(EXCLUDED.boot_id, inv.boot_id),
    quarantined = EXCLUDED.quarantined
 WHERE inv.last_seen_at <= EXCLUDED.last_seen_at OR inv.eligibility = 'unknown'
RETURNING node_name, (xmax = 0) AS inserted, (SELECT i.gone_at FROM {TABLE} i
                                              WHERE i.node_name = inv.node_name) IS NOT NULL AS was_gone,
          -- what the row held before (the statement's snapshot): the signals compare with it
          (SELECT i.boot_id FROM {TABLE} i WHERE i.node_name = inv.node_name) AS boot_before,
          (SELECT i.eligibility FROM {TABLE} i WHERE i.node_name = inv.node_name) AS eligibility_before,
          (SELECT i.quarantined FROM {TABLE} i WHERE i.node_name = inv.node_name) AS quarantined_before,
          boot_id, eligibility, quarantined
"""
# Whether the inventory holds any node yet: on the first discovery every node is new, and none is a signal.
ANY_SQL = f"SELECT EXISTS (SELECT 1 FROM {TABLE} WHERE eligibility <> 'unknown')"
# After a discovery of the whole cluster: a node it did not see left (or is no longer a GPU node).
GONE_SQL = f"""
UPDATE {TABLE} SET gone_at = %(seen_at)s, eligibility_since = %(seen_at)s
 WHERE gone_at IS NULL AND last_seen_at < %(seen_at)s
RETURNING node_name
"""
# The nodes every view counts at a moment: seen by then, not gone longer than the grace period.
COUNTED_WHERE = "first_seen_at <= %(as_of)s AND (gone_at IS NULL OR gone_at > %(as_of)s - %(grace)s)"
COLUMNS = ("node_name", "first_seen_at", "last_seen_at", "gpu_model", "gpu_count", "eligibility",
           "eligibility_detail", "eligibility_since", "gone_at")


@dataclasses.dataclass(frozen=True)
class SeenNode:
    """A GPU node as one discovery saw it."""

    name: str
    gpu_count: int
    gpu_model: str | None
    eligibility: str  # FREE or discovery's reason
    detail: str = ""
    boot_id: str | None = None  # status.nodeInfo.bootID
    quarantined: bool = False  # carries Cluster Doctor's quarantine label


@dataclasses.dataclass(frozen=True)
class InventoryNode:
    """One row of the inventory."""

    node_name: str
    first_seen_at: dt.datetime
    last_seen_at: dt.datetime
    gpu_model: str | None
    gpu_count: int | None
    eligibility: str
    eligibility_detail: str | None
    eligibility_since: dt.datetime
    gone_at: dt.datetime | None

    @property
    def state(self) -> str:
        """GONE once it left, else its eligibility."""
        return GONE if self.gone_at is not None else self.eligibility

    @property
    def since(self) -> dt.datetime:
        return self.gone_at or self.eligibility_since

    def describe(self) -> str:
        """'busy since 2026-11-25 10:00 UTC: ml/trainer-0 requests 8 nvidia.com/gpu' and the like."""
        text = f"{self.state} since {self.since.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC"
        if self.gone_at is None and self.eligibility_detail:
            text += f": {self.eligibility_detail}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "state": self.state}


@dataclasses.dataclass(frozen=True)
class InventoryUpdate:
    """What one discovery changed."""

    seen: int
    new: list[str]
    returned: list[str]  # were gone, seen again
    gone: list[str]  # left the cluster with this discovery
    stale: int = 0  # rows a newer discovery had written already: left as they were
    # what changed since the previous discovery, for the signals: new nodes (not on the first
    # discovery), new boot ids, nodes uncordoned that carry or carried our quarantine label
    changes: list[NodeChange] = dataclasses.field(default_factory=list)

    def describe(self) -> str:
        parts = [f"{self.seen} GPU node(s) seen"]
        if self.new:
            parts.append(f"{len(self.new)} new")
        if self.returned:
            parts.append(f"{len(self.returned)} back")
        if self.gone:
            parts.append(f"{len(self.gone)} gone")
        if self.stale:
            parts.append(f"{self.stale} already newer")
        return "inventory: " + ", ".join(parts)


def record_discovery(connect: Any, seen: Sequence[SeenNode], *, seen_at: dt.datetime,
                     complete: bool) -> InventoryUpdate:
    """Write what one discovery saw, at ``seen_at``. ``complete``: it looked at the whole cluster (no
    node range), so the nodes it did not see are gone. One transaction."""
    if seen_at.tzinfo is None:
        raise ValueError("seen_at must be timezone-aware")
    rows = [(validate_node_name(n.name), n.gpu_model, n.gpu_count, n.eligibility, (n.detail or "")[:MAX_DETAIL],
             n.boot_id, n.quarantined) for n in seen]
    params = {"seen_at": seen_at, "names": [r[0] for r in rows], "models": [r[1] for r in rows],
              "counts": [r[2] for r in rows], "eligibility": [r[3] for r in rows], "details": [r[4] for r in rows],
              "boot_ids": [r[5] for r in rows], "quarantined": [r[6] for r in rows]}
    with connect() as conn, conn.cursor() as cur:
        written = []
        cur.execute(ANY_SQL)
        known_before = cur.fetchone()[0]
        if rows:
            cur.execute(UPSERT_SQL, params)
            written = cur.fetchall()
        gone = []
        if complete:
            cur.execute(GONE_SQL, {"seen_at": seen_at})
            gone = sorted(r[0] for r in cur.fetchall())
        conn.commit()
    return InventoryUpdate(seen=len(rows), new=sorted(r[0] for r in written if r[1]),
                           returned=sorted(r[0] for r in written if not r[1] and r[2]), gone=gone,
                           stale=len(rows) - len(written), changes=_changes(written, known_before=known_before))


def _changes(written: Sequence[Sequence[Any]], *, known_before: bool) -> list[NodeChange]:
    """What the signals compare (``domain.signals.NodeChange``), from the upsert's rows: the node, whether it
    was inserted, was gone, the boot id, eligibility and quarantine flag before, and those now."""
    changes = []
    for name, inserted, _gone, boot_before, eligibility_before, quarantined_before, boot_id, eligibility, \
            quarantined in written:
        if inserted:
            if known_before:
                changes.append(NodeChange(name, "new"))
            continue
        if boot_before and boot_id and boot_before != boot_id:
            changes.append(NodeChange(name, "reboot", boot_before, boot_id))
        if eligibility_before == "cordoned" and eligibility != "cordoned" and (quarantined_before or quarantined):
            changes.append(NodeChange(name, "uncordoned"))
    return sorted(changes, key=lambda c: (c.node_name, c.kind))


def grace(settings: Any) -> dt.timedelta:
    return dt.timedelta(hours=settings.gone_node_grace_hours)


def counted(cur: Any, *, as_of: dt.datetime, grace: dt.timedelta) -> list[InventoryNode]:
    """The nodes every view counts at ``as_of`` (an open cursor: the caller's snapshot)."""
    cur.execute(f"SELECT {', '.join(COLUMNS)} FROM {TABLE} WHERE {COUNTED_WHERE}", {"as_of": as_of, "grace": grace})
    return [_node(row) for row in cur.fetchall()]


def read(cur: Any, names: Iterable[str] | None = None) -> dict[str, InventoryNode]:
    """Rows by node name: those of ``names`` (validated), or all."""
    sql = f"SELECT {', '.join(COLUMNS)} FROM {TABLE}"
    params: dict[str, Any] = {}
    if names is not None:
        sql += " WHERE node_name = ANY(%(names)s)"
        params["names"] = [validate_node_name(n) for n in names]
    cur.execute(sql, params)
    return {node.node_name: node for node in map(_node, cur.fetchall())}


def _node(row: Sequence[Any] | Mapping[str, Any]) -> InventoryNode:
    values = [row[c] for c in COLUMNS] if isinstance(row, Mapping) else list(row)
    return InventoryNode(*values)
