"""Run-to-run claims: overlapping DagRuns (hourly, manual, backfill) never plan or validate one node at once.

Airflow's backfill ignores the DAG's ``max_active_runs`` and overlaps the scheduled runs, and each run
plans from the same ``validation_latest``: without claims, concurrent runs plan the same pairs. So the
prioritize task claims the nodes of its plan in the results database (table ``validation_claims``,
one row per node), and gives up the nodes another live run holds for the next-best ones. The record
task releases a run's claims once its attempts are stored; a run that dies hard leaves claims that
expire after the longest its validations could have lasted (``ttl_s``), or sooner when the caller
can tell that the holding run has ended (``run_ended``: Airflow knows, this module does not).

Race-free: every writer of the table takes one transaction-scoped advisory lock first, so claim and
release transactions run one after the other (a few milliseconds each) and can never deadlock; the
primary key and ``ON CONFLICT ... WHERE`` (never overwrite another run's claim) hold even for a
writer that skipped the lock. Times come from the database's clock, not the workers'.

Pure Python and SQL on a connection factory (``cluster_doctor.store.database.Connector``); no Airflow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import hostlist

from cluster_doctor.domain.attempts import validate_test_name
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.nodes import shown, validate_node_name
from cluster_doctor.store.history import MAX_ID_TEXT, require_schema

log = logging.getLogger(__name__)

TABLE = "validation_claims"
COLUMNS = ("node_name", "test_name", "dag_id", "run_id", "claimed_at", "expires_at")
# pg_advisory_xact_lock key taken by every writer of validation_claims (not the migrations' key)
LOCK_KEY = 0x0C1D0C1A13
SLACK_S = 60  # beyond the longest a validation can last: clock steps, the record task starting
MAX_TTL_S = 7 * 24 * 3600


class InvalidClaim(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Claim:
    """A row of validation_claims: ``dag_id``/``run_id`` validate ``test_name`` on ``node_name``."""

    node_name: str
    test_name: str
    dag_id: str
    run_id: str
    claimed_at: dt.datetime
    expires_at: dt.datetime

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "claimed_at": self.claimed_at.isoformat(),
                "expires_at": self.expires_at.isoformat()}


@dataclasses.dataclass(frozen=True)
class Held:
    """A pair this run would have planned, deferred because another live run holds its node."""

    node_name: str
    test_name: str
    holder: Claim

    def to_dict(self) -> dict[str, Any]:
        return {"node_name": self.node_name, "test_name": self.test_name, "dag_id": self.holder.dag_id,
                "run_id": self.holder.run_id, "held_for": self.holder.test_name,
                "expires_at": self.holder.expires_at.isoformat()}


@dataclasses.dataclass(frozen=True)
class ClaimResult:
    granted: list[Claim]  # in the order of the candidates
    held: list[Held]  # candidates skipped before the limit was reached, in order
    expired: list[Claim]  # dead claims removed on the way: expired (any node), or of a run that ended
    dropped: int = 0  # this run's earlier claims it no longer wants (a retried prioritize)


def ttl_s(settings: Settings, test: str | Sequence[str]) -> int:
    """How long a claim for ``test`` (or a bundle of tests, one after another) lives: the longest it can
    take from the decision — waiting for a pool slot (at most ``max_queue_s`` before each step, then it
    is skipped) and each validate task's execution_timeout — never beyond the DagRun timeout, plus a
    small slack."""
    tests = [test] if isinstance(test, str) else list(test)
    longest = sum(settings.max_queue_s + settings.task_timeout_s(t) for t in tests)
    return min(longest, settings.dagrun_timeout_s) + SLACK_S


def _identity(dag_id: Any, run_id: Any) -> tuple[str, str]:
    for field, value in (("dag_id", dag_id), ("run_id", run_id)):
        if not isinstance(value, str) or not value or len(value) > MAX_ID_TEXT or "\x00" in value:
            raise InvalidClaim(f"claim {field}: expected 1 to {MAX_ID_TEXT} characters without NUL, "
                               f"got {shown(value)}")
    return dag_id, run_id


def _candidate(item: Any) -> tuple[str, str, float, int]:
    try:
        node, test, ttl, *rest = item
        if len(rest) > 1:
            raise ValueError
    except (TypeError, ValueError):
        raise InvalidClaim(f"claim candidate: expected (node, test, ttl_s[, pairs]), got {shown(item)}") from None
    pairs = rest[0] if rest else 1
    if isinstance(pairs, bool) or not isinstance(pairs, int) or pairs < 1:
        raise InvalidClaim(f"claim pairs of {shown(node)}: expected an integer >= 1, got {shown(pairs)}")
    try:
        validate_node_name(node)
        validate_test_name(test)
    except ValueError as exc:
        raise InvalidClaim(f"claim candidate: {exc}") from None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl) \
            or not 0 < ttl <= MAX_TTL_S:
        raise InvalidClaim(f"claim ttl_s of {node}: expected seconds in (0, {MAX_TTL_S}], got {shown(ttl)}")
    return node, test, float(ttl), pairs


@contextlib.contextmanager
def _locked(connect: Any, *, commit: bool = True) -> Iterator[tuple[Any, dt.datetime]]:
    """A transaction holding the claims lock, and the database's clock once the lock is held."""
    conn = connect(autocommit=False)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
            # not now(): that is when the transaction began, before waiting for the lock
            cur.execute("SELECT clock_timestamp()")
            now = cur.fetchone()[0]
        yield conn, now
        if commit:
            conn.commit()
        else:
            conn.rollback()
    except BaseException:
        with contextlib.suppress(Exception):
            conn.rollback()
        raise
    finally:
        conn.close()


