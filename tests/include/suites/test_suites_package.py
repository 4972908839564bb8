"""The suites folder as shipped: flat ConfigMap-sized package, no Airflow, valid schema, docs, image."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib

import cluster_doctor_suites
from jsonschema import Draft202012Validator

SHIPPED = (".py", ".yaml", ".yml", ".json")


def test_configmap_sized_with_valid_keys(h):
    from cluster_doctor_suites import version

    files = version.package_files(h.SUITES_DIR)
    total = sum(len(v) for v in files.values())
    # The hard limit is 1 MiB of values (suite_code.ship refuses more); 3/4 of it leaves room for the
    # ConfigMap's other bytes and a release's growth (one release's checks once took it past 512 KiB).
    assert total < 768 * 1024, f"{total} bytes: stay well under the 1 MiB ConfigMap limit"
    for name in files:  # ConfigMap keys: [-._a-zA-Z0-9]+, a subfolder's "/" spelled "__"
        assert re.fullmatch(r"[-._a-zA-Z0-9]+", name.replace("/", "__")), name
    subfolders = {p.name for p in h.SUITES_DIR.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert subfolders == {"harness", "checkers", "dl"}, "one level of subfolders, each a package"
    # the wheel carries only the packages pyproject.toml lists: every subfolder is one of them
    packages = tomllib.loads((h.ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    for sub in subfolders:
        assert (h.SUITES_DIR / sub / "__init__.py").exists()
        assert f"cluster_doctor_suites.{sub}" in packages, sub
        nested = [d.name for d in (h.SUITES_DIR / sub).iterdir() if d.is_dir() and d.name != "__pycache__"]
        assert not nested, (sub, nested)


def test_no_airflow_imports(h):
    for p in h.SUITES_DIR.rglob("*.py"):
        text = p.read_text()
        assert not re.search(r"^\s*(from|import)\s+(airflow|cluster_doctor\b)", text, re.M), p.name


def test_every_suite_is_a_module_with_help(h):
    for name in cluster_doctor_suites.SUITES:
        assert (h.SUITES_DIR / f"{name}.py").exists()
        p = subprocess.run(
            [sys.executable, "-m", f"cluster_doctor_suites.{name}", "--help"],
            capture_output=True,
            text=True,
            env=h.env(),
            timeout=60,
        )
        assert p.returncode == 0 and "--output-dir" in p.stdout and "--expected-gpus" in p.stdout, name


def test_schema_is_valid_2020_12(h):
    schema = json.loads((h.SUITES_DIR / "result.schema.json").read_text())
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"].endswith("2020-12/schema")
    assert {"check", "result", "summary"} <= set(schema["$defs"])
    assert set(schema["$defs"]["result"]["properties"]["suite"]["enum"]) == set(cluster_doctor_suites.SUITES)


def test_schema_rejects_what_it_should(h):
    v = h.summary_validator()
    good = {
        "schema_version": "1",
        "suite": "dl_unit",
        "node": "n",
        "status": "pass",
        "reason": "ok",
        "started_at": "2026-01-01T00:00:00.000Z",
        "finished_at": "2026-01-01T00:00:01Z",
        "duration_s": 1,
        "suite_version": "sha256:0123456789abcdef",
        "gpu_model": None,
        "gpu_count": 0,
        "metrics": {"a": 1},
        "checks": [{"name": "x", "status": "pass"}],
        "truncated": False,
        "log_path": None,
        "result_path": None,
        "check_counts": {"pass": 1, "fail": 0, "warn": 0, "error": 0, "skip": 0},
    }
    v.validate(good)
    for bad in (
        {**good, "status": "timeout"},
        {**good, "reason": "two\nlines"},
        {**good, "metrics": {"a": [1]}},
        {**good, "started_at": "yesterday"},
        {k: v_ for k, v_ in good.items() if k != "check_counts"},
    ):
        assert list(v.iter_errors(bad)), bad


def test_readme_documents_the_contract(h):
    text = (h.SUITES_DIR / "README.md").read_text()
    for word in (
        *cluster_doctor_suites.SUITES,
        "srun",
        "kubectl",
        "CLUSTER_DOCTOR_RESULT",
        "termination",
        "exit code",
        "baselines.yaml",
        "suite_version",
        "--device cpu",
        "SIGTERM",
    ):
        assert word in text, word


def test_dockerfile_builds_the_tools(h):
    text = (h.SUITES_DIR / "Dockerfile").read_text()
    assert re.search(r"^ARG TORCH_IMAGE=pytorch/pytorch:", text, re.M) and "\nFROM ${TORCH_IMAGE}\n" in text
    assert "nccl-tests" in text and "MPI=0" in text and "fio" in text and "nvidia-ml-py" in text
    assert "PYTHONPATH=/opt/cluster-doctor" in text
    # the image's default copy holds every file the ConfigMap ships, subfolders included
    for sub in sorted(p.name for p in h.SUITES_DIR.iterdir() if p.is_dir() and p.name != "__pycache__"):
        assert f"COPY {sub}/*.py " in text, sub
        for suffix in {p.suffix for p in (h.SUITES_DIR / sub).iterdir() if p.suffix in SHIPPED} - {".py"}:
            assert f"{sub}/*{suffix}" in text, (sub, suffix)


def test_requirements(h):
    reqs = (h.SUITES_DIR / "requirements.txt").read_text()
    for pkg in ("torch==", "pyyaml==", "nvidia-ml-py=="):
        assert pkg in reqs


def test_functions_over_60_lines_say_why(h):
    """STYLE: functions short enough to read at once; a longer one says why in a `# Long:` comment at
    the top of its body (the 90-123-line ones are split), and none is over 80 lines."""
    import ast

    missing = []
    for p in h.SUITES_DIR.rglob("*.py"):
        lines = p.read_text().splitlines()
        for n in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 60:
                head = "\n".join(lines[n.lineno - 1 : n.lineno + 12])
                if "# Long:" not in head:
                    missing.append(f"{p.relative_to(h.SUITES_DIR)}:{n.name} ({n.end_lineno - n.lineno + 1} lines)")
    assert not missing, missing
    over_80 = [f"{p.relative_to(h.SUITES_DIR)}:{n.name}" for p in h.SUITES_DIR.rglob("*.py")
               for n in ast.walk(ast.parse(p.read_text()))
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 80]
    assert not over_80, f"no function over 80 lines: {over_80}"
    sizes = {}
    for p in (h.SUITES_DIR / "nccl_worker.py", h.SUITES_DIR / "nccl_loopback.py", h.SUITES_DIR / "storage_fio.py"):
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.FunctionDef):
                sizes[(p.name, n.name)] = n.end_lineno - n.lineno + 1
    for name in (("nccl_worker.py", "worker"), ("nccl_loopback.py", "run"), ("storage_fio.py", "_run_in_scratch")):
        assert sizes[name] <= 60, (name, sizes[name])
