"""The daily report in the Airflow UI: ``/cluster-doctor/reports/daily[?day=YYYY-MM-DD]``, built live
from the results database (the same ``reports.daily`` the DAG writes its files with), behind the same
login as the fleet page. Without a day: the day a run of the DAG would take now (yesterday, or today so
far on a new install). The UI's navigation bar reaches it as *Daily report* (the plugin's external view)."""

from __future__ import annotations

import contextlib
import datetime as dt
import html as html_escape
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from cluster_doctor.reports import daily
from cluster_doctor.store import database

URL_ROUTE = "daily-report"  # the UI route of the external view: /plugin/daily-report


class _Reader:
    """What ``reports.daily`` reads through: connections from the page's connector."""

    def __init__(self, connect: Any) -> None:
        self.connect = database.connector(connect)  # a Connector, a URL or libpq parameters

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        conn = self.connect()
        try:
            yield conn
        finally:
            conn.close()


def _response(body: str, status_code: int = 200) -> HTMLResponse:
    response = HTMLResponse(body, status_code=status_code)
    # the report has no script; its links open the node page (here) or the task log (the whole UI)
    response.headers["Content-Security-Policy"] = (
        "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'self'; base-uri 'none'; form-action 'none'")
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    return response


def make_router(*, require: Callable[..., Any], get_backend: Callable[..., Any], get_now: Callable[..., Any],
                ui_base: Callable[[Request], str], failure: Callable[[Exception], tuple[int, str, str]]) -> APIRouter:
    """The route, with the app's own login, backend, clock, UI root and failure wording (``web.app``
    hands them in: this module does not import it)."""
    router = APIRouter(dependencies=[Depends(require)])

    def page(backend: Any, day: str, now: dt.datetime, base: str) -> tuple[int, str]:
        try:
            settings, connect = backend.load()
            data = daily.for_settings(_Reader(connect), settings, day=day or None, now=now, ui_base=base)
        except ValueError as exc:  # a day that is not a date, or in the future
            return 400, f"<p>Invalid day: {html_escape.escape(str(exc))}</p>"
        except Exception as exc:  # noqa: BLE001 - failure() re-raises anything unexpected
            code, title, text = failure(exc)
            return code, f"<p><strong>{html_escape.escape(title)}</strong> {html_escape.escape(text)}</p>"
        return 200, daily.render_html(data)

    @router.get("/reports/daily", response_class=HTMLResponse)
    async def daily_report(request: Request, day: str = Query("", max_length=10),
                           backend: Any = Depends(get_backend), now: dt.datetime = Depends(get_now)) -> HTMLResponse:
        code, body = await run_in_threadpool(page, backend, day.strip(), now, ui_base(request))
        return _response(body, code)

    return router
