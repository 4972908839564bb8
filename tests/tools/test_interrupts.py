"""A command that starts servers (make bench-metrics, make bench-store, make demo, make up) leaves nothing behind when
it is interrupted: Ctrl-C (SIGINT to its process group, as a terminal sends it), SIGTERM (a CI timeout), or
a reader that goes away (``make bench-metrics | head``). Each is interrupted once its embedded PostgreSQL
runs; afterwards no process of it runs (found by its temporary directory on the command line, as a
daemonized PostgreSQL is, or by a marker in the environment every child inherits) and none of its
temporary directories is left."""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import interrupts
import psutil
import pytest
from leftovers import processes_mentioning

from tests.conftest import REPO
from tests.support.commands import run_stoppable

# Each case is a whole command with its own embedded PostgreSQL, half a minute or more on a loaded box:
# make test interrupts a test run stopped as a CI timeout stops it, and bench-metrics every way (it is
# paused at a step, so the signal meets it there: a few seconds of CPU each); make test-slow every command
# every way. The interruption's own rules (held blocks, a closed pipe, a fixture's command) run in make test.
IN_MAKE_TEST = {("test run", "SIGTERM"), ("bench-metrics", "SIGINT to the group"), ("bench-metrics", "SIGTERM"),
                ("bench-metrics", "closed pipe")}
PAUSED_COMMAND = REPO / "tests" / "support" / "paused_command.py"

TARGETS = {  # make target -> (command at a small scale, the prefix of its temporary directories)
    # paused at its first scrape's step (tests/support/paused_command.py): its fleet seeded, its apps open
    "bench-metrics": ([str(PAUSED_COMMAND), str(REPO / "bench" / "bench_metrics.py"), "Fleet.tick",
                       "--nodes", "60", "--runs", "1"], "cd-bench-metrics-"),
    "bench-store": ([str(REPO / "bench" / "bench_store.py"), "--rows", "20000,40000", "--nodes", "100,200",
                     "--repeats", "3", "--naive-repeats", "2"], "cd-bench-store-"),
    "demo": ([str(REPO / "tools" / "demo.py")], None),  # its directory stays by design (the CLI reads it)
    # interrupted while it starts (its PostgreSQL up, Airflow on its way): it stops what it started
    "up": ([str(REPO / "tools" / "stack.py"), "up", "--state-dir", "{state}", "--port", "{port}"], None),
}
HOW = {"SIGINT to the group": signal.SIGINT, "SIGTERM": signal.SIGTERM, "closed pipe": None}
CASES = [(t, h) for t in TARGETS for h in HOW if h != "closed pipe" or t != "bench-store"]
MARKER = "CD_INTERRUPT_TEST"
SERVER_UP_TIMEOUT_S = 240  # the embedded server's initdb on a loaded 2-core box


def _as_from_a_terminal() -> None:
    """In the child before exec: SIGINT at its default. A child of a background job or a non-interactive
    shell inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler, so a Ctrl-C to the
    group would not reach a pytest run; a terminal's command starts with the default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def scratch():
    """Outside pytest's basetemp: as root, pgserver opens up the parents of its data directory, which a
    pytest starting meanwhile closes again."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="cd-interrupt-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _marked(marker: str) -> list[str]:
    """``pid: command line`` of the live processes whose environment carries the marker."""
    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and proc.environ().get(MARKER) == marker:
                found.append(f"{proc.pid}: {' '.join(proc.cmdline())[:200]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
            continue
    return found


def _wait_for_pause(proc: subprocess.Popen, err: pathlib.Path) -> None:
    """Until the command says it waits at its paused step (a hang guard: the test's timeout)."""
    for line in proc.stdout:
        if line.startswith(b"PAUSED_AT "):
            return
    pytest.fail(f"it ended (exit {proc.wait()}) before its paused step: {err.read_text()[-2000:]}")


def _wait_for_server(proc: subprocess.Popen, where: pathlib.Path, err: pathlib.Path) -> None:
    """Until a PostgreSQL server (not its initdb) runs with its data under ``where``."""
    deadline = time.monotonic() + SERVER_UP_TIMEOUT_S
    while not any("bin/postgres " in line for line in processes_mentioning(str(where))):
        if proc.poll() is not None:
            pytest.fail(f"it ended (exit {proc.returncode}) before its server ran: {err.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no embedded PostgreSQL in {where} after {SERVER_UP_TIMEOUT_S} s")
        time.sleep(0.2)


@pytest.mark.real_clock("make up's stop compares its record's time with the kernel's process start times "
                        "(/proc), which no moved clock moves; the rest reads no date, and minutes of runs twice "
                        "is what make test cannot pay")
@pytest.mark.e2e
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("target", "how"), [
    pytest.param(t, h, id=f"{t}-{h}", marks=() if (t, h) in IN_MAKE_TEST else pytest.mark.slow) for t, h in CASES])
