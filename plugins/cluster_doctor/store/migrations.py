"""Versioned, idempotent schema migrations for the results database.

Migrations are the SQL files in ``migrations/`` named ``NNNN_description.sql``. ``upgrade()`` takes a
transaction-scoped advisory lock (two processes upgrading at once serialize; the second finds nothing
to do), applies the missing versions in order inside that one transaction, and records each version
with its checksum. A file edited after it was applied is refused rather than silently diverging.
Migrations only ever add: nothing here drops data.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
from importlib import resources
from importlib.resources.abc import Traversable

# Package data of the installed distribution (setuptools installs it as a plain directory).
MIGRATIONS_DIR = resources.files("cluster_doctor.store") / "migrations"
VERSION_TABLE = "cluster_doctor_schema_migrations"
_LOCK_KEY = 0x0C1D0C7012  # arbitrary constant shared by every Cluster Doctor process
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


class MigrationError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class UpgradeReport:
    applied: list[int]
    current: int

    def describe(self) -> str:
        if not self.applied:
            return f"results schema is up to date (version {self.current}); nothing changed"
        return f"results schema upgraded to version {self.current} (applied {', '.join(map(str, self.applied))})"


@functools.lru_cache(maxsize=4)
def _read(directory: Traversable) -> tuple[Migration, ...]:
    found = []
    for path in sorted((p for p in directory.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name):
        match = _NAME.match(path.name)
        if not match:
            raise MigrationError(f"unexpected file in migrations/: {path.name} (want NNNN_name.sql)")
        found.append(Migration(int(match.group(1)), match.group(2), path.read_text()))
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise MigrationError(f"migration versions must be 1..n without gaps, found {versions}")
    return tuple(found)


def available(directory: Traversable = MIGRATIONS_DIR) -> list[Migration]:
    """The migration files, read once per process (every store read checks the schema version)."""
    return list(_read(directory))


def current_version(conn) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT to_regclass(%s)", (VERSION_TABLE,))
        if cur.fetchone()[0] is None:
            return 0
        cur.execute(f"SELECT coalesce(max(version), 0) FROM {VERSION_TABLE}")
        return cur.fetchone()[0]


def upgrade(conn, migrations: list[Migration] | None = None) -> UpgradeReport:
    """Apply missing migrations on ``conn`` (a non-autocommit psycopg connection) and commit."""
    migrations = available() if migrations is None else migrations
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            cur.execute(
                f"""CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (
                        version    integer PRIMARY KEY,
                        name       text        NOT NULL,
                        checksum   text        NOT NULL,
                        applied_at timestamptz NOT NULL DEFAULT now())"""
            )
            cur.execute(f"SELECT version, checksum FROM {VERSION_TABLE} ORDER BY version")
            recorded = dict(cur.fetchall())
            known = {m.version for m in migrations}
            newer = sorted(v for v in recorded if v not in known)
            if newer:
                raise MigrationError(
                    f"the database has schema version(s) {newer} that this Cluster Doctor does not know: "
                    "upgrade the package instead of downgrading the schema"
                )
            applied = []
            for migration in migrations:
                if migration.version in recorded:
                    if recorded[migration.version] != migration.checksum:
                        raise MigrationError(
                            f"migration {migration.version:04d}_{migration.name} was modified after it was "
                            "applied; add a new migration instead"
                        )
                    continue
                cur.execute(migration.sql)
                cur.execute(
                    f"INSERT INTO {VERSION_TABLE} (version, name, checksum) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, migration.checksum),
                )
                applied.append(migration.version)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return UpgradeReport(applied=applied, current=max([0, *recorded, *applied]))
