"""The Postgres results store: record attempts, read the latest state and the history.

Every public method opens its own short-lived connection: tasks, the CLI and the UI are short and
infrequent, and a fresh connection per operation survives a database restart between them.
Writes are all-or-nothing, idempotent on the attempt identity (dag_id, run_id, node_name,
test_name, try_number) and retried with backoff while the database is unreachable, so a briefly
down database delays results but neither loses nor duplicates them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import hostlist
import psycopg2
import psycopg2.extras

from cluster_doctor import database, migrations
from cluster_doctor.attempts import Attempt
from cluster_doctor.nodes import NodeRange, validate_node_name
from cluster_doctor.priority import PairState

log = logging.getLogger(__name__)

LATEST_COLUMNS = (
    "node_name", "test_name", "status", "started_at", "finished_at", "metrics", "checks", "reason",
    "gpu_model", "history_id", "status_since", "previous_status", "last_attempt_at", "last_attempt_status",
    "last_attempt_reason",
)
HISTORY_COLUMNS = ("id", *Attempt.COLUMNS, "created_at")

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


class SchemaMissing(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6  # 1 + 5 retries: 1, 2, 4, 8, 16 s (about half a minute) before giving up
    initial_delay_s: float = 1.0
    max_delay_s: float = 30.0


@dataclasses.dataclass(frozen=True)
class RecordResult:
    inserted: int
    duplicates: int


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, (database.DatabaseUnavailable, psycopg2.OperationalError, psycopg2.InterfaceError))


class ResultStore:
    def __init__(
        self,
        dsn: Mapping[str, Any] | str,
        *,
        retry: RetryPolicy = RetryPolicy(),
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.dsn = database.dsn_from_url(dsn) if isinstance(dsn, str) else dict(dsn)
        self.retry = retry
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"ResultStore({database.describe(self.dsn)})"

    @contextlib.contextmanager
    def connection(self, *, autocommit: bool = False) -> Iterator[Any]:
        conn = database.connect(self.dsn, autocommit=autocommit)
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
        if migrations.current_version(conn) < len(migrations.available()):
            raise SchemaMissing(
                f"the results schema at {database.describe(self.dsn)} is missing or old: "
                "run `python -m cluster_doctor db upgrade`"
            )

    # ------------------------------------------------------------------ writes
    def record(self, attempts: Iterable[Attempt | Mapping[str, Any]]) -> RecordResult:
        """Insert attempts in one transaction; already-recorded attempts are left as they are.

        Everything is validated before the first byte is sent, so malformed input writes nothing."""
        items = [a if isinstance(a, Attempt) else Attempt.from_dict(a) for a in attempts]
        if not items:
            return RecordResult(0, 0)
        # A stable order keeps concurrent writers from deadlocking on per-pair locks.
        items.sort(key=lambda a: (a.node_name, a.test_name, a.dag_id, a.run_id, a.try_number))
        rows = [a.row() for a in items]
        sql = (
            f"INSERT INTO validation_history ({', '.join(Attempt.COLUMNS)}) VALUES %s "
            "ON CONFLICT ON CONSTRAINT validation_history_attempt_key DO NOTHING RETURNING id"
        )

        def write() -> RecordResult:
            with self.connection() as conn:
                try:
                    with conn.cursor() as cur:
                        inserted = psycopg2.extras.execute_values(cur, sql, rows, page_size=500, fetch=True)
                    conn.commit()
                except BaseException:
                    with contextlib.suppress(Exception):
                        conn.rollback()
                    raise
            return RecordResult(inserted=len(inserted), duplicates=len(rows) - len(inserted))

        return self._with_retries(write, what=f"recording {len(rows)} attempt(s)")

    def _with_retries(self, operation: Callable[[], Any], *, what: str) -> Any:
        delay = self.retry.initial_delay_s
        for attempt in range(1, self.retry.attempts + 1):
            try:
                return operation()
            except Exception as exc:
                if not _transient(exc) or attempt == self.retry.attempts:
                    raise
                message = " ".join(str(exc).split())[:300]
                log.warning("%s failed (%s); retry %d/%d in %.1fs", what, message, attempt,
                            self.retry.attempts - 1, delay)
                self._sleep(delay * (0.8 + 0.4 * random.random()))
                delay = min(delay * 2, self.retry.max_delay_s)
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ reads
    def _query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[dict[str, Any]]:
        with self.connection() as conn:
            self._require_schema(conn)
            with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
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
        sql = f"SELECT {', '.join(HISTORY_COLUMNS)} FROM validation_history WHERE node_name = %s"
        params: list[Any] = [node_name]
        if test_name:
            sql += " AND test_name = %s"
            params.append(test_name)
        sql += " ORDER BY finished_at DESC, id DESC LIMIT %s"
        params.append(int(limit))
        return self._query(sql, params)

    def attempts_for_run(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return self._query(
            f"SELECT {', '.join(HISTORY_COLUMNS)} FROM validation_history "
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
        """Differences between validation_latest and the same semantics computed independently."""
        expected = {
            (r["node_name"], r["test_name"]): r
            for r in self._query(INDEPENDENT_LATEST_SQL.format(table="validation_history"))
        }
        actual = {
            (r["node_name"], r["test_name"]): r
            for r in self._query(
                "SELECT node_name, test_name, status, finished_at, history_id, last_attempt_at, "
                "last_attempt_status, last_attempt_id FROM validation_pair_state"
            )
        }
        problems = []
        for key in sorted(set(expected) | set(actual)):
            exp, act = expected.get(key), actual.get(key)
            if exp != act:
                problems.append(f"{key[0]} · {key[1]}: view {act} != history {exp}")
        return problems
