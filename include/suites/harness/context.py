"""Context: what a suite's run() records its checks, metrics, warnings and log lines through, and
the children and scratch files the runner must clean up whatever happens."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

from . import checks, gpu_expectation
from .checks import Check
from .text import one_line, utcnow
from .tools import _terminate, _wait_dead, run_tool


# --------------------------------------------------------------------------------------------------
# Context handed to a suite's run()
# --------------------------------------------------------------------------------------------------
class Context:
    def __init__(self, suite: str, args: argparse.Namespace, log_stream=None):
        self.suite = suite
        self.args = args
        self.node: str = args.node
        self.device_mode: str = args.device
        self.peer: str | None = None  # peer tests (fabric_peer): the other node, recorded as the result's `peer`
        self.checks: list[Check] = []
        self.metrics: dict[str, Any] = {}
        self.summary_metric_keys: list[str] = []
        self.environment: dict[str, Any] = {}
        self.warnings: list[str] = []
        # the suite's key checks (name patterns): one not judged for want of a baseline makes the run
        # an error, never a pass (harness/verdict.py)
        self.key_checks: tuple[str, ...] = ()
        self.phase = "starting"
        self._lock = threading.RLock()
        self._log_stream = log_stream
        self._children: list[Any] = []
        self._scratch: list[str] = []
        self.frozen = False  # set when interrupted: results produced after that are not trusted

    @property
    def expected_gpus(self) -> int | None:
        """The GPUs this node must show (gpu_expectation): a node pool's --expect gpus=N, else the node's
        own count (--node-gpus), else --expected-gpus, else the SKU's count by the --gpu-model label."""
        return gpu_expectation.resolve(self.args, self.cpu).count

    @property
    def cpu(self) -> bool:
        return self.device_mode == "cpu"

    # ---- logging: stdout and the log file get the same lines
    def log(self, msg: str) -> None:
        stamp = utcnow().strftime("%H:%M:%S.%f")[:-3]
        lines = [f"{stamp} [{self.suite}] {line}" for line in str(msg).splitlines() or [""]]
        text = "\n".join(lines) + "\n"
        got = self._lock.acquire(timeout=5)  # a signal path must never deadlock on the log
        try:
            try:
                sys.stdout.write(text)
                sys.stdout.flush()
            except (OSError, ValueError):
                pass
            if self._log_stream is not None:
                try:
                    self._log_stream.write(text)
                    self._log_stream.flush()
                except (OSError, ValueError):
                    pass
        finally:
            if got:
                self._lock.release()

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.log(f"-- {phase}")

    # ---- results
    def check(
        self,
        name: str,
        status: str,
        *,
        value: Any = None,
        unit: str | None = None,
        threshold: str | None = None,
        message: str = "",
        device: str | None = None,
        code: str | None = None,
        action: str | None = None,
    ) -> Check:
        return self.record(Check(name, status, value, unit, threshold, message, device, code, action))

    def record(self, c: Check) -> Check:
        """Add a check built elsewhere (the pure judges return Check objects)."""
        c.message = one_line(c.message, 500)
        with self._lock:
            if self.frozen:  # e.g. fio killed by our own SIGTERM handling reports "no I/O": not a verdict
                return c
            self.checks.append(c)
        icon = {"pass": "PASS", "fail": "FAIL", "warn": "WARN", "error": "ERROR", "skip": "SKIP"}[c.status]
        self.log(f"{icon:5} {c.headline()}")
        return c

    def metric(self, key: str, value: Any, summary: bool = False) -> None:
        if self.frozen:
            return
        if isinstance(value, float):
            # 6 significant digits: tiny errors (1e-9) must not round to 0
            value = float(f"{value:.6g}") if value == value and abs(value) != float("inf") else str(value)
        self.metrics[key] = value
        if summary and key not in self.summary_metric_keys:
            self.summary_metric_keys.append(key)

    def warn(self, message: str) -> None:
        message = one_line(message, 400)
        if message not in self.warnings:
            self.warnings.append(message)
            self.log(f"WARNING {message}")

    # ---- judging helpers: the message always carries the number and the threshold (harness.checks)
    def at_least(
        self,
        name: str,
        value: float | None,
        minimum: float | None,
        *,
        unit: str,
        device: str | None = None,
        basis: str = "",
        fail_status: str = "fail",
        code: str | None = None,
    ) -> Check:
        return self.record(checks.at_least(name, value, minimum, unit=unit, device=device, basis=basis,
                                           fail_status=fail_status, code=code))

    def at_most(
        self,
        name: str,
        value: float | None,
        maximum: float | None,
        *,
        unit: str,
        device: str | None = None,
        basis: str = "",
        fail_status: str = "fail",
        code: str | None = None,
    ) -> Check:
        return self.record(checks.at_most(name, value, maximum, unit=unit, device=device, basis=basis,
                                          fail_status=fail_status, code=code))

    def check_gpu_count(self, found: int, *, source: str, models: Iterable[str | None] = ()) -> bool:
        """Visible GPUs vs what the node should have (gpu_expectation: `models` are the GPU names the
        suite detected, for the SKU's count). Returns False when the suite cannot continue on GPUs."""
        exp = gpu_expectation.resolve(self.args, self.cpu, models)
        expected = exp.count
        # where the bar comes from, when it is not simply the count this run was given
        basis = "" if exp.basis.startswith("--expected-gpus") or not expected else \
            f"; expected from {exp.basis}" + (f", the orchestrator saw {exp.given}" if exp.given else "")
        if self.cpu and not expected:
            # CPU mode expects no GPU unless --expected-gpus says otherwise: zero is a met expectation
            self.check("gpu_count", "pass", value=found, unit="GPUs", threshold=">= 0",
                       message=f"CPU mode: no GPU required; {found} visible via {source}")
            return True
        want = expected if expected else 1
        thr = f"== {expected}" if expected else ">= 1"
        if found < want:
            what = f"expected {expected} GPUs" if expected else "expected at least 1 GPU"
            self.check("gpu_count", "fail", value=found, unit="GPUs", threshold=thr,
                       message=f"{what}, found {found} (via {source}{basis})")
            return found > 0
        if expected and found > expected:
            self.check("gpu_count", "warn", value=found, unit="GPUs", threshold=thr,
                       message=f"expected {expected} GPUs, found {found} (via {source}{basis}): more than allocatable")
            return True
        if not expected:
            # at least one GPU, but nothing says how many this node should have: not proven complete
            self.check("gpu_count", "skip", value=found, unit="GPUs", threshold=thr, code="GPU_COUNT_UNVERIFIED",
                       message=f"{found} GPU(s) visible via {source}; no expected count "
                       "(--expected-gpus, --node-gpus, --expect gpus=N, or the model's expect.gpus)")
            return True
        self.check("gpu_count", "pass", value=found, unit="GPUs", threshold=thr,
                   message=f"{found} of {expected} expected GPU(s) visible via {source}{basis}")
        return True

    # ---- things to clean up on exit, SIGTERM or timeout
    def register_child(self, proc: Any) -> None:
        with self._lock:
            self._children.append(proc)

    def unregister_child(self, proc: Any) -> None:
        with self._lock:
            if proc in self._children:
                self._children.remove(proc)

    def register_scratch(self, path: str) -> None:
        with self._lock:
            self._scratch.append(path)

    def _snapshot(self, items: list) -> list:
        # bounded wait: on the interrupt path the main thread may hold the lock, suspended
        got = self._lock.acquire(timeout=2)
        try:
            return list(items)
        finally:
            if got:
                self._lock.release()

    def cleanup_scratch(self, path: str | None = None) -> None:
        paths = [path] if path else self._snapshot(self._scratch)
        for p in paths:
            shutil.rmtree(p, ignore_errors=True)
            if os.path.exists(p):  # a file, or rmtree lost a race: best effort
                try:
                    os.unlink(p)
                except OSError:
                    pass
            try:
                self._scratch.remove(p)
            except ValueError:
                pass

    def kill_children(self, grace: float = 3.0) -> None:
        children = self._snapshot(self._children)
        for proc in children:
            _terminate(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in children:
            if not _wait_dead(proc, max(0.0, deadline - time.monotonic())):
                _terminate(proc, signal.SIGKILL)
                _wait_dead(proc, 2.0)

    # ---- subprocess helper for external tools (fio, nvidia-smi, dcgmi, all_reduce_perf)
    def run_tool(
        self, argv: list[str], *, timeout: float, env: dict | None = None, cwd: str | None = None
    ) -> tuple[int, str, str]:
        """tools.run_tool, with the command logged and the process registered for cleanup."""
        self.log("$ " + " ".join(argv))
        return run_tool(argv, timeout=timeout, env=env, cwd=cwd, register=self.register_child,
                        unregister=self.unregister_child)
