"""The Postgres results store: record attempts, read the latest state and the history.

Every public method opens its own short-lived connection: tasks, the CLI and the UI are short and
infrequent, and a fresh connection per operation survives a database restart between them.
Writes are all-or-nothing, idempotent on the attempt identity (dag_id, run_id, node_name,
test_name, try_number) and retried with backoff while the database is unreachable, so a briefly
down database delays results but neither loses nor duplicates them (a longer outage is bridged by
cluster_doctor.store.spool). An attempt without a run id gets one derived from its content, so distinct
attempts never share an identity while a true duplicate keeps the one it had.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import hostlist
import psycopg
from psycopg.rows import dict_row

from cluster_doctor.domain.attempts import NOT_JUDGED, UNREPORTED, Attempt, InvalidAttempt
from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.nodes import NodeRange, shown, validate_node_name
from cluster_doctor.domain.status import PairState
from cluster_doctor.store import database, diagnosis, migrations

log = logging.getLogger(__name__)

LATEST_COLUMNS = (
    "node_name", "test_name", "status", "started_at", "finished_at", "metrics", "checks", "reason",
    "gpu_model", "history_id", "status_since", "previous_status", "last_attempt_at", "last_attempt_status",
    "last_attempt_reason", "action", "incomplete", "checks_not_run",
)
HISTORY_COLUMNS = ("id", *Attempt.COLUMNS, "created_at")
# A row recorded before migration 0004 has no not-run count: read it from its skip checks, so an old
# pass that skipped a check is not read as a clean one (its action stays NULL: unknown).
HISTORY_EXPRESSIONS = {
    "incomplete": "cluster_doctor_incomplete(status, incomplete, checks_not_run, checks) AS incomplete",
    "checks_not_run": "cluster_doctor_checks_not_run(status, checks_not_run, checks) AS checks_not_run",
}
HISTORY_SELECT = ", ".join(HISTORY_EXPRESSIONS.get(c, c) for c in HISTORY_COLUMNS)
KEY_COLUMNS = ("dag_id", "run_id", "node_name", "test_name", "try_number")  # validation_history_attempt_key
COLUMN_TYPES = {
    "node_name": "text", "test_name": "text", "status": "text", "started_at": "timestamptz",
    "finished_at": "timestamptz", "duration_s": "double precision", "metrics": "jsonb", "checks": "jsonb",
    "reason": "text", "log_path": "text", "pod_name": "text", "gpu_model": "text", "gpu_count": "integer",
    "suite_version": "text", "dag_id": "text", "run_id": "text", "map_index": "integer", "try_number": "integer",
    "action": "text", "incomplete": "boolean", "checks_not_run": "integer", "peer": "text",
}

# The same semantics as validation_latest, computed straight from the history with no help from the
# trigger-maintained state. Used to verify the view (db check, tests) and as the benchmark's naive query.
INDEPENDENT_LATEST_SQL = """
SELECT a.node_name, a.test_name, e.status, e.finished_at, e.id AS history_id,
       a.finished_at AS last_attempt_at, a.status AS last_attempt_status, a.id AS last_attempt_id
  FROM (SELECT DISTINCT ON (node_name, test_name) node_name, test_name, id, finished_at, status
          FROM {table} ORDER BY node_name, test_name, finished_at DESC, id DESC) a
  LEFT JOIN (SELECT DISTINCT ON (node_name, test_name) node_name, test_name, id, finished_at, status
               FROM {table} WHERE status IN ('pass', 'fail', 'error')
              ORDER BY node_name, test_name, finished_at DESC, id DESC) e
         USING (node_name, test_name)
"""


# A node's clock may run a little ahead of ours; beyond this a finished_at in the future is refused,
# because the latest view orders by finished_at and such a row would hide every later attempt.
MAX_CLOCK_SKEW = dt.timedelta(minutes=5)
INT4 = (-(2**31), 2**31 - 1)
MAX_ID_TEXT = 250  # dag_id and run_id: Airflow's own limit for both
MAX_HISTORY_LIMIT = 10_000


class SchemaMissing(RuntimeError):
    pass


class AttemptConflict(InvalidAttempt):
    """An attempt's identity is already stored with different content (not a duplicate)."""


