"""nvbandwidth (NVIDIA/nvbandwidth): its plain-text output read into one matrix per testcase, and
each matrix judged against the SKU's floor and the node's own median — a slow GPU pair is named by
its two GPUs, a host link by its GPU.

Output as the tool prints it (output.cpp, inline_common.h, v0.2-v0.10): `Running <testcase>.`, a
description line (`memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)`), a header of column labels,
one row per label with values or `N/A`, then `SUM <testcase> <sum>` (and from v0.9
`COEFFICIENT_OF_VARIATION ...`). A testcase that cannot run prints `Waived:` (v0.6+) or
`Waiving <testcase>.` (v0.2); one that throws prints `Error: <message>`; an unknown name
`ERROR: Testcase <name> not found!`. Exit codes (nvbandwidth.cpp, error_handling.h): 0 after
every testcase (also with waived or erroring ones), 1 on invalid arguments and on every failed
CUDA / NVML call or ASSERT — including the data verification after each copy
(`ASSERT in expression h_errorFlag == 0 in ... memcmpPatternHelper`, preceded by `Invalid value
when checking the pattern at <address>`): corrupted copies are a finding, not a tool failure.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

from ..harness.checks import Check
from ..harness.text import fmt, one_line

CODES = ("NVBW_D2D_LOW", "NVBW_HOST_LOW", "NVBW_SLOW_VS_PEERS", "NVBW_NO_PEER_ACCESS", "NVBW_DATA_MISMATCH",
         "NVBW_TESTCASE_ERROR", "NVBW_NOT_RUN", "NVBW_NOT_APPLICABLE", "NVBW_FAILED", "BASELINE_MISSING",
         "GPU_HW_ERROR", "NVBW_NOT_MEASURED")


@dataclass(frozen=True)
class Testcase:
    """How one nvbandwidth testcase is judged: its check name, whether it measures GPU pairs
    (`d2d`) or each GPU's host link (`host`), and the baselines.yaml metric of its floor."""

    key: str
    check: str
    kind: str  # "d2d" | "host"
    floor_metric: str


TESTCASES = {t.key: t for t in (
    Testcase("device_to_device_memcpy_read_ce", "nvbw_d2d_read_ce", "d2d", "nvbw_d2d_ce_gbps"),
    Testcase("device_to_device_memcpy_write_ce", "nvbw_d2d_write_ce", "d2d", "nvbw_d2d_ce_gbps"),
    Testcase("device_to_device_memcpy_read_sm", "nvbw_d2d_read_sm", "d2d", "nvbw_d2d_sm_gbps"),
    Testcase("device_to_device_memcpy_write_sm", "nvbw_d2d_write_sm", "d2d", "nvbw_d2d_sm_gbps"),
    Testcase("host_to_device_memcpy_ce", "nvbw_h2d_ce", "host", "nvbw_host_ce_gbps"),
    Testcase("device_to_host_memcpy_ce", "nvbw_d2h_ce", "host", "nvbw_host_ce_gbps"),
)}
DEFAULT_TESTCASES = ("device_to_device_memcpy_read_ce", "device_to_device_memcpy_write_ce",
                     "device_to_device_memcpy_read_sm", "host_to_device_memcpy_ce", "device_to_host_memcpy_ce")
# CUDA error texts that mean the hardware is at fault (the tool's CU_ASSERT / CUDA_ASSERT lines)
HW_ERROR = re.compile(r"\[(CUDA_ERROR_ECC_UNCORRECTABLE|CUDA_ERROR_HARDWARE_STACK_ERROR|CUDA_ERROR_NVLINK_UNCORRECTABLE|"
                      r"CUDA_ERROR_ILLEGAL_INSTRUCTION|CUDA_ERROR_LAUNCH_FAILED)\][^\n]*")
MISMATCH = re.compile(r"Invalid value when checking the pattern[^\n]*|ASSERT in expression h_errorFlag == 0[^\n]*")
_RUNNING = re.compile(r"^Running (\S+?)\.\s*$")
_WAIVING = re.compile(r"^Waiving (\S+?)\.\s*$")
_SUM = re.compile(r"^SUM (\S+) ([-\d.eE+]+)\s*$")
_ERROR = re.compile(r"^(?:Error|ERROR): (.*)$")
_DEVICE = re.compile(r"^Device (\d+): (.+)$")
_VALUE = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")


