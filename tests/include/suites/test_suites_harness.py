"""The harness contract shared by every suite: verdict, files, termination summary, exit codes,
crashes, SIGTERM, watchdog, invalid arguments, unwritable output directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster_doctor_suites.harness import files
from cluster_doctor_suites.harness.checks import CHECK_STATUSES, Check
from cluster_doctor_suites.harness.runner import run_suite
from cluster_doctor_suites.harness.verdict import build_summary, decide
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

C = Check


@pytest.mark.parametrize(
    "checks, suite_error, status, reason_part",
    [
        ([C("a", "pass"), C("b", "warn")], None, "pass", "all 1 checks passed, 1 warning"),
        (
            [C("a", "pass"), C("gemm", "fail", 500.0, "TFLOPS", ">= 620", "500 TFLOPS < 620", "cuda:3")],
            None,
            "fail",
            "gemm[cuda:3]: 500 TFLOPS < 620",
        ),
        (
            [C("a", "fail", message="x"), C("b", "fail", message="y")],
            None,
            "fail",
            "(+1 more failing checks)",
        ),
        ([C("a", "pass"), C("tool", "error", message="garbage")], None, "error", "tool: garbage"),
        ([C("a", "fail", message="x"), C("b", "error", message="y")], None, "fail", "a: x"),
        ([C("a", "skip"), C("b", "skip")], None, "error", "nothing could be verified"),
        ([], None, "error", "nothing could be verified"),
        ([C("a", "pass")], "interrupted by SIGTERM", "error", "interrupted by SIGTERM"),
        ([C("a", "fail", message="bad")], "crash", "error", "1 check(s) had failed before, first: a: bad"),
    ],
)
def test_decide(checks, suite_error, status, reason_part):
    got_status, reason = decide(checks, suite_error)
    assert got_status == status
    assert reason_part in reason and "\n" not in reason


def _result(checks, **kw):
    r = {
        "schema_version": "1",
        "suite": "dl_unit",
        "node": "n" * 60,
        "started_at": "2026-01-01T00:00:00.000Z",
        "finished_at": "2026-01-01T00:01:00.000Z",
        "duration_s": 60.0,
        "status": "fail",
        "reason": decide(checks, None)[1],
        "checks": [c.to_dict() for c in checks],
        "metrics": {f"gemm_bf16_tflops.cuda{i}": 700.0 + i for i in range(8)},
        "suite_version": "sha256:0123456789abcdef",
        "environment": {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8},
        "warnings": [],
    }
    r.update(kw)
    return r


def test_summary_stays_under_4k_with_500_failing_checks(h):
    checks = [C("pass_check", "pass", 1.0, "x", ">= 0", "ok", "cuda:0")] * 50 + [
        C(
            f"matmul_bf16_fwd_{i}",
            "fail",
            0.5 + i,
            "rel_err",
            "<= 0.02",
            f"{0.5 + i} rel_err > 0.02 rel_err (max|out-ref|/max|ref| vs float64) " + "x" * 200,
            f"cuda:{i % 8}",
        )
        for i in range(500)
    ]
    result = _result(checks)
    s1 = build_summary(result, checks, list(result["metrics"]), "/data/" + "p" * 200, "/data/" + "q" * 200)
    s2 = build_summary(result, checks, list(result["metrics"]), "/data/" + "p" * 200, "/data/" + "q" * 200)
    text = json.dumps(s1, separators=(",", ":"))
    assert len(text.encode()) < 4096
    assert s1 == s2, "truncation must be deterministic"
    assert s1["truncated"] is True and s1["checks_omitted"] == 550 - len(s1["checks"])
    assert s1["checks"] and all(c["status"] == "fail" for c in s1["checks"]), "failing checks come first"
    assert s1["checks"][0]["name"] == "matmul_bf16_fwd_0"
    assert s1["check_counts"] == {"pass": 50, "fail": 500, "warn": 0, "error": 0, "skip": 0}
    h.summary_validator().validate(s1)


def test_summary_survives_absurd_strings(h):
    checks = [C("x" * 300, "fail", "v" * 3000, "u" * 100, "t" * 100, "m" * 3000, "d" * 300)]
    result = _result(
        checks,
        reason="r" * 5000,
        node="N" * 2000,
        metrics={f"m{i}_" + "k" * 50: "v" * 100 for i in range(100)},
    )
    s = build_summary(result, checks, list(result["metrics"]), "/" + "p" * 5000, "/" + "q" * 5000)
    assert len(json.dumps(s, separators=(",", ":")).encode()) < 4096
    h.summary_validator().validate(s)


def _dummy(run, argv, tmp_path, add=lambda p: None):
    term = tmp_path / "term"
    rc = run_suite(
        "gpu_health",
        "dummy",
        add,
        run,
        [
            "--node",
            "node-a",
            "--output-dir",
            str(tmp_path / "out"),
            "--termination-log",
            str(term),
            "--device",
            "cpu",
            *argv,
        ],
    )
    summary = json.loads(term.read_text()) if term.exists() else None
    return rc, summary


def test_unexpected_exception_is_an_error_with_files(tmp_path, h, capsys):
    def run(ctx):
        ctx.check("first", "pass", message="fine")
        raise ZeroDivisionError("boom\nsecond line")

    rc, s = _dummy(run, [], tmp_path)
    assert rc == 2 and s["status"] == "error"
    assert s["reason"] == "unexpected ZeroDivisionError: boom second line"
    result = json.loads(Path(s["result_path"]).read_text())
    h.result_validator().validate(result)
    log = Path(s["log_path"]).read_text()
    assert "Traceback" in log and "ZeroDivisionError" in log
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith(h.PREFIX)


def test_out_of_memory_is_named(tmp_path):
    def run(ctx):
        raise MemoryError("cannot allocate 80 GiB")

    rc, s = _dummy(run, [], tmp_path)
    assert rc == 2 and s["reason"].startswith("out of memory")


def test_unwritable_output_dir_is_an_error_with_a_summary(tmp_path, capsys, h):
    ran = []
    term = tmp_path / "term"
    rc = run_suite(
        "storage_fio",
        "dummy",
        lambda p: None,
        lambda ctx: ran.append(1),
        ["--output-dir", "/proc/cluster-doctor", "--termination-log", str(term), "--node", "n1"],
    )
    assert rc == 2 and not ran, "the suite must not run when its results cannot be stored"
    s = json.loads(term.read_text())
    h.summary_validator().validate(s)
    assert s["status"] == "error" and "not writable" in s["reason"] and s["result_path"] is None
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1][len(h.PREFIX) :]) == s


def test_invalid_arguments_are_an_error_result(tmp_path, h, monkeypatch):
    monkeypatch.setenv("CLUSTER_DOCTOR_OUTPUT_DIR", str(tmp_path / "out"))
    monkeypatch.setenv("CLUSTER_DOCTOR_TERMINATION_LOG", str(tmp_path / "term"))
    rc = run_suite("dl_unit", "dummy", lambda p: None, lambda ctx: None, ["--expected-gpus", "eight"])
    s = json.loads((tmp_path / "term").read_text())
    assert rc == 2 and s["status"] == "error" and s["reason"].startswith("invalid arguments")
    h.summary_validator().validate(s)


def test_default_termination_log_is_only_written_inside_kubernetes(tmp_path):
    assert files.write_termination_log(files.DEFAULT_TERMINATION_LOG, "{}") is None
    assert not os.path.exists(files.DEFAULT_TERMINATION_LOG)
    assert files.write_termination_log("", "{}") is None
    p = tmp_path / "a" / "term"
    assert files.write_termination_log(str(p), '{"x":1}') is None and p.read_text() == '{"x":1}'
    existing = tmp_path / "bind-mounted"
    existing.write_text("old content that is longer")
    files.write_termination_log(str(existing), "{}")  # written in place (rename over a bind mount fails)
    assert existing.read_text() == "{}"


def test_env_fallbacks(tmp_path, monkeypatch):
    monkeypatch.setenv("NODE_NAME", "node-from-env")
    monkeypatch.setenv("CLUSTER_DOCTOR_DEVICE", "cpu")
    monkeypatch.setenv("CLUSTER_DOCTOR_EXPECTED_GPUS", "0")
    monkeypatch.setenv("CLUSTER_DOCTOR_GPU_MODEL", "NVIDIA-H100-80GB-HBM3")
    monkeypatch.setenv("CLUSTER_DOCTOR_SUITE_VERSION", "sha256:feedfacecafebeef")
    seen = {}

    def run(ctx):
        seen.update(
            node=ctx.node, device=ctx.device_mode, label=ctx.args.gpu_model, expected=ctx.args.expected_gpus
        )
        ctx.check("x", "pass")

    term = tmp_path / "term"
    rc = run_suite(
        "gpu_health",
        "d",
        lambda p: None,
        run,
        ["--output-dir", str(tmp_path), "--termination-log", str(term)],
    )
    s = json.loads(term.read_text())
    assert rc == 0 and seen == {
        "node": "node-from-env",
        "device": "cpu",
        "label": "NVIDIA-H100-80GB-HBM3",
        "expected": 0,
    }
    assert s["suite_version"] == "sha256:feedfacecafebeef" and s["node"] == "node-from-env"
    assert s["log_path"].endswith(f"/gpu_health/node-from-env/{Path(s['log_path']).name}")
    assert Path(s["log_path"]).name.startswith("gpu_health_node-from-env_")


DUMMY = """
import sys, time
from cluster_doctor_suites.harness.runner import main_entry
def add(p):
    p.add_argument("--mode")
