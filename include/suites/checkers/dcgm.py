"""DCGM diagnostics (`dcgmi diag -r N`): run the tool, read its exit code as DCGM defines it
(dcgmReturn_t in dcgmlib/dcgm_structs.h, returned by dcgmi's main: -30 DCGM_ST_NVVS_ERROR = 226 "a
test reported an error", -51 DCGM_ST_NVVS_ISOLATE_ERROR = 205 "the error needs the GPU isolated",
-21 DCGM_ST_CONNECTION_NOT_VALID = 235, ...) and its per-test results (JSON with -j, DCGM 3 and 4
layouts, else the table). The `dcgm_diag` check always appears: pass, fail, or not run with why. The
per-GPU results are matched against the GPUs the suite found (`dcgm_gpu_coverage`): a GPU without a
result in a test that reports per GPU was not diagnosed (not run), a GPU dcgmi names that the suite
does not have is reported."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field

from .. import parsers
from ..harness.checks import Check, SuiteError
from ..harness.text import one_line

CODES = ("DCGM_DIAG_HUNG", "DCGM_DIAG_FAIL", "DCGM_DIAG_ISOLATE", "DCGM_DIAG_WARN", "DCGM_UNAVAILABLE", "GPU_LOST",
         "GPU_RESET_REQUIRED", "TOOL_OUTPUT_UNPARSEABLE", "DCGM_GPU_NOT_COVERED", "DCGM_GPU_UNMATCHED")
# dcgmReturn_t values dcgmi exits with (as an unsigned byte: 256 + the negative value)
DCGM_ST = {
    0: "DCGM_ST_OK",
    -6: "DCGM_ST_NOT_SUPPORTED",
    -18: "DCGM_ST_GPU_IS_LOST",
    -19: "DCGM_ST_RESET_REQUIRED",
    -21: "DCGM_ST_CONNECTION_NOT_VALID",
    -30: "DCGM_ST_NVVS_ERROR",
    -39: "DCGM_ST_DIAG_ALREADY_RUNNING",
    -40: "DCGM_ST_DIAG_BAD_JSON",
    -41: "DCGM_ST_DIAG_BAD_LAUNCH",
    -43: "DCGM_ST_DIAG_THRESHOLD_EXCEEDED",
    -51: "DCGM_ST_NVVS_ISOLATE_ERROR",
    -53: "DCGM_ST_NVVS_KILLED",
}
# the tool says the node failed: a finding even when no test result names it
NODE_FAULT = {-30: "DCGM_DIAG_FAIL", -43: "DCGM_DIAG_FAIL", -51: "DCGM_DIAG_ISOLATE", -18: "GPU_LOST",
              -19: "GPU_RESET_REQUIRED"}
# the diagnostic did not run: not run, with the reason (never a pass)
NOT_RUN = {-21, -39, -53, -6}
_NO_HOSTENGINE = re.compile(r"unable to establish a connection|Host engine connection invalid|is not running", re.I)
KNOWN_STATUSES = ("Pass", "Fail", "Warn", "Skip", "Not Run")


def dcgm_status(rc: int) -> int:
    """dcgmi's exit status as the dcgmReturn_t it returned (226 -> -30)."""
    return rc - 256 if rc > 127 else rc


def status_name(rc: int) -> str:
    st = dcgm_status(rc)
    return DCGM_ST.get(st, f"dcgmReturn_t {st}")


@dataclass
class DcgmRun:
    """What dcgmi said: its exit code, the parsed tests (None: nothing parseable), why not run."""

    level: int
    rc: int | None = None
    parsed: dict | None = None
    not_run: str | None = None  # the diagnostic could not run, and why
    hung: str | None = None  # dcgmi ran past its budget: evidence against the GPU, not "could not run"
    unparseable: str | None = None  # dcgmi printed something the suite cannot read
    log: list[str] = field(default_factory=list)


def budget_s(level: int) -> float:
    """The default time dcgmi diag gets: a short run (-r 1) takes seconds, -r 3 tens of minutes."""
    return 240 if level <= 1 else 3600


