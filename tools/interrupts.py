"""How a developer command that starts servers ends when it is interrupted: Ctrl-C (SIGINT), SIGTERM,
SIGHUP and a closed output pipe all unwind it through its ``finally`` blocks, so the servers it started and
its temporary directories go with it, and it exits with the shell's status for that signal.

The benchmarks, ``make demo`` and ``make up`` run their ``main`` through ``run``; the test suite installs
the SIGTERM and SIGHUP handlers (tests/conftest.py), so pytest tears its fixtures down as on Ctrl-C.
Python's defaults do not do this: SIGTERM and SIGHUP end the process at once (no ``finally``, no atexit
handler: pgserver's PostgreSQL runs on in its removed directory), and a closed pipe raises
``BrokenPipeError`` at every later ``print``, the cleanup's own lines included, so the cleanup stops at
its first line.

``held()`` keeps a signal back while a server starts or stops (a server half started has no handle yet
to stop it by; a cleanup cut short leaves the rest); ``embedded_postgres`` is the benchmarks' server,
started and stopped that way.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import pathlib
import signal
import sys
from collections.abc import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PIPE_STATUS = 128 + signal.SIGPIPE  # what a shell reports for a command whose reader went away


class Interrupted(KeyboardInterrupt):
    """The command was told to stop; a KeyboardInterrupt, so code that already ends on Ctrl-C ends on
    this too."""

    def __init__(self, why: str, status: int):
        super().__init__(why)
        self.why, self.status = why, status


class _State:
    installed = False
    fired: Interrupted | None = None  # the first interruption: later signals do not cut the cleanup short
    holding = 0
    pending: Interrupted | None = None


def _raise(exc: Interrupted) -> None:
    if _State.fired is not None:
        return
    if _State.holding:
        _State.pending = _State.pending or exc
        return
    _State.fired = exc
    raise exc


def _on_signal(signum: int, _frame) -> None:
    _raise(Interrupted(signal.Signals(signum).name, 128 + signum))


class _PipeGuard(io.TextIOBase):
    """A text stream that, once its reader has gone, writes to /dev/null and interrupts the command once."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            if not isinstance(exc, BrokenPipeError) and exc.errno != errno.EPIPE:
                raise
            self._to_devnull()
            _raise(Interrupted("closed pipe", PIPE_STATUS))
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            if not isinstance(exc, BrokenPipeError) and exc.errno != errno.EPIPE:
                raise
            self._to_devnull()
            _raise(Interrupted("closed pipe", PIPE_STATUS))

    def _to_devnull(self) -> None:
        # the file descriptor too: children writing there, and the interpreter's last flush at exit
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        self._stream = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process

    def fileno(self) -> int:
        return self._stream.fileno()

    def isatty(self) -> bool:
        return self._stream.isatty()

    @property
    def encoding(self):
        return self._stream.encoding

    @property
    def errors(self):
        return self._stream.errors


def install(signals: tuple[int, ...] = SIGNALS, *, streams: bool = True) -> None:
    """The handlers, once per process: each of ``signals`` and (with ``streams``) a closed stdout/stderr
    raises ``Interrupted``."""
    if _State.installed:
        return
    for sig in signals:
        # A signal ignored on entry stays ignored, as POSIX asks of a program: ``nohup`` ignores SIGHUP so
        # the command outlives its terminal, a shell script's ``cmd &`` ignores SIGINT so Ctrl-C stops the
        # script's foreground work only.
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _on_signal)
    if streams:
        sys.stdout, sys.stderr = _PipeGuard(sys.stdout), _PipeGuard(sys.stderr)
    _State.installed = True


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold an interruption back until the block has ended (a server starting or stopping), then raise it."""
    _State.holding += 1
    try:
        yield
    finally:
        _State.holding -= 1
        if not _State.holding and _State.pending is not None:
            # raised even over an error of the block: the interruption most likely caused it (a server's
            # start fails when Ctrl-C reaches its initdb too)
            exc, _State.pending = _State.pending, None
            _raise(exc)


@contextlib.contextmanager
def embedded_postgres(pgdata: pathlib.Path) -> Iterator[object]:
    """A throwaway embedded PostgreSQL (pgserver) in ``pgdata``, stopped and deleted when the block ends,
    however it ends; started and stopped with interruptions held."""
    from cluster_doctor.store import database

    server = None
    try:
        with held():  # an interruption held here is raised inside the try: the server is stopped
            server = database.embedded_server(pgdata, cleanup_mode="delete")
        yield server
    finally:
        if server is not None:
            with held():
                database.stop_embedded(server)  # before the directory goes: a server in a removed one runs on


def run(main: Callable[[], int]) -> int:
    """``main()`` with the handlers installed; an interruption ends it through its ``finally`` blocks, with one
    line on stderr and the shell's status for the signal (130 for Ctrl-C, 143 for SIGTERM, 141 for a closed
    pipe)."""
    install()
    try:
        return main()
    except Interrupted as exc:
        with contextlib.suppress(Exception):
            print(f"interrupted ({exc.why}): stopped what it had started", file=sys.stderr, flush=True)
        return exc.status
