"""The fleet health page and the metrics route: a FastAPI app the Airflow api-server mounts.

Registered by ``plugins/cluster_doctor_plugin.py`` (``fastapi_apps`` at ``/cluster-doctor`` plus an
``external_views`` entry in the UI's navigation). Airflow does not protect plugin apps by itself, so
every route here authenticates with Airflow's own machinery: the JWT the UI keeps in the ``_token``
cookie (or an ``Authorization: Bearer`` header), checked by ``airflow.api_fastapi.core_api.security
.get_user``, then authorized by the configured auth manager as read access to the task instances of
the ``continuous_validation`` DAG. Anonymous browsers are redirected to the login page, API
clients get 401. The metrics route takes the same Airflow JWT (``Authorization: Bearer``) and no
private token: the scrape token is only the standalone exporter's (docs/metrics.md says why).

Server-rendered HTML (Jinja2, autoescaped), one page of nodes at a time; everything is computed by
``cluster_doctor.store.fleet`` in SQL.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import secrets
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import markupsafe
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from cluster_doctor.domain import actions, slow_cost, suites
from cluster_doctor.domain import baselines as domain_baselines
from cluster_doctor.domain.attempts import validate_test_name
from cluster_doctor.domain.planning import steps
from cluster_doctor.domain.config import InvalidSettings, Settings
from cluster_doctor.domain.nodes import (
    InvalidNodeName,
    InvalidNodeRange,
    compress,
    parse_node_range,
    validate_node_name,
)
from cluster_doctor.domain.status import FAILING, Status
from cluster_doctor.reports import charts, metrics, text
from cluster_doctor.reports.templating import environment
from cluster_doctor.store import database, fail_slow, fleet, inventory, transitions
from cluster_doctor.store.history import SchemaMissing
from cluster_doctor.web import daily_page

MOUNT_PREFIX = "/cluster-doctor"  # where the plugin mounts this app in the api-server
URL_ROUTE = "fleet-health"  # the UI route of the external view: /plugin/fleet-health
DAG_ID = "continuous_validation"  # whoever may read its task instances may read their results
VALIDATE_GROUP = "validate"  # the DAG's task group mapped per node: step validate.<test> runs one pair
FLEET_QUERY_KEYS = ("nodes", "status", "gpu_model", "per_page", "page")
MAX_NODE_RANGE = 2000  # the fleet page's node range filter, at most (its Query max_length)

ConnectorProvider = Callable[[Settings], database.Connector]  # the settings name the Airflow connection
SettingsProvider = Callable[[], Settings]


# ---------------------------------------------------------------------------------------- Airflow auth
def _authorize(user: Any) -> None:
    """Read access to the DAG's task instances, as decided by the configured auth manager."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.configuration import conf

    team_name = None
    if conf.getboolean("core", "multi_team", fallback=False):
        from airflow.models.dag import DagModel

        team_name = DagModel.get_team_name(DAG_ID)
    allowed = get_auth_manager().is_authorized_dag(
        method="GET", access_entity=DagAccessEntity.TASK_INSTANCE,
        details=DagDetails(id=DAG_ID, team_name=team_name), user=user)
    if not allowed:
        raise HTTPException(status_code=403, detail=f"Forbidden: reading the results needs read access to "
                                                    f"the task instances of the {DAG_ID} DAG")


async def require_ui_access(request: Request) -> Any:
    """The Airflow user of this request (JWT cookie or bearer header), authorized; else 401/403."""
    # Imported here, not at module level: every Airflow process loads the plugin module, only the
    # api-server (which has imported it already) needs Airflow's API security code.
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    credentials = await bearer_scheme(request)
    user = await get_user(request=request, _oauth_token=None, bearer_credentials=credentials)
    await run_in_threadpool(_authorize, user)  # an auth manager may query its database
    return user


def login_url(request: Request) -> str:
    """The auth manager's login page, coming back to this page inside the Airflow UI."""
    from airflow.api_fastapi.app import get_auth_manager

    path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    next_url = f"{airflow_base(request)}plugin/{URL_ROUTE}{path}"
    return get_auth_manager().get_url_login(next_url=next_url)


