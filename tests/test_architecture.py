"""The architecture as a test: import-linter's contracts in pyproject.toml ([tool.importlinter]) —
layers point down only (cli > airflow > web > reports > kube > store > domain), no import cycles,
only the airflow and web layers import Airflow, a pure domain, standalone suites."""

import ast
import pathlib
import subprocess
import sys

from tests.conftest import REPO

PACKAGE = REPO / "plugins" / "cluster_doctor"
LAYERS = ("domain", "store", "kube", "reports", "web", "airflow", "cli")


def test_the_import_contracts_hold():
    lint = pathlib.Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--config", str(REPO / "pyproject.toml")], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout and "5 kept" in done.stdout


def test_a_folder_per_layer_each_saying_what_it_may_import():
    top = sorted(p.name for p in PACKAGE.iterdir() if p.suffix == ".py")
    assert top == ["__init__.py", "__main__.py"], "modules belong in a layer folder, not at the top"
    for layer in LAYERS:
        doc = ast.get_docstring(ast.parse((PACKAGE / layer / "__init__.py").read_text()))
        assert doc and "import" in doc, f"{layer}/__init__.py must say what the layer may import"


def test_the_design_cards_top_level_layout():
    for path in ("dags", "plugins", "include/suites", "include/pod_templates", "tests", "docker-compose.yaml",
                 "requirements.txt", "README.md"):
        assert (REPO / path).exists(), path