@dataclass
class Matrix:
    """One testcase's table: column labels, {row label: values (None = N/A)}, the tool's SUM."""

    description: str = ""
    columns: list[str] = field(default_factory=list)
    rows: dict[str, list[float | None]] = field(default_factory=dict)
    total: float | None = None


@dataclass
class Output:
    """Everything one nvbandwidth run said, keyed by testcase."""

    version: str | None = None
    driver: str | None = None
    devices: dict[int, str] = field(default_factory=dict)
    matrices: dict[str, Matrix] = field(default_factory=dict)
    waived: set[str] = field(default_factory=set)
    errors: dict[str, str] = field(default_factory=dict)  # testcase -> the tool's Error: message
    running: str | None = None  # the testcase the run was in when it stopped
    mismatch: str | None = None  # the verification failure, as printed
    hw_error: str | None = None
    unparsed: list[str] = field(default_factory=list)
    # a matrix printed without its `Running` line (an excerpt, a reporter's elision): its `SUM <testcase>`
    # line, else the next requested testcase, says whose it is
    pending: Matrix | None = None


def parse(text: str, requested: list[str]) -> Output:
    """Read the plain-text output. `requested` is the -t list in order: the v0.6+ `Waived:` line
    does not name its testcase, it is the next requested one that has not been seen yet."""
    out = Output()
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        i += 1
        if not line.strip():
            continue
        i = _line(out, line, lines, i, requested)
    if out.pending is not None:
        nxt = next((t for t in requested if t not in _seen(out)), None)
        if nxt:
            out.matrices[nxt] = out.pending
        out.pending = None
    out.mismatch = next(iter(MISMATCH.findall(text)), None)
    hw = HW_ERROR.search(text)
    out.hw_error = hw.group(0) if hw else None
    return out


def _line(out: Output, line: str, lines: list[str], i: int, requested: list[str]) -> int:
    """One line of the output; a matrix consumes the lines after its description. Returns the next index."""
    if m := re.match(r"^nvbandwidth Version: (\S+)", line):
        out.version = m.group(1)
    elif m := re.match(r"^Driver Version: (\S+)", line):
        out.driver = m.group(1)
    elif m := _DEVICE.match(line):
        out.devices[int(m.group(1))] = m.group(2).strip()
    elif m := _RUNNING.match(line):
        out.running = m.group(1)
    elif m := _WAIVING.match(line):
        out.waived.add(m.group(1))
    elif line.startswith("Waived:"):
        nxt = next((t for t in requested if t not in _seen(out) | {out.running}), None)
        if nxt:
            out.waived.add(nxt)
    elif m := _SUM.match(line):
        if m.group(1) not in out.matrices and out.pending is not None:
            out.matrices[m.group(1)], out.pending = out.pending, None
        if m.group(1) in out.matrices:
            out.matrices[m.group(1)].total = float(m.group(2))
    elif m := _ERROR.match(line):
        name = out.running if out.running and out.running not in out.matrices else None
        nf = re.match(r"Testcase (\S+) not found", m.group(1))
        out.errors[nf.group(1) if nf else (name or "?")] = m.group(1).strip()
    elif out.running and out.running not in out.matrices and re.search(r"\((GB/s|ns)\)\s*$", line):
        matrix, i = _matrix(line, lines, i)
        out.matrices[out.running] = matrix
    elif out.pending is None and re.search(r"^memcpy .*\((GB/s|ns)\)\s*$", line):
        out.pending, i = _matrix(line, lines, i)
    return i


def _seen(out: Output) -> set[str]:
    return set(out.matrices) | out.waived | set(out.errors)


def _matrix(description: str, lines: list[str], i: int) -> tuple[Matrix, int]:
    m = Matrix(description=description.strip())
    if i < len(lines):
        m.columns = lines[i].split()
        i += 1
    while i < len(lines) and lines[i].strip():
        parts = lines[i].split()
        if len(parts) != len(m.columns) + 1 or not all(_VALUE.match(p) or p == "N/A" for p in parts[1:]):
            break
        m.rows[parts[0]] = [None if p == "N/A" else float(p) for p in parts[1:]]
        i += 1
    return m, i


