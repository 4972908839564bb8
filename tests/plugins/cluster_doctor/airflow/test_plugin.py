"""The Airflow plugin: registered once, whether the distribution is installed or plugins/ is mounted."""

import importlib.metadata
import json
import os
import subprocess
import sys

import pytest
from fastapi import FastAPI

from tests.conftest import REPO

ENTRY_POINT = "cluster_doctor.airflow.plugin:ClusterDoctorPlugin"


def airflow_plugins(syntax: str = "glob", *, installed: bool = True) -> tuple[list[list[str]], dict]:
    """Airflow's own plugin manager (public API: get_plugin_info, get_import_errors) in a clean
    process, plugins folder and entry points together: [[name, source], ...] and the import errors.
    ``installed=False`` hides our distribution from importlib.metadata and its backport (Airflow reads
    entry points through importlib_metadata on Python < 3.12, the plugins-folder shim through the
    standard library): only the mounted plugins/ folder is left."""
    hide = ("import importlib.metadata, importlib_metadata\n"
            "for md in (importlib.metadata, importlib_metadata):\n"
            "    md.distributions = (lambda real: lambda **kw: (d for d in real(**kw)\n"
            "                        if d.metadata['Name'] != 'cluster-doctor'))(md.distributions)\n"
            if not installed else "")
    code = (hide + "import json; from airflow import plugins_manager as m\n"
            "info = m.get_plugin_info(attrs_to_dump=['source']); "
            "print(json.dumps([[[p['name'], str(p['source'])] for p in info], m.get_import_errors()]))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and k != "PYTHONPATH"}
    env.update(AIRFLOW__CORE__PLUGINS_FOLDER=str(REPO / "plugins"), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               AIRFLOW__CORE__DAG_IGNORE_FILE_SYNTAX=syntax)
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    plugins, errors = json.loads(out.stdout.strip().splitlines()[-1])
    return plugins, errors


def test_the_distribution_registers_the_plugin_entry_point():
    (ep,) = [ep for ep in importlib.metadata.entry_points(group="airflow.plugins") if ep.name == "cluster_doctor"]
    assert ep.value == ENTRY_POINT
    plugin = ep.load()()
    (app,) = plugin.fastapi_apps
    assert app["url_prefix"] == "/cluster-doctor" and isinstance(app["app"], FastAPI)
    view, report = plugin.external_views
    assert view["url_route"] == "fleet-health" and view["destination"] == "nav"
    assert not view["href"].startswith("/")  # resolved against the UI's <base href>
    # the daily report one click away in the navigation bar, served by the same app
    assert report["name"] == "Report" and report["destination"] == "nav"
    # both stay in the bar: the UI folds two or more entries without nav_top_level into a "Plugins" menu
    assert view["nav_top_level"] is True and report["nav_top_level"] is True
    assert report["href"] == "cluster-doctor/reports/daily" and report["url_route"] == "daily-report"


@pytest.mark.parametrize("syntax", ["glob", "regexp"])  # [core] dag_ignore_file_syntax applies to plugins/
def test_installed_and_mounted_airflow_loads_exactly_one_plugin(syntax):
    """Installed and mounted (docker-compose): the folder must not register a second plugin, which
    Airflow would report as an import error."""
    plugins, errors = airflow_plugins(syntax)
    assert errors == {}
    assert [name for name, _ in plugins].count("cluster_doctor") == 1
    assert not any(source.endswith("cluster_doctor_plugin.py") for _, source in plugins)


@pytest.mark.parametrize("syntax", ["glob", "regexp"])
def test_a_mounted_plugins_folder_alone_registers_exactly_the_plugin_file(syntax):
    """Not installed (only plugins/ on the path): the shim defines the plugin; .airflowignore keeps the
    cluster_doctor package out (its __main__.py would otherwise replace the running program)."""
    plugins, errors = airflow_plugins(syntax, installed=False)
    assert errors == {}
    assert [p for p in plugins if p[0] == "cluster_doctor"] == [
        ["cluster_doctor", "$PLUGINS_FOLDER/cluster_doctor_plugin.py"]]
