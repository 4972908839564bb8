"""``cluster-doctor metrics``: the standalone Prometheus exporter of the results database (plain
HTTP, ``/metrics``), for deployments that scrape outside the Airflow api-server: the scrape's WSGI app
(``reports.metrics.metrics_app``: prometheus_client's answers, written from text kept between scrapes)
on the library's threading server, behind the optional scrape token (``reports.metrics.exporter_app``).
include/k8s/monitoring runs it in Kubernetes with a ServiceMonitor and the alert rules."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys
from collections.abc import Sequence
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client.exposition import ThreadingWSGIServer

from cluster_doctor.cli import connection
from cluster_doctor.domain.config import InvalidSettings, Settings
from cluster_doctor.domain.errors import one_line
from cluster_doctor.reports.metrics import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    PREFIX,
    TOKEN_ENV,
    TOKEN_FILE_ENV,
    ClusterDoctorCollector,
    configured_token,
    exporter_app,
    make_registry,
    render,
)
from cluster_doctor.store import database

log = logging.getLogger(__name__)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        pass  # one line per scrape is noise; failures are logged by the collector


def _loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: whatever it resolves to, treat it as reachable


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cluster-doctor metrics",
        description="Prometheus exporter of Cluster Doctor's results database (plain HTTP, /metrics).")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"listen port (default {DEFAULT_PORT})")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"listen address (default {DEFAULT_HOST}: this machine only; use 0.0.0.0 with "
                             f"${TOKEN_ENV} or ${TOKEN_FILE_ENV} so Prometheus in the cluster can reach it)")
    parser.add_argument("--db-url", default=None,
                        help="postgresql://user:pass@host:port/db (default: $AIRFLOW_CONN_VALIDATION_DB, the "
                             "Airflow connection validation_db, else the embedded PostgreSQL in "
                             "~/.cluster_doctor, stopped when the exporter exits)")
    parser.add_argument("--once", action="store_true",
                        help="print one scrape to stdout and exit (1 when the database is down)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Exit codes: 0 ok, 1 database down (--once), 2 bad arguments or settings."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings.load()  # CLUSTER_DOCTOR_* environment: tests, staleness_days
        connect = connection.for_command(args.db_url)
    except (InvalidSettings, database.InvalidDatabaseUrl) as exc:
        print(f"error: {one_line(exc, 300)}", file=sys.stderr)
        return 2
    except database.DatabaseUnavailable as exc:  # only the embedded fallback can fail here
        print(f"error: {one_line(exc, 300)}", file=sys.stderr)
        return 1
    if not _loopback(args.host) and not configured_token():
        # one line, before serving: the results name every node and its faults
        print(f"warning: serving metrics on {args.host} without a token: anyone who can reach port "
              f"{args.port} can read them (set ${TOKEN_ENV} or ${TOKEN_FILE_ENV})", file=sys.stderr)
    from cluster_doctor.airflow import storage  # Airflow itself only for an object store URL

    registry = make_registry(ClusterDoctorCollector(lambda _settings: connect, lambda: settings,
                                                    spool_provider=lambda s: storage.spool(s).status()))
    if args.once:
        body, _ = render(registry)
        sys.stdout.write(body.decode())
        return 0 if f"\n{PREFIX}_up 1.0\n" in "\n" + body.decode() else 1
    try:
        server = make_server(args.host, args.port, exporter_app(registry), server_class=ThreadingWSGIServer,
                             handler_class=_QuietHandler)
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    log.info("serving http://%s:%d/metrics from %s%s", args.host, server.server_port,
             connect, "; bearer token required" if configured_token() else "")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