# ---------------------------------------------------------------------------------------- rendering
def airflow_base(request: Request) -> str:
    """The Airflow UI root ('/' or '/<base_url path>/'), from where this app is mounted."""
    root = request.scope.get("root_path", "") or ""
    if root.endswith(MOUNT_PREFIX):
        root = root[: -len(MOUNT_PREFIX)]
    return root.rstrip("/") + "/"


def app_base(request: Request) -> str:
    return (request.scope.get("root_path", "") or "").rstrip("/")


def format_age(seconds: float | None) -> str:
    """An age or span in words ('1 min', '3 d 4 h': ``reports.text.duration``); 'never' when none."""
    return text.duration(seconds, missing="never")


def format_duration(seconds: float | None) -> str:
    return "" if seconds is None else text.duration(round(seconds))


def format_number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.1f}"


def format_ts(value: dt.datetime | None) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC") if value else ""


def quote(value: Any) -> str:
    return urllib.parse.quote(str(value), safe="")


def ti_url(request: Request, row: Mapping[str, Any]) -> str | None:
    """The Airflow 3 UI page of the task instance that produced a row (route of the 3.3 UI)."""
    dag_id, run_id = row.get("dag_id"), row.get("run_id")
    if not dag_id or not run_id:
        return None  # imported from a file or recorded by hand: no task instance
    task_id = f"{VALIDATE_GROUP}.{row.get('test_name')}"
    url = f"{airflow_base(request)}dags/{quote(dag_id)}/runs/{quote(run_id)}/tasks/{quote(task_id)}"
    map_index = row.get("map_index")
    if map_index is not None and map_index >= 0:
        url += f"/mapped/{int(map_index)}"
    try_number = row.get("try_number")
    if try_number:  # the UI opens that try's log; 0 marks a row the record task wrote (never ran)
        url += f"?try_number={int(try_number)}"
    return url


# Key figures that read as a fault out of context in CPU mode (no GPU there), with what to say beside them.
CPU_MODE_CONTEXT = {"gpus_visible": "CPU mode: the suite ran without a GPU"}


def key_figures(test: str, values: Mapping[str, Any] | None, cpu_mode: bool = False) -> list[tuple[str, str]]:
    """The suite's key figures present in a metrics JSON, formatted, catalog order (then what CPU mode
    measures instead, e.g. dl_unit's fp32 GEMM); in CPU mode a figure like gpus_visible 0 says so."""
    if not values:
        return []
    suite = suites.CATALOG.get(test)
    keys = (*suite.key_metrics, *charts.CPU_MODE_METRICS.get(test, ())) if suite else tuple(sorted(values))[:4]
    return [(k, format_number(values[k]) + (f" ({CPU_MODE_CONTEXT[k]})" if cpu_mode and k in CPU_MODE_CONTEXT else ""))
            for k in keys if k in values and values[k] is not None]


def last_try(now: dt.datetime, cell: Mapping[str, Any] | None, clip: int = 24) -> str:
    """What a never-executed pair's last attempt did, short and quiet under its grey cell: 'skipped 11
    min ago: node busy at submit…' (the whole reason is in the cell's tooltip)."""
    if not cell or cell.get("status") or not cell.get("last_attempt_at"):
        return ""
    why = f": {_clip(cell['last_attempt_reason'], clip)}" if cell.get("last_attempt_reason") else ""
    return (f"{cell.get('last_attempt_status')} "
            f"{format_age((now - cell['last_attempt_at']).total_seconds())} ago{why}")


def log_url(path: Any) -> str | None:
    """An evidence log's link when it is a web address (http or https, e.g. an object store's); a file
    on the results volume is no page this app serves, and stays plain text."""
    text = str(path or "").strip()
    parsed = urllib.parse.urlsplit(text)
    return text if parsed.scheme in ("http", "https") and parsed.netloc and not any(c.isspace() for c in text) else None


