"""The architecture as a test: import-linter's contracts in pyproject.toml ([tool.importlinter]) —
layers point down only (cli > airflow > web > reports > kube > store > domain), no import cycles,
the task modules imported by the DAG files only, only the airflow and web layers import Airflow,
only the store imports the database driver, a domain without I/O, standalone suites — and what
imports cannot show: SQL text only in store/, no file opened or read by the domain's code."""

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
    assert "0 broken" in done.stdout and "10 kept" in done.stdout


def test_a_folder_per_layer_each_saying_what_it_may_import():
    top = sorted(p.name for p in PACKAGE.iterdir() if p.suffix == ".py")
    assert top == ["__init__.py", "__main__.py"], "modules belong in a layer folder, not at the top"
    for layer in LAYERS:
        doc = ast.get_docstring(ast.parse((PACKAGE / layer / "__init__.py").read_text()))
        assert doc and "import" in doc, f"{layer}/__init__.py must say what the layer may import"
    # beside the layers: the simulator, a client of the domain that only the CLI imports
    doc = ast.get_docstring(ast.parse((PACKAGE / "simulator" / "__init__.py").read_text()))
    assert doc and "import" in doc, "simulator/__init__.py must say what it may import"


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
    assert file_calls(PACKAGE / "simulator") == []  # pure too: the domain's rules over a simulated cluster


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
    """Functions short enough to read at once: a long one is split into named steps."""
    assert [f for root in ("plugins", "include", "dags") for f in long_functions(REPO / root)] == []


def test_the_length_scan_finds_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "mod.py").write_text(f"def short():\n    return 1\n\n\ndef long():\n{body}\n")
    assert long_functions(tmp_path) == ["mod.py:5 long (81 lines)"]


# ------------------------------------------------------------------------------------ typed handles
# The Kubernetes client and the results store have types (kube.api.CoreV1; store.history.ResultStore, or
# store.daily.Connections where the web page's reader comes in too): a parameter holding one names its
# type, so a reader (and an editor) can go from it to what it offers.
TYPED_PARAMETERS = ("core_v1", "store")


def untyped_handles(root: pathlib.Path) -> list[str]:
    """Every parameter named in TYPED_PARAMETERS under ``root`` annotated with Any (``Any | None``
    too), or not annotated at all."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for arg in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
                if arg.arg not in TYPED_PARAMETERS:
                    continue
                names = {getattr(n, "id", None) or getattr(n, "attr", None)
                         for n in ast.walk(arg.annotation)} if arg.annotation else {"Any"}
                if "Any" in names:
                    shown = ast.unparse(arg.annotation) if arg.annotation else "no annotation"
                    found.append(f"{path.relative_to(root).as_posix()}:{node.lineno} {node.name}({arg.arg}: {shown})")
    return found


def test_the_kubernetes_client_and_the_store_are_typed_where_they_are_taken():
    assert untyped_handles(REPO / "plugins") == [], \
        "annotate core_v1 with kube.api.CoreV1 and store with store.history.ResultStore (or a Protocol of store/)"


def test_the_handle_scan_finds_any_and_a_missing_annotation(tmp_path):
    (tmp_path / "mod.py").write_text(
        "import typing\nfrom typing import Any\n"
        "def a(core_v1: Any, store: ResultStore, api: Any): ...\n"
        "async def b(*, store: Any | None = None, core_v1: CoreV1 | None = None): ...\n"
        "class C:\n    def m(self, store, core_v1: typing.Any): ...\n")
    assert untyped_handles(tmp_path) == ["mod.py:3 a(core_v1: Any)", "mod.py:4 b(store: Any | None)",
                                         "mod.py:6 m(store: no annotation)", "mod.py:6 m(core_v1: typing.Any)"]


# ------------------------------------------------------------------------------------ the clock
# The domain takes the time as an argument: its callers read the clock, and its tests pass one ``now``.
WALL_CLOCK_CALLS = {"now", "utcnow", "today", "time", "time_ns", "gmtime", "localtime"}


def wall_clock_reads(root: pathlib.Path) -> list[str]:
    """Calls that read the date (datetime.now(), date.today(), time.time(), …) under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        in_file = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in WALL_CLOCK_CALLS \
                    and not (node.func.attr in ("gmtime", "localtime") and node.args):  # with an argument: a conversion
                owner = node.func.value
                owner_name = getattr(owner, "id", None) or getattr(owner, "attr", None)
                if owner_name in ("datetime", "date", "time", "dt"):
                    in_file.append((node.lineno, node.col_offset,
                                    f"{path.relative_to(root).as_posix()}:{node.lineno} {ast.unparse(node)}"))
        found += [text for *_, text in sorted(in_file)]
    return found


