"""`pip install .` gives a working product: wheel contents, CLI, plugin entry point, package data."""

import json
import os
import pathlib
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import REPO, dsn_to_url

UV = pathlib.Path(sys.executable).with_name("uv")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([str(UV), "build", "--wheel", "--quiet", "--out-dir", str(out), str(REPO)],
                   check=True, capture_output=True, text=True, timeout=300)
    (built,) = out.glob("cluster_doctor-*.whl")
    return built


def test_the_wheel_carries_both_packages_and_their_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in ("cluster_doctor/cli/main.py", "cluster_doctor/store/migrations/0001_validation_history.sql",
                     "cluster_doctor/web/templates/fleet.html", "cluster_doctor/reports/templates/base.html",
                     "cluster_doctor/pod_templates/validation-pod.yaml",
                     "cluster_doctor_suites/dl_unit.py", "cluster_doctor_suites/baselines.yaml",
                     "cluster_doctor_suites/result.schema.json"):
        assert expected in names, expected
    # test-only code never ships
    assert not any(n.startswith(("k8s_emulator/", "tests/", "tools/", "dags/")) for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[airflow.plugins]\ncluster_doctor = cluster_doctor.airflow.plugin:ClusterDoctorPlugin" in text
    assert "[console_scripts]\ncluster-doctor = cluster_doctor.cli.main:main" in text


def test_a_clean_venv_gets_the_cli_and_reads_package_data(wheel, tmp_path, db_dsn):
    venv = tmp_path / "venv"
    subprocess.run([str(UV), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True, timeout=120)
    subprocess.run([str(UV), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
                    "-c", str(REPO / "constraints.txt"), str(wheel)], check=True, timeout=600,
                   capture_output=True, text=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AIRFLOW_CONN_VALIDATION_DB")}
    run = lambda *cmd: subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)  # noqa: E731

    assert run(str(venv / "bin" / "cluster-doctor"), "--help").returncode == 0
    assert run(str(venv / "bin" / "python"), "-m", "cluster_doctor", "--help").returncode == 0
    assert run(str(venv / "bin" / "python"), "-m", "cluster_doctor_suites.gpu_health", "--help").returncode == 0
    # migrations are package data: a fresh database is upgraded from the installed copy
    url = dsn_to_url({**db_dsn, "dbname": db_dsn["dbname"]})
    done = run(str(venv / "bin" / "cluster-doctor"), "--db-url", url, "db", "version")
    assert done.returncode == 0, done.stderr
    probe = run(str(venv / "bin" / "python"), "-c",
                "import json, cluster_doctor.domain.suites as s, cluster_doctor.kube.podspec as p, "
                "cluster_doctor.kube.suite_code as c; "
                "print(json.dumps([str(s.DEFAULT_SUITES_DIR), str(p.DEFAULT_POD_TEMPLATE), "
                "len(c.shipped_files(s.DEFAULT_SUITES_DIR))]))")
    assert probe.returncode == 0, probe.stderr
    suites_dir, template, shipped = json.loads(probe.stdout)
    assert suites_dir.startswith(str(venv)) and template.startswith(str(venv)) and shipped >= 10


def test_requirements_txt_is_the_pinned_runtime_set_of_pyproject_and_constraints():
    """requirements.txt (the design card's file) agrees with pyproject.toml and constraints.txt."""
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import requirements
    finally:
        sys.path.pop(0)
    text = (REPO / "requirements.txt").read_text()
    assert text == requirements.render((REPO / "pyproject.toml").read_text(), (REPO / "constraints.txt").read_text())
    pinned = requirements.pins((REPO / "constraints.txt").read_text())
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            assert pinned[name.split("[")[0]] == version, line
    # a dependency without a pin in constraints.txt is refused, naming it
    with pytest.raises(SystemExit, match="not-pinned-anywhere"):
        requirements.render('[project]\ndependencies = ["not-pinned-anywhere>=1"]\n'
                            '[project.optional-dependencies]\nairflow = []\n', "")
