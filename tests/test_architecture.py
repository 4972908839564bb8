"""The architecture as a test: import-linter's contracts in pyproject.toml ([tool.importlinter]) —
layers point down only (cli > airflow > web > reports > kube > store > domain), no import cycles,
only the airflow and web layers import Airflow, only the store imports the database driver, a domain
without I/O, standalone suites — and what imports cannot show: SQL text only in store/, no file
opened or read by the domain's code."""

import ast
import pathlib
import re
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
    assert "0 broken" in done.stdout and "7 kept" in done.stdout


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


# SQL statements as the code writes them, keywords in upper case (so that English such as "select the
# nodes from" or "delete from the list" in a docstring or a message is not one).
SQL = re.compile(r"\bSELECT\b[\s\S]*?\bFROM\b|\bWITH\s+\w+\s+AS\s+(MATERIALIZED\s+)?\(|\bINSERT\s+INTO\b|"
                 r"\bUPDATE\s+\w+\s+SET\b|\bDELETE\s+FROM\b|\bON\s+CONFLICT\b|"
                 r"\b(CREATE|ALTER|DROP|TRUNCATE)\s+(TABLE|INDEX|VIEW|FUNCTION|SCHEMA)\b")
# Text shown to a reader, never executed: a query they can run themselves.
SHOWN_NOT_RUN = {
    "reports/daily.py": ["SELECT * FROM validation_latest WHERE status IN ('fail', 'error')"],
}


def _string_texts(tree: ast.AST):
    """(line, text) of every string constant; an f-string as one text, its fields as {}."""
    inside_fstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            inside_fstrings.update(id(v) for v in node.values)
            yield node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in inside_fstrings:
            yield node.lineno, node.value


def sql_outside_the_store(package: pathlib.Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.startswith("store/"):
            continue
        for line, text in _string_texts(ast.parse(path.read_text(encoding="utf-8"))):
            for shown in SHOWN_NOT_RUN.get(rel, ()):
                text = text.replace(shown, "")
            if SQL.search(text):
                found.append(f"{rel}:{line}: {' '.join(text.split())[:80]}")
    return found


def test_sql_text_lives_only_in_the_store():
    assert sql_outside_the_store() == [], "SQL belongs in store/, asked for by named functions"


def test_the_sql_scan_finds_a_query_outside_the_store(tmp_path):
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "daily.py").write_text(
        'SHOWN = "(SELECT * FROM validation_latest WHERE status IN (\'fail\', \'error\'))."\n'
        'HELP = "select the nodes from a range, delete from the list"\n'
        'def q(cur, table):\n'
        '    cur.execute(f"SELECT node_name FROM {table} WHERE x = %s", (1,))\n'
        '    cur.execute("DELETE FROM validation_claims")\n')
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "history.py").write_text('Q = "SELECT 1 FROM validation_history"\n')
    assert [f.split(":")[:2] for f in sql_outside_the_store(tmp_path)] == [["reports/daily.py", "4"],
                                                                           ["reports/daily.py", "5"]]


# File access the domain's code could still do without importing a file module: open(), and the
# methods of a path it was handed. Each exception names its function and why.
FILE_CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "glob", "rglob",
              "mkdir", "unlink", "touch", "rmdir", "symlink_to"}
DOMAIN_READS = {
    # the result schema: package data of cluster_doctor_suites (domain.suites.DEFAULT_SUITES_DIR)
    ("results.py", "_summary_validator"): {"read_text"},
}


def file_calls(domain: pathlib.Path) -> list[str]:
    found = []
    for path in sorted(domain.rglob("*.py")):
        rel = path.relative_to(domain).as_posix()

        def visit(node: ast.AST, function: str) -> None:
            for child in ast.iter_child_nodes(node):
                inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
                if isinstance(child, ast.Call):
                    f = child.func
                    name = getattr(f, "id", None) or getattr(f, "attr", None)
                    if name in FILE_CALLS and name not in DOMAIN_READS.get((rel, function), ()):
                        found.append(f"{rel}:{child.lineno} {function or '<module>'}: {name}()")
                visit(child, inner)

        visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def test_the_domain_opens_and_reads_no_file():
    assert file_calls(PACKAGE / "domain") == []


def test_the_file_scan_finds_open_and_path_reads(tmp_path):
    (tmp_path / "config.py").write_text(
        "def load(path):\n    with open(path) as fh:\n        return fh.read()\n\n"
        "def schema(p):\n    return p.read_text()\n")
    (tmp_path / "results.py").write_text("def _summary_validator(p):\n    return p.read_text()\n")
    assert file_calls(tmp_path) == ["config.py:2 load: open()", "config.py:6 schema: read_text()"]



MAX_FUNCTION_LINES = 80


def long_functions(root: pathlib.Path) -> list[str]:
    """Every function under ``root`` longer than MAX_FUNCTION_LINES, from ``def`` to its last line."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found.append(f"{path.relative_to(root).as_posix()}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_over_80_lines_in_the_library_the_suites_or_the_dags():
    """Functions short enough to read at once (issue 27 §5): a long one is split into named steps."""
    assert [f for root in ("plugins", "include", "dags") for f in long_functions(REPO / root)] == []


def test_the_length_scan_finds_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "mod.py").write_text(f"def short():\n    return 1\n\n\ndef long():\n{body}\n")
    assert long_functions(tmp_path) == ["mod.py:5 long (81 lines)"]
