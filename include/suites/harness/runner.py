"""run_suite / main_entry: parse arguments, run the suite, and whatever happens (exception, SIGTERM,
hang, unwritable directory) write the result, the log and the summary and exit 0 pass, 1 fail,
2 error."""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from typing import Callable

from .. import SCHEMA_VERSION
from ..version import suite_version
from .checks import SuiteError
from .cli import _ArgError, _fallback_args, make_parser
from .context import Context
from .files import _FILE_MODE, atomic_write, safe_name, write_termination_log
from .inventory import base_environment
from .text import fmt, iso, one_line, utcnow
from .verdict import build_summary, decide, is_incomplete, summary_line, verdict_action, verdict_code

EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2
EXIT_CODES = {"pass": EXIT_PASS, "fail": EXIT_FAIL, "error": EXIT_ERROR}


class _Runner:
    def __init__(
        self, suite: str, args: argparse.Namespace, default_timeout: float | None, standalone: bool = False
    ) -> None:
        self.suite = suite
        self.standalone = standalone  # owns the process: may os._exit() and hook faulthandler
        self.args = args
        self.started = utcnow()
        self.t0 = time.monotonic()
        self.ts = int(self.started.timestamp())
        self.node = safe_name(args.node)
        self.out_dir = os.path.join(args.output_dir, suite, self.node)
        stem = f"{suite}_{self.node}_{self.ts}"
        self.result_path = os.path.join(self.out_dir, stem + ".json")
        self.log_path = os.path.join(self.out_dir, stem + ".log")
        self.log_tmp: str | None = None
        self.log_fh = None
        self.output_error: str | None = None
        self._finalized = threading.Event()
        self._fin_lock = threading.RLock()
        self._claim = threading.Lock()  # taken by whoever handles SIGTERM / SIGINT / the watchdog
        self._finalizing = False
        self.exit_code: int | None = None
        self.suite_code: str | None = None  # code of a suite-level error (SuiteError.code, timeout, ...)
        self.timeout = args.timeout if args.timeout else default_timeout
        self.ctx = Context(suite, args)
        self._old_handlers: dict = {}
        self._old_wakeup: int | None = None
        self._wake_fds: tuple[int, int] | None = None
        self._timer: threading.Timer | None = None

    # -- output directory and streaming log
    def open_output(self) -> None:
        try:
            os.makedirs(self.out_dir, exist_ok=True)
            fd, self.log_tmp = tempfile.mkstemp(
                prefix="." + os.path.basename(self.log_path) + ".", suffix=".tmp", dir=self.out_dir
            )
            os.fchmod(fd, _FILE_MODE)
            self.log_fh = os.fdopen(fd, "w", encoding="utf-8", errors="replace")
            self.ctx._log_stream = self.log_fh
            if self.standalone:
                faulthandler.enable(file=self.log_fh)  # a native crash still leaves a traceback
        except OSError as exc:
            self.output_error = (
                f"output directory {self.out_dir} is not writable: {exc.strerror or exc.__class__.__name__}"
            )
            self.log_fh = None

    # -- signals and watchdog
    def install_guards(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            if self.timeout:  # no signals outside the main thread: a timer thread is the best we can do
                self._timer = threading.Timer(self.timeout, self._on_timeout)
                self._timer.daemon = True
                self._timer.start()
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)
        if self.timeout:
            # the watchdog is SIGALRM, not a thread: a thread needs the GIL, which native code stuck
            # in a loop may hold; signals reach the main thread whenever that code polls for them
            self._old_handlers[signal.SIGALRM] = signal.signal(signal.SIGALRM, self._on_signal)
            signal.setitimer(signal.ITIMER_REAL, self.timeout)
        # The Python handler only runs between bytecodes of the main thread, which can be stuck in a
        # long native call (a CUDA sync on a hung GPU). The wakeup fd is written by the C-level
        # handler immediately, so a watcher thread reacts within milliseconds.
        r, w = os.pipe()
        os.set_blocking(w, False)
        self._wake_fds = (r, w)
        self._old_wakeup = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        threading.Thread(target=self._watch_wakeup, args=(r,), daemon=True, name="signal-watch").start()

    def remove_guards(self) -> None:
        if self._timer:
            self._timer.cancel()
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.SIGALRM in self._old_handlers:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        if self._wake_fds:
            signal.set_wakeup_fd(self._old_wakeup if self._old_wakeup is not None else -1)
            for fd in self._wake_fds:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def _watch_wakeup(self, fd: int) -> None:
        while not self._finalized.is_set():
            try:
                data = os.read(fd, 64)
            except OSError:
                return
            if not data:
                return
            for b in data:
                if b == signal.SIGALRM:
                    self._on_timeout()
                elif b in (signal.SIGTERM, signal.SIGINT):
                    self._interrupt(f"interrupted by {signal.Signals(b).name}")

    def _on_signal(self, signum, frame) -> None:  # noqa: ARG002
        # Runs in the main thread: between bytecodes, or when native code polls for signals while
        # holding the GIL (then the watcher thread cannot run, so this path must do the work).
        handled = (
            self._on_timeout()
            if signum == signal.SIGALRM
            else self._interrupt(f"interrupted by {signal.Signals(signum).name}")
        )
        if not handled and not self._finalizing:
            # The watcher thread got there first and needs the GIL to finish; returning into native
            # code that never releases it would starve that thread. Wait here (GIL released).
            self._finalized.wait(30)

    def _on_timeout(self) -> bool:
        self.suite_code = self.suite_code or "SUITE_TIMEOUT"
        return self._interrupt(f"timed out after {fmt(self.timeout)} s (during: {self.ctx.phase})")

    def _interrupt(self, reason: str) -> bool:
        """Exactly one of main-thread handler / watcher thread / watchdog does the work; returns
        whether this caller did."""
        if not self._claim.acquire(blocking=False):
            return False
        if self._finalizing:
            return True  # the normal end is being written right now; it finishes in milliseconds
        with self._fin_lock:
            if self._finalized.is_set():
                return True
            self.ctx.frozen = True
            self.ctx.log(f"{reason}: stopping child processes and removing scratch files")
            self.ctx.kill_children()
            self.ctx.cleanup_scratch()
            code = self.finalize(reason)
        sys.stdout.flush()
        if self.standalone:
            os._exit(code)
        return True

    # -- the end
    def finalize(self, suite_error: str | None) -> int:
        """Build, write and print the result under one lock, in the order the contract needs: the
        result file, the log, the termination log, stdout. Once only; later calls get the exit code."""
        with self._fin_lock:
            if self._finalized.is_set():
                return self.exit_code if self.exit_code is not None else EXIT_ERROR
            self._finalizing = True
            ctx = self.ctx
            if self.output_error:
                suite_error = self.output_error
            checks = list(ctx.checks)
            result = self._result(checks, suite_error)
            have_files = self.log_fh is not None
            result_path = self._write_result(result) if have_files else None
            log_path = self.log_path if have_files else None
            summary = build_summary(result, checks, ctx.summary_metric_keys, log_path, result_path)
            line = summary_line(summary)
            ctx.log(f"verdict: {result['status'].upper()} - {result['reason']} ({fmt(result['duration_s'])} s)")
            if have_files:
                self._close_log(line)
            self._print(summary, line, result_path, log_path)
            self.exit_code = EXIT_CODES[result["status"]]
            self.result = result
            self.summary = summary
            self._finalized.set()
            return self.exit_code

    def _result(self, checks: list, suite_error: str | None) -> dict:
        """The full result ($defs/result) of the checks so far and the suite-level error, if any."""
        ctx = self.ctx
        finished = utcnow()
        key_checks = tuple(getattr(ctx, "key_checks", ()) or ())
        status, reason = decide(checks, suite_error, key_checks)
        scode = (self.suite_code or "SUITE_ERROR") if suite_error else None
        env = dict(ctx.environment)
        for key in ("gpu_model", "gpu_count", "driver", "cuda", "torch", "nccl", "hostname"):
            env.setdefault(key, None)  # required by the schema even when collection failed
        result = {
            "schema_version": SCHEMA_VERSION,
            "suite": self.suite,
            "node": self.args.node,
            "started_at": iso(self.started),
            "finished_at": iso(finished),
            "duration_s": round(time.monotonic() - self.t0, 3),
            "status": status,
            "reason": reason,
            "code": verdict_code(status, checks, scode, key_checks),
            "action": verdict_action(status, checks, scode),
            "incomplete": is_incomplete(checks),
            "checks": [c.to_dict() for c in checks],
            "metrics": dict(ctx.metrics),
            "environment": env,
            "suite_version": ctx.environment.get("suite_version") or suite_version(),
            "warnings": list(ctx.warnings),
        }
        result["environment"].pop("suite_version", None)
        if ctx.peer:  # a peer test: the other node of the pair (optional field, schema_version 1)
            result["peer"] = ctx.peer
        return result

    def _write_result(self, result: dict) -> str | None:
        """The result file, atomically; None (and a warning in the result) when it cannot be written."""
        try:
            atomic_write(self.result_path, (json.dumps(result, indent=2, default=str) + "\n").encode())
            return self.result_path
        except OSError as exc:
            self.ctx.warnings.append(one_line(f"cannot write result file: {exc}"))
            result["warnings"] = list(self.ctx.warnings)
            return None

    def _close_log(self, line: str) -> None:
        """End the streamed log with the summary line and rename it into place."""
        try:
            self.ctx._log_stream = None
            self.log_fh.write(line + "\n")
            self.log_fh.flush()
            os.fsync(self.log_fh.fileno())
            if self.standalone:
                faulthandler.disable()
            self.log_fh.close()
            os.replace(self.log_tmp, self.log_path)
        except (OSError, ValueError) as exc:
            sys.stderr.write(f"cannot finish log file: {exc}\n")
            try:
                os.unlink(self.log_tmp)
            except OSError:
                pass

    def _print(self, summary: dict, line: str, result_path: str | None, log_path: str | None) -> None:
        """The summary in the termination log, and as the last stdout line."""
        err = write_termination_log(
            self.args.termination_log, json.dumps(summary, separators=(",", ":"), ensure_ascii=True)
        )
        if err:
            sys.stderr.write(err + "\n")
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
            if result_path:  # for people: where the files went (the summary line is for machines)
                sys.stderr.write(f"result: {result_path}\nlog: {log_path}\n")
        except (OSError, ValueError):
            pass