def run(ctx):
    ctx.check("before", "pass", message="ok")
    d = ctx.args.output_dir + "/scratch"
    import os; os.makedirs(d, exist_ok=True); ctx.register_scratch(d)
    print("READY", flush=True)
    if ctx.args.mode == "native":
        # catastrophic backtracking: years inside the C regex engine without returning to the
        # interpreter, like a CUDA sync on a hung GPU; Python-level signal handlers cannot run
        import re; re.match(r"(a+)+$", "a" * 64 + "b")
    else:
        time.sleep(600)
main_entry("dl_unit", "dummy", add, run, lambda a: 600)
"""


def _start_dummy(tmp_path, h, *args):
    script = tmp_path / "dummy_suite.py"
    script.write_text(DUMMY)
    term = tmp_path / "term"
    p = subprocess.Popen(
        [
            sys.executable,
            str(script),
            "--node",
            "n1",
            "--output-dir",
            str(tmp_path / "out"),
            "--termination-log",
            str(term),
            "--device",
            "cpu",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=h.env(),
    )
    for _ in range(20):  # the suite's own log lines come first
        if p.stdout.readline().strip() == "READY":
            break
    else:
        pytest.fail("dummy suite never got ready")
    return p, term


@pytest.mark.parametrize("mode", ["python", "native"])
def test_sigterm_writes_an_error_result_quickly(tmp_path, h, mode):
    """SIGTERM ends the suite with its result, even inside native code: the work would take ten minutes
    (python) or years (native), the wait for the suite to end is one minute."""
    p, term = _start_dummy(tmp_path, h, "--mode", mode)
    while not (tmp_path / "out" / "scratch").exists():
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 2
    s = json.loads(term.read_text())
    assert s["status"] == "error" and s["reason"] == "interrupted by SIGTERM"
    assert not (tmp_path / "out" / "scratch").exists(), "scratch files must be removed"
    h.summary_validator().validate(s)
    h.result_validator().validate(json.loads(Path(s["result_path"]).read_text()))
    assert out.strip().splitlines()[-1].startswith(h.PREFIX)
    assert not [f for f in Path(s["result_path"]).parent.iterdir() if f.name.startswith(".")]


def test_watchdog_timeout_is_an_error(tmp_path, h):
    script = tmp_path / "dummy_suite.py"
    script.write_text(DUMMY)
    term = tmp_path / "term"
    # no READY handshake: on a loaded machine the watchdog may fire before the suite gets that far
    p = subprocess.run(
        [
            sys.executable,
            str(script),
            "--node",
            "n1",
            "--output-dir",
            str(tmp_path / "out"),
            "--termination-log",
            str(term),
            "--device",
            "cpu",
            "--mode",
            "native",
            "--timeout",
            "2",
        ],
        capture_output=True,
        text=True,
        env=h.env(),
        timeout=300,
    )
    s = json.loads(term.read_text())
    assert p.returncode == 2 and s["reason"].startswith("timed out after 2 s (during: ")
    assert not (tmp_path / "out" / "scratch").exists()
    h.summary_validator().validate(s)


def test_500_failing_checks_end_to_end(tmp_path, h, capsys):
    def run(ctx):
        for i in range(500):
            ctx.check(
                f"check_{i:03d}",
                "fail",
                value=float(i),
                unit="x",
                threshold=">= 1000",
                message=f"value {i} below 1000 " + "padding " * 20,
                device=f"cuda:{i % 8}",
            )
        ctx.metric("key_figure", 1.5, summary=True)

    rc, s = _dummy(run, [], tmp_path)
    raw = (tmp_path / "term").read_bytes()
    assert rc == 1 and len(raw) < 4096 and s["truncated"] is True
    assert s["check_counts"]["fail"] == 500 and s["checks"][0]["name"] == "check_000"
    assert s["reason"].startswith("check_000[cuda:0]: value 0 below 1000")
    assert "(+499 more failing checks)" in s["reason"]
    assert s["metrics"] == {"key_figure": 1.5}
    h.summary_validator().validate(s)
    result = json.loads(Path(s["result_path"]).read_text())
    assert len(result["checks"]) == 500, "the full result keeps every check"


_text = st.text(max_size=400)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(CHECK_STATUSES),
            _text,
            _text,
            st.one_of(st.none(), st.floats(allow_nan=True), st.integers(), _text),
        ),
        max_size=120,
    ),
    _text,
    st.dictionaries(st.from_regex(r"[a-z_]{1,40}", fullmatch=True), st.floats(allow_nan=False), max_size=40),
)
def test_summary_always_fits_and_validates(items, node, metrics):
    checks = [Check(name or "x", status, value, None, None, msg, None) for status, name, msg, value in items]
    status, reason = decide(checks, None)
    result = _result(checks, node=node or "n", status=status, reason=reason, metrics=metrics)
    s = build_summary(result, checks, sorted(metrics), "/l", "/r")
    assert len(json.dumps(s, separators=(",", ":"), ensure_ascii=True).encode()) < 4096
    schema = json.loads((Path(files.__file__).parents[1] / "result.schema.json").read_text())
    Draft202012Validator({"$ref": "#/$defs/summary", "$defs": schema["$defs"]}).validate(s)


def test_standalone_results_go_where_the_user_can_write_and_say_so(tmp_path, monkeypatch, capsys):
    """Without the shared volume (a laptop, a bare node) the default is ~/cluster-doctor-results, not a
    root-owned /data path; the files' locations are printed for the person who ran it."""
    from cluster_doctor_suites.harness import cli

    monkeypatch.setattr(cli, "SHARED_OUTPUT_DIR", str(tmp_path / "no-shared-volume"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CLUSTER_DOCTOR_OUTPUT_DIR", raising=False)
    rc = run_suite("storage_fio", "dummy", lambda p: None, lambda ctx: ctx.check("x", "pass"),
                   ["--termination-log", "", "--node", "n1"])
    err = capsys.readouterr().err
    results = tmp_path / "home" / "cluster-doctor-results" / "storage_fio" / "n1"
    (written,) = results.glob("*.json")
    assert rc == 0 and f"result: {written}" in err and "log: " in err
    # the shared layout wins where it exists and is writable (validation pods, Slurm with the mount)
    (tmp_path / "no-shared-volume").mkdir()
    assert cli.default_output_dir() == str(tmp_path / "no-shared-volume")


def test_a_long_device_keeps_the_message_in_the_one_line_reason():
    """A check's device may be a long path; the reason (one line, 300 characters) still says what is wrong."""
    from cluster_doctor_suites.harness.checks import MAX_DEVICE_IN_HEADLINE, Check
    from cluster_doctor_suites.harness.verdict import decide

    path = "/data/" + "/".join(f"level-{i:02d}" for i in range(40)) + "/not-mounted"
    check = Check("storage_writable", "fail", device=path, message="the target directory does not exist on this node")
    status, reason = decide([check], None)
    assert status == "fail" and reason.endswith("does not exist on this node")
    assert reason.startswith("storage_writable[/data/level-00") and "/not-mounted]" in reason
    assert len(reason.split("]", 1)[0]) <= len("storage_writable[") + MAX_DEVICE_IN_HEADLINE
