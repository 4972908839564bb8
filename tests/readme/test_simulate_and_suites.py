"""The README's `cluster-doctor simulate` examples and its standalone suite in CPU mode, as written
(tests/support/readme_commands.py runs the blocks)."""

from tests.support.readme_commands import assert_nothing_left, run_block


def test_simulate_examples(scratch):
    out = run_block(scratch, "simulate")
    assert "coverage" in out.stdout and "min_slots=" in out.stdout


def test_a_suite_in_cpu_mode_standalone(scratch):
    out = run_block(scratch, "suites")
    results = list((scratch["tree"] / "cd-results" / "dl_unit").glob("*/dl_unit_*.json"))
    assert results, out.stdout[-2000:] + out.stderr[-2000:]
    assert_nothing_left(scratch)
