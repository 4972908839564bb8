"""The README's `make up` / `make down`: the UI stack starts (on a free port: 8080 may be someone's) and
stops leaving nothing (tests/support/readme_commands.py runs the block).

The stack itself — started by ``tools/stack.py up`` exactly as ``make up`` runs it, driven as a user
drives it, stopped by ``down`` leaving nothing — is tests/stack/test_stack.py's, in ``make test``. What
only this file can see is the Makefile's wiring of the README's two commands onto that tool: checked fast
here (``make -n``: the recipe, nothing run); the block run as written, about a minute of a worker, is in
``make test-slow`` (``make test`` within 12 minutes)."""

import contextlib
import re
import socket
import subprocess

import leftovers
import pytest

from tests.conftest import REPO
from tests.support.readme_commands import RUN_BLOCKS, assert_nothing_left, block_after, commands, run_block


def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_readmes_make_up_and_down_run_the_stack_tool_the_stack_test_drives():
    targets = [c.split()[1] for c in commands(block_after(RUN_BLOCKS["make up"]))]
    assert targets == ["up", "down"], targets
    port = str(free_port())
    recipes = {}
    for target in targets:
        out = subprocess.run(["make", "-n", "--no-print-directory", target, f"STACK_PORT={port}"], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        recipes[target] = [line for line in out.stdout.splitlines() if "tools/stack.py" in line]
    (up,) = recipes["up"]
    assert re.search(rf"python tools/stack\.py up --state-dir \S+ --port {port}$", up), up
    (down,) = recipes["down"]
    assert re.search(r"python3? tools/stack\.py down --state-dir \S+$", down), down
    # the same state dir: down stops what up started
    assert up.split("--state-dir ")[1].split()[0] == down.split("--state-dir ")[1].split()[0]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_make_up_then_make_down(scratch):
    port = free_port()
    out = run_block(scratch, "make up", env={"STACK_PORT": str(port)}, timeout=500)
    assert f"http://127.0.0.1:{port}" in out.stdout + out.stderr
    assert_nothing_left(scratch)
    assert not leftovers.port_listening(port)