def test_the_domain_reads_no_clock():
    assert wall_clock_reads(PACKAGE / "domain") == [], "the domain takes `now` from its caller"
    # the simulator's time is simulated (its wall time is a stopwatch, perf_counter, not a date)
    assert wall_clock_reads(PACKAGE / "simulator") == [], "the simulator's now is simulated"


def test_the_clock_scan_finds_a_read(tmp_path):
    (tmp_path / "mod.py").write_text("import datetime as dt, time\n"
                                     "def f(now=None):\n    return now or dt.datetime.now(dt.UTC)\n"
                                     "def g():\n    return time.time(), time.monotonic(), dt.date.today()\n")
    assert wall_clock_reads(tmp_path) == ["mod.py:3 dt.datetime.now(dt.UTC)", "mod.py:5 time.time()",
                                          "mod.py:5 dt.date.today()"]


# A test asserts what happened, not how long it took: on a loaded machine any bound on a measured
# duration fails some day (speed belongs in `make bench-…`, which prints figures). Found: an assert
# that bounds from above a duration measured with a clock (time.monotonic(), perf_counter(), time.time(),
# datetime.now(), … minus an earlier reading, or a name holding one), or an instant against a deadline.
# A lower bound ("it waited at least 2 s") cannot fail from load and is allowed. The exceptions: a
# deadline that only ends a wait loop, its message saying what did not happen.
STOPWATCHES = {"monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns", "time_ns",
               "process_time", "default_timer", "now", "utcnow"}
# Names that hold a duration measured elsewhere (a program's own report, a result's wall time).
DURATION_NAMES = {"seconds", "elapsed", "took", "wall_seconds", "wall_s", "elapsed_s", "elapsed_ms"}
WAIT_LOOP_DEADLINES = {
    ("tests/stack/test_grid_labels.py", "runs"):
        "ends the wait for the scenario's runs; the message lists their states",
    ("tests/plugins/cluster_doctor/store/test_fleet_state.py", "settle"):
        "ends the wait for the server to close its transaction: a minute, not a speed",
    ("tests/tools/k8s_emulator/test_process.py", "test_cli_serve_writes_kubeconfig_for_client_and_kubectl"):
        "ends the wait for the emulator's port file; the message is its stderr",
}


def _is_clock_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or node.args[1:]:
        return False
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
    return name in STOPWATCHES and (name != "time" or isinstance(f, ast.Attribute))


class _TimingBounds(ast.NodeVisitor):
    """Per function: names holding a clock reading (instants) or a difference of two (durations)."""

    def __init__(self, rel: str):
        self.rel, self.found, self.scope = rel, [], ["<module>"]
        self.instants: set[str] = set()
        self.durations: set[str] = set()

    def _kind(self, node: ast.AST) -> str | None:
        """'instant', 'duration' or None for an expression."""
        if _is_clock_call(node) or (isinstance(node, ast.Name) and node.id in self.instants):
            return "instant"
        if isinstance(node, ast.Name) and (node.id in self.durations or node.id in DURATION_NAMES) \
                or isinstance(node, ast.Attribute) and node.attr in DURATION_NAMES \
                or isinstance(node, ast.Subscript) and getattr(node.slice, "value", None) in DURATION_NAMES:
            return "duration"
        if isinstance(node, ast.BinOp):
            left, right = self._kind(node.left), self._kind(node.right)
            if isinstance(node.op, ast.Sub) and left == right == "instant":
                return "duration"
            if isinstance(node.op, ast.Sub) and left == "instant" or isinstance(node.op, ast.Add) \
                    and "instant" in (left, right):
                return "instant"  # a deadline: an instant plus (minus) a span
            if "duration" in (left, right):
                return "duration"  # scaled, in ms, ...
        if isinstance(node, ast.Call):  # round(d, 2), d.total_seconds(), float(d)
            inner = [*node.args, *([node.func.value] if isinstance(node.func, ast.Attribute) else [])]
            if any(self._kind(a) == "duration" for a in inner):
                return "duration"
        return None

    def visit_FunctionDef(self, node):
        saved = self.instants, self.durations
        self.instants, self.durations = set(self.instants), set(self.durations)
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()
        self.instants, self.durations = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assign(self, node):
        kind = self._kind(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name) and kind:
                (self.instants if kind == "instant" else self.durations).add(target.id)
        self.generic_visit(node)

    def visit_NamedExpr(self, node):
        kind = self._kind(node.value)
        if kind:
            (self.instants if kind == "instant" else self.durations).add(node.target.id)
        self.generic_visit(node)

    def visit_Assert(self, node):
        for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
            sides = [compare.left, *compare.comparators]
            for op, small, large in zip(compare.ops, sides, sides[1:]):
                if isinstance(op, (ast.Gt, ast.GtE)):
                    small, large = large, small
                elif not isinstance(op, (ast.Lt, ast.LtE)):
                    continue
                # now < deadline bounds the time left; deadline - 1 <= now says it waited: a lower bound
                bounded = self._kind(small) == "duration" or (
                    self._kind(small) == self._kind(large) == "instant" and not _is_clock_call(large))
                if bounded and (self.rel, self.scope[-1]) not in WAIT_LOOP_DEADLINES:
                    self.found.append(f"{self.rel}:{node.lineno} {self.scope[-1]}: {ast.unparse(compare)}")
        self.generic_visit(node)