def content_run_id(attempt: Attempt) -> str:
    """A run id derived from what the attempt says: its start (or end) time, the suite version and
    a hash of all its content. Equal attempts get equal ids (a re-recorded file is a duplicate);
    different attempts of one node and test get different ids (never "already present")."""
    data = attempt.to_dict()
    data.pop("run_id", None)
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()
    when = (attempt.started_at or attempt.finished_at).strftime("%Y%m%dT%H%M%S.%fZ")
    version = "".join(c for c in (attempt.suite_version or "").split(":")[-1] if c.isalnum())[:12]
    return "-".join(p for p in ("content", when, version, digest[:16]) if p)


def _text_problem(value: Any, depth: int = 0) -> str | None:
    """Why Postgres would refuse this text or JSON value: NUL bytes and lone surrogates."""
    if isinstance(value, str):
        if "\x00" in value:
            return "contains a NUL character"
        if any("\ud800" <= c <= "\udfff" for c in value):
            return "contains an unpaired UTF-16 surrogate"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            problem = _text_problem(key, depth + 1) or _text_problem(item, depth + 1)
            if problem:
                return problem
    elif isinstance(value, list):
        for item in value:
            problem = _text_problem(item, depth + 1)
            if problem:
                return problem
    return None


def storable_problems(attempt: Attempt, now: dt.datetime) -> list[str]:
    """What the database would refuse, or what would corrupt the latest view, in a valid Attempt."""
    problems = []
    if attempt.finished_at > now + MAX_CLOCK_SKEW:
        problems.append(f"finished_at {attempt.finished_at.isoformat()} is in the future "
                        f"(more than {int(MAX_CLOCK_SKEW.total_seconds() // 60)} min ahead of this host's clock)")
    if attempt.started_at is not None and attempt.started_at > now + MAX_CLOCK_SKEW:
        problems.append(f"started_at {attempt.started_at.isoformat()} is in the future")
    for field in ("gpu_count", "map_index", "try_number"):
        value = getattr(attempt, field)
        if value is not None and not INT4[0] <= value <= INT4[1]:
            problems.append(f"{field} {shown(value, 40)} is out of range ({INT4[0]} to {INT4[1]})")
    for field in ("dag_id", "run_id"):
        if len(getattr(attempt, field)) > MAX_ID_TEXT:
            problems.append(f"{field} is longer than {MAX_ID_TEXT} characters")
    for field in ("reason", "log_path", "pod_name", "gpu_model", "suite_version", "dag_id", "run_id",
                  "metrics", "checks"):
        problem = _text_problem(getattr(attempt, field))
        if problem:
            problems.append(f"{field} {problem}")
    return problems


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6  # 1 + 5 retries: 1, 2, 4, 8, 16 s (about half a minute) before giving up
    initial_delay_s: float = 1.0
    max_delay_s: float = 30.0


@dataclasses.dataclass(frozen=True)
class RecordResult:
    inserted: int
    duplicates: int
    # identities already stored with different content: described, never overwritten
    conflicts: tuple[str, ...] = ()


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, (database.DatabaseUnavailable, psycopg.OperationalError, psycopg.InterfaceError))


def describe(attempt: Attempt) -> str:
    return f"{attempt.node_name} · {attempt.test_name} finished {attempt.finished_at.isoformat()}"


def unavailable(exc: BaseException) -> bool:
    """The database could not be reached or used: worth keeping the attempts for later."""
    return _transient(exc) or isinstance(exc, SchemaMissing)


def require_schema(conn: Any, where: str) -> None:
    """Refuse to read a database whose schema is missing or older than this code's migrations."""
    have, wanted = migrations.current_version(conn), len(migrations.available())
    if have < wanted:  # the message names the database and the likely cause (another one holds it, ...)
        raise SchemaMissing(diagnosis.schema_problem(conn, where, have, wanted))


