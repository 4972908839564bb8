"""The least-privilege role Cluster Doctor runs as: reads and writes rows, owns nothing.

Migrations run as the database owner (``cluster-doctor db upgrade``); the Airflow connection
``validation_db`` logs in as a role that may only SELECT, INSERT, UPDATE and DELETE rows and use the
sequences (``cluster-doctor db grant-runtime ROLE``, run as the owner). Default privileges give the
role the same rights on what later migrations of the same owner create, so an upgrade needs no new
grant. The run-time code needs nothing more: its locks are advisory (no privilege) and the triggers
that maintain the latest view write as whoever inserted the row.
"""

from __future__ import annotations

import re
from typing import Any

from psycopg import sql

ROW_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")
_ROLE = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class InvalidRole(ValueError):
    pass


def check_name(role: str) -> str:
    if not isinstance(role, str) or not _ROLE.fullmatch(role):
        raise InvalidRole(f"role {str(role)[:70]!r}: use lowercase letters, digits and '_' (at most 63)")
    return role


def statements(database: str, role: str) -> list[sql.Composed]:
    """The grants, in order; names quoted as identifiers."""
    check_name(role)
    r, db = sql.Identifier(role), sql.Identifier(database)
    rows = sql.SQL(", ").join(sql.SQL(p) for p in ROW_PRIVILEGES)
    return [
        sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(db, r),
        sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(r),
        sql.SQL("GRANT {} ON ALL TABLES IN SCHEMA public TO {}").format(rows, r),
        sql.SQL("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {}").format(r),
        sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT {} ON TABLES TO {}").format(rows, r),
        sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO {}").format(r),
    ]


def grant_runtime(conn: Any, role: str) -> int:
    """Grant ``role`` what the run-time code needs on the connection's database (one transaction);
    the number of tables it can now use. The role must exist (created with its password by whoever
    manages the server: the compose init SQL, the Helm chart's database, a DBA)."""
    check_name(role)
    with conn.cursor() as cur:
        cur.execute("SELECT current_database(), EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s)", (role,))
        database, exists = cur.fetchone()
        if not exists:
            raise InvalidRole(f"role {role!r} does not exist: create it first (CREATE ROLE {role} LOGIN PASSWORD ...)")
        for statement in statements(database, role):
            cur.execute(statement)
        cur.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') "
                    "AND has_table_privilege(%s, c.oid, 'INSERT')", (role,))
        count = cur.fetchone()[0]
    conn.commit()
    return count