def run(ctx, dcgmi_name: str, level: int, host: str | None, timeout: float | None = None) -> DcgmRun:
    """`dcgmi diag -r N -j`; when dcgmi prints no JSON document (a dcgmi without -j rejects the flag
    with its usage text), `dcgmi diag -r N` and its table. A JSON document that only carries a
    runtime_error means the diagnostic did not run."""
    r = DcgmRun(level)
    dcgmi = shutil.which(dcgmi_name)
    if not dcgmi:
        r.not_run = f"{dcgmi_name} not installed (use the validation image, or --dcgm-level 0 to opt out)"
        return r
    hostargs = ["--host", host] if host else []
    base = [dcgmi, "diag", "-r", str(level)]
    timeout = timeout or budget_s(level)
    for argv, json_mode in ((base + ["-j"] + hostargs, True), (base + hostargs, False)):
        try:
            rc, out, err = ctx.run_tool(argv, timeout=timeout)
        except SuiteError as exc:
            if hasattr(exc, "output"):  # killed at its budget: the diagnostic hung on this node's GPUs
                r.hung = str(exc)
                r.log = (exc.output or "").strip().splitlines()[:200]
            else:
                r.not_run = str(exc)
            return r
        r.rc = rc
        text = out + "\n" + err
        r.log = text.strip().splitlines()[:200]
        if _NO_HOSTENGINE.search(text):
            r.not_run = "dcgmi present but no nv-hostengine reachable (--dcgm-host, or run nv-hostengine)"
            return r
        try:
            r.parsed = parsers.parse_dcgmi_diag_json(out) if json_mode else parsers.parse_dcgmi_diag(out)
            return r
        except ValueError as exc:
            if json_mode and not _has_json_object(out):
                continue  # no JSON at all: this dcgmi has no -j; read its table
            if "did not run" in str(exc) or dcgm_status(rc) in NOT_RUN:
                r.not_run = f"dcgmi diag (exit {rc}, {status_name(rc)}): {one_line(str(exc), 200)}"
            else:
                r.unparseable = f"dcgmi diag (exit {rc}, {status_name(rc)}): {one_line(str(exc), 120)}: " \
                                f"{one_line(text.strip()[:200] or 'empty', 160)}"
            return r
    return r


def _has_json_object(text: str) -> bool:
    try:
        parsers.extract_json_object(text)
    except ValueError:
        return False
    return True


def to_checks(r: DcgmRun, gpus: list[int] | None = None) -> list[Check]:
    """The per-test checks (`dcgm_<test>`), the match of its per-GPU results against `gpus` (the
    indices of the GPUs the suite found; None: not matched) and the overall `dcgm_diag` check."""
    level = f"dcgmi diag -r {r.level}"
    if r.hung:
        return [Check("dcgm_diag", "error", None, code="DCGM_DIAG_HUNG",
                      message=f"{level} hung: {r.hung} (killed); a diagnostic that never ends is evidence against "
                      f"the GPUs, not a diagnostic that could not run")]
    if r.not_run:
        return [Check("dcgm_diag", "skip", device=None, code="DCGM_UNAVAILABLE", message=f"{level} did not run: {r.not_run}")]
    if r.unparseable or r.parsed is None:
        return [Check("dcgm_diag", "error", r.rc, code="TOOL_OUTPUT_UNPARSEABLE",
                      message=f"unparseable {level} output: {r.unparseable or 'nothing printed'}")]
    st = dcgm_status(r.rc or 0)
    isolate = st == -51
    out = [c for t in r.parsed["tests"] for c in _test_checks(t, isolate)]
    out += coverage(r.parsed, gpus)
    failing = [c for c in out if c.status == "fail"]
    if st in NODE_FAULT and not failing:
        # dcgmi says the diagnostic found an error, but no test result names it: not a pass
        out.append(Check("dcgm_diag", "fail", r.rc, code=NODE_FAULT[st],
                         message=f"{level} exited {r.rc} ({status_name(r.rc)}) although no test result failed"))
    elif st not in (0,) and st not in NODE_FAULT:
        out.append(Check("dcgm_diag", "error", r.rc, code="TOOL_OUTPUT_UNPARSEABLE",
                         message=f"{level} exited {r.rc} ({status_name(r.rc)}): results not trusted"))
    elif failing:
        out.append(Check("dcgm_diag", "fail", r.rc, code=failing[0].code, action=failing[0].action,
                         message=f"{level}: {len(failing)} failing test result(s), exit {r.rc} ({status_name(r.rc)})"))
    elif any(c.status in ("error", "skip") for c in out):
        out.append(Check("dcgm_diag", "skip", r.rc, code="DCGM_UNAVAILABLE",
                         message=f"{level}: some tests did not run or could not be read"))
    else:
        out.append(Check("dcgm_diag", "pass", r.rc, message=f"{level}: {len(out)} test(s) passed, exit 0"))
    return out