def row_action(node: Mapping[str, Any], history: Iterable[Mapping[str, Any]]) -> Callable[[Mapping[str, Any]], str]:
    """The action a history row shows (``actions.for_node``): a step its node's failing gpu_health
    stopped takes that failure's action — of the same run's gpu_health row when it is listed, else of
    the node's current gpu_health result when that fails."""
    health = {(h.get("run_id"), h.get("map_index")): h.get("action") for h in history
              if h.get("test_name") == steps.HEALTH_FIRST and h.get("status") in FAILING}
    current = next((c.get("action") for c in node.get("cells", ())
                    if c.get("test_name") == steps.HEALTH_FIRST and c.get("status") in FAILING), None)

    def shown(row: Mapping[str, Any]) -> str:
        found = health.get((row.get("run_id"), row.get("map_index")), current)
        return actions.for_node(row.get("status"), row.get("action"), steps.stopped_by_health(row.get("reason")),
                                found)

    return shown


def failing_why(cell: Mapping[str, Any] | None, clip: int = 64) -> str:
    """A failing cell's reason, short enough for the cell itself (the whole one is in its tooltip)."""
    if not cell or cell.get("status") not in FAILING or not cell.get("reason"):
        return ""
    return _clip(cell["reason"], clip)


def node_holder(node: Mapping[str, Any] | None, clip: int = 60) -> str:
    """Who or what keeps a not-eligible node from validation (the user pod holding its GPUs, why it is
    cordoned ...), as discovery last saw it; empty for a free, unknown or gone node."""
    if not node or node.get("gone_at") is not None:
        return ""
    state = node.get("eligibility") or node.get("state")
    return _clip(node.get("eligibility_detail") or "", clip) if state not in (None, "free", "unknown") else ""


def never_why(now: dt.datetime, node: Mapping[str, Any]) -> str:
    """Why a node has no executed result on an enabled test, from the inventory: free (due, waiting for
    a run) or not eligible since when and why (busy: by whom), or gone; '' once it has one."""
    if any(c.get("status") and c.get("enabled") for c in node["cells"]):
        return ""
    known = node.get("inventory")
    if not known:
        return "no discovery has listed this node: it is known from its attempts only"
    label, title = node_now(now, known)
    if known.get("gone_at") is None and (known.get("eligibility") or "unknown") == "free":
        return f"free at the last discovery ({title}): due, waiting for a run to reach it"
    return f"not eligible: {title}" if known.get("gone_at") is None else title


def bad_checks(checks: Iterable[Mapping[str, Any]] | None, limit: int = 10) -> list[Mapping[str, Any]]:
    out = [c for c in (checks or []) if isinstance(c, Mapping) and c.get("status") in FAILING]
    return out[:limit]


def cell_title(now: dt.datetime, test: str, cell: Mapping[str, Any] | None) -> str:
    """The hover text of a matrix cell: status, since when, reason, the last attempt if different."""
    if not cell:
        return f"{test}: never attempted on this node"
    lines = []
    if cell.get("status"):
        since = cell.get("status_since")
        shown = actions.status_text(cell["status"], cell.get("incomplete"), cell.get("checks_not_run"))
        lines.append(f"{test}: {shown} since {format_ts(since)}"
                     + (f" ({format_age((now - since).total_seconds())})" if since else "")
                     + (f", before: {cell['previous_status']}" if cell.get("previous_status") else ""))
        if cell.get("finished_at") != since or cell.get("stale"):
            stale = " · STALE" if cell.get("stale") else ""
            lines.append(f"last run {format_ts(cell.get('finished_at'))}{stale}")
        if cell.get("reason") and (cell["status"] != Status.PASS or cell.get("incomplete")):
            lines.append(_clip(cell["reason"], 300))  # a clean pass says "all checks passed": noise
        if cell["status"] != Status.PASS:
            lines.append(f"recommended action: {actions.shown(cell.get('action'))}")
    else:
        lines.append(f"{test}: never executed")
    if cell.get("last_attempt_at") and (cell.get("last_attempt_status") != cell.get("status")):
        why = f": {_clip(cell['last_attempt_reason'], 200)}" if cell.get("last_attempt_reason") else ""
        lines.append(f"last attempt: {cell.get('last_attempt_status')} {format_ts(cell['last_attempt_at'])}{why}")
    return "\n".join(lines)


