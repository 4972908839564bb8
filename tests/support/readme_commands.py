"""Running the README's commands as written: which blocks run where, which commands cannot run on this
machine and why, a scratch copy of the working tree with a scratch HOME to run them in, and the check
that nothing they started is left running. The accounting test is tests/test_readme.py; the run tests
are the test_*.py files beside this module, one per file so pytest-xdist spreads them over its workers.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
import time

import leftovers

from tests.conftest import REPO

README = (REPO / "README.md").read_text()

# Every command of the README's ```bash blocks runs in a test (test_*.py here), as written, in a scratch copy of
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
    "python -m cluster_doctor_suites.nvbandwidth": "needs GPUs and NVIDIA's nvbandwidth tool (without them: error)",
    "python -m cluster_doctor_suites.ib_health": "needs the node's InfiniBand HCAs (without them it fails, as it must)",
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


@contextlib.contextmanager
def scratch_checkout():
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
        for _ in range(20):  # a process on its way out may still write a file while the tree goes
            shutil.rmtree(root, ignore_errors=True)
            if not root.exists() and not leftovers.processes_mentioning(str(root), environment=True):
                break
            time.sleep(0.5)
        assert left == [], f"processes left running by the README's commands: {left}"
        assert not root.exists(), f"could not remove {root}"


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
    assert out.returncode == 0, (f"README block {name!r} failed ({out.returncode}; a command that cannot run on this "
                                 f"machine belongs in NOT_HERE, with why):\n{out.stderr[-3000:]}\n{out.stdout[-3000:]}")
    assert "Traceback" not in out.stdout + out.stderr and "Warning" not in out.stdout + out.stderr, \
        out.stdout[-3000:] + out.stderr[-3000:]
    return out


def assert_nothing_left(scratch) -> None:
    deadline = time.monotonic() + 15  # a server's last processes take a moment to go
    while (left := leftovers.processes_mentioning(str(scratch["root"]), environment=True)) \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == [], f"left running: {left}"