def test_an_interrupted_command_stops_its_servers_and_removes_its_temporary_directories(target, how, scratch):
    argv, prefix = TARGETS[target]
    marker = uuid.uuid4().hex
    tmp, demo = scratch / "tmp", scratch / "demo"  # the demo's directory, or the stack's state
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = [a.format(state=demo, port=port) for a in argv]
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "CLUSTER_DOCTOR_DEMO_DIR": str(demo), MARKER: marker}
    err = scratch / "stderr"
    with open(err, "wb") as err_fh:
        # its own session and process group, as a command started from a terminal has
        proc = subprocess.Popen([sys.executable, *argv], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=err_fh, start_new_session=True,
                                preexec_fn=_as_from_a_terminal)
    try:
        if PAUSED_COMMAND.name in argv[0]:
            _wait_for_pause(proc, err)  # it waits there until interrupted: no race with its end
            assert any("bin/postgres " in line for line in processes_mentioning(str(tmp))), "no server to stop"
        else:
            _wait_for_server(proc, tmp if prefix else demo, err)
            time.sleep(2)  # a moment into its work with the server
        if HOW[how] is None:
            proc.stdout.close()  # the reader goes away; its next line meets a closed pipe
            expected = interrupts.PIPE_STATUS
        else:
            if HOW[how] == signal.SIGINT:
                os.killpg(proc.pid, signal.SIGINT)
            else:
                proc.send_signal(signal.SIGTERM)
            expected = 128 + HOW[how]
        if HOW[how] is not None:
            proc.stdout.read()
        returncode = proc.wait(300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    time.sleep(1)  # a process that received SIGKILL from its parent's cleanup is gone within a moment
    text = err.read_text()
    assert returncode == expected, text[-3000:]
    assert "interrupted (" in text and "Traceback" not in text, text[-3000:]
    assert processes_mentioning(str(scratch)) == [], text[-2000:]
    assert _marked(marker) == []
    if prefix:
        assert [p.name for p in tmp.iterdir() if p.name.startswith(prefix)] == []
    else:  # the demo's data stays for the CLI, the stack's for the next up; their servers do not
        assert not (demo / "pgdata" / "postmaster.pid").exists()
        assert not (demo / "stack.json").exists()


def test_an_interruption_during_a_held_block_is_raised_when_it_ends_and_a_second_one_waits(tmp_path):
    """Held: the block ends first, then the interruption; a second signal during the cleanup does not cut
    it short; the command's status is the first signal's."""
    script = tmp_path / "held.py"
    script.write_text(
        "import os, signal, sys, time\n"
        f"sys.path.insert(0, {str(REPO / 'tools')!r})\n"
        "import interrupts\n"
        "def main():\n"
        "    try:\n"
        "        with interrupts.held():\n"
        "            os.kill(os.getpid(), signal.SIGTERM)\n"
        "            time.sleep(0.2)\n"
        "            print('block ended', flush=True)\n"
        "        print('not reached', flush=True)\n"
        "    finally:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(0.2)\n"
        "        print('cleanup ended', flush=True)\n"
        "    return 0\n"
        "sys.exit(interrupts.run(main))\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 128 + signal.SIGTERM, out.stderr
    assert out.stdout.splitlines() == ["block ended", "cleanup ended"]
    assert out.stderr.strip() == "interrupted (SIGTERM): stopped what it had started"


def test_a_signal_ignored_when_the_command_started_stays_ignored(tmp_path):
    """``nohup make bench-store``: the terminal's SIGHUP is ignored, as nohup asked; SIGTERM still stops it."""
    script = tmp_path / "nohup.py"
    script.write_text(
        "import signal, sys, time\n"
        f"sys.path.insert(0, {str(REPO / 'tools')!r})\n"
        "import interrupts\n"
        "def main():\n"
        "    print('ready', flush=True)\n"
        "    sys.stdin.readline()\n"
        "    print('outlived SIGHUP', flush=True)\n"
        "    time.sleep(600)\n"
        "sys.exit(interrupts.run(main))\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGHUP)
        proc.stdin.write("go on\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "outlived SIGHUP\n"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "interrupted (SIGTERM)" in err


def test_a_closed_pipe_ends_the_command_once_and_its_cleanup_still_prints_nowhere(tmp_path):
    script = tmp_path / "pipe.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(REPO / 'tools')!r})\n"
        "import interrupts\n"
        "def main():\n"
        "    try:\n"
        "        while True:\n"
        "            print('line', flush=True)\n"
        "            time.sleep(0.01)\n"
        "    finally:\n"
        "        print('cleanup line, to nowhere', flush=True)\n"
        f"        open({str(tmp_path / 'cleaned')!r}, 'w').write('yes')\n"
        "sys.exit(interrupts.run(main))\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == interrupts.PIPE_STATUS, err
    assert (tmp_path / "cleaned").read_text() == "yes"
    assert b"Traceback" not in err and b"interrupted (closed pipe)" in err, err


def test_a_test_run_stopped_while_its_command_starts_servers_lets_the_command_stop_them(tmp_path):
    """A fixture's make up (``run_stoppable``) when the test run is stopped meanwhile: the command gets
    SIGTERM and stops what it started before the interruption goes on (``subprocess.run`` would SIGKILL it,
    and its server, in a session of its own as a daemon's, would run on)."""
    script = tmp_path / "starts_a_server.py"
    script.write_text(
        "import pathlib, subprocess, sys, time\n"
        f"sys.path.insert(0, {str(REPO / 'tools')!r})\n"
        "import interrupts\n"
        "def main():\n"
        "    server = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        f"    pathlib.Path({str(tmp_path / 'server')!r}).write_text(str(server.pid))\n"
        "    try:\n"
        "        time.sleep(600)\n"
        "    finally:\n"
        "        server.terminate()\n"
        "        server.wait()\n"
        "sys.exit(interrupts.run(main))\n")
    ready = tmp_path / "server"

    def interrupt_when_the_server_runs():  # as pytest's SIGTERM handler does: an exception in the main thread
        while not ready.exists():
            time.sleep(0.05)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

    def raise_interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGUSR1, raise_interrupt)
    watcher = threading.Thread(target=interrupt_when_the_server_runs, daemon=True)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_stoppable([sys.executable, str(script)], timeout=600)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    server = int(ready.read_text())
    assert not psutil.pid_exists(server) or psutil.Process(server).status() == psutil.STATUS_ZOMBIE


@pytest.mark.real_clock("a pytest run's teardown reads no date; starting a server twice is what make test "
                        "cannot pay")
@pytest.mark.e2e
@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig", [
    pytest.param(sig, id=how, marks=() if ("test run", how) in IN_MAKE_TEST else pytest.mark.slow)
    for sig, how in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT to the group"))])
def test_a_test_run_that_is_stopped_tears_its_embedded_server_down(sig, scratch):
    """The suite's own servers: a pytest run (with the suite's conftest as its plugin) whose fixture started
    an embedded PostgreSQL, as tests/conftest.py does without a local server, is stopped mid-test."""
    pgdata = scratch / "cd-test-pg"
    (scratch / "test_holds_a_server.py").write_text(
        "import pathlib, time\n"
        "import pytest\n"
        "from cluster_doctor.store import database\n\n"
        "@pytest.fixture\n"
        "def server():\n"
        f"    server = database.embedded_server({str(pgdata)!r}, cleanup_mode='delete')\n"
        "    try:\n"
        "        yield server\n"
        "    finally:\n"
        "        database.stop_embedded(server)\n\n"
        "def test_waits(server):\n"
        f"    pathlib.Path({str(scratch / 'started')!r}).write_text(str(server.get_pid()))\n"
        "    time.sleep(600)\n")
    err = scratch / "out"
    with open(err, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                                 "--rootdir", str(REPO), "-c", str(REPO / "pyproject.toml"), str(scratch)],
                                cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_as_from_a_terminal)
    try:
        deadline = time.monotonic() + SERVER_UP_TIMEOUT_S
        while not (scratch / "started").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the test never ran (exit {proc.poll()}): {err.read_text()[-3000:]}")
            time.sleep(0.2)
        pid = int((scratch / "started").read_text())
        if sig == signal.SIGINT:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        proc.wait(300)  # its teardown stops a server: a hang guard, not a bound
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 2, err.read_text()[-3000:]  # pytest's "interrupted"
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert processes_mentioning(str(pgdata)) == [] and not pgdata.exists(), err.read_text()[-3000:]