def timing_bounds(root: pathlib.Path, repo: pathlib.Path = REPO) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        scan = _TimingBounds(path.relative_to(repo).as_posix())
        scan.visit(ast.parse(path.read_text(encoding="utf-8")))
        found += scan.found
    return found


def test_no_test_bounds_a_measured_duration():
    assert timing_bounds(REPO / "tests") == [], ("assert what happened (an event, a count, an order), or move "
                                                 "the figure to a make bench-… benchmark")


def test_the_timing_scan_finds_a_bound_and_leaves_a_lower_bound(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "import time, datetime as dt\n"
        "def test_a():\n    t0 = time.monotonic()\n    work()\n    assert time.monotonic() - t0 < 5\n"
        "def test_b():\n    started = time.perf_counter()\n    took = round(time.perf_counter() - started, 2)\n"
        "    assert 0 < took <= GOAL_S\n"
        "def test_c():\n    t = time.monotonic()\n    assert time.monotonic() - t >= 1.0  # it waited\n"
        "def test_d():\n    deadline = time.monotonic() + 2\n    assert time.monotonic() < deadline\n"
        "def test_e():\n    start = dt.datetime.now()\n"
        "    assert (dt.datetime.now() - start).total_seconds() < 3\n"
        "def test_f(result, summary):\n    assert result.wall_seconds < 60 and 5 > summary['seconds']\n")
    assert [f.split(" ", 1)[0] for f in timing_bounds(tmp_path / "tests", tmp_path)] == [
        "tests/test_x.py:5", "tests/test_x.py:9", "tests/test_x.py:15", "tests/test_x.py:18", "tests/test_x.py:20",
        "tests/test_x.py:20"]


# A test that failed once and passed on a retry is a bug to fix, not to hide: no plugin or marker reruns one.
RERUN_PLUGINS = ("pytest-rerunfailures", "pytest-retry", "flaky", "pytest-flakefinder", "pytest-replay")
RERUN_WORDS = re.compile(r"--reruns\b|\breruns\s*=|--only-rerun|\bmark\.(flaky|retry)\b|@flaky\b")


def automatic_reruns(repo: pathlib.Path = REPO) -> list[str]:
    found = []
    for rel in ("pyproject.toml", "constraints.txt", "requirements.txt", "Makefile", ".ci/run"):
        path = repo / rel
        text = path.read_text(encoding="utf-8").lower() if path.exists() else ""
        found += [f"{rel}: {name}" for name in RERUN_PLUGINS if re.search(rf"(^|[\s\"'=]){re.escape(name)}\b", text, re.M)]
        found += [f"{rel}: {m.group(0)}" for m in RERUN_WORDS.finditer(text)]
    for path in sorted((repo / "tests").rglob("*.py")):
        if path.name == "test_architecture.py":
            continue
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if RERUN_WORDS.search(line):
                found.append(f"{path.relative_to(repo).as_posix()}:{lineno}: {line.strip()}")
    return found


def test_no_test_is_rerun_automatically():
    import importlib.metadata as metadata
    installed = {d.metadata["Name"].lower() for d in metadata.distributions()}
    assert automatic_reruns() == [] and installed.isdisjoint(RERUN_PLUGINS), (
        "a flaky test is a bug to fix, not to retry silently")


