"""The grid tells the two "skipped" apart, on a real Airflow 3.3 in Chromium: a validate step
whose suite its node's bundle does not plan is an Airflow `skipped` task labelled "node · test · not due"
(no attempt, no row), while a skipped step that is an attempt — here gpu-004's ib_health, stopped by its
gpu_health failing on the injected fault — keeps its plain "node · test" label and has its `skipped` row.

A stack of its own (``tools/stack.py up``, as `make up` runs it): two suites enabled, so a bundle can
leave a step out; six nodes, no churn (gpu-004 keeps its fault and stays free)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
import urllib.parse

import psycopg
import pytest
from cluster_doctor.store import database

from tests.support.airflow_server import CHROMIUM, CHROMIUM_ARGS
from tests.support.stack import DAG, TERMINAL, Api, free_port, stack_down, stack_up

# slow: a stack of its own (~7 min on a loaded 2-core box); `make test` covers the label itself through
# tests/dags (every step's rendered label for a bundle that plans gpu_health only), `make test-slow` runs
# this end to end in Chromium.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SETTINGS = {
    "CLUSTER_DOCTOR_TESTS": "gpu_health,ib_health",
    "CLUSTER_DOCTOR_MAX_PAIRS_PER_RUN": "2",
    "CLUSTER_DOCTOR_PENDING_TIMEOUT_S": "60",
    "CLUSTER_DOCTOR_AVAILABILITY_CHECK_S": "5",
}
NOT_DUE = "not due"
RUN_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    state = tmp_path_factory.mktemp("grid-stack")
    port = free_port()
    up = stack_up(state, port, {**os.environ, **SETTINGS}, "--nodes", "6", "--churn-interval", "0", "--seed", "3")
    try:
        assert up.returncode == 0, f"make up failed:\n{up.stdout[-4000:]}\n{up.stderr[-4000:]}"
        password = json.loads((state / "airflow" / "passwords.json").read_text())["admin"]
        results_url = re.search(r"--db-url '([^']+)'", up.stdout).group(1)
        yield {"url": f"http://127.0.0.1:{port}", "password": password, "api": Api(f"http://127.0.0.1:{port}", password),
               "results_url": results_url}
    finally:
        stack_down(state)


def _trigger(api: Api, conf: dict, stale_before: dt.datetime) -> str:
    return api.post(f"/api/v2/dags/{DAG}/dagRuns", {"logical_date": None, "conf": {
        **conf, "stale_before": stale_before.isoformat()}})["dag_run_id"]


@pytest.fixture(scope="module")
def runs(stack) -> dict[str, str]:
    """Two manual runs, queued behind the first scheduled one (max_active_runs=1)."""
    api, now = stack["api"], dt.datetime.now(dt.UTC)
    ids = {
        # gpu-004's gpu_health fails (the injected fault): its ib_health is an attempt recorded skipped
        "stopped": _trigger(api, {"node_range": "gpu-004", "tests": ["gpu_health", "ib_health"]}, now),
        # gpu_health only: every bundle leaves ib_health out, its steps are not due. stale_before a few
        # minutes ahead (the most discover accepts): the nodes the scheduled run validates meanwhile are due
        "not_due": _trigger(api, {"node_range": "gpu-00[1-3,5-6]", "tests": ["gpu_health"]},
                            now + dt.timedelta(minutes=4, seconds=30)),
    }
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not all(api.run(run_id)["state"] in TERMINAL for run_id in ids.values()):
        assert time.monotonic() < deadline, {k: api.run(v)["state"] for k, v in ids.items()}
        time.sleep(3)
    return ids


def _steps(api: Api, run_id: str, step: str) -> list[dict]:
    return [ti for ti in api.task_instances(run_id) if ti["task_id"] == step]


def _rows(results_url: str, run_id: str) -> dict[tuple[str, str], str]:
    with psycopg.connect(**database.libpq_params(results_url)) as conn:
        rows = conn.execute("SELECT node_name, test_name, status FROM validation_history WHERE run_id = %s",
                            (run_id,)).fetchall()
    return {(n, t): s for n, t, s in rows}


@pytest.mark.timeout(1200)  # the module's stack and its three runs, on a loaded 2-core box
def test_a_step_not_due_is_labelled_so_and_a_skipped_attempt_is_not(stack, runs):
    api = stack["api"]
    [stopped] = _steps(api, runs["stopped"], "validate.ib_health")
    assert (stopped["state"], stopped["rendered_map_index"]) == ("skipped", "gpu-004 · ib_health")
    assert _rows(stack["results_url"], runs["stopped"]) == {("gpu-004", "gpu_health"): "fail",
                                                            ("gpu-004", "ib_health"): "skipped"}
    not_due = _steps(api, runs["not_due"], "validate.ib_health")
    assert not_due and {ti["state"] for ti in not_due} == {"skipped"}
    nodes = [ti["rendered_map_index"].split(" · ")[0] for ti in not_due]
    assert sorted(ti["rendered_map_index"] for ti in not_due) == sorted(f"{n} · ib_health · {NOT_DUE}" for n in nodes)
    assert {t for _, t in _rows(stack["results_url"], runs["not_due"])} == {"gpu_health"}  # no attempt, no row
    # the planned steps of that run keep the plain label
    assert {ti["rendered_map_index"] for ti in _steps(api, runs["not_due"], "validate.gpu_health")} == \
        {f"{n} · gpu_health" for n in nodes}


@pytest.mark.requires_tool("chromium")
def test_the_grid_shows_which_skipped_step_was_not_due(stack, runs, tmp_path):
    """What a user sees in the Grid view: a run's task instances, each mapped step by its label with
    its state badge."""
    from playwright.sync_api import sync_playwright

    seen = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
            page.goto(stack["url"] + "/")
            page.wait_for_url(re.compile(r".*/auth/login.*"), timeout=30_000)
            page.get_by_label("Username").fill("admin")
            page.get_by_label("Password").fill(stack["password"])
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(re.compile(r"^(?!.*/auth/login).*$"), timeout=30_000)
            for kind, run_id in runs.items():
                page.goto(f"{stack['url']}/dags/{DAG}/runs/{urllib.parse.quote(run_id)}")
                rows = page.locator("tr", has=page.locator("a[href*='/tasks/validate.ib_health/mapped/']"))
                rows.first.wait_for(timeout=30_000)
                seen[kind] = [(rows.nth(i).locator("a[href*='/mapped/']").last.inner_text().strip(),
                               rows.nth(i).get_by_text(re.compile(r"^(Skipped|Success|Failed)$")).first.inner_text())
                              for i in range(rows.count())]
                page.screenshot(path=str(tmp_path / f"grid-{kind}.png"), full_page=True)
        finally:
            browser.close()
    assert seen["stopped"] == [("gpu-004 · ib_health", "Skipped")], seen
    assert seen["not_due"] and all(label.endswith(f" · ib_health · {NOT_DUE}") and state == "Skipped"
                                   for label, state in seen["not_due"]), seen
