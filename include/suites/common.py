"""Shared harness of the validation suites: CLI, checks, verdict, output files, signals, exit codes.

Every suite module defines `add_arguments(parser)` and `run(ctx)` and calls `run_suite(...)`. The
harness guarantees, whatever happens inside `run` (exception, SIGTERM, hang, unwritable directory):

* a result JSON and a log under <output-dir>/<suite>/<node>/<suite>_<node>_<unix-ts>.json|.log,
  written atomically (temp file + rename; the log is streamed to a hidden temp file and renamed);
* a compact summary (< 4096 bytes, the kubelet limit) in the termination log and as the last stdout
  line, prefixed "CLUSTER_DOCTOR_RESULT ";
* exit code 0 pass, 1 fail, 2 error. `error` is never hidden as `pass`.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import faulthandler
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from . import SCHEMA_VERSION, codes
from .version import suite_version

EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2
EXIT_CODES = {"pass": EXIT_PASS, "fail": EXIT_FAIL, "error": EXIT_ERROR}
CHECK_STATUSES = ("pass", "fail", "warn", "error", "skip")
SUMMARY_PREFIX = "CLUSTER_DOCTOR_RESULT "
# kubelet keeps at most 4096 bytes of a termination message; stay clearly below it.
TERMINATION_LIMIT = 4096
SUMMARY_BUDGET = 4000
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
DEFAULT_OUTPUT_DIR = "/data/continuous_validation"
HERE = os.path.dirname(os.path.abspath(__file__))


class SuiteError(Exception):
    """The suite cannot judge the node (tool missing, garbage output, ...): status `error`.

    `code` (codes.yaml) says why in machine-readable form; SUITE_ERROR when not given."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.output = ""  # what a tool printed before it was stopped (run_tool on timeout)


def utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def iso(ts: _dt.datetime) -> str:
    return ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def one_line(text: Any, limit: int = 300) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def fmt(x: Any) -> str:
    """Numbers for messages: 4 significant digits, no exponent for ordinary magnitudes."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int):
        return str(x)
    if x != x:  # NaN
        return "nan"
    if abs(x) >= 1e4:
        return f"{x:.0f}"
    if 0 < abs(x) < 1e-3:
        return f"{x:.3g}"
    return f"{x:.4g}"


@dataclass
class Check:
    name: str
    status: str
    value: Any = None
    unit: str | None = None
    threshold: str | None = None
    message: str = ""
    device: str | None = None
    code: str | None = None  # stable machine-readable code of a non-pass check (codes.yaml)

    def __post_init__(self) -> None:
        if self.status not in CHECK_STATUSES:
            raise ValueError(f"bad check status {self.status!r}")
        if self.status == "pass":
            self.code = None
        elif not self.code:
            self.code = codes.resolve(self.name, self.status)
        if isinstance(self.value, float) and (
            self.value != self.value or self.value in (float("inf"), float("-inf"))
        ):
            # JSON has no NaN/inf: keep the fact in the message, the value as a string.
            self.value = str(self.value)
        elif isinstance(self.value, float):
            self.value = float(f"{self.value:.6g}")

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "status": self.status,
            "value": self.value,
            "unit": self.unit,
            "threshold": self.threshold,
            "message": self.message,
            "device": self.device,
            "code": self.code,
        }

    def headline(self) -> str:
        where = f"[{self.device}]" if self.device else ""
        msg = self.message or f"value {fmt(self.value)}{' ' + self.unit if self.unit else ''}" + (
            f" vs {self.threshold}" if self.threshold else ""
        )
        return f"{self.name}{where}: {msg}"


# --------------------------------------------------------------------------------------------------
# Context handed to a suite's run()
# --------------------------------------------------------------------------------------------------
class Context:
    def __init__(self, suite: str, args: argparse.Namespace, log_stream=None):
        self.suite = suite
        self.args = args
        self.node: str = args.node
        self.device_mode: str = args.device
        self.checks: list[Check] = []
        self.metrics: dict[str, Any] = {}
        self.summary_metric_keys: list[str] = []
        self.environment: dict[str, Any] = {}
        self.warnings: list[str] = []
        self.phase = "starting"
        self._lock = threading.RLock()
        self._log_stream = log_stream
        self._children: list[Any] = []
        self._scratch: list[str] = []
        self.frozen = False  # set when interrupted: results produced after that are not trusted

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
    ) -> Check:
        return self.record(Check(name, status, value, unit, threshold, message, device, code))

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

    # ---- judging helpers: the message always carries the number and the threshold
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
        return self._bounded(name, value, minimum, ">=", "<", unit=unit, device=device, basis=basis,
                             fail_status=fail_status, code=code)

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
        return self._bounded(name, value, maximum, "<=", ">", unit=unit, device=device, basis=basis,
                             fail_status=fail_status, code=code)

    def _bounded(self, name: str, value: float | None, limit: float | None, ok_rel: str, bad_rel: str, *,
                 unit: str, device: str | None, basis: str, fail_status: str,
                 code: str | None = None) -> Check:
        """One check of value against a floor (">=") or a ceiling ("<="); `code` names the fault
        when the bound is missed (default: by check name, codes.yaml)."""
        note = f" ({basis})" if basis else ""
        if value is None:
            return self.check(name, "error", unit=unit, device=device, message="no measurement",
                              code="NO_MEASUREMENT")
        if limit is None:
            return self.check(name, "skip", value=value, unit=unit, device=device,
                              message=f"{fmt(value)} {unit}; no threshold{note}", code="BASELINE_MISSING")
        ok = value >= limit if ok_rel == ">=" else value <= limit
        rel = ok_rel if ok else bad_rel
        return self.check(
            name,
            "pass" if ok else fail_status,
            value=value,
            unit=unit,
            threshold=f"{ok_rel} {fmt(limit)}",
            device=device,
            message=f"{fmt(value)} {unit} {rel} {fmt(limit)} {unit}{note}",
            code=None if ok else code,
        )

    def check_gpu_count(self, found: int, *, source: str) -> bool:
        """Visible GPUs vs expectation. Returns False when the suite cannot continue on GPUs."""
        expected = self.args.expected_gpus
        if self.cpu and not expected:
            # CPU mode expects no GPU unless --expected-gpus says otherwise: zero is a met expectation
            self.check(
                "gpu_count",
                "pass",
                value=found,
                unit="GPUs",
                threshold=">= 0",
                message=f"CPU mode: no GPU required; {found} visible via {source}",
            )
            return True
        want = expected if expected else 1
        thr = f"== {expected}" if expected else ">= 1"
        if found < want:
            what = f"expected {expected} GPUs" if expected else "expected at least 1 GPU"
            self.check(
                "gpu_count",
                "fail",
                value=found,
                unit="GPUs",
                threshold=thr,
                message=f"{what}, found {found} (via {source})",
            )
            return found > 0
        if expected and found > expected:
            self.check(
                "gpu_count",
                "warn",
                value=found,
                unit="GPUs",
                threshold=thr,
                message=f"expected {expected} GPUs, found {found} (via {source}): more than allocatable",
            )
            return True
        self.check(
            "gpu_count",
            "pass",
            value=found,
            unit="GPUs",
            threshold=thr,
            message=f"{found} GPU(s) visible via {source}",
        )
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
        """Run a tool in its own session (so SIGTERM can take its whole process group down).

        Raises FileNotFoundError when the binary is missing; returns rc, stdout, stderr; on timeout
        the group is killed and SuiteError raised, carrying what the tool printed until then in
        `.output` (a hung tool may already have said why, e.g. NCCL falling back to sockets)."""
        self.log("$ " + " ".join(argv))
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        self.register_child(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _terminate(proc, signal.SIGTERM)
            if not _wait_dead(proc, 3):
                _terminate(proc, signal.SIGKILL)
            out, err = proc.communicate()
            exc = SuiteError(f"{os.path.basename(argv[0])} did not finish within {fmt(timeout)} s")
            exc.output = (out or "") + "\n" + (err or "")
            raise exc from None
        finally:
            self.unregister_child(proc)
        return proc.returncode, out, err


def _terminate(proc: Any, sig: int) -> None:
    try:
        if isinstance(proc, subprocess.Popen):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, sig)  # tools run in their own session
                except (ProcessLookupError, PermissionError):
                    proc.send_signal(sig)
        elif hasattr(proc, "is_alive"):  # multiprocessing.Process
            if proc.is_alive():
                os.kill(proc.pid, sig)
    except (ProcessLookupError, OSError, ValueError):
        pass


def _wait_dead(proc: Any, timeout: float) -> bool:
    try:
        if isinstance(proc, subprocess.Popen):
            proc.wait(timeout=timeout)
            return True
        if hasattr(proc, "join"):
            proc.join(timeout)
            return not proc.is_alive()
    except (subprocess.TimeoutExpired, OSError, ValueError, AssertionError):
        return False
    return True


# --------------------------------------------------------------------------------------------------
# Verdict, result and summary
# --------------------------------------------------------------------------------------------------
_ORDER = {"fail": 0, "error": 1, "warn": 2, "skip": 3, "pass": 4}


def decide(checks: list[Check], suite_error: str | None) -> tuple[str, str]:
    """Overall status and one-line reason.

    * a suite-level error (exception, SIGTERM, timeout, unusable output dir) -> error: the run is
      incomplete, even if some checks had already failed (the reason names them);
    * any failing check -> fail, reason = first failing check with device and number;
    * any check in error -> error; nothing actually verified (no pass) -> error; else pass.
    """
    fails = [c for c in checks if c.status == "fail"]
    errors = [c for c in checks if c.status == "error"]
    if suite_error:
        reason = suite_error
        if fails:
            reason += f"; {len(fails)} check(s) had failed before, first: {fails[0].headline()}"
        return "error", one_line(reason)
    if fails:
        more = f" (+{len(fails) - 1} more failing checks)" if len(fails) > 1 else ""
        return "fail", one_line(fails[0].headline() + more)
    if errors:
        more = f" (+{len(errors) - 1} more checks in error)" if len(errors) > 1 else ""
        return "error", one_line(errors[0].headline() + more)
    passed = sum(c.status == "pass" for c in checks)
    if not passed:
        return "error", one_line(f"nothing could be verified: {len(checks)} check(s), none passed")
    warns = sum(c.status == "warn" for c in checks)
    skipped = [c for c in checks if c.status == "skip"]
    if skipped:
        # a pass that rests on checks that never ran must read differently from a clean pass
        return "pass", one_line(
            f"pass, {len(skipped)} check(s) could not run: "
            + "; ".join(c.headline() for c in skipped[:3])
            + (f"; +{len(skipped) - 3} more" if len(skipped) > 3 else "")
            + f" ({passed} passed" + (f", {warns} warning(s))" if warns else ")"),
            400,
        )
    return "pass", f"all {passed} checks passed" + (f", {warns} warning(s)" if warns else "")


def is_incomplete(checks: list[Check]) -> bool:
    """True when any check could not run: such a pass is not a clean pass."""
    return any(c.status == "skip" for c in checks)


def verdict_code(status: str, checks: list[Check], suite_code: str | None = None) -> str | None:
    """The code the verdict rests on: the suite-level error's, else the first failing check's, else
    the first erroring check's; None for a pass."""
    if status == "pass":
        return None
    if suite_code:
        return suite_code
    for want in ("fail", "error"):
        for c in checks:
            if c.status == want and c.code:
                return c.code
    return "SUITE_ERROR" if status == "error" else None