def run_suite(
    suite: str,
    description: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[Context], None],
    argv: list[str] | None = None,
    default_timeout: Callable[[argparse.Namespace], float] | None = None,
    standalone: bool = False,
) -> int:
    """Parse arguments, run the suite, write everything, return the exit code (never raises)."""
    # Long: the contract's one entry point: parse, run, and on every path finalize; kept in one piece on purpose.
    parser = make_parser(suite, description)
    add_arguments(parser)
    arg_error = None
    try:
        args = parser.parse_args(argv)
    except _ArgError as exc:
        arg_error = f"invalid arguments: {exc}"
        args = _fallback_args(suite)
        # suite-specific attributes are absent; the suite is not run
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    runner = _Runner(
        suite, args, default_timeout(args) if (default_timeout and not arg_error) else None, standalone
    )
    ctx = runner.ctx
    runner.open_output()
    try:
        ctx.environment = base_environment(args)
        ctx.environment["suite_version"] = suite_version()
    except Exception as exc:  # never let bookkeeping break the contract
        ctx.environment = {"hostname": socket.gethostname()}
        ctx.warn(f"environment collection failed: {exc}")
    runner.install_guards()
    suite_error = arg_error or runner.output_error
    try:
        if not suite_error:
            ctx.log(
                f"suite {suite} on node {args.node}, mode {args.device}, "
                f"suite_version {ctx.environment.get('suite_version')}"
            )
            run(ctx)
    except SuiteError as exc:
        suite_error = one_line(str(exc))
        runner.suite_code = exc.code
    except BaseException as exc:  # noqa: BLE001 - the contract: any crash becomes an error result
        if isinstance(exc, KeyboardInterrupt):
            suite_error = "interrupted by SIGINT"
        else:
            tb = traceback.format_exc()
            ctx.log(tb)
            suite_error = one_line(f"unexpected {type(exc).__name__}: {exc}")
            if _is_oom(exc):
                suite_error = one_line(f"out of memory: {exc}")
    finally:
        try:
            ctx.kill_children()
        finally:
            ctx.cleanup_scratch()
    code = runner.finalize(suite_error)
    runner.remove_guards()
    return code


def _is_oom(exc: BaseException) -> bool:
    return (
        isinstance(exc, MemoryError)
        or type(exc).__name__ == "OutOfMemoryError"
        or "out of memory" in str(exc).lower()
    )


def main_entry(suite: str, description: str, add_arguments, run, default_timeout=None) -> None:
    sys.exit(run_suite(suite, description, add_arguments, run, None, default_timeout, standalone=True))
