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


def _folder_plugins(syntax):
    from airflow._shared.plugins_manager import _load_plugins_from_plugin_directory

    return _load_plugins_from_plugin_directory(plugins_folder=str(REPO / "plugins"), ignore_file_syntax=syntax)


def test_the_distribution_registers_the_plugin_entry_point():
    (ep,) = [ep for ep in importlib.metadata.entry_points(group="airflow.plugins") if ep.name == "cluster_doctor"]
    assert ep.value == ENTRY_POINT
    plugin = ep.load()()
    (app,) = plugin.fastapi_apps
    assert app["url_prefix"] == "/cluster-doctor" and isinstance(app["app"], FastAPI)
    (view,) = plugin.external_views
    assert view["url_route"] == "fleet-health" and view["destination"] == "nav"
    assert not view["href"].startswith("/")  # resolved against the UI's <base href>


@pytest.mark.parametrize("syntax", ["glob", "regexp"])  # [core] dag_ignore_file_syntax applies to plugins/
def test_a_mounted_plugins_folder_adds_nothing_when_installed(syntax):
    """Installed and mounted (docker-compose): the folder must not register a second plugin, which
    Airflow would report as an import error."""
    plugins, errors = _folder_plugins(syntax)
    assert errors == {} and plugins == []


@pytest.mark.parametrize("syntax", ["glob", "regexp"])
def test_a_mounted_plugins_folder_alone_registers_exactly_the_plugin_file(syntax, monkeypatch):
    """Not installed (only plugins/ on the path): the shim defines the plugin; .airflowignore keeps the
    cluster_doctor package out (its __main__.py would otherwise replace the running program)."""
    real = importlib.metadata.entry_points

    def without_ours(**kwargs):
        return [ep for ep in real(**kwargs) if ep.value != ENTRY_POINT]

    monkeypatch.setattr(importlib.metadata, "entry_points", without_ours)
    plugins, errors = _folder_plugins(syntax)
    assert errors == {}
    assert [(p.name, str(p.source)) for p in plugins] == [("cluster_doctor", "$PLUGINS_FOLDER/cluster_doctor_plugin.py")]


def test_airflow_loads_one_plugin_with_no_import_errors():
    """Airflow's own plugin manager, folder and entry points together, in a clean process."""
    code = ("import json; from airflow import plugins_manager as m; plugins, errors = m._get_plugins(); "
            "print(json.dumps([[p.name for p in plugins], errors]))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and k != "PYTHONPATH"}
    env.update(AIRFLOW__CORE__PLUGINS_FOLDER=str(REPO / "plugins"), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    names, errors = json.loads(out.stdout.strip().splitlines()[-1])
    assert names.count("cluster_doctor") == 1 and errors == {}