def counts(checks: Iterable[Check]) -> dict[str, int]:
    out = {s: 0 for s in CHECK_STATUSES}
    for c in checks:
        out[c.status] += 1
    return out


def _compact(c: Check) -> dict:
    d: dict[str, Any] = {"name": c.name, "status": c.status}
    if c.device is not None:
        d["device"] = c.device
    if c.value is not None:
        d["value"] = c.value if not isinstance(c.value, str) else one_line(c.value, 60)
    if c.unit:
        d["unit"] = c.unit
    if c.threshold:
        d["threshold"] = c.threshold
    if c.status != "pass" and c.message:
        d["message"] = one_line(c.message, 160)
    if c.code:
        d["code"] = c.code
    return d


def _size(obj: dict) -> int:
    return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=True).encode())


def build_summary(
    result: dict,
    checks: list[Check],
    key_metrics: list[str],
    log_path: str | None,
    result_path: str | None,
    budget: int = SUMMARY_BUDGET,
) -> dict:
    """The termination message: key figures and the non-pass checks first, always < budget bytes.

    Truncation is deterministic: checks are ordered fail, error, warn, skip, pass (then by position)
    and cut from the end; then metrics, then long strings. `truncated` says something was cut."""
    ordered = sorted(enumerate(checks), key=lambda ic: (_ORDER[ic[1].status], ic[0]))
    compact = [_compact(c) for _, c in ordered]
    metrics = {k: result["metrics"][k] for k in key_metrics if k in result["metrics"]}
    env = result.get("environment", {})
    summary = {
        "schema_version": result["schema_version"],
        "suite": result["suite"],
        "node": result["node"],
        "status": result["status"],
        "reason": result["reason"],
        "started_at": result["started_at"],
        "finished_at": result["finished_at"],
        "duration_s": result["duration_s"],
        "suite_version": result["suite_version"],
        "gpu_model": env.get("gpu_model"),
        "gpu_count": env.get("gpu_count"),
        "metrics": metrics,
        "checks": compact,
        "check_counts": counts(checks),
        "incomplete": bool(result.get("incomplete")),
        "code": result.get("code"),
        "truncated": False,
        "log_path": log_path,
        "result_path": result_path,
    }
    if _size(summary) <= budget:
        return summary
    summary["truncated"] = True
    summary["checks_omitted"] = 0
    # largest prefix of the ordered checks that fits (binary search: sizes grow with the prefix)
    lo, hi = 0, len(compact)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        summary["checks"] = compact[:mid]
        summary["checks_omitted"] = len(compact) - mid
        if _size(summary) <= budget:
            lo = mid
        else:
            hi = mid - 1
    summary["checks"] = compact[:lo]
    summary["checks_omitted"] = len(compact) - lo
    if _size(summary) <= budget:
        return summary
    # still too big without checks: shrink metrics, then strings
    for k in sorted(summary["metrics"], reverse=True):
        if _size(summary) <= budget:
            break
        del summary["metrics"][k]
    for key, limit in (
        ("reason", 400),
        ("log_path", 300),
        ("result_path", 300),
        ("gpu_model", 80),
        ("node", 120),
        ("suite_version", 64),
        ("reason", 120),
    ):
        if _size(summary) <= budget:
            break
        if isinstance(summary.get(key), str):
            summary[key] = one_line(summary[key], limit)
    return summary


