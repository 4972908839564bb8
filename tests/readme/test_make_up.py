"""The README's `make up` / `make down`: the UI stack starts (on a free port: 8080 may be someone's) and
stops leaving nothing (tests/readme/readme_commands.py runs the block)."""

import contextlib
import socket

import leftovers
import pytest

from tests.readme.readme_commands import assert_nothing_left, run_block


@pytest.mark.timeout(600)
def test_make_up_then_make_down(scratch):
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = run_block(scratch, "make up", env={"STACK_PORT": str(port)}, timeout=500)
    assert f"http://127.0.0.1:{port}" in out.stdout + out.stderr
    assert_nothing_left(scratch)
    assert not leftovers.port_listening(port)
