"""The timing figures the README quotes are what `make demo` and `make up` printed: each recorded figure
(bench/figures.toml) is a whole last line of the command, in its format — the seconds from the command's
start, every phase it marks in order (adding up to the total) and the machine's CPUs and load — never a
round "about a minute"; the README and docs/ quote only recorded lines. The commands' own last lines are
checked against the same format where they run (tests/readme/test_quick_start.py, tests/stack/test_stack.py)."""

from __future__ import annotations

import tomllib

from tests.conftest import REPO
from tests.support.timing_lines import PHASES, assert_timing_line

README = (REPO / "README.md").read_text()
RECORDED = tomllib.loads((REPO / "bench" / "figures.toml").read_text())["timing"]
PAGES = {"README.md": README, **{f"docs/{p.name}": p.read_text() for p in (REPO / "docs").glob("*.md")}}


def test_the_recorded_figures_are_the_commands_own_timing_lines():
    assert set(RECORDED) == set(PHASES)
    for what in PHASES:
        assert len(RECORDED[what]) >= 2, f"no measured `{what}` lines recorded"
        for line in RECORDED[what]:
            parsed = assert_timing_line(line, what)
            assert parsed["cpus"] >= 1 and parsed["load"] > 0  # the machine and load it was measured under


def test_the_readme_quotes_recorded_lines_only():
    for what in PHASES:
        quoted = [line for line in README.splitlines() if line.startswith(what + " in ")]
        assert quoted, f"the README quotes no measured `{what}` line"
        for page, text in PAGES.items():
            for line in text.splitlines():
                if line.startswith(what + " in "):
                    assert line in RECORDED[what], f"{page} quotes a `{what}` line bench/figures.toml lacks: {line}"


def test_no_timing_figure_is_a_guess():
    for page, text in PAGES.items():
        for guess in ("about a minute", "about 30 s", "in about a minute"):
            assert guess not in text, (page, guess)


def test_the_format_is_the_one_the_commands_print():
    import timing

    phases = timing.Phases()
    for name in PHASES["make up ready"][1:]:
        phases.mark(name)
    assert_timing_line(phases.line("make up ready"), "make up ready")