def summary_line(summary: dict) -> str:
    return SUMMARY_PREFIX + json.dumps(summary, separators=(",", ":"), ensure_ascii=True)


# --------------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------------
def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


_FILE_MODE = 0o666 & ~_umask()  # mkstemp creates 0600; results must stay readable like normal files


def atomic_write(path: str, data: bytes) -> None:
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, _FILE_MODE)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_termination_log(path: str, text: str) -> str | None:
    """Returns an error string instead of raising: a lost termination log must not change the verdict."""
    if not path:
        return None
    if path == DEFAULT_TERMINATION_LOG and not os.path.exists(path):
        return None  # not in a Kubernetes container (kubelet creates the file): nothing to do
    data = text.encode()
    try:
        if os.path.exists(path):
            # kubelet bind-mounts this file: rename over it is impossible, write in place
            with open(path, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        else:
            parent = os.path.dirname(os.path.abspath(path))
            os.makedirs(parent, exist_ok=True)
            atomic_write(path, data)
    except OSError as exc:
        return f"cannot write termination log {path}: {exc.strerror or exc}"
    return None


def safe_name(s: str) -> str:
    out = "".join(ch if ch.isalnum() or ch in "-_.@" else "_" for ch in s)
    return out.strip(".") or "unknown"


# --------------------------------------------------------------------------------------------------
# Environment and GPU inventory (cheap; no torch import here)
# --------------------------------------------------------------------------------------------------
def _pkg_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


def base_environment(args: argparse.Namespace) -> dict:
    env: dict[str, Any] = {
        "gpu_model": None,
        "gpu_count": 0,
        "driver": None,
        "cuda": None,
        "torch": _pkg_version("torch"),
        "nccl": None,
        "hostname": socket.gethostname(),
        "mode": args.device,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "cpu_count": os.cpu_count(),
        "gpu_model_label": args.gpu_model,
        "expected_gpus": args.expected_gpus,
    }
    for key, var in (
        ("pod", "POD_NAME"),
        ("image", "CLUSTER_DOCTOR_IMAGE"),
        ("slurm_job_id", "SLURM_JOB_ID"),
        ("cuda_visible_devices", "CUDA_VISIBLE_DEVICES"),
    ):
        if os.environ.get(var):
            env[key] = os.environ[var]
    return env


class NvmlUnavailable(Exception):
    pass


def nvml_init():
    """Import and initialise NVML; NvmlUnavailable with the cause when that is impossible."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError as exc:
        raise NvmlUnavailable(f"nvidia-ml-py not installed ({exc})") from exc
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        raise NvmlUnavailable(f"NVML init failed: {exc}") from exc
    return pynvml


def _s(x: Any) -> str:
    return x.decode(errors="replace") if isinstance(x, bytes) else str(x)


def gpu_inventory() -> tuple[list[dict], str | None, str]:
    """(gpus, driver, source). Each gpu: index, name, uuid, pci_bus_id. Never raises."""
    try:
        nv = nvml_init()
        try:
            driver = _s(nv.nvmlSystemGetDriverVersion())
            gpus = []
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                gpus.append(
                    {
                        "index": i,
                        "name": _s(nv.nvmlDeviceGetName(h)),
                        "uuid": _s(nv.nvmlDeviceGetUUID(h)),
                        "pci_bus_id": _s(nv.nvmlDeviceGetPciInfo(h).busId),
                    }
                )
            return gpus, driver, "NVML"
        finally:
            try:
                nv.nvmlShutdown()
            except Exception:
                pass
    except Exception:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            p = subprocess.run(
                [smi, "--query-gpu=index,name,uuid,pci.bus_id,driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            gpus, driver = [], None
            if p.returncode == 0:
                for line in p.stdout.splitlines():
                    parts = [x.strip() for x in line.split(",")]
                    if len(parts) >= 5 and parts[0].isdigit():
                        gpus.append(
                            {
                                "index": int(parts[0]),
                                "name": parts[1],
                                "uuid": parts[2],
                                "pci_bus_id": parts[3],
                            }
                        )
                        driver = parts[4]
                return gpus, driver, "nvidia-smi"
        except (OSError, subprocess.SubprocessError):
            pass
    return [], None, "none (no NVML, no nvidia-smi)"


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------
def _env(name: str, default: Any = None) -> Any:
    v = os.environ.get(name)
    return v if v not in (None, "") else default


class _ArgError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D401 - argparse API
        raise _ArgError(message)


def make_parser(suite: str, description: str) -> argparse.ArgumentParser:
    p = _Parser(
        prog=f"python -m cluster_doctor_suites.{suite}",
        description=description,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("common options (environment variables in brackets)")
    g.add_argument(
        "--node",
        default=_env("NODE_NAME", _env("SLURMD_NODENAME", socket.gethostname())),
        help="node name used in paths and results [NODE_NAME, SLURMD_NODENAME, else hostname]",
    )
    g.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default=_env("CLUSTER_DOCTOR_DEVICE", "cuda"),
        help="cuda on GPU nodes; cpu is the explicit CPU mode for tests and laptops [CLUSTER_DOCTOR_DEVICE]",
    )
    g.add_argument(
        "--output-dir",
        default=_env("CLUSTER_DOCTOR_OUTPUT_DIR", DEFAULT_OUTPUT_DIR),
        help="base directory of results and logs [CLUSTER_DOCTOR_OUTPUT_DIR]",
    )
    g.add_argument(
        "--termination-log",
        default=_env("CLUSTER_DOCTOR_TERMINATION_LOG", DEFAULT_TERMINATION_LOG),
        help="where the < 4 KiB summary goes; '' disables; the default is only written when "
        "it exists (inside a Kubernetes container) [CLUSTER_DOCTOR_TERMINATION_LOG]",
    )
    g.add_argument(
        "--baselines",
        default=_env("CLUSTER_DOCTOR_BASELINES", os.path.join(HERE, "baselines.yaml")),
        help="baseline file [CLUSTER_DOCTOR_BASELINES]",
    )
    # string defaults go through type=, so a bad environment value becomes an "invalid arguments" error
    g.add_argument(
        "--expected-gpus",
        type=int,
        default=_env("CLUSTER_DOCTOR_EXPECTED_GPUS"),
        help="GPUs the node must show (the node's allocatable count) [CLUSTER_DOCTOR_EXPECTED_GPUS]",
    )
    g.add_argument(
        "--gpu-model",
        default=_env("CLUSTER_DOCTOR_GPU_MODEL"),
        help="GPU model, e.g. the nvidia.com/gpu.product label; else detected [CLUSTER_DOCTOR_GPU_MODEL]",
    )
    g.add_argument(
        "--timeout",
        type=float,
        default=_env("CLUSTER_DOCTOR_TIMEOUT"),
        help="seconds before the suite gives up with an error result (watchdog) [CLUSTER_DOCTOR_TIMEOUT]",
    )
    return p


def _fallback_args(suite: str) -> argparse.Namespace:
    """Arguments good enough to report an error when the command line itself is invalid."""
    return argparse.Namespace(
        node=_env("NODE_NAME", _env("SLURMD_NODENAME", socket.gethostname())),
        device=_env("CLUSTER_DOCTOR_DEVICE", "cuda"),
        output_dir=_env("CLUSTER_DOCTOR_OUTPUT_DIR", DEFAULT_OUTPUT_DIR),
        termination_log=_env("CLUSTER_DOCTOR_TERMINATION_LOG", DEFAULT_TERMINATION_LOG),
        baselines=None,
        expected_gpus=None,
        gpu_model=_env("CLUSTER_DOCTOR_GPU_MODEL"),
        timeout=None,
    )


# --------------------------------------------------------------------------------------------------
# The runner
# --------------------------------------------------------------------------------------------------
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
        with self._fin_lock:
            if self._finalized.is_set():
                return self.exit_code if self.exit_code is not None else EXIT_ERROR
            self._finalizing = True
            ctx = self.ctx
            if self.output_error:
                suite_error = self.output_error
            finished = utcnow()
            checks = list(ctx.checks)
            status, reason = decide(checks, suite_error)
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
                "code": verdict_code(status, checks, self.suite_code if suite_error else None),
                "incomplete": is_incomplete(checks),
                "checks": [c.to_dict() for c in checks],
                "metrics": dict(ctx.metrics),
                "environment": env,
                "suite_version": ctx.environment.get("suite_version") or suite_version(),
                "warnings": list(ctx.warnings),
            }
            result["environment"].pop("suite_version", None)
            have_files = self.log_fh is not None
            result_path = log_path = None
            if have_files:
                try:
                    atomic_write(
                        self.result_path, (json.dumps(result, indent=2, default=str) + "\n").encode()
                    )
                    result_path = self.result_path
                except OSError as exc:
                    ctx.warnings.append(one_line(f"cannot write result file: {exc}"))
                    result["warnings"] = list(ctx.warnings)
                log_path = self.log_path
            summary = build_summary(result, checks, ctx.summary_metric_keys, log_path, result_path)
            line = summary_line(summary)
            ctx.log(f"verdict: {status.upper()} - {reason} ({fmt(result['duration_s'])} s)")
            if have_files:
                try:
                    ctx._log_stream = None
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
            err = write_termination_log(
                self.args.termination_log, json.dumps(summary, separators=(",", ":"), ensure_ascii=True)
            )
            if err:
                sys.stderr.write(err + "\n")
            try:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            except (OSError, ValueError):
                pass
            self.exit_code = EXIT_CODES[status]
            self.result = result
            self.summary = summary
            self._finalized.set()
            return self.exit_code


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
