"""``cluster-doctor`` (also ``python -m cluster_doctor``): the results database, the fleet status and the plan, from a shell.

Exit codes: 0 success, 1 the database (or cluster) could not be reached or a command failed,
2 bad input (nothing is written). Errors are one line on stderr naming the argument and the
problem, never a traceback wall. Every argument is bounded; text read from the database is printed
without terminal control characters.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cluster_doctor.cli import connection, simulate
from cluster_doctor.domain import results, suites
from cluster_doctor.domain.planning import due
from cluster_doctor.domain.planning import plan as planner
from cluster_doctor.domain.actions import shown as action_shown
from cluster_doctor.domain.actions import status_text
from cluster_doctor.domain.attempts import (
    Attempt,
    InvalidAttempt,
    from_suite_result,
    parse_timestamp,
    validate_test_name,
)
from cluster_doctor.domain.config import InvalidSettings, Settings
from cluster_doctor.domain.coverage import CoverageState
from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.nodes import (
    InvalidNodeName,
    InvalidNodeRange,
    NodeRange,
    parse_node_range,
    shown,
    validate_node_name,
)
from cluster_doctor.domain.payloads import GpuNode, PlannedPair
from cluster_doctor.domain.peers import PEER_SUITE, PeerVerdict, PeerVerdictValue
from cluster_doctor.domain.planning.params import RunParams
from cluster_doctor.domain.status import FAILING, Status
from cluster_doctor.reports.text import age, percent, slo_period, table, to_csv, to_json
from cluster_doctor.store import claims, database, fleet, inventory, migrations, plan_inputs, roles, spool
from cluster_doctor.store import peers as stored_peers
from cluster_doctor.store import suspects as stored_suspects
from cluster_doctor.store import transitions as stored_transitions
from cluster_doctor.store.history import (
    HISTORY_COLUMNS,
    LATEST_COLUMNS,
    MAX_CLOCK_SKEW,
    MAX_HISTORY_LIMIT,
    MAX_ID_TEXT,
    ResultStore,
    SchemaMissing,
    storable_problems,
)

PROG = "cluster-doctor"  # also `python -m cluster_doctor`


MAX_INPUT_BYTES = 64 * 1024 * 1024  # an input file of attempts or node names; far above any real one
MAX_STALENESS_DAYS = 36_500
MAX_PAIRS = 1_000_000
MAX_ERRORS_SHOWN = 5
# C0 and C1 controls, DEL, and the bidirectional overrides that reorder what a terminal shows
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


class UsageError(ValueError):
    pass


class ClusterUnavailable(RuntimeError):
    pass


BAD_INPUT = (UsageError, InvalidAttempt, InvalidNodeRange, InvalidNodeName, InvalidSettings,
             database.InvalidDatabaseUrl, roles.InvalidRole)
# the database refused a value the checks above let through: still the input's fault, and the
# transaction was rolled back, so nothing was written
REFUSED_BY_DATABASE = (database.DataError, database.IntegrityError)
UNAVAILABLE = (database.DatabaseUnavailable, SchemaMissing, migrations.MigrationError, ClusterUnavailable)


class OneLineParser(argparse.ArgumentParser):
    """Errors as one line, ``cluster-doctor history: error: argument --limit: ...``, exit 2."""

    def __init__(self, *args: Any, **kwargs: Any):
        # no abbreviations: `--li` silently meaning `--live` (a cluster call) is a surprise, not a help
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        # argparse's documented override point; the base class would print the whole usage block first
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def clean(value: Any) -> Any:
    """Text for a terminal: control characters (escape sequences, carriage returns, bidi overrides)
    removed, so a stored reason cannot rewrite or hide what the operator sees."""
    return _CONTROL.sub("", value) if isinstance(value, str) else value


def _argument(check: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a check that raises ValueError; argparse names the argument."""
    def convert(text: str) -> Any:
        try:
            return check(text)
        except (ValueError, OverflowError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = check.__name__
    return convert


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    def integer(text: str) -> int:
        if not re.fullmatch(r"[+-]?\d{1,12}", text.strip()):
            raise ValueError(f"expected an integer from {low} to {high}, got {shown(text, 40)}")
        value = int(text)
        if not low <= value <= high:
            raise ValueError(f"must be from {low} to {high}, got {value}")
        return value
    return _argument(integer)


def bounded_float(low: float, high: float) -> Callable[[str], float]:
    def number(text: str) -> float:
        try:
            value = float(text) if len(text) <= 40 else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or not low < value <= high:
            raise ValueError(f"expected a number greater than {low:g} and at most {high:g}, got {shown(text, 40)}")
        return value
    return _argument(number)


def timestamp(field: str, *, future: bool = True) -> Callable[[str], dt.datetime]:
    def when(text: str) -> dt.datetime:
        try:
            value = _timestamp(text, field)
        except InvalidAttempt as exc:  # argparse names the argument itself
            raise ValueError(str(exc).removeprefix(f"{field}: ")) from None
        if not future and value > dt.datetime.now(dt.UTC) + MAX_CLOCK_SKEW:
            raise ValueError(f"{value.isoformat()} is in the future")
        return value
    return _argument(when)


def _timestamp(value: Any, field: str) -> dt.datetime:
    if isinstance(value, str) and len(value) > 64:
        raise InvalidAttempt(f"{field}: not a timestamp: {shown(value, 40)}")
    try:
        return parse_timestamp(value, field)
    except InvalidAttempt:
        raise
    except (ValueError, OverflowError, OSError):  # a number of seconds or a year Python cannot represent
        raise InvalidAttempt(f"{field}: timestamp out of range: {shown(value, 40)}") from None


def _identity_text(field: str) -> Callable[[str], str]:
    def text(value: str) -> str:
        if not value or len(value) > MAX_ID_TEXT or _CONTROL.search(value):
            raise ValueError(f"must be 1 to {MAX_ID_TEXT} printable characters, got {shown(value, 40)}")
        return value
    return _argument(text)


node_name_arg = _argument(validate_node_name)
test_name_arg = _argument(validate_test_name)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db-url", default=argparse.SUPPRESS,
        help="postgresql://user:pass@host:port/db (default: $AIRFLOW_CONN_VALIDATION_DB, the Airflow "
             "connection validation_db, else an embedded PostgreSQL in $CLUSTER_DOCTOR_HOME or "
             "~/.cluster_doctor, running only while a command uses it)")
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0], parents=[common])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    _add_db_parser(sub, common)
    fmt = argparse.ArgumentParser(add_help=False)
    fmt.add_argument("--format", choices=("table", "json", "csv"), default="table")

    st = sub.add_parser("status", help="the fleet: latest result per node and test", parents=[common, fmt])
    st.add_argument("--node-range", default="", help="hostlist/glob expression, e.g. 'gpu-[001-064]'")
    st.add_argument("--test", action="append", default=[], type=test_name_arg, help="only this suite (repeatable)")
    st.add_argument("--status", action="append", default=[], choices=list(Status), help="only this status")
    st.add_argument("--staleness-days", type=bounded_float(0, MAX_STALENESS_DAYS), default=None,
                    help="mark results older than this stale (default: the staleness_days setting)")

    hi = sub.add_parser("history", help="the attempts of one node", parents=[common, fmt])
    hi.add_argument("node", type=node_name_arg)
    hi.add_argument("--test", type=test_name_arg)
    hi.add_argument("--limit", type=bounded_int(1, MAX_HISTORY_LIMIT), default=20,
                    help=f"at most this many attempts, newest first (1 to {MAX_HISTORY_LIMIT})")

    _add_plan_parser(sub, [common, fmt])

    # dispatched in main() to cluster_doctor.cli.metrics_exporter, which owns its options
    sub.add_parser("metrics", help="Prometheus exporter: metrics [--port 9108] [--once] (see metrics --help)")

    rec = sub.add_parser(
        "record", parents=[common], formatter_class=argparse.RawDescriptionHelpFormatter,
        help="record attempts (suite result files or attempt JSON)",
        description="Record attempts. A batch is all or nothing: every attempt is checked first, and if any\n"
                    "is invalid the whole batch is refused (exit 2), each bad one named, nothing written.\n"
                    "An attempt without a run id gets one derived from its content (start time, suite\n"
                    "version and a hash of everything it says): recording the same file again is a\n"
                    "duplicate, two different attempts never share an identity. An identity already\n"
                    "stored with different content is refused the same way.")
    what = rec.add_mutually_exclusive_group(required=True)
    what.add_argument("--result", nargs="+", help="suite result JSON file(s) written by include/suites")
    what.add_argument("--attempts", help="JSON file with an attempt object or a list of them; - for stdin")
    rec.add_argument("--dag-id", default="manual", type=_identity_text("--dag-id"),
                     help="with --result: the dag_id of these attempts (default: manual)")
    rec.add_argument("--run-id", default=None, type=_identity_text("--run-id"),
                     help="with --result: the run id of these attempts (default: derived from each "
                          "attempt's content; attempts given with --attempts carry their own)")
    simulate.add_parser(sub)
    return parser


