"""make demo stops what it starts: the embedded PostgreSQL does not outlive the demo."""

import pathlib

import demo
import psycopg
from cluster_doctor.store import database


def test_the_demo_database_is_stopped_when_the_demo_ends(tmp_path):
    pgdata = tmp_path / "pgdata"
    server, url = demo.results_db(pgdata)
    with psycopg.connect(**database.libpq_params(url)) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("cluster_doctor_demo",)
    demo.stop_results_db(server)
    assert not (pgdata / "postmaster.pid").exists()
    assert [cmd for cmd in _command_lines() if "postgres" in cmd and str(pgdata) in cmd] == []


def _command_lines() -> list[str]:
    out = []
    for proc in pathlib.Path("/proc").glob("[0-9]*/cmdline"):
        try:
            out.append(proc.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # the process ended while we looked
            pass
    return out