# ---------------------------------------------------------------------------------------- judging
@dataclass(frozen=True)
class Judging:
    """What a testcase is judged against: the floor (None: no baseline for the model) with its basis,
    the share below the node's median that fails a pair, and whether the node's GPUs are joined by
    NVLink (then every pair must have peer access and pairs are compared with each other)."""

    floor: float | None
    basis: str
    relative_tolerance: float
    nvlink: bool


def pairs(tc: Testcase, m: Matrix) -> tuple[dict[tuple[int, int], float], list[tuple[int, int]]]:
    """{(row GPU, column GPU): GB/s} of the measured pairs, and the pairs without a value (N/A);
    for host testcases the key is (-1, GPU). The diagonal of a GPU matrix is no pair."""
    values: dict[tuple[int, int], float] = {}
    missing: list[tuple[int, int]] = []
    for r, row in m.rows.items():
        for c, v in zip(m.columns, row):
            key = (-1, int(c)) if tc.kind == "host" else (int(r), int(c))
            if tc.kind == "d2d" and key[0] == key[1]:
                continue
            if v is None:
                missing.append(key)
            else:
                values[key] = v
    return values, missing


def absent(tc: Testcase, m: Matrix, expected: int | None) -> list[tuple[int, int]]:
    """The pairs (GPUs, for the host link) of the `expected` GPUs that the matrix does not hold at all:
    not N/A, simply not there (a GPU the tool did not see)."""
    if not expected:
        return []
    values, missing = pairs(tc, m)
    seen = set(values) | set(missing)
    want = [(-1, g) for g in range(expected)] if tc.kind == "host" else \
        [(i, j) for i in range(expected) for j in range(expected) if i != j]
    return [k for k in want if k not in seen]


def gpus_named(out: Output) -> int:
    """How many GPUs the matrices name (GPU N counts as N+1), for an output without a device list."""
    named = [int(x) for k, m in out.matrices.items() if k in TESTCASES
             for x in [*m.columns, *(m.rows if TESTCASES[k].kind == "d2d" else [])] if x.isdigit()]
    return max(named) + 1 if named else 0


def name(key: tuple[int, int]) -> str:
    """The device a finding is about: `cuda:3,cuda:5` for a GPU pair, `cuda:3` for a host link."""
    return f"cuda:{key[1]}" if key[0] < 0 else f"cuda:{key[0]},cuda:{key[1]}"


def to_checks(tc: Testcase, m: Matrix, j: Judging, expected: int | None = None) -> list[Check]:
    """The findings of one matrix: pairs of the `expected` GPUs it does not hold, pairs without peer
    access, pairs below the floor, pairs clearly slower than the node's median; one passing check (the
    slowest pair) when there is none."""
    values, missing = pairs(tc, m)
    out = _not_measured(tc, m, absent(tc, m, expected), expected)
    out += [_no_peer(tc, key, j) for key in missing]
    if not values:
        out.append(Check(tc.check, "skip", code="NVBW_NOT_APPLICABLE", message=f"{tc.key}: no "
                         f"{'GPU pair' if tc.kind == 'd2d' else 'GPU'} measured ({len(m.columns)} column(s))"))
        return out
    median = statistics.median(values.values())
    relative = tc.kind == "host" or j.nvlink  # PCIe pairs across sockets are legitimately slower
    bar = median * (1 - j.relative_tolerance)
    low_code = "NVBW_D2D_LOW" if tc.kind == "d2d" else "NVBW_HOST_LOW"
    for key, v in sorted(values.items()):
        if j.floor is not None and v < j.floor:
            out.append(Check(tc.check, "fail", v, "GB/s", f">= {fmt(j.floor)}", f"{_what(tc, key)}: {fmt(v)} GB/s < "
                             f"{fmt(j.floor)} GB/s ({j.basis}; {tc.key})", name(key), low_code))
        elif relative and v < bar:
            out.append(Check(tc.check, "fail", v, "GB/s", f">= {fmt(bar)}", f"{_what(tc, key)}: {fmt(v)} GB/s < "
                             f"{fmt(bar)} GB/s ({j.relative_tolerance:.0%} below the node's median {fmt(median)} GB/s; "
                             f"{tc.key})", name(key), "NVBW_SLOW_VS_PEERS"))
    if any(c.status == "fail" for c in out):
        return out
    return out + [_pass(tc, values, j, median)]