def _add_db_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    db = sub.add_parser("db", help="results database schema", parents=[common])
    db_sub = db.add_subparsers(dest="db_command", required=True)
    db_sub.add_parser("upgrade", help="create or upgrade the schema (idempotent)", parents=[common])
    db_sub.add_parser("version", help="print the schema version", parents=[common])
    db_sub.add_parser("check", help="verify validation_latest against the history", parents=[common])
    db_sub.add_parser("rebuild-latest", help="recompute validation_latest from the history", parents=[common])
    db_sub.add_parser("claims", help="live run-to-run claims: which DagRun is validating which node now",
                      parents=[common])
    grant = db_sub.add_parser(
        "grant-runtime", parents=[common],
        help="as the database owner: let ROLE read and write rows (SELECT/INSERT/UPDATE/DELETE, sequences), "
             "nothing else; the role Airflow's validation_db connection should log in as")
    grant.add_argument("role", help="an existing role, e.g. cluster_doctor_app")
    replay = db_sub.add_parser(
        "replay", parents=[common],
        help="record the attempts spooled while the database was unreachable (oldest first; idempotent)")
    replay.add_argument("--spool-dir", default=None,
                        help=f"a path or an object store URL (default: ${spool.SPOOL_ENV}, the setting spool_dir, "
                             "else $AIRFLOW_HOME/cluster_doctor/spool, else ~/.cluster_doctor/spool)")