def _claims(rows: Iterable[Sequence[Any]]) -> list[Claim]:
    return [Claim(*row) for row in rows]


def claim(
    connect: Any,
    candidates: Sequence[tuple[str, str, float]],
    *,
    dag_id: str,
    run_id: str,
    limit: int,
    dry_run: bool = False,
    run_ended: Callable[[str, str], bool] | None = None,
    keep_others: bool = False,
) -> ClaimResult:
    """Claim, in one transaction, the first candidate nodes no other live run holds, ``limit`` pairs in all.

    ``candidates`` are ``(node, test, ttl_s[, pairs])`` in priority order: the node's bundle of ``pairs``
    node-test pairs (1 when left out), starting with ``test`` and lasting at most ``ttl_s``; the first
    candidate of a node is the one considered. The last node granted may take more pairs than are left
    under ``limit`` (the caller cuts its bundle). Expired claims are removed (so taken over); this run's own
    claims count as free, so a retried prioritize gets them again, and its earlier claims on nodes it
    no longer plans are dropped. ``dry_run``: the same answer, nothing kept (rolled back).
    ``run_ended(dag_id, run_id)``: True when that run has ended; its claims on these nodes are dead
    (it failed before releasing them). Asked before the lock is taken, never while holding it.
    ``keep_others``: this run's claims on other nodes stay (a second claimer of the same run, e.g. the
    peer tests beside the bundles, adds nodes without touching the ones already claimed)."""
    own = _identity(dag_id, run_id)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise InvalidClaim(f"claim limit: expected an integer >= 0, got {shown(limit)}")
    wanted: dict[str, tuple[str, float, int]] = {}
    for item in candidates:
        node, test, ttl, pairs = _candidate(item)
        wanted.setdefault(node, (test, ttl, pairs))
    ended = _ended_runs(connect, wanted, own, run_ended)
    with _locked(connect, commit=not dry_run) as (conn, now):
        require_schema(conn, str(connect))
        with conn.cursor() as cur:
            expired = _remove_dead(cur, now, ended, list(wanted))
            chosen, held = _choose(wanted, _holders(cur, list(wanted)), own, limit)
            dropped = 0
            if not keep_others:
                cur.execute(f"DELETE FROM {TABLE} WHERE dag_id = %s AND run_id = %s "
                            "AND NOT (node_name = ANY(%s))", (*own, [c[0] for c in chosen]))
                dropped = cur.rowcount
            granted, lost = _insert(cur, chosen, own, now)
            held += [Held(c.node_name, wanted[c.node_name][0], c) for c in lost]
    _log_expired(expired, ended, own)
    return ClaimResult(granted=granted, held=held, expired=expired, dropped=dropped)


def _remove_dead(cur: Any, now: dt.datetime, ended: Iterable[tuple[str, str]],
                 nodes: list[str]) -> list[Claim]:
    """Delete the expired claims (any node) and those of ended runs on ``nodes``; returns them."""
    columns = ", ".join(COLUMNS)
    cur.execute(f"DELETE FROM {TABLE} WHERE expires_at <= %s RETURNING {columns}", (now,))
    expired = _claims(cur.fetchall())
    for ended_dag, ended_run in ended:  # an ended run claims nothing more: its rows are safe to drop
        cur.execute(f"DELETE FROM {TABLE} WHERE dag_id = %s AND run_id = %s AND node_name = ANY(%s) "
                    f"RETURNING {columns}", (ended_dag, ended_run, nodes))
        expired += _claims(cur.fetchall())
    return expired


def _holders(cur: Any, nodes: list[str]) -> dict[str, Claim]:
    cur.execute(f"SELECT {', '.join(COLUMNS)} FROM {TABLE} WHERE node_name = ANY(%s)", (nodes,))
    return {c.node_name: c for c in _claims(cur.fetchall())}