def node_now(now: dt.datetime, node: Mapping[str, Any], grace_s: float = 0.0) -> tuple[str, str]:
    """A fleet row's "now" column, from the inventory: (short label, hover text). Free, why not (busy,
    cordoned, not ready ...) for how long, or gone since when (counted until the grace period ends)."""
    gone, since = node.get("gone_at"), node.get("eligibility_since")
    if gone is not None:
        until = gone + dt.timedelta(seconds=grace_s)
        return (f"gone {format_age((now - gone).total_seconds())} ago",
                f"left the cluster at {format_ts(gone)}; counted in coverage until {format_ts(until)}")
    state = node.get("eligibility") or "unknown"
    if state == "unknown":
        return "unknown", "known from its results only: no discovery has listed this node yet"
    label = state + (f" for {format_age((now - since).total_seconds())}" if since and state != "free" else "")
    detail = node.get("eligibility_detail") or ""
    return label, (f"{state} since {format_ts(since)}" if since else state) + (f": {_clip(detail, 300)}" if detail else "")


def _clip(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


@dataclasses.dataclass
class _Form:
    nodes: str = ""
    status: str = ""
    gpu_model: str = ""
    per_page: int = fleet.DEFAULT_PER_PAGE
    page: int = 1

    def query(self, **changes: Any) -> str:
        values = {**dataclasses.asdict(self), **changes}
        if values.get("page") == 1:
            values.pop("page")
        if values.get("per_page") == fleet.DEFAULT_PER_PAGE:
            values.pop("per_page")
        return urllib.parse.urlencode({k: v for k, v in values.items() if v not in ("", None)})


def _safe_fleet_query(raw: str | None) -> str:
    """Re-encode a carried fleet query string keeping known keys only (no open redirects, no junk)."""
    if not raw:
        return ""
    pairs = [(k, v) for k, v in urllib.parse.parse_qsl(raw[:4000]) if k in FLEET_QUERY_KEYS]
    return urllib.parse.urlencode(pairs)


# ---------------------------------------------------------------------------------------- dependencies
@dataclasses.dataclass
class Backend:
    """Where the app reads from, handed in by whoever mounts it: the Airflow plugin reads the Variable
    ``cluster_doctor_settings`` and the connection ``validation_db`` on every request (so edits apply
    without restarting the api-server). One metrics collector per app keeps its family cache."""

    connector_provider: ConnectorProvider
    settings_provider: SettingsProvider
    clock: Callable[[], dt.datetime] = fleet.utcnow
    collector: metrics.ClusterDoctorCollector | None = None
    spool_provider: metrics.SpoolProvider | None = None  # the attempt spool's status, for the metrics
    metrics_app: Callable[..., Any] = dataclasses.field(init=False)  # the scrape's WSGI app (reports.metrics)

    def __post_init__(self) -> None:
        if self.collector is None:
            self.collector = metrics.ClusterDoctorCollector(self.connector_provider, self.settings_provider,
                                                            clock=self.clock, spool_provider=self.spool_provider)
        self.metrics_app = metrics.metrics_app(metrics.make_registry(self.collector))

    def load(self) -> tuple[Settings, database.Connector]:
        settings = self.settings_provider()
        return settings, self.connector_provider(settings)


def get_backend(request: Request) -> Backend:
    return request.app.state.backend


def get_now(backend: Backend = Depends(get_backend)) -> dt.datetime:
    return backend.clock()


def failure(exc: Exception) -> tuple[int, str, str]:
    """(HTTP status, title, message) of an expected failure, shown on the page; anything else is a bug."""
    if isinstance(exc, database.DatabaseUnavailable):
        return 503, "Results database unavailable:", str(exc)
    if isinstance(exc, SchemaMissing):
        return 503, "Results schema missing:", str(exc)
    if isinstance(exc, database.InvalidDatabaseUrl):
        return 503, "Results database misconfigured:", str(exc)
    if isinstance(exc, InvalidSettings):
        return 503, "Invalid Cluster Doctor settings:", str(exc)
    raise exc


def html(template: str, context: dict[str, Any], status_code: int = 200) -> HTMLResponse:
    nonce = secrets.token_urlsafe(16)
    body = environment("cluster_doctor.web").get_template(template).render(nonce=nonce, **context)
    response = HTMLResponse(body, status_code=status_code)
    response.headers["Content-Security-Policy"] = (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'self'; base-uri 'none'")
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    return response


def common(request: Request, now: dt.datetime, carry: str = "") -> dict[str, Any]:
    base = app_base(request)

    def node_url(node: str, test: str | None = None) -> str:
        # carry the fleet filters along so the node page links back to the same view
        query = {k: v for k, v in (("test", test), ("q", carry)) if v}
        return f"{base}/nodes/{quote(node)}" + (f"?{urllib.parse.urlencode(query)}" if query else "")

    return {
        "base": base, "now": now, "ts": format_ts, "duration": format_duration,
        "age": format_age, "ago": lambda t: (format_age((now - t).total_seconds()) + " ago") if t else "",
        "pct": text.percent,
        "slo_period": lambda summary: text.slo_period(summary["slo_days_with_data"], len(summary["coverage_trend"])),
        "days": lambda s: f"{s / 86400:g} days",
        "node_url": node_url, "ti_url": lambda row: ti_url(request, row),
        "figures": key_figures, "bad_checks": bad_checks,
        "cell_title": lambda test, cell: cell_title(now, test, cell),
        "status_text": actions.status_text, "action_shown": actions.shown,
        "row_action": lambda row: actions.shown(row.get("action")),
        "error": None, "error_title": "", "standalone": False,
        "coverage_svg": charts.coverage_svg, "inf": math.inf,
        "node_now": lambda node, grace_s=0.0: node_now(now, node, grace_s),
        "node_holder": node_holder, "last_try": lambda cell: last_try(now, cell), "failing_why": failing_why,
        "log_url": log_url,
        "never_why": lambda node: never_why(now, node), "cpu_mode": False,
        "peer_title": lambda v: peer_title(now, v),
    }


def peer_title(now: dt.datetime, verdict: Any) -> str:
    """The hover text of a peer-test verdict: what it says, with whom, when."""
    if verdict is None:
        return "never peer-tested"
    return _clip(f"{verdict.verdict}: {verdict.reason} · latest with {verdict.peer}, "
                 f"{format_age((now - verdict.finished_at).total_seconds())} ago", 400)


def slow_view(now: dt.datetime, found: Mapping[str, Any],
              gpus: Callable[[str], int | None]) -> dict[str, dict[str, Any]]:
    """The slow nodes (``store.fail_slow.SlowNode``) as the pages show them: state, since, evidence, the action
    of a failing one (code SLOW), the estimated cost (``domain.slow_cost``, with the node's GPU count from
    ``gpus``); failing ones first, then in natural order."""
    out = {}
    for name, s in found.items():
        cost = slow_cost.estimate(s.probes, since=s.since, now=now, gpus=gpus(name))
        out[name] = {"node_name": name, "state": s.state.value, "failing": s.failing, "since": s.since,
                     "probes": list(s.probes), "signals": list(s.signals), "line": s.describe(),
                     "cost": cost.describe(), "gpu_hours": cost.gpu_hours,
                     "action": actions.shown(actions.SLOW_ACTION) if s.failing else None}
    return dict(sorted(out.items(), key=lambda kv: (not kv[1]["failing"], fleet.natural_key(kv[0]))))


# The fleet's slow nodes, per database and window: reading them scans every node's last probes (hundreds of
# milliseconds at 5,000 nodes), and they change with a sweep's probe or a signal, hours apart; so a page reuses
# the last read for as long as it reuses a fleet snapshot, on the wall clock and on the page's own clock.
SLOW_CACHE_S = fleet.PAGE_SNAPSHOT_CACHE_S
_SLOW_CACHE: dict[tuple[Any, ...], tuple[float, dt.datetime, dict[str, dict[str, Any]]]] = {}


def fleet_slow(q: fleet.FleetQueries, settings: Settings, now: dt.datetime) -> dict[str, dict[str, Any]]:
    """``slow_view`` of every slow node of the fleet, with each one's GPU count from the inventory."""
    window = slow_window(settings)
    key = (q.conn.info.dsn, window, slow_spacing(settings))
    hit = _SLOW_CACHE.get(key)
    if hit is not None and time.monotonic() - hit[0] <= SLOW_CACHE_S and abs((now - hit[1]).total_seconds()) <= SLOW_CACHE_S:
        return hit[2]
    found = q.slow_nodes(window=window, spacing=slow_spacing(settings))
    known = {}
    if found:
        with q.conn.cursor() as cur:
            known = inventory.read(cur, list(found))
    view = slow_view(now, found, lambda n: known[n].gpu_count if n in known else None)
    if len(_SLOW_CACHE) > 16:  # one results database in practice
        _SLOW_CACHE.clear()
    _SLOW_CACHE[key] = (time.monotonic(), now, view)
    return view


def fleet_nodes_query(slow: Mapping[str, Any]) -> str:
    """The node range of the slow nodes, for the matrix filter (empty when none, or too long for the filter)."""
    names = compress(sorted(slow, key=fleet.natural_key))
    return names if len(names) <= MAX_NODE_RANGE else ""


def node_gpus(node: Mapping[str, Any]) -> int | None:
    """A node's GPU count: as discovery saw it, else as its latest gpu_health attempt recorded it."""
    known = (node.get("inventory") or {}).get("gpu_count")
    if known:
        return int(known)
    counts = [c.get("gpu_count") for c in node.get("cells", ()) if c.get("test_name") == fail_slow.PROBE_TEST]
    return int(counts[0]) if counts and counts[0] else None


def slow_window(settings: Settings) -> dt.timedelta:
    """How far back a speed signal counts (setting slow_signal_window_hours), as status and the metrics read it."""
    return dt.timedelta(hours=settings.slow_signal_window_hours)


def slow_spacing(settings: Settings) -> dt.timedelta:
    """How far apart two sightings must be to fail a node slow (setting slow_confirm_spacing_hours)."""
    return dt.timedelta(hours=settings.slow_confirm_spacing_hours)


def node_plots(fq: fleet.FleetQueries, node: Mapping[str, Any], settings: Settings,
               test: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The node page's plots and the tests without any value to plot. A plot per metric of each of
    the node's tests (or of ``test``) that has a value — the judged metrics, or their CPU-mode
    counterparts (charts.PLOTTED_METRICS) — with the fleet band of its GPU model, on one shared time
    axis."""
    tests = [test] if test else [c["test_name"] for c in node["cells"]]
    series = fq.metric_series(node["node_name"], tests, metrics=charts.PLOTTED_METRICS)
    valued = {key: points for key, points in series.items() if any(p["value"] is not None for p in points)}
    missing = sorted({t for (t, _), points in series.items() if points} - {t for t, _ in valued})  # ran, no value
    if not valued:
        return [], missing
    policy = settings.fleet_verdicts
    bands = fq.fleet_bands(node.get("gpu_model"), [t for t, _ in valued], policy)
    times = [p["at"] for points in valued.values() for p in points]
    start, end = min(times), max([fq.now, *times])
    start = min(start, end - dt.timedelta(days=1))  # a day at least: a single run is not a line
    return [{"test": t, "metric": m, "band": bands.get((t, m)),
             "svg": charts.metric_svg(points, metric=m, chart_id=f"plot-{t}-{m}", band=bands.get((t, m)),
                                      start=start, end=end)}
            for (t, m), points in valued.items()], missing


# ---------------------------------------------------------------------------------------- routes
pages = APIRouter(dependencies=[Depends(require_ui_access)])
scrape = APIRouter()


@pages.get("/", response_class=HTMLResponse)
def fleet_page(
    request: Request,
    nodes: str = Query("", max_length=MAX_NODE_RANGE),
    status: str = Query("", max_length=20),
    gpu_model: str = Query("", max_length=200),
    per_page: int = Query(fleet.DEFAULT_PER_PAGE, ge=1, le=fleet.MAX_PER_PAGE),
    page: int = Query(1, ge=1, le=1_000_000),
    backend: Backend = Depends(get_backend),
    now: dt.datetime = Depends(get_now),
) -> HTMLResponse:
    form = _Form(nodes=nodes.strip(), status=status, gpu_model=gpu_model, per_page=per_page, page=page)
    ctx = common(request, now, carry=form.query())
    ctx.update(form=form, status_filters=fleet.STATUS_FILTERS, gpu_models=[], summary=None, page=None,
               tests=[], filtered=False, peer_tests=False, peers={}, peer_counts={}, suspects={}, failing_since={},
               offenders={}, missing_baselines=[], baseline_action=domain_baselines.ACTION,
               slow={}, slow_counts={"failing": 0, "suspect": 0}, slow_nodes_query="",
               probe_test=fail_slow.PROBE_TEST, slow_action=actions.shown(actions.SLOW_ACTION),
               fleet_url=lambda **kw: f"{ctx['base']}/?{form.query(**{'page': 1, **kw})}")
    code = 200
    try:
        flt = fleet.FleetFilter(node_range=parse_node_range(form.nodes) if form.nodes else None,
                                status=form.status or None, gpu_model=form.gpu_model or None)
    except (InvalidNodeRange, fleet.InvalidFilter) as exc:
        ctx.update(error=str(exc), error_title="Invalid filter:")
        flt, code = None, 400
    try:
        settings, connect = backend.load()
        with fleet.open_for(settings, connect, now=now, snapshot_cache_s=fleet.PAGE_SNAPSHOT_CACHE_S) as q:
            ctx.update(summary=q.summary(), gpu_models=q.gpu_models(), tests=q.tests, peer_tests=q.peer_tests,
                       missing_baselines=q.missing_baselines())  # once per node pool, not per node
            if q.peer_tests:  # the peer-test verdict of every peer-tested node
                ctx.update(peers=q.peer_verdicts(), peer_counts=q.peer_counts())
            # the slow nodes of the whole fleet (a few at most): they pass their floors, so no status shows them
            slow = fleet_slow(q, settings, now)
            names = fleet_nodes_query(slow)
            ctx.update(slow=slow, slow_nodes_query=names,
                       slow_counts={"failing": sum(s["failing"] for s in slow.values()),
                                    "suspect": sum(not s["failing"] for s in slow.values())})
            if flt is not None:
                page_ = q.nodes_page(flt, page=form.page, per_page=form.per_page)
                ctx.update(page=page_, filtered=flt.active, suspects=q.suspects(),  # since when
                           failing_since=q.failing_since([n["node_name"] for n in page_.nodes]))
                form.page = page_.page
            with q.conn.cursor() as cur:  # repeat offenders, action replace
                ctx.update(offenders=transitions.repeat_offenders(cur))
    except Exception as exc:  # noqa: BLE001 - failure() re-raises anything unexpected
        code, title, text = failure(exc)
        ctx.update(error=text, error_title=title)
    return html("fleet.html", ctx, code)


@pages.get("/nodes/{node_name}", response_class=HTMLResponse)
def node_page(
    request: Request,
    node_name: str,
    test: str = Query("", max_length=63),
    limit: int = Query(50, ge=1, le=fleet.MAX_HISTORY),
    q: str = Query("", max_length=4000),
    backend: Backend = Depends(get_backend),
    now: dt.datetime = Depends(get_now),
) -> HTMLResponse:
    try:
        validate_node_name(node_name)
    except InvalidNodeName as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None
    try:
        if test:
            validate_test_name(test)
    except ValueError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None
    carried = _safe_fleet_query(q)
    ctx = common(request, now, carry=carried)
    ctx.update(node_name=node_name, node=None, history=[], test=test or None, plots=[], plots_missing=[], peer=None,
               suspect=None, failing_since=None, timeline=[], offender=None, slow=None,
               probe_test=fail_slow.PROBE_TEST,
               back_url=f"{ctx['base']}/" + (f"?{carried}" if carried else ""))
    code = 200
    try:
        settings, connect = backend.load()
        cpu_mode = settings.suite_device == "cpu"
        ctx.update(cpu_mode=cpu_mode, figures=lambda t, values: key_figures(t, values, cpu_mode))
        with fleet.open_for(settings, connect, now=now) as fq:
            node = fq.node(node_name)
            if node is not None:
                plots, missing = node_plots(fq, node, settings, test or None)
                history = fq.history(node_name, test or None, limit=limit)
                ctx.update(row_action=row_action(node, history))
                ctx.update(node=node, history=history, plots=plots,
                           plots_missing=missing, peer=fq.peer_verdicts().get(node_name),
                           suspect=fq.suspects([node_name]).get(node_name),
                           failing_since=fq.failing_since([node_name]).get(node_name))
                ctx.update(slow=slow_view(now, fq.slow_nodes([node_name], window=slow_window(settings),
                                                                spacing=slow_spacing(settings)),
                                          lambda n: node_gpus(node)).get(node_name))
                with fq.conn.cursor() as cur:  # the node's life, and whether it is a repeat offender
                    ctx.update(timeline=transitions.timeline(cur, node_name)[::-1],
                               offender=transitions.repeat_offenders(cur, [node_name]).get(node_name))
    except Exception as exc:  # noqa: BLE001
        code, title, text = failure(exc)
        ctx.update(error=text, error_title=title)
    if code == 200 and ctx["node"] is None:
        code = 404
        ctx.update(error=f"{node_name} has no recorded attempt.", error_title="Unknown node:")
    return html("node.html", ctx, code)


@scrape.get("/metrics", dependencies=[Depends(require_ui_access)])
def metrics_route(request: Request, backend: Backend = Depends(get_backend)) -> Response:
    """The scrape's WSGI app (reports.metrics.metrics_app), for an Airflow user allowed to read the
    results. A plain ``def``: FastAPI runs it in a worker thread, so the SQL and the encoding (tens of
    milliseconds at 5,000 nodes, make bench-metrics) never block the api-server's event loop."""
    status, headers, body = metrics.wsgi_get(backend.metrics_app, accept=request.headers.get("accept"),
                                             accept_encoding=request.headers.get("accept-encoding"),
                                             query=request.url.query)
    return Response(body, status_code=status, headers={**dict(headers), "Cache-Control": "no-store"})


# Every error answer, whoever asks: its type is what it says, never sniffed into HTML by a browser.
ERROR_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}


def json_error(status_code: int, detail: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """The one shape of an API error: ``{"detail": "<one line>"}``; JSON escapes whatever it echoes."""
    return JSONResponse({"detail": " ".join(str(detail).split())[:500]}, status_code=status_code,
                        headers={**(headers or {}), **ERROR_HEADERS})


async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
    wants_html = ("text/html" in request.headers.get("accept", "")
                  and not request.url.path.endswith("/metrics"))
    if exc.status_code == 401 and wants_html:
        return RedirectResponse(login_url(request), status_code=303, headers=ERROR_HEADERS)
    if wants_html and exc.status_code in (403, 404):
        text = markupsafe.escape(str(exc.detail))
        return HTMLResponse(f"<!doctype html><title>{exc.status_code}</title><p>{text}</p>",
                            status_code=exc.status_code, headers=ERROR_HEADERS)
    return json_error(exc.status_code, exc.detail, getattr(exc, "headers", None))


async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
    """A query or path value out of its bounds: 400 naming the parameter, not FastAPI's 422 list."""
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error.get("loc", ())[1:]) or "request"
        problems.append(f"{where}: {error.get('msg', 'invalid')}")
    return json_error(400, "invalid request: " + "; ".join(problems[:5]))


async def unexpected(request: Request, exc: Exception) -> Response:
    """A bug: logged with its traceback by the server; the client gets one line, no internals."""
    return json_error(500, "internal error in Cluster Doctor (see the api-server log)")


# ---------------------------------------------------------------------------------------- the app
def create_app(
    *,
    connector_provider: ConnectorProvider,
    settings_provider: SettingsProvider,
    clock: Callable[[], dt.datetime] = fleet.utcnow,
    spool_provider: metrics.SpoolProvider | None = None,
) -> FastAPI:
    """The app: the page and metrics routers over one Backend. ``settings_provider`` gives the current
    settings, ``connector_provider`` the results database they name, ``spool_provider`` the status of
    the attempt spool they name (for the metrics)."""
    app = FastAPI(title="Cluster Doctor", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.backend = Backend(connector_provider, settings_provider, clock, spool_provider=spool_provider)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(Exception, unexpected)
    app.include_router(pages)
    app.include_router(scrape)
    app.include_router(daily_page.make_router(require=require_ui_access, get_backend=get_backend, get_now=get_now,
                                              ui_base=airflow_base, failure=failure))
    return app
