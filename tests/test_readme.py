"""The README and its docs/ pages are part of the product: the quick start, the commands, the
configuration table and the links must stay true. Every command of the README's ```bash blocks runs here
as written (extracted from the README, so the two cannot drift apart), in a scratch copy of the working
tree with a scratch HOME, exits 0 and leaves nothing running (tests/readme/) — or is listed in NOT_HERE
with the reason it cannot run on this machine."""

import re
import textwrap

from cluster_doctor.domain.config import Settings

from tests.conftest import REPO
from tests.support.readme_commands import (
    NOT_HERE,
    RUN_BLOCKS,
    bash_blocks,
    block_after,
    commands,
    why_not_here,
)

README = (REPO / "README.md").read_text()
CONFIGURATION = (REPO / "docs" / "configuration.md").read_text()  # the settings table, generated
PAGES = {"README.md": README, **{f"docs/{p.name}": p.read_text() for p in sorted((REPO / "docs").glob("*.md"))}}


def test_quick_start_is_exactly_the_two_commands():
    section = README.split("## Quick start", 1)[1].split("##", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["make demo", "make test"]


def test_every_setting_is_in_the_configuration_table():
    table = CONFIGURATION.split("## Every setting", 1)[1]
    for name, _default, _doc in Settings.docs():
        assert f"| `{name}` |" in table, name


def test_the_configuration_table_is_the_one_the_settings_model_generates():
    import settings_table

    assert settings_table.current(CONFIGURATION) == settings_table.render(), \
        "docs/configuration.md's settings table is stale: run python tools/settings_table.py"
    assert settings_table.current(CONFIGURATION) in CONFIGURATION.split("## Every setting", 1)[1]
    # the README's Configuration section says how to set them and links the page
    assert "(docs/configuration.md)" in README.split("## Configuration", 1)[1].split("\n## ", 1)[0]


def test_the_table_generator_sees_a_change_to_the_model(monkeypatch):
    import settings_table

    field = Settings.model_fields["staleness_days"]
    monkeypatch.setattr(field, "description", "Something else entirely.")
    assert settings_table.current(CONFIGURATION) != settings_table.render()


def test_the_makefile_has_the_documented_targets():
    makefile = (REPO / "Makefile").read_text()
    for target in ("demo", "test", "bench-store", "bench-discovery", ".venv"):
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), target


def test_yaml_snippets_parse():
    import yaml

    blocks = [b for text in PAGES.values() for b in re.findall(r"^ *```yaml\n(.*?)^ *```", text, re.S | re.M)]
    assert blocks
    for block in blocks:
        assert isinstance(yaml.safe_load(textwrap.dedent(block)), dict), block[:200]


def test_documented_files_exist():
    for path in ("docs/deployment.md", "docs/metrics.md", "include/suites/README.md", "include/k8s",
                 "deploy/compose/.env.example", "deploy/compose/Dockerfile", "include/suites/Dockerfile"):
        assert (REPO / path).exists(), path


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_of_the_readme_and_the_docs_leads_somewhere():
    for page, text in PAGES.items():
        base = (REPO / page).parent
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if re.match(r"[a-z]+:", target):
                continue  # an absolute URL
            path, _, anchor = target.partition("#")
            linked = (base / path).resolve() if path else REPO / page
            assert linked.exists(), f"{page} links {target}: no such file"
            if anchor and linked.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", linked.read_text(), flags=re.S), re.M)
                assert anchor in {_anchor(h) for h in headings}, f"{page} links {target}: no such heading"


def test_the_readme_is_read_in_minutes_and_no_page_cites_an_issue():
    assert len(README.splitlines()) <= 350  # the depth lives in docs/
    for page, text in PAGES.items():
        cited = re.findall(r"\bissues? \d+|§ ?\d+", text, re.I)
        assert cited == [], f"{page} cites {cited}: say why, not which issue"


def test_every_readme_command_runs_in_a_test_or_says_why_it_cannot():
    run = {block_after(marker) for marker in RUN_BLOCKS.values()}
    unaccounted = [c for _, block in bash_blocks() for c in commands(block)
                   if block not in run and why_not_here(c) is None]
    assert unaccounted == [], f"README commands neither run by a test nor listed in NOT_HERE: {unaccounted}"
    every = [c for _, block in bash_blocks() for c in commands(block)]
    stale = [p for p in NOT_HERE if not any(c.startswith(p) for c in every)]
    assert stale == [], f"NOT_HERE lists commands the README no longer has: {stale}"
    runnable = [c for block in run for c in commands(block) if why_not_here(c) is None]
    assert len(runnable) >= 10, runnable  # the demo, the CLI examples, make up/down, simulate, a suite
