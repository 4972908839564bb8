"""``python -m cluster_doctor``: the results database, the fleet status and the plan, from a shell.

Exit codes: 0 success, 1 the database (or cluster) could not be reached or a command failed,
2 bad input. Errors are one line on stderr, never a traceback wall.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

from cluster_doctor import database, migrations, priority
from cluster_doctor.attempts import STATUSES, Attempt, InvalidAttempt, from_suite_result, parse_timestamp
from cluster_doctor.config import InvalidSettings, Settings
from cluster_doctor.nodes import InvalidNodeName, InvalidNodeRange, parse_node_range, validate_node_name
from cluster_doctor.report_format import age, table, to_csv, to_json
from cluster_doctor.store import LATEST_COLUMNS, HISTORY_COLUMNS, ResultStore, SchemaMissing

PROG = "python -m cluster_doctor"


class UsageError(ValueError):
    pass


BAD_INPUT = (UsageError, InvalidAttempt, InvalidNodeRange, InvalidNodeName, InvalidSettings,
             database.InvalidDatabaseUrl, json.JSONDecodeError)
UNAVAILABLE = (database.DatabaseUnavailable, SchemaMissing, migrations.MigrationError)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db-url", default=argparse.SUPPRESS,
        help="postgresql://user:pass@host:port/db (default: $AIRFLOW_CONN_VALIDATION_DB, else an "
             "embedded PostgreSQL in $CLUSTER_DOCTOR_HOME or ~/.cluster_doctor)")
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0], parents=[common])
    sub = parser.add_subparsers(dest="command", required=True)

    db = sub.add_parser("db", help="results database schema", parents=[common])
    db_sub = db.add_subparsers(dest="db_command", required=True)
    db_sub.add_parser("upgrade", help="create or upgrade the schema (idempotent)", parents=[common])
    db_sub.add_parser("version", help="print the schema version", parents=[common])
    db_sub.add_parser("check", help="verify validation_latest against the history", parents=[common])
    db_sub.add_parser("rebuild-latest", help="recompute validation_latest from the history", parents=[common])

    fmt = argparse.ArgumentParser(add_help=False)
    fmt.add_argument("--format", choices=("table", "json", "csv"), default="table")

    st = sub.add_parser("status", help="the fleet: latest result per node and test", parents=[common, fmt])
    st.add_argument("--node-range", default="", help="hostlist/glob expression, e.g. 'gpu-[001-064]'")
    st.add_argument("--test", action="append", default=[], help="only this suite (repeatable)")
    st.add_argument("--status", action="append", default=[], choices=STATUSES, help="only this status")
    st.add_argument("--staleness-days", type=float, default=None, help="mark results older than this stale")

    hi = sub.add_parser("history", help="the attempts of one node", parents=[common, fmt])
    hi.add_argument("node")
    hi.add_argument("--test")
    hi.add_argument("--limit", type=int, default=20)

    pl = sub.add_parser("plan", help="which pairs the next run would validate", parents=[common, fmt])
    src = pl.add_mutually_exclusive_group(required=True)
    src.add_argument("--nodes", help="free nodes as a hostlist expression")
    src.add_argument("--nodes-file", help="file with free node names (one per line, or JSON list); - for stdin")
    src.add_argument("--live", action="store_true", help="discover free GPU nodes from the cluster (kubeconfig)")
    pl.add_argument("--node-range", default="", help="restrict to these nodes")
    pl.add_argument("--tests", default=None, help="comma-separated suites (default: the enabled ones)")
    pl.add_argument("--max-pairs", type=int, default=None)
    pl.add_argument("--stale-before", default=None, help="ISO timestamp: re-validate results older than this")
    pl.add_argument("--now", default=None, help=argparse.SUPPRESS)
    pl.add_argument("--kubeconfig", default=None, help="with --live: kubeconfig path (default: $KUBECONFIG)")

    # dispatched in main() to cluster_doctor.metrics, which owns its options
    sub.add_parser("metrics", help="Prometheus exporter: metrics [--port 9108] [--once] (see metrics --help)")

    rec = sub.add_parser("record", help="record attempts (suite result files or attempt JSON)", parents=[common])
    what = rec.add_mutually_exclusive_group(required=True)
    what.add_argument("--result", nargs="+", help="suite result JSON file(s) written by include/suites")
    what.add_argument("--attempts", help="JSON file with an attempt object or a list of them; - for stdin")
    rec.add_argument("--dag-id", default="manual", help="identity of these attempts (default: manual)")
    rec.add_argument("--run-id", default=None, help="default: the result file's name")
    return parser


def _store(args: argparse.Namespace) -> ResultStore:
    dsn, source = database.resolve_cli_dsn(getattr(args, "db_url", None))
    if source.startswith("embedded"):
        print(f"cluster-doctor: using the {source}", file=sys.stderr)
    return ResultStore(dsn)


def _read_json_arg(path: str) -> Any:
    text = sys.stdin.read() if path == "-" else pathlib.Path(path).read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def cmd_db(args: argparse.Namespace, out) -> int:
    store = _store(args)
    if args.db_command == "upgrade":
        print(store.upgrade().describe(), file=out)
    elif args.db_command == "version":
        print(store.schema_version(), file=out)
    elif args.db_command == "rebuild-latest":
        print(f"validation_latest rebuilt: {store.rebuild_latest()} node-test pairs", file=out)
    elif args.db_command == "check":
        problems = store.check_latest()
        for line in problems[:50]:
            print(line, file=out)
        if problems:
            print(f"{len(problems)} pair(s) differ: run `{PROG} db rebuild-latest`", file=sys.stderr)
            return 1
        print("validation_latest matches the history", file=out)
    return 0


def cmd_status(args: argparse.Namespace, out) -> int:
    node_range = parse_node_range(args.node_range)
    settings = Settings.load()
    staleness = dt.timedelta(days=args.staleness_days or settings.staleness_days)
    rows = _store(args).latest(node_range=node_range, tests=args.test or None, statuses=args.status or None)
    now = dt.datetime.now(dt.UTC)
    if args.format == "json":
        print(to_json(rows), file=out)
    elif args.format == "csv":
        print(to_csv(rows, LATEST_COLUMNS), end="", file=out)
    else:
        body = []
        for r in rows:
            status = r["status"] or "never"
            if r["status"] and now - r["finished_at"] > staleness:
                status += " (stale)"
            last = "" if r["last_attempt_at"] == r["finished_at"] and r["last_attempt_status"] == r["status"] else \
                f"{r['last_attempt_status']} {age(r['last_attempt_at'], now)} ago"
            body.append([r["node_name"], r["test_name"], status, age(r["finished_at"], now),
                         age(r["status_since"], now), last,
                         r["reason"] if r["status"] else r["last_attempt_reason"]])
        print(table(body, ["NODE", "TEST", "STATUS", "AGE", "SINCE", "LAST ATTEMPT", "REASON"]), file=out)
        counts: dict[str, int] = {}
        for r in rows:
            counts[r["status"] or "never"] = counts.get(r["status"] or "never", 0) + 1
        summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        print(f"\n{len(rows)} node-test pair(s): {summary or 'none recorded yet'}", file=out)
    return 0


def cmd_history(args: argparse.Namespace, out) -> int:
    validate_node_name(args.node)
    rows = _store(args).history(args.node, args.test, limit=args.limit)
    now = dt.datetime.now(dt.UTC)
    if args.format == "json":
        print(to_json(rows), file=out)
    elif args.format == "csv":
        print(to_csv(rows, HISTORY_COLUMNS), end="", file=out)
    else:
        body = [[r["finished_at"].strftime("%Y-%m-%d %H:%M:%SZ"), r["test_name"], r["status"],
                 age(r["finished_at"], now), f"{r['duration_s']:.0f}s" if r["duration_s"] is not None else "",
                 r["reason"], r["run_id"]] for r in rows]
        print(table(body, ["FINISHED", "TEST", "STATUS", "AGE", "TOOK", "REASON", "RUN"]), file=out)
    return 0


def _free_nodes(args: argparse.Namespace) -> list[str]:
    if args.nodes is not None:
        return parse_node_range(args.nodes).expand()
    if args.live:
        from cluster_doctor import discovery  # needs the kubernetes client and a kubeconfig

        return [n.name for n in discovery.discover_from_kubeconfig(args.kubeconfig, Settings.load()).free]
    data = sys.stdin.read() if args.nodes_file == "-" else pathlib.Path(args.nodes_file).read_text()
    names = json.loads(data) if data.lstrip().startswith("[") else data.split()
    if not isinstance(names, list):
        raise UsageError(f"{args.nodes_file}: expected a JSON list or one node name per line")
    return [validate_node_name(n) for n in names]


def cmd_plan(args: argparse.Namespace, out) -> int:
    settings = Settings.load()
    node_range = parse_node_range(args.node_range)
    tests = [t.strip() for t in args.tests.split(",")] if args.tests else list(settings.tests)
    if args.max_pairs is not None and args.max_pairs < 0:
        raise UsageError(f"--max-pairs must be >= 0, got {args.max_pairs}")
    stale_before = parse_timestamp(args.stale_before, "--stale-before") if args.stale_before else None
    now = parse_timestamp(args.now, "--now") if args.now else dt.datetime.now(dt.UTC)
    free = node_range.filter(_free_nodes(args))
    states = _store(args).pair_states(free, tests)
    policy = priority.Policy(
        staleness=dt.timedelta(days=settings.staleness_days),
        failed_retest=dt.timedelta(hours=settings.failed_retest_hours),
        max_pairs=settings.max_pairs_per_run if args.max_pairs is None else args.max_pairs,
        stale_before=stale_before,
    )
    pairs = priority.plan(free, tests, states, now=now, policy=policy)
    if args.format == "json":
        print(json.dumps([p.to_dict() for p in pairs], indent=2), file=out)
    elif args.format == "csv":
        print(to_csv([p.to_dict() for p in pairs], ["node_name", "test_name", "why", "last_status",
                                                   "last_finished_at"]), end="", file=out)
    else:
        body = [[i + 1, p.node_name, p.test_name, p.why, p.last_status or "-", age(p.last_finished_at, now)]
                for i, p in enumerate(pairs)]
        print(table(body, ["#", "NODE", "TEST", "WHY", "LAST", "AGE"]), file=out)
        print(f"\n{len(pairs)} pair(s) planned from {len(free)} free node(s)", file=out)
    return 0


def cmd_record(args: argparse.Namespace, out) -> int:
    attempts: list[Attempt] = []
    if args.result:
        for path in args.result:
            data = _read_json_arg(path)
            run_id = args.run_id or pathlib.Path(path).stem
            try:
                attempts.append(from_suite_result(data, dag_id=args.dag_id, run_id=run_id))
            except InvalidAttempt as exc:
                raise InvalidAttempt(f"{path}: {exc}") from None
    else:
        data = _read_json_arg(args.attempts)
        items = data if isinstance(data, list) else [data]
        for i, item in enumerate(items):
            try:
                attempts.append(Attempt.from_dict(item))
            except InvalidAttempt as exc:
                raise InvalidAttempt(f"attempt #{i + 1}: {exc}") from None
    result = _store(args).record(attempts)
    print(f"recorded {result.inserted} attempt(s); {result.duplicates} already present", file=out)
    return 0


COMMANDS = {"db": cmd_db, "status": cmd_status, "history": cmd_history, "plan": cmd_plan, "record": cmd_record}


def main(argv: Sequence[str] | None = None, out=None) -> int:
    out = out or sys.stdout
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["metrics"]:
        from cluster_doctor import metrics

        return metrics.main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args, out)
    except BAD_INPUT as exc:
        print(f"cluster-doctor: error: {exc}", file=sys.stderr)
        return 2
    except UNAVAILABLE as exc:
        print(f"cluster-doctor: error: {exc}", file=sys.stderr)
        return 1
    except FileNotFoundError as exc:
        print(f"cluster-doctor: error: {exc.filename}: no such file", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