def coverage(parsed: dict, gpus: list[int] | None) -> list[Check]:
    """`dcgm_gpu_coverage`: every GPU the suite found has a result in every test that reports per GPU
    (else it was not diagnosed: not run), and dcgmi names no GPU the suite does not have (reported:
    its results cannot be tied to a GPU of this node). Nothing when no test reports per GPU."""
    per_gpu = [t for t in parsed["tests"] if t["gpus"]]
    if gpus is None or not per_gpu:
        return []
    want = set(gpus)
    missing = {t["name"]: sorted(want - set(t["gpus"])) for t in per_gpu if want - set(t["gpus"])}
    extra = sorted(set().union(*(set(t["gpus"]) for t in per_gpu)) - want)
    if missing:
        gone = sorted(set().union(*map(set, missing.values())))
        return [Check("dcgm_gpu_coverage", "skip", len(gone), "GPUs", device=f"cuda:{g}", code="DCGM_GPU_NOT_COVERED",
                      message=f"dcgmi diag has no result for GPU {g} in " + ", ".join(
                          n for n, m in missing.items() if g in m) + f" ({len(want)} GPU(s) found by the suite)")
                for g in gone]
    if extra:
        return [Check("dcgm_gpu_coverage", "warn", len(extra), "GPUs", code="DCGM_GPU_UNMATCHED",
                      message=f"dcgmi diag reports GPU(s) {', '.join(map(str, extra))} that the suite does not "
                      f"have (it found {len(want)}): a host engine that sees other GPUs than the pod")]
    return [Check("dcgm_gpu_coverage", "pass", len(want), "GPUs",
                  message=f"every one of the {len(want)} GPU(s) has a result in the {len(per_gpu)} per-GPU test(s)")]


def _test_checks(t: dict, isolate: bool) -> list[Check]:
    name = "dcgm_" + re.sub(r"[^a-z0-9]+", "_", t["name"].lower()).strip("_")
    status = t["status"]
    msgs = "; ".join(t["messages"])[:300]
    what = f"dcgmi diag {t['category']}/{t['name']}"
    if status == "Fail":
        failing = sorted(g for g, s in t["gpus"].items() if s == "Fail")
        code, action = ("DCGM_DIAG_ISOLATE", "drain_and_service") if isolate else ("DCGM_DIAG_FAIL", None)
        return [Check(name, "fail", "Fail", device=f"cuda:{g}" if g is not None else None, code=code, action=action,
                      message=f"{what} failed" + (f": {msgs}" if msgs else "")) for g in failing or [None]]
    if status == "Warn" or any(m.startswith("Warning") for m in t["messages"]):
        return [Check(name, "warn", status, code="DCGM_DIAG_WARN", message=f"dcgmi diag {t['name']}: {msgs or status}")]
    if status == "Pass":
        return [Check(name, "pass", "Pass", message=f"{what} passed")]
    if status in ("Skip", "Not Run"):
        return [Check(name, "skip", status, code="DCGM_UNAVAILABLE", message=f"dcgmi diag {t['name']}: {status}")]
    return [Check(name, "error", status, code="TOOL_OUTPUT_UNPARSEABLE",
                  message=f"dcgmi diag {t['name']}: status {status!r} the suite does not know")]

