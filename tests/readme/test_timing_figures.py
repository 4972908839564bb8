"""The README's timing figures are what `make demo` and `make up` printed (issue 33): each quoted figure
is a whole last line of the command, in its format — the seconds from the command's start, every phase
it marks in order (adding up to the total) and the machine's CPUs and load — never a round "about a
minute". The commands' own last lines are checked against the same format where they run
(tests/readme/test_quick_start.py, tests/stack/test_stack.py)."""

from __future__ import annotations

from tests.conftest import REPO
from tests.readme.timing_lines import PHASES, assert_timing_line

README = (REPO / "README.md").read_text()


def test_the_readme_quotes_the_commands_own_timing_lines():
    for what in PHASES:
        quoted = [line for line in README.splitlines() if line.startswith(what + " in ")]
        assert len(quoted) >= 2, f"the README quotes no measured `{what}` line"
        for line in quoted:
            parsed = assert_timing_line(line, what)
            assert parsed["cpus"] >= 1 and parsed["load"] > 0  # the machine and load it was measured under


def test_no_timing_figure_is_a_guess():
    for guess in ("about a minute", "about 30 s", "in about a minute"):
        assert guess not in README, guess


def test_the_format_is_the_one_the_commands_print():
    import timing

    phases = timing.Phases()
    for name in PHASES["make up ready"][1:]:
        phases.mark(name)
    assert_timing_line(phases.line("make up ready"), "make up ready")
