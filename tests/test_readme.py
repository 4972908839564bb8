"""The README is part of the product: its quick start, its commands and its configuration table must
stay true. Every command of its ```bash blocks runs here as written (extracted from the README, so the
two cannot drift apart), in a scratch copy of the working tree with a scratch HOME, exits 0 and leaves
nothing running (tests/readme/) — or is listed in NOT_HERE with the reason it cannot run on this machine."""

import re

from cluster_doctor.domain.config import Settings

from tests.conftest import REPO
from tests.readme.readme_commands import (
    NOT_HERE,
    RUN_BLOCKS,
    bash_blocks,
    block_after,
    commands,
    why_not_here,
)

README = (REPO / "README.md").read_text()


def test_quick_start_is_exactly_the_two_commands():
    section = README.split("## Quick start", 1)[1].split("##", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["make demo", "make test"]


def test_every_setting_is_in_the_configuration_table():
    table = README.split("## Configuration", 1)[1]
    for name, _default, _doc in Settings.docs():
        assert f"| `{name}` |" in table, name


def test_the_configuration_table_is_the_one_the_settings_model_generates():
    import settings_table

    assert settings_table.current(README) == settings_table.render(), \
        "README.md's settings table is stale: run python tools/settings_table.py"
    assert settings_table.current(README) in README.split("## Configuration", 1)[1].split("\n## ", 1)[0]


def test_the_table_generator_sees_a_change_to_the_model(monkeypatch):
    import settings_table

    field = Settings.model_fields["staleness_days"]
    monkeypatch.setattr(field, "description", "Something else entirely.")
    assert settings_table.current(README) != settings_table.render()


def test_the_makefile_has_the_documented_targets():
    makefile = (REPO / "Makefile").read_text()
    for target in ("demo", "test", "bench-store", "bench-discovery", ".venv"):
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), target


def test_yaml_snippets_parse():
    import yaml

    blocks = re.findall(r"```yaml\n(.*?)```", README, re.S)
    assert blocks
    for block in blocks:
        assert isinstance(yaml.safe_load(block), dict)


def test_documented_files_exist():
    for path in ("docs/deployment.md", "docs/metrics.md", "include/suites/README.md", "include/k8s",
                 "deploy/compose/.env.example", "deploy/compose/Dockerfile", "include/suites/Dockerfile"):
        assert (REPO / path).exists(), path


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
