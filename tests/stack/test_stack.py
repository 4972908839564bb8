"""`make up` / `make down`: the whole product running locally, driven as a user drives it.

One stack for the module, started by ``tools/stack.py up`` exactly as ``make up`` runs it (into a
temporary state dir, on a free port, with a 10-node simulated cluster whose churn is seeded): a real
Airflow 3.3 (api-server, scheduler, dag-processor, triggerer, LocalExecutor) on the embedded
PostgreSQL, the emulator with user jobs arriving, cordons and injected faults. Settings keep it
small: gpu_health only (CPU mode), at most 2 pairs per run.

The scenario: unpausing created the scheduled run; the test triggers a run through the REST API
(queued behind it: max_active_runs=1) and starts a backfill (max_active_runs 2), whose run overlaps
the scheduled one as backfills do; it samples the pool every 0.5 s until these runs have finished
(not the runs the hour or the fast path may add meanwhile).
Then: the triggered run completed and its state is what its rows say; the pool never ran more than
its slots (sampled, and from the pods' own lifetimes); the rows of the run are in validation_history;
overlapping runs never validated, nor held, the same node at once; the default trigger form submits
in real Chromium; ``down`` leaves nothing running. Before the scenario, the Graph view in real Chromium
draws the DAG's tasks and edges from left to right, and the fleet page shows the fault node gpu-004
failing (action and short reason) and its node page why (their pictures are the README's with
CLUSTER_DOCTOR_UPDATE_SCREENSHOTS=1, which ``make screenshots`` sets). First, apart: an ``up`` that
fails half-way says why in one line and leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter

import psycopg
import pytest
import stack as stack_tool  # tools/stack.py, the code behind make up / make down
from cluster_doctor.store import database

from tests.conftest import REPO
from tests.support.airflow_server import CHROMIUM, CHROMIUM_ARGS, sign_in
from tests.support.stack import DAG, TERMINAL, Api, free_port, stack_down, stack_up
from tests.support.timing_lines import assert_timing_line

pytestmark = pytest.mark.e2e

SLOTS = 2
STATUSES = {"pass", "fail", "error", "timeout", "preempted", "skipped"}
ARTIFACTS = REPO / "artifacts"
SETTINGS = {  # through the environment of `up`, as a user tunes `make up`
    "CLUSTER_DOCTOR_TESTS": "gpu_health",
    "CLUSTER_DOCTOR_MAX_PAIRS_PER_RUN": "2",
    "CLUSTER_DOCTOR_PENDING_TIMEOUT_S": "60",
    "CLUSTER_DOCTOR_AVAILABILITY_CHECK_S": "10",
}
SCENARIO_S = pytest.StashKey[float]()
# Three runs, two at once, each about 20 Airflow tasks: 2-4 min on a quiet 2-core box, up to 8 on a loaded
# one. Under the timeout of the test that sets the scenario up, so a stuck one fails with its runs' states.
RUNS_TIMEOUT_S = 600


def _ts(text: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


@dataclasses.dataclass
class Stack:
    state: pathlib.Path
    url: str
    password: str
    record: dict
    cluster: dict
    results_url: str
    up_s: float
    api: Api


def _leftovers(state: pathlib.Path, record: dict | None) -> list[str]:
    """Live processes of the stack: by its own bookkeeping (sessions it started, its id in the
    environment), and independently by a working directory or command line inside its state dir."""
    found = {pid: "recorded" for pid in stack_tool.stack_processes(stack_tool.Record(state, record))} if record else {}
    for entry in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            cwd = os.readlink(entry / "cwd")
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            zombie = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if not zombie and int(entry.name) != os.getpid() and (cwd.startswith(str(state)) or str(state) in cmd):
            found[int(entry.name)] = f"{cwd} :: {cmd[:120]}"
    return [f"{pid} {what}" for pid, what in sorted(found.items())]


def _listening(pids) -> set[str]:
    """host:port of the TCP sockets these processes listen on (from /proc/net/tcp*)."""
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in pathlib.Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    found = set()
    for table, family in (("tcp", 4), ("tcp6", 6)):
        for line in pathlib.Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                addr, port = fields[1].split(":")
                raw = bytes.fromhex(addr)
                host = (socket.inet_ntop(socket.AF_INET, raw[::-1]) if family == 4 else
                        socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))))
                found.add(f"{host}:{int(port, 16)}")
    return found


def _up(state: pathlib.Path, port: int, env: dict) -> subprocess.CompletedProcess:
    return stack_up(state, port, env, "--nodes", "10", "--churn-interval", "3", "--seed", "11")


def test_a_failed_up_says_why_and_leaves_nothing_behind(tmp_path):
    # a setting the DAG cannot parse: everything is started by the time the dag-processor reports it
    port = free_port()
    up = _up(tmp_path, port, {**os.environ, **SETTINGS, "CLUSTER_DOCTOR_POOL_SLOTS": "two"})
    assert up.returncode == 1, up.stdout + up.stderr
    error = [line for line in up.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and "CLUSTER_DOCTOR_POOL_SLOTS" in error[0] and "do not import" in error[0], up.stderr
    assert "stopping what was started" in up.stdout and "PostgreSQL stopped" in up.stdout
    assert not (tmp_path / "stack.json").exists()
    assert _leftovers(tmp_path, None) == []
    assert stack_tool.port_free(port)


@pytest.fixture(scope="module")
def stack():
    # outside pytest's basetemp: as root, pgserver opens up the parents of its data directory for its own
    # user, and any pytest starting meanwhile (a test's probe run) closes /tmp/pytest-of-<user> again
    state = pathlib.Path(tempfile.mkdtemp(prefix="cd-test-stack-"))
    port = free_port()
    env = {**os.environ, **SETTINGS}
    started = time.monotonic()
    up = _up(state, port, env)
    up_s = time.monotonic() - started
    record_path = state / "stack.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else None
    try:
        assert up.returncode == 0, f"make up failed:\n{up.stdout[-4000:]}\n{up.stderr[-4000:]}"
        password = json.loads((state / "airflow" / "passwords.json").read_text())["admin"]
        # what make up prints: the UI on 127.0.0.1, the user and the generated password
        assert f"http://127.0.0.1:{port}" in up.stdout and f"admin / {password}" in up.stdout
        assert (state / "airflow" / "passwords.json").stat().st_mode & 0o077 == 0
        # its last line: how long it took, phase by phase, on what machine (the README quotes it)
        assert_timing_line(up.stdout.strip().splitlines()[-1], "make up ready")
        cluster = json.loads((state / "cluster" / "ready.json").read_text())
        results_url = re.search(r"--db-url '([^']+)'", up.stdout).group(1)
        yield Stack(state, f"http://127.0.0.1:{port}", password, record, cluster, results_url, up_s,
                    Api(f"http://127.0.0.1:{port}", password))
    finally:
        if record_path.exists():  # the last test takes it down; this only covers a failure before
            stack_down(state)
        shutil.rmtree(state, ignore_errors=True)


@dataclasses.dataclass
class Scenario:
    triggered: dict
    runs: dict[str, dict]  # run_id -> DagRun, every run of the scenario, finished
    tis: dict[str, list[dict]]
    samples: list[tuple[float, int, int]]  # (monotonic time, running_slots, occupied_slots)
    ended_at: dt.datetime


@pytest.fixture(scope="module")
def scenario(stack, request) -> Scenario:
    api = stack.api
    started = time.monotonic()
    now = dt.datetime.now(dt.UTC)
    # "validate these nodes now": every pair of a free node due, so the run has work whatever ran before
    triggered = api.post(f"/api/v2/dags/{DAG}/dagRuns",
                         {"logical_date": None, "conf": {"stale_before": now.isoformat(), "max_pairs": 2}})
    hour = now.replace(minute=0, second=0, microsecond=0)
    backfill = api.post("/api/v2/backfills", {
        "dag_id": DAG, "from_date": (hour - dt.timedelta(hours=2)).isoformat(),
        "to_date": (hour - dt.timedelta(hours=2)).isoformat(), "max_active_runs": 2, "dag_run_conf": {}})
    assert backfill["max_active_runs"] == 2
    samples: list[tuple[float, int, int]] = []
    deadline = started + RUNS_TIMEOUT_S
    while True:
        pool = api.get("/api/v2/pools/gpu_validation")
        samples.append((time.monotonic(), pool["running_slots"], pool["occupied_slots"]))
        # The scenario's runs only: the hour may turn meanwhile (a scheduled run), and the fast path
        # (suspect_signals) triggers runs of its own for the nodes the churn makes suspect, at any time.
        # The one unpausing created is due by now (a run of the turning hour is not), even if the scheduler
        # creates it only after this started.
        runs = {r["dag_run_id"]: r for r in api.runs() if r["dag_run_id"] == triggered["dag_run_id"]
                or r["run_type"] == "backfill" or (r["run_type"] == "scheduled" and _ts(r["run_after"]) <= now)}
        if len(runs) >= 3 and all(r["state"] in TERMINAL for r in runs.values()):
            break
        if time.monotonic() > deadline:
            states = {rid: (r["state"], sorted({(t["task_id"], t["state"]) for t in api.task_instances(rid)},
                                               key=str)) for rid, r in runs.items()}
            pytest.fail(f"the runs did not finish within {RUNS_TIMEOUT_S} s: {json.dumps(states, indent=1)}")
        time.sleep(0.5)
    request.session.stash[SCENARIO_S] = time.monotonic() - started
    tis = {rid: api.task_instances(rid) for rid in runs}
    return Scenario(runs[triggered["dag_run_id"]], runs, tis, samples, dt.datetime.now(dt.UTC))


def _rows(stack: Stack, run_ids) -> list[dict]:
    with psycopg.connect(**database.libpq_params(stack.results_url)) as conn, conn.cursor() as cur:
        cur.execute("SELECT run_id, node_name, test_name, status, reason, started_at, finished_at, created_at, "
                    "pod_name FROM validation_history WHERE dag_id = %s AND run_id = ANY(%s)", (DAG, list(run_ids)))
        cols = [c.name for c in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]


def _faulted_nodes(stack: Stack) -> set[str]:
    journal = (stack.state / "cluster" / "churn.jsonl").read_text().splitlines()
    return {a["node"] for a in map(json.loads, journal) if a["action"] == "fault"}


def _planned(tis: list[dict]) -> set[tuple[str, str]]:
    """The run's node · test pairs, from the labels of its validate and sweep groups' steps (the stack
    enables one suite, gpu_health: every step is planned; the health sweep's are in the sweep group). A
    group that mapped over nothing has one unexpanded instance (map_index -1, no label); a step labelled
    "not due" was no attempt."""
    return {tuple(ti["rendered_map_index"].split(" · ")) for ti in tis
            if ti["task_id"].startswith(("validate.", "sweep.")) and not ti["task_id"].endswith(".finish_node")
            and ti["rendered_map_index"] and not ti["rendered_map_index"].endswith(" · not due")}


def test_up_prints_the_ui_and_serves_it_behind_a_login(stack):
    with urllib.request.urlopen(stack.url + "/api/v2/monitor/health", timeout=10) as resp:
        health = json.loads(resp.read())
    assert {health[c]["status"] for c in ("metadatabase", "scheduler", "triggerer", "dag_processor")} == {"healthy"}
    dag = stack.api.get(f"/api/v2/dags/{DAG}")
    assert dag["is_paused"] is False and dag["timetable_summary"] == "0 * * * *"  # @hourly
    pool = stack.api.get("/api/v2/pools/gpu_validation")
    assert pool["slots"] == SLOTS and pool["include_deferred"] is True
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(stack.url + f"/api/v2/dags/{DAG}", timeout=10)
    assert denied.value.code == 401
    # nothing of the stack listens beyond the loopback (the log servers stay off; PostgreSQL has a socket)
    listening = _listening(stack_tool.stack_processes(stack_tool.Record(stack.state, stack.record)))
    assert f"127.0.0.1:{stack.url.rsplit(':', 1)[1]}" in listening
    assert {a.rsplit(":", 1)[0] for a in listening} <= {"127.0.0.1", "::1"}, listening
    # the fleet page comes from the installed distribution's plugin entry point
    assert "cluster_doctor" in {p["name"] for p in stack.api.get("/api/v2/plugins")["plugins"]}


def test_a_fresh_up_starts_no_dag_run_before_what_it_reads_answers(stack):
    """The scheduler, which alone starts DAG runs, starts once the api-server (the tasks' execution API) and
    the cluster answered: suspect_signals is unpaused by its definition and, started with the others, its
    first run could come before the api-server answered. Its runs so far end without a failure."""
    record = stack.record
    assert record["processes"]["scheduler"]["started_at"] >= max(record["ready_at"]["api-server"],
                                                                 record["ready_at"]["cluster"])
    deadline = time.monotonic() + 300
    while not (runs := stack.api.get("/api/v2/dags/suspect_signals/dagRuns?limit=20")["dag_runs"]) or \
            any(r["state"] not in TERMINAL for r in runs):
        if time.monotonic() > deadline:
            pytest.fail(f"suspect_signals' runs did not end: {runs}")
        time.sleep(2)
    assert [r["state"] for r in runs if r["state"] != "success"] == [], runs


# What the Graph view must draw whatever else the DAG grows (a group of its own, an opt-in task): the
# line from discover to verdict, the validate group opened on its steps, and the edges between them.
GRAPH_TASKS = {"discover", "reap_orphans", "reserve", "load_latest", "prioritize", "ship_suites", "validate",
               "validate.gpu_health", "validate.finish_node", "peers", "peers.plan", "peers.test", "peers.finish",
               "record", "quarantine", "node_conditions", "summarize", "verdict"}
GRAPH_EDGES = {("discover", "reap_orphans"), ("discover", "reserve"), ("reap_orphans", "load_latest"),
               ("load_latest", "prioritize"), ("reserve", "prioritize"), ("prioritize", "ship_suites"),
               ("ship_suites", "peers.plan"), ("peers.plan", "peers.test"), ("peers.test", "peers.finish"),
               ("peers.finish", "record"),
               ("validate.gpu_health", "validate.finish_node"), ("record", "quarantine"),
               ("record", "node_conditions"), ("record", "summarize"), ("summarize", "verdict")}
GRAPH_PNG = REPO / "docs" / "images" / "graph-view.png"  # the README's picture: `make screenshots`


@pytest.mark.requires_tool("chromium")
def test_the_graph_view_draws_the_dag(stack, tmp_path):
    from playwright.sync_api import sync_playwright

    update = os.environ.get("CLUSTER_DOCTOR_UPDATE_SCREENSHOTS") == "1"
    png = GRAPH_PNG if update else tmp_path / "graph-view.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            # wide and low: the graph is one line from left to right, Fit View then zooms to readable
            context = browser.new_context(viewport={"width": 1600, "height": 640}, device_scale_factor=2)
            page = context.new_page()
            sign_in(page, stack.url, "admin", stack.password, timeout_ms=30_000)
            page.goto(f"{stack.url}/dags/{DAG}")
            page.get_by_role("button", name=re.compile(r"^Show Graph")).click(timeout=30_000)
            page.get_by_role("button", name="Expand all task groups").click(timeout=30_000)
            page.get_by_role("button", name="Collapse Details Panel").click(timeout=30_000)
            page.locator('.react-flow__node[data-id="validate.finish_node"]').wait_for(timeout=30_000)
            page.locator(".react-flow__controls-fitview").click()
            boxes = _settled_node_boxes(page)
            drawn = {f"{e}".removeprefix("rf__edge-") for e in page.locator(".react-flow__edge").evaluate_all(
                "edges => edges.map(e => e.getAttribute('data-testid'))")}
            # no overlays in the picture: the minimap, the zoom buttons, the panel toggle
            page.add_style_tag(content=".react-flow__minimap, .react-flow__controls, .react-flow__panel,"
                                       " .react-flow__attribution { display: none !important; }")
            page.screenshot(path=str(png), clip=_around([boxes[t] for t in GRAPH_TASKS if t in boxes], page))
            labels = {t: page.locator(f'.react-flow__node[data-id="{t}"]').inner_text()
                      for t in GRAPH_TASKS & set(boxes)}
        finally:
            browser.close()
    assert GRAPH_TASKS <= set(boxes), f"tasks not drawn: {sorted(GRAPH_TASKS - set(boxes))}"
    for task_id, text in labels.items():  # each box names its task (a group step by its own id)
        assert task_id.rsplit(".", 1)[-1] in text, (task_id, text)
    missing = {f"{a}-{b}" for a, b in GRAPH_EDGES} - drawn
    assert not missing, f"edges not drawn: {sorted(missing)} (drawn: {sorted(drawn)})"
    assert any(e.startswith("ship_suites-validate.") for e in drawn) and any(
        e.startswith("validate.") and e.endswith("-record") for e in drawn), sorted(drawn)
    # drawn from left to right, the group's steps inside the group's box
    x = {t: boxes[t]["x"] for t in GRAPH_TASKS}
    line = ("discover", "load_latest", "prioritize", "ship_suites", "validate", "record", "summarize", "verdict")
    assert all(x[a] < x[b] for a, b in zip(line, line[1:])), x
    group = boxes["validate"]
    for step in ("validate.gpu_health", "validate.finish_node"):
        box = boxes[step]
        inside = group["x"] <= box["x"] and box["x"] + box["width"] <= group["x"] + group["width"] + 1
        assert inside, (step, box, group)
    for t in GRAPH_TASKS - {"validate"}:  # readable at this zoom: a task box is no thumbnail
        assert boxes[t]["width"] >= 80 and boxes[t]["height"] >= 25, (t, boxes[t])
    assert png.stat().st_size > 10_000  # a picture, not a blank page


def _settled_node_boxes(page, timeout: float = 15) -> dict[str, dict]:
    """Every drawn task's box on screen, once Fit View's animation has ended (two reads 0.3 s apart agree)."""
    read = "nodes => Object.fromEntries(nodes.map(n => { const r = n.getBoundingClientRect();" \
           " return [n.dataset.id, {x: r.x, y: r.y, width: r.width, height: r.height}]; }))"
    deadline = time.monotonic() + timeout
    last = None
    while True:
        boxes = page.locator(".react-flow__node").evaluate_all(read)
        if boxes == last or time.monotonic() > deadline:
            return boxes
        last = boxes
        page.wait_for_timeout(300)


def _around(boxes: list[dict], page, margin: int = 24) -> dict:
    """A clip around these boxes, within the viewport."""
    view = page.viewport_size
    left = max(0, min(b["x"] for b in boxes) - margin)
    top = max(0, min(b["y"] for b in boxes) - margin)
    right = min(view["width"], max(b["x"] + b["width"] for b in boxes) + margin)
    bottom = min(view["height"], max(b["y"] + b["height"] for b in boxes) + margin)
    return {"x": left, "y": top, "width": right - left, "height": bottom - top}


FLEET_PNG = REPO / "docs" / "images" / "fleet-page.png"  # the README's pictures too: `make screenshots`
NODE_PNG = REPO / "docs" / "images" / "node-page.png"
FAULTY = "gpu-004"  # the stack's fault node (tools/stack_cluster.py): kept free, so the first run reaches it


def _failed_row(stack: Stack, node: str, test: str = "gpu_health") -> dict:
    """A run of the node's test now, as a user revalidates one node, and its failed row: the hourly runs
    take other nodes first (max_pairs 2), so waiting for one to reach the fault node could take hours."""
    now = dt.datetime.now(dt.UTC)
    run_id = stack.api.post(f"/api/v2/dags/{DAG}/dagRuns", {"logical_date": None, "conf": {
        "node_range": node, "tests": [test], "stale_before": now.isoformat()}})["dag_run_id"]
    deadline = time.monotonic() + RUNS_TIMEOUT_S  # a hang guard: it queues behind a running scheduled run
    while stack.api.run(run_id)["state"] not in TERMINAL:
        if time.monotonic() > deadline:
            pytest.fail(f"the run of {node} did not finish within {RUNS_TIMEOUT_S} s: {stack.api.runs()}")
        time.sleep(2)
    with psycopg.connect(**database.libpq_params(stack.results_url)) as conn, conn.cursor() as cur:
        cur.execute("SELECT run_id, status, reason FROM validation_history WHERE dag_id = %s AND run_id = %s"
                    " AND node_name = %s AND test_name = %s", (DAG, run_id, node, test))
        row = cur.fetchone()
    assert row and row[1] == "fail", (run_id, row)  # the injected fault fails it
    return dict(zip(("run_id", "status", "reason"), row))


@contextlib.contextmanager
def _logged_in_page(stack: Stack, viewport: dict):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport=viewport).new_page()
            sign_in(page, stack.url, "admin", stack.password, timeout_ms=30_000)
            yield page
        finally:
            browser.close()


@pytest.mark.requires_tool("chromium")
@pytest.mark.slow  # make screenshots and make test-slow: a run of its own; tests/ui checks the failing cell fast
@pytest.mark.timeout(RUNS_TIMEOUT_S + 120)
def test_the_fleet_page_shows_the_failing_node_and_its_page_why(stack, tmp_path):
    failed = _failed_row(stack, FAULTY)
    update = os.environ.get("CLUSTER_DOCTOR_UPDATE_SCREENSHOTS") == "1"
    fleet_png, node_png = (FLEET_PNG, NODE_PNG) if update else (tmp_path / "fleet.png", tmp_path / "node.png")
    with _logged_in_page(stack, {"width": 1400, "height": 900}) as page:
        # a user's way there: the UI's navigation opens the page inside the UI
        page.get_by_role("link", name="Fleet", exact=True).click(timeout=30_000)
        page.wait_for_url(re.compile(r".*/plugin/fleet-health.*"), timeout=30_000)
        framed = page.frame_locator("iframe[title='Fleet']").locator(f"#matrix tr[data-node='{FAULTY}']")
        framed.wait_for(timeout=30_000)
        # the picture: the page itself (what the iframe holds), whole, without the UI's frame around it
        page.goto(stack.url + "/cluster-doctor/")
        nodes = page.locator("#matrix tbody tr[data-node]").evaluate_all("rs => rs.map(r => r.dataset.node)")
        cell = page.locator(f"tr[data-node='{FAULTY}'] td[data-test='gpu_health']")
        fleet = {"status": cell.get_attribute("data-status"), "why": cell.locator(".why").inner_text(),
                 "action": cell.locator(".why .action").inner_text(), "visible": cell.locator(".why").is_visible(),
                 "failing": page.locator("#failing .value").inner_text(),
                 "since": page.locator(f"tr[data-node='{FAULTY}'] .failing-since").inner_text()}
        page.screenshot(path=str(fleet_png), full_page=True)
        page.locator("a.node-link", has_text=FAULTY).click()
        page.locator("#history").wait_for(timeout=30_000)
        latest = page.locator("#latest tr[data-test='gpu_health']")
        node = {"name": page.locator("#node-name").inner_text(),
                "since": page.locator("#failing-since").inner_text(),
                "status": latest.get_attribute("data-status"), "action": latest.locator(".action").inner_text(),
                "history": page.locator("#history tbody tr").all_inner_texts(),
}
        page.screenshot(path=str(node_png), full_page=True)
    assert set(_faulted_nodes(stack)) >= {FAULTY} and FAULTY in nodes, nodes
    # the failing cell: its status, the recommended action and a short reason, on screen
    assert fleet["status"] == "fail" and fleet["visible"], fleet
    assert fleet["action"] and fleet["action"] != "unknown", fleet  # the fault's checks name an action
    assert re.fullmatch(rf"action: {re.escape(fleet['action'])} · .+", fleet["why"]), fleet
    assert int(fleet["failing"]) >= 1 and fleet["since"].startswith("failing since "), fleet
    # its page: since when it fails, the action, the evidence (the failed row's reason) and the probe's plots
    assert node["name"] == FAULTY and node["since"].startswith("Failing since "), node
    assert node["status"] == "fail" and node["action"] == f"action: {fleet['action']}", node
    assert any(failed["reason"] and failed["reason"] in row for row in node["history"]), (failed, node["history"])
    assert fleet_png.stat().st_size > 10_000 and node_png.stat().st_size > 10_000  # pictures, not blank pages


@pytest.mark.timeout(RUNS_TIMEOUT_S + 120)  # the first test to use the scenario waits for it
def test_the_triggered_run_completes_with_the_state_its_rows_give(stack, scenario):
    run = scenario.triggered
    assert run["run_type"] == "manual" and run["state"] in TERMINAL
    tis = scenario.tis[run["dag_run_id"]]
    states = {ti["task_id"]: ti["state"] for ti in tis if not ti["task_id"].startswith("validate.")}
    assert {t: states[t] for t in ("discover", "load_latest", "prioritize", "ship_suites", "record", "summarize")} \
        == dict.fromkeys(("discover", "load_latest", "prioritize", "ship_suites", "record", "summarize"), "success")
    rows = _rows(stack, [run["dag_run_id"]])
    bad = [r for r in rows if r["status"] in ("fail", "error")]
    # a failed run means a node failed a check; the only failing GPUs here are the injected ones
    assert (run["state"] == "failed") == bool(bad), (run["state"], rows)
    assert states["verdict"] == ("failed" if bad else "success")
    assert {r["node_name"] for r in bad if r["status"] == "fail"} <= _faulted_nodes(stack)


def test_the_pool_never_ran_more_than_its_slots(stack, scenario):
    samples = scenario.samples
    assert len(samples) >= 20
    assert max(s[1] for s in samples) <= SLOTS and max(s[2] for s in samples) <= SLOTS, samples
    assert max(s[1] for s in samples) >= 1, "no sample saw a validation running: the check proved nothing"
    # not sampled: the validation pods' own lifetimes in the emulator never overlap more than the slots
    url = stack.cluster["url"] + "/_emulator/history?" + urllib.parse.urlencode(
        {"labelSelector": "app.kubernetes.io/name=cluster-doctor"})
    with urllib.request.urlopen(url, timeout=10) as resp:
        pods = json.loads(resp.read())["items"]
    pods = [p for p in pods if _ts(p["created"]) <= scenario.ended_at]  # not a later hourly run's
    assert pods and all(p["deleted"] for p in pods), "validation pods left in the cluster"
    # second resolution (metav1.Time): at a tie the ending pod counts first
    edges = sorted([(_ts(p["created"]), 1) for p in pods] + [(_ts(p["deleted_at"]), -1) for p in pods])
    live = peak = 0
    for _, step in edges:
        live += step
        peak = max(peak, live)
    assert peak <= SLOTS


def test_the_runs_rows_are_in_validation_history(stack, scenario):
    run_id = scenario.triggered["dag_run_id"]
    planned = _planned(scenario.tis[run_id])
    assert planned, "the triggered run planned nothing: the test proves nothing"
    rows = _rows(stack, [run_id])
    assert sorted((r["node_name"], r["test_name"]) for r in rows) == sorted(planned)  # one row per attempt
    for r in rows:
        assert r["status"] in STATUSES and r["test_name"] == "gpu_health"
        if r["status"] in ("pass", "fail", "error"):  # executed: a pod ran on the node
            assert r["pod_name"] and r["started_at"] <= r["finished_at"]
        else:
            assert r["reason"]


def test_overlapping_runs_never_validate_the_same_node(stack, scenario):
    runs = scenario.runs
    kinds = Counter(r["run_type"] for r in runs.values())
    assert kinds["backfill"] == 1 and kinds["manual"] == 1 and kinds["scheduled"] >= 1, kinds
    spans = {rid: (_ts(r["start_date"]), _ts(r["end_date"])) for rid, r in runs.items()}
    overlapping = [(a, b) for a in spans for b in spans if a < b
                   and spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]]
    assert overlapping, f"no two runs overlapped: {spans}"
    rows = _rows(stack, runs)
    assert len({r["run_id"] for r in rows}) >= 2
    # 1. no node executed by two runs at once
    executed = [r for r in rows if r["started_at"] is not None]
    clashes = [(a["node_name"], a["run_id"], b["run_id"]) for a in executed for b in executed
               if a["run_id"] < b["run_id"] and a["node_name"] == b["node_name"]
               and a["started_at"] < b["finished_at"] and b["started_at"] < a["finished_at"]]
    assert clashes == [], f"a node was validated by two runs at the same time: {clashes}"
    # 2. no pair held by two live runs: a run holds a pair from its plan (at the latest the end of its
    # prioritize task) until the attempt's row is written; those spans never overlap for one pair
    planned_by = {rid: max(_ts(t["end_date"]) for t in scenario.tis[rid] if t["task_id"] == "prioritize")
                  for rid in runs}
    held = [(r["node_name"], r["test_name"], r["run_id"], planned_by[r["run_id"]], r["created_at"]) for r in rows]
    doubles = [(a[:2], a[2], b[2]) for a in held for b in held
               if a[:2] == b[:2] and a[2] < b[2] and a[3] < b[4] and b[3] < a[4]]
    assert doubles == [], f"two live runs planned the same pair: {doubles}"


@pytest.mark.requires_tool("chromium")
def test_the_default_trigger_form_submits_in_chromium(stack, scenario):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            sign_in(page, stack.url, "admin", stack.password, timeout_ms=30_000)
            page.goto(f"{stack.url}/dags/{DAG}")
            page.get_by_role("button", name=re.compile(r"^Trigger")).first.click(timeout=30_000)
            dialog = page.get_by_role("dialog")
            dialog.get_by_text("Run Parameters").wait_for(timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / "stack_trigger_form.png"), full_page=True)
            submit = dialog.get_by_role("button", name="Trigger", exact=True)
            assert submit.is_enabled(), "the default trigger form cannot be submitted"
            with page.expect_response(lambda r: r.url.endswith(f"/api/v2/dags/{DAG}/dagRuns")
                                      and r.request.method == "POST") as posted:
                submit.click()
            assert posted.value.status == 200, posted.value.text()
            # Our run by its id: the stack's hourly schedule may add a run beside it (the hour can turn now).
            run_id = posted.value.json()["dag_run_id"]
            dialog.wait_for(state="hidden", timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / "stack_trigger_submitted.png"))
        finally:
            browser.close()
    new = stack.api.run(run_id)
    assert new["run_type"] == "manual" and new["triggered_by"] == "ui" and new["triggering_user_name"] == "admin"
    assert new["conf"] == {"node_range": None, "tests": ["gpu_health"], "stale_before": None, "max_pairs": None,
                           "dry_run": False}


def test_down_stops_everything_it_started(stack, request):
    assert _leftovers(stack.state, stack.record), "nothing of the stack found running before down"
    started = time.monotonic()
    down = stack_down(stack.state)
    down_s = time.monotonic() - started
    assert down.returncode == 0, down.stdout + down.stderr
    assert _leftovers(stack.state, stack.record) == []
    with pytest.raises(OSError):
        urllib.request.urlopen(stack.url + "/api/v2/monitor/health", timeout=5)
    assert not (stack.state / "pgdata" / "postmaster.pid").exists()
    again = stack_down(stack.state)  # idempotent: nothing recorded, says so, exit 0
    assert again.returncode == 0 and "nothing to stop" in again.stdout
    print(f"\nstack: up {stack.up_s:.0f} s, scenario {request.session.stash.get(SCENARIO_S, 0):.0f} s, "
          f"down {down_s:.1f} s")