def _add_plan_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    pl = sub.add_parser("plan", help="which pairs the next run would validate", parents=parents)
    src = pl.add_mutually_exclusive_group(required=True)
    src.add_argument("--nodes", help="free nodes as a hostlist expression")
    src.add_argument("--nodes-file", help="file with free node names (one per line, or JSON list); - for stdin")
    src.add_argument("--live", action="store_true", help="discover free GPU nodes from the cluster (kubeconfig)")
    pl.add_argument("--node-range", default="", help="restrict to these nodes")
    pl.add_argument("--tests", default=None, type=_argument(_suite_list),
                    help=f"comma-separated suites among {', '.join(suites.CATALOG)} (default: the enabled ones)")
    pl.add_argument("--max-pairs", type=bounded_int(0, MAX_PAIRS), default=None)
    pl.add_argument("--stale-before", default=None, type=timestamp("--stale-before", future=False),
                    help="ISO timestamp, not in the future: re-validate results older than this")
    pl.add_argument("--now", default=None, type=timestamp("--now"), help=argparse.SUPPRESS)
    pl.add_argument("--kubeconfig", default=None, help="with --live: kubeconfig path (default: $KUBECONFIG)")


def _suite_list(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise ValueError("expected at least one suite name")
    unknown = [n for n in names if n not in suites.CATALOG]
    if unknown:
        raise ValueError(f"unknown suite(s) {', '.join(shown(n, 40) for n in unknown[:5])} "
                         f"(known: {', '.join(suites.CATALOG)})")
    return list(dict.fromkeys(names))


def _store(args: argparse.Namespace) -> ResultStore:
    """The command's results store; its first connection says on stderr which database and why."""
    return ResultStore(connection.for_command(getattr(args, "db_url", None)))


def _read_text(path: str, what: str) -> str:
    """A bounded, UTF-8 input file (or stdin for '-'), with one-line errors naming it."""
    name = "stdin" if path == "-" else shown(path, 60)
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1) if hasattr(sys.stdin, "buffer") else \
                sys.stdin.read(MAX_INPUT_BYTES + 1).encode("utf-8", "surrogatepass")
        else:
            with open(path, "rb") as fh:
                data = fh.read(MAX_INPUT_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"{what} {name}: no such file") from None
    except OSError as exc:  # a directory, no permission
        raise UsageError(f"{what} {name}: cannot read ({exc.strerror or exc.__class__.__name__})") from None
    except ValueError:  # a name the OS refuses (an embedded NUL)
        raise UsageError(f"{what} {name}: not a usable file name") from None
    if len(data) > MAX_INPUT_BYTES:
        raise UsageError(f"{what} {name}: larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} {name}: not UTF-8 text (byte {exc.start})") from None


