"""A real ``airflow api-server`` for browser tests: temp AIRFLOW_HOME, migrated SQLite metadata DB,
SimpleAuthManager with a known user and password, this repository's plugins/ folder."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping

REPO = pathlib.Path(__file__).resolve().parents[2]
AIRFLOW = pathlib.Path(sys.executable).with_name("airflow")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@contextlib.contextmanager
def chromium():
    """Headless Chromium, driven by Playwright, as the browser tests use it; closed on the way out."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def sign_in(page, base: str, user: str, password: str, *, timeout_ms: int = 20_000) -> None:
    """Log in through the real form: the UI sends an anonymous user there, and back once signed in."""
    page.goto(base + "/")
    page.wait_for_url(re.compile(r".*/auth/login.*"), timeout=timeout_ms)
    page.get_by_label("Username").fill(user)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"^(?!.*/auth/login).*$"), timeout=timeout_ms)


def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def airflow_env(home: pathlib.Path, *, users: Mapping[str, str], passwords_file: pathlib.Path,
                results_db_url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "CLUSTER_DOCTOR_")) and k != "PYTHONPATH"}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__AUTH_MANAGER":
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        # real users with real passwords: all_admins would skip the login this test must prove
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{role}" for u, role in users.items()),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(40),
        "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
        "AIRFLOW_CONN_VALIDATION_DB": results_db_url,
        **(extra or {}),  # e.g. CLUSTER_DOCTOR_* settings of the test
    })
    return env


def _http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


@contextlib.contextmanager
def api_server(home: pathlib.Path, *, users: Mapping[str, str], passwords: Mapping[str, str],
               results_db_url: str, startup_timeout: float = 90,
               extra_env: Mapping[str, str] | None = None) -> Iterator[str]:
    """Migrate the metadata DB, start the api-server, yield its base URL; always stop it."""
    (home / "dags").mkdir(parents=True, exist_ok=True)
    passwords_file = home / "passwords.json"
    passwords_file.write_text(json.dumps(dict(passwords)))
    env = airflow_env(home, users=users, passwords_file=passwords_file, results_db_url=results_db_url,
                      extra=extra_env)
    migrate = subprocess.run([str(AIRFLOW), "db", "migrate"], env=env, capture_output=True, text=True, timeout=180)
    if migrate.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{migrate.stdout[-3000:]}\n{migrate.stderr[-3000:]}")
    port = free_port()
    log_path = home / "api-server.log"
    with open(log_path, "wb") as log:
        # its own session, so the uvicorn worker processes are stopped with it
        proc = subprocess.Popen([str(AIRFLOW), "api-server", "--host", "127.0.0.1", "--port", str(port),
                                 "--workers", "1"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout
        while _http_status(f"{base}/api/v2/monitor/health") != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"api-server did not start:\n{log_path.read_text()[-5000:]}")
            time.sleep(0.25)
        yield base
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    # the whole process group (api-server and its workers), even when the leader already exited
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):  # stragglers of the group, if any
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
