"""The README's quick start, then what it says to do with the demo's results: `make demo` exits 0 and
prints a real daily report section; the README's SQL runs on its results; the CLI examples read them;
nothing keeps running (tests/support/readme_commands.py runs the blocks)."""

import re

import psycopg
import pytest
from cluster_doctor.store import database

from tests.support.readme_commands import README, assert_nothing_left, run_block
from tests.support.timing_lines import assert_timing_line


@pytest.mark.timeout(900)
def test_quick_start_then_the_cli_examples_and_sql_on_its_results(scratch):
    demo = run_block(scratch, "quick start", timeout=800)
    daily = demo.stdout.split("== daily fleet report", 1)[1].split("\n== ", 1)[0]
    assert "## Headline" in daily and "Coverage:" in daily and "## Failures of the day" in daily, daily
    assert "gpu-004" in daily  # the injected ECC fault is the day's failure
    assert "demo finished" in demo.stdout
    # its last line: how long it took, where the time went, on what machine (the README quotes such lines)
    assert_timing_line(demo.stdout.strip().splitlines()[-1], "make demo finished")
    assert_nothing_left(scratch)

    sql = re.search(r"```sql\n(.*?)```", README, re.S).group(1)
    statements = [s.strip() for s in re.sub(r"--[^\n]*", "", sql).split(";") if s.strip()]
    server = database.embedded_server(scratch["tree"] / ".demo" / "pgdata")
    try:
        with psycopg.connect(**database.libpq_params(server.get_uri())) as conn:
            results = [conn.execute(s).fetchall() for s in statements]
    finally:
        database.stop_embedded(server)
    assert len(results) == 3 and any(r[0] == "gpu-004" for r in results[0]), results[0]

    cli = run_block(scratch, "cli")
    assert "gpu-004" in cli.stdout and "gpu_health" in cli.stdout
    assert f"embedded PostgreSQL in {scratch['tree'] / '.demo' / 'pgdata'}" in cli.stderr
    assert_nothing_left(scratch)