def _parse_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise UsageError(f"{what}: JSON nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of thousands of digits
        raise UsageError(f"{what}: not usable JSON ({one_line(exc, 120)})") from None


def _read_json_arg(path: str, what: str) -> Any:
    name = "stdin" if path == "-" else shown(path, 60)
    return _parse_json(_read_text(path, what), f"{what} {name}")


def cmd_db(args: argparse.Namespace, out) -> int:
    if args.db_command == "replay":
        from cluster_doctor.airflow import storage  # Airflow itself only for an object store URL

        box = storage.spool(Settings.load()) if args.spool_dir is None else spool.Spool(storage.location(args.spool_dir))
        result = box.replay(_store(args))
        print(result.describe(box.directory), file=out)
        for line in result.rejected[:50]:
            print(f"set aside: {clean(line)}", file=sys.stderr)
        return 1 if result.rejected else 0
    store = _store(args)
    if args.db_command == "grant-runtime":
        with store.connection() as conn:
            count = roles.grant_runtime(conn, args.role)
        print(f"role {args.role} may now read and write the rows of {count} table(s), and of those later "
              "migrations create; it owns nothing and can change no schema", file=out)
        return 0
    if args.db_command == "upgrade":
        print(store.upgrade().describe(), file=out)
    elif args.db_command == "version":
        print(store.schema_version(), file=out)
    elif args.db_command == "rebuild-latest":
        print(f"validation_latest rebuilt: {store.rebuild_latest()} node-test pairs", file=out)
    elif args.db_command == "claims":
        live = claims.live(store.connect)
        stamp = lambda t: t.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")  # noqa: E731
        print(table([[c.node_name, c.test_name, clean(c.dag_id), clean(c.run_id), stamp(c.claimed_at),
                      stamp(c.expires_at)] for c in live],
                    ["NODE", "TEST", "DAG", "RUN", "CLAIMED", "EXPIRES"]), file=out)
        print(f"\n{len(live)} node(s) claimed by live runs", file=out)
    elif args.db_command == "check":
        problems = store.check_latest()
        for line in problems[:50]:
            print(clean(line), file=out)
        future = store.future_attempts()
        for r in future:
            print(f"{r['node_name']} · {r['test_name']}: attempt {r['id']} ({r['status']}) finishes in the future "
                  f"({r['finished_at'].isoformat()}): it hides every later attempt of the pair until then", file=out)
        if problems:
            print(f"{len(problems)} pair(s) differ: run `{PROG} db rebuild-latest`", file=sys.stderr)
        if future:
            print(f"{len(future)} attempt(s) finish in the future: correct or delete them", file=sys.stderr)
        if problems or future:
            return 1
        print("validation_latest matches the history", file=out)
    return 0


def cmd_status(args: argparse.Namespace, out) -> int:
    """Every node · test pair's latest result, then the GPU nodes never attempted (with why, from the
    inventory), then the fleet's coverage as the fleet page, the daily report and the metrics count it
    (``store.fleet`` over the GPU node inventory)."""
    node_range = parse_node_range(args.node_range)
    settings = Settings.load()
    days = args.staleness_days if args.staleness_days is not None else settings.staleness_days
    staleness = dt.timedelta(days=days)
    store = _store(args)
    rows = store.latest(node_range=node_range, tests=args.test or None, statuses=args.status or None)
    now = dt.datetime.now(dt.UTC)
    with fleet.open_fleet(store.connect, tests=settings.tests, staleness=staleness, now=now,
                          application_name="cluster-doctor-cli", gone_grace=inventory.grace(settings),
                          peer_window=fleet.peer_window(settings), **fleet.slow_settings(settings)) as q:
        known = q.inventory()
        summary = q.summary()  # with the coverage SLO of the last 30 days, as the fleet page shows it
        never_pairs = sum(p["state"] == CoverageState.NEVER for p in q.assessment().pairs)  # the daily report's figure
        peer_verdicts = q.peer_verdicts()  # empty while peer tests are off
        suspected, failing = q.suspects(), q.failing_since()  # since when, and why
        slow = q.slow_nodes()  # with its evidence, the settings' window and spacing
        missing_baselines = q.missing_baselines()  # once per node pool, not one error per node
        with q.conn.cursor() as cur:  # repeat offenders, action replace
            offenders = stored_transitions.repeat_offenders(cur)
    # GPU nodes nothing ever ran on (no row at all); not when a status filter asks for results
    attempted = set() if args.status else {r["node_name"] for r in store.latest(node_range=node_range)}
    unattempted = [] if args.status else [
        known[n] for n in sorted(known, key=fleet.natural_key) if n not in attempted and node_range.matches(n)]
    if args.format in ("json", "csv"):
        extra = [{**dict.fromkeys(LATEST_COLUMNS), "node_name": n.node_name, "gpu_model": n.gpu_model,
                  "reason": f"never attempted: {n.describe()}"} for n in unattempted]
        if args.format == "json":
            print(to_json([*rows, *extra]), file=out)  # JSON escapes every control character itself
        else:
            print(to_csv([{k: clean(v) for k, v in r.items()} for r in [*rows, *extra]], LATEST_COLUMNS), end="",
                  file=out)
        return 0
    body = []
    for r in rows:
        status = _status_cell(r)
        verdict = peer_verdicts.get(r["node_name"]) if r["test_name"] == PEER_SUITE else None
        if verdict is not None and verdict.verdict != r["status"]:
            status = f"{verdict.verdict}: {status}"  # a failed peer test not yet blamed: "suspect: fail ..."
        if r["status"] and now - r["finished_at"] > staleness:
            status += " (stale)"
        last = "" if r["last_attempt_at"] == r["finished_at"] and r["last_attempt_status"] == r["status"] else \
            f"{r['last_attempt_status']} {age(r['last_attempt_at'], now)} ago"
        body.append([r["node_name"], r["test_name"], status, age(r["finished_at"], now),
                     age(r["status_since"], now), last,
                     clean(r["reason"] if r["status"] else r["last_attempt_reason"])])
    body += [[n.node_name, "-", "never attempted", "", "", "", clean(n.describe())] for n in unattempted]
    print(table(body, ["NODE", "TEST", "STATUS", "AGE", "SINCE", "LAST ATTEMPT", "REASON"]), file=out)
    counts: dict[str, int] = {}
    for r in rows:
        counts[_status_key(r)] = counts.get(_status_key(r), 0) + 1
    summary_line = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    print(f"\n{len(rows)} node-test pair(s): {summary_line or 'none recorded yet'}"
          + (f"; {len(unattempted)} GPU node(s) never attempted" if unattempted else ""), file=out)
    print(coverage_line(summary, days, never_pairs), file=out)
    print(slo_line(summary, days), file=out)
    for line in since_lines(suspected, failing, node_range, offenders, slow):
        print(line, file=out)
    for m in missing_baselines:
        print(f"configuration: {m.describe()}", file=out)
    if settings.peer_tests:
        print(peer_lines(peer_verdicts, node_range), file=out)
    return 0


def since_lines(suspected: Mapping[str, Any], failing: Mapping[str, Any], node_range: NodeRange,
                offenders: Mapping[str, Any] | None = None, slow: Mapping[str, Any] | None = None) -> list[str]:
    """The suspect nodes ("suspect since T: evidence"), since when each failing node fails (its first
    failing evidence after its last pass), the repeat offenders (since when, why: action replace) and the
    slow nodes (suspect or failing with code SLOW: the probe's verdicts and the speed signals), in the
    range."""
    lines = []
    for what, found in (("suspect", suspected), ("failing", failing), ("repeat offender", offenders or {}),
                        ("slow", slow or {})):
        names = sorted((n for n in found if node_range.matches(n)), key=fleet.natural_key)
        if names:
            lines.append(f"{what}: {len(names)} GPU node(s)")
            lines += [f"  {n}  {clean(found[n].describe())}" for n in names]
    return lines


def peer_lines(verdicts: Mapping[str, PeerVerdict], node_range: NodeRange) -> str:
    """The peer tests' verdicts: counts, then every suspect and blamed node with its peer and why."""
    tested = {n: v for n, v in verdicts.items() if node_range.matches(n)}
    counts = {k: sum(v.verdict == k for v in tested.values()) for k in PeerVerdictValue}
    lines = [f"peer tests: {counts['suspect']} suspect, {counts['fail']} blamed, {counts['pass']} passed "
             f"({len(tested)} node(s) peer-tested)"]
    for name in sorted((n for n, v in tested.items() if v.verdict != PeerVerdictValue.PASS), key=fleet.natural_key):
        v = tested[name]
        lines.append(f"  {name}  {v.verdict}  with {v.peer}: {clean(v.reason)}")
    return "\n".join(lines)


def coverage_line(summary: Mapping[str, Any], days: float, never_pairs: int | None = None) -> str:
    """The fleet's coverage in one line, from ``FleetQueries.summary()``: the figures of the fleet page,
    each with its unit (GPU nodes; node-test pairs of the enabled tests, as the daily report counts them)."""
    nodes = summary["gpu_nodes"]
    share = percent(summary["coverage"], missing="-")
    gone = f"; gone: {summary['gone_nodes']} GPU node(s)" if summary["gone_nodes"] else ""
    pairs = f", {never_pairs} node-test pair(s)" if never_pairs is not None else ""
    return (f"coverage: {summary['covered_nodes']}/{nodes} GPU node(s) fully validated within {days:g} d ({share}); "
            f"never validated: {summary['never_validated_nodes']} GPU node(s){pairs}; "
            f"failing: {summary['failing_nodes']} GPU node(s); "
            f"not eligible now: {summary['not_eligible_nodes']} GPU node(s){gone}")


def slo_line(summary: Mapping[str, Any], days: float) -> str:
    """The coverage SLO as the fleet page's card says it: pairs fresh now, and over the period (only the
    days since the fleet was first seen: the days before have no data, never 0 %)."""
    period = slo_period(summary["slo_days_with_data"], len(summary["coverage_trend"]))
    return (f"coverage SLO: {percent(summary['pair_coverage'], missing='-')} of node-test pairs validated within "
            f"{days:g} d now; {percent(summary['pair_coverage_30d'], missing='-')} {period}")


def _status_cell(row: Mapping[str, Any]) -> str:
    """A result's status as the tables show it: an incomplete pass says how many checks did not run,
    a fail or error its recommended action (unknown for rows recorded before actions were kept)."""
    text = status_text(row.get("status"), row.get("incomplete"), row.get("checks_not_run"))
    if row.get("status") in FAILING:
        text += f" (action: {action_shown(row.get('action'))})"
    return text


def _status_key(row: Mapping[str, Any]) -> str:
    """The status a result is counted under: an incomplete pass apart from the clean ones."""
    return status_text(row.get("status"), row.get("incomplete")) if row.get("status") == Status.PASS else \
        row.get("status") or CoverageState.NEVER


def cmd_history(args: argparse.Namespace, out) -> int:
    rows = _store(args).history(args.node, args.test, limit=args.limit)
    now = dt.datetime.now(dt.UTC)
    if args.format == "json":
        print(to_json(rows), file=out)
    elif args.format == "csv":
        print(to_csv([{k: clean(v) for k, v in r.items()} for r in rows], HISTORY_COLUMNS), end="", file=out)
    else:
        body = [[r["finished_at"].strftime("%Y-%m-%d %H:%M:%SZ"), r["test_name"], _status_cell(r),
                 age(r["finished_at"], now), f"{r['duration_s']:.0f}s" if r["duration_s"] is not None else "",
                 clean(r["reason"]), clean(r["run_id"])] for r in rows]
        print(table(body, ["FINISHED", "TEST", "STATUS", "AGE", "TOOK", "REASON", "RUN"]), file=out)
    return 0


@dataclasses.dataclass(frozen=True)
class _Nodes:
    """The nodes ``plan`` plans from: the free ones (GPUs known with --live), the others with why, and the
    tests a volume problem blocks (--live reads the claims their pods mount, as the DAG's discover does)."""

    free: list[GpuNode]
    ineligible: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    blocked_tests: list[str] = dataclasses.field(default_factory=list)
    problem: str | None = None


def _plan_nodes(args: argparse.Namespace, settings: Settings, run: RunParams) -> _Nodes:
    if args.live:
        return _live_nodes(args.kubeconfig, settings, run)
    if args.nodes is not None:
        names = parse_node_range(args.nodes).expand()
    else:
        names = _nodes_file(args.nodes_file)
    return _Nodes(free=[GpuNode(name=n, gpu_count=0) for n in run.node_range.filter(names)])


def _live_nodes(kubeconfig: str | None, settings: Settings, run: RunParams) -> _Nodes:
    """Discovery and the volume check of the DAG's discover task, read-only, through a kubeconfig."""
    import yaml
    from kubernetes import config
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from cluster_doctor.kube import discovery, retry, volumes  # need the kubernetes client and a kubeconfig

    try:
        api_client = config.new_client_from_config(config_file=kubeconfig)
    except (config.ConfigException, yaml.YAMLError, OSError, TypeError, ValueError, AttributeError) as exc:
        # the client's loader fails in many ways on a file that is not a kubeconfig
        raise UsageError(f"--kubeconfig: not a usable kubeconfig ({one_line(exc, 200)})") from None
    try:
        core_v1 = retry.core_v1(api_client)
        found = discovery.discover(core_v1, settings, run.node_range)
        mounts = volumes.check(core_v1, settings, run.tests)
    except (ApiException, HTTPError, OSError) as exc:
        raise ClusterUnavailable(f"cannot list the cluster's nodes: {database.one_line_cause(exc)[:300]}") from None
    return _Nodes(free=[GpuNode(name=n.name, gpu_count=n.gpu_count, gpu_model=n.gpu_model) for n in found.free],
                  ineligible=[(n.name, n.reason) for n in found.ineligible if n.reason != discovery.INVALID_NAME],
                  blocked_tests=list(mounts.blocked_tests), problem=mounts.problem)


def _nodes_file(path: str) -> list[str]:
    what = "--nodes-file"
    data = _read_text(path, what)
    if data.lstrip().startswith("["):
        names = _parse_json(data, what)
        if not isinstance(names, list):
            raise UsageError(f"{what}: expected a JSON list or one node name per line")
    else:
        names = data.split()
    try:
        return [validate_node_name(n) for n in names]
    except InvalidNodeName as exc:
        raise UsageError(f"{what}: {exc}") from None


# What `plan --format json|csv` prints of a planned pair: the pair and what the store knew of it (the
# GPUs its pod asks for are the DAG's business).
PLAN_FIELDS = ("node_name", "test_name", "why", "last_status", "last_finished_at", "last_attempt_at",
               "last_attempt_status")


def _plan_row(pair: PlannedPair) -> dict[str, Any]:
    return pair.model_dump(mode="json", include=set(PLAN_FIELDS))


def cmd_plan(args: argparse.Namespace, out) -> int:
    """What the next run would plan, by the DAG's planner (``domain.planning.plan``): the same bundles in the
    same order (bundle_ahead_hours, suspect pairs marked from the results DB, reserved nodes first when
    reservation is on, the tests a volume problem blocks left out, the health sweep after the due bundles,
    max_pairs). Planning only: nothing is claimed, nothing written."""
    settings = Settings.load()
    now = args.now or dt.datetime.now(dt.UTC)
    run = RunParams(node_range=parse_node_range(args.node_range), tests=args.tests or list(settings.tests),
                    stale_before=args.stale_before, dry_run=False,
                    max_pairs=settings.max_pairs_per_run if args.max_pairs is None else args.max_pairs)
    nodes = _plan_nodes(args, settings, run)
    store = _store(args)
    latest = plan_inputs.latest(store, [n.name for n in nodes.free], run.tests)
    reserving = settings.reservation.enabled
    with store.connection() as conn, conn.cursor() as cur:  # suspects first, as prioritize plans
        suspected = stored_suspects.current(cur, settings.tests, [n.name for n in nodes.free])
    given = planner.PlanInput(
        settings=settings, run=run, free=nodes.free, states=planner.pair_states(latest), ineligible=nodes.ineligible,
        suspects={n: s.describe() for n, s in suspected.items()},
        reserved=plan_inputs.reserved(store.connect) if reserving else (), blocked_tests=nodes.blocked_tests,
        blocked_problem=nodes.problem, without_hcas=planner.models_without_hcas(settings),
        peer_due=_peer_due(store, settings, [n.name for n in nodes.free], now))
    planned = planner.plan(given, now=now)
    pairs = planned.pairs
    notes = [f"not planned: {', '.join(planned.blocked)} ({nodes.problem})"] if planned.blocked else []
    if args.format == "json":
        print(json.dumps([_plan_row(p) for p in pairs], indent=2), file=out)
    elif args.format == "csv":
        print(to_csv([_plan_row(p) for p in pairs], ["node_name", "test_name", "why", "last_status",
                                                   "last_finished_at"]), end="", file=out)
    else:
        body = [[i + 1, p.node_name, p.test_name, p.why, p.last_status or "-", age(p.last_finished_at, now)]
                for i, p in enumerate(pairs)]
        print(table(body, ["#", "NODE", "TEST", "WHY", "LAST", "AGE"]), file=out)
        print(f"\n{len(pairs)} pair(s) planned from {len(nodes.free)} free node(s)"
              + (f" on {len(planned.bundles)} node(s), each node's suites one after another" if pairs else ""),
              file=out)
    if planned.sweeps:
        notes.append(f"health sweep (why: {due.SWEEP}): {len(planned.sweeps)} free node(s) with no due suite "
                     f"whose last health check is older than {settings.sweep_interval_hours:g} h, after the due "
                     "bundles (setting sweep_interval_hours)")
    if planned.suspects:
        notes += [f"{n} {suspected[n].describe()}: its whole bundle first" for n in planned.suspects]
    if planned.plan.reserved:
        notes.append(f"reserved for validation, planned first: {', '.join(planned.plan.reserved)}")
    if planned.plan.why_empty:
        notes.append(planned.plan.why_empty)
    for line in notes:  # beside JSON and CSV, on stderr: their output stays the plan alone
        print(clean(line), file=out if args.format == "table" else sys.stderr)
    return 0


def _peer_due(store: ResultStore, settings: Settings, free: list[str], now: dt.datetime) -> frozenset[str]:
    """The free nodes whose peer test is due (setting peer_tests): the health sweep leaves them to the peer
    tests, as the DAG's prioritize task does."""
    if not settings.peer_tests:
        return frozenset()
    with store.connection() as conn:
        history = stored_peers.peer_results(conn, since=stored_peers.evidence_since(settings, now), nodes=free)
    return planner.peer_due(free, history, settings, now)


def _bounded_timestamps(data: Any) -> Any:
    """Timestamps checked before Attempt sees them, so an out-of-range one is named, not a crash."""
    if isinstance(data, Mapping):
        data = dict(data)
        for field in ("started_at", "finished_at"):
            if data.get(field) is not None:
                data[field] = _timestamp(data[field], field)
    return data


def _collect(items: Sequence[tuple[str, Callable[[], Attempt]]], raw: Sequence[Any] = ()) -> list[Attempt]:
    """Every item converted, or UsageError naming each bad one (the batch is all or nothing). A
    number nobody can judge in the input (``raw``, as parsed: NaN, Infinity, 1e400, a duration past a
    week) is an error naming it, never an empty cell in what gets recorded."""
    attempts, errors = [], []
    now = dt.datetime.now(dt.UTC)
    for i, (label, make) in enumerate(items):
        try:
            bad = results.number_problems(raw[i]) if i < len(raw) else []
            if bad:
                raise InvalidAttempt("; ".join(bad[:3]) + (f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""))
            attempt = make()
            problems = storable_problems(attempt, now)
            if problems:
                raise InvalidAttempt("; ".join(problems))
            attempts.append(attempt)
        except (InvalidAttempt, InvalidNodeName, ValueError, TypeError, OverflowError) as exc:
            errors.append(f"{label}: {one_line(exc, 300)}")
    if errors:
        more = f" (and {len(errors) - MAX_ERRORS_SHOWN} more)" if len(errors) > MAX_ERRORS_SHOWN else ""
        raise UsageError(f"{len(errors)} of {len(items)} attempt(s) invalid, nothing recorded: "
                         f"{' | '.join(errors[:MAX_ERRORS_SHOWN])}{more}")
    return attempts


def cmd_record(args: argparse.Namespace, out) -> int:
    identity = {"dag_id": args.dag_id, "run_id": args.run_id}
    if args.result:
        items, rows = [], []
        for path in args.result:
            data = _read_json_arg(path, "--result")
            rows.append(data)
            items.append((shown(path, 60), lambda data=data: from_suite_result(_bounded_timestamps(data), **identity)))
    else:
        data = _read_json_arg(args.attempts, "--attempts")
        rows = data if isinstance(data, list) else [data]
        items = [(f"attempt #{i + 1}", lambda item=item: Attempt.from_dict(_bounded_timestamps(item)))
                 for i, item in enumerate(rows)]
    attempts = _collect(items, rows)
    result = _store(args).record(attempts, refuse_conflicts=True)
    print(f"recorded {result.inserted} attempt(s); {result.duplicates} already present", file=out)
    return 0


COMMANDS = {"db": cmd_db, "status": cmd_status, "history": cmd_history, "plan": cmd_plan, "record": cmd_record,
            "simulate": simulate.cmd}


def _error(exc: BaseException) -> str:
    return f"cluster-doctor: error: {clean(' '.join(str(exc).split())) or exc.__class__.__name__}"


def main(argv: Sequence[str] | None = None, out=None) -> int:
    out = out or sys.stdout
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["metrics"]:
        from cluster_doctor.cli import metrics_exporter

        return metrics_exporter.main(argv[1:])
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error already printed as one line (2)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return COMMANDS[args.command](args, out)
    except BAD_INPUT as exc:
        print(_error(exc), file=sys.stderr)
        return 2
    except REFUSED_BY_DATABASE as exc:
        print(f"cluster-doctor: error: the results database refused the input, nothing was written: "
              f"{clean(database.one_line_cause(exc))[:300]}", file=sys.stderr)
        return 2
    except UNAVAILABLE as exc:
        print(_error(exc), file=sys.stderr)
        return 1
    except database.Error as exc:
        print(f"cluster-doctor: error: database error: {clean(database.one_line_cause(exc))[:300]}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
