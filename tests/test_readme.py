"""The README is part of the product: its quick start, its commands and its configuration table must
stay true. Every command of its ```bash blocks runs here as written (extracted from the README, so the
two cannot drift apart), in a scratch copy of the working tree with a scratch HOME, exits 0 and leaves
nothing running — or is listed in NOT_HERE with the reason it cannot run on this machine."""

import contextlib
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import leftovers
import psycopg
import pytest
from cluster_doctor.domain.config import Settings
from cluster_doctor.store import database

from tests.conftest import REPO

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


# ---------------------------------------------------------------------------- the README's commands, run
# Every command of the README's ```bash blocks runs in a test below, as written, in a scratch copy of
# this working tree with a scratch HOME (so `make demo` writes .demo there, not here, and nothing
# lands in the real home), or is listed here with the reason it cannot run on this machine.
NOT_HERE = {  # command prefix -> why it cannot run here
    "make test": "the test suite itself: this test is part of it",
    "airflow dags trigger continuous_validation": "needs a deployed Airflow whose configuration is this "
                                                  "shell's (make up keeps its own in its processes' environment)",
    "airflow backfill create": "needs a deployed Airflow whose configuration is this shell's",
    "kubectl apply -k include/k8s": "needs a real Kubernetes cluster",
    "cp deploy/compose/.env.example .env": "a step of the docker-compose deployment, which needs Docker "
                                           "(tests/deploy/test_compose.py checks the files it copies)",
    "docker compose up -d --build": "needs Docker",
    "python -m cluster_doctor_suites.gpu_health": "needs a GPU node (without one the suite fails, as it must)",
    "srun ": "needs a Slurm cluster with GPU nodes",
}
# The block each run test executes: the bash block right after this text of the README.
RUN_BLOCKS = {
    "quick start": "## Quick start",
    "cli": "**CLI**:",
    "make up": "### Run it locally with its UI",
    "simulate": "### Sizing the pool: `cluster-doctor simulate`",
    "suites": "## The suites",
}


def bash_blocks() -> list[tuple[int, str]]:
    """(offset in the README, text) of every ```bash block."""
    return [(m.start(), m.group(1)) for m in re.finditer(r"```bash\n(.*?)```", README, re.S)]


def commands(block: str) -> list[str]:
    """The commands of a block: continuation lines joined, trailing `  # comments` dropped."""
    joined = re.sub(r"\\\n\s*", "", block)
    return [re.sub(r"\s+#\s.*$", "", line).strip() for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def block_after(marker: str) -> str:
    at = README.index(marker)
    return next(text for start, text in bash_blocks() if start > at)


def why_not_here(command: str) -> str | None:
    return next((why for prefix, why in NOT_HERE.items() if command.startswith(prefix)), None)


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


@pytest.fixture(scope="module")
def scratch():
    """A copy of this working tree (tracked and untracked files, mtimes kept, the venv linked) and an
    empty HOME, both outside pytest's basetemp (as root, pgserver opens up the parents of its data
    directory, which a pytest starting meanwhile closes again); removed at the end, after checking
    that nothing started from them still runs."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="cd-readme-"))
    tree, home = root / "checkout", root / "home"
    home.mkdir()
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        source = REPO / rel
        if source.is_file():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / rel)
    # The venv under test is the one running these tests, linked part by part, with a stamp of its
    # own newer than every copied file: make may never rebuild it from the copy (that would point
    # its editable install at the copy), and says so before anything runs.
    venv = tree / ".venv"
    venv.mkdir()
    for part in (REPO / ".venv").iterdir():
        if part.name not in (".installed-stamp", ".lock"):
            (venv / part.name).symlink_to(part.resolve() if part.is_symlink() else part)
    (venv / ".installed-stamp").touch()
    assert subprocess.run(["make", "-q", ".venv/.installed-stamp"], cwd=tree).returncode == 0, \
        "make would rebuild the venv from the scratch copy"
    try:
        yield {"tree": tree, "home": home, "root": root}
    finally:
        left = leftovers.processes_mentioning(str(root), environment=True)
        for line in left:  # only after a failed test: say so below, and leave nothing
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split(":", 1)[0]), signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)
        assert left == [], f"processes left running by the README's commands: {left}"


def run_block(scratch, name: str, env: dict | None = None, timeout: int = 400) -> subprocess.CompletedProcess:
    """One README block as one bash script (so `export` carries to the next line), every command but
    those NOT_HERE lists, in the scratch checkout with the scratch HOME; stops at the first failure."""
    lines = [c for c in commands(block_after(RUN_BLOCKS[name])) if why_not_here(c) is None]
    script = "set -euo pipefail\n" + "\n".join(f"echo '+ {c}' >&2\n{c}" for c in lines)
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW", "CLUSTER_DOCTOR", "PYTEST", "PYTHONPATH", "MAKE", "VIRTUAL_ENV"))}
    base.update({"HOME": str(scratch["home"]),
                 "PATH": f"{scratch['tree'] / '.venv' / 'bin'}:{base.get('PATH', '/usr/bin:/bin')}"})
    out = subprocess.run(["bash", "-c", script], cwd=scratch["tree"], env={**base, **(env or {})},
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"README block {name!r} failed ({out.returncode}):\n{out.stderr[-3000:]}\n{out.stdout[-3000:]}"
    assert "Traceback" not in out.stdout + out.stderr and "Warning" not in out.stdout + out.stderr, \
        out.stdout[-3000:] + out.stderr[-3000:]
    return out


def assert_nothing_left(scratch) -> None:
    deadline = time.monotonic() + 15  # a server's last processes take a moment to go
    while (left := leftovers.processes_mentioning(str(scratch["root"]), environment=True)) \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == [], f"left running: {left}"


@pytest.mark.timeout(900)
def test_quick_start_then_the_cli_examples_and_sql_on_its_results(scratch):
    """`make demo` exits 0 and prints a real daily report section; the README's SQL runs on its
    results; the CLI examples read them; nothing keeps running."""
    demo = run_block(scratch, "quick start", timeout=800)
    daily = demo.stdout.split("== daily fleet report", 1)[1].split("\n== ", 1)[0]
    assert "## Headline" in daily and "Coverage:" in daily and "## Failures of the day" in daily, daily
    assert "gpu-004" in daily  # the injected ECC fault is the day's failure
    assert "demo finished" in demo.stdout
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


@pytest.mark.timeout(600)
def test_make_up_then_make_down(scratch):
    """The UI stack starts (on a free port: 8080 may be someone's) and stops leaving nothing."""
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = run_block(scratch, "make up", env={"STACK_PORT": str(port)}, timeout=500)
    assert f"http://127.0.0.1:{port}" in out.stdout + out.stderr
    assert_nothing_left(scratch)
    assert not leftovers.port_listening(port)


def test_simulate_examples(scratch):
    out = run_block(scratch, "simulate")
    assert "coverage" in out.stdout and "min_slots=" in out.stdout


def test_a_suite_in_cpu_mode_standalone(scratch):
    out = run_block(scratch, "suites")
    results = list((scratch["tree"] / "cd-results" / "dl_unit").glob("*/dl_unit_*.json"))
    assert results, out.stdout[-2000:] + out.stderr[-2000:]
    assert_nothing_left(scratch)