def test_the_rerun_scan_finds_a_plugin_and_a_marker(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text('dev = ["pytest==9.0.1", "pytest-rerunfailures==15.0"]\n'
                                            'addopts = "-ra --reruns 2"\n')
    (tmp_path / "tests" / "test_x.py").write_text("@pytest.mark.flaky(reruns=3)\ndef test_a():\n    pass\n"
                                                  "def test_b():\n    # reruns nothing\n    pass\n")
    assert [f.split(":", 1)[0] for f in automatic_reruns(tmp_path)] == [
        "pyproject.toml", "pyproject.toml", "tests/test_x.py"]


def hypothesis_timing(root: pathlib.Path, repo: pathlib.Path = REPO) -> list[str]:
    """Hypothesis settings that time a test: a per-example deadline, or a list of suppressed health
    checks that drops the profile's ``too_slow`` (a test's own list replaces the profile's)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None))
                    in ("settings", "register_profile")):
                continue
            for kw in node.keywords:
                timed = ((kw.arg == "deadline" and not (isinstance(kw.value, ast.Constant) and kw.value.value is None))
                         or (kw.arg == "suppress_health_check" and "too_slow" not in ast.unparse(kw.value)
                             and "list(HealthCheck)" not in ast.unparse(kw.value)))
                if timed:
                    found.append(f"{path.relative_to(repo).as_posix()}:{node.lineno}: {ast.unparse(kw)}")
    return found


def test_no_property_test_is_timed():
    assert hypothesis_timing(REPO / "tests") == [], "deadline=None, and keep HealthCheck.too_slow suppressed"


def test_the_hypothesis_scan_finds_a_deadline_and_a_dropped_too_slow(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "@settings(max_examples=5, deadline=200)\ndef test_a(): pass\n"
        "@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])\ndef test_b(): pass\n"
        "@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])\ndef test_c(): pass\n")
    assert [f.split(": ", 1)[0] for f in hypothesis_timing(tmp_path / "tests", tmp_path)] == [
        "tests/test_x.py:1", "tests/test_x.py:3"]


# What tests share lives in tests/support (and the clock in tests/clock.py): a test module never imports
# another test module or a helper kept beside one, so moving or deleting a test file breaks no other. A
# conftest may be imported by the tests it already serves: the root one, and those of the folders above.
def imports_of_other_test_modules(root: pathlib.Path, repo: pathlib.Path = REPO) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(repo)
        own_conftests = {".".join((*rel.parts[:i], "conftest")) for i in range(1, len(rel.parts))}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = ([f"{node.module}.{alias.name}" for alias in node.names] if node.module == "tests"
                         else [node.module])
            elif isinstance(node, ast.ImportFrom):
                names = ["." * node.level + (node.module or "")]  # relative: a sibling module
            else:
                continue
            for name in names:
                if not (name == "tests" or name.startswith(("tests.", "."))):
                    continue
                if (name.startswith("tests.support.") or name == "tests.support" or name == "tests.clock"
                        or name in own_conftests):
                    continue
                found.append(f"{rel.as_posix()}:{node.lineno}: {name}")
    return found


def test_no_test_module_imports_another():
    assert imports_of_other_test_modules(REPO / "tests") == [], "move what tests share to tests/support"


def test_the_test_import_scan_finds_a_test_module_and_a_helper_beside_one(tmp_path):
    for folder in ("tests/a", "tests/b", "tests/support"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "tests" / "a" / "test_x.py").write_text(
        "from tests.b.test_y import helper\nfrom tests.b import seed\nimport tests.b.conftest\n"
        "from tests.a.conftest import NS\nfrom tests.conftest import REPO\nfrom tests import clock\n"
        "from tests.support.emulator import FAST\nfrom tests.support import fleet_seed\nfrom . import near\n")
    assert [f.split(": ", 1)[1] for f in imports_of_other_test_modules(tmp_path / "tests", tmp_path)] == [
        "tests.b.test_y", "tests.b", "tests.b.conftest", "."]


# Comments say why, not when: an issue's number and section point at nothing a reader has. A reference to another
# project's tracker is a source and stays ("NVIDIA/nccl issue #1244", "ucx#9590", a URL). Migrations keep
# their text as applied (a deployed database holds each one's checksum); fixtures are tools' own output.
ISSUE_REF = re.compile(r"\bissues? #?\d+|§ ?\d+", re.I)
EXTERNAL = re.compile(r"[\w.-]+/[\w.-]+ $")
SCANNED = ("plugins", "tests", "dags", "include", "tools", "docs", "bench", "deploy", "README.md", "Makefile",
           "pyproject.toml")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".html", ".sql", ".cfg", ".ini", ".sh", ".txt", ".json", ""}


def _scanned_files(repo: pathlib.Path):
    for top in SCANNED:
        path = repo / top
        for file in sorted(path.rglob("*")) if path.is_dir() else [path] if path.exists() else []:
            parts = file.relative_to(repo).parts
            if (file.is_file() and file.suffix in TEXT_SUFFIXES and "fixtures" not in parts
                    and "migrations" not in parts and "__pycache__" not in parts):
                yield file


def issue_references(repo: pathlib.Path = REPO) -> list[str]:
    found = []
    for file in _scanned_files(repo):
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            for m in ISSUE_REF.finditer(line):
                if not EXTERNAL.search(line[:m.start()]):
                    found.append(f"{file.relative_to(repo).as_posix()}:{lineno}: {m.group(0)}")
    return found


def test_no_issue_numbers_in_code_docs_or_the_readme():
    assert issue_references() == [], "say why, briefly, not which issue asked for it"


def test_the_issue_scan_finds_ours_and_leaves_other_projects(tmp_path):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "x.py").write_text(
        f"# the fast path ({'issue'} 28 {'§'}2)\n"
        f"# peers, {'Issues'} #23\n"
        f"# NVIDIA/nccl {'issue'} #1244, ucx#9590, https://github.com/NVIDIA/DCGM/issues/253\n")
    (tmp_path / "plugins" / "migrations").mkdir()
    (tmp_path / "plugins" / "migrations" / "0001.sql").write_text(f"-- {'issue'} 21\n")
    (tmp_path / "README.md").write_text(f"As {'issue'} 31 asked.\n")
    assert [f.rsplit(": ", 1)[1] for f in issue_references(tmp_path)] == [
        f"{'issue'} 28", f"{'§'}2", f"{'Issues'} #23", f"{'issue'} 31"]


# Statuses, verdicts and states are spelt once, by their enums (domain.status: Status, CheckStatus;
# domain.coverage: CoverageState; domain.peers: PeerVerdictValue): a tuple of their strings written out
# elsewhere is a second list of the vocabulary that goes stale when a value is added. A StrEnum member
# equals its string, so code compares and builds SQL parameters with the members.
def _status_vocabulary() -> frozenset[str]:
    from cluster_doctor.domain.coverage import CoverageState
    from cluster_doctor.domain.peers import PeerVerdictValue
    from cluster_doctor.domain.status import CheckStatus, Status

    return frozenset(str(v) for enum in (Status, CheckStatus, CoverageState, PeerVerdictValue) for v in enum)


def status_literal_collections(package: pathlib.Path = PACKAGE, vocabulary: frozenset[str] | None = None,
                               least: int = 3) -> list[str]:
    """Tuples, lists and sets of ``least`` or more string constants, every one a status of the vocabulary."""
    vocabulary = _status_vocabulary() if vocabulary is None else vocabulary
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.Tuple, ast.List, ast.Set)) or len(node.elts) < least:
                continue
            if all(isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in vocabulary
                   for e in node.elts):
                values = ", ".join(repr(e.value) for e in node.elts)
                found.append(f"{path.relative_to(package).as_posix()}:{node.lineno}: ({values})")
    return found


def test_status_strings_are_listed_only_by_their_enums():
    assert status_literal_collections() == [], "list the enum's members (or iterate the enum) instead"


def test_the_status_scan_finds_a_literal_tuple_and_leaves_members_and_sql(tmp_path):
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "x.py").write_text(
        'STATES = ("pass", "fail", "error", "stale", "never")\n'
        'for k in ["suspect", "fail", "pass"]: pass\n'
        'SKIPS = {"skip", "warn", "skipped"}\n'
        'TWO = ("fail", "error")\n'  # fewer than three: a pair such as FAILING is read at a glance
        'MIXED = ("pass", "fail", "passed")\n'  # another vocabulary (CTRF's)
        'OK = (Status.PASS, Status.FAIL, Status.ERROR)\n'
        'SQL = "SELECT 1 FROM t WHERE status IN (\'pass\', \'fail\', \'error\')"\n')
    assert [f.split(": ", 1)[0] for f in status_literal_collections(tmp_path)] == [
        "reports/x.py:1", "reports/x.py:2", "reports/x.py:3"]