def _not_measured(tc: Testcase, m: Matrix, keys: list[tuple[int, int]], expected: int | None) -> list[Check]:
    """A GPU none of whose pairs (or whose host link) the matrix holds is one finding, named by the
    GPU; any other absent pair is named by its two GPUs."""
    whole = sorted({g for k in keys for g in k if g >= 0 and all(
        (a, b) in keys for a, b in ([(-1, g)] if tc.kind == "host" else
                                    [(g, o) for o in range(expected or 0) if o != g]
                                    + [(o, g) for o in range(expected or 0) if o != g]))})
    rest = [k for k in keys if not any(g in whole for g in k if g >= 0)]
    why = f"although the node should have {expected} GPU(s) ({len(m.columns)} column(s) measured)"
    out = [Check(tc.check, "fail", device=f"cuda:{g}", code="NVBW_NOT_MEASURED",
                 message=f"GPU {g}: not in nvbandwidth's {tc.key} result {why}") for g in whole]
    return out + [Check(tc.check, "fail", device=name(k), code="NVBW_NOT_MEASURED",
                        message=f"{_what(tc, k)}: not in nvbandwidth's {tc.key} result {why}") for k in rest]


def _pass(tc: Testcase, values: dict[tuple[int, int], float], j: Judging, median: float) -> Check:
    key, low = min(values.items(), key=lambda kv: kv[1])
    count = f"{len(values)} {'pair(s)' if tc.kind == 'd2d' else 'GPU(s)'}"
    if j.floor is None:
        if tc.kind == "d2d" and not j.nvlink:
            return Check(tc.check, "skip", low, "GB/s", code="BASELINE_MISSING",
                         message=f"{count}, slowest {fmt(low)} GB/s ({name(key)}); no floor for this model and no "
                         f"NVLink expected, pairs not compared ({j.basis})")
        return Check(tc.check, "pass", low, "GB/s", f">= {fmt(median * (1 - j.relative_tolerance))}",
                     f"{count}, slowest {fmt(low)} GB/s ({name(key)}) within {j.relative_tolerance:.0%} of the node's "
                     f"median {fmt(median)} GB/s; no absolute floor ({j.basis})")
    return Check(tc.check, "pass", low, "GB/s", f">= {fmt(j.floor)}",
                 f"{count}, slowest {fmt(low)} GB/s ({name(key)}) >= {fmt(j.floor)} GB/s ({j.basis})")


def _no_peer(tc: Testcase, key: tuple[int, int], j: Judging) -> Check:
    if tc.kind == "d2d" and j.nvlink:
        return Check(tc.check, "fail", device=name(key), code="NVBW_NO_PEER_ACCESS",
                     message=f"{_what(tc, key)}: no value (N/A): peer access between the two GPUs failed although "
                     f"the model joins them by NVLink ({tc.key})")
    return Check(tc.check, "skip", device=name(key), code="NVBW_NOT_RUN",
                 message=f"{_what(tc, key)}: no value (N/A), not measured ({tc.key})")


def _what(tc: Testcase, key: tuple[int, int]) -> str:
    if tc.kind == "host":
        return f"GPU {key[1]} host link"
    return f"GPUs {key[0]} and {key[1]}"


def not_run(tc: Testcase, out: Output, j: Judging, gpus: int) -> Check | None:
    """The check of a testcase that produced no matrix: waived, its own error, or silence. None when
    it did produce one."""
    if tc.key in out.matrices:
        return None
    if tc.key in out.waived:
        if tc.kind == "d2d" and j.nvlink and gpus > 1:
            return Check(tc.check, "fail", device=",".join(f"cuda:{i}" for i in range(gpus)),
                         code="NVBW_NO_PEER_ACCESS", message=f"{tc.key} waived: the GPUs have no peer access although "
                         "the model joins them by NVLink (nvbandwidth waives a device-to-device test when peer "
                         "mapping fails)")
        return Check(tc.check, "skip", code="NVBW_NOT_RUN", message=f"{tc.key} waived by nvbandwidth "
                     f"({'a single GPU' if gpus <= 1 else 'no peer access between the GPUs'})")
    if tc.key in out.errors:
        return Check(tc.check, "error", code="NVBW_TESTCASE_ERROR",
                     message=f"{tc.key}: nvbandwidth reported: {one_line(out.errors[tc.key], 200)}")
    return Check(tc.check, "error", code="NVBW_TESTCASE_ERROR",
                 message=f"{tc.key}: no result in the nvbandwidth output")
