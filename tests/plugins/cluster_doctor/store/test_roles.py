"""The run-time role: reads and writes rows, changes no schema; granted by the owner after migrating."""

from __future__ import annotations

import datetime as dt
import uuid

import psycopg
import pytest
from cluster_doctor.cli import main as cli
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.store import claims, roles, spool
from cluster_doctor.store.history import ResultStore
from psycopg import sql

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)


def attempt(node="gpu-001", run="r1"):
    return Attempt.from_dict({"node_name": node, "test_name": "gpu_health", "status": "pass",
                              "finished_at": (NOW - dt.timedelta(minutes=5)).isoformat(),
                              "dag_id": "continuous_validation", "run_id": run, "try_number": 1})


def test_the_runtime_role_does_what_a_run_does_and_nothing_more(runtime_dsn, tmp_path):
    store = ResultStore(runtime_dsn)
    assert store.record([attempt()]).inserted == 1
    assert [r["status"] for r in store.latest()] == ["pass"]  # the trigger-maintained view, as this role
    granted = claims.claim(store.connect, [("gpu-002", "gpu_health", 600)], dag_id="continuous_validation",
                           run_id="r2", limit=5)
    assert [c.node_name for c in granted.granted] == ["gpu-002"]
    assert claims.release(store.connect, dag_id="continuous_validation", run_id="r2", nodes=["gpu-002"]) == 1
    box = spool.Spool(tmp_path)
    box.put([attempt("gpu-003")])
    assert box.replay(store).inserted == 1  # the drain lock is advisory: no privilege needed
    for statement in ("CREATE TABLE x (a int)", "DROP TABLE validation_history",
                      "ALTER TABLE validation_history ADD COLUMN x int", "TRUNCATE validation_history"):
        with psycopg.connect(**runtime_dsn) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement)


def test_tables_a_later_migration_creates_are_granted_by_default(db_dsn, runtime_dsn):
    with psycopg.connect(**db_dsn) as conn:  # the owner, as `db upgrade` runs
        conn.execute("CREATE TABLE later_migration (id bigserial PRIMARY KEY, v text)")
    with psycopg.connect(**runtime_dsn) as conn:
        conn.execute("INSERT INTO later_migration (v) VALUES ('x')")
        assert conn.execute("SELECT count(*) FROM later_migration").fetchone() == (1,)


def test_grant_runtime_from_the_cli_and_its_one_line_errors(db_dsn, db_url, capsys):
    role = f"cd_cli_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(**db_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        assert cli.main(["db", "grant-runtime", role, "--db-url", db_url]) == 0
        assert f"role {role} may now read and write" in capsys.readouterr().out
        assert cli.main(["db", "grant-runtime", "nobody_" + role, "--db-url", db_url]) == 2
        assert "does not exist" in capsys.readouterr().err
        assert cli.main(["db", "grant-runtime", 'x"; DROP TABLE validation_history; --', "--db-url", db_url]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) <= 2 and "lowercase letters" in err[-1]  # after the line naming the database
    finally:
        with psycopg.connect(**db_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
    with pytest.raises(roles.InvalidRole):
        roles.statements("db", "Robert'); --")