def _choose(wanted: dict[str, tuple[str, float, int]], holders: dict[str, Claim], own: tuple[str, str],
            limit: int) -> tuple[list[tuple[str, str, float]], list[Held]]:
    """The nodes to claim, in order, until ``limit`` pairs are taken; those another run holds, skipped."""
    chosen: list[tuple[str, str, float]] = []
    held: list[Held] = []
    taken = 0
    for node, (test, ttl, pairs) in wanted.items():
        if taken >= limit:
            break
        holder = holders.get(node)
        if holder is not None and (holder.dag_id, holder.run_id) != own:
            held.append(Held(node, test, holder))
        else:
            chosen.append((node, test, ttl))
            taken += pairs
    return chosen, held


def _insert(cur: Any, chosen: Sequence[tuple[str, str, float]], own: tuple[str, str],
            now: dt.datetime) -> tuple[list[Claim], list[Claim]]:
    """Claim ``chosen`` for this run: (the claims granted, in order; the other runs' claims that kept
    a chosen node)."""
    if not chosen:
        return [], []
    columns = ", ".join(COLUMNS)
    rows = [(node, test, *own, now, now + dt.timedelta(seconds=ttl)) for node, test, ttl in chosen]
    # The lock already serializes claimers; the WHERE keeps another run's claim intact even
    # for a writer that did not take it (its node is then reported held, not granted).
    cur.execute(
        f"INSERT INTO {TABLE} ({columns}) "
        f"VALUES {', '.join(['(%s, %s, %s, %s, %s, %s)'] * len(rows))} "
        "ON CONFLICT (node_name) DO UPDATE SET test_name = EXCLUDED.test_name, "
        "claimed_at = EXCLUDED.claimed_at, expires_at = EXCLUDED.expires_at "
        f"WHERE {TABLE}.dag_id = EXCLUDED.dag_id AND {TABLE}.run_id = EXCLUDED.run_id "
        f"RETURNING {columns}",
        [v for row in rows for v in row])
    got = {c.node_name: c for c in _claims(cur.fetchall())}
    missing = [node for node, _, _ in chosen if node not in got]
    holders = _holders(cur, missing) if missing else {}
    return [got[node] for node, _, _ in chosen if node in got], [holders[n] for n in missing if n in holders]


def _log_expired(expired: Iterable[Claim], ended: set[tuple[str, str]], own: tuple[str, str]) -> None:
    for old in expired:
        if (old.dag_id, old.run_id) in ended:
            log.warning("run %s ended without releasing its claim of %s (%s): the node is free to claim "
                        "again", old.run_id, old.node_name, old.test_name)
        elif (old.dag_id, old.run_id) != own:
            log.warning("claim of %s (%s) by run %s expired at %s without being released: the run died or "
                        "overran; the node is free to claim again", old.node_name, old.test_name, old.run_id,
                        old.expires_at.isoformat())


def _ended_runs(connect: Any, nodes: Iterable[str], own: tuple[str, str],
                run_ended: Callable[[str, str], bool] | None) -> set[tuple[str, str]]:
    """The other runs holding one of ``nodes`` that ``run_ended`` says have ended. A run it cannot
    tell about (an error, another Airflow sharing this database) counts as live: its claim expires."""
    if run_ended is None or not nodes:
        return set()
    ended = set()
    for run in sorted({(c.dag_id, c.run_id) for c in live(connect, nodes)} - {own}):
        try:
            if run_ended(*run):
                ended.add(run)
        except Exception as exc:  # noqa: BLE001 - unknown means live
            log.debug("could not tell whether run %s has ended: %s", run[1], exc)
    return ended


def release(connect: Any, *, dag_id: str, run_id: str, nodes: Iterable[str] | None = None) -> int:
    """Give up this run's claims on ``nodes`` (all of them when None); how many were released.
    Another run's claim on the same node is never touched."""
    dag_id, run_id = _identity(dag_id, run_id)
    sql = f"DELETE FROM {TABLE} WHERE dag_id = %s AND run_id = %s"
    params: list[Any] = [dag_id, run_id]
    if nodes is not None:
        names = sorted({validate_node_name(n) for n in nodes})
        if not names:
            return 0
        sql += " AND node_name = ANY(%s)"
        params.append(names)
    with _locked(connect) as (conn, _), conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.rowcount


def release_run(connect: Any, *, dag_id: str, run_id: str) -> int:
    """Give up every claim of this run."""
    return release(connect, dag_id=dag_id, run_id=run_id)


def live(connect: Any, nodes: Iterable[str] | None = None) -> list[Claim]:
    """The claims not yet expired (of ``nodes``, or all), in natural node order."""
    sql = f"SELECT {', '.join(COLUMNS)} FROM {TABLE} WHERE expires_at > clock_timestamp()"
    params: list[Any] = []
    if nodes is not None:
        sql += " AND node_name = ANY(%s)"
        params.append(sorted({validate_node_name(n) for n in nodes}))
    conn = connect(autocommit=True)
    try:
        require_schema(conn, str(connect))
        with conn.cursor() as cur:
            cur.execute(sql, params)
            found = _claims(cur.fetchall())
    finally:
        conn.close()
    return sorted(found, key=lambda c: (hostlist.numeric_sort_key(c.node_name), c.node_name))