class ResultStore:
    def __init__(
        self,
        connect: database.Connector | Mapping[str, Any] | str,
        *,
        retry: RetryPolicy = RetryPolicy(),
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.connect = database.connector(connect)
        self.retry = retry
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"ResultStore({self.connect})"

    @contextlib.contextmanager
    def connection(self, *, autocommit: bool = False) -> Iterator[Any]:
        conn = self.connect(autocommit=autocommit)
        try:
            yield conn
        finally:
            conn.close()

    # ------------------------------------------------------------------ schema
    def upgrade(self) -> migrations.UpgradeReport:
        with self.connection() as conn:
            return migrations.upgrade(conn)

    def schema_version(self) -> int:
        with self.connection() as conn:
            return migrations.current_version(conn)

    def _require_schema(self, conn) -> None:
        require_schema(conn, str(self.connect))

    # ------------------------------------------------------------------ writes
    def record(
        self,
        attempts: Iterable[Attempt | Mapping[str, Any]],
        *,
        refuse_conflicts: bool = False,
        now: dt.datetime | None = None,
    ) -> RecordResult:
        """Insert attempts in one transaction; already-recorded attempts are left as they are.

        Everything is validated before the first byte is sent, so malformed input writes nothing;
        the error names every refused attempt. An identity already stored with different content is
        a conflict: reported in the result, or with ``refuse_conflicts`` the whole batch is rolled
        back and AttemptConflict raised."""
        items = [a if isinstance(a, Attempt) else Attempt.from_dict(a) for a in attempts]
        if not items:
            return RecordResult(0, 0)
        items = [a if a.run_id else dataclasses.replace(a, run_id=content_run_id(a)) for a in items]
        now = now or dt.datetime.now(dt.UTC)
        refused = [f"{describe(a)}: {'; '.join(p)}" for a in items if (p := storable_problems(a, now))]
        if refused:
            more = f" (and {len(refused) - 5} more)" if len(refused) > 5 else ""
            raise InvalidAttempt(f"{len(refused)} attempt(s) refused: {' | '.join(refused[:5])}{more}")
        # A stable order keeps concurrent writers from deadlocking on per-pair locks.
        items.sort(key=lambda a: (a.node_name, a.test_name, a.dag_id, a.run_id, a.try_number))
        rows = [a.row() for a in items]
        placeholders = "(" + ", ".join(["%s"] * len(Attempt.COLUMNS)) + ")"
        key_of = {column: i for i, column in enumerate(Attempt.COLUMNS)}

        def key(row: Sequence[Any]) -> tuple:
            return tuple(row[key_of[c]] for c in KEY_COLUMNS)

        def insert_sql(count: int) -> str:
            return (f"INSERT INTO validation_history ({', '.join(Attempt.COLUMNS)}) "
                    f"VALUES {', '.join([placeholders] * count)} "
                    "ON CONFLICT ON CONSTRAINT validation_history_attempt_key DO NOTHING "
                    f"RETURNING {', '.join(KEY_COLUMNS)}")

        def write() -> RecordResult:
            with self.connection() as conn:
                try:
                    inserted, skipped = 0, []
                    with conn.cursor() as cur:
                        # multi-row VALUES in pages: one round trip per 500 attempts
                        for start in range(0, len(rows), 500):
                            page = rows[start:start + 500]
                            cur.execute(insert_sql(len(page)), [v for row in page for v in row])
                            new = {tuple(r) for r in cur.fetchall()}
                            inserted += len(new)
                            for row in page:
                                if key(row) in new:
                                    new.discard(key(row))  # a second row with this key was skipped
                                else:
                                    skipped.append(row)
                        conflicts = self._conflicts(cur, skipped)
                    if conflicts and refuse_conflicts:
                        conn.rollback()
                        raise AttemptConflict(
                            f"{len(conflicts)} attempt(s) have the identity of a different stored attempt "
                            f"(dag_id, run_id, node, test, try): {' | '.join(conflicts[:5])}; nothing was recorded")
                    conn.commit()
                except BaseException:
                    with contextlib.suppress(Exception):
                        conn.rollback()
                    raise
            if conflicts:
                log.warning("%d attempt(s) not recorded: their identity is stored with different content: %s",
                            len(conflicts), " | ".join(conflicts[:5]))
            return RecordResult(inserted=inserted, duplicates=len(rows) - inserted - len(conflicts),
                                conflicts=tuple(conflicts))

        return self._with_retries(write, what=f"recording {len(rows)} attempt(s)")

    @staticmethod
    def _conflicts(cur: Any, skipped: Sequence[Sequence[Any]]) -> list[str]:
        """Of the rows the insert skipped, those whose stored row differs (compared by Postgres, so
        jsonb and timestamp normalisation cannot make a true duplicate look different)."""
        if not skipped:
            return []
        casts = [f"%s::{COLUMN_TYPES[c]}" for c in Attempt.COLUMNS]
        values = ", ".join(["(" + ", ".join(casts) + ")"] * len(skipped))
        # derived columns left out: a row stored before 0004 (NULL there) and its re-write are one attempt
        content = [c for c in Attempt.COLUMNS if c not in KEY_COLUMNS and c not in Attempt.DERIVED]
        # which columns differ, named in the message: what a person needs to tell a replayed file from a bug
        differing = ", ".join(f"CASE WHEN h.{c} IS DISTINCT FROM v.{c} THEN '{c}' END" for c in content)
        cur.execute(
            f"WITH v ({', '.join(Attempt.COLUMNS)}) AS (VALUES {values}) "
            f"SELECT {', '.join('v.' + c for c in KEY_COLUMNS)}, array_remove(ARRAY[{differing}], NULL) "
            f"FROM v JOIN validation_history h USING ({', '.join(KEY_COLUMNS)}) "
            f"WHERE ({', '.join('h.' + c for c in content)}) IS DISTINCT FROM ({', '.join('v.' + c for c in content)})",
            [v for row in skipped for v in row])
        return [f"{node} · {test} (dag {dag_id}, run {run_id}, try {try_number}; differs in {', '.join(columns)})"
                for node, test, dag_id, run_id, try_number, columns in
                ((r[2], r[3], r[0], r[1], r[4], r[5]) for r in cur.fetchall())]

    def record_over_placeholder(self, attempt: Attempt, *, placeholder_reason: str = UNREPORTED,
                                now: dt.datetime | None = None) -> str:
        """Record one attempt whose row may be a placeholder: a pod's result found after its task
        stopped looking (an orphaned pod, a pod kept because its result could not be read, an earlier
        try's pod adopted by a re-run). The placeholder becomes this attempt, so the try keeps one row
        and the latest state (maintained by trigger) tells the truth:

        * this try's own ``skipped`` row whose reason starts with ``NOT_JUDGED`` (the task kept the pod);
        * else, when this try has no row, the run's try-0 ``skipped`` row with ``placeholder_reason``
          (the record task's "did not report").

        Anything else stored for the run is never overwritten: the attempt is then inserted as
        ``record`` does. Returns "superseded", "inserted", "duplicate" or "conflict"."""
        now = now or dt.datetime.now(dt.UTC)
        problems = storable_problems(attempt, now)
        if problems:
            raise InvalidAttempt(f"{describe(attempt)}: {'; '.join(problems)}")
        if attempt.run_id and self._with_retries(lambda: self._supersede(attempt, placeholder_reason),
                                                 what=f"superseding the placeholder of {describe(attempt)}"):
            return "superseded"
        outcome = self.record([attempt], now=now)
        if outcome.inserted:
            return "inserted"
        return "conflict" if outcome.conflicts else "duplicate"

    def _supersede(self, attempt: Attempt, placeholder_reason: str) -> bool:
        """One UPDATE of the placeholder (see ``record_over_placeholder``); True when a row became it. The
        placeholder's own columns are re-checked on the row being updated, so a concurrent writer that
        got there first makes this a no-op instead of a second overwrite."""
        sets = ", ".join(f"{c} = %s::{COLUMN_TYPES[c]}" for c in Attempt.COLUMNS)
        pair = "dag_id = %s AND run_id = %s AND node_name = %s AND test_name = %s"
        placeholder = (f"status = 'skipped' AND ((try_number = %s AND starts_with(reason, %s)) OR "
                       f"(try_number = 0 AND reason = %s AND NOT EXISTS "
                       f"(SELECT 1 FROM validation_history WHERE {pair} AND try_number = %s)))")
        sql = (f"UPDATE validation_history SET {sets} "
               f"WHERE id = (SELECT id FROM validation_history WHERE {pair} AND {placeholder} "
               "ORDER BY try_number DESC, id LIMIT 1) "
               f"AND {placeholder} RETURNING id")
        pair_values = [attempt.dag_id, attempt.run_id, attempt.node_name, attempt.test_name]
        checks = [attempt.try_number, f"{NOT_JUDGED}:", placeholder_reason, *pair_values, attempt.try_number]
        params = [*attempt.row(), *pair_values, *checks, *checks]
        with self.connection() as conn:
            try:
                with conn.cursor() as cur:
                    cur.execute(sql, params)
                    updated = cur.fetchone() is not None
                conn.commit()
            except BaseException:
                with contextlib.suppress(Exception):
                    conn.rollback()
                raise
        return updated

    def recorded_tries(self, tries: Iterable[tuple[str, str, str, str, int]]) -> dict[tuple, tuple[str, str | None]]:
        """(status, reason) of the stored rows of these tries, each (dag_id, run_id, node_name,
        test_name, try_number): whether a task recorded its try, and how (the orphan reaper asks)."""
        keys = sorted(set(tries))
        if not keys:
            return {}
        values = ", ".join(["(%s, %s, %s, %s, %s::integer)"] * len(keys))
        rows = self._query(
            f"SELECT h.dag_id, h.run_id, h.node_name, h.test_name, h.try_number, h.status, h.reason "
            f"FROM validation_history h JOIN (VALUES {values}) AS k ({', '.join(KEY_COLUMNS)}) "
            f"USING ({', '.join(KEY_COLUMNS)})", [v for key in keys for v in key])
        return {(r["dag_id"], r["run_id"], r["node_name"], r["test_name"], r["try_number"]): (r["status"], r["reason"])
                for r in rows}

    @contextlib.contextmanager
    def exclusive(self, name: str, *, wait_s: float) -> Iterator[bool]:
        """Hold the database-wide lock ``name`` (a Postgres advisory lock) for the block: yields True,
        or False when another holder kept it for ``wait_s`` seconds. Every host that writes to this
        database sees the same lock, whatever executor runs it; it is released when the block ends
        or, should this process die, when its connection closes."""
        key = int.from_bytes(hashlib.sha256(f"cluster_doctor:{name}".encode()).digest()[:8], "big", signed=True)
        conn = self._with_retries(lambda: self.connect(autocommit=True), what=f"taking the lock {name}")
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT set_config('lock_timeout', %s, false)", (f"{max(1, int(wait_s * 1000))}ms",))
                try:
                    cur.execute("SELECT pg_advisory_lock(%s)", (key,))
                except psycopg.errors.LockNotAvailable:
                    yield False
                    return
            try:
                yield True
            finally:
                with contextlib.suppress(Exception), conn.cursor() as cur:
                    cur.execute("SELECT pg_advisory_unlock(%s)", (key,))
        finally:
            conn.close()

    def _with_retries(self, operation: Callable[[], Any], *, what: str) -> Any:
        delay = self.retry.initial_delay_s
        for attempt in range(1, self.retry.attempts + 1):
            try:
                return operation()
            except Exception as exc:
                if not _transient(exc) or attempt == self.retry.attempts:
                    raise
                message = one_line(exc, 300)
                log.warning("%s failed (%s); retry %d/%d in %.1fs", what, message, attempt,
                            self.retry.attempts - 1, delay)
                self._sleep(delay * (0.8 + 0.4 * random.random()))
                delay = min(delay * 2, self.retry.max_delay_s)
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ reads
    def _query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[dict[str, Any]]:
        with self.connection() as conn:
            self._require_schema(conn)
            with conn.cursor(row_factory=dict_row) as cur:
                cur.execute(sql, params)
                return [dict(r) for r in cur.fetchall()]

    def latest(
        self,
        *,
        node_range: NodeRange | None = None,
        tests: Sequence[str] | None = None,
        statuses: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Rows of validation_latest, naturally ordered by node then test."""
        where, params = [], []
        if node_range is not None and not node_range.is_all and not node_range.has_patterns:
            where.append("node_name = ANY(%s)")
            params.append(sorted(node_range.names))
        if tests:
            where.append("test_name = ANY(%s)")
            params.append(list(tests))
        if statuses:
            where.append("(status = ANY(%s) OR last_attempt_status = ANY(%s))")
            params += [list(statuses), list(statuses)]
        sql = f"SELECT {', '.join(LATEST_COLUMNS)} FROM validation_latest"
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = self._query(sql, params)
        if node_range is not None and node_range.has_patterns:
            rows = [r for r in rows if node_range.matches(r["node_name"])]
        rows.sort(key=lambda r: (hostlist.numeric_sort_key(r["node_name"]), r["node_name"], r["test_name"]))
        return rows

    def pair_states(
        self, nodes: Iterable[str] | None = None, tests: Sequence[str] | None = None
    ) -> dict[tuple[str, str], PairState]:
        """What the prioritizer needs, for the given nodes (all when None)."""
        where, params = [], []
        if nodes is not None:
            where.append("node_name = ANY(%s)")
            params.append(sorted(set(nodes)))
        if tests:
            where.append("test_name = ANY(%s)")
            params.append(list(tests))
        sql = ("SELECT node_name, test_name, status, finished_at, last_attempt_at, last_attempt_status "
               "FROM validation_latest")
        if where:
            sql += " WHERE " + " AND ".join(where)
        return {
            (r["node_name"], r["test_name"]): PairState(
                status=r["status"], finished_at=r["finished_at"], last_attempt_at=r["last_attempt_at"],
                last_attempt_status=r["last_attempt_status"],
            )
            for r in self._query(sql, params)
        }

    def history(self, node_name: str, test_name: str | None = None, *, limit: int = 50) -> list[dict[str, Any]]:
        validate_node_name(node_name)
        sql = f"SELECT {HISTORY_SELECT} FROM validation_history WHERE node_name = %s"
        params: list[Any] = [node_name]
        if test_name:
            sql += " AND test_name = %s"
            params.append(test_name)
        if not 1 <= limit <= MAX_HISTORY_LIMIT:
            raise ValueError(f"limit must be between 1 and {MAX_HISTORY_LIMIT}, got {limit}")
        sql += " ORDER BY finished_at DESC, id DESC LIMIT %s"
        params.append(int(limit))
        return self._query(sql, params)

    def attempts_for_run(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return self._query(
            f"SELECT {HISTORY_SELECT} FROM validation_history "
            "WHERE dag_id = %s AND run_id = %s ORDER BY node_name, test_name, try_number",
            (dag_id, run_id),
        )

    # ------------------------------------------------------------------ maintenance
    def rebuild_latest(self) -> int:
        """Recompute validation_latest from the whole history (after a bulk load or to repair)."""
        with self.connection() as conn:
            self._require_schema(conn)
            with conn.cursor() as cur:
                cur.execute("SELECT cluster_doctor_rebuild_pair_state()")
                count = cur.fetchone()[0]
            conn.commit()
        return count

    def check_latest(self) -> list[str]:
        """Differences between validation_latest and the same semantics computed independently.

        Both sides are read in one REPEATABLE READ snapshot: with writers running, two snapshots
        would disagree by whatever committed in between and report drift that is not there."""
        with self.connection() as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            try:
                self._require_schema(conn)
                with conn.cursor(row_factory=dict_row) as cur:
                    cur.execute(INDEPENDENT_LATEST_SQL.format(table="validation_history"))
                    expected = {(r["node_name"], r["test_name"]): dict(r) for r in cur.fetchall()}
                    cur.execute("SELECT node_name, test_name, status, finished_at, history_id, last_attempt_at, "
                                "last_attempt_status, last_attempt_id FROM validation_pair_state")
                    actual = {(r["node_name"], r["test_name"]): dict(r) for r in cur.fetchall()}
            finally:
                with contextlib.suppress(Exception):
                    conn.rollback()
        problems = []
        for key in sorted(set(expected) | set(actual)):
            exp, act = expected.get(key), actual.get(key)
            if exp != act:
                problems.append(f"{key[0]} · {key[1]}: view {act} != history {exp}")
        return problems

    def future_attempts(self, *, limit: int = 50, now: dt.datetime | None = None) -> list[dict[str, Any]]:
        """Stored attempts that finish in the future beyond the clock skew of ``now`` (this host's clock,
        the one the attempts were judged against when written): each one pins its pair's latest state until
        that time passes (written before the store refused them)."""
        now = now or dt.datetime.now(dt.UTC)
        return self._query(
            "SELECT id, node_name, test_name, status, finished_at FROM validation_history "
            "WHERE finished_at > %s ORDER BY finished_at DESC LIMIT %s", (now + MAX_CLOCK_SKEW, limit))
